/* The clkv command-line tool: command dispatch, usage and version. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void usage_main(FILE *f) {
    fprintf(
        f, "usage: clkv <command> [options]\n"
           "\n"
           "commands:\n"
           "  devices                      list OpenCL platforms and devices, mark the default\n"
           "  bench attention-decode ...   time decode attention against the device's\n"
           "                               streaming-read bandwidth\n"
           "  demo [--device SEL]          run the library's main job on a synthetic long\n"
           "                               context and check it against a CPU reference\n"
           "  version                      print the library version\n"
           "\n"
           "clkv <command> --help describes a command. Device selection: --device SEL or\n"
           "$CLKV_DEVICE, SEL = \"P:D\" (see clkv devices), \"gpu\", \"cpu\" or a name substring.\n"
           "Exit status: 0 success, 1 failure (a clkv call or a check failed), 2 usage error.\n");
}

static int cmd_version(int argc, char **argv) {
    if (argc > 1) {
        if (opt_is_help(argv[1])) {
            printf("usage: clkv version\n");
            return TOOL_EXIT_OK;
        }
        fprintf(stderr, "clkv version: unknown argument '%s'\n", argv[1]);
        return TOOL_EXIT_USAGE;
    }
    printf("clkv %s (headers %d.%d.%d)\n", clkv_version_string(), CLKV_VERSION_MAJOR,
           CLKV_VERSION_MINOR, CLKV_VERSION_PATCH);
    return TOOL_EXIT_OK;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage_main(stderr);
        return TOOL_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (opt_is_help(cmd) || strcmp(cmd, "help") == 0) {
        usage_main(stdout);
        return TOOL_EXIT_OK;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        return cmd_version(argc - 1, argv + 1);
    }
    if (strcmp(cmd, "devices") == 0) {
        return cmd_devices(argc - 1, argv + 1);
    }
    if (strcmp(cmd, "bench") == 0) {
        return cmd_bench(argc - 1, argv + 1);
    }
    if (strcmp(cmd, "demo") == 0) {
        return cmd_demo(argc - 1, argv + 1);
    }
    fprintf(stderr, "clkv: unknown command '%s'\n\n", cmd);
    usage_main(stderr);
    return TOOL_EXIT_USAGE;
}
