// Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 x int8 small-batch matrix multiply; layout and contract in q8-gemm.h.
//
// Arithmetic, identical on every path so the paths agree bit for bit:
//   isum = sum over the 32 values of a block of u * q + bias                    (exact, int32)
//          u: the stored unsigned operand (Q8_0: byte + 128, Q4: the nibble, Q5: the nibble and its fifth
//          bit); bias: Q8_0 -128 * sum(q), Q4_0 -8 * sum(q), Q5_0 -16 * sum(q), Q4_1 and Q5_1 0; paths that
//          multiply signed weights (NEON, AVX2 on Q8_0) sum the weight's own integer times q: the same integer
//   acc  = fma(float(isum), d_w * d_a, acc)                                      block by block, in order
//   acc  = fma(m_w, d_a * sum(q), acc)                                           Q4_1 and Q5_1 only
// Each column has its own accumulators, so its result does not depend on how many other columns share the
// pass or which thread owns the tile.
#include "q8-gemm.h"

#include "int8-activations.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#    include <immintrin.h>
#    define Q8_X86 1
#elif defined(__aarch64__)
#    include <arm_neon.h>
#    define Q8_NEON 1
#    include "arm-features.h"
#endif

namespace {

constexpr int kTile  = Q8_TILE_ROWS;
constexpr int kBlock = Q8_BLOCK;
// Software prefetch this far ahead in the weight stream (as in mxfp4-gemm.cpp).
constexpr int kPrefetchBytes = 4096;

// Per type: bytes of a block, bytes of scales per row (d, or d and m), bytes of fifth bits per row, 4-byte
// quant groups per row.
struct Layout {
    int block_bytes, scale_bytes, high_bytes, chunks;
    constexpr int quant_offset() const { return scale_bytes + high_bytes; }  // per row of a tile
};
constexpr Layout layout(int type) {
    switch (type) {
        case Q8_TYPE_Q8_0: return {34, 2, 0, 8};
        case Q8_TYPE_Q4_0: return {18, 2, 0, 4};
        case Q8_TYPE_Q4_1: return {20, 4, 0, 4};
        case Q8_TYPE_Q5_0: return {22, 2, 4, 4};
        default: return {24, 4, 4, 4};
    }
}
// Whether a type adds a per-block minimum m (its value is q * d + m).
constexpr bool has_min(int type) { return type == Q8_TYPE_Q4_1 || type == Q8_TYPE_Q5_1; }

// The integer the activation side adds to a block's sum of u * q (see the top of the file).
template <int T>
inline int32_t bias(int32_t sum) {
    return T == Q8_TYPE_Q8_0 ? -128 * sum : T == Q8_TYPE_Q4_0 ? -8 * sum : T == Q8_TYPE_Q5_0 ? -16 * sum : 0;
}

#ifdef Q8_X86
// Denormals are flushed while we compute (as in mxfp4-gemm.cpp): tiny products then cost no microcode assists.
struct FlushDenormals {
    unsigned saved = _mm_getcsr();
    FlushDenormals() { _mm_setcsr(saved | 0x8040); }  // FTZ (bit 15) | DAZ (bit 6)
    ~FlushDenormals() { _mm_setcsr(saved); }
};
#elif defined(Q8_NEON)
struct FlushDenormals {  // FPCR.FZ (bit 24)
    uint64_t saved = assistant_arm::fpcr();
    FlushDenormals() { assistant_arm::set_fpcr(saved | (1u << 24)); }
    ~FlushDenormals() { assistant_arm::set_fpcr(saved); }
};
#else
struct FlushDenormals {};
#endif

// IEEE half -> float, exact (subnormal halves are normal floats, so no flush can touch them).
float half_to_float(const uint8_t * p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    const uint32_t sign = (uint32_t) (h & 0x8000) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    uint32_t bits;
    if (exponent == 0) {
        const float v = std::ldexp((float) mantissa, -24);
        std::memcpy(&bits, &v, 4);
        bits |= sign;
    } else if (exponent == 31) {
        bits = sign | 0x7f800000u | (mantissa << 13);
    } else {
        bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

struct Column {
    const int8_t *  q;
    const float *   d;
    const int32_t * sum;
    const float *   ds;
};

Column column(const void * act, size_t stride, int64_t j, int64_t K) {
    const int8_t *  q   = (const int8_t *) act + j * stride;
    const float *   d   = (const float *) (q + K);
    const int32_t * sum = (const int32_t *) (d + K / kBlock);
    return {q, d, sum, (const float *) (sum + K / kBlock)};
}

size_t tile_bytes(int type, int rows, int64_t nb) { return (size_t) rows * nb * layout(type).block_bytes; }

// The unsigned operand u of value i (0..31) of row r in a block of a tile with R rows.
template <int T>
inline int weight(const uint8_t * blk, int R, int r, int i) {
    constexpr Layout L = layout(T);
    const uint8_t *  q = blk + R * L.quant_offset();
    if (T == Q8_TYPE_Q8_0) return q[(i / 4) * 4 * R + 4 * r + i % 4];
    const int byte   = i % 16;
    const int v      = q[(byte / 4) * 4 * R + 4 * r + byte % 4];
    const int nibble = i < 16 ? v & 15 : v >> 4;
    if (L.high_bytes == 0) return nibble;
    const int fifth = (blk[R * L.scale_bytes + 4 * r + byte % 4] >> (byte / 4 + (i < 16 ? 0 : 4))) & 1;
    return nibble | fifth << 4;
}

using TileFn = void (*)(const uint8_t *, int64_t, const Column *, float (*)[kTile]);

template <int T>
void tile_scalar(const uint8_t * tile, int R, int64_t nb, const Column * cols, int nc, float (*out)[kTile]) {
    constexpr Layout L = layout(T);
    for (int j = 0; j < nc; ++j) {
        for (int r = 0; r < R; ++r) {
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; ++b) {
                const uint8_t * blk  = tile + b * R * L.block_bytes;
                const int8_t *  q    = cols[j].q + b * kBlock;
                int32_t         isum = bias<T>(cols[j].sum[b]);
                for (int i = 0; i < kBlock; ++i) isum += weight<T>(blk, R, r, i) * q[i];
                acc = std::fma((float) isum, half_to_float(blk + 2 * r) * cols[j].d[b], acc);
                if (has_min(T)) acc = std::fma(half_to_float(blk + 2 * R + 2 * r), cols[j].ds[b], acc);
            }
            out[j][r] = acc;
        }
    }
}

#ifdef Q8_X86
inline int32_t load_i32(const int8_t * p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// A block's lines kPrefetchBytes ahead; ALONE (1 or 2 columns, memory-bound) into L2, else into L1, as in
// mxfp4-gemm.cpp's prefetch_ahead.
template <int T, bool ALONE>
inline void prefetch_ahead(const uint8_t * blk) {
    constexpr int lines = (kTile * layout(T).block_bytes + 63) / 64;
#    pragma GCC unroll 9
    for (int l = 0; l < lines; ++l) _mm_prefetch((const char *) blk + kPrefetchBytes + 64 * l, ALONE ? _MM_HINT_T1 : _MM_HINT_T0);
}

// Bit k of every byte of ``bits`` moved to bit 4, alone (a 16-bit shift cannot carry a neighbouring byte's bit
// there for these k).
template <int K>
__attribute__((target("avx512f,avx512bw"))) inline __m512i fifth_bit(__m512i bits) {
    const __m512i bit4 = _mm512_set1_epi8(0x10);
    return _mm512_and_si512(K <= 4 ? _mm512_slli_epi16(bits, 4 - K) : _mm512_srli_epi16(bits, K - 4), bit4);
}

// Q5: the fifth bits (see q8-gemm.h) onto the nibbles of w[v], values 4v..4v+3 of each row.
__attribute__((target("avx512f,avx512bw"))) inline void add_fifth_bits(__m512i bits, __m512i (&w)[8]) {
    w[0] = _mm512_or_si512(w[0], fifth_bit<0>(bits));
    w[1] = _mm512_or_si512(w[1], fifth_bit<1>(bits));
    w[2] = _mm512_or_si512(w[2], fifth_bit<2>(bits));
    w[3] = _mm512_or_si512(w[3], fifth_bit<3>(bits));
    w[4] = _mm512_or_si512(w[4], fifth_bit<4>(bits));
    w[5] = _mm512_or_si512(w[5], fifth_bit<5>(bits));
    w[6] = _mm512_or_si512(w[6], fifth_bit<6>(bits));
    w[7] = _mm512_or_si512(w[7], fifth_bit<7>(bits));
}

// Full 16-row tile: 8 registers of weights per block stay put while all NC columns use them.
struct Avx512 {
    static constexpr int kStep = 8;

    template <int T, int NC, bool ALONE>
    __attribute__((target("avx512f,avx512bw,avx512vnni"))) static void tile(const uint8_t * tile, int64_t nb,
                                                                            const Column * cols, float (*out)[kTile]) {
        constexpr Layout L   = layout(T);
        const __m512i    low = _mm512_set1_epi8(0x0f);
        __m512           acc[NC];
#    pragma GCC unroll 8
        for (int j = 0; j < NC; ++j) acc[j] = _mm512_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t * blk = tile + b * kTile * L.block_bytes;
            const uint8_t * qs  = blk + kTile * L.quant_offset();
            prefetch_ahead<T, ALONE>(blk);
            const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) blk));
            __m512       mw = _mm512_setzero_ps();
            if (has_min(T)) mw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) (blk + 32)));
            __m512i w[8];  // w[v]: values 4v..4v+3 of each row
            if (T == Q8_TYPE_Q8_0) {
#    pragma GCC unroll 8
                for (int c = 0; c < 8; ++c) w[c] = _mm512_loadu_si512(qs + 64 * c);
            } else {
#    pragma GCC unroll 4
                for (int c = 0; c < 4; ++c) {
                    const __m512i v = _mm512_loadu_si512(qs + 64 * c);
                    w[c]     = _mm512_and_si512(v, low);
                    w[c + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
                }
                if (L.high_bytes) add_fifth_bits(_mm512_loadu_si512(blk + kTile * L.scale_bytes), w);
            }
#    pragma GCC unroll 8
            for (int j = 0; j < NC; ++j) {
                const int8_t * q  = cols[j].q + b * kBlock;
                __m512i        s0 = _mm512_set1_epi32(bias<T>(cols[j].sum[b]));
                __m512i        s1 = _mm512_setzero_si512();
#    pragma GCC unroll 8
                for (int v = 0; v < 8; v += 2) {
                    s0 = _mm512_dpbusd_epi32(s0, w[v], _mm512_set1_epi32(load_i32(q + 4 * v)));
                    s1 = _mm512_dpbusd_epi32(s1, w[v + 1], _mm512_set1_epi32(load_i32(q + 4 * v + 4)));
                }
                const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(cols[j].d[b]));
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), scale, acc[j]);
                if (has_min(T)) acc[j] = _mm512_fmadd_ps(mw, _mm512_set1_ps(cols[j].ds[b]), acc[j]);
            }
        }
#    pragma GCC unroll 8
        for (int j = 0; j < NC; ++j) _mm512_storeu_ps(out[j], acc[j]);
    }
};

// As fifth_bit and add_fifth_bits above, on a half tile.
template <int K>
__attribute__((target("avx2"))) inline __m256i fifth_bit(__m256i bits) {
    const __m256i bit4 = _mm256_set1_epi8(0x10);
    return _mm256_and_si256(K <= 4 ? _mm256_slli_epi16(bits, 4 - K) : _mm256_srli_epi16(bits, K - 4), bit4);
}

__attribute__((target("avx2"))) inline void add_fifth_bits(__m256i bits, __m256i (&w)[8]) {
    w[0] = _mm256_or_si256(w[0], fifth_bit<0>(bits));
    w[1] = _mm256_or_si256(w[1], fifth_bit<1>(bits));
    w[2] = _mm256_or_si256(w[2], fifth_bit<2>(bits));
    w[3] = _mm256_or_si256(w[3], fifth_bit<3>(bits));
    w[4] = _mm256_or_si256(w[4], fifth_bit<4>(bits));
    w[5] = _mm256_or_si256(w[5], fifth_bit<5>(bits));
    w[6] = _mm256_or_si256(w[6], fifth_bit<6>(bits));
    w[7] = _mm256_or_si256(w[7], fifth_bit<7>(bits));
}

// The 256-bit paths see a tile as two halves of 8 rows, both expanded at once (each broadcast activation
// group then serves both): w[h][v] holds values 4v..4v+3 of the half's rows, as the unsigned operand u.
template <int T>
__attribute__((target("avx2,fma,f16c"))) inline void expand_block(const uint8_t * blk, __m256i (&w)[2][8],
                                                                  __m256 (&dw)[2], __m256 (&mw)[2]) {
    constexpr Layout L   = layout(T);
    const uint8_t *  qs  = blk + kTile * L.quant_offset();
    const __m256i    low = _mm256_set1_epi8(0x0f);
#    pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
        dw[h] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (blk + 16 * h)));
        mw[h] = has_min(T) ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (blk + 32 + 16 * h)))
                           : _mm256_setzero_ps();
        if (T == Q8_TYPE_Q8_0) {
#    pragma GCC unroll 8
            for (int c = 0; c < 8; ++c) w[h][c] = _mm256_loadu_si256((const __m256i *) (qs + 64 * c + 32 * h));
        } else {
#    pragma GCC unroll 4
            for (int c = 0; c < 4; ++c) {
                const __m256i v = _mm256_loadu_si256((const __m256i *) (qs + 64 * c + 32 * h));
                w[h][c]     = _mm256_and_si256(v, low);
                w[h][c + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
            }
            if (L.high_bytes) add_fifth_bits(_mm256_loadu_si256((const __m256i *) (blk + kTile * L.scale_bytes + 32 * h)), w[h]);
        }
    }
}

// The float steps of one column and block for both halves, from their exact integer sums.
template <int T>
__attribute__((target("avx2,fma"))) inline void add_block(const __m256i (&isum)[2], const Column & col, int64_t b,
                                                          const __m256 (&dw)[2], const __m256 (&mw)[2], __m256 (&acc)[2]) {
#    pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
        acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[h]), _mm256_mul_ps(dw[h], _mm256_set1_ps(col.d[b])), acc[h]);
        if (has_min(T)) acc[h] = _mm256_fmadd_ps(mw[h], _mm256_set1_ps(col.ds[b]), acc[h]);
    }
}

template <int NC>
__attribute__((target("avx2"))) inline void store_halves(const __m256 (&acc)[NC][2], float (*out)[kTile]) {
#    pragma GCC unroll 4
    for (int j = 0; j < NC; ++j) {
        _mm256_storeu_ps(out[j], acc[j][0]);
        _mm256_storeu_ps(out[j] + 8, acc[j][1]);
    }
}

struct AvxVnni {
    static constexpr int kStep = 4;

    template <int T, int NC, bool ALONE>
    __attribute__((target("avx2,fma,f16c,avxvnni"))) static void tile(const uint8_t * tile, int64_t nb,
                                                                      const Column * cols, float (*out)[kTile]) {
        __m256 acc[NC][2];
#    pragma GCC unroll 4
        for (int j = 0; j < NC; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t * blk = tile + b * kTile * layout(T).block_bytes;
            __m256i         w[2][8];
            __m256          dw[2], mw[2];
            prefetch_ahead<T, ALONE>(blk);
            expand_block<T>(blk, w, dw, mw);
#    pragma GCC unroll 4
            for (int j = 0; j < NC; ++j) {
                const int8_t * q = cols[j].q + b * kBlock;
                __m256i        s[2][2];
#    pragma GCC unroll 2
                for (int h = 0; h < 2; ++h) {
                    s[h][0] = _mm256_set1_epi32(bias<T>(cols[j].sum[b]));
                    s[h][1] = _mm256_setzero_si256();
                }
#    pragma GCC unroll 8
                for (int v = 0; v < 8; ++v) {
                    const __m256i a = _mm256_set1_epi32(load_i32(q + 4 * v));
                    s[0][v % 2] = _mm256_dpbusd_avx_epi32(s[0][v % 2], w[0][v], a);
                    s[1][v % 2] = _mm256_dpbusd_avx_epi32(s[1][v % 2], w[1][v], a);
                }
                const __m256i isum[2] = {_mm256_add_epi32(s[0][0], s[0][1]), _mm256_add_epi32(s[1][0], s[1][1])};
                add_block<T>(isum, cols[j], b, dw, mw, acc[j]);
            }
        }
        store_halves<NC>(acc, out);
    }
};

// AVX2 without VNNI. Q4 and Q5: vpmaddubsw multiplies the nibbles (Q5: 5-bit values) by the signed activations
// and adds neighbouring pairs into int16 (|pair| <= 2 * 31 * 127), four such vectors still fit int16, and vpmaddwd by ones widens
// them to int32. Q8_0's u (up to 255) would overflow a pair, so there the weights are made signed again and
// vpmaddubsw takes |w| times q with w's sign (|pair| <= 2 * 128 * 127), widened after every product.
struct Avx2 {
    static constexpr int kStep = 4;

    template <int T, int NC, bool ALONE>
    __attribute__((target("avx2,fma,f16c"))) static void tile(const uint8_t * tile, int64_t nb, const Column * cols,
                                                              float (*out)[kTile]) {
        const __m256i ones = _mm256_set1_epi16(1);
        const __m256i flip = _mm256_set1_epi8((char) 0x80);
        __m256        acc[NC][2];
#    pragma GCC unroll 4
        for (int j = 0; j < NC; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t * blk = tile + b * kTile * layout(T).block_bytes;
            __m256i         w[2][8], magnitude[2][8];
            __m256          dw[2], mw[2];
            prefetch_ahead<T, ALONE>(blk);
            expand_block<T>(blk, w, dw, mw);
            if (T == Q8_TYPE_Q8_0) {
#    pragma GCC unroll 2
                for (int h = 0; h < 2; ++h) {
#    pragma GCC unroll 8
                    for (int v = 0; v < 8; ++v) {
                        w[h][v]         = _mm256_xor_si256(w[h][v], flip);  // the signed weight
                        magnitude[h][v] = _mm256_abs_epi8(w[h][v]);
                    }
                }
            }
#    pragma GCC unroll 4
            for (int j = 0; j < NC; ++j) {
                const int8_t * q = cols[j].q + b * kBlock;
                __m256i        isum[2];
                if (T == Q8_TYPE_Q8_0) {
                    isum[0] = isum[1] = _mm256_setzero_si256();
#    pragma GCC unroll 8
                    for (int v = 0; v < 8; ++v) {
                        const __m256i a = _mm256_set1_epi32(load_i32(q + 4 * v));
#    pragma GCC unroll 2
                        for (int h = 0; h < 2; ++h) {
                            const __m256i p = _mm256_maddubs_epi16(magnitude[h][v], _mm256_sign_epi8(a, w[h][v]));
                            isum[h] = _mm256_add_epi32(isum[h], _mm256_madd_epi16(p, ones));
                        }
                    }
                } else {
                    __m256i a[8];
#    pragma GCC unroll 8
                    for (int v = 0; v < 8; ++v) a[v] = _mm256_set1_epi32(load_i32(q + 4 * v));
#    pragma GCC unroll 2
                    for (int h = 0; h < 2; ++h) {
                        __m256i g[2];
#    pragma GCC unroll 2
                        for (int k = 0; k < 2; ++k) {
                            const __m256i p0 = _mm256_maddubs_epi16(w[h][4 * k + 0], a[4 * k + 0]);
                            const __m256i p1 = _mm256_maddubs_epi16(w[h][4 * k + 1], a[4 * k + 1]);
                            const __m256i p2 = _mm256_maddubs_epi16(w[h][4 * k + 2], a[4 * k + 2]);
                            const __m256i p3 = _mm256_maddubs_epi16(w[h][4 * k + 3], a[4 * k + 3]);
                            g[k] = _mm256_madd_epi16(_mm256_add_epi16(_mm256_add_epi16(p0, p1), _mm256_add_epi16(p2, p3)), ones);
                        }
                        isum[h] = _mm256_add_epi32(_mm256_add_epi32(g[0], g[1]), _mm256_set1_epi32(bias<T>(cols[j].sum[b])));
                    }
                }
                add_block<T>(isum, cols[j], b, dw, mw, acc[j]);
            }
        }
        store_halves<NC>(acc, out);
    }
};

#endif  // Q8_X86

#ifdef Q8_NEON
// ARM64 with the dot-product extension: sdot multiplies signed int8, so the weights become their own signed
// integers (Q8_0: u - 128, Q4_0: nibble - 8, Q5_0: u - 16) and need no bias. A 128-bit register holds 4 rows x 4 values, so
// the tile is done in quarters of 4 rows; one block's 8 weight registers stay put while all NC columns use them.
struct Neon {
    static constexpr int kStep = 4;

    template <int T, int NC, bool ALONE>
    __attribute__((target("arch=armv8.2-a+dotprod"))) static void tile(const uint8_t * tile, int64_t nb,
                                                                       const Column * cols, float (*out)[kTile]) {
        constexpr Layout L     = layout(T);
        const uint8x16_t low   = vdupq_n_u8(0x0f);
        const uint8x16_t shift = vdupq_n_u8(T == Q8_TYPE_Q8_0 ? 0x80 : T == Q8_TYPE_Q4_0 ? 8 : T == Q8_TYPE_Q5_0 ? 16 : 0);
        const uint8x16_t bit4  = vdupq_n_u8(0x10);
        for (int quarter = 0; quarter < 4; ++quarter) {
            float32x4_t acc[NC];
#    pragma GCC unroll 4
            for (int j = 0; j < NC; ++j) acc[j] = vdupq_n_f32(0.0f);
            for (int64_t b = 0; b < nb; ++b) {
                const uint8_t * blk = tile + b * kTile * L.block_bytes;
                const uint8_t * qs  = blk + kTile * L.quant_offset();
                for (int l = 0; l < (kTile * L.block_bytes + 63) / 64; ++l) __builtin_prefetch(blk + kPrefetchBytes + 64 * l);
                const float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *) blk + 4 * quarter)));
                float32x4_t       mw = vdupq_n_f32(0.0f);
                if (has_min(T)) mw = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *) (blk + 32) + 4 * quarter)));
                int8x16_t w[8];
                if (T == Q8_TYPE_Q8_0) {
#    pragma GCC unroll 8
                    for (int c = 0; c < 8; ++c) w[c] = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(qs + 64 * c + 16 * quarter), shift));
                } else {
#    pragma GCC unroll 4
                    for (int c = 0; c < 4; ++c) {
                        const uint8x16_t v = vld1q_u8(qs + 64 * c + 16 * quarter);
                        uint8x16_t       lo = vandq_u8(v, low), hi = vshrq_n_u8(v, 4);
                        if (L.high_bytes) {  // bit c (values 4c..) and 4 + c (values 16 + 4c..) onto bit 4
                            const uint8x16_t bits = vld1q_u8(blk + kTile * L.scale_bytes + 16 * quarter);
                            lo = vorrq_u8(lo, vandq_u8(vshlq_u8(bits, vdupq_n_s8((int8_t) (4 - c))), bit4));
                            hi = vorrq_u8(hi, vandq_u8(vshlq_u8(bits, vdupq_n_s8((int8_t) -c)), bit4));
                        }
                        w[c]     = vreinterpretq_s8_u8(vsubq_u8(lo, shift));
                        w[c + 4] = vreinterpretq_s8_u8(vsubq_u8(hi, shift));
                    }
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
                    acc[j] = vfmaq_f32(acc[j], vcvtq_f32_s32(vaddq_s32(s0, s1)), vmulq_n_f32(dw, cols[j].d[b]));
                    if (has_min(T)) acc[j] = vfmaq_n_f32(acc[j], mw, cols[j].ds[b]);
                }
            }
#    pragma GCC unroll 4
            for (int j = 0; j < NC; ++j) vst1q_f32(out[j] + 4 * quarter, acc[j]);
        }
    }
};
#endif  // Q8_NEON

// Calls P's kernel for nc columns (1..P::kStep; ALONE batches have at most 2).
template <class P, int T, bool ALONE, int NC = 1>
void run_tile(int nc, const uint8_t * tile, int64_t nb, const Column * cols, float (*out)[kTile]) {
    if constexpr (NC < (ALONE ? 2 : P::kStep)) {
        if (nc != NC) return run_tile<P, T, ALONE, NC + 1>(nc, tile, nb, cols, out);
    }
    P::template tile<T, NC, ALONE>(tile, nb, cols, out);
}

// Whether this CPU can run a path.
bool runnable(int path) {
#ifdef Q8_X86
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    switch (path) {
        case Q8_PATH_AVX2: return avx2;
        case Q8_PATH_AVX_VNNI: return avx2 && __builtin_cpu_supports("avxvnni");
        case Q8_PATH_AVX512_VNNI:
            return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vnni");
        default: break;
    }
#elif defined(Q8_NEON)
    if (path == Q8_PATH_NEON) return assistant_arm::has_dotprod();
#endif
    return path == Q8_PATH_SCALAR;
}

int detect_path() {
    for (int path : {Q8_PATH_AVX512_VNNI, Q8_PATH_AVX_VNNI, Q8_PATH_AVX2, Q8_PATH_NEON}) {
        if (runnable(path)) return path;
    }
    return Q8_PATH_SCALAR;
}

int best() {
    static const int path = detect_path();
    return path;
}

int & current() {
    static int path = best();
    return path;
}

// The last tile of a matrix whose M is not a multiple of 16, widened to 16 rows so the vector kernels
// need no masks. Extra rows get zero scales; their results are dropped.
void widen_tile(int type, const uint8_t * tile, int R, int64_t nb, std::vector<uint8_t> & wide) {
    const Layout L = layout(type);
    wide.assign(tile_bytes(type, kTile, nb), 0);
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t * src = tile + b * R * L.block_bytes;
        uint8_t *       dst = wide.data() + b * kTile * L.block_bytes;
        for (int s = 0; s < L.scale_bytes / 2; ++s) std::memcpy(dst + 2 * kTile * s, src + 2 * R * s, 2 * R);
        if (L.high_bytes) std::memcpy(dst + kTile * L.scale_bytes, src + R * L.scale_bytes, L.high_bytes * R);
        for (int c = 0; c < L.chunks; ++c) {
            std::memcpy(dst + kTile * L.quant_offset() + 64 * c, src + R * L.quant_offset() + 4 * R * c, 4 * R);
        }
    }
}

// Copies one row's block between ggml's layout and ours (PACK: ggml -> ours), flipping Q8_0's sign bits and
// spreading Q5's fifth bits (ggml: bit j of a 32-bit word for value j) over the row's 4 bytes of them.
template <bool PACK>
void move_block(int type, uint8_t * ggml, uint8_t * blk, int R, int r) {
    const Layout L    = layout(type);
    const uint8_t flip = type == Q8_TYPE_Q8_0 ? 0x80 : 0;
    for (int s = 0; s < L.scale_bytes / 2; ++s) {
        uint8_t * ours = blk + 2 * R * s + 2 * r;
        PACK ? std::memcpy(ours, ggml + 2 * s, 2) : std::memcpy(ggml + 2 * s, ours, 2);
    }
    if (L.high_bytes) {
        uint8_t * ours = blk + R * L.scale_bytes + 4 * r;
        uint32_t  word = 0;
        if (PACK) {
            std::memcpy(&word, ggml + L.scale_bytes, 4);  // little-endian, as ggml reads it
            std::memset(ours, 0, 4);
        }
        for (int j = 0; j < 32; ++j) {
            const int byte = (j % 16) % 4, bit = (j % 16) / 4 + (j < 16 ? 0 : 4);
            if (PACK) {
                ours[byte] |= (uint8_t) (((word >> j) & 1) << bit);
            } else {
                word |= (uint32_t) ((ours[byte] >> bit) & 1) << j;
            }
        }
        if (!PACK) std::memcpy(ggml + L.scale_bytes, &word, 4);
    }
    for (int c = 0; c < L.chunks; ++c) {
        uint8_t * ours = blk + R * L.quant_offset() + 4 * R * c + 4 * r;
        uint8_t * theirs = ggml + L.quant_offset() + 4 * c;
        for (int i = 0; i < 4; ++i) (PACK ? ours[i] : theirs[i]) = (PACK ? theirs[i] : ours[i]) ^ flip;
    }
}

template <bool PACK>
void repack(int type, uint8_t * ggml, uint8_t * ours, int64_t M, int64_t K) {
    const int64_t nb = K / kBlock;
    const int     bb = layout(type).block_bytes;
    for (int64_t t0 = 0; t0 < M; t0 += kTile) {
        const int R    = (int) std::min<int64_t>(kTile, M - t0);
        uint8_t * tile = ours + tile_bytes(type, kTile, nb) * (t0 / kTile);
        for (int r = 0; r < R; ++r) {
            for (int64_t b = 0; b < nb; ++b) move_block<PACK>(type, ggml + ((t0 + r) * nb + b) * bb, tile + b * R * bb, R, r);
        }
    }
}

template <int T>
void gemm(const void * packed, int64_t M, int64_t K, const void * act, size_t act_stride, int64_t N, float * dst,
          int64_t dst_stride, int64_t row_begin, int64_t row_end) {
    const FlushDenormals flush;
    const int64_t nb   = K / kBlock;
    const int     path = current();
    const int     step = path == Q8_PATH_AVX512_VNNI ? 8 : 4;
    [[maybe_unused]] const bool alone = N <= 2;  // the x86 paths prefetch into L2 then
    thread_local std::vector<uint8_t> wide;
    Column cols[8];
    float  out[8][kTile];
    for (int64_t t0 = row_begin; t0 < row_end; t0 += kTile) {
        const int       R    = (int) std::min<int64_t>(kTile, M - t0);
        const uint8_t * tile = (const uint8_t *) packed + tile_bytes(T, kTile, nb) * (t0 / kTile);
        if (R < kTile && path != Q8_PATH_SCALAR) {
            widen_tile(T, tile, R, nb, wide);
            tile = wide.data();
        }
        for (int64_t j0 = 0; j0 < N; j0 += step) {
            const int nc = (int) std::min<int64_t>(step, N - j0);
            for (int j = 0; j < nc; ++j) cols[j] = column(act, act_stride, j0 + j, K);
            switch (path) {
#ifdef Q8_X86
                case Q8_PATH_AVX512_VNNI:
                    alone ? run_tile<Avx512, T, true>(nc, tile, nb, cols, out) : run_tile<Avx512, T, false>(nc, tile, nb, cols, out);
                    break;
                case Q8_PATH_AVX_VNNI:
                    alone ? run_tile<AvxVnni, T, true>(nc, tile, nb, cols, out) : run_tile<AvxVnni, T, false>(nc, tile, nb, cols, out);
                    break;
                case Q8_PATH_AVX2:
                    alone ? run_tile<Avx2, T, true>(nc, tile, nb, cols, out) : run_tile<Avx2, T, false>(nc, tile, nb, cols, out);
                    break;
#endif
#ifdef Q8_NEON
                case Q8_PATH_NEON: run_tile<Neon, T, false>(nc, tile, nb, cols, out); break;
#endif
                default: tile_scalar<T>(tile, R, nb, cols, nc, out); break;
            }
            for (int j = 0; j < nc; ++j) std::memcpy(dst + (j0 + j) * dst_stride + t0, out[j], R * sizeof(float));
        }
    }
}

}  // namespace

extern "C" {

size_t q8_block_bytes(int type) { return layout(type).block_bytes; }

int q8_set_path(int path) {
    if (path == Q8_PATH_AUTO) path = best();
    if (runnable(path)) current() = path;
    return current();
}

const char * q8_path_name(void) {
    switch (current()) {
        case Q8_PATH_AVX512_VNNI: return "avx512-vnni";
        case Q8_PATH_AVX_VNNI: return "avx-vnni";
        case Q8_PATH_AVX2: return "avx2";
        case Q8_PATH_NEON: return "neon";
        default: return "scalar";
    }
}

void q8_pack(int type, const void * blocks, void * packed, int64_t M, int64_t K) {
    repack<true>(type, (uint8_t *) blocks, (uint8_t *) packed, M, K);
}

void q8_unpack(int type, const void * packed, void * blocks, int64_t M, int64_t K) {
    repack<false>(type, (uint8_t *) blocks, (uint8_t *) packed, M, K);
}

size_t q8_act_bytes(int64_t K) {
    const size_t bytes = K + (K / kBlock) * (sizeof(float) + sizeof(int32_t) + sizeof(float));
    return (bytes + 63) & ~(size_t) 63;
}

void q8_quantize_act(const float * x, void * act, int64_t K) {
    const Column c   = column(act, 0, 0, K);
    int32_t *    sum = (int32_t *) c.sum;
    float *      d   = (float *) c.d;
    float *      ds  = (float *) c.ds;
#ifdef Q8_X86
    if (current() != Q8_PATH_SCALAR) {
        int8_activations::quantize_avx2(x, (int8_t *) c.q, d, sum, K);
    } else
#endif
        int8_activations::quantize_scalar(x, (int8_t *) c.q, d, sum, K);
    for (int64_t b = 0; b < K / kBlock; ++b) ds[b] = d[b] * (float) sum[b];  // Q4_1's and Q5_1's m term
}

void q8_gemm(int type, const void * packed, int64_t M, int64_t K, const void * act, size_t act_stride, int64_t N,
             float * dst, int64_t dst_stride, int64_t row_begin, int64_t row_end) {
    switch (type) {
        case Q8_TYPE_Q8_0: gemm<Q8_TYPE_Q8_0>(packed, M, K, act, act_stride, N, dst, dst_stride, row_begin, row_end); break;
        case Q8_TYPE_Q4_0: gemm<Q8_TYPE_Q4_0>(packed, M, K, act, act_stride, N, dst, dst_stride, row_begin, row_end); break;
        case Q8_TYPE_Q5_0: gemm<Q8_TYPE_Q5_0>(packed, M, K, act, act_stride, N, dst, dst_stride, row_begin, row_end); break;
        case Q8_TYPE_Q5_1: gemm<Q8_TYPE_Q5_1>(packed, M, K, act, act_stride, N, dst, dst_stride, row_begin, row_end); break;
        default: gemm<Q8_TYPE_Q4_1>(packed, M, K, act, act_stride, N, dst, dst_stride, row_begin, row_end); break;
    }
}

}  // extern "C"
