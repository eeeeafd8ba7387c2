// The extra buffer type that puts our kernels into ggml-cpu (the mechanism ggml's own repack and AMX
// paths use). Weights placed in this buffer are repacked once, in set_tensor, into the layouts of
// mxfp4-gemm.h, q8-gemm.h (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1), kquant-gemm.h (Q4_K, Q5_K, Q6_K) and bf16-gemm.h; MUL_MAT on them
// then runs our kernels for every batch size, since the stock kernels cannot read those layouts.
//
// ASSISTANT_MXFP4_KERNEL / ASSISTANT_Q8_KERNEL / ASSISTANT_KQUANT_KERNEL / ASSISTANT_BF16_KERNEL, read once at
// start-up:
//   unset or "auto"   our kernel on its best instruction path for this CPU; where that would be the scalar
//                     reference (no fast path here), our buffer type does not claim the weight type and
//                     llama.cpp's stock kernel runs, so we are never slower than stock
//   "stock"           our buffer type does not claim that weight type, so llama.cpp's stock path runs
//   a path name       force an instruction path: MXFP4 "scalar", "avx2", "avx-vnni", "avx512-vnni", "amx"
//                     (AMX-INT8 for batches of 9 or more columns, the default where Linux grants AMX),
//                     "neon" (ARM64 with sdot); Q8 (Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 together) "scalar", "avx2",
//                     "avx-vnni", "avx512-vnni", "neon"; BF16 "scalar", "avx2", "avx512" (widen + FMA),
//                     "avx512-bf16" (vdpbf16ps), "amx" (tile multiply; the default where Linux grants AMX,
//                     else whichever of "avx512-bf16" and "avx512" a start-up measurement finds faster, else
//                     "avx512", else "avx2"), "neon"; K-quants (Q4_K, Q5_K and Q6_K together) "scalar", "avx2",
//                     "avx-vnni", "avx512-vnni", "neon". A path this CPU cannot run is refused, never run.
// ASSISTANT_WEIGHTS: unset or "packed" BF16 and MXFP4 matrices are repacked into our buffer as above; "mapped"
//                     leaves them where llama.cpp put them (its mapping of the file: no copy, loading at the
//                     speed of reading, pages shared with the page cache): bf16_gemm_rows reads BF16 rows
//                     there, mxfp4_gemm_rows MXFP4 block rows (on AVX-512; on other paths MXFP4 stays
//                     packed at load).
// ASSISTANT_ATTENTION: unset or "auto" our batch-invariant attention (attention.h) computes flash attention
//                     over an f16 cache for batches below kAttentionQueries queries; "stock" leaves it to
//                     llama.cpp; a path name ("scalar", "avx2", "avx512") forces a path.
#include "assistant-kernels.h"

#include "attention.h"
#include "bf16-gemm.h"
#include "kquant-gemm.h"
#include "mxfp4-gemm.h"
#include "q8-gemm.h"

#include "ggml-backend-impl.h"
#include "ggml-cpu-impl.h"
#include "ggml-cpu.h"
#include "ggml-impl.h"
#include "traits.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

#if defined(__linux__)
#    include <sys/mman.h>
#    include <unistd.h>
#endif

namespace {

struct Settings {
    bool        mxfp4     = true;
    bool        q8        = true;
    bool        bf16      = true;
    bool        kquant    = true;
    bool        attention = true;
    bool        bf16_rows  = false;  // BF16 weights used from the file's mapping as they are (bf16_gemm_rows)
    bool        mxfp4_rows = false;  // MXFP4 weights the same way (mxfp4_gemm_rows)
    std::string description;

    Settings() {
        mxfp4 = choose("ASSISTANT_MXFP4_KERNEL",
                       {{"scalar", MXFP4_PATH_SCALAR}, {"avx2", MXFP4_PATH_AVX2}, {"avx-vnni", MXFP4_PATH_AVX_VNNI},
                        {"avx512-vnni", MXFP4_PATH_AVX512_VNNI}, {"amx", MXFP4_PATH_AMX}, {"neon", MXFP4_PATH_NEON}},
                       mxfp4_set_path, MXFP4_PATH_SCALAR);
        q8    = choose("ASSISTANT_Q8_KERNEL",
                       {{"scalar", Q8_PATH_SCALAR}, {"avx2", Q8_PATH_AVX2}, {"avx-vnni", Q8_PATH_AVX_VNNI},
                        {"avx512-vnni", Q8_PATH_AVX512_VNNI}, {"neon", Q8_PATH_NEON}},
                       q8_set_path, Q8_PATH_SCALAR);
        bf16  = choose("ASSISTANT_BF16_KERNEL",
                       {{"scalar", BF16_PATH_SCALAR}, {"avx2", BF16_PATH_AVX2}, {"avx512", BF16_PATH_AVX512},
                        {"avx512-bf16", BF16_PATH_AVX512_BF16}, {"amx", BF16_PATH_AMX}, {"neon", BF16_PATH_NEON}},
                       bf16_set_path, BF16_PATH_SCALAR);
        kquant = choose("ASSISTANT_KQUANT_KERNEL",
                        {{"scalar", KQUANT_PATH_SCALAR}, {"avx2", KQUANT_PATH_AVX2}, {"avx-vnni", KQUANT_PATH_AVX_VNNI},
                         {"avx512-vnni", KQUANT_PATH_AVX512_VNNI}, {"neon", KQUANT_PATH_NEON}},
                        kquant_set_path, KQUANT_PATH_SCALAR);
        // the scalar attention is still ours: its bits must not depend on the batch on any CPU
        attention = choose("ASSISTANT_ATTENTION",
                           {{"scalar", ATTENTION_PATH_SCALAR}, {"avx2", ATTENTION_PATH_AVX2}, {"avx512", ATTENTION_PATH_AVX512}},
                           attention_set_path, -1) &&
                    (mxfp4 || q8 || kquant || bf16);  // our buffer type, which claims the attention, exists only with one of them
        const char * weights = std::getenv("ASSISTANT_WEIGHTS");
        const bool   mapped  = weights != nullptr && !std::strcmp(weights, "mapped");
        bf16_rows  = bf16 && mapped;
        mxfp4_rows = mxfp4 && mapped && mxfp4_rows_fast();
        if (weights != nullptr && *weights && std::strcmp(weights, "mapped") && std::strcmp(weights, "packed")) {
            std::fprintf(stderr, "assistant: ASSISTANT_WEIGHTS=%s not understood (packed or mapped); using packed\n", weights);
        }
        description = std::string("mxfp4=") + (mxfp4 ? mxfp4_path_name() : "stock") +
                      " q8=" + (q8 ? q8_path_name() : "stock") +
                      " bf16=" + (bf16 ? bf16_path_name() : "stock") + (mapped ? " weights=mapped" : "") +
                      " kquant=" + (kquant ? kquant_path_name() : "stock") +
                      " attention=" + (attention ? attention_path_name() : "stock");
    }

    struct Named {
        const char * name;
        int          path;
    };

    // Whether our kernel takes this weight type, its path set as a side effect.
    static bool choose(const char * var, std::initializer_list<Named> paths, int (*set_path)(int), int scalar) {
        const char * value = std::getenv(var);
        if (value == nullptr || !*value || !std::strcmp(value, "auto")) return set_path(0) != scalar;
        if (!std::strcmp(value, "stock")) return false;
        for (const Named & p : paths) {
            if (!std::strcmp(value, p.name)) {
                if (set_path(p.path) != p.path) {
                    std::fprintf(stderr, "assistant: %s=%s: this CPU cannot run that path; using the best one\n", var, value);
                    return set_path(0) != scalar;
                }
                return true;
            }
        }
        std::fprintf(stderr, "assistant: %s=%s not understood (auto, stock or a path name); using auto\n", var, value);
        return set_path(0) != scalar;
    }
};

const Settings & settings() {
    static const Settings s;
    return s;
}

// Our q8-gemm.h type for a ggml type, or -1.
int q8_type_of(ggml_type type) {
    switch (type) {
        case GGML_TYPE_Q8_0: return Q8_TYPE_Q8_0;
        case GGML_TYPE_Q4_0: return Q8_TYPE_Q4_0;
        case GGML_TYPE_Q4_1: return Q8_TYPE_Q4_1;
        case GGML_TYPE_Q5_0: return Q8_TYPE_Q5_0;
        case GGML_TYPE_Q5_1: return Q8_TYPE_Q5_1;
        default: return -1;
    }
}

bool is_kquant(ggml_type type) { return type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K || type == GGML_TYPE_Q6_K; }

bool handles_type(ggml_type type) {
    return (type == GGML_TYPE_MXFP4 && settings().mxfp4 && !settings().mxfp4_rows) || (q8_type_of(type) >= 0 && settings().q8) ||
           (is_kquant(type) && settings().kquant) || (type == GGML_TYPE_BF16 && settings().bf16 && !settings().bf16_rows);
}

// A weight we can hold: a 2-D matrix of one of our types whose rows are whole blocks of 32 (K-quant rows are
// whole 256-value super-blocks by construction).
bool is_our_weight(const ggml_tensor * t) {
    return handles_type(t->type) && ggml_n_dims(t) == 2 && t->ne[0] % 32 == 0 && ggml_is_contiguous(t);
}

// A BF16 or MXFP4 matrix of the model that our kernel reads where it lies (ASSISTANT_WEIGHTS=mapped): in
// llama.cpp's mapping of the file, or in our buffer as plain rows (an RPC server's copy).
bool is_mapped_weight(const ggml_tensor * t) {
    const bool rows = (t->type == GGML_TYPE_BF16 && settings().bf16_rows) || (t->type == GGML_TYPE_MXFP4 && settings().mxfp4_rows);
    return rows && ggml_n_dims(t) == 2 && t->ne[0] % 32 == 0 &&
           ggml_is_contiguous(t) && t->buffer != nullptr &&
           ((ggml_backend_buffer_get_usage(t->buffer) == GGML_BACKEND_BUFFER_USAGE_WEIGHTS &&
             ggml_backend_buft_is_host(t->buffer->buft)) ||  // not ggml's repacked layouts (CPU_REPACK)
            t->buffer->buft == ggml_backend_cpu_assistant_buffer_type());
}

// The activations and result our kernels take: f32 columns of contiguous values, an f32 contiguous result.
bool takes_operands(const ggml_tensor * op) {
    const ggml_tensor * x = op->src[1];
    return x->type == GGML_TYPE_F32 && x->nb[0] == sizeof(float) &&
           (x->buffer == nullptr || ggml_backend_buft_is_host(x->buffer->buft)) && op->type == GGML_TYPE_F32 &&
           ggml_is_contiguous(op);
}

int64_t columns(const ggml_tensor * op) { return op->src[1]->ne[1] * op->src[1]->ne[2] * op->src[1]->ne[3]; }

size_t column_bytes(ggml_type type, int64_t K) {
    if (type == GGML_TYPE_MXFP4) return mxfp4_act_bytes(K);
    if (is_kquant(type)) return kquant_act_bytes(K);
    return q8_type_of(type) >= 0 ? q8_act_bytes(K) : bf16_act_bytes(K);
}

// The K-quant kernels take ggml's type numbers (kquant-gemm.h numbers them the same).
static_assert(KQUANT_Q4_K == GGML_TYPE_Q4_K && KQUANT_Q5_K == GGML_TYPE_Q5_K && KQUANT_Q6_K == GGML_TYPE_Q6_K,
              "kquant-gemm.h's type numbers");

class MatmulTraits : public ggml::cpu::tensor_traits {
    bool work_size(int /*n_threads*/, const ggml_tensor * op, size_t & size) override {
        if (op->op != GGML_OP_MUL_MAT) return false;
        size = columns(op) * column_bytes(op->src[0]->type, op->src[0]->ne[0]) + 64;
        return true;
    }

    // Threads first prepare the activation columns between them (quantize to int8 or round to bf16), wait
    // for each other, then each computes its own share of whole 16-row tiles for every column.
    bool compute_forward(ggml_compute_params * params, ggml_tensor * op) override {
        if (op->op != GGML_OP_MUL_MAT) return false;
        const ggml_tensor * w = op->src[0];
        const ggml_tensor * x = op->src[1];
        const int64_t       M = w->ne[1], K = w->ne[0], N = columns(op);
        const size_t        stride = column_bytes(w->type, K);
        char *              act    = (char *) GGML_PAD((uintptr_t) params->wdata, 64);
        GGML_ASSERT(act + N * stride <= (char *) params->wdata + params->wsize);

        for (int64_t c = params->ith; c < N; c += params->nth) {
            const int64_t i1 = c % x->ne[1], i2 = (c / x->ne[1]) % x->ne[2], i3 = c / (x->ne[1] * x->ne[2]);
            const float * col = (const float *) ((const char *) x->data + i1 * x->nb[1] + i2 * x->nb[2] + i3 * x->nb[3]);
            if (w->type == GGML_TYPE_MXFP4) {
                mxfp4_quantize_act(col, act + c * stride, K);
            } else if (q8_type_of(w->type) >= 0) {
                q8_quantize_act(col, act + c * stride, K);
            } else if (is_kquant(w->type)) {
                kquant_quantize_act(col, act + c * stride, K);
            } else {
                bf16_convert_act(col, act + c * stride, K);
            }
        }
        ggml_barrier(params->threadpool);

        const int64_t tiles = (M + 15) / 16;
        const int64_t lo = std::min(M, tiles * params->ith / params->nth * 16);
        const int64_t hi = std::min(M, tiles * (params->ith + 1) / params->nth * 16);
        if (lo >= hi) return true;
        float * dst = (float *) op->data;
        if (w->type == GGML_TYPE_MXFP4 && settings().mxfp4_rows) {
            mxfp4_gemm_rows(w->data, M, K, act, stride, N, dst, M, lo, hi);
        } else if (w->type == GGML_TYPE_MXFP4) {
            mxfp4_gemm(w->data, M, K, act, stride, N, dst, M, lo, hi);
        } else if (q8_type_of(w->type) >= 0) {
            q8_gemm(q8_type_of(w->type), w->data, M, K, act, stride, N, dst, M, lo, hi);
        } else if (is_kquant(w->type)) {
            kquant_gemm(w->type, w->data, M, K, act, stride, N, dst, M, lo, hi);
        } else if (settings().bf16_rows) {
            bf16_gemm_rows((const uint16_t *) w->data, M, K, act, stride, N, dst, M, lo, hi);
        } else {
            bf16_gemm(w->data, M, K, act, stride, N, dst, M, lo, hi);
        }
        return true;
    }
};

MatmulTraits g_traits;

// Batches of at least this many queries keep llama.cpp's attention, which computes them in tiles; below it stock
// also takes one query at a time, and ours reads each key once for several queries of a KV head.
constexpr int64_t kAttentionQueries = 64;

// Flash attention we compute: f32 queries over an f16 cache, one sequence stream, a plain f16 mask.
bool is_our_attention(const ggml_tensor * op) {
    if (op->op != GGML_OP_FLASH_ATTN_EXT || !settings().attention) return false;
    const ggml_tensor *q = op->src[0], *k = op->src[1], *v = op->src[2], *mask = op->src[3], *sinks = op->src[4];
    return q->type == GGML_TYPE_F32 && k->type == GGML_TYPE_F16 && v->type == GGML_TYPE_F16 && q->ne[1] < kAttentionQueries &&
           q->ne[3] == 1 && k->ne[3] == 1 && v->ne[3] == 1 && q->nb[0] == sizeof(float) && k->nb[0] == 2 && v->nb[0] == 2 &&
           q->ne[2] % k->ne[2] == 0 && k->ne[2] == v->ne[2] && op->type == GGML_TYPE_F32 && op->nb[0] == sizeof(float) &&
           (mask == nullptr || (mask->type == GGML_TYPE_F16 && mask->ne[3] == 1 && mask->nb[0] == 2)) &&
           (sinks == nullptr || (sinks->type == GGML_TYPE_F32 && ggml_is_contiguous(sinks)));
}

attention_problem attention_of(const ggml_tensor * op) {
    const ggml_tensor *q = op->src[0], *k = op->src[1], *v = op->src[2], *mask = op->src[3], *sinks = op->src[4];
    attention_problem p{};
    p.dk = k->ne[0], p.dv = v->ne[0], p.n_kv = k->ne[1], p.n_query = q->ne[1], p.n_head = q->ne[2];
    p.n_head_kv = k->ne[2];
    p.q = (const float *) q->data, p.q_query_stride = q->nb[1], p.q_head_stride = q->nb[2];
    p.k = (const uint16_t *) k->data, p.k_cell_stride = k->nb[1], p.k_head_stride = k->nb[2];
    p.v = (const uint16_t *) v->data, p.v_cell_stride = v->nb[1], p.v_head_stride = v->nb[2];
    if (mask) {
        p.mask = (const uint16_t *) mask->data, p.mask_query_stride = mask->nb[1], p.mask_plane_stride = mask->nb[2];
        p.mask_planes = mask->ne[2];
    }
    p.sinks = sinks ? (const float *) sinks->data : nullptr;
    std::memcpy(&p.scale, (const float *) op->op_params + 0, sizeof(float));
    std::memcpy(&p.max_bias, (const float *) op->op_params + 1, sizeof(float));
    std::memcpy(&p.softcap, (const float *) op->op_params + 2, sizeof(float));
    p.out = (float *) op->data, p.out_query_stride = op->nb[2], p.out_head_stride = op->nb[1];
    return p;
}

class AttentionTraits : public ggml::cpu::tensor_traits {
    bool work_size(int n_threads, const ggml_tensor * op, size_t & size) override {
        const attention_problem p = attention_of(op);
        size = n_threads * GGML_PAD(attention_scratch_bytes(&p), 64) + 64;
        return true;
    }

    // Each thread computes whole rows of its own: no barrier, no shared state.
    bool compute_forward(ggml_compute_params * params, ggml_tensor * op) override {
        const attention_problem p    = attention_of(op);
        const size_t            each = GGML_PAD(attention_scratch_bytes(&p), 64);
        char *                  base = (char *) GGML_PAD((uintptr_t) params->wdata, 64);
        GGML_ASSERT(base + params->nth * each <= (char *) params->wdata + params->wsize);
        attention_compute(&p, params->ith, params->nth, base + params->ith * each);
        return true;
    }
};

AttentionTraits g_attention_traits;

// Whether a tensor of our buffer is held repacked is decided by the tensor itself (no ``extra`` is kept): an
// RPC server rebuilds every tensor it is sent from a description before it writes the tensor or computes with
// it. Everything else in the buffer (norms, a KV cache, a server's compute buffers) is plain memory.
// Whether [p, p + n) lies in a mapping of a file (not anonymous memory), from /proc/self/maps.
bool in_file_mapping(const void * p, size_t n) {
#if defined(__linux__)
    FILE * maps = std::fopen("/proc/self/maps", "r");
    if (maps == nullptr) return false;
    const uintptr_t begin = (uintptr_t) p, end = begin + n;
    bool            found = false;
    char            line[4096];
    while (!found && std::fgets(line, sizeof line, maps)) {
        unsigned long long lo = 0, hi = 0, inode = 0;
        if (std::sscanf(line, "%llx-%llx %*s %*s %*s %llu", &lo, &hi, &inode) == 3) {
            found = lo <= begin && end <= hi && inode != 0;
        }
    }
    std::fclose(maps);
    return found;
#else
    (void) p, (void) n;
    return false;
#endif
}

// llama.cpp's loader hands set_tensor a pointer into its mapping of the GGUF file (read in whole at start, so
// that loading streams from the disk). Once repacked, those pages are a second copy of the weights: they leave
// this process here (MADV_DONTNEED on file pages keeps them in the page cache for the next start, and a later
// read faults them back in), so a loaded model holds one copy. Anonymous memory is never touched.
void release_source_pages(const void * data, size_t size) {
#if defined(__linux__) && defined(MADV_DONTNEED)
    if (size < (size_t(1) << 20)) return;
    const uintptr_t page  = (uintptr_t) sysconf(_SC_PAGESIZE);
    const uintptr_t begin = ((uintptr_t) data + page - 1) & ~(page - 1);
    const uintptr_t end   = ((uintptr_t) data + size) & ~(page - 1);
    if (end > begin && in_file_mapping(data, size)) madvise((void *) begin, end - begin, MADV_DONTNEED);
#else
    (void) data, (void) size;
#endif
}

void buffer_set_tensor(ggml_backend_buffer_t, ggml_tensor * t, const void * data, size_t offset, size_t size) {
    if (!is_our_weight(t)) {
        std::memcpy((char *) t->data + offset, data, size);
        return;
    }
    GGML_ASSERT(offset == 0 && size == ggml_nbytes(t) && "our kernels repack whole tensors only");
    if (t->type == GGML_TYPE_MXFP4) {
        mxfp4_pack(data, t->data, t->ne[1], t->ne[0]);
    } else if (q8_type_of(t->type) >= 0) {
        q8_pack(q8_type_of(t->type), data, t->data, t->ne[1], t->ne[0]);
    } else if (is_kquant(t->type)) {
        kquant_pack(t->type, data, t->data, t->ne[1], t->ne[0]);
    } else {
        bf16_pack((const uint16_t *) data, t->data, t->ne[1], t->ne[0]);
    }
    release_source_pages(data, size);
}

void buffer_get_tensor(ggml_backend_buffer_t, const ggml_tensor * t, void * data, size_t offset, size_t size) {
    if (!is_our_weight(t)) {
        std::memcpy(data, (const char *) t->data + offset, size);
        return;
    }
    GGML_ASSERT(offset == 0 && size == ggml_nbytes(t) && "our kernels unpack whole tensors only");
    if (t->type == GGML_TYPE_MXFP4) {
        mxfp4_unpack(t->data, data, t->ne[1], t->ne[0]);
    } else if (q8_type_of(t->type) >= 0) {
        q8_unpack(q8_type_of(t->type), t->data, data, t->ne[1], t->ne[0]);
    } else if (is_kquant(t->type)) {
        kquant_unpack(t->type, t->data, data, t->ne[1], t->ne[0]);
    } else {
        bf16_unpack(t->data, (uint16_t *) data, t->ne[1], t->ne[0]);
    }
}

const char * buft_get_name(ggml_backend_buffer_type_t) { return "CPU_ASSISTANT"; }

// Every token streams the whole buffer from memory: on 4 KB pages that is a TLB miss (a page walk) every
// 4 KB read, on 2 MB pages one every 2 MB. So the buffer asks Linux for transparent huge pages (honoured
// under THP "madvise" and "always", the distributions' defaults) over the 2 MB-aligned part of it, before
// anything is written there (notes/kernels.md has the gain). Where Linux refuses, only that speed is lost.
void ask_for_huge_pages(void * base, size_t size) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    constexpr uintptr_t kHuge  = uintptr_t(2) << 20;
    const uintptr_t     begin = ((uintptr_t) base + kHuge - 1) & ~(kHuge - 1);
    const uintptr_t     end   = ((uintptr_t) base + size) & ~(kHuge - 1);
    if (end > begin) madvise((void *) begin, end - begin, MADV_HUGEPAGE);
#else
    (void) base, (void) size;
#endif
}

ggml_backend_buffer_t buft_alloc_buffer(ggml_backend_buffer_type_t buft, size_t size) {
    ggml_backend_buffer_t buffer = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), size);
    if (buffer == nullptr) return nullptr;
    ask_for_huge_pages(ggml_backend_buffer_get_base(buffer), size);
    buffer->buft              = buft;
    buffer->iface.set_tensor  = buffer_set_tensor;
    buffer->iface.get_tensor  = buffer_get_tensor;
    buffer->iface.cpy_tensor  = nullptr;
    return buffer;
}

size_t buft_get_alignment(ggml_backend_buffer_type_t) { return 64; }

class ExtraBufferType : public ggml::cpu::extra_buffer_type {
    bool supports_op(ggml_backend_dev_t, const ggml_tensor * op) override {
        const ggml_tensor * w = op->src[0];
        return op->op == GGML_OP_MUL_MAT && w->buffer && w->buffer->buft == ggml_backend_cpu_assistant_buffer_type() &&
               is_our_weight(w) && takes_operands(op);
    }

    ggml::cpu::tensor_traits * get_tensor_traits(const ggml_tensor * op) override {
        if (is_our_attention(op)) return &g_attention_traits;
        const ggml_tensor * w = op->src[0];
        if (op->op == GGML_OP_MUL_MAT && w && w->buffer && w->buffer->buft == ggml_backend_cpu_assistant_buffer_type() &&
            is_our_weight(w)) {
            return &g_traits;
        }
        if (op->op == GGML_OP_MUL_MAT && w && is_mapped_weight(w) && takes_operands(op)) return &g_traits;
        return nullptr;
    }
};

}  // namespace

ggml_backend_buffer_type_t ggml_backend_cpu_assistant_buffer_type(void) {
    if (!settings().mxfp4 && !settings().q8 && !settings().kquant && !settings().bf16) return nullptr;
    static ggml_backend_buffer_type buft = {
        /* .iface   = */ {
            /* .get_name       = */ buft_get_name,
            /* .alloc_buffer   = */ buft_alloc_buffer,
            /* .get_alignment  = */ buft_get_alignment,
            /* .get_max_size   = */ nullptr,
            /* .get_alloc_size = */ nullptr,
            /* .is_host        = */ nullptr,
        },
        /* .device  = */ ggml_backend_reg_dev_get(ggml_backend_cpu_reg(), 0),
        /* .context = */ new ExtraBufferType(),
    };
    return &buft;
}

const char * assistant_kernels_describe(void) { return settings().description.c_str(); }
