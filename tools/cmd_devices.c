/* `clkv devices`: every OpenCL platform and device, as clkv sees them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "runtime/internal.h"

#define MAX_DEVICES 64

void usage_devices(FILE *f) {
    fprintf(f, "usage: clkv devices\n"
               "\n"
               "Lists every OpenCL platform and device with what clkv knows about it (from a\n"
               "context created with the selector \"P:D\"), and marks with '*' the device clkv\n"
               "picks by default ($CLKV_DEVICE, else the first GPU, else the first CPU).\n"
               "Use \"P:D\" (or a name substring, \"gpu\", \"cpu\") as --device / CLKV_DEVICE.\n");
}

static const char *kind_name(clkv_device_kind k) {
    switch (k) {
    case CLKV_DEVICE_KIND_CPU:
        return "cpu";
    case CLKV_DEVICE_KIND_GPU:
        return "gpu";
    default:
        return "other";
    }
}

static const char *cl_type_name(cl_device_type t) {
    if (t & CL_DEVICE_TYPE_GPU) {
        return "gpu";
    }
    if (t & CL_DEVICE_TYPE_CPU) {
        return "cpu";
    }
    if (t & CL_DEVICE_TYPE_ACCELERATOR) {
        return "accelerator";
    }
    return "other";
}

static void print_bytes(const char *label, uint64_t b) {
    const double kib = 1024.0, mib = kib * 1024.0, gib = mib * 1024.0;
    if (b >= (uint64_t)gib) {
        printf("    %-22s %.2f GiB (%llu bytes)\n", label, (double)b / gib, (unsigned long long)b);
    } else if (b >= (uint64_t)mib) {
        printf("    %-22s %.2f MiB (%llu bytes)\n", label, (double)b / mib, (unsigned long long)b);
    } else {
        printf("    %-22s %.1f KiB (%llu bytes)\n", label, (double)b / kib, (unsigned long long)b);
    }
}

static void print_info(const clkv_device_info *in) {
    printf("    %-22s %s\n", "platform", in->platform_name);
    printf("    %-22s %s\n", "platform version", in->platform_version);
    printf("    %-22s %s\n", "device", in->device_name);
    printf("    %-22s %s\n", "vendor", in->vendor);
    printf("    %-22s %s\n", "driver version", in->driver_version);
    printf("    %-22s %s\n", "kind", kind_name(in->kind));
    printf("    %-22s %u\n", "compute units", in->compute_units);
    printf("    %-22s %llu\n", "max work-group size", (unsigned long long)in->max_work_group_size);
    print_bytes("local mem (dynamic)", in->local_mem_bytes);
    print_bytes("local mem (static)", in->static_local_mem_bytes);
    print_bytes("max allocation", in->max_alloc_bytes);
    print_bytes("global mem", in->global_mem_bytes);
    printf("    %-22s %u\n", "warp width", in->warp_width);
    printf("    %-22s %s\n", "nvidia ptx", in->nvidia_ptx ? "yes" : "no");
    if (in->compute_capability[0] > 0) {
        printf("    %-22s %d.%d\n", "compute capability", in->compute_capability[0],
               in->compute_capability[1]);
    } else {
        printf("    %-22s -\n", "compute capability");
    }
}

int cmd_devices(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (opt_is_help(argv[i])) {
            usage_devices(stdout);
            return TOOL_EXIT_OK;
        }
        fprintf(stderr, "clkv devices: unknown argument '%s'\n", argv[i]);
        usage_devices(stderr);
        return TOOL_EXIT_USAGE;
    }
    clkv_device_ref refs[MAX_DEVICES];
    int n = clkv__enumerate_devices(refs, MAX_DEVICES);
    if (n <= 0) {
        printf("no OpenCL platform or device found\n");
        return TOOL_EXIT_FAIL;
    }
    if (n > MAX_DEVICES) {
        n = MAX_DEVICES;
    }
    char why[512] = "";
    int def = clkv__select_device(refs, n, NULL, why, sizeof why);
    const char *env = getenv("CLKV_DEVICE");
    printf("%d OpenCL device%s", n, n == 1 ? "" : "s");
    if (env && env[0]) {
        printf(" (CLKV_DEVICE=\"%s\")", env);
    }
    printf("\n");
    if (def < 0) {
        printf("no default device: %s\n", why[0] ? why : "selection failed");
    }
    int failures = 0;
    for (int i = 0; i < n; i++) {
        char sel[32];
        snprintf(sel, sizeof sel, "%d:%d", refs[i].platform_index, refs[i].device_index);
        printf("\n%c [%s] (%s)%s\n", i == def ? '*' : ' ', sel, cl_type_name(refs[i].type),
               i == def ? "  <- default" : "");
        clkv_context *ctx = NULL;
        clkv_status st = clkv_context_create(sel, &ctx);
        if (st != CLKV_OK) {
            const char *msg = clkv_last_error(NULL);
            printf("    context creation failed: %s (%d)%s%s\n", clkv_status_string(st), st,
                   msg && msg[0] ? ": " : "", msg ? msg : "");
            failures++;
            continue;
        }
        print_info(clkv_context_device_info(ctx));
        clkv_context_destroy(ctx);
    }
    (void)failures; /* a device that cannot host a context is reported, not fatal */
    return TOOL_EXIT_OK;
}
