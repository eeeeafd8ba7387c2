// Times ggml MUL_MAT through the real CPU backend and its buffer types, on weight sets larger than the
// last-level cache, and measures the machine's read bandwidth and f32 FMA peak with the same thread count.
// Built and driven by native/bench (python -m native.bench); prints one JSON object per line.
//
//   mulmat-bench --threads 2 --gb 1.1 --reps 5 --n 1,2,4,8,16 --kernels mxfp4-ours,mxfp4-repack,...
//
// Kernels: mxfp4-ours / bf16-ours / q8_0-ours / q4_0-ours / q4_1-ours / q5_0-ours / q5_1-ours / q4_k-ours /
// q5_k-ours / q6_k-ours (our CPU_ASSISTANT buffer), mxfp4-repack / q4_0-repack / q4_k-repack (stock CPU_REPACK
// buffer), mxfp4-stock / bf16-stock / q8_0-stock / q4_0-stock / q4_1-stock / q5_0-stock / q5_1-stock /
// q4_k-stock / q5_k-stock / q6_k-stock (plain CPU buffer:
// the stock kernels without repacking; what llama.cpp runs for Q5_K and Q6_K on x86, which it does not repack).
// Weight sets are model-shaped: 2048x5632 and 5632x2048 matrices, repeated until the set exceeds --gb.
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#    include <immintrin.h>
#elif defined(__aarch64__)
#    include <arm_neon.h>
#endif

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Process CPU time: cpu / (wall * threads) well below 1 means other processes took our cores (noise).
double cpu_seconds() {
    rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

std::vector<std::string> split(const std::string & s) {
    std::vector<std::string> out;
    std::stringstream        in(s);
    for (std::string item; std::getline(in, item, ',');) out.push_back(item);
    return out;
}

// The CPU backend through ggml's registry, so that this program runs with either native build: one links it
// in, the portable one has a module per CPU family beside this program and loads the best for this CPU.
ggml_backend_dev_t cpu_device() {
    if (ggml_backend_reg_count() == 0) ggml_backend_load_all();
    return ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
}

void set_threads(ggml_backend_t backend, int threads) {
    auto set = (ggml_backend_set_n_threads_t) ggml_backend_reg_get_proc_address(
        ggml_backend_dev_backend_reg(cpu_device()), "ggml_backend_set_n_threads");
    set(backend, threads);
}

ggml_backend_buffer_type_t find_buft(const char * name) {
    ggml_backend_dev_t dev = cpu_device();
    if (!std::strcmp(name, "CPU")) return ggml_backend_dev_buffer_type(dev);
    auto get_extra = (ggml_backend_dev_get_extra_bufts_t) ggml_backend_reg_get_proc_address(
        ggml_backend_dev_backend_reg(dev), "ggml_backend_dev_get_extra_bufts");
    for (ggml_backend_buffer_type_t * b = get_extra ? get_extra(dev) : nullptr; b && *b; ++b) {
        if (!std::strcmp(ggml_backend_buft_name(*b), name)) return *b;
    }
    return nullptr;
}

// The weight type a kernel name starts with ("q4_k-ours": ggml names it "q4_K").
ggml_type weight_type(const std::string & kernel) {
    for (ggml_type type : {GGML_TYPE_MXFP4, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0,
                           GGML_TYPE_Q5_1, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K}) {
        std::string name = ggml_type_name(type);
        for (char & c : name) c = (char) std::tolower((unsigned char) c);
        if (kernel.rfind(name + "-", 0) == 0) return type;
    }
    return GGML_TYPE_BF16;
}

// Random weights of one matrix in ggml's own format (speed does not depend on the values, but f16 scales
// are kept finite and normal, as a quantizer writes them).
std::vector<uint8_t> random_weights(ggml_type type, int64_t K, int64_t M, std::mt19937 & rng) {
    std::vector<uint8_t> data(ggml_row_size(type, K) * M);
    for (auto & b : data) b = (uint8_t) rng();
    const size_t block = ggml_type_size(type);
    if (type == GGML_TYPE_MXFP4) {
        for (size_t i = 0; i < data.size(); i += 17) data[i] = (uint8_t) (120 + rng() % 8);  // E8M0 exponents
    } else if (type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K || type == GGML_TYPE_Q6_K) {  // f16 factors ~2^-8
        for (size_t i = 0; i < data.size(); i += block) {
            for (size_t f : type == GGML_TYPE_Q6_K ? std::vector<size_t>{209} : std::vector<size_t>{1, 3}) data[i + f] = 0x1c;
        }
    } else if (type != GGML_TYPE_BF16) {
        for (size_t i = 0; i < data.size(); i += block) {
            data[i + 1] = (uint8_t) (0x20 + rng() % 4);                                  // d ~ 2^-7
            if (type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_1) data[i + 3] = (uint8_t) (0xa0 + rng() % 4);  // m ~ -2^-7 * 8
        }
    } else {
        for (size_t i = 1; i < data.size(); i += 2) data[i] = (uint8_t) (0x3c + rng() % 2);  // bf16 |x| < 1
    }
    return data;
}

struct WeightSet {
    std::string                 kernel;
    ggml_context *              ctx    = nullptr;
    ggml_backend_buffer_t       buffer = nullptr;
    std::vector<ggml_tensor *>  weights;
    size_t                      bytes = 0;
};

bool make_set(WeightSet & set, const std::string & kernel, double gb, std::mt19937 & rng) {
    const ggml_type   type = weight_type(kernel);
    const char *      buft_name = kernel.find("ours") != std::string::npos     ? "CPU_ASSISTANT"
                                  : kernel.find("repack") != std::string::npos ? "CPU_REPACK"
                                                                               : "CPU";
    ggml_backend_buffer_type_t buft = find_buft(buft_name);
    if (!buft) {
        std::fprintf(stderr, "mulmat-bench: no %s buffer type in this build (kernel %s)\n", buft_name, kernel.c_str());
        return false;
    }
    const int64_t shapes[2][2] = {{2048, 5632}, {5632, 2048}};  // {K, M}
    const size_t  pair = ggml_row_size(type, 2048) * 5632 * 2;
    const int     n    = 2 * (int) std::ceil(gb * 1e9 / pair);
    ggml_init_params params = {ggml_tensor_overhead() * (n + 1), nullptr, true};
    set.kernel = kernel;
    set.ctx    = ggml_init(params);
    for (int i = 0; i < n; ++i) set.weights.push_back(ggml_new_tensor_2d(set.ctx, type, shapes[i % 2][0], shapes[i % 2][1]));
    set.buffer = ggml_backend_alloc_ctx_tensors_from_buft(set.ctx, buft);
    if (!set.buffer) return false;
    const std::vector<uint8_t> src[2] = {random_weights(type, 2048, 5632, rng), random_weights(type, 5632, 2048, rng)};
    for (int i = 0; i < n; ++i) {
        ggml_backend_tensor_set(set.weights[i], src[i % 2].data(), 0, src[i % 2].size());
        set.bytes += src[i % 2].size();
    }
    return true;
}

// One graph holding a MUL_MAT per weight, each against an N-column activation of its K.
struct Run {
    ggml_context * ctx   = nullptr;
    ggml_cgraph *  graph = nullptr;
};

Run make_run(const WeightSet & set, int N, std::mt19937 & rng) {
    size_t out_bytes = 0;
    for (auto * w : set.weights) out_bytes += w->ne[1] * N * sizeof(float);
    ggml_init_params params = {out_bytes + 2 * 5632 * N * sizeof(float) + ggml_tensor_overhead() * (set.weights.size() * 2 + 8) +
                                   ggml_graph_overhead_custom(set.weights.size() * 2 + 8, false) + (1 << 20),
                               nullptr, false};
    Run run;
    run.ctx = ggml_init(params);
    ggml_tensor * x[2];
    for (int i = 0; i < 2; ++i) {
        x[i] = ggml_new_tensor_2d(run.ctx, GGML_TYPE_F32, i == 0 ? 2048 : 5632, N);
        std::normal_distribution<float> normal;
        for (int64_t k = 0; k < ggml_nelements(x[i]); ++k) ((float *) x[i]->data)[k] = normal(rng);
    }
    run.graph = ggml_new_graph_custom(run.ctx, set.weights.size() * 2 + 8, false);
    for (auto * w : set.weights) ggml_build_forward_expand(run.graph, ggml_mul_mat(run.ctx, w, x[w->ne[0] == 2048 ? 0 : 1]));
    return run;
}

// The best rate over reps runs of work(t) on threads t = 0..threads-1 at once: amount / seconds.
template <class Work> double best_rate(int threads, int reps, double amount, Work work) {
    double best = 0;
    for (int r = 0; r < reps; ++r) {
        std::vector<std::thread> pool;
        const double             t0 = now();
        for (int t = 0; t < threads; ++t) pool.emplace_back(work, t);
        for (auto & th : pool) th.join();
        best = std::max(best, amount / (now() - t0));
    }
    return best;
}

// A buffer on transparent huge pages where Linux grants them, as our weight buffer asks (assistant-kernels.cpp),
// or, with huge = false, on 4 KB pages (MADV_NOHUGEPAGE), so the bandwidth test can try both.
struct PageBuffer {
    uint8_t * bytes;
    size_t    size;

    PageBuffer(size_t n, bool huge) : size(n) {
        void * p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) throw std::bad_alloc();
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
        madvise(p, n, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#endif
        bytes = (uint8_t *) p;
        std::memset(bytes, 1, n);
    }
    ~PageBuffer() { munmap(bytes, size); }
    uint8_t * data() const { return bytes; }
};

// How a read strategy fetches ahead: not at all (the hardware prefetchers alone), or a software prefetch
// `distance` bytes ahead into L1 (T0), L2 (T1) or as non-temporal (NTA); `stream` reads with MOVNTDQA.
enum class Hint { None, T0, T1, Nta };

// Sums a slice 256 bytes a step (every line once), with the widest loads this compiler targets.
template <Hint HINT> int64_t read_slice(const uint8_t * p, size_t n, size_t distance, bool stream) {
#ifdef __AVX512F__
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 256) {
        for (int l = 0; l < 4 && HINT != Hint::None; ++l) {
            const char * ahead = (const char *) p + i + distance + 64 * l;
            _mm_prefetch(ahead, HINT == Hint::T0 ? _MM_HINT_T0 : HINT == Hint::T1 ? _MM_HINT_T1 : _MM_HINT_NTA);
        }
        if (stream) {
            a0 = _mm512_add_epi64(a0, _mm512_stream_load_si512((void *) (p + i)));
            a1 = _mm512_add_epi64(a1, _mm512_stream_load_si512((void *) (p + i + 64)));
            a2 = _mm512_add_epi64(a2, _mm512_stream_load_si512((void *) (p + i + 128)));
            a3 = _mm512_add_epi64(a3, _mm512_stream_load_si512((void *) (p + i + 192)));
        } else {
            a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(p + i));
            a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(p + i + 64));
            a2 = _mm512_add_epi64(a2, _mm512_loadu_si512(p + i + 128));
            a3 = _mm512_add_epi64(a3, _mm512_loadu_si512(p + i + 192));
        }
    }
    return _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
#elif defined(__AVX2__)
    __m256i a[8];
    for (auto & v : a) v = _mm256_setzero_si256();
    for (size_t i = 0; i < n; i += 256) {
        for (int l = 0; l < 4 && HINT != Hint::None; ++l) {
            const char * ahead = (const char *) p + i + distance + 64 * l;
            _mm_prefetch(ahead, HINT == Hint::T0 ? _MM_HINT_T0 : HINT == Hint::T1 ? _MM_HINT_T1 : _MM_HINT_NTA);
        }
        for (int v = 0; v < 8; ++v) {
            const __m256i * q = (const __m256i *) (p + i + 32 * v);
            a[v] = _mm256_add_epi64(a[v], stream ? _mm256_stream_load_si256(q) : _mm256_loadu_si256(q));
        }
    }
    int64_t lanes[4];
    for (int v = 1; v < 8; ++v) a[0] = _mm256_add_epi64(a[0], a[v]);
    _mm256_storeu_si256((__m256i *) lanes, a[0]);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3];
#else
    (void) distance;
    (void) stream;
    int64_t s[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < n; i += 32) {
        for (int j = 0; j < 4; ++j) {
            int64_t v;
            std::memcpy(&v, p + i + 8 * j, 8);
            s[j] += v;
        }
    }
    return s[0] + s[1] + s[2] + s[3];
#endif
}

struct ReadStrategy {
    const char * name;
    Hint         hint;
    size_t       distance;
    bool         stream, huge;
};

// The read bandwidth: every strategy below, best of reps each, on a buffer as large as a weight set, each
// thread reading its own slice; the best of them is the limit. One fixed way of reading understated it on
// some CPUs (a kernel read faster than "the limit"), so the test tries what a kernel might do: plain loads,
// software prefetch at several distances and levels, non-temporal prefetch and streaming loads, huge and
// 4 KB pages, the given thread count and every hardware thread. Prints one line per strategy, then the best.
double read_bandwidth(int threads, size_t bytes, int reps) {
    static const ReadStrategy strategies[] = {
        {"plain", Hint::None, 0, false, true},           {"prefetch-t0-1k", Hint::T0, 1024, false, true},
        {"prefetch-t0-4k", Hint::T0, 4096, false, true}, {"prefetch-t0-16k", Hint::T0, 16384, false, true},
        {"prefetch-t1-4k", Hint::T1, 4096, false, true}, {"prefetch-nta-4k", Hint::Nta, 4096, false, true},
        {"stream", Hint::None, 0, true, true},           {"plain-4k-pages", Hint::None, 0, false, false},
        {"prefetch-t0-4k-4k-pages", Hint::T0, 4096, false, false},
    };
    const int all = (int) std::max(1u, std::thread::hardware_concurrency());
    double    best = 0;
    std::string best_name;
    for (bool huge : {true, false}) {
        PageBuffer buf(bytes, huge);
        for (const ReadStrategy & s : strategies) {
            if (s.huge != huge) continue;
            std::vector<int> counts = {threads};
            if (all != threads) counts.push_back(all);
            for (int n_threads : counts) {
                std::vector<int64_t> sink(n_threads);
                const double rate = best_rate(n_threads, reps, bytes / 1e9, [&](int t) {
                    const uint8_t * p = buf.data() + bytes / n_threads * t / 256 * 256;  // aligned for streaming loads
                    const size_t    n = bytes / n_threads / 256 * 256;
                    switch (s.hint) {
                        case Hint::None: sink[t] = read_slice<Hint::None>(p, n, s.distance, s.stream); break;
                        case Hint::T0: sink[t] = read_slice<Hint::T0>(p, n, s.distance, s.stream); break;
                        case Hint::T1: sink[t] = read_slice<Hint::T1>(p, n, s.distance, s.stream); break;
                        case Hint::Nta: sink[t] = read_slice<Hint::Nta>(p, n, s.distance, s.stream); break;
                    }
                });
                const std::string name = std::string(s.name) + (n_threads == threads ? "" : "-all-threads");
                std::printf("{\"read_strategy\": \"%s\", \"gbps\": %.3f, \"threads\": %d}\n", name.c_str(), rate,
                            n_threads);
                if (rate > best) best = rate, best_name = name;
            }
        }
    }
    std::printf("{\"read_best\": \"%s\"}\n", best_name.c_str());
    return best;
}

// Best-of-reps f32 multiply-add peak in GFLOP/s, each thread running 12 independent chains of FMAs (enough to
// cover their latency on every CPU we know): the compute limit a BF16 kernel that widens to f32 works
// against. 256-bit FMAs on x86-64 (what the AVX2 paths use), 128-bit on ARM64, plain fmaf elsewhere.
#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) float fma_chains(int64_t rounds) {
    __m256       acc[12];
    const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps((float) i);
    for (int64_t r = 0; r < rounds; ++r) {
        for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
    }
    float out[8], sum = 0;
    for (int i = 0; i < 12; ++i) {
        _mm256_storeu_ps(out, acc[i]);
        sum += out[0];
    }
    return sum;
}
constexpr int kFmaLanes = 8;
bool fma_supported() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
#elif defined(__aarch64__)
float fma_chains(int64_t rounds) {
    float32x4_t acc[12];
    const float32x4_t a = vdupq_n_f32(0.999f), b = vdupq_n_f32(1e-3f);
    for (int i = 0; i < 12; ++i) acc[i] = vdupq_n_f32((float) i);
    for (int64_t r = 0; r < rounds; ++r) {
        for (int i = 0; i < 12; ++i) acc[i] = vfmaq_f32(b, acc[i], a);
    }
    float sum = 0;
    for (int i = 0; i < 12; ++i) sum += vgetq_lane_f32(acc[i], 0);
    return sum;
}
constexpr int kFmaLanes = 4;
bool fma_supported() { return true; }
#else
float fma_chains(int64_t rounds) {
    float acc[12];
    for (int i = 0; i < 12; ++i) acc[i] = (float) i;
    for (int64_t r = 0; r < rounds; ++r) {
        for (int i = 0; i < 12; ++i) acc[i] = std::fma(acc[i], 0.999f, 1e-3f);
    }
    float sum = 0;
    for (float v : acc) sum += v;
    return sum;
}
constexpr int kFmaLanes = 1;
bool fma_supported() { return true; }
#endif

double fma_peak(int threads, int reps) {
    if (!fma_supported()) return 0;
    const int64_t      rounds = 20000000;
    std::vector<float> sink(threads);
    return best_rate(threads, reps, 2.0 * 12 * kFmaLanes * rounds * threads / 1e9,
                     [&](int t) { sink[t] = fma_chains(rounds); });
}

// Batch invariance: every column of every (N, threads) configuration must equal, bit for bit, that column
// computed alone with one thread. Checked on the set's first matrix.
void check_invariance(ggml_backend_t backend, const WeightSet & set, std::mt19937 & rng) {
    ggml_tensor * w  = set.weights[0];
    const int64_t K = w->ne[0], M = w->ne[1], NMAX = 16;
    std::vector<float>              x(K * NMAX);
    std::normal_distribution<float> normal;
    for (auto & v : x) v = normal(rng);
    auto compute = [&](int64_t first, int64_t n, int threads) {
        ggml_init_params params = {(size_t) (K + M) * n * sizeof(float) + (1 << 20), nullptr, false};
        ggml_context *   ctx    = ggml_init(params);
        ggml_tensor *    xt     = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, n);
        std::memcpy(xt->data, x.data() + first * K, K * n * sizeof(float));
        ggml_tensor * y = ggml_mul_mat(ctx, w, xt);
        ggml_cgraph * g = ggml_new_graph(ctx);
        ggml_build_forward_expand(g, y);
        set_threads(backend, threads);
        ggml_backend_graph_compute(backend, g);
        std::vector<float> out((float *) y->data, (float *) y->data + M * n);
        ggml_free(ctx);
        return out;
    };
    std::vector<std::vector<float>> alone(NMAX);
    for (int64_t j = 0; j < NMAX; ++j) alone[j] = compute(j, 1, 1);
    bool   invariant = true;
    double max_diff  = 0;
    for (int threads : {1, 2}) {
        for (int64_t n : {1, 3, 8, 16}) {
            const std::vector<float> out = compute(0, n, threads);
            for (int64_t j = 0; j < n; ++j) {
                invariant = invariant && !std::memcmp(out.data() + j * M, alone[j].data(), M * sizeof(float));
                for (int64_t i = 0; i < M; ++i) max_diff = std::max(max_diff, (double) std::fabs(out[j * M + i] - alone[j][i]));
            }
        }
    }
    std::printf("{\"kernel\": \"%s\", \"batch_invariant\": %s, \"max_abs_diff\": %.9g}\n", set.kernel.c_str(),
                invariant ? "true" : "false", max_diff);
    std::fflush(stdout);
}

}  // namespace

int main(int argc, char ** argv) {
    int                      threads = 2, reps = 5;
    double                   gb      = 1.1;
    std::vector<std::string> ns      = {"1", "2", "4", "8", "16"};
    std::vector<std::string> kernels = {"mxfp4-ours", "mxfp4-repack", "mxfp4-stock", "bf16-ours", "bf16-stock"};
    bool                     bandwidth = true, invariance = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
        else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
        else if (a == "--gb" && i + 1 < argc) gb = std::atof(argv[++i]);
        else if (a == "--n" && i + 1 < argc) ns = split(argv[++i]);
        else if (a == "--kernels" && i + 1 < argc) kernels = split(argv[++i]);
        else if (a == "--no-bandwidth") bandwidth = false;
        else if (a == "--check-invariance") invariance = true;
        else {
            std::fprintf(stderr, "usage: %s [--threads T] [--reps R] [--gb G] [--n 1,2,...] [--kernels a,b] [--no-bandwidth] [--check-invariance]\n", argv[0]);
            return 2;
        }
    }

    ggml_backend_t backend = ggml_backend_dev_init(cpu_device(), nullptr);
    set_threads(backend, threads);
    std::mt19937 rng(1234);

    std::vector<WeightSet> sets(kernels.size());
    for (size_t i = 0; i < kernels.size(); ++i) {
        if (!make_set(sets[i], kernels[i], gb, rng)) return 1;
        std::printf("{\"kernel\": \"%s\", \"weight_bytes\": %zu, \"matrices\": %zu}\n", kernels[i].c_str(), sets[i].bytes,
                    sets[i].weights.size());
        std::fflush(stdout);
    }
    if (invariance) {
        for (auto & set : sets) check_invariance(backend, set, rng);
        set_threads(backend, threads);
    }
    if (bandwidth) {
        std::printf("{\"bandwidth_gbps\": %.3f, \"threads\": %d}\n", read_bandwidth(threads, (size_t) (gb * 1e9), reps), threads);
        std::printf("{\"fma_peak_gflops\": %.1f, \"fma_bits\": %d, \"threads\": %d}\n", fma_peak(threads, 3),
                    32 * kFmaLanes, threads);
        std::fflush(stdout);
    }

    // Interleaved: every repetition runs every (N, kernel) once, so machine noise hits them alike.
    std::vector<std::vector<Run>> runs(reps > 0 ? ns.size() : 0, std::vector<Run>(sets.size()));
    for (size_t a = 0; a < runs.size(); ++a) {
        for (size_t b = 0; b < sets.size(); ++b) {
            runs[a][b] = make_run(sets[b], std::atoi(ns[a].c_str()), rng);
            ggml_backend_graph_compute(backend, runs[a][b].graph);  // warm-up
        }
    }
    for (int r = 0; r < reps; ++r) {
        for (size_t a = 0; a < ns.size(); ++a) {
            for (size_t b = 0; b < sets.size(); ++b) {
                const double c0 = cpu_seconds(), t0 = now();
                ggml_backend_graph_compute(backend, runs[a][b].graph);
                const double s = now() - t0, share = (cpu_seconds() - c0) / (s * threads);
                std::printf("{\"kernel\": \"%s\", \"n\": %s, \"rep\": %d, \"seconds\": %.6f, \"cpu_share\": %.3f, "
                            "\"weight_bytes\": %zu}\n", sets[b].kernel.c_str(), ns[a].c_str(), r, s, share, sets[b].bytes);
                std::fflush(stdout);
            }
        }
    }
    for (auto & row : runs) {
        for (auto & run : row) ggml_free(run.ctx);
    }
    for (auto & set : sets) {
        ggml_backend_buffer_free(set.buffer);
        ggml_free(set.ctx);
    }
    ggml_backend_free(backend);
    return 0;
}
