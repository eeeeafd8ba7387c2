// Attention over an f16 KV cache (ggml's FLASH_ATTN_EXT) whose result for one query does not depend on how
// many queries are computed with it. Plain C API with no ggml dependency, so tests compile and call it
// directly.
//
// Why our own: a model that decodes one token a step and verifies a draft of several in one batch must get
// the same bits for a token either way, or speculative decoding is not exactly the target's output. Stock
// CPU attention handles one lone query differently (its key range split over the threads) from a batch,
// and a large batch differently again (tiles). Here every (query, head) row is computed by one thread, over
// the cells in order, with the same arithmetic whichever other rows share its pass over the cache; rows of
// the same KV head are computed together so that they read each key and value once.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// One attention: queries [n_query x n_head] of dk floats; keys and values [n_kv x n_head_kv] of f16 (query
// head h reads KV head h / (n_head / n_head_kv)); an optional f16 mask per query (and per head plane, head h
// reading plane h % mask_planes), added after the scale; optional per-head sink logits (scores with no value).
// Strides are in bytes. The result row of (query i, head h) is dv floats at out + i*out_query_stride +
// h*out_head_stride.
typedef struct {
    int64_t dk, dv, n_kv, n_query, n_head, n_head_kv;
    const float *    q;
    size_t           q_query_stride, q_head_stride;
    const uint16_t * k;
    size_t           k_cell_stride, k_head_stride;
    const uint16_t * v;
    size_t           v_cell_stride, v_head_stride;
    const uint16_t * mask;  // may be NULL
    size_t           mask_query_stride, mask_plane_stride;
    int64_t          mask_planes;
    const float *    sinks;  // may be NULL
    float            scale, max_bias, softcap;
    float *          out;
    size_t           out_query_stride, out_head_stride;
} attention_problem;

// Instruction paths; all three compute the same bits (exactly rounded fma in one fixed order, the exponent
// from the C library), so tests can compare them. Returns the path in use after the call.
enum attention_path {
    ATTENTION_PATH_AUTO   = 0,
    ATTENTION_PATH_SCALAR = 1,
    ATTENTION_PATH_AVX2   = 2,  // with F16C and FMA
    ATTENTION_PATH_AVX512 = 3,
};
int          attention_set_path(int path);
const char * attention_path_name(void);

// Scratch bytes each thread needs.
size_t attention_scratch_bytes(const attention_problem * p);

// Thread ith of nth computes its share of the rows; scratch is its own attention_scratch_bytes() bytes.
void attention_compute(const attention_problem * p, int ith, int nth, void * scratch);

#ifdef __cplusplus
}
#endif
