// assistant's CPU kernels for llama.cpp: an extra buffer type of ggml-cpu that owns MXFP4 and BF16
// weights and computes MUL_MAT for small batches in one pass over the weights.
#pragma once

#include "ggml-backend.h"

#ifdef __cplusplus
extern "C" {
#endif

// The buffer type to list ahead of the stock REPACK type, or NULL when neither weight type is ours
// (switched to stock by ASSISTANT_MXFP4_KERNEL / ASSISTANT_BF16_KERNEL, read once at start-up, or no fast path).
ggml_backend_buffer_type_t ggml_backend_cpu_assistant_buffer_type(void);

// One line naming each kernel and the instruction path it runs, e.g. "mxfp4=avx2 bf16=avx2"; "stock" for a
// weight type left to llama.cpp (switched off, or no fast path of ours on this CPU). Exported so `assistant doctor` can read it through ctypes.
GGML_BACKEND_API const char * assistant_kernels_describe(void);

#ifdef __cplusplus
}
#endif
