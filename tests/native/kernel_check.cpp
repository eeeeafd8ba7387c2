// Checks every instruction path of our kernels that this CPU runs against the scalar reference, bit for
// bit, and the scalar path against float64 arithmetic; then batch invariance (a column's bits do not
// depend on N or on the row split). Standalone, so it also runs where Python cannot load the library:
// tests/test_native_arm64.py cross-compiles it for ARM64 and runs it under qemu-user.
//
// Prints one line per check and ends with "N passed, M failed"; exits non-zero on any failure.
#include "attention.h"
#include "bf16-gemm.h"
#include "kquant-gemm.h"
#include "mxfp4-gemm.h"
#include "q8-gemm.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

int passed = 0, failed = 0;

void check(bool ok, const std::string & what) {
    std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
    (ok ? passed : failed)++;
}

struct Path {
    const char * name;
    int          id;
};

// Runs gemm over row ranges split at the given tile boundaries.
template <class Gemm>
std::vector<float> run(Gemm gemm, int64_t M, int64_t N, const std::vector<int64_t> & splits) {
    std::vector<float> dst(M * N, NAN);
    for (size_t s = 0; s + 1 < splits.size(); ++s) gemm(N, dst.data(), splits[s], splits[s + 1]);
    return dst;
}

bool same_bits(const std::vector<float> & a, const std::vector<float> & b, size_t n) {
    return std::memcmp(a.data(), b.data(), n * sizeof(float)) == 0;
}

// The common checks of one kernel: the runnable paths agree with scalar, scalar with float64, and every
// path is batch invariant. prepare(path) fills the activations for that path and returns their stride.
template <class Prepare, class Gemm, class SetPath>
void check_kernel(const char * kind, const std::vector<Path> & paths, SetPath set_path, Prepare prepare, Gemm gemm,
                  int64_t M, int64_t N, const std::vector<double> & reference) {
    set_path(1);
    prepare();
    const std::vector<float> scalar = run(gemm, M, N, {0, M});
    double worst = 0.0;
    for (int64_t i = 0; i < M * N; ++i) {
        const double scale = std::fabs(reference[M * N + i]) + 1e-30;  // sum of |terms|
        worst = std::max(worst, std::fabs(scalar[i] - reference[i]) / scale);
    }
    char note[64];
    std::snprintf(note, sizeof note, " scalar vs float64 (worst relative error %.1e)", worst);
    check(worst < 1e-5, kind + std::string(note));
    for (const Path & p : paths) {
        if (set_path(p.id) != p.id) {
            std::printf("skip %s %s: this CPU cannot run it\n", kind, p.name);
            continue;
        }
        prepare();
        const std::vector<float> whole = run(gemm, M, N, {0, M});
        check(same_bits(whole, scalar, M * N), std::string(kind) + " " + p.name + " equals scalar bit for bit");
        bool invariant = true;
        for (int64_t n : {1, 2, 3, 5, 8, 9}) {
            for (const std::vector<int64_t> & splits : {std::vector<int64_t>{0, M}, {0, 16, M}, {0, 32, 48, M}}) {
                const std::vector<float> part = run(gemm, M, n, splits);
                invariant = invariant && same_bits(part, whole, M * n);
            }
        }
        check(invariant, std::string(kind) + " " + p.name + " is batch invariant");
    }
    set_path(0);
}

std::vector<float> random_columns(std::mt19937 & rng, int64_t N, int64_t K) {
    std::normal_distribution<float> normal;
    std::vector<float>              x(N * K);
    for (float & v : x) v = normal(rng);
    return x;
}

void check_mxfp4(std::mt19937 & rng) {
    const int64_t M = 45, K = 2240, N = 9, nb = K / MXFP4_BLOCK;  // K spans three chunks
    static const double kE2M1[16] = {0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6};
    std::vector<uint8_t> blocks(M * nb * MXFP4_BLOCK_BYTES), packed(blocks.size());
    for (size_t i = 0; i < blocks.size(); ++i) {
        blocks[i] = (uint8_t) rng();
        if (i % MXFP4_BLOCK_BYTES == 0) blocks[i] = rng() % 5 == 0 ? 0 : (uint8_t) (118 + rng() % 12);
    }
    mxfp4_pack(blocks.data(), packed.data(), M, K);
    const std::vector<float> x      = random_columns(rng, N, K);
    const size_t             stride = mxfp4_act_bytes(K);
    std::vector<uint8_t> act(N * stride);
    auto prepare = [&] {
        for (int64_t j = 0; j < N; ++j) mxfp4_quantize_act(&x[j * K], &act[j * stride], K);
    };
    auto gemm = [&](int64_t n, float * dst, int64_t lo, int64_t hi) {
        mxfp4_gemm(packed.data(), M, K, act.data(), stride, n, dst, M, lo, hi);
    };
    // float64 reference over the quantized activations: sum and sum of |terms| per output.
    mxfp4_set_path(1);
    prepare();
    std::vector<double> reference(2 * M * N, 0.0);
    for (int64_t j = 0; j < N; ++j) {
        const int8_t * q = (const int8_t *) &act[j * stride];
        const float *  d = (const float *) (q + K);
        for (int64_t r = 0; r < M; ++r) {
            for (int64_t b = 0; b < nb; ++b) {
                const uint8_t * blk = &blocks[(r * nb + b) * MXFP4_BLOCK_BYTES];
                const double    ws  = blk[0] < 2 ? 0.0 : std::ldexp(1.0, blk[0] - 127);  // e <= 1: flushed
                for (int i = 0; i < 32; ++i) {
                    const int    code = i < 16 ? blk[1 + i] & 15 : blk[1 + i - 16] >> 4;
                    const double t    = kE2M1[code] * ws * q[b * 32 + i] * (double) d[b];
                    reference[j * M + r] += t;
                    reference[M * N + j * M + r] += std::fabs(t);
                }
            }
        }
    }
    const std::vector<Path> paths = {{"avx2", MXFP4_PATH_AVX2}, {"avx-vnni", MXFP4_PATH_AVX_VNNI},
                                     {"avx512-vnni", MXFP4_PATH_AVX512_VNNI}, {"amx", MXFP4_PATH_AMX},
                                     {"neon", MXFP4_PATH_NEON}};
    check_kernel("mxfp4", paths, mxfp4_set_path, prepare, gemm, M, N, reference);
    std::printf("mxfp4 default path: %s\n", mxfp4_path_name());
}

// The weights used as the file holds them (mxfp4_gemm_rows): on every path, packed on the way in groups of tiles,
// they must give the packed kernel's bits. Two shapes: a deep K whose groups hold a few tiles (so a thread's rows
// span groups and a last short tile), and a shallow K whose first group holds hundreds of tiles.
void check_mxfp4_rows(std::mt19937 & rng) {
    const std::vector<Path> paths = {{"scalar", MXFP4_PATH_SCALAR}, {"avx2", MXFP4_PATH_AVX2},
                                     {"avx-vnni", MXFP4_PATH_AVX_VNNI}, {"avx512-vnni", MXFP4_PATH_AVX512_VNNI},
                                     {"amx", MXFP4_PATH_AMX}, {"neon", MXFP4_PATH_NEON}};
    for (const int64_t K : {4096, 64}) {
        const int64_t M = K == 64 ? 16 * 600 + 7 : 16 * 9 + 5, nb = K / MXFP4_BLOCK, N = 17;
        std::vector<uint8_t> blocks(M * nb * MXFP4_BLOCK_BYTES), packed(blocks.size());
        for (size_t i = 0; i < blocks.size(); ++i) {
            blocks[i] = i % MXFP4_BLOCK_BYTES == 0 ? (uint8_t) (118 + rng() % 12) : (uint8_t) rng();
        }
        mxfp4_pack(blocks.data(), packed.data(), M, K);
        const std::vector<float> x      = random_columns(rng, N, K);
        const size_t             stride = mxfp4_act_bytes(K);
        std::vector<uint8_t>     act(N * stride);
        auto packed_gemm = [&](int64_t n, float * dst, int64_t lo, int64_t hi) {
            mxfp4_gemm(packed.data(), M, K, act.data(), stride, n, dst, M, lo, hi);
        };
        auto rows_gemm = [&](int64_t n, float * dst, int64_t lo, int64_t hi) {
            mxfp4_gemm_rows(blocks.data(), M, K, act.data(), stride, n, dst, M, lo, hi);
        };
        for (const Path & p : paths) {
            if (mxfp4_set_path(p.id) != p.id) continue;
            for (int64_t j = 0; j < N; ++j) mxfp4_quantize_act(&x[j * K], &act[j * stride], K);
            bool same = true;
            for (int64_t n : {1, 2, 8, 9, 17}) {
                const std::vector<float> reference_bits = run(packed_gemm, M, n, {0, M});
                for (const std::vector<int64_t> & splits : {std::vector<int64_t>{0, M}, {0, 16, M}, {0, 48, 96, M}}) {
                    same = same && same_bits(run(rows_gemm, M, n, splits), reference_bits, M * n);
                }
            }
            check(same, std::string("mxfp4 ") + p.name + " from ggml's block rows (K " + std::to_string(K) +
                            ") equals the packed kernel");
        }
    }
    mxfp4_set_path(0);
}

// IEEE half -> double, for the float64 references.
static double half_value(const uint8_t * p) {
    const int h = p[0] | p[1] << 8, e = (h >> 10) & 31, m = h & 1023;
    const double v = e == 0 ? std::ldexp((double) m, -24) : std::ldexp(1024.0 + m, e - 25);
    return h & 0x8000 ? -v : v;
}

// One row's K-quant values from ggml's blocks, as (scaled value, min part) pairs, read from the file layout
// (ggml-common.h) rather than from our packed one.
void kquant_row(int type, const uint8_t * row, int64_t K, std::vector<double> & value, std::vector<double> & min) {
    value.assign(K, 0.0), min.assign(K, 0.0);
    for (int64_t sb = 0; sb < K / 256; ++sb) {
        double * v = &value[sb * 256], * mn = &min[sb * 256];
        if (type == KQUANT_Q4_K || type == KQUANT_Q5_K) {
            const bool      q5 = type == KQUANT_Q5_K;
            const uint8_t * b = row + sb * (q5 ? 176 : 144), * s = b + 4, * qs = b + (q5 ? 48 : 16);
            const double d = half_value(b), dmin = half_value(b + 2);
            for (int j = 0; j < 8; ++j) {
                const int sc = j < 4 ? s[j] & 63 : (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
                const int m  = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | (s[j] >> 6) << 4;
                for (int l = 0; l < 32; ++l) {
                    const int q = ((qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15) | (q5 ? (b[16 + l] >> j & 1) << 4 : 0);
                    v[32 * j + l] = d * sc * q, mn[32 * j + l] = -dmin * m;
                }
            }
        } else {
            const uint8_t * b = row + sb * 210;
            const double d = half_value(b + 208);
            for (int i = 0; i < 256; ++i) {
                const int half = i / 128, l = i % 32, k = (i % 128) / 32;  // ql[64 half + 32 (k % 2) + l]
                const int lo = (b[64 * half + 32 * (k % 2) + l] >> (4 * (k / 2))) & 15;
                const int hi = (b[128 + 32 * half + l] >> (2 * k)) & 3;
                v[i] = d * (int8_t) b[192 + i / 16] * ((lo | hi << 4) - 32);
            }
        }
    }
}

void check_kquant(std::mt19937 & rng, int type, const char * kind) {
    const int64_t M = 45, K = 1536, N = 9;
    const size_t  row_bytes = kquant_row_bytes(type, K);
    std::vector<uint8_t> blocks(M * row_bytes), packed(blocks.size());
    for (uint8_t & v : blocks) v = (uint8_t) rng();
    for (int64_t i = 0; i < M * K / 256; ++i) {  // f16 factors of realistic size: 2^-12 .. 2^-9 (exponents 3..6)
        for (int f : type == KQUANT_Q6_K ? std::vector<int>{208} : std::vector<int>{0, 2}) {
            blocks[i * (row_bytes / (K / 256)) + f + 1] = (uint8_t) (((3 + rng() % 4) << 2) | (rng() & 3));
        }
    }
    kquant_pack(type, blocks.data(), packed.data(), M, K);
    std::vector<uint8_t> back(blocks.size());
    kquant_unpack(type, packed.data(), back.data(), M, K);
    check(back == blocks, std::string(kind) + " pack round-trips bit for bit");
    const std::vector<float> x      = random_columns(rng, N, K);
    const size_t             stride = kquant_act_bytes(K);
    std::vector<uint8_t>     act(N * stride);
    auto prepare = [&] {
        for (int64_t j = 0; j < N; ++j) kquant_quantize_act(&x[j * K], &act[j * stride], K);
    };
    auto gemm = [&](int64_t n, float * dst, int64_t lo, int64_t hi) {
        kquant_gemm(type, packed.data(), M, K, act.data(), stride, n, dst, M, lo, hi);
    };
    prepare();
    std::vector<double> reference(2 * M * N, 0.0), value, min;
    for (int64_t r = 0; r < M; ++r) {
        kquant_row(type, &blocks[r * row_bytes], K, value, min);
        for (int64_t j = 0; j < N; ++j) {
            const int8_t * q = (const int8_t *) &act[j * stride];
            const float *  d = (const float *) (q + K);
            for (int64_t k = 0; k < K; ++k) {
                const double a = q[k] * (double) d[k / 32];
                reference[j * M + r] += (value[k] + min[k]) * a;
                reference[M * N + j * M + r] += std::fabs(value[k] * a) + std::fabs(min[k] * a);
            }
        }
    }
    const std::vector<Path> paths = {{"avx2", KQUANT_PATH_AVX2}, {"avx-vnni", KQUANT_PATH_AVX_VNNI},
                                     {"avx512-vnni", KQUANT_PATH_AVX512_VNNI}, {"neon", KQUANT_PATH_NEON}};
    check_kernel(kind, paths, kquant_set_path, prepare, gemm, M, N, reference);
    std::printf("%s default path: %s\n", kind, kquant_path_name());
}

// Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 rows in ggml's layout, against float64 arithmetic on the ggml blocks themselves.
void check_q8(std::mt19937 & rng, int type, const char * kind) {
    const int64_t M = 45, K = 2240, N = 9, nb = K / Q8_BLOCK;
    const size_t  bb = q8_block_bytes(type);
    std::vector<uint8_t> blocks(M * nb * bb), packed(blocks.size());
    for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = (uint8_t) rng();
    const bool with_min = type == Q8_TYPE_Q4_1 || type == Q8_TYPE_Q5_1;
    const bool fifth    = type == Q8_TYPE_Q5_0 || type == Q8_TYPE_Q5_1;
    for (int64_t i = 0; i < M * nb; ++i) {  // f16 d of either sign in [2^-8, 2^-5), m negative
        uint8_t * blk = &blocks[i * bb];
        blk[1] = (uint8_t) ((rng() % 2 ? 0x80 : 0) | (0x1c + rng() % 3));
        if (with_min) blk[3] = (uint8_t) (0xa8 + rng() % 8);
    }
    q8_pack(type, blocks.data(), packed.data(), M, K);
    const std::vector<float> x      = random_columns(rng, N, K);
    const size_t             stride = q8_act_bytes(K);
    std::vector<uint8_t>     act(N * stride);
    auto prepare = [&] {
        for (int64_t j = 0; j < N; ++j) q8_quantize_act(&x[j * K], &act[j * stride], K);
    };
    auto gemm = [&](int64_t n, float * dst, int64_t lo, int64_t hi) {
        q8_gemm(type, packed.data(), M, K, act.data(), stride, n, dst, M, lo, hi);
    };
    q8_set_path(1);
    prepare();
    std::vector<double> reference(2 * M * N, 0.0);
    for (int64_t j = 0; j < N; ++j) {
        const int8_t * q = (const int8_t *) &act[j * stride];
        const float *  d = (const float *) (q + K);
        for (int64_t r = 0; r < M; ++r) {
            for (int64_t b = 0; b < nb; ++b) {
                const uint8_t * blk = &blocks[(r * nb + b) * bb];
                const double    dw = half_value(blk), mw = with_min ? half_value(blk + 2) : 0.0;
                const uint8_t * qh = blk + (with_min ? 4 : 2);
                const uint8_t * qs = qh + (fifth ? 4 : 0);
                for (int i = 0; i < 32; ++i) {
                    const int high   = fifth ? ((qh[i / 8] >> (i % 8)) & 1) << 4 : 0;  // bit i of the word
                    const int nibble = (i < 16 ? qs[i] & 15 : qs[i - 16] >> 4) | high;
                    const double w   = type == Q8_TYPE_Q8_0   ? (int8_t) qs[i] * dw
                                       : type == Q8_TYPE_Q4_0 ? (nibble - 8) * dw
                                       : type == Q8_TYPE_Q5_0 ? (nibble - 16) * dw
                                                              : nibble * dw;
                    const double a  = q[b * 32 + i] * (double) d[b];
                    reference[j * M + r] += w * a + mw * a;
                    reference[M * N + j * M + r] += std::fabs(w * a) + std::fabs(mw * a);
                }
            }
        }
    }
    const std::vector<Path> paths = {{"avx2", Q8_PATH_AVX2}, {"avx-vnni", Q8_PATH_AVX_VNNI},
                                     {"avx512-vnni", Q8_PATH_AVX512_VNNI}, {"neon", Q8_PATH_NEON}};
    check_kernel(kind, paths, q8_set_path, prepare, gemm, M, N, reference);
    std::printf("%s default path: %s\n", kind, q8_path_name());
}

// A bf16 value as a double, for the float64 references.
static double bf16_value(uint16_t v) {
    const uint32_t bits = (uint32_t) v << 16;
    float          f;
    std::memcpy(&f, &bits, 4);
    return (double) f;
}


void check_bf16(std::mt19937 & rng) {
    const int64_t M = 45, K = 2080, N = 9;  // K spans two of the AVX2 path's chunks of 2048 values, the second short
    std::vector<uint16_t> w(M * K), packed(M * K);
    for (uint16_t & v : w) v = (uint16_t) ((rng() % 2 ? 0xbc00 : 0x3c00) | (rng() & 0x3ff));  // |x| in [2^-7, 2^-5)
    bf16_pack(w.data(), packed.data(), M, K);
    const std::vector<float> x      = random_columns(rng, N, K);
    const size_t             stride = bf16_act_bytes(K);
    std::vector<uint8_t> act(N * stride);
    auto prepare = [&] {
        for (int64_t j = 0; j < N; ++j) bf16_convert_act(&x[j * K], &act[j * stride], K);
    };
    auto gemm = [&](int64_t n, float * dst, int64_t lo, int64_t hi) {
        bf16_gemm(packed.data(), M, K, act.data(), stride, n, dst, M, lo, hi);
    };
    bf16_set_path(1);
    prepare();
    std::vector<double> reference(2 * M * N, 0.0);
    for (int64_t j = 0; j < N; ++j) {
        const uint16_t * h = (const uint16_t *) ((const float *) &act[j * stride] + K);
        for (int64_t r = 0; r < M; ++r) {
            for (int64_t k = 0; k < K; ++k) {
                const double t = bf16_value(w[r * K + k]) * bf16_value(h[k]);
                reference[j * M + r] += t;
                reference[M * N + j * M + r] += std::fabs(t);
            }
        }
    }
    // AVX512-BF16 and AMX round their pair products differently: not in this bit-for-bit list.
    const std::vector<Path> paths = {{"avx2", BF16_PATH_AVX2}, {"avx512", BF16_PATH_AVX512}, {"neon", BF16_PATH_NEON}};
    check_kernel("bf16", paths, bf16_set_path, prepare, gemm, M, N, reference);
    std::printf("bf16 default path: %s\n", bf16_path_name());
}

// Prompts (N > 16) may take another path with bits of its own (the x86 blocked GEMM): every path's prompt
// result is checked against float64 arithmetic, and for invariance among prompt sizes and row splits.
void check_bf16_prompts(std::mt19937 & rng) {
    const int64_t M = 45, K = 1056, N = 40;  // K: several blocks of the prompt GEMM, the last short; M: a short tile
    std::vector<uint16_t> w(M * K), packed(M * K);
    for (uint16_t & v : w) v = (uint16_t) ((rng() % 2 ? 0xbc00 : 0x3c00) | (rng() & 0x3ff));
    bf16_pack(w.data(), packed.data(), M, K);
    const std::vector<float> x      = random_columns(rng, N, K);
    const size_t             stride = bf16_act_bytes(K);
    std::vector<uint8_t>     act(N * stride);
    auto gemm = [&](int64_t n, float * dst, int64_t lo, int64_t hi) {
        bf16_gemm(packed.data(), M, K, act.data(), stride, n, dst, M, lo, hi);
    };
    const std::vector<Path> paths = {{"scalar", BF16_PATH_SCALAR}, {"avx2", BF16_PATH_AVX2}, {"avx512", BF16_PATH_AVX512},
                                     {"avx512-bf16", BF16_PATH_AVX512_BF16}, {"neon", BF16_PATH_NEON}};
    for (const Path & p : paths) {
        if (bf16_set_path(p.id) != p.id) continue;
        for (int64_t j = 0; j < N; ++j) bf16_convert_act(&x[j * K], &act[j * stride], K);
        const std::vector<float> whole = run(gemm, M, N, {0, M});
        double worst = 0.0;
        for (int64_t j = 0; j < N; ++j) {
            const uint16_t * h = (const uint16_t *) ((const float *) &act[j * stride] + K);
            for (int64_t r = 0; r < M; ++r) {
                double sum = 0.0, size = 1e-30;
                for (int64_t k = 0; k < K; ++k) {
                    const double t = bf16_value(w[r * K + k]) * bf16_value(h[k]);
                    sum += t, size += std::fabs(t);
                }
                worst = std::max(worst, std::fabs(whole[j * M + r] - sum) / size);
            }
        }
        check(worst < 1e-5, std::string("bf16 ") + p.name + " prompt (N = 40) vs float64");
        bool invariant = true;
        for (int64_t n : {17, 23, 40}) {
            for (const std::vector<int64_t> & splits : {std::vector<int64_t>{0, M}, {0, 16, M}, {0, 32, M}}) {
                invariant = invariant && same_bits(run(gemm, M, n, splits), whole, M * n);
            }
        }
        check(invariant, std::string("bf16 ") + p.name + " prompt bits independent of N > 16 and the row split");
    }
    bf16_set_path(0);
}

// The weights used as the file holds them (bf16_gemm_rows): up to 16 columns its own kernels, checked as every
// kernel is (the FMA paths against scalar bit for bit; vdpbf16ps against float64 and for invariance); prompts
// and AMX pack tiles first and must equal the packed kernel bit for bit. The fast transposing pack of each
// path lays tiles out as bf16-gemm.h says.
void check_bf16_rows(std::mt19937 & rng) {
    const int64_t M = 45, K = 2080, N = 80;
    std::vector<uint16_t> w(M * K), packed(M * K);
    for (uint16_t & v : w) v = (uint16_t) ((rng() % 2 ? 0xbc00 : 0x3c00) | (rng() & 0x3ff));
    const std::vector<float> x      = random_columns(rng, N, K);
    const size_t             stride = bf16_act_bytes(K);
    std::vector<uint8_t>     act(N * stride);
    auto prepare = [&] {
        for (int64_t j = 0; j < N; ++j) bf16_convert_act(&x[j * K], &act[j * stride], K);
    };
    auto packed_gemm = [&](int64_t n, float * dst, int64_t lo, int64_t hi) {
        bf16_gemm(packed.data(), M, K, act.data(), stride, n, dst, M, lo, hi);
    };
    auto rows_gemm = [&](int64_t n, float * dst, int64_t lo, int64_t hi) {
        bf16_gemm_rows(w.data(), M, K, act.data(), stride, n, dst, M, lo, hi);
    };
    bf16_set_path(1);
    prepare();
    std::vector<double> reference(2 * M * 16, 0.0);
    for (int64_t j = 0; j < 16; ++j) {
        const uint16_t * h = (const uint16_t *) ((const float *) &act[j * stride] + K);
        for (int64_t r = 0; r < M; ++r) {
            for (int64_t k = 0; k < K; ++k) {
                const double t = bf16_value(w[r * K + k]) * bf16_value(h[k]);
                reference[j * M + r] += t;
                reference[M * 16 + j * M + r] += std::fabs(t);
            }
        }
    }
    const std::vector<Path> fma_paths = {{"avx2", BF16_PATH_AVX2}, {"avx512", BF16_PATH_AVX512}, {"neon", BF16_PATH_NEON}};
    check_kernel("bf16 rows", fma_paths, bf16_set_path, prepare, rows_gemm, M, 16, reference);
    const std::vector<Path> paths = {{"scalar", BF16_PATH_SCALAR}, {"avx2", BF16_PATH_AVX2}, {"avx512", BF16_PATH_AVX512},
                                     {"avx512-bf16", BF16_PATH_AVX512_BF16}, {"amx", BF16_PATH_AMX}, {"neon", BF16_PATH_NEON}};
    for (const Path & p : paths) {
        if (bf16_set_path(p.id) != p.id) continue;
        bf16_pack(w.data(), packed.data(), M, K);
        bool laid_out = true;
        for (int64_t r = 0; r < M; ++r) {
            const int64_t t0 = r / 16 * 16, R = std::min<int64_t>(16, M - t0);
            for (int64_t k = 0; k < K; ++k) laid_out = laid_out && packed[t0 * K + (k / 2) * 2 * R + 2 * (r - t0) + k % 2] == w[r * K + k];
        }
        check(laid_out, std::string("bf16 ") + p.name + " pack lays out tiles of 16 rows' value pairs");
        prepare();
        bool same = true;
        for (int64_t n : p.id == BF16_PATH_AMX ? std::vector<int64_t>{1, 3, 16, 17, 40} : std::vector<int64_t>{65, 80}) {
            const std::vector<float> reference_bits = run(packed_gemm, M, n, {0, M});
            for (const std::vector<int64_t> & splits : {std::vector<int64_t>{0, M}, {0, 16, M}, {0, 32, 48, M}}) {
                same = same && same_bits(run(rows_gemm, M, n, splits), reference_bits, M * n);
            }
        }
        check(same, std::string("bf16 ") + p.name + " from row-major weights, packed on the way, equals the packed kernel");
        if (p.id != BF16_PATH_AVX512_BF16) continue;
        const std::vector<float> whole = run(rows_gemm, M, 16, {0, M});
        double worst = 0.0;
        for (int64_t i = 0; i < M * 16; ++i) {
            worst = std::max(worst, std::fabs(whole[i] - reference[i]) / (reference[M * 16 + i] + 1e-30));
        }
        check(worst < 1e-5, "bf16 rows avx512-bf16 vs float64");
        bool invariant = true;
        const std::vector<float> widest = run(rows_gemm, M, 64, {0, M});  // the row kernels' widest batch
        for (int64_t n : {1, 2, 3, 5, 8, 9, 17, 40}) {
            for (const std::vector<int64_t> & splits : {std::vector<int64_t>{0, M}, {0, 16, M}, {0, 32, 48, M}}) {
                invariant = invariant && same_bits(run(rows_gemm, M, n, splits), whole, M * std::min<int64_t>(n, 16));
            }
        }
        invariant = invariant && same_bits(widest, whole, M * 16);
        check(invariant, "bf16 rows avx512-bf16 is batch invariant up to 64 columns");
    }
    bf16_set_path(0);
}

}  // namespace

// Attention over an f16 cache: every path this CPU runs equals scalar, and each query's row has the same bits
// alone as in a batch of 5 (causal mask, 2 threads' split). Values are f16-exact, so no conversion is needed.
void check_attention(std::mt19937 & rng) {
    const int64_t dk = 64, n_kv = 150, N = 5, H = 6, Hkv = 2;
    std::uniform_int_distribution<int> pick(0, 255);
    auto half = [&]() { return (uint16_t) (0x3000 + pick(rng) * 8); };  // positive values in [0.125, 0.5)
    std::vector<float>    q(N * H * dk);
    std::vector<uint16_t> k(Hkv * n_kv * dk), v(Hkv * n_kv * dk), mask(N * n_kv, 0);
    for (float & x : q) x = (pick(rng) - 128) / 64.0f;
    for (uint16_t & x : k) x = half();
    for (uint16_t & x : v) x = half();
    for (int64_t i = 0; i < N; ++i)
        for (int64_t c = n_kv - N + i + 1; c < n_kv; ++c) mask[i * n_kv + c] = 0xfc00;  // -inf
    auto attend = [&](int64_t first, int64_t count) {
        std::vector<float> out(count * H * dk, NAN);
        attention_problem  p{};
        p.dk = p.dv = dk, p.n_kv = n_kv, p.n_query = count, p.n_head = H, p.n_head_kv = Hkv;
        p.q = q.data() + first * dk, p.q_query_stride = dk * 4, p.q_head_stride = N * dk * 4;
        p.k = k.data(), p.k_cell_stride = dk * 2, p.k_head_stride = n_kv * dk * 2;
        p.v = v.data(), p.v_cell_stride = dk * 2, p.v_head_stride = n_kv * dk * 2;
        p.mask = mask.data() + first * n_kv, p.mask_query_stride = n_kv * 2, p.mask_planes = 1;
        p.scale = 0.125f, p.out = out.data(), p.out_query_stride = H * dk * 4, p.out_head_stride = dk * 4;
        std::vector<char> scratch(attention_scratch_bytes(&p));
        for (int ith = 0; ith < 2; ++ith) attention_compute(&p, ith, 2, scratch.data());
        return out;
    };
    attention_set_path(ATTENTION_PATH_SCALAR);
    const std::vector<float> reference = attend(0, N);
    const Path paths[] = {{"avx2", ATTENTION_PATH_AVX2}, {"avx512", ATTENTION_PATH_AVX512}};
    for (const Path & path : paths) {
        if (attention_set_path(path.id) != path.id) {
            std::printf("skip attention %s: not on this CPU\n", path.name);
            continue;
        }
        check(same_bits(attend(0, N), reference, reference.size()), std::string("attention ") + path.name + " equals scalar bit for bit");
    }
    attention_set_path(ATTENTION_PATH_AUTO);
    const std::vector<float> batch = attend(0, N);
    bool alone_same = true;
    for (int64_t i = 0; i < N; ++i) {
        const std::vector<float> alone = attend(i, 1);
        alone_same &= std::memcmp(alone.data(), batch.data() + i * H * dk, H * dk * sizeof(float)) == 0;
    }
    check(alone_same, std::string("attention ") + attention_path_name() + " is batch invariant");
}

int main() {
    std::mt19937 rng(7);
    check_attention(rng);
    check_mxfp4(rng);
    check_kquant(rng, KQUANT_Q4_K, "q4_k");
    check_kquant(rng, KQUANT_Q5_K, "q5_k");
    check_kquant(rng, KQUANT_Q6_K, "q6_k");
    check_q8(rng, Q8_TYPE_Q8_0, "q8_0");
    check_q8(rng, Q8_TYPE_Q4_0, "q4_0");
    check_q8(rng, Q8_TYPE_Q4_1, "q4_1");
    check_q8(rng, Q8_TYPE_Q5_0, "q5_0");
    check_q8(rng, Q8_TYPE_Q5_1, "q5_1");
    check_bf16(rng);
    check_bf16_prompts(rng);
    check_bf16_rows(rng);
    check_mxfp4_rows(rng);
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
