// Batch-invariant attention over an f16 KV cache; contract in attention.h.
//
// One (query, head) row, whatever its companions:
//   scores   s_c = dot(q, k_c) * scale (softcap: softcap * tanh(s_c / softcap)) + slope * mask_c, where the dot
//            runs over 8-value chunks into two 8-lane f32 accumulators (even and odd chunks, fma in chunk order),
//            summed lane by lane, then halved in a fixed tree (l + l+4, l + l+2, 0 + 1); values past the last
//            whole chunk are fma'd in order into one scalar added last
//   softmax  the cells in blocks of 64: a block's largest score raises the running maximum M (the sum S and
//            the accumulator scaled by exp(old M - new M)), then p_c = exp(s_c - M), S += p_c in cell order;
//            exp is ours (exp_of below: a range reduction and a polynomial, each step one exactly rounded
//            operation), so that vector and scalar code compute it alike, and fast
//   values   acc[d] = fma(p_c, v_c[d], acc[d]) in cell order, cells with p_c = 0 skipped (masked cells may hold
//            anything); the result acc[d] / S (0 where nothing was attended)
// The AVX2 and AVX-512 paths vectorise exactly these operations, so the three paths agree bit for bit.
#include "attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#    include <immintrin.h>
#    define ATTENTION_X86 1
#endif

namespace {

constexpr int kBlock   = 64;  // cells per softmax block
constexpr int kMaxRows = 4;   // rows whose accumulators stay in registers together
constexpr int kRunRows = 64;  // rows of one KV head computed together: each key block is widened once for them

float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t) (h & 0x8000) << 16;
    uint32_t       exp  = (h >> 10) & 0x1f;
    uint32_t       man  = h & 0x3ff;
    uint32_t       bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000 | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {  // subnormal: normalise
        exp = 113;
        while (!(man & 0x400)) {
            man <<= 1;
            --exp;
        }
        bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

// A mask entry: nearly always 0 or -inf.
inline float mask_value(uint16_t h) {
    return h == 0 ? 0.0f : h == 0xfc00 ? -INFINITY : half_to_float(h);
}

// e^x for x <= 0 (no NaN): x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts), e^r by its Taylor polynomial
// to degree 6 (relative error about 1e-7), times 2^n built in the exponent bits. Below -87 the result is
// e^-87's neighbourhood rather than 0, which no softmax weight notices.
constexpr float kExpFloor = -87.0f;
constexpr float kLog2e    = 1.44269504088896341f;
constexpr float kLn2Hi    = 0.693145751953125f;
constexpr float kLn2Lo    = 1.42860682030941723e-06f;
constexpr float kExpC[]   = {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};

float exp_of(float x) {
    x             = std::max(x, kExpFloor);
    const float n = std::nearbyint(x * kLog2e);
    float       r = std::fma(n, -kLn2Hi, x);
    r             = std::fma(n, -kLn2Lo, r);
    float p       = kExpC[0];
    for (int i = 1; i < 7; ++i) p = std::fma(p, r, kExpC[i]);
    const uint32_t bits = (uint32_t) ((int32_t) n + 127) << 23;
    float          two_n;
    std::memcpy(&two_n, &bits, 4);
    return p * two_n;
}

struct Row {
    const float *    q;
    const uint16_t * mask;  // this row's mask over the cells, or null
    float            slope;
    float *          out;
    int64_t          head;
};

// A block's keys widened to f32, n cells of dk values one after another (read once per row of the block).
using WidenFn = void (*)(const uint16_t * k, size_t k_stride, int n, int64_t dk, float * kf);
// Scores of R rows against the n widened keys: s[r][c] = dot(q_r, k_c) (every cell, masked ones too).
using ScoresFn = void (*)(const Row * rows, int R, const float * kf, int n, int64_t dk, float (*s)[kBlock]);
// bias[c] = slope * mask[c] for the cells [0, n); whether any is above -inf.
using MaskFn = bool (*)(const uint16_t * mask, int n, float slope, float * bias);
// s[c] = s[c] * scale + bias[c] (-inf where bias[c] is -inf) for the cells [0, n); returns their largest.
using BiasFn = float (*)(float * s, const float * bias, int n, float scale);
// s[c] = exp(s[c] - M) for the cells [0, n), 0 where s[c] is -inf; returns their sum, taken in 8 lanes (lane l
// adds the cells c = l mod 8 in order), then ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)).
using ExponentiateFn = float (*)(float * s, int n, float M);
// acc_r[d] = fma(p_r[c], v_c[d], acc_r[d]) over the cells in order, skipping cells where p_r[c] is 0.
using AccumulateFn = void (*)(float * const * acc, int R, const float (*p)[kBlock], const uint16_t * v,
                              size_t v_stride, int n, int64_t dv);

const uint16_t * cell(const uint16_t * base, size_t stride, int c) {
    return (const uint16_t *) ((const char *) base + (size_t) c * stride);
}

// The dot product's last step: lanes t = even + odd, then ((t0 + t1) + (t2 + t3)) + ((t4 + t5) + (t6 + t7)),
// the order in which horizontal adds reduce four cells at once; values past the last whole chunk after that.
float reduce_lanes(const float * even, const float * odd) {
    float t[8];
    for (int l = 0; l < 8; ++l) t[l] = even[l] + odd[l];
    return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}

float tail_dot(const float * q, const float * k, int64_t from, int64_t dk) {
    float t = 0.0f;
    for (int64_t d = from; d < dk; ++d) t = std::fma(q[d], k[d], t);
    return t;
}

float dot_scalar(const float * q, const float * k, int64_t dk) {
    float         even[8] = {}, odd[8] = {};
    const int64_t chunks  = dk / 8;
    for (int64_t j = 0; j < chunks; ++j) {
        float * acc = (j & 1) ? odd : even;
        for (int l = 0; l < 8; ++l) acc[l] = std::fma(q[8 * j + l], k[8 * j + l], acc[l]);
    }
    float s = reduce_lanes(even, odd);
    if (chunks * 8 < dk) s += tail_dot(q, k, chunks * 8, dk);
    return s;
}

void widen_scalar(const uint16_t * k, size_t k_stride, int n, int64_t dk, float * kf) {
    for (int c = 0; c < n; ++c) {
        const uint16_t * kc = cell(k, k_stride, c);
        for (int64_t d = 0; d < dk; ++d) kf[c * dk + d] = half_to_float(kc[d]);
    }
}

void scores_scalar(const Row * rows, int R, const float * kf, int n, int64_t dk, float (*s)[kBlock]) {
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < n; ++c) s[r][c] = dot_scalar(rows[r].q, kf + c * dk, dk);
    }
}

bool mask_scalar(const uint16_t * mask, int n, float slope, float * bias) {
    bool any = false;
    for (int c = 0; c < n; ++c) {
        bias[c] = slope * mask_value(mask[c]);
        any |= bias[c] != -INFINITY;
    }
    return any;
}

float bias_scalar(float * s, const float * bias, int n, float scale) {
    float highest = -INFINITY;
    for (int c = 0; c < n; ++c) {
        const float x = s[c] * scale;
        s[c]          = bias[c] == -INFINITY ? -INFINITY : x + bias[c];
        highest       = s[c] > highest ? s[c] : highest;
    }
    return highest;
}

float lane_sum(const float * p, int n, const float * start = nullptr) {
    float lanes[8] = {};
    if (start) std::memcpy(lanes, start, sizeof lanes);
    for (int c = 0; c < n; ++c) lanes[c % 8] += p[c];
    return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

float exponentiate_scalar(float * s, int n, float M) {
    for (int c = 0; c < n; ++c) s[c] = s[c] == -INFINITY ? 0.0f : exp_of(s[c] - M);
    return lane_sum(s, n);
}

void accumulate_scalar(float * const * acc, int R, const float (*p)[kBlock], const uint16_t * v, size_t v_stride,
                       int n, int64_t dv) {
    for (int c = 0; c < n; ++c) {
        const uint16_t * vc = cell(v, v_stride, c);
        for (int r = 0; r < R; ++r) {
            if (p[r][c] == 0.0f) continue;
            for (int64_t d = 0; d < dv; ++d) acc[r][d] = std::fma(p[r][c], half_to_float(vc[d]), acc[r][d]);
        }
    }
}

#ifdef ATTENTION_X86

__attribute__((target("avx2,fma,f16c"))) __m256 exp_avx2(__m256 x) {
    x              = _mm256_max_ps(x, _mm256_set1_ps(kExpFloor));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256       r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Hi), x);
    r              = _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Lo), r);
    __m256 p       = _mm256_set1_ps(kExpC[0]);
    for (int i = 1; i < 7; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpC[i]));
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

__attribute__((target("avx2,fma,f16c"))) float sum_avx2(const float * p, int n) {
    __m256 lanes = _mm256_setzero_ps();
    int    c     = 0;
    for (; c + 8 <= n; c += 8) lanes = _mm256_add_ps(lanes, _mm256_loadu_ps(p + c));
    alignas(32) float start[8];
    _mm256_store_ps(start, lanes);
    return lane_sum(p + c, n - c, start);  // the cells past the last 8 go to lanes 0.. as c mod 8 says
}

__attribute__((target("avx2,fma,f16c"))) void exp_cells_avx2(float * s, int n, float M) {
    int c = 0;
    for (; c + 8 <= n; c += 8) {
        const __m256 x    = _mm256_loadu_ps(s + c);
        const __m256 none = _mm256_cmp_ps(x, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ);
        const __m256 e    = exp_avx2(_mm256_sub_ps(x, _mm256_set1_ps(M)));
        _mm256_storeu_ps(s + c, _mm256_andnot_ps(none, e));
    }
    for (; c < n; ++c) s[c] = s[c] == -INFINITY ? 0.0f : exp_of(s[c] - M);
}

__attribute__((target("avx2,fma,f16c"))) float exponentiate_avx2(float * s, int n, float M) {
    exp_cells_avx2(s, n, M);
    return sum_avx2(s, n);
}

__attribute__((target("avx2,fma,f16c"))) bool mask_avx2(const uint16_t * mask, int n, float slope, float * bias) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256       none = _mm256_castsi256_ps(_mm256_set1_epi32(-1));  // every lane -inf so far
    int          c    = 0;
    for (; c + 8 <= n; c += 8) {
        const __m256 b = _mm256_mul_ps(_mm256_set1_ps(slope), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (mask + c))));
        _mm256_storeu_ps(bias + c, b);
        none = _mm256_and_ps(none, _mm256_cmp_ps(b, ninf, _CMP_EQ_OQ));
    }
    const bool rest = mask_scalar(mask + c, n - c, slope, bias + c);
    return rest || _mm256_movemask_ps(none) != 0xff;
}

__attribute__((target("avx2,fma,f16c"))) float bias_avx2(float * s, const float * bias, int n, float scale) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256       top  = ninf;
    int          c    = 0;
    for (; c + 8 <= n; c += 8) {
        const __m256 b = _mm256_loadu_ps(bias + c);
        __m256       x = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(s + c), _mm256_set1_ps(scale)), b);
        x              = _mm256_blendv_ps(x, ninf, _mm256_cmp_ps(b, ninf, _CMP_EQ_OQ));
        _mm256_storeu_ps(s + c, x);
        top = _mm256_max_ps(top, x);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, top);
    float highest = bias_scalar(s + c, bias + c, n - c, scale);
    for (float v : lanes) highest = v > highest ? v : highest;
    return highest;
}

__attribute__((target("avx2,fma,f16c"))) void widen_avx2(const uint16_t * k, size_t k_stride, int n, int64_t dk,
                                                          float * kf) {
    const int64_t whole = dk / 8 * 8;
    for (int c = 0; c < n; ++c) {
        const uint16_t * kc  = cell(k, k_stride, c);
        float *          out = kf + c * dk;
        for (int64_t d = 0; d < whole; d += 8) {
            _mm256_storeu_ps(out + d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (kc + d))));
        }
        for (int64_t d = whole; d < dk; ++d) out[d] = half_to_float(kc[d]);
    }
}

// Four cells' lanes t_c (even + odd) to their four scores, in reduce_lanes' order.
__attribute__((target("avx2,fma,f16c"))) __m128 reduce4(__m256 t0, __m256 t1, __m256 t2, __m256 t3) {
    const __m256 w = _mm256_hadd_ps(_mm256_hadd_ps(t0, t1), _mm256_hadd_ps(t2, t3));
    return _mm_add_ps(_mm256_castps256_ps128(w), _mm256_extractf128_ps(w, 1));
}

__attribute__((target("avx2,fma,f16c"))) void store_scores(__m128 four, float * s, int c, int n, const float * q,
                                                            const float * kf, int64_t dk) {
    const int64_t whole = dk / 8 * 8;
    if (c + 4 <= n && whole == dk) {
        _mm_storeu_ps(s + c, four);
        return;
    }
    alignas(16) float v[4];
    _mm_store_ps(v, four);
    for (int i = 0; i < 4 && c + i < n; ++i) {
        s[c + i] = whole < dk ? v[i] + tail_dot(q, kf + (c + i) * dk, whole, dk) : v[i];
    }
}

// Cells four at a time (the block buffer holds kBlock cells, so a short last group reads stale keys and
// drops their scores), each with its even and odd accumulators.
__attribute__((target("avx2,fma,f16c"))) void scores_avx2(const Row * rows, int R, const float * kf, int n,
                                                           int64_t dk, float (*s)[kBlock]) {
    const int64_t chunks = dk / 8;
    for (int r = 0; r < R; ++r) {
        const float * q = rows[r].q;
        for (int c = 0; c < n; c += 4) {
            __m256 even[4], odd[4];
            for (int i = 0; i < 4; ++i) even[i] = odd[i] = _mm256_setzero_ps();
            const float * k = kf + c * dk;
            int64_t       j = 0;
            for (; j + 1 < chunks; j += 2) {
                const __m256 qe = _mm256_loadu_ps(q + 8 * j), qo = _mm256_loadu_ps(q + 8 * j + 8);
                for (int i = 0; i < 4; ++i) {
                    even[i] = _mm256_fmadd_ps(qe, _mm256_loadu_ps(k + i * dk + 8 * j), even[i]);
                    odd[i]  = _mm256_fmadd_ps(qo, _mm256_loadu_ps(k + i * dk + 8 * j + 8), odd[i]);
                }
            }
            if (j < chunks) {
                const __m256 qe = _mm256_loadu_ps(q + 8 * j);
                for (int i = 0; i < 4; ++i) even[i] = _mm256_fmadd_ps(qe, _mm256_loadu_ps(k + i * dk + 8 * j), even[i]);
            }
            const __m128 four = reduce4(_mm256_add_ps(even[0], odd[0]), _mm256_add_ps(even[1], odd[1]),
                                        _mm256_add_ps(even[2], odd[2]), _mm256_add_ps(even[3], odd[3]));
            store_scores(four, s[r], c, n, q, kf, dk);
        }
    }
}

// A panel of C 8-value chunks of the accumulators of R rows stays in registers over the block's cells.
template <int R, int C>
__attribute__((target("avx2,fma,f16c"))) void accumulate_panel_avx2(float * const * acc, const float (*p)[kBlock],
                                                                     const uint16_t * v, size_t v_stride, int n,
                                                                     int64_t d0) {
    __m256 a[R][C];
    for (int r = 0; r < R; ++r)
        for (int i = 0; i < C; ++i) a[r][i] = _mm256_loadu_ps(acc[r] + d0 + 8 * i);
    for (int c = 0; c < n; ++c) {
        const uint16_t * vc = cell(v, v_stride, c) + d0;
        __m256           x[C];
        for (int i = 0; i < C; ++i) x[i] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (vc + 8 * i)));
        for (int r = 0; r < R; ++r) {
            if (p[r][c] == 0.0f) continue;
            const __m256 w = _mm256_set1_ps(p[r][c]);
            for (int i = 0; i < C; ++i) a[r][i] = _mm256_fmadd_ps(w, x[i], a[r][i]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int i = 0; i < C; ++i) _mm256_storeu_ps(acc[r] + d0 + 8 * i, a[r][i]);
}

template <int R>
__attribute__((target("avx2,fma,f16c"))) void accumulate_rows_avx2(float * const * acc, const float (*p)[kBlock],
                                                                    const uint16_t * v, size_t v_stride, int n,
                                                                    int64_t dv) {
    int64_t d = 0;
    for (; d + 16 <= dv; d += 16) accumulate_panel_avx2<R, 2>(acc, p, v, v_stride, n, d);
    if (d + 8 <= dv) {
        accumulate_panel_avx2<R, 1>(acc, p, v, v_stride, n, d);
        d += 8;
    }
    if (d == dv) return;
    for (int c = 0; c < n; ++c) {
        const uint16_t * vc = cell(v, v_stride, c);
        for (int r = 0; r < R; ++r) {
            if (p[r][c] == 0.0f) continue;
            for (int64_t e = d; e < dv; ++e) acc[r][e] = std::fma(p[r][c], half_to_float(vc[e]), acc[r][e]);
        }
    }
}

__attribute__((target("avx2,fma,f16c"))) void accumulate_avx2(float * const * acc, int R, const float (*p)[kBlock],
                                                               const uint16_t * v, size_t v_stride, int n,
                                                               int64_t dv) {
    switch (R) {
        case 1: return accumulate_rows_avx2<1>(acc, p, v, v_stride, n, dv);
        case 2: return accumulate_rows_avx2<2>(acc, p, v, v_stride, n, dv);
        case 3: return accumulate_rows_avx2<3>(acc, p, v, v_stride, n, dv);
        default: return accumulate_rows_avx2<4>(acc, p, v, v_stride, n, dv);
    }
}

__attribute__((target("avx512f,avx2,fma,f16c"))) float exponentiate_avx512(float * s, int n, float M) {
    int c = 0;
    for (; c + 16 <= n; c += 16) {
        __m512          x    = _mm512_loadu_ps(s + c);
        const __mmask16 some = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
        x                    = _mm512_max_ps(_mm512_sub_ps(x, _mm512_set1_ps(M)), _mm512_set1_ps(kExpFloor));
        const __m512 k       = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512       r       = _mm512_fmadd_ps(k, _mm512_set1_ps(-kLn2Hi), x);
        r                    = _mm512_fmadd_ps(k, _mm512_set1_ps(-kLn2Lo), r);
        __m512 p             = _mm512_set1_ps(kExpC[0]);
        for (int i = 1; i < 7; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpC[i]));
        const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23);
        _mm512_storeu_ps(s + c, _mm512_maskz_mov_ps(some, _mm512_mul_ps(p, _mm512_castsi512_ps(bits))));
    }
    exp_cells_avx2(s + c, n - c, M);
    return sum_avx2(s, n);
}

__attribute__((target("avx512f,avx2,fma,f16c"))) __m256 fold(__m512 x) {  // even half + odd half
    return _mm256_add_ps(_mm512_castps512_ps256(x), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
}

// As scores_avx2, with a chunk pair in one register: the low 8 lanes accumulate the even chunk, the high 8 the odd.
__attribute__((target("avx512f,avx2,fma,f16c"))) void scores_avx512(const Row * rows, int R, const float * kf, int n,
                                                                     int64_t dk, float (*s)[kBlock]) {
    const int64_t chunks = dk / 8;
    for (int r = 0; r < R; ++r) {
        const float * q = rows[r].q;
        for (int c = 0; c < n; c += 4) {
            __m512 acc[4];
            for (int i = 0; i < 4; ++i) acc[i] = _mm512_setzero_ps();
            const float * k = kf + c * dk;
            int64_t       j = 0;
            for (; j + 1 < chunks; j += 2) {
                const __m512 qv = _mm512_loadu_ps(q + 8 * j);
                for (int i = 0; i < 4; ++i) acc[i] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k + i * dk + 8 * j), acc[i]);
            }
            if (j < chunks) {  // a last even chunk: the low half only, the odd half left as it is
                const __m512 qv = _mm512_castps256_ps512(_mm256_loadu_ps(q + 8 * j));
                for (int i = 0; i < 4; ++i) {
                    const __m512 kv = _mm512_castps256_ps512(_mm256_loadu_ps(k + i * dk + 8 * j));
                    acc[i]          = _mm512_mask3_fmadd_ps(qv, kv, acc[i], 0x00ff);
                }
            }
            store_scores(reduce4(fold(acc[0]), fold(acc[1]), fold(acc[2]), fold(acc[3])), s[r], c, n, q, kf, dk);
        }
    }
}

template <int R, int C>
__attribute__((target("avx512f,avx2,fma,f16c"))) void accumulate_panel_avx512(float * const * acc,
                                                                               const float (*p)[kBlock],
                                                                               const uint16_t * v, size_t v_stride,
                                                                               int n, int64_t d0) {
    __m512 a[R][C];
    for (int r = 0; r < R; ++r)
        for (int i = 0; i < C; ++i) a[r][i] = _mm512_loadu_ps(acc[r] + d0 + 16 * i);
    for (int c = 0; c < n; ++c) {
        const uint16_t * vc = cell(v, v_stride, c) + d0;
        __m512           x[C];
        for (int i = 0; i < C; ++i) x[i] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) (vc + 16 * i)));
        for (int r = 0; r < R; ++r) {
            if (p[r][c] == 0.0f) continue;
            const __m512 w = _mm512_set1_ps(p[r][c]);
            for (int i = 0; i < C; ++i) a[r][i] = _mm512_fmadd_ps(w, x[i], a[r][i]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int i = 0; i < C; ++i) _mm512_storeu_ps(acc[r] + d0 + 16 * i, a[r][i]);
}

template <int R>
__attribute__((target("avx512f,avx2,fma,f16c"))) void accumulate_rows_avx512(float * const * acc,
                                                                              const float (*p)[kBlock],
                                                                              const uint16_t * v, size_t v_stride,
                                                                              int n, int64_t dv) {
    int64_t d = 0;
    for (; d + 64 <= dv; d += 64) accumulate_panel_avx512<R, 4>(acc, p, v, v_stride, n, d);
    for (; d + 16 <= dv; d += 16) accumulate_panel_avx512<R, 1>(acc, p, v, v_stride, n, d);
    if (d == dv) return;
    // the rest (fewer than 16 values) as the AVX2 path does it: the same operations per value
    float * rest[kMaxRows];
    for (int r = 0; r < R; ++r) rest[r] = acc[r] + d;
    accumulate_rows_avx2<R>(rest, p, (const uint16_t *) v + d, v_stride, n, dv - d);
}

__attribute__((target("avx512f,avx2,fma,f16c"))) void accumulate_avx512(float * const * acc, int R,
                                                                         const float (*p)[kBlock], const uint16_t * v,
                                                                         size_t v_stride, int n, int64_t dv) {
    switch (R) {
        case 1: return accumulate_rows_avx512<1>(acc, p, v, v_stride, n, dv);
        case 2: return accumulate_rows_avx512<2>(acc, p, v, v_stride, n, dv);
        case 3: return accumulate_rows_avx512<3>(acc, p, v, v_stride, n, dv);
        default: return accumulate_rows_avx512<4>(acc, p, v, v_stride, n, dv);
    }
}

#endif  // ATTENTION_X86

struct Path {
    int            id;
    const char *   name;
    WidenFn        widen;
    ScoresFn       scores;
    MaskFn         mask;
    BiasFn         bias;
    ExponentiateFn exponentiate;
    AccumulateFn   accumulate;
};

const Path kScalar = {ATTENTION_PATH_SCALAR, "scalar", widen_scalar, scores_scalar, mask_scalar, bias_scalar, exponentiate_scalar, accumulate_scalar};
#ifdef ATTENTION_X86
const Path kAvx2   = {ATTENTION_PATH_AVX2, "avx2", widen_avx2, scores_avx2, mask_avx2, bias_avx2, exponentiate_avx2, accumulate_avx2};
const Path kAvx512 = {ATTENTION_PATH_AVX512, "avx512", widen_avx2, scores_avx512, mask_avx2, bias_avx2, exponentiate_avx512, accumulate_avx512};
#endif

bool runs_here(int id) {
#ifdef ATTENTION_X86
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    if (id == ATTENTION_PATH_AVX2) return avx2;
    if (id == ATTENTION_PATH_AVX512) return avx2 && __builtin_cpu_supports("avx512f");
#endif
    return id == ATTENTION_PATH_SCALAR;
}

const Path * path_of(int id) {
#ifdef ATTENTION_X86
    if (id == ATTENTION_PATH_AVX512) return &kAvx512;
    if (id == ATTENTION_PATH_AVX2) return &kAvx2;
#endif
    (void) id;
    return &kScalar;
}

const Path * best_path() {
    for (int id : {ATTENTION_PATH_AVX512, ATTENTION_PATH_AVX2}) {
        if (runs_here(id)) return path_of(id);
    }
    return &kScalar;
}

const Path * g_path = nullptr;

const Path & current_path() {
    if (g_path == nullptr) g_path = best_path();
    return *g_path;
}

float alibi_slope(const attention_problem & p, int64_t h) {
    if (p.max_bias <= 0.0f) return 1.0f;
    const int64_t base = int64_t(1) << (int64_t) std::floor(std::log2((double) p.n_head));
    const float   m0   = std::pow(2.0f, -p.max_bias / base);
    const float   m1   = std::pow(2.0f, -(p.max_bias / 2.0f) / base);
    return h < base ? std::pow(m0, (float) (h + 1)) : std::pow(m1, (float) (2 * (h - base) + 1));
}

struct Scratch {
    float * acc[kRunRows];
    float (*s)[kBlock];     // scores, then probabilities, per row
    float (*bias)[kBlock];  // slope * mask per row (-inf: not attended)
    float *   keys;         // the block's keys widened, kBlock x dk
};

size_t align64(size_t n) { return (n + 63) / 64 * 64; }

Scratch carve(const attention_problem & p, void * memory) {
    char *  at = (char *) memory;
    Scratch s;
    for (int r = 0; r < kRunRows; ++r) {
        s.acc[r] = (float *) at;
        at += align64(p.dv * sizeof(float));
    }
    s.s = (float (*)[kBlock]) at;
    at += sizeof(float) * kBlock * kRunRows;
    s.bias = (float (*)[kBlock]) at;
    at += sizeof(float) * kBlock * kRunRows;
    s.keys = (float *) at;
    return s;
}

// Rows of one KV head, together: each row's result depends on that row alone.
void attend(const attention_problem & p, const Path & path, const Row * rows, int R, int64_t kv_head, Scratch & w) {
    float M[kRunRows], S[kRunRows];
    for (int r = 0; r < R; ++r) {
        M[r] = -INFINITY;
        S[r] = 0.0f;
        std::fill(w.acc[r], w.acc[r] + p.dv, 0.0f);
    }
    const uint16_t * k = (const uint16_t *) ((const char *) p.k + kv_head * p.k_head_stride);
    const uint16_t * v = (const uint16_t *) ((const char *) p.v + kv_head * p.v_head_stride);
    const bool       softcap = p.softcap != 0.0f;

    for (int64_t c0 = 0; c0 < p.n_kv; c0 += kBlock) {
        const int n   = (int) std::min<int64_t>(kBlock, p.n_kv - c0);
        bool      any = false;
        for (int r = 0; r < R; ++r) {
            if (rows[r].mask) {
                any |= path.mask(rows[r].mask + c0, n, rows[r].slope, w.bias[r]);
            } else {
                std::fill(w.bias[r], w.bias[r] + n, 0.0f);
                any = true;
            }
        }
        if (!any) continue;
        path.widen(cell(k, p.k_cell_stride, (int) c0), p.k_cell_stride, n, p.dk, w.keys);
        path.scores(rows, R, w.keys, n, p.dk, w.s);

        for (int r = 0; r < R; ++r) {
            float * s     = w.s[r];
            float   scale = p.scale;
            if (softcap) {  // rare (Gemma 2): plain code on every path
                for (int c = 0; c < n; ++c) s[c] = p.softcap * std::tanh(s[c] * p.scale / p.softcap);
                scale = 1.0f;
            }
            const float highest = path.bias(s, w.bias[r], n, scale);
            if (highest == -INFINITY) {
                std::fill(s, s + n, 0.0f);
                continue;
            }
            if (highest > M[r]) {
                if (M[r] != -INFINITY) {
                    const float f = exp_of(M[r] - highest);
                    S[r] *= f;
                    for (int64_t d = 0; d < p.dv; ++d) w.acc[r][d] *= f;
                }
                M[r] = highest;
            }
            S[r] += path.exponentiate(s, n, M[r]);
        }
        for (int r = 0; r < R; r += kMaxRows) {
            path.accumulate(w.acc + r, std::min(kMaxRows, R - r), w.s + r, cell(v, p.v_cell_stride, (int) c0),
                            p.v_cell_stride, n, p.dv);
        }
    }

    for (int r = 0; r < R; ++r) {
        if (p.sinks) {  // one more score, with no value
            const float sink = p.sinks[rows[r].head];
            if (sink > M[r]) {
                const float f = M[r] == -INFINITY ? 0.0f : exp_of(M[r] - sink);
                S[r] *= f;
                for (int64_t d = 0; d < p.dv; ++d) w.acc[r][d] *= f;
                M[r] = sink;
            }
            S[r] += exp_of(sink - M[r]);
        }
        float * out = rows[r].out;
        for (int64_t d = 0; d < p.dv; ++d) out[d] = S[r] == 0.0f ? 0.0f : w.acc[r][d] / S[r];
    }
}

Row row_of(const attention_problem & p, int64_t query, int64_t head) {
    Row row;
    row.q    = (const float *) ((const char *) p.q + query * p.q_query_stride + head * p.q_head_stride);
    row.mask = p.mask ? (const uint16_t *) ((const char *) p.mask + query * p.mask_query_stride +
                                            (head % p.mask_planes) * p.mask_plane_stride)
                      : nullptr;
    row.slope = alibi_slope(p, head);
    row.out   = (float *) ((char *) p.out + query * p.out_query_stride + head * p.out_head_stride);
    row.head  = head;
    return row;
}

}  // namespace

extern "C" {

int attention_set_path(int path) {
    if (path == ATTENTION_PATH_AUTO) {
        g_path = best_path();
    } else if (runs_here(path)) {
        g_path = path_of(path);
    }
    return current_path().id;
}

const char * attention_path_name(void) { return current_path().name; }

size_t attention_scratch_bytes(const attention_problem * p) {
    return 64 + kRunRows * align64(p->dv * sizeof(float)) + 2 * sizeof(float) * kBlock * kRunRows +
           sizeof(float) * kBlock * p->dk;
}

// The rows, ordered by KV head, then query, then head within the group, are split evenly between the
// threads; a thread takes its rows in runs of at most kRunRows of one KV head.
void attention_compute(const attention_problem * p, int ith, int nth, void * scratch) {
    const Path &  path  = current_path();
    const int64_t group = p->n_head / p->n_head_kv;  // query heads per KV head
    const int64_t per   = p->n_query * group;        // rows per KV head
    const int64_t total = per * p->n_head_kv;
    const int64_t begin = total * ith / nth, end = total * (ith + 1) / nth;
    Scratch       w     = carve(*p, (void *) (((uintptr_t) scratch + 63) & ~(uintptr_t) 63));

    for (int64_t at = begin; at < end;) {
        const int64_t kv_head = at / per;
        const int     R       = (int) std::min<int64_t>({kRunRows, end - at, (kv_head + 1) * per - at});
        Row           rows[kRunRows];
        for (int r = 0; r < R; ++r) {
            const int64_t local = at + r - kv_head * per;
            rows[r]             = row_of(*p, local / group, kv_head * group + local % group);
        }
        attend(*p, path, rows, R, kv_head, w);
        at += R;
    }
}

}  // extern "C"
