/* Kernel source lookup: the copies embedded at build time, or, for development,
 * the files in $CLKV_KERNEL_DIR. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"
#include "runtime/kernel_registry.h"

static clkv_status read_file(clkv_context *ctx, const char *path, char **text, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return clkv__fail(ctx, CLKV_ERR_KERNEL_SOURCE, "kernel source %s: cannot open", path);
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *grown = realloc(buf, cap);
            if (!grown) {
                free(buf);
                fclose(f);
                return clkv__fail(ctx, CLKV_ERR_OUT_OF_HOST_MEMORY, "kernel source %s: %zu bytes",
                                  path, cap);
            }
            buf = grown;
        }
        size_t got = fread(buf + n, 1, 4096, f);
        n += got;
        if (got < 4096)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return clkv__fail(ctx, CLKV_ERR_KERNEL_SOURCE, "kernel source %s: read error", path);
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return CLKV_OK;
}

clkv_status clkv__kernel_source(clkv_context *ctx, const char *file, char **text, size_t *len) {
    const char *dir = getenv("CLKV_KERNEL_DIR");
    if (dir && *dir) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, file);
        clkv__log(ctx, "kernel source %s from CLKV_KERNEL_DIR", path);
        return read_file(ctx, path, text, len);
    }
    for (const clkv_embedded_source *s = clkv_embedded_sources; s->name; s++) {
        if (strcmp(s->name, file) == 0) {
            size_t n = *s->size;
            char *buf = malloc(n + 1);
            if (!buf)
                return clkv__fail(ctx, CLKV_ERR_OUT_OF_HOST_MEMORY, "kernel source %s", file);
            memcpy(buf, s->data, n);
            buf[n] = '\0';
            *text = buf;
            *len = n;
            return CLKV_OK;
        }
    }
    return clkv__fail(ctx, CLKV_ERR_KERNEL_SOURCE, "kernel source %s is not embedded", file);
}
