// MXFP4 x int8 small-batch matrix multiply; layout and contract in mxfp4-gemm.h.
//
// Arithmetic, identical on every path so the paths agree bit for bit:
//   isum  = sum over the 32 values of a block of (code value * 2 + 12) * q   - 12 * sum(q)   (exact, int32;
//           the AMX path sums (code value * 2) * q directly: the same integer)
//   acc   = fma(float(isum), scale_w * scale_a, acc)                         block by block, in order
// The doubled E2M1 values (0, 1, 2, 3, 4, 6, 8, 12 and negatives) plus 12 fit vpdpbusd's unsigned
// operand; the activation side carries -12 * sum(q) per block, computed once at quantization, and the
// exponent's factor 1/2 undoes the doubling. Each column has its own accumulators, so its result does not
// depend on how many other columns share the pass or which thread owns the tile.
#include "mxfp4-gemm.h"

#include "int8-activations.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#    include <immintrin.h>
#    define MXFP4_X86 1
#elif defined(__aarch64__)
#    include <arm_neon.h>
#    define MXFP4_NEON 1
#    include "arm-features.h"
#endif
#include "amx-tiles.h"
#if defined(MXFP4_X86) && defined(ASSISTANT_AMX)
#    define MXFP4_AMX 1
#endif

namespace {

constexpr int kTile   = MXFP4_TILE_ROWS;
constexpr int kBlock  = MXFP4_BLOCK;
constexpr int kOffset = 12;
constexpr int8_t kValues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
// Software prefetch this far ahead in the weight stream: with the hardware prefetchers alone, DRAM time and
// compute time add up in a batch of several columns; 4 KB ahead they overlap (2 KB and 8 KB did less well).
constexpr int kPrefetchBytes = 4096;
// The AMX path takes batches of this many columns or more (vpdpbusd is as fast below; see tile_amx).
constexpr int kAmxMinColumns = 9;

// E8M0 exponent -> 2^(e - 127) / 2 (the half undoes the doubled code values).
struct ScaleTable {
    float v[256];
    ScaleTable() {
        for (int e = 0; e < 256; ++e) v[e] = std::ldexp(0.5f, e - 127);
    }
};
const float * scale_table() {
    static const ScaleTable table;  // built on first use, whatever the order of static initialisation
    return table.v;
}

#ifdef MXFP4_X86
// Denormals are flushed while we compute. An all-zero block has E8M0 exponent 0, a scale of 2^-128, and every
// multiply by such a subnormal takes a microcode assist, which slowed zero-padded weights to a fraction of the
// bandwidth. Values that small contribute nothing a float sum can hold.
struct FlushDenormals {
    unsigned saved = _mm_getcsr();
    FlushDenormals() { _mm_setcsr(saved | 0x8040); }  // FTZ (bit 15) | DAZ (bit 6)
    ~FlushDenormals() { _mm_setcsr(saved); }
};
#elif defined(MXFP4_NEON)
struct FlushDenormals {  // FPCR.FZ (bit 24): the same flush on ARM64, inputs and outputs
    uint64_t saved = assistant_arm::fpcr();
    FlushDenormals() { assistant_arm::set_fpcr(saved | (1u << 24)); }
    ~FlushDenormals() { assistant_arm::set_fpcr(saved); }
};
#else
struct FlushDenormals {};
#endif

struct Column {
    const int8_t *  q;
    const float *   d;
    const int32_t * bias;
};

Column column(const void * act, size_t stride, int64_t j, int64_t K) {
    const int8_t * q = (const int8_t *) act + j * stride;
    const float *  d = (const float *) (q + K);
    return {q, d, (const int32_t *) (d + K / kBlock)};
}

size_t tile_bytes(int rows, int64_t nb) { return (size_t) rows * nb * MXFP4_BLOCK_BYTES; }

// Code byte i (0..15) of row r in block b of a tile with R rows.
inline uint8_t code_byte(const uint8_t * blk, int R, int r, int i) { return blk[R + (i / 4) * 4 * R + 4 * r + i % 4]; }

using TileFn = void (*)(const uint8_t *, int64_t, const Column *, float (*)[kTile]);

void tile_scalar(const uint8_t * tile, int R, int64_t nb, const Column * cols, int nc, float (*out)[kTile]) {
    const float * scales = scale_table();
    for (int j = 0; j < nc; ++j) {
        for (int r = 0; r < R; ++r) {
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; ++b) {
                const uint8_t * blk = tile + b * R * MXFP4_BLOCK_BYTES;
                const int8_t *  q   = cols[j].q + b * kBlock;
                int32_t isum = cols[j].bias[b];
                for (int i = 0; i < 16; ++i) {
                    const uint8_t byte = code_byte(blk, R, r, i);
                    isum += (kValues[byte & 15] + kOffset) * q[i] + (kValues[byte >> 4] + kOffset) * q[i + 16];
                }
                const float scale = scales[blk[r]] * cols[j].d[b];
                acc = std::fma((float) isum, scale, acc);
            }
            out[j][r] = acc;
        }
    }
}

#ifdef MXFP4_X86
// 16-byte lookup: E2M1 code -> doubled value + 12, the unsigned operand of vpdpbusd.
#    define MXFP4_LUT_BYTES 12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0

inline int32_t load_i32(const int8_t * p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// A block's lines kPrefetchBytes ahead. ALONE: the batch is 1 or 2 columns in one pass, so a weight line feeds
// little work and the loop waits on memory: prefetching into L2 (T1) rather than L1 lets the cores stream more.
// With more columns the loop is compute-bound and wants its lines in L1; so does a later group of a bigger
// batch, which reads the tile again from cache. The kernels take ALONE as a template argument (see kAlone).
template <bool ALONE>
inline void prefetch_ahead(const uint8_t * blk) {
#    pragma GCC unroll 5
    for (int l = 0; l < 5; ++l) _mm_prefetch((const char *) blk + kPrefetchBytes + 64 * l, ALONE ? _MM_HINT_T1 : _MM_HINT_T0);
}

// Where tile_avx512 finds block b of its 16 rows: the exponents widened to 32 bits (e) and the four code chunks
// of the packed layout (v[c]: code bytes 4c..4c+3 of row r in lane r). Here, a packed tile.
struct PackedBlocks {
    const uint8_t * tile;

    template <bool ALONE>
    __attribute__((target("avx512f,avx512bw"))) void load(int64_t b, __m512i & e, __m512i (&v)[4]) const {
        const uint8_t * blk = tile + b * kTile * MXFP4_BLOCK_BYTES;
        prefetch_ahead<ALONE>(blk);
        e = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *) blk));
#    pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) v[c] = _mm512_loadu_si512(blk + kTile + 64 * c);
    }
};

// Full 16-row tile: 8 registers of expanded weights per block stay put while all NC columns use them. Blocks
// says where the tile's blocks come from (PackedBlocks, or RowBlocks below: the same bits either way).
template <int NC, bool ALONE, class Blocks>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void tile_avx512_over(const Blocks & blocks, int64_t nb,
                                                                               const Column * cols, float (*out)[kTile]) {
    const __m512i lut  = _mm512_broadcast_i32x4(_mm_setr_epi8(MXFP4_LUT_BYTES));
    const __m512i low  = _mm512_set1_epi8(0x0f);
    const __m512  half = _mm512_set1_ps(0.5f);
    const __m512i bias = _mm512_set1_epi32(127);
    __m512 acc[NC];
#    pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) acc[j] = _mm512_setzero_ps();

    for (int64_t b = 0; b < nb; ++b) {
        __m512i e, v[4];
        blocks.template load<ALONE>(b, e, v);
        const __m512 ws = _mm512_scalef_ps(half, _mm512_cvtepi32_ps(_mm512_sub_epi32(e, bias)));
        __m512i w[8];  // w[c]: values 4c..4c+3 of each row; w[c + 4]: values 16 + 4c..
#    pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
            w[c]     = _mm512_shuffle_epi8(lut, _mm512_and_si512(v[c], low));
            w[c + 4] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v[c], 4), low));
        }
#    pragma GCC unroll 8
        for (int j = 0; j < NC; ++j) {
            const int8_t * q  = cols[j].q + b * kBlock;
            __m512i        s0 = _mm512_set1_epi32(cols[j].bias[b]);
            __m512i        s1 = _mm512_setzero_si512();
            s0 = _mm512_dpbusd_epi32(s0, w[0], _mm512_set1_epi32(load_i32(q + 0)));
            s1 = _mm512_dpbusd_epi32(s1, w[1], _mm512_set1_epi32(load_i32(q + 4)));
            s0 = _mm512_dpbusd_epi32(s0, w[2], _mm512_set1_epi32(load_i32(q + 8)));
            s1 = _mm512_dpbusd_epi32(s1, w[3], _mm512_set1_epi32(load_i32(q + 12)));
            s0 = _mm512_dpbusd_epi32(s0, w[4], _mm512_set1_epi32(load_i32(q + 16)));
            s1 = _mm512_dpbusd_epi32(s1, w[5], _mm512_set1_epi32(load_i32(q + 20)));
            s0 = _mm512_dpbusd_epi32(s0, w[6], _mm512_set1_epi32(load_i32(q + 24)));
            s1 = _mm512_dpbusd_epi32(s1, w[7], _mm512_set1_epi32(load_i32(q + 28)));
            const __m512 scale = _mm512_mul_ps(ws, _mm512_set1_ps(cols[j].d[b]));
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), scale, acc[j]);
        }
    }
#    pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) _mm512_storeu_ps(out[j], acc[j]);
}

template <int NC, bool ALONE = false>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void tile_avx512(const uint8_t * tile, int64_t nb,
                                                                          const Column * cols, float (*out)[kTile]) {
    tile_avx512_over<NC, ALONE>(PackedBlocks{tile}, nb, cols, out);
}

// The 256-bit paths (AVX-VNNI, AVX2) see a tile as two halves of 8 rows. One half of a block expands into
// 8 vectors of code value * 2 + 12 (the unsigned operand of vpdpbusd and vpmaddubsw; w[c]: values 4c..4c+3
// of each row, w[c + 4]: values 16 + 4c..) and its 8 weight scales, taken from the exponent bits directly
// (2^(e - 128) is the float with exponent field e - 1; gathers are slow on the CPUs these paths serve). An
// exponent e <= 1 gives a subnormal scale, which the denormal flush makes zero on every path.
__attribute__((target("avx2,fma"))) inline void expand_half(const uint8_t * blk, int h, __m256i * w, __m256 & ws) {
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_setr_epi8(MXFP4_LUT_BYTES));
    const __m256i low = _mm256_set1_epi8(0x0f);
    const __m256i e = _mm256_cvtepu8_epi32(_mm_subs_epu8(_mm_loadl_epi64((const __m128i *) (blk + 8 * h)), _mm_set1_epi8(1)));
    ws = _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
#    pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
        const __m256i v = _mm256_loadu_si256((const __m256i *) (blk + kTile + 64 * c + 32 * h));
        w[c]     = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, low));
        w[c + 4] = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), low));
    }
}

// The float steps of one column and block for both halves, from its integer sums over values 0-15 and
// 16-31 (s[h][g]): the same operations on both 256-bit paths.
__attribute__((target("avx2,fma"))) inline void add_block(const __m256i (&s)[2][2], int32_t bias, float d,
                                                          const __m256 (&ws)[2], __m256 (&acc)[2]) {
#    pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
        const __m256i isum = _mm256_add_epi32(_mm256_add_epi32(s[h][0], s[h][1]), _mm256_set1_epi32(bias));
        acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(ws[h], _mm256_set1_ps(d)), acc[h]);
    }
}

// AVX-VNNI for one column: one half after the other, its 8 expanded vectors in registers (the one-pass shape
// below is slower for a single column).
template <int NC, bool ALONE = false>
__attribute__((target("avx2,fma,avxvnni"))) void tile_avxvnni_halves(const uint8_t * tile, int64_t nb,
                                                                      const Column * cols, float (*out)[kTile]) {
    for (int h = 0; h < 2; ++h) {
        __m256 acc[NC];
#    pragma GCC unroll 4
        for (int j = 0; j < NC; ++j) acc[j] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t * blk = tile + b * kTile * MXFP4_BLOCK_BYTES;
            __m256          ws;
            __m256i         w[8];
            prefetch_ahead<ALONE>(blk);
            expand_half(blk, h, w, ws);
#    pragma GCC unroll 4
            for (int j = 0; j < NC; ++j) {
                const int8_t * q  = cols[j].q + b * kBlock;
                __m256i        s0 = _mm256_set1_epi32(cols[j].bias[b]);
                __m256i        s1 = _mm256_setzero_si256();
                s0 = _mm256_dpbusd_avx_epi32(s0, w[0], _mm256_set1_epi32(load_i32(q + 0)));
                s1 = _mm256_dpbusd_avx_epi32(s1, w[1], _mm256_set1_epi32(load_i32(q + 4)));
                s0 = _mm256_dpbusd_avx_epi32(s0, w[2], _mm256_set1_epi32(load_i32(q + 8)));
                s1 = _mm256_dpbusd_avx_epi32(s1, w[3], _mm256_set1_epi32(load_i32(q + 12)));
                s0 = _mm256_dpbusd_avx_epi32(s0, w[4], _mm256_set1_epi32(load_i32(q + 16)));
                s1 = _mm256_dpbusd_avx_epi32(s1, w[5], _mm256_set1_epi32(load_i32(q + 20)));
                s0 = _mm256_dpbusd_avx_epi32(s0, w[6], _mm256_set1_epi32(load_i32(q + 24)));
                s1 = _mm256_dpbusd_avx_epi32(s1, w[7], _mm256_set1_epi32(load_i32(q + 28)));
                const __m256 scale = _mm256_mul_ps(ws, _mm256_set1_ps(cols[j].d[b]));
                acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1)), scale, acc[j]);
            }
        }
#    pragma GCC unroll 4
        for (int j = 0; j < NC; ++j) _mm256_storeu_ps(out[j] + 8 * h, acc[j]);
    }
}

// The block's two halves expanded (w[h], ws[h]), prefetching ahead first; and a column's four activation
// groups of values 16g..16g+15 broadcast. Shared by the two 256-bit one-pass kernels, whose targets differ.
template <bool ALONE>
__attribute__((target("avx2,fma"))) inline void expand_block(const uint8_t * blk, __m256i (&w)[2][8], __m256 (&ws)[2]) {
    prefetch_ahead<ALONE>(blk);
    expand_half(blk, 0, w[0], ws[0]);
    expand_half(blk, 1, w[1], ws[1]);
}

__attribute__((target("avx2"))) inline void broadcast_group(const int8_t * q, int g, __m256i (&a)[4]) {
#    pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) a[i] = _mm256_set1_epi32(load_i32(q + 16 * g + 4 * i));
}

template <int NC>
__attribute__((target("avx2"))) inline void store_columns(const __m256 (&acc)[NC][2], float (*out)[kTile]) {
#    pragma GCC unroll 6
    for (int j = 0; j < NC; ++j) {
        _mm256_storeu_ps(out[j], acc[j][0]);
        _mm256_storeu_ps(out[j] + 8, acc[j][1]);
    }
}

// AVX-VNNI from two columns: as the AVX2 path below (both halves in one pass, each broadcast serving both,
// up to 6 columns), vpdpbusd doing the four multiplies and the widening: faster from 2 columns than one half
// after the other with 4 columns a pass, which a single column keeps.
template <int NC, bool ALONE = false>
__attribute__((target("avx2,fma,avxvnni"))) void tile_avxvnni(const uint8_t * tile, int64_t nb, const Column * cols,
                                                               float (*out)[kTile]) {
    __m256 acc[NC][2];
#    pragma GCC unroll 6
    for (int j = 0; j < NC; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        __m256  ws[2];
        __m256i w[2][8];
        expand_block<ALONE>(tile + b * kTile * MXFP4_BLOCK_BYTES, w, ws);
#    pragma GCC unroll 6
        for (int j = 0; j < NC; ++j) {
            const int8_t * q = cols[j].q + b * kBlock;
            __m256i s[2][2];
#    pragma GCC unroll 2
            for (int g = 0; g < 2; ++g) {
                __m256i a[4];
                broadcast_group(q, g, a);
#    pragma GCC unroll 2
                for (int h = 0; h < 2; ++h) {
                    __m256i t = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), w[h][4 * g + 0], a[0]);
                    t         = _mm256_dpbusd_avx_epi32(t, w[h][4 * g + 1], a[1]);
                    t         = _mm256_dpbusd_avx_epi32(t, w[h][4 * g + 2], a[2]);
                    s[h][g]   = _mm256_dpbusd_avx_epi32(t, w[h][4 * g + 3], a[3]);
                }
            }
            add_block(s, cols[j].bias[b], cols[j].d[b], ws, acc[j]);
        }
    }
    store_columns<NC>(acc, out);
}

// AVX2 without VNNI: vpmaddubsw multiplies the unsigned expanded weights by the signed activations and
// adds neighbouring pairs into int16 (|pair| <= 2 * 24 * 127 = 6096), four such vectors still fit int16
// (24384), and vpmaddwd by ones widens them to int32: the same exact isum as vpdpbusd gives.
// Both halves of a block are expanded together and each broadcast activation group serves both: the tile
// is read once per pass instead of twice, and a column costs half the broadcasts. The 16 expanded vectors
// do not all fit in registers beside up to 12 accumulators, so the compiler reloads some from the stack
// (L1) for each column; that costs less than a second pass (notes/kernels.md has the cycle budget).
template <int NC, bool ALONE = false>
__attribute__((target("avx2,fma"))) void tile_avx2(const uint8_t * tile, int64_t nb, const Column * cols,
                                                   float (*out)[kTile]) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[NC][2];
#    pragma GCC unroll 6
    for (int j = 0; j < NC; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        __m256  ws[2];
        __m256i w[2][8];
        expand_block<ALONE>(tile + b * kTile * MXFP4_BLOCK_BYTES, w, ws);
#    pragma GCC unroll 6
        for (int j = 0; j < NC; ++j) {
            const int8_t * q = cols[j].q + b * kBlock;
            __m256i s[2][2];
#    pragma GCC unroll 2
            for (int g = 0; g < 2; ++g) {
                __m256i a[4];
                broadcast_group(q, g, a);
#    pragma GCC unroll 2
                for (int h = 0; h < 2; ++h) {
                    const __m256i p0 = _mm256_maddubs_epi16(w[h][4 * g + 0], a[0]);
                    const __m256i p1 = _mm256_maddubs_epi16(w[h][4 * g + 1], a[1]);
                    const __m256i p2 = _mm256_maddubs_epi16(w[h][4 * g + 2], a[2]);
                    const __m256i p3 = _mm256_maddubs_epi16(w[h][4 * g + 3], a[3]);
                    s[h][g] = _mm256_madd_epi16(_mm256_add_epi16(_mm256_add_epi16(p0, p1), _mm256_add_epi16(p2, p3)), ones);
                }
            }
            add_block(s, cols[j].bias[b], cols[j].d[b], ws, acc[j]);
        }
    }
    store_columns<NC>(acc, out);
}

#    ifdef MXFP4_AMX
// AMX-INT8, for batches of 9 or more columns: there vpdpbusd (64 multiply-adds a cycle) makes the kernel
// compute-bound. One TDPBSSD multiplies up to 16 columns'
// 32 activations by a block of 16 rows: the 8 expanded weight vectors of the block, as signed doubled
// values (no +12 offset, so no bias term), are exactly its B tile (row c = values 4c..4c+3 of every row).
// They pass through a buffer into a tile; the int32 sums come back through memory into the same float
// steps as the vector paths, so every path gives the same bits and a column's result does not depend on
// which path its batch took. The per-32 scales cap the gain: every block needs its own multiply (half a
// TDPBSSD's depth), a store of its sums and the float steps, so vpdpbusd stays as fast up to 8 columns.
// Tiles: 0-1 results (columns x 16 rows of int32), 2-3 activations (columns x 32 int8), 4-5 weights.

// ``columns`` rows in the result and activation tiles: a batch of N <= 16 loads and stores only N rows.
__attribute__((target("amx-tile,amx-int8"))) void amx_configure(int columns) {
    assistant_amx::TileConfig config = {};
    config.palette = 1;
    for (int t = 0; t < 6; ++t) {
        config.rows[t]          = (uint8_t) (t >= 4 ? 8 : columns);
        config.bytes_per_row[t] = t == 2 || t == 3 ? kBlock : 64;
    }
    assistant_amx::load_config(config);
}

// Releasing the tiles is an AMX instruction too, so it needs a function compiled for AMX.
__attribute__((target("amx-tile"))) void amx_release() { _tile_release(); }

constexpr int kAmxGroup = 8;  // blocks expanded, multiplied, then finished together

struct AmxBuffers {
    alignas(64) int8_t  weights[kAmxGroup][8][64];
    alignas(64) int32_t sums[kAmxGroup][kTile][kTile];
};

// Expand blocks [b0, b0 + n) into the weight buffers: signed doubled values, B tile layout.
__attribute__((target("avx512f,avx512bw"))) inline void amx_expand(const uint8_t * tile, int64_t b0, int n,
                                                                    AmxBuffers & buf) {
    const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *) kValues));
    const __m512i low = _mm512_set1_epi8(0x0f);
    for (int i = 0; i < n; ++i) {
        const uint8_t * blk = tile + (b0 + i) * kTile * MXFP4_BLOCK_BYTES;
#        pragma GCC unroll 5
        for (int l = 0; l < 5; ++l) _mm_prefetch((const char *) blk + kPrefetchBytes + 64 * l, _MM_HINT_T0);
#        pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
            const __m512i v = _mm512_loadu_si512(blk + kTile + 64 * c);
            _mm512_store_si512(buf.weights[i][c], _mm512_shuffle_epi8(lut, _mm512_and_si512(v, low)));
            _mm512_store_si512(buf.weights[i][c + 4],
                               _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), low)));
        }
    }
}

// Multiply blocks [b0, b0 + n): sums[i] = activations of block b0 + i x its weights (two tile sets alternate).
// Expanding, multiplying and finishing a group of blocks in turn measured faster than interleaving them
// block by block (AMX loads wait for the stores before them to reach the cache).
__attribute__((target("amx-tile,amx-int8"))) inline void amx_multiply(int64_t b0, int n, const int8_t * a,
                                                                      size_t a_stride, AmxBuffers & buf) {
    for (int i = 0; i < n; i += 2) {  // the tile intrinsics take register numbers as literals
        _tile_loadd(4, buf.weights[i], 64);
        _tile_loadd(2, a + (b0 + i) * kBlock, a_stride);
        _tile_zero(0);
        _tile_dpbssd(0, 2, 4);
        if (i + 1 < n) {
            _tile_loadd(5, buf.weights[i + 1], 64);
            _tile_loadd(3, a + (b0 + i + 1) * kBlock, a_stride);
            _tile_zero(1);
            _tile_dpbssd(1, 3, 5);
        }
        _tile_stored(0, buf.sums[i], 64);
        if (i + 1 < n) _tile_stored(1, buf.sums[i + 1], 64);
    }
}

// The float steps of blocks [b0, b0 + n) for NC columns, block by block.
template <int NC>
__attribute__((target("avx512f,avx512bw"))) inline void amx_finish(const uint8_t * tile, int64_t b0, int n,
                                                                    const Column * cols, const AmxBuffers & buf,
                                                                    __m512 * acc) {
    for (int i = 0; i < n; ++i) {
        const int64_t   b   = b0 + i;
        const uint8_t * blk = tile + b * kTile * MXFP4_BLOCK_BYTES;
        const __m512i   e   = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *) blk));
        const __m512    ws  = _mm512_scalef_ps(_mm512_set1_ps(0.5f), _mm512_cvtepi32_ps(_mm512_sub_epi32(e, _mm512_set1_epi32(127))));
#        pragma GCC unroll 16
        for (int j = 0; j < NC; ++j) {
            const __m512 scale = _mm512_mul_ps(ws, _mm512_set1_ps(cols[j].d[b]));
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(buf.sums[i][j])), scale, acc[j]);
        }
    }
}

// A full 16-row tile for NC <= 16 columns whose activations are 16 rows a_stride bytes apart from a
// (rows past NC are zeros or other columns; their sums are not used).
template <int NC>
__attribute__((target("avx512f,avx512bw,amx-tile,amx-int8"))) void tile_amx(const uint8_t * tile, int64_t nb,
                                                                            const int8_t * a, size_t a_stride,
                                                                            const Column * cols, float (*out)[kTile]) {
    AmxBuffers buf;
    __m512     acc[NC];
#        pragma GCC unroll 16
    for (int j = 0; j < NC; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += kAmxGroup) {
        const int n = (int) std::min<int64_t>(kAmxGroup, nb - b0);
        amx_expand(tile, b0, n, buf);
        assistant_amx::tile_loads_see_stores();
        amx_multiply(b0, n, a, a_stride, buf);
        amx_finish<NC>(tile, b0, n, cols, buf, acc);
    }
#        pragma GCC unroll 16
    for (int j = 0; j < NC; ++j) _mm512_storeu_ps(out[j], acc[j]);
}

using AmxTileFn = void (*)(const uint8_t *, int64_t, const int8_t *, size_t, const Column *, float (*)[kTile]);
const AmxTileFn kAmx[16] = {tile_amx<1>,  tile_amx<2>,  tile_amx<3>,  tile_amx<4>,  tile_amx<5>,  tile_amx<6>,
                            tile_amx<7>,  tile_amx<8>,  tile_amx<9>,  tile_amx<10>, tile_amx<11>, tile_amx<12>,
                            tile_amx<13>, tile_amx<14>, tile_amx<15>, tile_amx<16>};
#    endif  // MXFP4_AMX

const TileFn kAvx512[8] = {tile_avx512<1>, tile_avx512<2>, tile_avx512<3>, tile_avx512<4>,
                           tile_avx512<5>, tile_avx512<6>, tile_avx512<7>, tile_avx512<8>};
const TileFn kAvxVnni[6] = {tile_avxvnni_halves<1>, tile_avxvnni<2>, tile_avxvnni<3>,
                            tile_avxvnni<4>, tile_avxvnni<5>, tile_avxvnni<6>};
const TileFn kAvx2[6]    = {tile_avx2<1>, tile_avx2<2>, tile_avx2<3>, tile_avx2<4>, tile_avx2<5>, tile_avx2<6>};
// Batches of 1 or 2 columns: the same kernels prefetching into L2 (see prefetch_ahead).
constexpr int64_t kAlone = 2;
const TileFn      kAvx512Alone[kAlone]  = {tile_avx512<1, true>, tile_avx512<2, true>};
const TileFn      kAvxVnniAlone[kAlone] = {tile_avxvnni_halves<1, true>, tile_avxvnni<2, true>};
const TileFn      kAvx2Alone[kAlone]    = {tile_avx2<1, true>, tile_avx2<2, true>};

__attribute__((target("avx512f,avx512bw"))) void quantize_avx512(const float * x, int8_t * q, float * d,
                                                                   int32_t * bias, int64_t K) {
    for (int64_t b = 0; b < K / kBlock; ++b) {
        const __m512 x0 = _mm512_loadu_ps(x + b * kBlock), x1 = _mm512_loadu_ps(x + b * kBlock + 16);
        const float  amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
        const float  scale = amax / 127.0f;
        const __m512 inv   = _mm512_set1_ps(scale != 0.0f ? 1.0f / scale : 0.0f);
        const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, inv)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, inv));
        _mm_storeu_si128((__m128i *) (q + b * kBlock), _mm512_cvtsepi32_epi8(q0));
        _mm_storeu_si128((__m128i *) (q + b * kBlock + 16), _mm512_cvtsepi32_epi8(q1));
        d[b]    = scale;
        bias[b] = -kOffset * _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    }
}
#endif  // MXFP4_X86

#ifdef MXFP4_NEON
// ARM64 with the dot-product extension: sdot multiplies signed int8 directly, so the weights expand to
// the signed doubled values (no +12 offset, no bias term: the same integer isum). A 128-bit register holds
// 4 rows x 4 values, so the tile is done in quarters of 4 rows; one block's 8 weight registers stay put
// while all NC columns use them, each column's 32 activations in two registers, picked by lane.
template <int NC>
__attribute__((target("arch=armv8.2-a+dotprod"))) void tile_neon(const uint8_t * tile, int64_t nb, const Column * cols,
                                                   float (*out)[kTile]) {
    const int8x16_t  lut    = vld1q_s8(kValues);
    const uint8x16_t low    = vdupq_n_u8(0x0f);
    const float *    scales = scale_table();
    for (int quarter = 0; quarter < 4; ++quarter) {
        float32x4_t acc[NC];
#    pragma GCC unroll 4
        for (int j = 0; j < NC; ++j) acc[j] = vdupq_n_f32(0.0f);
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t * blk = tile + b * kTile * MXFP4_BLOCK_BYTES;
            __builtin_prefetch(blk + kPrefetchBytes);
            __builtin_prefetch(blk + kPrefetchBytes + 64);
            __builtin_prefetch(blk + kPrefetchBytes + 128);
            __builtin_prefetch(blk + kPrefetchBytes + 192);
            __builtin_prefetch(blk + kPrefetchBytes + 256);
            const uint8_t *   e  = blk + 4 * quarter;
            const float32x4_t ws = {scales[e[0]], scales[e[1]], scales[e[2]], scales[e[3]]};
            int8x16_t         w[8];
#    pragma GCC unroll 4
            for (int c = 0; c < 4; ++c) {
                const uint8x16_t v = vld1q_u8(blk + kTile + 64 * c + 16 * quarter);
                w[c]     = vqtbl1q_s8(lut, vandq_u8(v, low));
                w[c + 4] = vqtbl1q_s8(lut, vshrq_n_u8(v, 4));
            }
#    pragma GCC unroll 4
            for (int j = 0; j < NC; ++j) {
                const int8_t *  q  = cols[j].q + b * kBlock;
                const int8x16_t q0 = vld1q_s8(q), q1 = vld1q_s8(q + 16);
                int32x4_t       s0 = vdupq_n_s32(0), s1 = vdupq_n_s32(0);
                s0 = vdotq_laneq_s32(s0, w[0], q0, 0);
                s1 = vdotq_laneq_s32(s1, w[1], q0, 1);
                s0 = vdotq_laneq_s32(s0, w[2], q0, 2);
                s1 = vdotq_laneq_s32(s1, w[3], q0, 3);
                s0 = vdotq_laneq_s32(s0, w[4], q1, 0);
                s1 = vdotq_laneq_s32(s1, w[5], q1, 1);
                s0 = vdotq_laneq_s32(s0, w[6], q1, 2);
                s1 = vdotq_laneq_s32(s1, w[7], q1, 3);
                const float32x4_t scale = vmulq_n_f32(ws, cols[j].d[b]);
                acc[j] = vfmaq_f32(acc[j], vcvtq_f32_s32(vaddq_s32(s0, s1)), scale);
            }
        }
#    pragma GCC unroll 4
        for (int j = 0; j < NC; ++j) vst1q_f32(out[j] + 4 * quarter, acc[j]);
    }
}

const TileFn kNeon[4] = {tile_neon<1>, tile_neon<2>, tile_neon<3>, tile_neon<4>};
#endif  // MXFP4_NEON

// Whether this CPU (and, for AMX, the OS) can run a path.
bool runnable(int path) {
#ifdef MXFP4_X86
    __builtin_cpu_init();
    const bool avx2   = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vnni");
    switch (path) {
        case MXFP4_PATH_AVX2: return avx2;
        case MXFP4_PATH_AVX_VNNI: return avx2 && __builtin_cpu_supports("avxvnni");
        case MXFP4_PATH_AVX512_VNNI: return avx512;
#    ifdef MXFP4_AMX
        case MXFP4_PATH_AMX:
            return avx512 && __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-int8") &&
                   assistant_amx::permitted();
#    endif
        default: break;
    }
#elif defined(MXFP4_NEON)
    if (path == MXFP4_PATH_NEON) return assistant_arm::has_dotprod();
#endif
    return path == MXFP4_PATH_SCALAR;
}

// The fastest path this machine runs, in the order we measured them.
int detect_path() {
    for (int path : {MXFP4_PATH_AMX, MXFP4_PATH_AVX512_VNNI, MXFP4_PATH_AVX_VNNI, MXFP4_PATH_AVX2, MXFP4_PATH_NEON}) {
        if (runnable(path)) return path;
    }
    return MXFP4_PATH_SCALAR;
}

// Function-local statics: detected on first use, whatever the order of static initialisation.
int best() {
    static const int path = detect_path();
    return path;
}

int & current() {
    static int path = best();
    return path;
}

// The last tile of a matrix whose M is not a multiple of 16, widened to 16 rows so the vector kernels
// need no masks. Extra rows get exponent 0 and code 0; their results are dropped.
void widen_tile(const uint8_t * tile, int R, int64_t nb, std::vector<uint8_t> & wide) {
    wide.assign(tile_bytes(kTile, nb), 0);
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t * src = tile + b * R * MXFP4_BLOCK_BYTES;
        uint8_t *       dst = wide.data() + b * kTile * MXFP4_BLOCK_BYTES;
        std::memcpy(dst, src, R);
        for (int c = 0; c < 4; ++c) std::memcpy(dst + kTile + 64 * c, src + R + 4 * R * c, 4 * R);
    }
}

// Weights used as the file holds them (mxfp4_gemm_rows): one 16-row tile of ggml's block rows packed into our
// layout just before the kernels use it, in vectors. Per block, four rows' 16 code bytes fill a register (a row
// a 128-bit lane: rows g, 4 + g, 8 + g, 12 + g in register g); two rounds of interleaving then leave code bytes
// 4c..4c+3 of rows 4l..4l + 3 in lane l of chunk c: the 16 rows in order, as the layout wants. The tile's 16
// rows lie one after another in memory, so the next tile is fetched into L2 as one linear stream meanwhile
// (next: its first byte, or null), its share spread over the blocks.
#ifdef MXFP4_X86
inline void pack_exponents(const uint8_t * src, int64_t row_bytes, uint8_t * blk) {
    for (int r = 0; r < kTile; ++r) blk[r] = src[r * row_bytes];
}

inline void prefetch_next_tile(const uint8_t * next, int64_t b) {
    if (next == nullptr) return;
    const uint8_t * part = next + b * kTile * MXFP4_BLOCK_BYTES;
    for (int l = 0; l < kTile * MXFP4_BLOCK_BYTES; l += 64) _mm_prefetch((const char *) part + l, _MM_HINT_T1);
}

// Block b's four code chunks from 16 rows in vectors (the transposition above); src: the block in row 0.
__attribute__((target("avx512f"))) inline void row_chunks_avx512(const uint8_t * src, int64_t row_bytes, __m512i (&v)[4]) {
    __m512i x[4];
#    pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
        const uint8_t * codes = src + g * row_bytes + 1;
        __m512i         r     = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *) codes));
        r    = _mm512_inserti32x4(r, _mm_loadu_si128((const __m128i *) (codes + 4 * row_bytes)), 1);
        r    = _mm512_inserti32x4(r, _mm_loadu_si128((const __m128i *) (codes + 8 * row_bytes)), 2);
        x[g] = _mm512_inserti32x4(r, _mm_loadu_si128((const __m128i *) (codes + 12 * row_bytes)), 3);
    }
    const __m512i lo01 = _mm512_unpacklo_epi32(x[0], x[1]), hi01 = _mm512_unpackhi_epi32(x[0], x[1]);
    const __m512i lo23 = _mm512_unpacklo_epi32(x[2], x[3]), hi23 = _mm512_unpackhi_epi32(x[2], x[3]);
    v[0] = _mm512_unpacklo_epi64(lo01, lo23), v[1] = _mm512_unpackhi_epi64(lo01, lo23);
    v[2] = _mm512_unpacklo_epi64(hi01, hi23), v[3] = _mm512_unpackhi_epi64(hi01, hi23);
}

__attribute__((target("avx512f"))) void pack_tile_avx512(const uint8_t * rows, int64_t nb, uint8_t * tile,
                                                         const uint8_t * next) {
    const int64_t row_bytes = nb * MXFP4_BLOCK_BYTES;
    for (int64_t b = 0; b < nb; ++b) {
        prefetch_next_tile(next, b);
        const uint8_t * src = rows + b * MXFP4_BLOCK_BYTES;
        uint8_t *       blk = tile + b * kTile * MXFP4_BLOCK_BYTES;
        __m512i         v[4];
        row_chunks_avx512(src, row_bytes, v);
#    pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) _mm512_storeu_si512(blk + kTile + 64 * c, v[c]);
        pack_exponents(src, row_bytes, blk);
    }
}

// A tile's blocks for tile_avx512_over straight from 16 block rows, transposed in registers as the pack does,
// so a batch of up to 8 columns (one pass over the tile) needs no packed copy at all.
struct RowBlocks {
    const uint8_t * rows;       // the tile's first row
    int64_t         row_bytes;
    const uint8_t * next;       // the next tile's first row, fetched meanwhile, or null

    template <bool ALONE>
    __attribute__((target("avx512f,avx512bw"))) void load(int64_t b, __m512i & e, __m512i (&v)[4]) const {
        prefetch_next_tile(next, b);
        const uint8_t * src = rows + b * MXFP4_BLOCK_BYTES;
        row_chunks_avx512(src, row_bytes, v);
        alignas(16) uint8_t exponents[kTile];
        pack_exponents(src, row_bytes, exponents);
        e = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *) exponents));
    }
};

using RowsFn = void (*)(const RowBlocks &, int64_t, const Column *, float (*)[kTile]);
template <int NC, bool ALONE>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void rows_avx512(const RowBlocks & blocks, int64_t nb,
                                                                          const Column * cols, float (*out)[kTile]) {
    tile_avx512_over<NC, ALONE>(blocks, nb, cols, out);
}
const RowsFn kRowsAvx512[8]           = {rows_avx512<1, false>, rows_avx512<2, false>, rows_avx512<3, false>,
                                         rows_avx512<4, false>, rows_avx512<5, false>, rows_avx512<6, false>,
                                         rows_avx512<7, false>, rows_avx512<8, false>};
const RowsFn kRowsAvx512Alone[kAlone] = {rows_avx512<1, true>, rows_avx512<2, true>};

#endif

// Whether this path reads block rows near the speed of its packed tiles: AVX-512 (RowBlocks). Elsewhere
// mxfp4_gemm_rows packs a byte at a time: correct, much slower than packed (notes/kernels.md).
bool rows_fast() { return current() == MXFP4_PATH_AVX512_VNNI || current() == MXFP4_PATH_AMX; }

// Rows [0, R) of ggml's block rows packed into tiles: whole tiles in vectors on AVX-512, a last short tile
// (and everything on other paths) by mxfp4_pack. next: the rows after them, fetched meanwhile.
void pack_rows(const uint8_t * rows, uint8_t * packed, int64_t R, int64_t nb, const uint8_t * next) {
    const size_t tile = tile_bytes(kTile, nb);
    int64_t      r0   = 0;
#ifdef MXFP4_X86
    if (rows_fast()) {
        for (; r0 + kTile <= R; r0 += kTile) {
            const uint8_t * src = rows + r0 * nb * MXFP4_BLOCK_BYTES;
            pack_tile_avx512(src, nb, packed + (r0 / kTile) * tile, r0 + 2 * kTile <= R ? src + tile : next);
        }
    }
#else
    (void) next;
#endif
    if (r0 < R) mxfp4_pack(rows + r0 * nb * MXFP4_BLOCK_BYTES, packed + (r0 / kTile) * tile, R - r0, nb * kBlock);
}

}  // namespace

extern "C" {

int mxfp4_set_path(int path) {
    if (path == MXFP4_PATH_AUTO) path = best();
    if (runnable(path)) current() = path;
    return current();
}

const char * mxfp4_path_name(void) {
    switch (current()) {
        case MXFP4_PATH_AMX: return "amx";
        case MXFP4_PATH_AVX512_VNNI: return "avx512-vnni";
        case MXFP4_PATH_AVX_VNNI: return "avx-vnni";
        case MXFP4_PATH_AVX2: return "avx2";
        case MXFP4_PATH_NEON: return "neon";
        default: return "scalar";
    }
}

void mxfp4_pack(const void * blocks, void * packed, int64_t M, int64_t K) {
    const int64_t   nb  = K / kBlock;
    const uint8_t * src = (const uint8_t *) blocks;
    uint8_t *       dst = (uint8_t *) packed;
    for (int64_t t0 = 0; t0 < M; t0 += kTile) {
        const int R    = (int) std::min<int64_t>(kTile, M - t0);
        uint8_t * tile = dst + tile_bytes(kTile, nb) * (t0 / kTile);
        for (int r = 0; r < R; ++r) {
            const uint8_t * row = src + (t0 + r) * nb * MXFP4_BLOCK_BYTES;
            for (int64_t b = 0; b < nb; ++b) {
                uint8_t * blk = tile + b * R * MXFP4_BLOCK_BYTES;
                blk[r] = row[b * MXFP4_BLOCK_BYTES];
                for (int c = 0; c < 4; ++c) std::memcpy(blk + R + 4 * R * c + 4 * r, row + b * MXFP4_BLOCK_BYTES + 1 + 4 * c, 4);
            }
        }
    }
}

void mxfp4_unpack(const void * packed, void * blocks, int64_t M, int64_t K) {
    const int64_t   nb  = K / kBlock;
    const uint8_t * src = (const uint8_t *) packed;
    uint8_t *       dst = (uint8_t *) blocks;
    for (int64_t t0 = 0; t0 < M; t0 += kTile) {
        const int       R    = (int) std::min<int64_t>(kTile, M - t0);
        const uint8_t * tile = src + tile_bytes(kTile, nb) * (t0 / kTile);
        for (int r = 0; r < R; ++r) {
            uint8_t * row = dst + (t0 + r) * nb * MXFP4_BLOCK_BYTES;
            for (int64_t b = 0; b < nb; ++b) {
                const uint8_t * blk = tile + b * R * MXFP4_BLOCK_BYTES;
                row[b * MXFP4_BLOCK_BYTES] = blk[r];
                for (int c = 0; c < 4; ++c) std::memcpy(row + b * MXFP4_BLOCK_BYTES + 1 + 4 * c, blk + R + 4 * R * c + 4 * r, 4);
            }
        }
    }
}

size_t mxfp4_act_bytes(int64_t K) {
    const size_t bytes = K + (K / kBlock) * (sizeof(float) + sizeof(int32_t));
    return (bytes + 63) & ~(size_t) 63;
}

void mxfp4_quantize_act(const float * x, void * act, int64_t K) {
    const Column c    = column(act, 0, 0, K);
    int32_t *    bias = (int32_t *) c.bias;
#ifdef MXFP4_X86
    if (current() == MXFP4_PATH_AVX512_VNNI || current() == MXFP4_PATH_AMX) {
        quantize_avx512(x, (int8_t *) c.q, (float *) c.d, bias, K);
        return;
    }
    if (current() != MXFP4_PATH_SCALAR) {
        int8_activations::quantize_avx2(x, (int8_t *) c.q, (float *) c.d, bias, K);
    } else
#endif
        int8_activations::quantize_scalar(x, (int8_t *) c.q, (float *) c.d, bias, K);
    for (int64_t b = 0; b < K / kBlock; ++b) bias[b] *= -kOffset;  // the sums, as the offset codes need them
}

void mxfp4_gemm(const void * packed, int64_t M, int64_t K, const void * act, size_t act_stride, int64_t N,
                float * dst, int64_t dst_stride, int64_t row_begin, int64_t row_end) {
    const FlushDenormals flush;
    const int64_t nb   = K / kBlock;
    const int     path = current() == MXFP4_PATH_AMX && N < kAmxMinColumns ? MXFP4_PATH_AVX512_VNNI : current();
    const bool    ymm  = path == MXFP4_PATH_AVX2 || path == MXFP4_PATH_AVX_VNNI;  // the one-pass 256-bit kernels
    const int     step = path == MXFP4_PATH_AMX ? 16 : path == MXFP4_PATH_AVX512_VNNI ? 8 : ymm ? 6 : 4;
#ifdef MXFP4_X86
    const bool alone = N <= kAlone;
#endif
    thread_local std::vector<uint8_t> wide;
    Column cols[16];
    float  out[16][kTile];
#ifdef MXFP4_AMX
    // Past 16 columns, a short last chunk gets a zero-padded copy of its activations, so that every chunk
    // uses the same tile configuration (loading another costs about a thousand cycles).
    thread_local std::vector<int8_t> padded;
    const int64_t short_from = N <= kTile ? N : N / kTile * kTile;
    if (path == MXFP4_PATH_AMX) {
        amx_configure((int) std::min<int64_t>(N, kTile));
        if (short_from < N) {
            padded.assign((size_t) kTile * K, 0);
            for (int64_t j = short_from; j < N; ++j) std::memcpy(&padded[(j - short_from) * K], column(act, act_stride, j, K).q, K);
        }
    }
#endif
    for (int64_t t0 = row_begin; t0 < row_end; t0 += kTile) {
        const int       R    = (int) std::min<int64_t>(kTile, M - t0);
        const uint8_t * tile = (const uint8_t *) packed + tile_bytes(kTile, nb) * (t0 / kTile);
        if (R < kTile && path != MXFP4_PATH_SCALAR) {
            widen_tile(tile, R, nb, wide);
            tile = wide.data();
        }
        for (int64_t j0 = 0; j0 < N; j0 += step) {
            const int nc = (int) std::min<int64_t>(step, N - j0);
            for (int j = 0; j < nc; ++j) cols[j] = column(act, act_stride, j0 + j, K);
            switch (path) {
#ifdef MXFP4_AMX
                case MXFP4_PATH_AMX:
                    if (j0 < short_from) {
                        kAmx[nc - 1](tile, nb, cols[0].q, act_stride, cols, out);
                    } else {
                        kAmx[nc - 1](tile, nb, padded.data(), K, cols, out);
                    }
                    break;
#endif
#ifdef MXFP4_X86
                case MXFP4_PATH_AVX512_VNNI: (alone ? kAvx512Alone : kAvx512)[nc - 1](tile, nb, cols, out); break;
                case MXFP4_PATH_AVX_VNNI: (alone ? kAvxVnniAlone : kAvxVnni)[nc - 1](tile, nb, cols, out); break;
                case MXFP4_PATH_AVX2: (alone ? kAvx2Alone : kAvx2)[nc - 1](tile, nb, cols, out); break;
#endif
#ifdef MXFP4_NEON
                case MXFP4_PATH_NEON: kNeon[nc - 1](tile, nb, cols, out); break;
#endif
                default: tile_scalar(tile, R, nb, cols, nc, out); break;
            }
            for (int j = 0; j < nc; ++j) std::memcpy(dst + (j0 + j) * dst_stride + t0, out[j], R * sizeof(float));
        }
    }
#ifdef MXFP4_AMX
    if (path == MXFP4_PATH_AMX) amx_release();
#endif
}

int mxfp4_rows_fast(void) { return rows_fast(); }

void mxfp4_gemm_rows(const void * blocks, int64_t M, int64_t K, const void * act, size_t act_stride, int64_t N,
                     float * dst, int64_t dst_stride, int64_t row_begin, int64_t row_end) {
    row_end = std::min(row_end, M);
    const int64_t nb = K / kBlock;
    // Tiles packed at a time: about 256 KB of them, so that the kernels' set-up (AMX's tile configuration
    // among it) is paid per group rather than per tile, and the group stays in L2 while its columns pass.
    const int64_t group = std::max<int64_t>(1, (int64_t(256) << 10) / (int64_t) tile_bytes(kTile, nb)) * kTile;
    thread_local std::vector<uint8_t> scratch;
    if (scratch.size() < tile_bytes(kTile, nb) * (group / kTile)) scratch.resize(tile_bytes(kTile, nb) * (group / kTile));
    const uint8_t * rows = (const uint8_t *) blocks;
#ifdef MXFP4_X86
    if (rows_fast() && N <= 8) {  // one pass over each tile: straight from the rows (the same bits as packed)
        const FlushDenormals flush;
        const int64_t        row_bytes = nb * MXFP4_BLOCK_BYTES;
        Column               cols[8];
        float                out[8][kTile];
        for (int64_t j = 0; j < N; ++j) cols[j] = column(act, act_stride, j, K);
        int64_t t0 = row_begin;
        for (; t0 + kTile <= row_end; t0 += kTile) {
            const RowBlocks tile{rows + t0 * row_bytes, row_bytes, t0 + 2 * kTile <= row_end ? rows + (t0 + kTile) * row_bytes : nullptr};
            (N <= kAlone ? kRowsAvx512Alone : kRowsAvx512)[N - 1](tile, nb, cols, out);
            for (int64_t j = 0; j < N; ++j) std::memcpy(dst + j * dst_stride + t0, out[j], kTile * sizeof(float));
        }
        row_begin = t0;  // a last short tile: packed below
    }
#endif
    for (int64_t r0 = row_begin; r0 < row_end; r0 += group) {
        const int64_t   R    = std::min(group, row_end - r0);
        const uint8_t * next = r0 + R < row_end ? rows + (r0 + R) * nb * MXFP4_BLOCK_BYTES : nullptr;
        pack_rows(rows + r0 * nb * MXFP4_BLOCK_BYTES, scratch.data(), R, nb, next);
        mxfp4_gemm(scratch.data(), R, K, act, act_stride, N, dst + r0, dst_stride, 0, R);
    }
}

}  // extern "C"
