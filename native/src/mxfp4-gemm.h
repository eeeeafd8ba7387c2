// MXFP4 x int8 matrix multiply for small batches: weights repacked once, every column in one weight pass.
// Plain C API with no ggml dependency, so tests can compile and call it directly.
//
// Weights arrive as ggml block_mxfp4 rows (per 32 values: one E8M0 exponent byte, then 16 bytes of E2M1
// codes, value j in the low nibble of byte j % 16 for j < 16 and in the high nibble for j >= 16).
// The packed layout has the same size: rows are grouped in tiles of 16, and for each block of 32 values a
// tile stores its 16 exponents, then four 64-byte chunks; chunk c holds, for each row, that row's code
// bytes 4c..4c+3. One chunk therefore expands (low and high nibbles) into two 16-row x 4-value int8
// vectors, exactly the operand vpdpbusd wants. A last tile of R < 16 rows uses the same scheme with R rows.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { MXFP4_TILE_ROWS = 16, MXFP4_BLOCK = 32, MXFP4_BLOCK_BYTES = 17 };

// Instruction paths; mxfp4_set_path() lets tests compare them. Returns the path in use after the call
// (a path this CPU cannot run is refused and the current one kept).
enum mxfp4_path {
    MXFP4_PATH_AUTO        = 0,
    MXFP4_PATH_SCALAR      = 1,
    MXFP4_PATH_AVX_VNNI    = 2,
    MXFP4_PATH_AVX512_VNNI = 3,
    MXFP4_PATH_AMX         = 4,  // AMX-INT8 from 9 columns on (AVX512-VNNI below), same bits
    MXFP4_PATH_AVX2        = 5,  // vpmaddubsw + vpmaddwd, for CPUs without VNNI
    MXFP4_PATH_NEON        = 6,  // ARM64 sdot (vdotq_s32)
};
int mxfp4_set_path(int path);
const char * mxfp4_path_name(void);

// Repack M rows of K values (K a multiple of 32) from ggml's block_mxfp4 layout into ours (same size).
void mxfp4_pack(const void * blocks, void * packed, int64_t M, int64_t K);
// And back, for reading a tensor out of the buffer.
void mxfp4_unpack(const void * packed, void * blocks, int64_t M, int64_t K);

// Bytes one quantized activation column takes (K int8 values, then K/32 float scales and K/32 int32 sums).
size_t mxfp4_act_bytes(int64_t K);
// Quantize one column of K floats to int8 per block of 32 (scale = amax / 127, round to nearest even).
void mxfp4_quantize_act(const float * x, void * act, int64_t K);

// dst[col * dst_stride + row] = sum_k W[row, k] * A[k, col] for rows [row_begin, row_end) and N columns.
// act holds N columns, act_stride bytes apart. row_begin must be a multiple of 16 and row_end a multiple
// of 16 or M, so each thread owns whole tiles; a column's result does not depend on N or on the split.
void mxfp4_gemm(const void * packed, int64_t M, int64_t K, const void * act, size_t act_stride, int64_t N,
                float * dst, int64_t dst_stride, int64_t row_begin, int64_t row_end);

// The same product over ggml's block rows as a GGUF file holds them (M rows of K/32 blocks), so a model can run
// from its file's mapping with no copy of its own. On AVX-512 a batch of up to 8 columns reads each 16-row tile
// straight from its rows (transposed in registers); larger batches, and every other path, pack about 256 KB of
// tiles at a time into a buffer of the thread's own and run mxfp4_gemm on it. Either way the bits are
// mxfp4_gemm's on mxfp4_pack's layout (batch invariant, the same on every path). Row bounds as for mxfp4_gemm.
void mxfp4_gemm_rows(const void * blocks, int64_t M, int64_t K, const void * act, size_t act_stride, int64_t N,
                     float * dst, int64_t dst_stride, int64_t row_begin, int64_t row_end);
// Whether mxfp4_gemm_rows runs near mxfp4_gemm's speed on this path (AVX-512 VNNI and AMX). Elsewhere it packs a
// byte at a time: correct, too slow to choose.
int mxfp4_rows_fast(void);

#ifdef __cplusplus
}
#endif
