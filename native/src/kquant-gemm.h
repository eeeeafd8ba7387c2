// Q4_K, Q5_K and Q6_K x int8 matrix multiply for small batches: weights repacked once, every column in one weight
// pass. Plain C API with no ggml dependency, so tests can compile and call it directly.
//
// Weights arrive as ggml rows of 256-value super-blocks. block_q4_K (144 bytes): f16 d, f16 dmin, 12 bytes of
// 6-bit scales and mins for 8 sub-blocks of 32, 128 bytes of nibbles (byte 32p + l: value 64p + l low, value
// 64p + 32 + l high); value = d * scale * q - dmin * min. block_q5_K (176 bytes): Q4_K's fields with 32 bytes
// of fifth bits (qh) before the nibbles, bit s of qh[l] belonging to value 32s + l. block_q6_K (210 bytes): 128
// bytes of low nibbles, 64 of high 2-bit pairs, 16 int8 scales for sub-blocks of 16, f16 d; value = d * scale *
// (q - 32).
//
// The packed layouts have the file's size. Rows are grouped in tiles of 16 (a last tile of R < 16 rows uses the
// same scheme with R rows); per super-block a tile stores each field for all its rows together, so one vector
// load serves 16 rows:
//   Q4_K: 16 d, 16 dmin (f16); the scales' and mins' low 4 bits as nibble pairs (sub-blocks 2p, 2p + 1; four
//         16-byte arrays each) and their high 2 bits in four 16-byte arrays; then 32 chunks of 64 bytes, chunk
//         8p + c holding for each row its nibble bytes 32p + 4c..32p + 4c + 3 (values 4c.. of sub-blocks 2p and
//         2p + 1): one chunk is the unsigned operand of vpdpbusd for two sub-blocks.
//   Q5_K: as Q4_K, then 8 chunks of 64 bytes, chunk c holding for each row its qh bytes 4c..4c + 3.
//   Q6_K: 16 d (f16); 16 arrays of 16 int8 scales (one per sub-block); 32 chunks of low-nibble bytes (chunk
//         8(2n + k) + c: bytes 64n + 32k + 4c..+3 of each row) and 16 of high-bit bytes (chunk 8n + c: bytes
//         32n + 4c..+3).
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { KQUANT_TILE_ROWS = 16, KQUANT_SUPER = 256 };

// Weight types, numbered as ggml numbers them.
enum kquant_type { KQUANT_Q4_K = 12, KQUANT_Q5_K = 13, KQUANT_Q6_K = 14 };

// Instruction paths; kquant_set_path() lets tests compare them. Returns the path in use after the call
// (a path this CPU cannot run is refused and the current one kept).
enum kquant_path {
    KQUANT_PATH_AUTO        = 0,
    KQUANT_PATH_SCALAR      = 1,
    KQUANT_PATH_AVX2        = 2,  // vpmaddubsw + vpmaddwd, for CPUs without VNNI
    KQUANT_PATH_AVX_VNNI    = 3,
    KQUANT_PATH_AVX512_VNNI = 4,
    KQUANT_PATH_NEON        = 5,  // ARM64 sdot (vdotq_s32)
};
int kquant_set_path(int path);
const char * kquant_path_name(void);

// Bytes of one row of K values (K a multiple of 256) in the file's layout, which is also the packed size.
size_t kquant_row_bytes(int type, int64_t K);
// Repack M rows of K values from ggml's blocks into ours (same size), and back, bit for bit.
void kquant_pack(int type, const void * blocks, void * packed, int64_t M, int64_t K);
void kquant_unpack(int type, const void * packed, void * blocks, int64_t M, int64_t K);

// Bytes one quantized activation column takes: K int8 values, then per block of 32 a float scale and a float
// scale * sum, then per 16 values -32 * their sum (int32).
size_t kquant_act_bytes(int64_t K);
// Quantize one column of K floats to int8 per block of 32 (scale = amax / 127, round to nearest even).
void kquant_quantize_act(const float * x, void * act, int64_t K);

// dst[col * dst_stride + row] = sum_k W[row, k] * A[k, col] for rows [row_begin, row_end) and N columns.
// act holds N columns, act_stride bytes apart. row_begin must be a multiple of 16 and row_end a multiple
// of 16 or M, so each thread owns whole tiles; a column's result does not depend on N or on the split.
void kquant_gemm(int type, const void * packed, int64_t M, int64_t K, const void * act, size_t act_stride, int64_t N,
                 float * dst, int64_t dst_stride, int64_t row_begin, int64_t row_end);

#ifdef __cplusplus
}
#endif
