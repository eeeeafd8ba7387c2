// Placeholder until the kernels land: registers nothing, so every tensor takes the stock path.
#include "assistant-kernels.h"

ggml_backend_buffer_type_t ggml_backend_cpu_assistant_buffer_type(void) { return nullptr; }

const char * assistant_kernels_describe(void) { return "mxfp4=stock bf16=stock"; }
