/* clkv: LLM KV-cache compression kernels through OpenCL.
 * Umbrella header; see each included header for the documentation of record. */
#ifndef CLKV_H
#define CLKV_H

#define CLKV_VERSION_MAJOR 0
#define CLKV_VERSION_MINOR 1
#define CLKV_VERSION_PATCH 0

#include "clkv/status.h"
#include "clkv/tensor.h"
#include "clkv/context.h"
#include "clkv/attention.h"
#include "clkv/select.h"
#include "clkv/budget.h"
#include "clkv/score.h"
#include "clkv/minikv.h"
#include "clkv/quant.h"
#include "clkv/quant_cache.h"
#include "clkv/pariskv.h"
#include "clkv/longflow.h"
#include "clkv/pariskv_retrieve.h"
#include "clkv/offload.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "0.1.0": the version of the library actually loaded. */
const char *clkv_version_string(void);

#ifdef __cplusplus
}
#endif

#endif /* CLKV_H */
