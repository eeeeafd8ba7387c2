// Q4_K / Q6_K x int8 small-batch matrix multiply; layouts and contract in kquant-gemm.h.
//
// Arithmetic, identical on every path so the paths agree bit for bit (a = int8 activations, da their block's
// scale, everything integer exact):
//   Q4_K, per sub-block s of 32:  isum = sum q * a                          (q the unsigned nibble)
//         acc = fma(float(isum), (d * scale_s) * da, acc);  acc = fma(-(dmin * min_s), da * sum(a), acc)
//   Q6_K, per block of 32 (sub-blocks s0, s1 of 16):
//         isum = scale_s0 * (sum q * a - 32 sum a)_s0 + scale_s1 * (...)_s1   (q unsigned, 0..63)
//         acc = fma(float(isum), d * da, acc)
// d * scale and dmin * min are exact in float (an f16 times a 6- or 8-bit integer), so computing them once per
// tile instead of per column changes nothing. The unsigned weights are vpdpbusd's unsigned operand; the -32
// of Q6_K comes in as the activation side's per-16 sum, computed once at quantization. Each column has its own
// accumulators, so its result does not depend on how many columns share the pass or which thread owns the tile.
#include "kquant-gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#    include <immintrin.h>
#    define KQUANT_X86 1
#elif defined(__aarch64__)
#    include <arm_neon.h>
#    define KQUANT_NEON 1
#    include "arm-features.h"
#endif

namespace {

constexpr int    kTile  = KQUANT_TILE_ROWS;
constexpr int    kSuper = KQUANT_SUPER;
constexpr int    kBlock = 32;
constexpr size_t kQ4Bytes = 144, kQ5Bytes = 176, kQ6Bytes = 210;
// Software prefetch this far ahead in the weight stream (as the MXFP4 kernel: DRAM and compute overlap).
constexpr int kPrefetchBytes = 4096;

// Offsets inside one super-block of a tile with R rows, in units of R bytes.
namespace q4 {
constexpr int kD = 0, kDmin = 2, kScaleLow = 4, kMinLow = 8, kHigh = 12, kNibbles = 16, kFifthBits = 144;
inline size_t chunk(int p, int c) { return kNibbles + (size_t) (8 * p + c) * 4; }
inline size_t fifth_chunk(int c) { return kFifthBits + (size_t) c * 4; }  // Q5_K: bytes qh[4c..4c+3]
}  // namespace q4
namespace q6 {
constexpr int kD = 0, kScales = 2, kLow = 18, kHighBits = 146;
inline size_t low_chunk(int n, int k, int c) { return kLow + (size_t) ((2 * n + k) * 8 + c) * 4; }
inline size_t high_chunk(int n, int c) { return kHighBits + (size_t) (8 * n + c) * 4; }
}  // namespace q6

size_t block_bytes(int type) { return type == KQUANT_Q4_K ? kQ4Bytes : type == KQUANT_Q5_K ? kQ5Bytes : kQ6Bytes; }

size_t tile_bytes(int type, int rows, int64_t nsb) { return (size_t) rows * nsb * block_bytes(type); }

// IEEE half -> float, exact (subnormal halves are normal floats).
float half_to_float(const uint8_t * p) {
    const uint32_t h = p[0] | (p[1] << 8);
    const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 31, man = h & 1023;
    float v;
    if (exp == 0) {
        v = std::ldexp((float) man, -24);
    } else if (exp == 31) {
        v = man ? NAN : INFINITY;
    } else {
        uint32_t bits = ((exp + 112) << 23) | (man << 13);
        std::memcpy(&v, &bits, 4);
    }
    return sign ? -v : v;
}

// ggml's 12 scale bytes <-> 8 six-bit scales and 8 mins (a bijection: all 96 bits are used once).
void decode_scales(const uint8_t * s, uint8_t * sc, uint8_t * m) {
    for (int j = 0; j < 4; ++j) {
        sc[j] = s[j] & 63, m[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 15) | ((s[j] >> 6) << 4);
        m[j + 4]  = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
    }
}
void encode_scales(const uint8_t * sc, const uint8_t * m, uint8_t * s) {
    for (int j = 0; j < 4; ++j) {
        s[j]     = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
        s[j + 4] = (m[j] & 63) | ((m[j + 4] >> 4) << 6);
        s[j + 8] = (sc[j + 4] & 15) | ((m[j + 4] & 15) << 4);
    }
}

// One super-block of R rows between ggml blocks (rows[r]) and a tile's packed form, in either direction. Q5_K is
// Q4_K's block with the 32 bytes of fifth bits (qh) before the nibbles; its tile adds them after Q4_K's fields.
template <bool Q5>
void move_q4(uint8_t * const * rows, int R, uint8_t * tile, bool to_tile) {
    const int nibbles = Q5 ? 48 : 16;
    for (int r = 0; r < R; ++r) {
        uint8_t * b = rows[r];
        auto move = [&](size_t at, uint8_t * row_bytes, size_t n) {
            if (to_tile) std::memcpy(tile + at, row_bytes, n); else std::memcpy(row_bytes, tile + at, n);
        };
        move(q4::kD * R + 2 * r, b, 2);
        move(q4::kDmin * R + 2 * r, b + 2, 2);
        for (int p = 0; p < 4; ++p) {
            for (int c = 0; c < 8; ++c) move(q4::chunk(p, c) * R + 4 * r, b + nibbles + 32 * p + 4 * c, 4);
        }
        for (int c = 0; c < 8 && Q5; ++c) move(q4::fifth_chunk(c) * R + 4 * r, b + 16 + 4 * c, 4);
        uint8_t sc[8], m[8];
        if (to_tile) {
            decode_scales(b + 4, sc, m);
            for (int p = 0; p < 4; ++p) {
                tile[(q4::kScaleLow + p) * R + r] = (sc[2 * p] & 15) | (sc[2 * p + 1] & 15) << 4;
                tile[(q4::kMinLow + p) * R + r]   = (m[2 * p] & 15) | (m[2 * p + 1] & 15) << 4;
                tile[(q4::kHigh + p) * R + r] =
                    (sc[2 * p] >> 4) | (sc[2 * p + 1] >> 4) << 2 | (m[2 * p] >> 4) << 4 | (m[2 * p + 1] >> 4) << 6;
            }
        } else {
            for (int p = 0; p < 4; ++p) {
                const uint8_t sl = tile[(q4::kScaleLow + p) * R + r], ml = tile[(q4::kMinLow + p) * R + r];
                const uint8_t h = tile[(q4::kHigh + p) * R + r];
                sc[2 * p] = (sl & 15) | (h & 3) << 4, sc[2 * p + 1] = (sl >> 4) | (h >> 2 & 3) << 4;
                m[2 * p]  = (ml & 15) | (h >> 4 & 3) << 4, m[2 * p + 1] = (ml >> 4) | (h >> 6) << 4;
            }
            encode_scales(sc, m, b + 4);
        }
    }
}

// Q6_K's packing is a byte permutation (block: ql at 0, qh at 128, scales at 192, d at 208).
void move_q6(uint8_t * const * rows, int R, uint8_t * tile, bool to_tile) {
    for (int r = 0; r < R; ++r) {
        uint8_t * b = rows[r];
        auto move = [&](size_t at, uint8_t * row_bytes, size_t n) {
            if (to_tile) std::memcpy(tile + at, row_bytes, n); else std::memcpy(row_bytes, tile + at, n);
        };
        move(q6::kD * R + 2 * r, b + 208, 2);
        for (int s = 0; s < 16; ++s) move((q6::kScales + s) * R + r, b + 192 + s, 1);
        for (int n = 0; n < 2; ++n) {
            for (int c = 0; c < 8; ++c) {
                for (int k = 0; k < 2; ++k) move(q6::low_chunk(n, k, c) * R + 4 * r, b + 64 * n + 32 * k + 4 * c, 4);
                move(q6::high_chunk(n, c) * R + 4 * r, b + 128 + 32 * n + 4 * c, 4);
            }
        }
    }
}

// Every tile of a matrix between ggml rows and our layout.
void move_matrix(int type, uint8_t * rows_base, uint8_t * packed, int64_t M, int64_t K, bool to_tile) {
    const int64_t nsb = K / kSuper;
    const size_t  bb  = block_bytes(type);
    for (int64_t t0 = 0; t0 < M; t0 += kTile) {
        const int R    = (int) std::min<int64_t>(kTile, M - t0);
        uint8_t * tile = packed + tile_bytes(type, kTile, nsb) * (t0 / kTile);
        for (int64_t sb = 0; sb < nsb; ++sb) {
            uint8_t * rows[kTile];
            for (int r = 0; r < R; ++r) rows[r] = rows_base + ((t0 + r) * nsb + sb) * bb;
            (type == KQUANT_Q4_K ? move_q4<false> : type == KQUANT_Q5_K ? move_q4<true> : move_q6)(rows, R, tile + sb * R * bb,
                                                                                                   to_tile);
        }
    }
}

struct Column {
    const int8_t *  q;
    const float *   d;       // per 32
    const float *   dsum;    // per 32: d * sum(q)
    const int32_t * bias16;  // per 16: -32 * sum(q)
};

Column column(const void * act, size_t stride, int64_t j, int64_t K) {
    const int8_t * q = (const int8_t *) act + j * stride;
    const float *  d = (const float *) (q + K);
    return {q, d, d + K / kBlock, (const int32_t *) (d + 2 * (K / kBlock))};
}

// ---------------------------------------------------------------- scalar reference

template <bool Q5>
void q4_scalar(const uint8_t * tile, int R, int64_t nsb, const Column * cols, int nc, float (*out)[kTile]) {
    for (int j = 0; j < nc; ++j) {
        for (int r = 0; r < R; ++r) {
            float acc = 0.0f;
            for (int64_t sb = 0; sb < nsb; ++sb) {
                const uint8_t * blk  = tile + sb * R * (Q5 ? kQ5Bytes : kQ4Bytes);
                const float     d    = half_to_float(blk + q4::kD * R + 2 * r);
                const float     dmin = half_to_float(blk + q4::kDmin * R + 2 * r);
                for (int s = 0; s < 8; ++s) {
                    const int     p = s / 2, shift = 4 * (s & 1);
                    const uint8_t h = blk[(q4::kHigh + p) * R + r];
                    const int sc = (blk[(q4::kScaleLow + p) * R + r] >> shift & 15) | (h >> (2 * (s & 1)) & 3) << 4;
                    const int m  = (blk[(q4::kMinLow + p) * R + r] >> shift & 15) | (h >> (4 + 2 * (s & 1)) & 3) << 4;
                    const int64_t b = sb * 8 + s;
                    const int8_t * a = cols[j].q + b * kBlock;
                    int32_t isum = 0;
                    for (int c = 0; c < 8; ++c) {
                        for (int i = 0; i < 4; ++i) {
                            const int fifth = Q5 ? (blk[q4::fifth_chunk(c) * R + 4 * r + i] >> s & 1) << 4 : 0;
                            isum += ((blk[q4::chunk(p, c) * R + 4 * r + i] >> shift & 15) | fifth) * a[4 * c + i];
                        }
                    }
                    const float t = (d * (float) sc) * cols[j].d[b];
                    acc = std::fma((float) isum, t, acc);
                    acc = std::fma(-(dmin * (float) m), cols[j].dsum[b], acc);
                }
            }
            out[j][r] = acc;
        }
    }
}

void q6_scalar(const uint8_t * tile, int R, int64_t nsb, const Column * cols, int nc, float (*out)[kTile]) {
    for (int j = 0; j < nc; ++j) {
        for (int r = 0; r < R; ++r) {
            float acc = 0.0f;
            for (int64_t sb = 0; sb < nsb; ++sb) {
                const uint8_t * blk = tile + sb * R * kQ6Bytes;
                const float     d   = half_to_float(blk + q6::kD * R + 2 * r);
                for (int g = 0; g < 8; ++g) {  // block of 32: n = g / 4 picks the half, k2 = g % 4 the nibble and bits
                    const int     n = g / 4, k2 = g % 4;
                    const int64_t b = sb * 8 + g;
                    const int8_t * a = cols[j].q + b * kBlock;
                    int32_t        s[2] = {cols[j].bias16[2 * b], cols[j].bias16[2 * b + 1]};
                    for (int c = 0; c < 8; ++c) {
                        for (int i = 0; i < 4; ++i) {
                            const uint8_t lo = blk[q6::low_chunk(n, k2 & 1, c) * R + 4 * r + i];
                            const uint8_t hi = blk[q6::high_chunk(n, c) * R + 4 * r + i];
                            const int     q  = (lo >> (4 * (k2 >> 1)) & 15) | (hi >> (2 * k2) & 3) << 4;
                            s[c / 4] += q * a[4 * c + i];
                        }
                    }
                    const int32_t isum = s[0] * (int8_t) blk[(q6::kScales + 2 * g) * R + r] +
                                         s[1] * (int8_t) blk[(q6::kScales + 2 * g + 1) * R + r];
                    acc = std::fma((float) isum, d * cols[j].d[b], acc);
                }
            }
            out[j][r] = acc;
        }
    }
}

// The lines of part `part` of 8 of a super-block's tile, kPrefetchBytes ahead: spread over the super-block's 8
// steps rather than all at its start, so the prefetches do not queue up behind each other. The kernels that
// split a tile into row groups prefetch during the first group, which touches every line.
inline void prefetch_part(const uint8_t * blk, size_t bytes, int part) {
    for (size_t l = bytes * part / 8 / 64 * 64; l < bytes * (part + 1) / 8; l += 64) {
        __builtin_prefetch(blk + kPrefetchBytes + l, 0, 3);
    }
}

using TileFn = void (*)(const uint8_t *, int64_t, const Column *, float (*)[kTile]);

#ifdef KQUANT_X86
inline int32_t load_i32(const int8_t * p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}


// ---------------------------------------------------------------- AVX512-VNNI: one zmm lane per row of the tile

// A 6-bit scale or min as float: 4 low bits from l4 >> lshift, 2 high bits from h >> hshift.
__attribute__((target("avx512f"))) inline __m512 six512(__m512i l4, int lshift, __m512i h, int hshift) {
    const __m512i l = _mm512_and_si512(_mm512_srli_epi32(l4, lshift), _mm512_set1_epi32(15));
    const __m512i hi = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, hshift), _mm512_set1_epi32(3)), 4);
    return _mm512_cvtepi32_ps(_mm512_or_si512(l, hi));
}

__attribute__((target("avx512f"))) inline __m512i bytes16(const uint8_t * p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *) p));
}

// A super-block's 8 scale factors d * scale and 8 min factors dmin * min, for the 16 rows.
__attribute__((target("avx512f,avx512bw"))) inline void q4_factors512(const uint8_t * blk, __m512 * wsc, __m512 * wmin) {
    const __m512 d    = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) (blk + q4::kD * kTile)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) (blk + q4::kDmin * kTile)));
    for (int p = 0; p < 4; ++p) {
        const __m512i sl = bytes16(blk + (q4::kScaleLow + p) * kTile), ml = bytes16(blk + (q4::kMinLow + p) * kTile);
        const __m512i h  = bytes16(blk + (q4::kHigh + p) * kTile);
        wsc[2 * p]      = _mm512_mul_ps(d, six512(sl, 0, h, 0));
        wsc[2 * p + 1]  = _mm512_mul_ps(d, six512(sl, 4, h, 2));
        wmin[2 * p]     = _mm512_mul_ps(dmin, six512(ml, 0, h, 4));
        wmin[2 * p + 1] = _mm512_mul_ps(dmin, six512(ml, 4, h, 6));
    }
}

// Q5_K's fifth bit of sub-block s (bit s of its qh byte) moved to bit 4, with 16-bit shifts (the mask drops what
// crosses from the neighbouring byte).
__attribute__((target("avx512f,avx512bw"))) inline __m512i fifth512(__m512i qh, int s) {
    const __m512i v = s <= 4 ? _mm512_slli_epi16(qh, 4 - s) : _mm512_srli_epi16(qh, s - 4);
    return _mm512_and_si512(v, _mm512_set1_epi8(0x10));
}

template <int NC, bool Q5>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void q4_avx512(const uint8_t * tile, int64_t nsb,
                                                                       const Column * cols, float (*out)[kTile]) {
    constexpr size_t kBytes = Q5 ? kQ5Bytes : kQ4Bytes;
    const __m512i    low    = _mm512_set1_epi8(0x0f);
    __m512        acc[NC];
#    pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const uint8_t * blk = tile + sb * kTile * kBytes;
        __m512 wsc[8], wmin[8];
        q4_factors512(blk, wsc, wmin);
        for (int s = 0; s < 8; ++s) {
            prefetch_part(blk, kTile * kBytes, s);
            __m512i w[8];
#    pragma GCC unroll 8
            for (int c = 0; c < 8; ++c) {
                const __m512i v = _mm512_loadu_si512(blk + q4::chunk(s / 2, c) * kTile);
                w[c] = _mm512_and_si512(s & 1 ? _mm512_srli_epi16(v, 4) : v, low);
                if (Q5) w[c] = _mm512_or_si512(w[c], fifth512(_mm512_loadu_si512(blk + q4::fifth_chunk(c) * kTile), s));
            }
            const int64_t b = sb * 8 + s;
#    pragma GCC unroll 8
            for (int j = 0; j < NC; ++j) {
                const int8_t * a  = cols[j].q + b * kBlock;
                __m512i        s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
#    pragma GCC unroll 4
                for (int c = 0; c < 8; c += 2) {
                    s0 = _mm512_dpbusd_epi32(s0, w[c], _mm512_set1_epi32(load_i32(a + 4 * c)));
                    s1 = _mm512_dpbusd_epi32(s1, w[c + 1], _mm512_set1_epi32(load_i32(a + 4 * c + 4)));
                }
                const __m512 t = _mm512_mul_ps(wsc[s], _mm512_set1_ps(cols[j].d[b]));
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), t, acc[j]);
                acc[j] = _mm512_fnmadd_ps(wmin[s], _mm512_set1_ps(cols[j].dsum[b]), acc[j]);
            }
        }
    }
#    pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) _mm512_storeu_ps(out[j], acc[j]);
}

// Q6_K's 6-bit values from low-nibble and high-bit bytes: ((lo >> 4 * (k2 / 2)) & 15) | ((hi >> 2 * k2) & 3) << 4,
// with 16-bit shifts (the masks drop what crosses from the neighbouring byte).
__attribute__((target("avx512f,avx512bw"))) inline __m512i q6_values512(__m512i lo, __m512i hi, int k2) {
    const __m512i l = _mm512_and_si512(k2 >= 2 ? _mm512_srli_epi16(lo, 4) : lo, _mm512_set1_epi8(0x0f));
    const __m512i h = k2 == 3 ? _mm512_srli_epi16(hi, 2) : k2 == 2 ? hi : _mm512_slli_epi16(hi, 4 - 2 * k2);
    return _mm512_or_si512(l, _mm512_and_si512(h, _mm512_set1_epi8(0x30)));
}

template <int NC>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void q6_avx512(const uint8_t * tile, int64_t nsb,
                                                                       const Column * cols, float (*out)[kTile]) {
    __m512 acc[NC];
#    pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < nsb; ++sb) {
        const uint8_t * blk = tile + sb * kTile * kQ6Bytes;
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) (blk + q6::kD * kTile)));
        for (int g = 0; g < 8; ++g) {
            prefetch_part(blk, kTile * kQ6Bytes, g);
            const int n = g / 4, k2 = g % 4;
            __m512i   w[8];
#    pragma GCC unroll 8
            for (int c = 0; c < 8; ++c) {
                const __m512i lo = _mm512_loadu_si512(blk + q6::low_chunk(n, k2 & 1, c) * kTile);
                const __m512i hi = _mm512_loadu_si512(blk + q6::high_chunk(n, c) * kTile);
                w[c] = q6_values512(lo, hi, k2);
            }
            const __m512i sc0 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *) (blk + (q6::kScales + 2 * g) * kTile)));
            const __m512i sc1 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *) (blk + (q6::kScales + 2 * g + 1) * kTile)));
            const int64_t b = sb * 8 + g;
#    pragma GCC unroll 8
            for (int j = 0; j < NC; ++j) {
                const int8_t * a  = cols[j].q + b * kBlock;
                __m512i        s0 = _mm512_set1_epi32(cols[j].bias16[2 * b]);
                __m512i        s1 = _mm512_set1_epi32(cols[j].bias16[2 * b + 1]);
#    pragma GCC unroll 4
                for (int c = 0; c < 4; ++c) {
                    s0 = _mm512_dpbusd_epi32(s0, w[c], _mm512_set1_epi32(load_i32(a + 4 * c)));
                    s1 = _mm512_dpbusd_epi32(s1, w[c + 4], _mm512_set1_epi32(load_i32(a + 16 + 4 * c)));
                }
                const __m512i isum = _mm512_add_epi32(_mm512_mullo_epi32(s0, sc0), _mm512_mullo_epi32(s1, sc1));
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, _mm512_set1_ps(cols[j].d[b])), acc[j]);
            }
        }
    }
#    pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) _mm512_storeu_ps(out[j], acc[j]);
}

// ---------------------------------------------------------------- AVX2 / AVX-VNNI: the tile in two halves of 8 rows

// Four u8 x s8 products per int32 lane added to acc: vpdpbusd where the CPU has AVX-VNNI; else vpmaddubsw
// (pairs into int16: at most 2 * 63 * 127, no saturation) and vpmaddwd by ones, the same exact integer.
template <bool VNNI>
__attribute__((target("avx2,fma,avxvnni"))) inline __m256i dot4(__m256i acc, __m256i w, __m256i a) {
    if constexpr (VNNI) {
        return _mm256_dpbusd_avx_epi32(acc, w, a);
    } else {
        return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1)));
    }
}

__attribute__((target("avx2"))) inline __m256i q6_values256(__m256i lo, __m256i hi, int k2) {
    const __m256i l = _mm256_and_si256(k2 >= 2 ? _mm256_srli_epi16(lo, 4) : lo, _mm256_set1_epi8(0x0f));
    const __m256i h = k2 == 3 ? _mm256_srli_epi16(hi, 2) : k2 == 2 ? hi : _mm256_slli_epi16(hi, 4 - 2 * k2);
    return _mm256_or_si256(l, _mm256_and_si256(h, _mm256_set1_epi8(0x30)));
}

__attribute__((target("avx2,f16c"))) inline __m256 halves8(const uint8_t * p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) p));
}
__attribute__((target("avx2"))) inline __m256i bytes8(const uint8_t * p, bool is_signed) {
    const __m128i v = _mm_loadl_epi64((const __m128i *) p);
    return is_signed ? _mm256_cvtepi8_epi32(v) : _mm256_cvtepu8_epi32(v);
}

__attribute__((target("avx2"))) inline __m256 six256(__m256i l4, int lshift, __m256i h, int hshift) {
    const __m256i l  = _mm256_and_si256(_mm256_srli_epi32(l4, lshift), _mm256_set1_epi32(15));
    const __m256i hi = _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, hshift), _mm256_set1_epi32(3)), 4);
    return _mm256_cvtepi32_ps(_mm256_or_si256(l, hi));
}

// Both 256-bit paths compile from these templates with AVX-VNNI allowed; the AVX2 instances contain no
// VNNI instruction (dot4<false> above; tests/test_native_kquant.py disassembles them to check).
__attribute__((target("avx2"))) inline __m256i fifth256(__m256i qh, int s) {
    const __m256i v = s <= 4 ? _mm256_slli_epi16(qh, 4 - s) : _mm256_srli_epi16(qh, s - 4);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

template <int NC, bool VNNI, bool Q5>
__attribute__((target("avx2,fma,f16c,avxvnni"))) void q4_avx256(const uint8_t * tile, int64_t nsb, const Column * cols,
                                                                float (*out)[kTile]) {
    constexpr size_t kBytes = Q5 ? kQ5Bytes : kQ4Bytes;
    const __m256i    low    = _mm256_set1_epi8(0x0f);
    for (int h = 0; h < 2; ++h) {
        __m256 acc[NC];
#    pragma GCC unroll 4
        for (int j = 0; j < NC; ++j) acc[j] = _mm256_setzero_ps();
        for (int64_t sb = 0; sb < nsb; ++sb) {
            const uint8_t * blk = tile + sb * kTile * kBytes;
            const __m256 d = halves8(blk + q4::kD * kTile + 16 * h), dmin = halves8(blk + q4::kDmin * kTile + 16 * h);
            __m256       wsc[8], wmin[8];
            for (int p = 0; p < 4; ++p) {
                const __m256i sl = bytes8(blk + (q4::kScaleLow + p) * kTile + 8 * h, false);
                const __m256i ml = bytes8(blk + (q4::kMinLow + p) * kTile + 8 * h, false);
                const __m256i hb = bytes8(blk + (q4::kHigh + p) * kTile + 8 * h, false);
                wsc[2 * p]      = _mm256_mul_ps(d, six256(sl, 0, hb, 0));
                wsc[2 * p + 1]  = _mm256_mul_ps(d, six256(sl, 4, hb, 2));
                wmin[2 * p]     = _mm256_mul_ps(dmin, six256(ml, 0, hb, 4));
                wmin[2 * p + 1] = _mm256_mul_ps(dmin, six256(ml, 4, hb, 6));
            }
            for (int s = 0; s < 8; ++s) {
                if (h == 0) prefetch_part(blk, kTile * kBytes, s);
                __m256i w[8];
#    pragma GCC unroll 8
                for (int c = 0; c < 8; ++c) {
                    const __m256i v = _mm256_loadu_si256((const __m256i *) (blk + q4::chunk(s / 2, c) * kTile + 32 * h));
                    w[c] = _mm256_and_si256(s & 1 ? _mm256_srli_epi16(v, 4) : v, low);
                    if (Q5) {
                        const __m256i qh = _mm256_loadu_si256((const __m256i *) (blk + q4::fifth_chunk(c) * kTile + 32 * h));
                        w[c] = _mm256_or_si256(w[c], fifth256(qh, s));
                    }
                }
                const int64_t b = sb * 8 + s;
#    pragma GCC unroll 4
                for (int j = 0; j < NC; ++j) {
                    const int8_t * a  = cols[j].q + b * kBlock;
                    __m256i        s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
#    pragma GCC unroll 4
                    for (int c = 0; c < 8; c += 2) {
                        s0 = dot4<VNNI>(s0, w[c], _mm256_set1_epi32(load_i32(a + 4 * c)));
                        s1 = dot4<VNNI>(s1, w[c + 1], _mm256_set1_epi32(load_i32(a + 4 * c + 4)));
                    }
                    const __m256 t = _mm256_mul_ps(wsc[s], _mm256_set1_ps(cols[j].d[b]));
                    acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1)), t, acc[j]);
                    acc[j] = _mm256_fnmadd_ps(wmin[s], _mm256_set1_ps(cols[j].dsum[b]), acc[j]);
                }
            }
        }
#    pragma GCC unroll 4
        for (int j = 0; j < NC; ++j) _mm256_storeu_ps(out[j] + 8 * h, acc[j]);
    }
}

template <int NC, bool VNNI>
__attribute__((target("avx2,fma,f16c,avxvnni"))) void q6_avx256(const uint8_t * tile, int64_t nsb, const Column * cols,
                                                                float (*out)[kTile]) {
    for (int h = 0; h < 2; ++h) {
        __m256 acc[NC];
#    pragma GCC unroll 4
        for (int j = 0; j < NC; ++j) acc[j] = _mm256_setzero_ps();
        for (int64_t sb = 0; sb < nsb; ++sb) {
            const uint8_t * blk = tile + sb * kTile * kQ6Bytes;
            const __m256 d = halves8(blk + q6::kD * kTile + 16 * h);
            for (int g = 0; g < 8; ++g) {
                if (h == 0) prefetch_part(blk, kTile * kQ6Bytes, g);
                const int n = g / 4, k2 = g % 4;
                __m256i   w[8];
#    pragma GCC unroll 8
                for (int c = 0; c < 8; ++c) {
                    const __m256i lo = _mm256_loadu_si256((const __m256i *) (blk + q6::low_chunk(n, k2 & 1, c) * kTile + 32 * h));
                    const __m256i hi = _mm256_loadu_si256((const __m256i *) (blk + q6::high_chunk(n, c) * kTile + 32 * h));
                    w[c] = q6_values256(lo, hi, k2);
                }
                const __m256i sc0 = bytes8(blk + (q6::kScales + 2 * g) * kTile + 8 * h, true);
                const __m256i sc1 = bytes8(blk + (q6::kScales + 2 * g + 1) * kTile + 8 * h, true);
                const int64_t b = sb * 8 + g;
#    pragma GCC unroll 4
                for (int j = 0; j < NC; ++j) {
                    const int8_t * a  = cols[j].q + b * kBlock;
                    __m256i        s0 = _mm256_set1_epi32(cols[j].bias16[2 * b]);
                    __m256i        s1 = _mm256_set1_epi32(cols[j].bias16[2 * b + 1]);
#    pragma GCC unroll 4
                    for (int c = 0; c < 4; ++c) {
                        s0 = dot4<VNNI>(s0, w[c], _mm256_set1_epi32(load_i32(a + 4 * c)));
                        s1 = dot4<VNNI>(s1, w[c + 4], _mm256_set1_epi32(load_i32(a + 16 + 4 * c)));
                    }
                    const __m256i isum = _mm256_add_epi32(_mm256_mullo_epi32(s0, sc0), _mm256_mullo_epi32(s1, sc1));
                    acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(d, _mm256_set1_ps(cols[j].d[b])), acc[j]);
                }
            }
        }
#    pragma GCC unroll 4
        for (int j = 0; j < NC; ++j) _mm256_storeu_ps(out[j] + 8 * h, acc[j]);
    }
}

constexpr int kStep512 = 8, kStep256 = 4;
const TileFn kQ4Avx512[kStep512] = {q4_avx512<1, false>, q4_avx512<2, false>, q4_avx512<3, false>, q4_avx512<4, false>,
                                    q4_avx512<5, false>, q4_avx512<6, false>, q4_avx512<7, false>, q4_avx512<8, false>};
const TileFn kQ5Avx512[kStep512] = {q4_avx512<1, true>, q4_avx512<2, true>, q4_avx512<3, true>, q4_avx512<4, true>,
                                    q4_avx512<5, true>, q4_avx512<6, true>, q4_avx512<7, true>, q4_avx512<8, true>};
const TileFn kQ6Avx512[kStep512] = {q6_avx512<1>, q6_avx512<2>, q6_avx512<3>, q6_avx512<4>,
                                    q6_avx512<5>, q6_avx512<6>, q6_avx512<7>, q6_avx512<8>};
const TileFn kQ4AvxVnni[kStep256] = {q4_avx256<1, true, false>, q4_avx256<2, true, false>, q4_avx256<3, true, false>,
                                     q4_avx256<4, true, false>};
const TileFn kQ5AvxVnni[kStep256] = {q4_avx256<1, true, true>, q4_avx256<2, true, true>, q4_avx256<3, true, true>,
                                     q4_avx256<4, true, true>};
const TileFn kQ6AvxVnni[kStep256] = {q6_avx256<1, true>, q6_avx256<2, true>, q6_avx256<3, true>, q6_avx256<4, true>};
const TileFn kQ4Avx2[kStep256] = {q4_avx256<1, false, false>, q4_avx256<2, false, false>, q4_avx256<3, false, false>,
                                  q4_avx256<4, false, false>};
const TileFn kQ5Avx2[kStep256] = {q4_avx256<1, false, true>, q4_avx256<2, false, true>, q4_avx256<3, false, true>,
                                  q4_avx256<4, false, true>};
const TileFn kQ6Avx2[kStep256] = {q6_avx256<1, false>, q6_avx256<2, false>, q6_avx256<3, false>, q6_avx256<4, false>};
#endif  // KQUANT_X86

#ifdef KQUANT_NEON
// ---------------------------------------------------------------- NEON with sdot: the tile in quarters of 4 rows
// The unsigned weights (at most 63) are valid signed int8, so sdot gives the same integers as vpdpbusd.

#    define KQUANT_DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))

KQUANT_DOTPROD inline float32x4_t halves4(const uint8_t * p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *) p)));
}
KQUANT_DOTPROD inline int32x4_t bytes4(const uint8_t * p, bool is_signed) {
    uint8x8_t v = vdup_n_u8(0);
    v = vreinterpret_u8_u32(vld1_lane_u32((const uint32_t *) p, vreinterpret_u32_u8(v), 0));
    if (is_signed) return vmovl_s16(vget_low_s16(vmovl_s8(vreinterpret_s8_u8(v))));
    return vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(vmovl_u8(v))));
}

KQUANT_DOTPROD inline float32x4_t six_neon(int32x4_t l4, int lshift, int32x4_t h, int hshift) {
    const int32x4_t l  = vandq_s32(vshlq_s32(l4, vdupq_n_s32(-lshift)), vdupq_n_s32(15));
    const int32x4_t hi = vshlq_n_s32(vandq_s32(vshlq_s32(h, vdupq_n_s32(-hshift)), vdupq_n_s32(3)), 4);
    return vcvtq_f32_s32(vorrq_s32(l, hi));
}

// Four partial sums of a block's 8 vectors (values 4c..4c+3, c = 0..7) with 32 activations.
KQUANT_DOTPROD inline void dot8(const int8x16_t * w, const int8_t * a, int32x4_t & s0, int32x4_t & s1) {
    const int8x16_t a0 = vld1q_s8(a), a1 = vld1q_s8(a + 16);
    s0 = vdotq_laneq_s32(s0, w[0], a0, 0);
    s0 = vdotq_laneq_s32(s0, w[1], a0, 1);
    s0 = vdotq_laneq_s32(s0, w[2], a0, 2);
    s0 = vdotq_laneq_s32(s0, w[3], a0, 3);
    s1 = vdotq_laneq_s32(s1, w[4], a1, 0);
    s1 = vdotq_laneq_s32(s1, w[5], a1, 1);
    s1 = vdotq_laneq_s32(s1, w[6], a1, 2);
    s1 = vdotq_laneq_s32(s1, w[7], a1, 3);
}

template <int NC, bool Q5>
KQUANT_DOTPROD void q4_neon(const uint8_t * tile, int64_t nsb, const Column * cols, float (*out)[kTile]) {
    constexpr size_t kBytes = Q5 ? kQ5Bytes : kQ4Bytes;
    const uint8x16_t low = vdupq_n_u8(0x0f), bit4 = vdupq_n_u8(0x10);
    for (int quarter = 0; quarter < 4; ++quarter) {
        float32x4_t acc[NC];
        for (int j = 0; j < NC; ++j) acc[j] = vdupq_n_f32(0.0f);
        for (int64_t sb = 0; sb < nsb; ++sb) {
            const uint8_t * blk = tile + sb * kTile * kBytes;
            const float32x4_t d    = halves4(blk + q4::kD * kTile + 8 * quarter);
            const float32x4_t dmin = halves4(blk + q4::kDmin * kTile + 8 * quarter);
            float32x4_t       wsc[8], wmin[8];
            for (int p = 0; p < 4; ++p) {
                const int32x4_t sl = bytes4(blk + (q4::kScaleLow + p) * kTile + 4 * quarter, false);
                const int32x4_t ml = bytes4(blk + (q4::kMinLow + p) * kTile + 4 * quarter, false);
                const int32x4_t hb = bytes4(blk + (q4::kHigh + p) * kTile + 4 * quarter, false);
                wsc[2 * p]      = vmulq_f32(d, six_neon(sl, 0, hb, 0));
                wsc[2 * p + 1]  = vmulq_f32(d, six_neon(sl, 4, hb, 2));
                wmin[2 * p]     = vmulq_f32(dmin, six_neon(ml, 0, hb, 4));
                wmin[2 * p + 1] = vmulq_f32(dmin, six_neon(ml, 4, hb, 6));
            }
            for (int s = 0; s < 8; ++s) {
                if (quarter == 0) prefetch_part(blk, kTile * kBytes, s);
                int8x16_t w[8];
                for (int c = 0; c < 8; ++c) {
                    const uint8x16_t v = vld1q_u8(blk + q4::chunk(s / 2, c) * kTile + 16 * quarter);
                    uint8x16_t       q = s & 1 ? vshrq_n_u8(v, 4) : vandq_u8(v, low);
                    if (Q5) {  // bit s of the qh byte to bit 4
                        const uint8x16_t qh = vld1q_u8(blk + q4::fifth_chunk(c) * kTile + 16 * quarter);
                        q = vorrq_u8(q, vandq_u8(vshlq_u8(qh, vdupq_n_s8((int8_t) (4 - s))), bit4));
                    }
                    w[c] = vreinterpretq_s8_u8(q);
                }
                const int64_t b = sb * 8 + s;
                for (int j = 0; j < NC; ++j) {
                    int32x4_t s0 = vdupq_n_s32(0), s1 = vdupq_n_s32(0);
                    dot8(w, cols[j].q + b * kBlock, s0, s1);
                    const float32x4_t t = vmulq_n_f32(wsc[s], cols[j].d[b]);
                    acc[j] = vfmaq_f32(acc[j], vcvtq_f32_s32(vaddq_s32(s0, s1)), t);
                    acc[j] = vfmsq_f32(acc[j], wmin[s], vdupq_n_f32(cols[j].dsum[b]));
                }
            }
        }
        for (int j = 0; j < NC; ++j) vst1q_f32(out[j] + 4 * quarter, acc[j]);
    }
}

template <int NC>
KQUANT_DOTPROD void q6_neon(const uint8_t * tile, int64_t nsb, const Column * cols, float (*out)[kTile]) {
    const uint8x16_t low = vdupq_n_u8(0x0f), high = vdupq_n_u8(0x30);
    for (int quarter = 0; quarter < 4; ++quarter) {
        float32x4_t acc[NC];
        for (int j = 0; j < NC; ++j) acc[j] = vdupq_n_f32(0.0f);
        for (int64_t sb = 0; sb < nsb; ++sb) {
            const uint8_t * blk = tile + sb * kTile * kQ6Bytes;
            const float32x4_t d = halves4(blk + q6::kD * kTile + 8 * quarter);
            for (int g = 0; g < 8; ++g) {
                if (quarter == 0) prefetch_part(blk, kTile * kQ6Bytes, g);
                const int n = g / 4, k2 = g % 4;
                int8x16_t w[8];
                for (int c = 0; c < 8; ++c) {
                    const uint8x16_t lo = vld1q_u8(blk + q6::low_chunk(n, k2 & 1, c) * kTile + 16 * quarter);
                    const uint8x16_t hi = vld1q_u8(blk + q6::high_chunk(n, c) * kTile + 16 * quarter);
                    const uint8x16_t l  = k2 >= 2 ? vshrq_n_u8(lo, 4) : vandq_u8(lo, low);
                    const uint8x16_t h  = vandq_u8(vshlq_u8(hi, vdupq_n_s8((int8_t) (4 - 2 * k2))), high);
                    w[c] = vreinterpretq_s8_u8(vorrq_u8(l, h));
                }
                const int32x4_t sc0 = bytes4(blk + (q6::kScales + 2 * g) * kTile + 4 * quarter, true);
                const int32x4_t sc1 = bytes4(blk + (q6::kScales + 2 * g + 1) * kTile + 4 * quarter, true);
                const int64_t   b   = sb * 8 + g;
                for (int j = 0; j < NC; ++j) {
                    int32x4_t s0 = vdupq_n_s32(cols[j].bias16[2 * b]), s1 = vdupq_n_s32(cols[j].bias16[2 * b + 1]);
                    dot8(w, cols[j].q + b * kBlock, s0, s1);
                    const int32x4_t isum = vaddq_s32(vmulq_s32(s0, sc0), vmulq_s32(s1, sc1));
                    acc[j] = vfmaq_f32(acc[j], vcvtq_f32_s32(isum), vmulq_n_f32(d, cols[j].d[b]));
                }
            }
        }
        for (int j = 0; j < NC; ++j) vst1q_f32(out[j] + 4 * quarter, acc[j]);
    }
}

constexpr int kStepNeon = 4;
const TileFn  kQ4Neon[kStepNeon] = {q4_neon<1, false>, q4_neon<2, false>, q4_neon<3, false>, q4_neon<4, false>};
const TileFn  kQ5Neon[kStepNeon] = {q4_neon<1, true>, q4_neon<2, true>, q4_neon<3, true>, q4_neon<4, true>};
const TileFn  kQ6Neon[kStepNeon] = {q6_neon<1>, q6_neon<2>, q6_neon<3>, q6_neon<4>};
#endif  // KQUANT_NEON

// Whether this CPU can run a path.
bool runnable(int path) {
#ifdef KQUANT_X86
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    switch (path) {
        case KQUANT_PATH_AVX2: return avx2;
        case KQUANT_PATH_AVX_VNNI: return avx2 && __builtin_cpu_supports("avxvnni");
        case KQUANT_PATH_AVX512_VNNI:
            return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vnni");
        default: break;
    }
#elif defined(KQUANT_NEON)
    if (path == KQUANT_PATH_NEON) return assistant_arm::has_dotprod();
#endif
    return path == KQUANT_PATH_SCALAR;
}

int detect_path() {
    for (int path : {KQUANT_PATH_AVX512_VNNI, KQUANT_PATH_AVX_VNNI, KQUANT_PATH_AVX2, KQUANT_PATH_NEON}) {
        if (runnable(path)) return path;
    }
    return KQUANT_PATH_SCALAR;
}

int best() {
    static const int path = detect_path();
    return path;
}

int & current() {
    static int path = best();
    return path;
}

// The last tile of a matrix whose M is not a multiple of 16, widened to 16 rows (zero rows: d = 0, scales 0)
// so the vector kernels need no masks; the extra rows' results are dropped.
void widen_tile(int type, const uint8_t * tile, int R, int64_t nsb, std::vector<uint8_t> & rows, std::vector<uint8_t> & wide) {
    const size_t row_bytes = nsb * block_bytes(type);
    rows.assign(kTile * row_bytes, 0);
    wide.assign(tile_bytes(type, kTile, nsb), 0);
    move_matrix(type, rows.data(), (uint8_t *) tile, R, nsb * kSuper, false);
    move_matrix(type, rows.data(), wide.data(), kTile, nsb * kSuper, true);
}

}  // namespace

extern "C" {

int kquant_set_path(int path) {
    if (path == KQUANT_PATH_AUTO) path = best();
    if (runnable(path)) current() = path;
    return current();
}

const char * kquant_path_name(void) {
    switch (current()) {
        case KQUANT_PATH_AVX512_VNNI: return "avx512-vnni";
        case KQUANT_PATH_AVX_VNNI: return "avx-vnni";
        case KQUANT_PATH_AVX2: return "avx2";
        case KQUANT_PATH_NEON: return "neon";
        default: return "scalar";
    }
}

size_t kquant_row_bytes(int type, int64_t K) { return K / kSuper * block_bytes(type); }

void kquant_pack(int type, const void * blocks, void * packed, int64_t M, int64_t K) {
    move_matrix(type, (uint8_t *) blocks, (uint8_t *) packed, M, K, true);  // reads blocks only
}

void kquant_unpack(int type, const void * packed, void * blocks, int64_t M, int64_t K) {
    move_matrix(type, (uint8_t *) blocks, (uint8_t *) packed, M, K, false);  // reads packed only
}

size_t kquant_act_bytes(int64_t K) {
    const size_t bytes = K + (K / kBlock) * 2 * sizeof(float) + (K / 16) * sizeof(int32_t);
    return (bytes + 63) & ~(size_t) 63;
}

// The same float operations as the MXFP4 quantizer (max, divide, reciprocal, multiply, round to nearest even).
void kquant_quantize_act(const float * x, void * act, int64_t K) {
    int8_t *  q      = (int8_t *) act;
    float *   d      = (float *) (q + K);
    float *   dsum   = d + K / kBlock;
    int32_t * bias16 = (int32_t *) (dsum + K / kBlock);
    for (int64_t b = 0; b < K / kBlock; ++b) {
        const float * xb   = x + b * kBlock;
        float         amax = 0.0f;
        for (int i = 0; i < kBlock; ++i) amax = std::max(amax, std::fabs(xb[i]));
        const float scale = amax / 127.0f;
        const float inv   = scale != 0.0f ? 1.0f / scale : 0.0f;
        int32_t     sum[2] = {0, 0};
        for (int i = 0; i < kBlock; ++i) {
            const int v = std::clamp((int) std::nearbyint(xb[i] * inv), -127, 127);
            q[b * kBlock + i] = (int8_t) v;
            sum[i / 16] += v;
        }
        d[b]             = scale;
        dsum[b]          = scale * (float) (sum[0] + sum[1]);
        bias16[2 * b]     = -32 * sum[0];
        bias16[2 * b + 1] = -32 * sum[1];
    }
}

void kquant_gemm(int type, const void * packed, int64_t M, int64_t K, const void * act, size_t act_stride, int64_t N,
                 float * dst, int64_t dst_stride, int64_t row_begin, int64_t row_end) {
    const int64_t nsb  = K / kSuper;
    const int     path = current();
    const int     kind = type == KQUANT_Q4_K ? 0 : type == KQUANT_Q5_K ? 1 : 2;
    const TileFn * fns = nullptr;
    int            step = kTile;  // columns per pass; the scalar reference takes any number
#ifdef KQUANT_X86
    static const TileFn * const kAvx512[3] = {kQ4Avx512, kQ5Avx512, kQ6Avx512};
    static const TileFn * const kAvxVnni[3] = {kQ4AvxVnni, kQ5AvxVnni, kQ6AvxVnni};
    static const TileFn * const kAvx2[3] = {kQ4Avx2, kQ5Avx2, kQ6Avx2};
    if (path == KQUANT_PATH_AVX512_VNNI) {
        fns = kAvx512[kind], step = kStep512;
    } else if (path == KQUANT_PATH_AVX_VNNI) {
        fns = kAvxVnni[kind], step = kStep256;
    } else if (path == KQUANT_PATH_AVX2) {
        fns = kAvx2[kind], step = kStep256;
    }
#endif
#ifdef KQUANT_NEON
    static const TileFn * const kNeon[3] = {kQ4Neon, kQ5Neon, kQ6Neon};
    if (path == KQUANT_PATH_NEON) fns = kNeon[kind], step = kStepNeon;
#endif
    thread_local std::vector<uint8_t> rows, wide;
    Column cols[kTile];
    float  out[kTile][kTile];
    for (int64_t t0 = row_begin; t0 < row_end; t0 += kTile) {
        const int       R    = (int) std::min<int64_t>(kTile, M - t0);
        const uint8_t * tile = (const uint8_t *) packed + tile_bytes(type, kTile, nsb) * (t0 / kTile);
        if (R < kTile && fns) {
            widen_tile(type, tile, R, nsb, rows, wide);
            tile = wide.data();
        }
        for (int64_t j0 = 0; j0 < N; j0 += step) {
            const int nc = (int) std::min<int64_t>(step, N - j0);
            for (int j = 0; j < nc; ++j) cols[j] = column(act, act_stride, j0 + j, K);
            if (fns) {
                fns[nc - 1](tile, nsb, cols, out);
            } else {
                (kind == 0 ? q4_scalar<false> : kind == 1 ? q4_scalar<true> : q6_scalar)(tile, R, nsb, cols, nc, out);
            }
            for (int j = 0; j < nc; ++j) std::memcpy(dst + (j0 + j) * dst_stride + t0, out[j], R * sizeof(float));
        }
    }
}

}  // extern "C"
