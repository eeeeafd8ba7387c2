// Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 x int8 matrix multiply for small batches: ggml's 32-value block types with
// f16 scales, weights repacked once, every column in one weight pass. Plain C API with no ggml dependency, like
// mxfp4-gemm.h, so tests can compile and call it directly.
//
// Weights arrive as ggml rows of blocks of 32 values:
//   Q8_0  f16 d, 32 int8 q                       value = q * d
//   Q4_0  f16 d, 16 bytes of nibbles             value = (q - 8) * d
//   Q4_1  f16 d, f16 m, 16 bytes of nibbles      value = q * d + m
//   Q5_0  f16 d, 4 bytes qh, 16 bytes of nibbles  value = (q - 16) * d, q = nibble | bit j of qh << 4
//   Q5_1  f16 d, f16 m, qh, 16 bytes of nibbles   value = q * d + m
// (nibble j in the low half of byte j for j < 16, in the high half of byte j - 16 otherwise; qh a
// little-endian 32-bit word).
// The packed layout has the same size: rows are grouped in tiles of 16, and for each block a tile stores its
// 16 d, then (Q4_1, Q5_1) its 16 m, then (Q5) 64 bytes of fifth bits, then 64-byte chunks (8 for Q8_0, 4 for
// the others): chunk c holds, for each row, that row's quant bytes 4c..4c+3. A chunk is then, directly (Q8_0)
// or as its low and high nibbles, a 16-row x 4-value int8 operand of vpdpbusd. The fifth bits are laid out
// like a chunk: byte 4r + i holds, for row r, the fifth bit of value 4c + i in its bit c and of value
// 16 + 4c + i in its bit 4 + c (c = 0..3), so shifting that byte moves chunk c's bits onto its nibbles. Q8_0
// bytes are stored with the sign bit flipped (q + 128, unsigned). A last tile of R < 16 rows uses the same
// scheme with R rows.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { Q8_TILE_ROWS = 16, Q8_BLOCK = 32 };

// The weight types, by their ggml names.
enum q8_type {
    Q8_TYPE_Q8_0 = 0,
    Q8_TYPE_Q4_0 = 1,
    Q8_TYPE_Q4_1 = 2,
    Q8_TYPE_Q5_0 = 3,
    Q8_TYPE_Q5_1 = 4,
};
// Bytes of one block of 32 values of a type (34, 18, 20, 22, 24), the same in ggml's layout and ours.
size_t q8_block_bytes(int type);

// Instruction paths; q8_set_path() lets tests compare them. Returns the path in use after the call
// (a path this CPU cannot run is refused and the current one kept).
enum q8_path {
    Q8_PATH_AUTO        = 0,
    Q8_PATH_SCALAR      = 1,
    Q8_PATH_AVX2        = 2,  // vpmaddubsw + vpmaddwd, for CPUs without VNNI
    Q8_PATH_AVX_VNNI    = 3,
    Q8_PATH_AVX512_VNNI = 4,
    Q8_PATH_NEON        = 5,  // ARM64 sdot (vdotq_s32)
};
int q8_set_path(int path);
const char * q8_path_name(void);

// Repack M rows of K values (K a multiple of 32) of a type from ggml's layout into ours (same size), and back.
void q8_pack(int type, const void * blocks, void * packed, int64_t M, int64_t K);
void q8_unpack(int type, const void * packed, void * blocks, int64_t M, int64_t K);

// Bytes one quantized activation column takes: K int8 values, then per block of 32 its float scale d, the
// int32 sum of its q and the float d * sum (Q4_1's and Q5_1's m term).
size_t q8_act_bytes(int64_t K);
// Quantize one column of K floats to int8 per block of 32 (scale = amax / 127, round to nearest even).
void q8_quantize_act(const float * x, void * act, int64_t K);

// dst[col * dst_stride + row] = sum_k W[row, k] * A[k, col] for rows [row_begin, row_end) and N columns.
// act holds N columns, act_stride bytes apart. row_begin must be a multiple of 16 and row_end a multiple
// of 16 or M, so each thread owns whole tiles; a column's result does not depend on N or on the split.
void q8_gemm(int type, const void * packed, int64_t M, int64_t K, const void * act, size_t act_stride, int64_t N,
             float * dst, int64_t dst_stride, int64_t row_begin, int64_t row_end);

#ifdef __cplusplus
}
#endif
