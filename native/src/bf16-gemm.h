// BF16 x BF16 small-batch matrix multiply with f32 accumulation: every column in one pass over the weights.
// Plain C API with no ggml dependency, so tests can compile and call it directly.
//
// Packed layout (same size as the row-major BF16 matrix): rows grouped in tiles of 16; within a tile, for
// each pair of values k, k+1, the 16 rows' pairs side by side (64 bytes), which is one vdpbf16ps operand
// producing 16 row sums at once. A last tile of R < 16 rows uses the same scheme with R rows.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { BF16_TILE_ROWS = 16 };

// Instruction paths; bf16_set_path() lets tests compare them. Returns the path in use after the call.
// The scalar, AVX2, AVX-512 and NEON paths widen bf16 weights to f32 and run the same fma sequence, so they agree
// bit for bit (for N <= 16; prompts, N > 16, take a blocked GEMM with bits of its own). The AVX512-BF16
// path (vdpbf16ps) rounds its pairwise dot products differently. Off AMX, the default on a CPU with it is
// chosen once per process by a start-up measurement of both paths' 16-column verification kernels in L1:
// vdpbf16ps where it issues at full rate (Zen 4), widening plus FMA where it issues at half rate (the Xeons
// we measured). Prompts choose between the two by a measurement of their own.
enum bf16_path {
    BF16_PATH_AUTO        = 0,
    BF16_PATH_SCALAR      = 1,
    BF16_PATH_AVX2        = 2,
    BF16_PATH_AVX512      = 3,
    BF16_PATH_AVX512_BF16 = 4,
    BF16_PATH_AMX         = 5,
    BF16_PATH_NEON        = 6,  // ARM64: widen + FMA, bit-identical to scalar, AVX2 and AVX-512
};
int bf16_set_path(int path);
const char * bf16_path_name(void);

// Repack M rows of K bf16 values (K a multiple of 32) into our layout, and back.
void bf16_pack(const uint16_t * rows, void * packed, int64_t M, int64_t K);
void bf16_unpack(const void * packed, uint16_t * rows, int64_t M, int64_t K);

// Bytes one prepared activation column takes: its K values rounded to bf16 (round to nearest even),
// stored both widened back to f32 (what the FMA paths broadcast) and as bf16 pairs (for vdpbf16ps and
// AMX). Columns are prepared for the path in use: under AMX the f32 copy is not written.
size_t bf16_act_bytes(int64_t K);
void   bf16_convert_act(const float * x, void * act, int64_t K);

// dst[col * dst_stride + row] = sum_k W[row, k] * A[k, col] for rows [row_begin, row_end) and N columns,
// act holding N prepared columns act_stride bytes apart. row_begin is a multiple of 16 and row_end a
// multiple of 16 or M; a column's result does not depend on N or on the split.
void bf16_gemm(const void * packed, int64_t M, int64_t K, const void * act, size_t act_stride, int64_t N,
               float * dst, int64_t dst_stride, int64_t row_begin, int64_t row_end);

// The same product over the weights as a GGUF file holds them (row-major, M rows of K values), so a model can
// run from its file's mapping with no copy of its own. Up to 64 columns on the widening and vdpbf16ps paths,
// each row's values are read as they lie, with bits of their own (batch invariant, and the scalar, AVX2,
// AVX-512 and NEON paths agree bit for bit); longer prompts and AMX pack each tile into a buffer of the
// thread's own just before use, and their bits equal bf16_gemm's on bf16_pack's layout.
void bf16_gemm_rows(const uint16_t * rows, int64_t M, int64_t K, const void * act, size_t act_stride, int64_t N,
                    float * dst, int64_t dst_stride, int64_t row_begin, int64_t row_end);

#ifdef __cplusplus
}
#endif
