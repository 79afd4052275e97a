/* Table of the .cl sources embedded at build time (generated kernel_registry.c). */
#ifndef CLKV_RUNTIME_KERNEL_REGISTRY_H
#define CLKV_RUNTIME_KERNEL_REGISTRY_H

#include <stddef.h>

typedef struct clkv_embedded_source {
    const char *name; /* file name in cl_kernels/, e.g. "attention_decode.cl" */
    const unsigned char *data;
    const size_t *size;
} clkv_embedded_source;

extern const clkv_embedded_source clkv_embedded_sources[]; /* ends with a NULL name */

#endif
