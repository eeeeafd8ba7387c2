// Activations as int8 per block of 32 values, shared by the kernels that multiply int8 weights (mxfp4-gemm,
// q8-gemm): scale = amax / 127, q = round-to-nearest-even(x / scale), and each block's integer sum, which
// every kernel needs to undo its own weight offset or minimum. The scalar and AVX2 versions do the same float
// operations (max, divide, reciprocal, multiply, round), so every path sees the same bits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#if defined(__x86_64__) || defined(_M_X64)
#    include <immintrin.h>
#endif

namespace int8_activations {

constexpr int kBlock = 32;

inline void quantize_scalar(const float * x, int8_t * q, float * d, int32_t * sum, int64_t K) {
    for (int64_t b = 0; b < K / kBlock; ++b) {
        const float * xb   = x + b * kBlock;
        float         amax = 0.0f;
        for (int i = 0; i < kBlock; ++i) amax = std::max(amax, std::fabs(xb[i]));
        const float scale = amax / 127.0f;
        const float inv   = scale != 0.0f ? 1.0f / scale : 0.0f;
        int32_t     s     = 0;
        for (int i = 0; i < kBlock; ++i) {
            const int v = std::clamp((int) std::nearbyint(xb[i] * inv), -127, 127);
            q[b * kBlock + i] = (int8_t) v;
            s += v;
        }
        d[b]   = scale;
        sum[b] = s;
    }
}

#if defined(__x86_64__) || defined(_M_X64)
// 8 values at a time (vcvtps2dq rounds to nearest even).
__attribute__((target("avx2,fma"))) inline void quantize_avx2(const float * x, int8_t * q, float * d, int32_t * sum,
                                                              int64_t K) {
    const __m256  sign  = _mm256_set1_ps(-0.0f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < K / kBlock; ++b) {
        __m256 v[4];
        __m256 m = _mm256_setzero_ps();
#    pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
            v[i] = _mm256_loadu_ps(x + b * kBlock + 8 * i);
            m    = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float  scale = _mm_cvtss_f32(m4) / 127.0f;
        const __m256 inv   = _mm256_set1_ps(scale != 0.0f ? 1.0f / scale : 0.0f);
        __m256i      r[4];
#    pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) r[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inv));
        const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
        _mm256_storeu_si256((__m256i *) (q + b * kBlock), _mm256_permutevar8x32_epi32(packed, order));
        const __m256i sum8 = _mm256_add_epi32(_mm256_add_epi32(r[0], r[1]), _mm256_add_epi32(r[2], r[3]));
        __m128i       sum4 = _mm_add_epi32(_mm256_castsi256_si128(sum8), _mm256_extracti128_si256(sum8, 1));
        sum4 = _mm_add_epi32(sum4, _mm_shuffle_epi32(sum4, 0x4e));
        sum4 = _mm_add_epi32(sum4, _mm_shuffle_epi32(sum4, 0xb1));
        d[b]   = scale;
        sum[b] = _mm_cvtsi128_si32(sum4);
    }
}
#endif

}  // namespace int8_activations
