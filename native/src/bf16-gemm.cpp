// BF16 small-batch matrix multiply; layout and contract in bf16-gemm.h.
//
// Order of operations, fixed per path so a column's bits never depend on N or on the thread split:
//   scalar, AVX2, AVX-512: two f32 accumulators per (row, column), one for even and one for odd k, each
//                          advanced by acc = fma(w[k], a[k], acc) in order of k (weights widened exactly
//                          from bf16), added at the end: even + odd. Two independent chains per column
//                          halve the FMA latency a single column waits on.
//   AVX512-BF16:           two accumulators per (row, column), for even and odd pairs of values, each
//                          advanced by vdpbf16ps pair by pair, added at the end.
// Each column has its own accumulators, so columns never mix.
#include "bf16-gemm.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#    include <fcntl.h>
#    include <sys/file.h>
#    include <unistd.h>
#    define BF16_FILE_LOCKS 1
#endif

#if defined(__x86_64__) || defined(_M_X64)
#    include <immintrin.h>
#    define BF16_X86 1
#elif defined(__aarch64__)
#    include <arm_neon.h>
#    define BF16_NEON 1
#endif
#include "amx-tiles.h"
#if defined(BF16_X86) && defined(ASSISTANT_AMX)
#    define BF16_AMX 1
using assistant_amx::TileConfig;
#endif

namespace {

constexpr int kTile = BF16_TILE_ROWS;
// Software prefetch this far ahead in the weight stream: with the hardware prefetchers alone, DRAM time and
// compute time add up in a batch of several columns; 4 KB ahead they overlap.
constexpr int kPrefetchBytes = 4096;

inline float widen(uint16_t v) {
    const uint32_t bits = (uint32_t) v << 16;
    float          f;
    std::memcpy(&f, &bits, 4);
    return f;
}

inline uint16_t round_to_bf16(float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    if ((bits & 0x7fffffff) > 0x7f800000) return (uint16_t) ((bits >> 16) | 0x40);  // NaN stays a quiet NaN
    return (uint16_t) ((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

// A prepared column: K floats (bf16-rounded), then the same K values as bf16.
struct Column {
    const float *    f;
    const uint16_t * h;
};

Column column(const void * act, size_t stride, int64_t j, int64_t K) {
    const float * f = (const float *) ((const char *) act + j * stride);
    return {f, (const uint16_t *) (f + K)};
}

using TileFn = void (*)(const uint16_t *, int64_t, const Column *, float (*)[kTile]);

void tile_scalar(const uint16_t * tile, int R, int64_t K, const Column * cols, int nc, float (*out)[kTile]) {
    for (int j = 0; j < nc; ++j) {
        for (int r = 0; r < R; ++r) {
            float even = 0.0f, odd = 0.0f;
            for (int64_t p = 0; p < K / 2; ++p) {
                const uint16_t * w = tile + p * 2 * R + 2 * r;
                even = std::fma(widen(w[0]), cols[j].f[2 * p], even);
                odd  = std::fma(widen(w[1]), cols[j].f[2 * p + 1], odd);
            }
            out[j][r] = even + odd;
        }
    }
}

#ifdef BF16_X86
// How a pass prefetches the weight lines it reads 4 KB further on (notes/kernels.md has the measurements):
//   L2    the batch's only pass (N <= 3) waits on memory, and a prefetch into L1 holds a fill buffer for the
//         whole trip to DRAM.
//   None  AVX2, 4 or 5 columns: the next chunk's lines, fetched into L2 during the pass before, are enough.
//   L1    every other pass (prompts, 6 columns and more) is compute-bound and reads its lines again from L2.
enum class Fetch { L1, L2, None };

template <int NC, Fetch FETCH = Fetch::L1>
__attribute__((target("avx512f"))) void tile_avx512(const uint16_t * tile, int64_t K, const Column * cols,
                                                     float (*out)[kTile]) {
    const __m512i high = _mm512_set1_epi32((int) 0xffff0000u);
    __m512        even[NC], odd[NC];
#    pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) even[j] = odd[j] = _mm512_setzero_ps();
    for (int64_t p = 0; p < K / 2; ++p) {
        const char * further = (const char *) (tile + p * 2 * kTile) + kPrefetchBytes;
        _mm_prefetch(further, FETCH == Fetch::L2 ? _MM_HINT_T1 : _MM_HINT_T0);
        const __m512i v  = _mm512_loadu_si512(tile + p * 2 * kTile);
        const __m512  w0 = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));  // even values of the 16 rows
        const __m512  w1 = _mm512_castsi512_ps(_mm512_and_si512(v, high));  // odd values
#    pragma GCC unroll 8
        for (int j = 0; j < NC; ++j) {
            even[j] = _mm512_fmadd_ps(w0, _mm512_set1_ps(cols[j].f[2 * p]), even[j]);
            odd[j]  = _mm512_fmadd_ps(w1, _mm512_set1_ps(cols[j].f[2 * p + 1]), odd[j]);
        }
    }
#    pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) _mm512_storeu_ps(out[j], _mm512_add_ps(even[j], odd[j]));
}

template <int NC, Fetch FETCH = Fetch::L1>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void tile_avx512bf16(const uint16_t * tile, int64_t K,
                                                                              const Column * cols, float (*out)[kTile]) {
    constexpr _mm_hint hint = FETCH == Fetch::L2 ? _MM_HINT_T1 : _MM_HINT_T0;
    __m512 even[NC], odd[NC];
#    pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) even[j] = odd[j] = _mm512_setzero_ps();
    for (int64_t p = 0; p < K / 2; p += 2) {
        _mm_prefetch((const char *) (tile + p * 2 * kTile) + kPrefetchBytes, hint);
        _mm_prefetch((const char *) (tile + p * 2 * kTile) + kPrefetchBytes + 64, hint);
        const __m512bh w0 = (__m512bh) _mm512_loadu_si512(tile + p * 2 * kTile);
        const __m512bh w1 = (__m512bh) _mm512_loadu_si512(tile + (p + 1) * 2 * kTile);
#    pragma GCC unroll 8
        for (int j = 0; j < NC; ++j) {
            int32_t pair[2];
            std::memcpy(pair, cols[j].h + 2 * p, 8);
            even[j] = _mm512_dpbf16_ps(even[j], w0, (__m512bh) _mm512_set1_epi32(pair[0]));
            odd[j]  = _mm512_dpbf16_ps(odd[j], w1, (__m512bh) _mm512_set1_epi32(pair[1]));
        }
    }
#    pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) _mm512_storeu_ps(out[j], _mm512_add_ps(even[j], odd[j]));
}

// 8 rows to a vector and 16 vector registers: H halves of the tile at once, starting at half h0. Up to 3
// columns take both halves in one pass (4 chains of FMAs per column; 3 columns make 12 accumulators, and
// the two halves' weights and one broadcast fill the 16 registers, so the broadcast is loaded again for
// the second half rather than kept), 4 to 6 columns one half after the other (8 to 12 chains keep both
// FMA ports busy; the FMA latency needs 8).
// The weights widen by interleaving with zeros, so a vector holds two rows' even and odd values side by
// side ([r0 even, r0 odd, r1 even, r1 odd | r4 ..., r5 ...] and [r2, r3 | r6, r7] likewise), and one
// 64-bit broadcast of the column's two values feeds both: its lanes are exactly the even and odd
// accumulators of the common arithmetic, added pairwise at the end (vhaddps puts the 8 rows in order).
// Against splitting even and odd values into separate vectors this saves a broadcast per two FMAs, and
// the instruction stream is what holds the FMA ports back on AVX2-only CPUs.

// A pass covers the value pairs [begin, end) of K: a batch that takes several passes over a tile goes
// through K in chunks (see tile_avx2), keeping its accumulators in state between chunks; storing and
// reloading them changes no bit of the fma sequence.
struct Pass {
    int64_t      begin, end;   // value pairs of K
    bool         first, last;  // start from zero / write the sums to out (else keep them in state)
    float *      state;        // 2 * H * NC vectors of 8 floats
    const char * ahead;        // `lines` lines to prefetch into L2 from here, `burst` of them every `every * burst`
    int64_t      lines, every;  // value pairs, so they spread over the pass
    int          burst;
    Fetch        fetch;        // how it prefetches the lines it reads next (see Fetch)
};

// The same pointer, opaque to the optimiser, for passes over both halves (2 or 3 columns): GCC would
// otherwise merge the halves' loads of one broadcast, which spills accumulators with 3 columns and, even
// without spills, made 2 columns slower than 1 or 3. The passes over one half do not use it: it costs a
// register move per load, and with 6 columns the loop is already at the dispatch width of the CPUs we
// measured.
inline const float * unmerged(const float * p) {
    __asm__ volatile("" : "+r"(p));
    return p;
}

template <int NC, int H, bool AHEAD, Fetch FETCH>
__attribute__((target("avx2,fma"))) void rows_avx2(const uint16_t * tile, const Column * cols, float (*out)[kTile],
                                                   int h0, const Pass & pass) {
    const __m256i zero = _mm256_setzero_si256();
    __m256        lo[H][NC], hi[H][NC];
#    pragma GCC unroll 12
    for (int i = 0; i < H * NC; ++i) {
        lo[i / NC][i % NC] = pass.first ? _mm256_setzero_ps() : _mm256_load_ps(pass.state + 16 * i);
        hi[i / NC][i % NC] = pass.first ? _mm256_setzero_ps() : _mm256_load_ps(pass.state + 16 * i + 8);
    }
    const char * line = pass.ahead;
    int64_t      left = AHEAD ? pass.lines : 0;
    for (int64_t p = pass.begin; p < pass.end;) {
        int64_t stop = pass.end;
        if (AHEAD && left > 0) {
            for (int i = 0; i < pass.burst && left > 0; ++i, --left, line += 64) _mm_prefetch(line, _MM_HINT_T1);
            stop = std::min(stop, p + pass.every * pass.burst);
        }
        for (; p < stop; ++p) {
            const char * further = (const char *) (tile + p * 2 * kTile) + kPrefetchBytes;
            if (FETCH == Fetch::L1) _mm_prefetch(further, _MM_HINT_T0);
            if (FETCH == Fetch::L2) _mm_prefetch(further, _MM_HINT_T1);
#    pragma GCC unroll 2
            for (int h = 0; h < H; ++h) {
                const __m256i v  = _mm256_loadu_si256((const __m256i *) (tile + p * 2 * kTile + 16 * (h0 + h)));
                const __m256  wl = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, v));
                const __m256  wh = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, v));
#    pragma GCC unroll 8
                for (int j = 0; j < NC; ++j) {
                    const float * f = H > 1 && NC > 1 ? unmerged(cols[j].f) : cols[j].f;
                    const __m256  a = _mm256_castpd_ps(_mm256_broadcast_sd((const double *) (f + 2 * p)));
                    lo[h][j]       = _mm256_fmadd_ps(wl, a, lo[h][j]);
                    hi[h][j]       = _mm256_fmadd_ps(wh, a, hi[h][j]);
                }
            }
        }
    }
#    pragma GCC unroll 12
    for (int i = 0; i < H * NC; ++i) {
        if (pass.last) {
            _mm256_storeu_ps(out[i % NC] + 8 * (h0 + i / NC), _mm256_hadd_ps(lo[i / NC][i % NC], hi[i / NC][i % NC]));
        } else {
            _mm256_store_ps(pass.state + 16 * i, lo[i / NC][i % NC]);
            _mm256_store_ps(pass.state + 16 * i + 8, hi[i / NC][i % NC]);
        }
    }
}

// One pass of rows_avx2, its prefetching (AHEAD, FETCH) chosen at run time.
template <int NC, int H>
__attribute__((target("avx2,fma"))) void pass_avx2(const uint16_t * tile, const Column * cols, float (*out)[kTile],
                                                   int h0, const Pass & pass) {
    if (pass.ahead) {
        if (pass.fetch == Fetch::None) rows_avx2<NC, H, true, Fetch::None>(tile, cols, out, h0, pass);
        else rows_avx2<NC, H, true, Fetch::L1>(tile, cols, out, h0, pass);
    } else if (pass.fetch == Fetch::L2) {
        rows_avx2<NC, H, false, Fetch::L2>(tile, cols, out, h0, pass);
    } else if (pass.fetch == Fetch::None) {
        rows_avx2<NC, H, false, Fetch::None>(tile, cols, out, h0, pass);
    } else {
        rows_avx2<NC, H, false, Fetch::L1>(tile, cols, out, h0, pass);
    }
}

// One group of NC columns: both halves at once for NC <= 3 (one pass), else one half per pass.
template <int NC>
__attribute__((target("avx2,fma"))) void group_avx2(const uint16_t * tile, const Column * cols, float (*out)[kTile],
                                                    const Pass * passes) {
    if (NC <= 3) {
        pass_avx2<NC, 2>(tile, cols, out, 0, passes[0]);
    } else {
        for (int h = 0; h < 2; ++h) pass_avx2<NC, 1>(tile, cols, out, h, passes[h]);
    }
}

using GroupFn = void (*)(const uint16_t *, const Column *, float (*)[kTile], const Pass *);
const GroupFn kAvx2[6] = {group_avx2<1>, group_avx2<2>, group_avx2<3>, group_avx2<4>, group_avx2<5>, group_avx2<6>};
constexpr int kAvx2Columns = 6;

// Passes over a tile that a group of nc columns takes (see group_avx2).
int group_passes(int nc) { return nc <= 3 ? 1 : 2; }

// Value pairs per chunk of K when a batch takes several passes over a tile: 16 rows x 2048 values = 64 KB of
// weights, so a chunk and the next one being fetched stay in L2 whatever K is (smaller chunks were slower,
// larger ones no faster).
constexpr int64_t kChunkPairs = 1024;
// Value pairs between two rounds of prefetching the next chunk: a round takes several lines at once where a
// pass has more than one to fetch every few pairs, so the loop is not cut into pieces of 1 or 2 pairs (a
// line every pair, addressed by a multiply, costs more than the prefetch gains).
constexpr int64_t kAheadSpan = 16;

// One 16-row tile against N columns on AVX2; next is the following tile's weights (null for none). A
// verification batch (2 < N <= 16) takes several passes over each part of the tile. Whole-K passes fetched
// the tile from DRAM in the first pass only, and the memory bus sat idle through the others, though the FMA
// work of 8 columns takes about as long as reading the weights. In chunks, every pass prefetches its share of
// the next chunk, so DRAM streams the whole time. Prompts keep whole-K passes: they are compute-bound, and
// there the columns are what needs the cache.
__attribute__((target("avx2,fma"))) void tile_avx2(const uint16_t * tile, const char * next, int64_t K,
                                                   const Column * cols, int64_t N, float * dst,
                                                   int64_t dst_stride, int R) {
    const int64_t pairs  = K / 2;
    int           passes = 0;
    for (int64_t j0 = 0; j0 < N; j0 += kAvx2Columns) {
        passes += group_passes((int) std::min<int64_t>(kAvx2Columns, N - j0));
    }
    const bool    chunked = passes > 1 && N <= 16;
    const int64_t chunk   = chunked ? kChunkPairs : pairs;
    const Fetch   fetch   = passes == 1 ? Fetch::L2 : N < kAvx2Columns ? Fetch::None : Fetch::L1;
    alignas(32) float state[6][2 * 2 * kAvx2Columns * 8];  // one per pass: N <= 16 makes at most 3 groups, 6 passes
    float             out[kAvx2Columns][kTile];
    for (int64_t c0 = 0; c0 < pairs; c0 += chunk) {
        const int64_t c1 = std::min(pairs, c0 + chunk);
        // The next chunk: the rest of this tile's K, or the next tile's first chunk.
        const char *  ahead = nullptr;
        int64_t       lines = 0;
        if (chunked && c1 < pairs) {
            ahead = (const char *) (tile + c1 * 2 * kTile);
            lines = std::min(chunk, pairs - c1);
        } else if (chunked && next) {
            ahead = next;
            lines = std::min(chunk, pairs);
        }
        const int64_t share = (lines + passes - 1) / passes;
        int           q     = 0;
        for (int64_t j0 = 0; j0 < N; j0 += kAvx2Columns) {
            const int nc = (int) std::min<int64_t>(kAvx2Columns, N - j0);
            Pass      pass[2];
            for (int h = 0; h < group_passes(nc); ++h, ++q) {
                const int64_t first = std::min(q * share, lines), mine = std::min(share, lines - first);
                const int64_t every = mine > 0 ? std::max<int64_t>(1, (c1 - c0) / mine) : 1;
                pass[h] = {c0, c1, c0 == 0, c1 == pairs, chunked ? state[q] : nullptr,
                           mine > 0 ? ahead + first * 64 : nullptr, mine,
                           every, (int) ((kAheadSpan + every - 1) / every), fetch};
            }
            kAvx2[nc - 1](tile, cols + j0, out, pass);
            if (c1 == pairs) {
                for (int j = 0; j < nc; ++j) std::memcpy(dst + (j0 + j) * dst_stride, out[j], R * sizeof(float));
            }
        }
    }
}

const TileFn kAvx512[8]     = {tile_avx512<1>, tile_avx512<2>, tile_avx512<3>, tile_avx512<4>,
                               tile_avx512<5>, tile_avx512<6>, tile_avx512<7>, tile_avx512<8>};
// Batches of up to 3 columns: the same kernel prefetching into L2 (see Fetch).
constexpr int64_t kAlone = 3;
const TileFn      kAvx512Alone[kAlone] = {tile_avx512<1, Fetch::L2>, tile_avx512<2, Fetch::L2>,
                                          tile_avx512<3, Fetch::L2>};
const TileFn kAvx512Bf16Alone[kAlone] = {tile_avx512bf16<1, Fetch::L2>, tile_avx512bf16<2, Fetch::L2>,
                                          tile_avx512bf16<3, Fetch::L2>};
const TileFn kAvx512Bf16[8] = {tile_avx512bf16<1>, tile_avx512bf16<2>, tile_avx512bf16<3>, tile_avx512bf16<4>,
                               tile_avx512bf16<5>, tile_avx512bf16<6>, tile_avx512bf16<7>, tile_avx512bf16<8>};

// Prompts (N > kVerifyColumns) on the vector paths: a blocked GEMM. The per-tile kernels above stream every
// column's activations once per 16 rows and give each (row, column) two chains of its own, which suits
// verification batches that wait on memory; a prompt is compute-bound and needs more work per load. Here
// K goes in blocks of value pairs; each block's activations are packed once per call into panels of
// kPanel columns ([pair][column], contiguous), and a micro-kernel multiplies two 16-row tiles by a whole
// panel with one accumulator per (row, column) in registers, reading the panel from L1 and the weights from
// L2. Each column's sum runs in order of k within a block and the blocks are added in order, so its bits
// depend on K alone: not on N (beyond 16) nor on the row split. They differ from the verification paths'
// bits, which is why the line is at 16 columns, the largest verification batch.
constexpr int64_t kVerifyColumns = 16;

// Which kernel a prompt runs: vdpbf16ps where the CPU has it (twice the multiply-adds per instruction of
// widening plus FMA), else widening plus 512-bit or 256-bit FMAs.
enum class Prompt { Bf16Dot, Avx512, Avx2 };

// Panel shapes. AVX-512: 2 tiles x 12 columns = 24 accumulators, the tiles' weights, one broadcast (and for
// FMA the widened halves): within 32 registers. AVX2: half a tile (8 rows as two interleaved vectors, see
// rows_avx2) x 6 columns = 12 accumulators within 16.
constexpr int kPanel512 = 12, kPanelAvx2 = 6;
// Value pairs per K block: a panel of 12 columns is 6 KB of bf16 pairs (12 KB as floats), well inside L1,
// and two tiles' weights for a block 16 KB.
constexpr int64_t kPromptPairs = 128;
// Rows whose block of weights (64 KB) stays in L2 while every panel passes over them: all of a thread's rows
// at once made the AVX2 kernel fetch its weights from L3 for every panel once M reached a few thousand.
constexpr int64_t kPromptRows = 128;

// C columns of a panel of kPanel512 (the last group of a prompt may have fewer; each column's sequence of
// operations is the same whatever C is, so its bits are too).
// The AVX-512 micro-kernels' last step: each of the nc columns' T tiles stored (first K block) or added to what
// is there. Inlined, with constant indices, so the accumulators stay in registers.
template <int T, int C>
__attribute__((target("avx512f"), always_inline)) inline void store_tiles(__m512 (&acc)[T][C], float * dst,
                                                                          int64_t dst_stride, int nc, bool first) {
#    pragma GCC unroll 12
    for (int j = 0; j < C; ++j) {
        if (j >= nc) break;
#    pragma GCC unroll 2
        for (int t = 0; t < T; ++t) {
            float * d = dst + j * dst_stride + t * kTile;
            _mm512_storeu_ps(d, first ? acc[t][j] : _mm512_add_ps(_mm512_loadu_ps(d), acc[t][j]));
        }
    }
}

template <int T, int C>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void micro_bf16dot(const uint16_t * w, int64_t tile_step,
                                                                          const char * panel, int64_t pairs,
                                                                          float * dst, int64_t dst_stride, int nc,
                                                                          bool first) {
    constexpr int P = kPanel512;
    __m512        acc[T][C];
#    pragma GCC unroll 24
    for (int i = 0; i < T * C; ++i) acc[i / C][i % C] = _mm512_setzero_ps();
    const int32_t * a = (const int32_t *) panel;
    for (int64_t p = 0; p < pairs; ++p) {
        __m512bh v[T];
#    pragma GCC unroll 2
        for (int t = 0; t < T; ++t) {
            _mm_prefetch((const char *) (w + (T + t) * tile_step + p * 2 * kTile), _MM_HINT_T0);  // the next call's
            v[t] = (__m512bh) _mm512_loadu_si512(w + t * tile_step + p * 2 * kTile);
        }
#    pragma GCC unroll 12
        for (int j = 0; j < C; ++j) {
            const __m512bh b = (__m512bh) _mm512_set1_epi32(a[p * P + j]);
#    pragma GCC unroll 2
            for (int t = 0; t < T; ++t) acc[t][j] = _mm512_dpbf16_ps(acc[t][j], v[t], b);
        }
    }
    store_tiles<T, C>(acc, dst, dst_stride, nc, first);
}

template <int T, int C>
__attribute__((target("avx512f"))) void micro_avx512(const uint16_t * w, int64_t tile_step, const char * panel,
                                                     int64_t pairs, float * dst, int64_t dst_stride, int nc,
                                                     bool first) {
    constexpr int P    = kPanel512;
    const __m512i high = _mm512_set1_epi32((int) 0xffff0000u);
    __m512        acc[T][C];
#    pragma GCC unroll 24
    for (int i = 0; i < T * C; ++i) acc[i / C][i % C] = _mm512_setzero_ps();
    const float * a = (const float *) panel;
    for (int64_t p = 0; p < pairs; ++p) {
        __m512 even[T], odd[T];
#    pragma GCC unroll 2
        for (int t = 0; t < T; ++t) {
            _mm_prefetch((const char *) (w + (T + t) * tile_step + p * 2 * kTile), _MM_HINT_T0);
            const __m512i v = _mm512_loadu_si512(w + t * tile_step + p * 2 * kTile);
            even[t]         = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
            odd[t]          = _mm512_castsi512_ps(_mm512_and_si512(v, high));
        }
#    pragma GCC unroll 12
        for (int j = 0; j < C; ++j) {
            const __m512 ae = _mm512_set1_ps(a[(p * P + j) * 2]);
#    pragma GCC unroll 2
            for (int t = 0; t < T; ++t) acc[t][j] = _mm512_fmadd_ps(even[t], ae, acc[t][j]);
            const __m512 ao = _mm512_set1_ps(a[(p * P + j) * 2 + 1]);
#    pragma GCC unroll 2
            for (int t = 0; t < T; ++t) acc[t][j] = _mm512_fmadd_ps(odd[t], ao, acc[t][j]);
        }
    }
    store_tiles<T, C>(acc, dst, dst_stride, nc, first);
}

// AVX2: one 16-row tile as its two 8-row halves, one after the other (the interleaved widening of rows_avx2:
// one 64-bit broadcast of a column's two values feeds both vectors of a half).
template <int T, int C>  // T is always 1: one tile a call
__attribute__((target("avx2,fma"))) void micro_avx2(const uint16_t * w, int64_t tile_step, const char * panel, int64_t pairs,
                                                    float * dst, int64_t dst_stride, int nc, bool first) {
    constexpr int P    = kPanelAvx2;
    const __m256i zero = _mm256_setzero_si256();
    const double * a   = (const double *) panel;
    for (int h = 0; h < 2; ++h) {
        __m256 lo[C], hi[C];
#    pragma GCC unroll 6
        for (int j = 0; j < C; ++j) lo[j] = hi[j] = _mm256_setzero_ps();
        for (int64_t p = 0; p < pairs; ++p) {
            if (h == 0) _mm_prefetch((const char *) (w + tile_step + p * 2 * kTile), _MM_HINT_T0);
            const __m256i v  = _mm256_loadu_si256((const __m256i *) (w + p * 2 * kTile + 16 * h));
            const __m256  wl = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, v));
            const __m256  wh = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, v));
#    pragma GCC unroll 6
            for (int j = 0; j < C; ++j) {
                const __m256 b = _mm256_castpd_ps(_mm256_broadcast_sd(a + p * P + j));
                lo[j]          = _mm256_fmadd_ps(wl, b, lo[j]);
                hi[j]          = _mm256_fmadd_ps(wh, b, hi[j]);
            }
        }
#    pragma GCC unroll 6
        for (int j = 0; j < C; ++j) {
            if (j >= nc) break;
            float *      d = dst + j * dst_stride + 8 * h;
            const __m256 s = _mm256_hadd_ps(lo[j], hi[j]);
            _mm256_storeu_ps(d, first ? s : _mm256_add_ps(_mm256_loadu_ps(d), s));
        }
    }
}

using MicroFn = void (*)(const uint16_t *, int64_t, const char *, int64_t, float *, int64_t, int, bool);

// Micro-kernels for 1..C columns, so a prompt's last, short group computes no padding.
template <int T, int... Cs> struct Bf16DotTable {
    static constexpr MicroFn fns[] = {micro_bf16dot<T, Cs>...};
};
template <int T, int... Cs> struct Avx512Table {
    static constexpr MicroFn fns[] = {micro_avx512<T, Cs>...};
};
template <int... Cs> struct Avx2Table {
    static constexpr MicroFn fns[] = {micro_avx2<1, Cs>...};
};

// Which of two kernels does a fixed piece of work faster on this CPU: alternated, the best of 25 rounds each
// (interruptions only add time, so the best round is the kernel's own speed). True if the first.
template <class First, class Second> bool first_is_faster(First first, Second second, int calls) {
    using clock    = std::chrono::steady_clock;
    double best[2] = {1e30, 1e30};
    for (int round = 0; round < 25; ++round) {
        for (int k = 0; k < 2; ++k) {
            const auto start = clock::now();
            for (int i = 0; i < calls; ++i) k == 0 ? first() : second();
            best[k] = std::min(best[k], std::chrono::duration<double>(clock::now() - start).count());
        }
    }
    return best[0] < best[1];
}

// Whether vdpbf16ps multiplies faster than widening plus FMA on this CPU, measured once: each prompt
// micro-kernel on the same block in L1. Where vdpbf16ps issues once a cycle (AMD Zen 4) it does twice the
// work of an FMA; where it issues once per two cycles (the Xeons we measured) the FMAs are faster. A few
// milliseconds at the first prompt.
bool bf16dot_is_faster() {
    const int64_t         pairs = kPromptPairs;
    std::vector<uint16_t> w((size_t) 2 * kTile * pairs * 2, 0x3f80);
    std::vector<char>     panel((size_t) pairs * kPanel512 * 8, 0);
    alignas(64) float     out[kPanel512][2 * kTile];
    const auto            run = [&](MicroFn fn) {
        fn(w.data(), kTile * pairs * 2, panel.data(), pairs, out[0], 2 * kTile, kPanel512, true);
    };
    return first_is_faster([&] { run(micro_bf16dot<2, kPanel512>); }, [&] { run(micro_avx512<2, kPanel512>); }, 50);
}

// The same question for decoding and verification (N <= 16), which must take one path for the whole
// process: the largest verification batch (16 columns, two passes of 8 over a tile) on a tile and columns
// in L1, so compute alone decides. At 1-2 columns both paths wait on memory, so the compute rate at 16
// columns is what separates them. Well under a millisecond, once at start-up.
bool measure_verify_dot() {
    constexpr int64_t     K = 256;
    std::vector<uint16_t> w((size_t) kTile * K, 0x3f80);
    std::vector<float>    f((size_t) K, 1.0f);
    std::vector<uint16_t> h((size_t) K, 0x3f80);
    Column                cols[8];
    for (Column & c : cols) c = {f.data(), h.data()};
    alignas(64) float out[8][kTile];
    const auto        sixteen = [&](TileFn fn) {
        fn(w.data(), K, cols, out);
        fn(w.data(), K, cols, out);
    };
    return first_is_faster([&] { sixteen(tile_avx512bf16<8>); }, [&] { sixteen(tile_avx512<8>); }, 100);
}

// An exclusive lock on a file, held while the object lives (where the system has file locks).
class ChoicesLock {
  public:
    explicit ChoicesLock(const std::string & path) {
#ifdef BF16_FILE_LOCKS
        fd_ = open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
        if (fd_ >= 0 && flock(fd_, LOCK_EX) != 0) {
            close(fd_);
            fd_ = -1;
        }
#else
        (void) path;
#endif
    }
    ~ChoicesLock() {
#ifdef BF16_FILE_LOCKS
        if (fd_ >= 0) close(fd_);  // closing releases the lock
#endif
    }
    ChoicesLock(const ChoicesLock &)             = delete;
    ChoicesLock & operator=(const ChoicesLock &) = delete;

  private:
    int fd_ = -1;
};

// A verdict kept for the machine. The two measurements above choose bits, not only speed (a path rounds the
// logits, and a greedy answer follows them), and one made beside another process's vector work on the same
// core can come out the other way, so two processes would answer the same question differently. Where
// ASSISTANT_KERNEL_CHOICES names a file (assistant names one per CPU model: engine/backend.py), the first
// process's verdict is written there as "key=0|1" and every later one takes it. Reading, measuring and
// writing happen under a lock beside the file, so processes that start together (the bench's workers) take
// one verdict.
bool remembered(const char * key, bool (*measure)()) {
    const char * file = std::getenv("ASSISTANT_KERNEL_CHOICES");
    if (file == nullptr || *file == '\0') return measure();
    const ChoicesLock lock(std::string(file) + ".lock");
    std::string text;
    if (FILE * in = std::fopen(file, "r")) {
        char   buffer[256];
        size_t got;
        while ((got = std::fread(buffer, 1, sizeof buffer, in)) > 0) text.append(buffer, got);
        std::fclose(in);
    }
    const std::string prefix = std::string(key) + "=";
    for (size_t at = 0; at < text.size();) {
        const size_t end = std::min(text.find('\n', at), text.size());
        if (text.compare(at, prefix.size(), prefix) == 0 && end > at + prefix.size()) return text[at + prefix.size()] == '1';
        at = end + 1;
    }
    const bool verdict = measure();
    if (!text.empty() && text.back() != '\n') text += '\n';
    text += prefix + (verdict ? "1\n" : "0\n");
    // whole or not at all: written beside it, then renamed over it
    const std::string part = std::string(file) + ".part" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
    if (FILE * out = std::fopen(part.c_str(), "w")) {
        const bool written = std::fwrite(text.data(), 1, text.size(), out) == text.size();
        if (std::fclose(out) == 0 && written && std::rename(part.c_str(), file) == 0) return verdict;
        std::remove(part.c_str());
    }
    return verdict;
}

// The verdict, or for tests ASSISTANT_BF16_TEST_DOT_FASTER=1|0 in its place (read at every bf16_set_path(0),
// so a test can check both choices in one process).
bool verify_dot_is_faster() {
    if (const char * given = std::getenv("ASSISTANT_BF16_TEST_DOT_FASTER")) return given[0] == '1';
    static const bool measured = remembered("bf16-verify-dot", measure_verify_dot);
    return measured;
}

// Whole 16-row tiles [row_begin, row_end) for N > 16 columns.
void gemm_prompt(Prompt kind, const uint16_t * packed, int64_t K, const void * act, size_t act_stride, int64_t N,
                 float * dst, int64_t dst_stride, int64_t row_begin, int64_t row_end) {
    const int     C      = kind == Prompt::Avx2 ? kPanelAvx2 : kPanel512;
    const int     tiles  = kind == Prompt::Avx2 ? 1 : 2;  // per micro-kernel call
    const size_t  elem   = kind == Prompt::Bf16Dot ? 4 : 8;  // a column's pair: two bf16 or two floats
    using Dot2 = Bf16DotTable<2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12>;
    using Dot1 = Bf16DotTable<1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12>;
    using Fma2 = Avx512Table<2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12>;
    using Fma1 = Avx512Table<1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12>;
    using Half = Avx2Table<1, 2, 3, 4, 5, 6>;
    const MicroFn * two = kind == Prompt::Bf16Dot ? Dot2::fns : kind == Prompt::Avx512 ? Fma2::fns : Half::fns;
    const MicroFn * one = kind == Prompt::Bf16Dot ? Dot1::fns : kind == Prompt::Avx512 ? Fma1::fns : Half::fns;
    const int64_t pairs  = K / 2;
    const int64_t blocks = (pairs + kPromptPairs - 1) / kPromptPairs;
    const int64_t block  = (pairs + blocks - 1) / blocks;  // blocks of equal length, the last one shorter
    const int64_t groups = (N + C - 1) / C;
    thread_local std::vector<char> panels;
    panels.resize((size_t) groups * block * C * elem);
    for (int64_t p0 = 0; p0 < pairs; p0 += block) {
        const int64_t n = std::min(block, pairs - p0);
        // Pack: panel g holds, pair by pair, the pairs of its C columns (zeros past N).
        for (int64_t g = 0; g < groups; ++g) {
            char * panel = panels.data() + (size_t) g * block * C * elem;
            for (int j = 0; j < C; ++j) {
                const int64_t col = g * C + j;
                if (col >= N) {
                    for (int64_t p = 0; p < n; ++p) std::memset(panel + (p * C + j) * elem, 0, elem);
                    continue;
                }
                const Column  c   = column(act, act_stride, col, K);
                const char *  src = elem == 4 ? (const char *) c.h : (const char *) c.f;
                for (int64_t p = 0; p < n; ++p) std::memcpy(panel + (p * C + j) * elem, src + (p0 + p) * elem, elem);
            }
        }
        for (int64_t r0 = row_begin; r0 < row_end; r0 += kPromptRows) {
            const int64_t r1 = std::min(row_end, r0 + kPromptRows);
            for (int64_t g = 0; g < groups; ++g) {
                const char * panel = panels.data() + (size_t) g * block * C * elem;
                const int    nc    = (int) std::min<int64_t>(C, N - g * C);
                for (int64_t t0 = r0; t0 < r1; t0 += tiles * kTile) {
                    const bool       whole = t0 + tiles * kTile <= r1;
                    const uint16_t * w     = packed + t0 * K + p0 * 2 * kTile;
                    (whole ? two : one)[nc - 1](w, kTile * K, panel, n, dst + g * C * dst_stride + t0, dst_stride, nc,
                                                p0 == 0);
                }
            }
        }
    }
}
#endif  // BF16_X86

#ifdef BF16_NEON
// ARM64: 4 rows to a 128-bit register, Q quarters of the tile at once from quarter q0 (all four for one
// or two columns, two at a time for more), widen + FMA like the x86 paths, so the bits are the same.
template <int NC, int Q>
void rows_neon(const uint16_t * tile, int64_t K, const Column * cols, float (*out)[kTile], int q0) {
    const uint32x4_t high = vdupq_n_u32(0xffff0000u);
    float32x4_t      even[Q][NC], odd[Q][NC];
#    pragma GCC unroll 16
    for (int i = 0; i < Q * NC; ++i) even[i / NC][i % NC] = odd[i / NC][i % NC] = vdupq_n_f32(0.0f);
    for (int64_t p = 0; p < K / 2; ++p) {
        __builtin_prefetch((const char *) (tile + p * 2 * kTile) + kPrefetchBytes);
        float32x4_t w0[Q], w1[Q];
#    pragma GCC unroll 4
        for (int q = 0; q < Q; ++q) {
            const uint32x4_t v = vld1q_u32((const uint32_t *) (tile + p * 2 * kTile + 8 * (q0 + q)));
            w0[q] = vreinterpretq_f32_u32(vshlq_n_u32(v, 16));
            w1[q] = vreinterpretq_f32_u32(vandq_u32(v, high));
        }
#    pragma GCC unroll 4
        for (int j = 0; j < NC; ++j) {
            const float a0 = cols[j].f[2 * p], a1 = cols[j].f[2 * p + 1];
#    pragma GCC unroll 4
            for (int q = 0; q < Q; ++q) {
                even[q][j] = vfmaq_n_f32(even[q][j], w0[q], a0);
                odd[q][j]  = vfmaq_n_f32(odd[q][j], w1[q], a1);
            }
        }
    }
#    pragma GCC unroll 16
    for (int i = 0; i < Q * NC; ++i) {
        vst1q_f32(out[i % NC] + 4 * (q0 + i / NC), vaddq_f32(even[i / NC][i % NC], odd[i / NC][i % NC]));
    }
}

template <int NC>
void tile_neon(const uint16_t * tile, int64_t K, const Column * cols, float (*out)[kTile]) {
    if (NC <= 2) {
        rows_neon<NC, 4>(tile, K, cols, out, 0);
    } else {
        rows_neon<NC, 2>(tile, K, cols, out, 0);
        rows_neon<NC, 2>(tile, K, cols, out, 2);
    }
}

const TileFn kNeon[4] = {tile_neon<1>, tile_neon<2>, tile_neon<3>, tile_neon<4>};
#endif  // BF16_NEON

// The last tile of a matrix whose M is not a multiple of 16, widened to 16 rows (zeros) for the vector paths.
void widen_tile(const uint16_t * tile, int R, int64_t K, std::vector<uint16_t> & wide) {
    wide.assign((size_t) kTile * K, 0);
    for (int64_t p = 0; p < K / 2; ++p) std::memcpy(wide.data() + p * 2 * kTile, tile + p * 2 * R, 4 * R);
}
#ifdef BF16_AMX
// AMX: one TDPBF16PS multiplies a tile of up to 16 activation columns (rows of the A tile, 32 values each)
// by 32 values of 16 weight rows. Our packed layout is already the B tile: 16 pairs of values, each with
// the 16 rows' pairs side by side, 1 KB contiguous per 32 values of a 16-row tile. The result tile is
// C[column][row], so a column's 16 results are one row of C, stored straight into dst.
// Tiles: 0 and 1 accumulate two 16-row tiles, 2 holds the activations, 3 and 4 the two tiles' weights.
// Tiles 0-2 get nc rows (the columns); the prompt path below configures nc = 16 and uses all 8 tiles.
__attribute__((target("amx-tile,amx-bf16"))) void amx_configure(int nc) {
    TileConfig config = {};
    config.palette    = 1;
    for (int t = 0; t < 8; ++t) {
        config.bytes_per_row[t] = 64;
        config.rows[t]          = (uint8_t) (t <= 2 ? nc : kTile);
    }
    assistant_amx::load_config(config);
}

// Every 32 values of the two weight streams (1 KB each) is one step; prefetch 4 steps ahead of each.
template <bool TWO>
__attribute__((target("amx-tile,amx-bf16"))) void amx_rows(const uint16_t * w0, const uint16_t * w1, int64_t K,
                                                            const uint16_t * act, size_t act_stride) {
    assistant_amx::tile_loads_see_stores();  // the widened tile and the converted activations
    _tile_zero(0);
    if (TWO) _tile_zero(1);
    for (int64_t b = 0; b < K / 32; ++b) {
        for (int line = 0; line < 1024; line += 64) {
            _mm_prefetch((const char *) (w0 + b * 512) + kPrefetchBytes + line, _MM_HINT_T0);
            if (TWO) _mm_prefetch((const char *) (w1 + b * 512) + kPrefetchBytes + line, _MM_HINT_T0);
        }
        _tile_loadd(2, act + b * 32, act_stride);
        _tile_loadd(3, w0 + b * 512, 64);
        _tile_dpbf16ps(0, 2, 3);
        if (TWO) {
            _tile_loadd(4, w1 + b * 512, 64);
            _tile_dpbf16ps(1, 2, 4);
        }
    }
}


// Prompts (N > 16 columns) are compute-bound, and three things kept TDPBF16PS at a quarter of its rate:
// one activation tile per two multiplies (now two row tiles x two column chunks per step: four tile
// loads for four multiplies), activations streaming from L3 for every row tile when K is large (now K in
// blocks whose activations stay in L2 while the row tiles pass over them), and LDTILECFG (a thousand
// cycles) whenever the last chunk of columns was short (now configured once: the short chunk's
// activations are copied into a full 16-row tile, zero-padded, and its results pass through a local tile).
// The accumulators live in dst between K blocks (f32 stored and reloaded exactly), and every column sees
// the same sequence of multiplies as in amx_rows, so its bits do not depend on N.
constexpr int64_t kPromptBlock = 1024;  // values of K per block: 221 columns x 1024 x 2 bytes fit in L2

// 16 columns of activations as the A operand: step b's tile is at a + b * step, rows stride bytes apart;
// their results for the two row tiles are C tiles at c[0] and c[1], rows c_stride bytes apart.
struct Chunk {
    const uint16_t * a;
    size_t           stride;
    int64_t          step;
    float *          c[2];
    size_t           c_stride;
};

// Tiles: 0-3 accumulate (chunk x row tile), 4-5 hold the chunks' activations, 6-7 the row tiles' weights.
template <bool TWO_CHUNKS, bool TWO_ROWS>
__attribute__((target("amx-tile,amx-bf16"))) void amx_block(const uint16_t * w0, const uint16_t * w1, int64_t b0,
                                                            int64_t b1, const Chunk & x, const Chunk & y) {
    assistant_amx::tile_loads_see_stores();  // the short chunk's copies
    if (b0 == 0) {
        _tile_zero(0);
        if (TWO_ROWS) _tile_zero(1);
        if (TWO_CHUNKS) _tile_zero(2);
        if (TWO_CHUNKS && TWO_ROWS) _tile_zero(3);
    } else {
        _tile_loadd(0, x.c[0], x.c_stride);
        if (TWO_ROWS) _tile_loadd(1, x.c[1], x.c_stride);
        if (TWO_CHUNKS) _tile_loadd(2, y.c[0], y.c_stride);
        if (TWO_CHUNKS && TWO_ROWS) _tile_loadd(3, y.c[1], y.c_stride);
    }
    for (int64_t b = b0; b < b1; ++b) {
        _tile_loadd(6, w0 + b * 512, 64);
        _tile_loadd(4, x.a + b * x.step, x.stride);
        _tile_dpbf16ps(0, 4, 6);
        if (TWO_ROWS) {
            _tile_loadd(7, w1 + b * 512, 64);
            _tile_dpbf16ps(1, 4, 7);
        }
        if (TWO_CHUNKS) {
            _tile_loadd(5, y.a + b * y.step, y.stride);
            _tile_dpbf16ps(2, 5, 6);
            if (TWO_ROWS) _tile_dpbf16ps(3, 5, 7);
        }
    }
    _tile_stored(0, x.c[0], x.c_stride);
    if (TWO_ROWS) _tile_stored(1, x.c[1], x.c_stride);
    if (TWO_CHUNKS) _tile_stored(2, y.c[0], y.c_stride);
    if (TWO_CHUNKS && TWO_ROWS) _tile_stored(3, y.c[1], y.c_stride);
}

// Whole 16-row tiles [row_begin, row_end) for N > 16 columns.
__attribute__((target("amx-tile,amx-bf16"))) void gemm_amx_prompt(const uint16_t * packed, int64_t K, const void * act,
                                                                  size_t act_stride, int64_t N, float * dst,
                                                                  int64_t dst_stride, int64_t row_begin,
                                                                  int64_t row_end) {
    thread_local std::vector<uint16_t> short_a;  // the short chunk's activations, one block, as 16-row tiles
    alignas(64) float short_c[2][kTile][kTile];  // its results for one row tile pair
    const int64_t full = N / kTile, left = N % kTile, steps = K / 32, block = kPromptBlock / 32;
    const size_t  c_stride = (size_t) dst_stride * sizeof(float);
    amx_configure(kTile);
    for (int64_t b0 = 0; b0 < steps; b0 += block) {
        const int64_t b1 = std::min(steps, b0 + block);
        if (left) {
            short_a.assign((size_t) (b1 - b0) * 512, 0);
            for (int j = 0; j < left; ++j) {
                const uint16_t * h = column(act, act_stride, full * kTile + j, K).h;
                for (int64_t b = b0; b < b1; ++b) std::memcpy(&short_a[(b - b0) * 512 + j * 32], h + b * 32, 64);
            }
        }
        for (int64_t t0 = row_begin; t0 < row_end; t0 += 2 * kTile) {
            const bool       two = t0 + kTile < row_end;
            const uint16_t * w0  = packed + t0 * K;
            const uint16_t * w1  = packed + (t0 + kTile) * K;
            auto chunk = [&](int64_t i) -> Chunk {
                if (i == full) return {short_a.data() - b0 * 512, 64, 512, {short_c[0][0], short_c[1][0]}, 64};
                float * c = dst + i * kTile * dst_stride + t0;
                return {column(act, act_stride, i * kTile, K).h, act_stride, 32, {c, c + kTile}, c_stride};
            };
            for (int j = 0; j < left && b0 > 0; ++j) {  // the short chunk's sums so far
                float * d = dst + (full * kTile + j) * dst_stride + t0;
                std::memcpy(short_c[0][j], d, sizeof short_c[0][j]);
                if (two) std::memcpy(short_c[1][j], d + kTile, sizeof short_c[1][j]);
            }
            const int64_t chunks = full + (left > 0);
            for (int64_t i = 0; i < chunks; i += 2) {
                const Chunk x = chunk(i);
                if (i + 1 < chunks) {
                    const Chunk y = chunk(i + 1);
                    two ? amx_block<true, true>(w0, w1, b0, b1, x, y) : amx_block<true, false>(w0, w1, b0, b1, x, y);
                } else {
                    two ? amx_block<false, true>(w0, w1, b0, b1, x, x) : amx_block<false, false>(w0, w1, b0, b1, x, x);
                }
            }
            for (int j = 0; j < left; ++j) {
                float * d = dst + (full * kTile + j) * dst_stride + t0;
                std::memcpy(d, short_c[0][j], sizeof short_c[0][j]);
                if (two) std::memcpy(d + kTile, short_c[1][j], sizeof short_c[1][j]);
            }
        }
    }
    _tile_release();
}

// Rows [row_begin, row_end) for N columns: up to 16 columns in one pass over each pair of row tiles. A
// prompt (N > 16) sends its whole row tiles to gemm_amx_prompt; only a last short tile stays here.
__attribute__((target("amx-tile,amx-bf16"))) void gemm_amx(const uint16_t * packed, int64_t M, int64_t K,
                                                           const void * act, size_t act_stride, int64_t N, float * dst,
                                                           int64_t dst_stride, int64_t row_begin, int64_t row_end) {
    thread_local std::vector<uint16_t> wide;
    alignas(64) float out[2][kTile][kTile];
    int configured = 0;
    if (N > kTile) {  // a prompt: whole row tiles take the compute-bound path, a last short tile the loop below
        const int64_t whole_end = std::min(row_end, M / kTile * kTile);
        if (whole_end > row_begin) gemm_amx_prompt(packed, K, act, act_stride, N, dst, dst_stride, row_begin, whole_end);
        row_begin = std::max(row_begin, whole_end);
    }
    for (int64_t t0 = row_begin; t0 < row_end; t0 += 2 * kTile) {
        const bool       two = t0 + kTile < row_end;
        const uint16_t * w0  = packed + t0 * K;
        const uint16_t * w1  = packed + (t0 + kTile) * K;
        const int        R0  = (int) std::min<int64_t>(kTile, M - t0);
        const int        R1  = two ? (int) std::min<int64_t>(kTile, M - t0 - kTile) : 0;
        if (R0 < kTile) {
            widen_tile(w0, R0, K, wide);
            w0 = wide.data();
        } else if (two && R1 < kTile) {
            widen_tile(w1, R1, K, wide);
            w1 = wide.data();
        }
        for (int64_t j0 = 0; j0 < N; j0 += kTile) {
            const int nc = (int) std::min<int64_t>(kTile, N - j0);
            if (nc != configured) {
                amx_configure(nc);
                configured = nc;
            }
            const uint16_t * a = column(act, act_stride, j0, K).h;
            if (two) {
                amx_rows<true>(w0, w1, K, a, act_stride);
                _tile_stored(1, out[1], 64);
            } else {
                amx_rows<false>(w0, w0, K, a, act_stride);
            }
            _tile_stored(0, out[0], 64);
            for (int j = 0; j < nc; ++j) {
                float * d = dst + (j0 + j) * dst_stride + t0;
                std::memcpy(d, out[0][j], R0 * sizeof(float));
                if (two) std::memcpy(d + kTile, out[1][j], R1 * sizeof(float));
            }
        }
    }
    if (configured) _tile_release();
}

#endif  // BF16_AMX

#ifdef BF16_X86
// round_to_bf16 and widen, 16 values at a time (K is a multiple of 32).
__attribute__((target("avx512f"))) void convert_avx512(const float * x, float * f, uint16_t * h, int64_t K) {
    const __m512i magnitude = _mm512_set1_epi32(0x7fffffff), infinity = _mm512_set1_epi32(0x7f800000);
    const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff), quiet = _mm512_set1_epi32(0x40);
    for (int64_t k = 0; k < K; k += 16) {
        const __m512i   bits    = _mm512_loadu_si512(x + k);
        const __m512i   lsb     = _mm512_and_si512(_mm512_srli_epi32(bits, 16), one);
        __m512i         rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(bits, bias), lsb), 16);
        const __mmask16 nan     = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, magnitude), infinity);
        rounded = _mm512_mask_or_epi32(rounded, nan, _mm512_srli_epi32(bits, 16), quiet);
        _mm256_storeu_si256((__m256i *) (h + k), _mm512_cvtepi32_epi16(rounded));
        if (f) _mm512_storeu_si512(f + k, _mm512_slli_epi32(rounded, 16));
    }
}

// The same rounding 8 values at a time, for CPUs without AVX-512.
__attribute__((target("avx2"))) void convert_avx2(const float * x, float * f, uint16_t * h, int64_t K) {
    const __m256i magnitude = _mm256_set1_epi32(0x7fffffff), infinity = _mm256_set1_epi32(0x7f800000);
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff), quiet = _mm256_set1_epi32(0x40);
    for (int64_t k = 0; k < K; k += 16) {
        __m256i r[2];
#    pragma GCC unroll 2
        for (int i = 0; i < 2; ++i) {
            const __m256i bits    = _mm256_loadu_si256((const __m256i *) (x + k + 8 * i));
            const __m256i lsb     = _mm256_and_si256(_mm256_srli_epi32(bits, 16), one);
            const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(bits, bias), lsb), 16);
            const __m256i nan     = _mm256_cmpgt_epi32(_mm256_and_si256(bits, magnitude), infinity);
            r[i] = _mm256_blendv_epi8(rounded, _mm256_or_si256(_mm256_srli_epi32(bits, 16), quiet), nan);
            if (f) _mm256_storeu_si256((__m256i *) (f + k + 8 * i), _mm256_slli_epi32(r[i], 16));
        }
        // packus works within 128-bit lanes: put the 16 halves back in order.
        const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), 0xd8);
        _mm256_storeu_si256((__m256i *) (h + k), packed);
    }
}
#endif

#ifdef BF16_X86
// Packing a whole 16-row tile is a transpose of 4-byte value pairs: row r's pair p goes to p * 16 + r. These
// do it 16 pairs (AVX-512) or 8 pairs (AVX2) of all 16 rows at a time, fast enough to run before every use of
// a tile when the weights are used from the file as they are (bf16_gemm_rows). next, when not null, is the
// following tile's rows: its lines are prefetched into L2 at the same place, so DRAM streams while this tile
// is computed.
__attribute__((target("avx512f"))) void pack_tile_avx512(const uint16_t * rows, int64_t K, uint16_t * tile,
                                                        const uint16_t * next) {
    for (int64_t k = 0; k < K; k += 32) {
        __m512i a[16], b[16];
#    pragma GCC unroll 16
        for (int r = 0; r < 16; ++r) {
            a[r] = _mm512_loadu_si512(rows + r * K + k);
            if (next) _mm_prefetch((const char *) (next + r * K + k), _MM_HINT_T1);
        }
#    pragma GCC unroll 16
        for (int i = 0; i < 16; i += 2) {  // lane L of b[i]: pairs 4L, 4L + 1 of rows i, i + 1; of b[i + 1]: 4L + 2, 4L + 3
            b[i]     = _mm512_unpacklo_epi32(a[i], a[i + 1]);
            b[i + 1] = _mm512_unpackhi_epi32(a[i], a[i + 1]);
        }
#    pragma GCC unroll 16
        for (int i = 0; i < 16; i += 4) {  // lane L of a[i + j]: pair 4L + j of rows i .. i + 3
            a[i]     = _mm512_unpacklo_epi64(b[i], b[i + 2]);
            a[i + 1] = _mm512_unpackhi_epi64(b[i], b[i + 2]);
            a[i + 2] = _mm512_unpacklo_epi64(b[i + 1], b[i + 3]);
            a[i + 3] = _mm512_unpackhi_epi64(b[i + 1], b[i + 3]);
        }
        uint16_t * out = tile + k * kTile;  // pair k / 2 + p at out + p * 32
#    pragma GCC unroll 16
        for (int j = 0; j < 4; ++j) {  // pair 4L + j of all 16 rows is lane L of a[j], a[4 + j], a[8 + j], a[12 + j]
            const __m512i e0 = _mm512_shuffle_i32x4(a[j], a[4 + j], _MM_SHUFFLE(2, 0, 2, 0));
            const __m512i e1 = _mm512_shuffle_i32x4(a[j], a[4 + j], _MM_SHUFFLE(3, 1, 3, 1));
            const __m512i f0 = _mm512_shuffle_i32x4(a[8 + j], a[12 + j], _MM_SHUFFLE(2, 0, 2, 0));
            const __m512i f1 = _mm512_shuffle_i32x4(a[8 + j], a[12 + j], _MM_SHUFFLE(3, 1, 3, 1));
            _mm512_storeu_si512(out + (0 + j) * 32, _mm512_shuffle_i32x4(e0, f0, _MM_SHUFFLE(2, 0, 2, 0)));
            _mm512_storeu_si512(out + (4 + j) * 32, _mm512_shuffle_i32x4(e1, f1, _MM_SHUFFLE(2, 0, 2, 0)));
            _mm512_storeu_si512(out + (8 + j) * 32, _mm512_shuffle_i32x4(e0, f0, _MM_SHUFFLE(3, 1, 3, 1)));
            _mm512_storeu_si512(out + (12 + j) * 32, _mm512_shuffle_i32x4(e1, f1, _MM_SHUFFLE(3, 1, 3, 1)));
        }
    }
}

__attribute__((target("avx2"))) void pack_tile_avx2(const uint16_t * rows, int64_t K, uint16_t * tile,
                                                   const uint16_t * next) {
    for (int64_t k = 0; k < K; k += 16) {
        uint16_t * out = tile + k * kTile;  // pair k / 2 + p at out + p * 32, rows 0-7 then rows 8-15
#    pragma GCC unroll 16
        for (int h = 0; h < 2; ++h) {
            __m256i a[8], b[8];
#    pragma GCC unroll 16
            for (int r = 0; r < 8; ++r) {
                a[r] = _mm256_loadu_si256((const __m256i *) (rows + (8 * h + r) * K + k));
                if (next && k % 32 == 0) _mm_prefetch((const char *) (next + (8 * h + r) * K + k), _MM_HINT_T1);
            }
#    pragma GCC unroll 16
            for (int i = 0; i < 8; i += 2) {
                b[i]     = _mm256_unpacklo_epi32(a[i], a[i + 1]);
                b[i + 1] = _mm256_unpackhi_epi32(a[i], a[i + 1]);
            }
#    pragma GCC unroll 16
            for (int i = 0; i < 8; i += 4) {  // lane L of a[i + j]: pair 4L + j of rows i .. i + 3
                a[i]     = _mm256_unpacklo_epi64(b[i], b[i + 2]);
                a[i + 1] = _mm256_unpackhi_epi64(b[i], b[i + 2]);
                a[i + 2] = _mm256_unpacklo_epi64(b[i + 1], b[i + 3]);
                a[i + 3] = _mm256_unpackhi_epi64(b[i + 1], b[i + 3]);
            }
#    pragma GCC unroll 16
            for (int j = 0; j < 4; ++j) {
                _mm256_storeu_si256((__m256i *) (out + j * 32 + 16 * h), _mm256_permute2x128_si256(a[j], a[4 + j], 0x20));
                _mm256_storeu_si256((__m256i *) (out + (4 + j) * 32 + 16 * h), _mm256_permute2x128_si256(a[j], a[4 + j], 0x31));
            }
        }
    }
}
#endif

// Whether this CPU (and, for AMX, the OS) can run a path.
bool runnable(int path) {
#ifdef BF16_X86
    __builtin_cpu_init();
    switch (path) {
        case BF16_PATH_AVX2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        case BF16_PATH_AVX512: return __builtin_cpu_supports("avx512f");
        case BF16_PATH_AVX512_BF16:
            return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512bf16");
#    ifdef BF16_AMX
        case BF16_PATH_AMX:
            return __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-bf16") && assistant_amx::permitted();
#    endif
        default: break;
    }
#elif defined(BF16_NEON)
    if (path == BF16_PATH_NEON) return true;  // Advanced SIMD is part of every ARM64 CPU
#endif
    return path == BF16_PATH_SCALAR;
}

// Whether prompts take vdpbf16ps by default (measured once, kept for the machine).
#ifdef BF16_X86
bool prompt_dot_is_faster() {
    static const bool measured = runnable(BF16_PATH_AVX512_BF16) && remembered("bf16-prompt-dot", bf16dot_is_faster);
    return measured;
}
#endif

// The default: AMX where Linux grants it (every batch of up to 16 at the cost of one column); else, on a
// CPU with AVX512-BF16, vdpbf16ps or widening plus FMA, whichever the start-up measurement finds faster
// (one path per process: the two round differently); else the widest FMA path this machine runs.
// ASSISTANT_BF16_TEST_NO_AMX=1 (tests and measurements only) leaves AMX out, so an AMX machine makes the
// choice a Zen 4 makes.
int default_path() {
    const char * no_amx = std::getenv("ASSISTANT_BF16_TEST_NO_AMX");
    if (!(no_amx && no_amx[0] == '1') && runnable(BF16_PATH_AMX)) return BF16_PATH_AMX;
#ifdef BF16_X86
    if (runnable(BF16_PATH_AVX512_BF16)) {
        prompt_dot_is_faster();  // measured here, at start-up, rather than within a prompt beside the other threads
        if (verify_dot_is_faster()) return BF16_PATH_AVX512_BF16;
    }
#endif
    for (int path : {BF16_PATH_AVX512, BF16_PATH_AVX2, BF16_PATH_NEON}) {
        if (runnable(path)) return path;
    }
    return BF16_PATH_SCALAR;
}

int & current() {
    static int path = default_path();
    return path;
}

// Whether the path in use was asked for by name: then prompts run that path's own kernel too, so each can
// be measured; chosen by default, prompts take vdpbf16ps wherever the CPU has it.
bool & forced() {
    static bool named = false;
    return named;
}

// Weights used as the file holds them (bf16_gemm_rows), for the widening paths and vdpbf16ps. Per (row,
// column) two chains of 16 f32 lanes taking turns by step (a step: 16 values; vdpbf16ps 16 pairs, the last
// step of an odd count to the first chain): lane l of a chain advanced by fma over its steps' values k = 16i +
// l in order of i, then the chains added and the lanes folded in halves, l + 8 into l, then + 4, + 2, + 1.
// A vector is a row's consecutive values, so no transposing; two chains keep two multiply-adds in flight for
// one column (one waited on the multiply-add's latency); each (row, column) has its own lanes, so the bits
// depend on neither N nor the split. They differ from the packed layout's, whose lanes are rows.
constexpr int kLanes = 16;
// Batches up to this many columns run the row kernels (their bits); beyond, each tile is packed on the way. Short
// prompts ran faster so than packed on the way (notes/loading.md).
constexpr int64_t kRowsColumns = 64;

inline float fold_lanes(float * s) {
    for (int h = kLanes / 2; h >= 1; h /= 2) {
        for (int l = 0; l < h; ++l) s[l] += s[l + h];
    }
    return s[0];
}

void rows_scalar(const uint16_t * w, int64_t K, const Column * cols, int nc, float * dst, int64_t dst_stride) {
    for (int j = 0; j < nc; ++j) {
        float s[2][kLanes] = {};
        for (int64_t k = 0; k < K; k += kLanes) {
            float * chain = s[(k / kLanes) % 2];
            for (int l = 0; l < kLanes; ++l) chain[l] = std::fma(widen(w[k + l]), cols[j].f[k + l], chain[l]);
        }
        for (int l = 0; l < kLanes; ++l) s[0][l] += s[1][l];
        dst[j * dst_stride] = fold_lanes(s[0]);
    }
}

#ifdef BF16_X86
// One row a pass, up to 8 columns of the batch in it (16 accumulators): the matrix is read as one stream,
// front to back. Blocks of several rows at once read several streams and ran 10-40% slower at one column on
// the Zen 4 (notes/kernels.md). The prefetch runs this far ahead of the stream: rows of 576 values end too
// soon for the hardware prefetchers alone.
constexpr int kRowsAhead = 4096;  // bytes

// fold_lanes on vectors: l + 4, + 2, + 1 of 8 lanes (fold8), after l + 8 of 16 (fold16).
__attribute__((target("avx2"))) inline float fold8(__m256 s) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    x        = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x        = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
    return _mm_cvtss_f32(x);
}

__attribute__((target("avx512f"))) inline float fold16(__m512 v) {
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    return fold8(_mm256_add_ps(_mm512_castps512_ps256(v), hi));
}

__attribute__((target("avx512f"))) inline __m512 widen16(const uint16_t * w) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *) w)), 16));
}

__attribute__((target("avx2"))) inline __m256 widen8(const uint16_t * w) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *) w)), 16));
}

// K is a multiple of 32: whole pairs of 16-value steps.
template <int NC>
__attribute__((target("avx512f"))) void row_avx512(const uint16_t * w, int64_t K, const Column * cols, float * dst,
                                                   int64_t dst_stride) {
    __m512 a0[NC], a1[NC];
#    pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) a0[j] = a1[j] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k += 2 * kLanes) {
        _mm_prefetch((const char *) (w + k) + kRowsAhead, _MM_HINT_T1);
        const __m512 v0 = widen16(w + k), v1 = widen16(w + k + kLanes);
#    pragma GCC unroll 8
        for (int j = 0; j < NC; ++j) {
            a0[j] = _mm512_fmadd_ps(v0, _mm512_loadu_ps(cols[j].f + k), a0[j]);
            a1[j] = _mm512_fmadd_ps(v1, _mm512_loadu_ps(cols[j].f + k + kLanes), a1[j]);
        }
    }
#    pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) dst[j * dst_stride] = fold16(_mm512_add_ps(a0[j], a1[j]));
}

template <int NC>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void row_avx512bf16(const uint16_t * w, int64_t K,
                                                                             const Column * cols, float * dst,
                                                                             int64_t dst_stride) {
    __m512 a0[NC], a1[NC];
#    pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) a0[j] = a1[j] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 4 * kLanes <= K; k += 4 * kLanes) {
        _mm_prefetch((const char *) (w + k) + kRowsAhead, _MM_HINT_T1);
        _mm_prefetch((const char *) (w + k) + kRowsAhead + 64, _MM_HINT_T1);
        const __m512bh v0 = (__m512bh) _mm512_loadu_si512(w + k), v1 = (__m512bh) _mm512_loadu_si512(w + k + 2 * kLanes);
#    pragma GCC unroll 8
        for (int j = 0; j < NC; ++j) {
            a0[j] = _mm512_dpbf16_ps(a0[j], v0, (__m512bh) _mm512_loadu_si512(cols[j].h + k));
            a1[j] = _mm512_dpbf16_ps(a1[j], v1, (__m512bh) _mm512_loadu_si512(cols[j].h + k + 2 * kLanes));
        }
    }
    if (k < K) {  // an odd step count: the last to the first chain
        const __m512bh v0 = (__m512bh) _mm512_loadu_si512(w + k);
#    pragma GCC unroll 8
        for (int j = 0; j < NC; ++j) a0[j] = _mm512_dpbf16_ps(a0[j], v0, (__m512bh) _mm512_loadu_si512(cols[j].h + k));
    }
#    pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) dst[j * dst_stride] = fold16(_mm512_add_ps(a0[j], a1[j]));
}

// AVX2: a chain's lanes 0-7 and 8-15 in two registers, up to 3 columns a pass (12 accumulators of 16 registers).
template <int NC>
__attribute__((target("avx2,fma"))) void row_avx2(const uint16_t * w, int64_t K, const Column * cols, float * dst,
                                                  int64_t dst_stride) {
    __m256 lo0[NC], hi0[NC], lo1[NC], hi1[NC];
#    pragma GCC unroll 4
    for (int j = 0; j < NC; ++j) lo0[j] = hi0[j] = lo1[j] = hi1[j] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; k += 2 * kLanes) {
        _mm_prefetch((const char *) (w + k) + kRowsAhead, _MM_HINT_T1);
        const __m256 v0 = widen8(w + k), v1 = widen8(w + k + 8), v2 = widen8(w + k + 16), v3 = widen8(w + k + 24);
#    pragma GCC unroll 4
        for (int j = 0; j < NC; ++j) {
            const float * a = cols[j].f + k;
            lo0[j] = _mm256_fmadd_ps(v0, _mm256_loadu_ps(a), lo0[j]);
            hi0[j] = _mm256_fmadd_ps(v1, _mm256_loadu_ps(a + 8), hi0[j]);
            lo1[j] = _mm256_fmadd_ps(v2, _mm256_loadu_ps(a + 16), lo1[j]);
            hi1[j] = _mm256_fmadd_ps(v3, _mm256_loadu_ps(a + 24), hi1[j]);
        }
    }
    // chains added lane by lane, then l + 8: (lo0 + lo1) + (hi0 + hi1)
#    pragma GCC unroll 4
    for (int j = 0; j < NC; ++j) dst[j * dst_stride] = fold8(_mm256_add_ps(_mm256_add_ps(lo0[j], lo1[j]), _mm256_add_ps(hi0[j], hi1[j])));
}

using RowFn = void (*)(const uint16_t *, int64_t, const Column *, float *, int64_t);
template <template <int> class Kernel, int... NC>
constexpr std::array<RowFn, sizeof...(NC)> row_table(std::integer_sequence<int, NC...>) {
    return {Kernel<NC + 1>::run...};
}
template <int NC> struct RowAvx512 { static constexpr RowFn run = row_avx512<NC>; };
template <int NC> struct RowAvx512Bf16 { static constexpr RowFn run = row_avx512bf16<NC>; };
template <int NC> struct RowAvx2 { static constexpr RowFn run = row_avx2<NC>; };
constexpr auto kRowAvx512     = row_table<RowAvx512>(std::make_integer_sequence<int, 8>());
constexpr auto kRowAvx512Bf16 = row_table<RowAvx512Bf16>(std::make_integer_sequence<int, 8>());
constexpr auto kRowAvx2       = row_table<RowAvx2>(std::make_integer_sequence<int, 3>());

// Batches whose activations outgrow L1 (N columns x K values): a row alone would read all of them from L2 for
// every row. These take a block of kBlockRows rows through K in chunks of kChunk values, each chunk's columns
// then serving every row of the block from L1; a row's chains wait in state between its chunks (stored and
// loaded whole, so no bit changes). The chunks of a block are kBlockRows streams of 1 KB: each chunk
// prefetches its row's next.
constexpr int kBlockRows = 16, kChunk = 512, kBlockBytes = 256 << 10;
constexpr int64_t kChunkFrom = 24 << 10;  // bytes of the batch's bf16 activations

template <int NC>
__attribute__((target("avx512f"))) void chunk_avx512(const uint16_t * w, int64_t k0, int64_t k1, const Column * cols,
                                                     float * chains, const char * ahead) {
    __m512 * state = (__m512 *) chains;
    __m512 a0[NC], a1[NC];
#    pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) a0[j] = state[2 * j], a1[j] = state[2 * j + 1];
    for (int64_t k = k0; k < k1; k += 2 * kLanes) {
        if (ahead) _mm_prefetch(ahead + (k - k0) * 2, _MM_HINT_T1);
        const __m512 v0 = widen16(w + k), v1 = widen16(w + k + kLanes);
#    pragma GCC unroll 8
        for (int j = 0; j < NC; ++j) {
            a0[j] = _mm512_fmadd_ps(v0, _mm512_loadu_ps(cols[j].f + k), a0[j]);
            a1[j] = _mm512_fmadd_ps(v1, _mm512_loadu_ps(cols[j].f + k + kLanes), a1[j]);
        }
    }
#    pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) state[2 * j] = a0[j], state[2 * j + 1] = a1[j];
}

// k0 is even in steps (chunks are whole pairs of steps); a chunk ending at an odd step count gives its last
// step to the first chain, as row_avx512bf16 does.
template <int NC>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void chunk_avx512bf16(const uint16_t * w, int64_t k0, int64_t k1,
                                                                               const Column * cols, float * chains,
                                                                               const char * ahead) {
    __m512 * state = (__m512 *) chains;
    __m512 a0[NC], a1[NC];
#    pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) a0[j] = state[2 * j], a1[j] = state[2 * j + 1];
    int64_t k = k0;
    for (; k + 4 * kLanes <= k1; k += 4 * kLanes) {
        if (ahead) {
            _mm_prefetch(ahead + (k - k0) * 2, _MM_HINT_T1);
            _mm_prefetch(ahead + (k - k0) * 2 + 64, _MM_HINT_T1);
        }
        const __m512bh v0 = (__m512bh) _mm512_loadu_si512(w + k), v1 = (__m512bh) _mm512_loadu_si512(w + k + 2 * kLanes);
#    pragma GCC unroll 8
        for (int j = 0; j < NC; ++j) {
            a0[j] = _mm512_dpbf16_ps(a0[j], v0, (__m512bh) _mm512_loadu_si512(cols[j].h + k));
            a1[j] = _mm512_dpbf16_ps(a1[j], v1, (__m512bh) _mm512_loadu_si512(cols[j].h + k + 2 * kLanes));
        }
    }
    if (k < k1) {
        const __m512bh v0 = (__m512bh) _mm512_loadu_si512(w + k);
#    pragma GCC unroll 8
        for (int j = 0; j < NC; ++j) a0[j] = _mm512_dpbf16_ps(a0[j], v0, (__m512bh) _mm512_loadu_si512(cols[j].h + k));
    }
#    pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) state[2 * j] = a0[j], state[2 * j + 1] = a1[j];
}

using ChunkFn = void (*)(const uint16_t *, int64_t, int64_t, const Column *, float *, const char *);  // chains: 64-byte aligned
template <template <int> class Kernel, int... NC>
constexpr std::array<ChunkFn, sizeof...(NC)> chunk_table(std::integer_sequence<int, NC...>) {
    return {Kernel<NC + 1>::run...};
}
template <int NC> struct ChunkAvx512 { static constexpr ChunkFn run = chunk_avx512<NC>; };
template <int NC> struct ChunkAvx512Bf16 { static constexpr ChunkFn run = chunk_avx512bf16<NC>; };
constexpr auto kChunkAvx512     = chunk_table<ChunkAvx512>(std::make_integer_sequence<int, 8>());
constexpr auto kChunkAvx512Bf16 = chunk_table<ChunkAvx512Bf16>(std::make_integer_sequence<int, 8>());

// Rows [row_begin, row_end) of an AVX-512 path in blocks and chunks (see kBlockRows). While a block is
// computed, the next one is fetched into L2 as one linear stream, a chunk's worth (1 KB) at each call, so that
// DRAM sees the matrix front to back rather than a block's rows side by side.
__attribute__((target("avx512f"))) void rows_in_chunks(const ChunkFn * table, const uint16_t * rows, int64_t K,
                                                       const Column * cols, int64_t N, float * dst, int64_t dst_stride,
                                                       int64_t row_begin, int64_t row_end) {
    alignas(64) __m512 state[kBlockRows][2 * 8];
    const int64_t block = std::clamp<int64_t>((kBlockBytes / 2) / K, 1, kBlockRows);
    for (int64_t r0 = row_begin; r0 < row_end; r0 += block) {
        const int    rb   = (int) std::min<int64_t>(block, row_end - r0);
        const char * next = r0 + rb < row_end ? (const char *) (rows + (r0 + rb) * K) : nullptr;
        const char * end  = (const char *) (rows + row_end * K);
        int64_t      call = 0;
        for (int64_t j0 = 0; j0 < N; j0 += 8) {
            const int nc = (int) std::min<int64_t>(8, N - j0);
            for (int r = 0; r < rb; ++r) {
                for (int i = 0; i < 2 * nc; ++i) state[r][i] = _mm512_setzero_ps();
            }
            for (int64_t k0 = 0; k0 < K; k0 += kChunk) {
                const int64_t k1 = std::min<int64_t>(K, k0 + kChunk);
                for (int r = 0; r < rb; ++r, ++call) {
                    const char * ahead = next && next + (call + 1) * kChunk * 2 <= end ? next + call * kChunk * 2 : nullptr;
                    table[nc - 1](rows + (r0 + r) * K, k0, k1, cols + j0, (float *) state[r], ahead);
                }
            }
            for (int r = 0; r < rb; ++r) {
                for (int j = 0; j < nc; ++j) dst[(j0 + j) * dst_stride + r0 + r] = fold16(_mm512_add_ps(state[r][2 * j], state[r][2 * j + 1]));
            }
        }
    }
}
#endif

// Packs rows [0, M) of a row-major matrix (M a multiple of 16, or the matrix's last rows) into tiles, with the
// vector instructions of the path in use.
void pack_rows(const uint16_t * rows, uint16_t * packed, int64_t M, int64_t K, const uint16_t * next) {
    (void) next;  // prefetched on x86 only
#ifdef BF16_X86
    const int  path   = current();  // the path's own instructions, so each pack is checked where its kernel is
    const bool avx512 = path == BF16_PATH_AVX512 || path == BF16_PATH_AVX512_BF16 || path == BF16_PATH_AMX;
    const bool avx2   = path == BF16_PATH_AVX2;
#endif
    for (int64_t t0 = 0; t0 < M; t0 += kTile) {
        const int        R    = (int) std::min<int64_t>(kTile, M - t0);
        const uint16_t * src  = rows + t0 * K;
        uint16_t *       tile = packed + t0 * K;
#ifdef BF16_X86
        const uint16_t * ahead = t0 + kTile < M ? src + kTile * K : next;
        if (R == kTile && avx512) {
            pack_tile_avx512(src, K, tile, ahead);
            continue;
        }
        if (R == kTile && avx2) {
            pack_tile_avx2(src, K, tile, ahead);
            continue;
        }
#endif
        for (int r = 0; r < R; ++r) {
            for (int64_t p = 0; p < K / 2; ++p) std::memcpy(tile + p * 2 * R + 2 * r, src + r * K + 2 * p, 4);
        }
    }
}

}  // namespace

extern "C" {

int bf16_set_path(int path) {
    const bool named = path != BF16_PATH_AUTO;
    if (!named) path = default_path();
    if (runnable(path)) {
        current() = path;
        forced()  = named;
    }
    return current();
}

const char * bf16_path_name(void) {
    switch (current()) {
        case BF16_PATH_AMX: return "amx";
        case BF16_PATH_AVX512_BF16: return "avx512-bf16";
        case BF16_PATH_AVX512: return "avx512";
        case BF16_PATH_AVX2: return "avx2";
        case BF16_PATH_NEON: return "neon";
        default: return "scalar";
    }
}

void bf16_pack(const uint16_t * rows, void * packed, int64_t M, int64_t K) {
    pack_rows(rows, (uint16_t *) packed, M, K, nullptr);
}

void bf16_unpack(const void * packed, uint16_t * rows, int64_t M, int64_t K) {
    const uint16_t * src = (const uint16_t *) packed;
    for (int64_t t0 = 0; t0 < M; t0 += kTile) {
        const int        R    = (int) std::min<int64_t>(kTile, M - t0);
        const uint16_t * tile = src + t0 * K;
        for (int r = 0; r < R; ++r) {
            for (int64_t p = 0; p < K / 2; ++p) std::memcpy(rows + (t0 + r) * K + 2 * p, tile + p * 2 * R + 2 * r, 4);
        }
    }
}

size_t bf16_act_bytes(int64_t K) { return ((size_t) K * 6 + 63) & ~(size_t) 63; }

void bf16_convert_act(const float * x, void * act, int64_t K) {
    uint16_t * h = (uint16_t *) ((float *) act + K);
    float *    f = current() == BF16_PATH_AMX ? nullptr : (float *) act;  // AMX reads only the bf16 copy
#ifdef BF16_X86
    static const bool avx512 = runnable(BF16_PATH_AVX512), avx2 = runnable(BF16_PATH_AVX2);  // once, not per column
    if (avx512) {
        convert_avx512(x, f, h, K);
        return;
    }
    if (avx2) {
        convert_avx2(x, f, h, K);
        return;
    }
#endif
    for (int64_t k = 0; k < K; ++k) {
        h[k] = round_to_bf16(x[k]);
        if (f) f[k] = widen(h[k]);
    }
}

void bf16_gemm(const void * packed, int64_t M, int64_t K, const void * act, size_t act_stride, int64_t N,
               float * dst, int64_t dst_stride, int64_t row_begin, int64_t row_end) {
    const int path = current();
#ifdef BF16_AMX
    if (path == BF16_PATH_AMX) {
        gemm_amx((const uint16_t *) packed, M, K, act, act_stride, N, dst, dst_stride, row_begin, row_end);
        return;
    }
#endif
#ifdef BF16_X86
    if (N > kVerifyColumns && (path == BF16_PATH_AVX512_BF16 || path == BF16_PATH_AVX512 || path == BF16_PATH_AVX2)) {
        // Named, a path runs its own prompt kernel; by default, the faster of the two AVX-512 ones.
        const bool dot = prompt_dot_is_faster();
        const Prompt kind = path == BF16_PATH_AVX2                          ? Prompt::Avx2
                            : path == BF16_PATH_AVX512_BF16 || (dot && !forced()) ? Prompt::Bf16Dot
                                                                            : Prompt::Avx512;
        const int64_t whole_end = std::min(row_end, M / kTile * kTile);  // a last short tile: the loop below
        if (whole_end > row_begin) {
            gemm_prompt(kind, (const uint16_t *) packed, K, act, act_stride, N, dst, dst_stride, row_begin, whole_end);
        }
        row_begin = std::max(row_begin, whole_end);
    }
#endif
    const int step = path == BF16_PATH_AVX512 || path == BF16_PATH_AVX512_BF16 ? 8 : 4;
    thread_local std::vector<uint16_t> wide;
    thread_local std::vector<Column>   all;  // AVX2 takes every column at once
    if (path == BF16_PATH_AVX2) {
        all.resize(N);
        for (int64_t j = 0; j < N; ++j) all[j] = column(act, act_stride, j, K);
    }
    Column cols[8];
    float  out[8][kTile];
    for (int64_t t0 = row_begin; t0 < row_end; t0 += kTile) {
        const int        R    = (int) std::min<int64_t>(kTile, M - t0);
        const uint16_t * tile = (const uint16_t *) packed + t0 * K;
        if (R < kTile && path != BF16_PATH_SCALAR) {
            widen_tile(tile, R, K, wide);
            tile = wide.data();
        }
#ifdef BF16_X86
        if (path == BF16_PATH_AVX2) {
            const bool   more = t0 + kTile < row_end;
            const char * next = more ? (const char *) ((const uint16_t *) packed + (t0 + kTile) * K) : nullptr;
            tile_avx2(tile, next, K, all.data(), N, dst + t0, dst_stride, R);
            continue;
        }
#endif
        for (int64_t j0 = 0; j0 < N; j0 += step) {
            const int nc = (int) std::min<int64_t>(step, N - j0);
            for (int j = 0; j < nc; ++j) cols[j] = column(act, act_stride, j0 + j, K);
            switch (path) {
#ifdef BF16_X86
                case BF16_PATH_AVX512_BF16: (N <= kAlone ? kAvx512Bf16Alone : kAvx512Bf16)[nc - 1](tile, K, cols, out); break;
                case BF16_PATH_AVX512: (N <= kAlone ? kAvx512Alone : kAvx512)[nc - 1](tile, K, cols, out); break;
#endif
#ifdef BF16_NEON
                case BF16_PATH_NEON: kNeon[nc - 1](tile, K, cols, out); break;
#endif
                default: tile_scalar(tile, R, K, cols, nc, out); break;
            }
            for (int j = 0; j < nc; ++j) std::memcpy(dst + (j0 + j) * dst_stride + t0, out[j], R * sizeof(float));
        }
    }
}


void bf16_gemm_rows(const uint16_t * rows, int64_t M, int64_t K, const void * act, size_t act_stride, int64_t N,
                    float * dst, int64_t dst_stride, int64_t row_begin, int64_t row_end) {
    row_end = std::min(row_end, M);
    const int path = current();
    if (N > kRowsColumns || path == BF16_PATH_AMX) {
        // Prompts and AMX take the packed kernels (their bits are the packed layout's): each thread packs a
        // tile (AMX) or about 1 MB of tiles (a prompt, so that its activation panels are packed once for
        // many tiles) into a buffer of its own before using it.
        const int64_t group = N > 16 ? std::max<int64_t>(1, (int64_t(1) << 19) / (kTile * K)) * kTile : kTile;
        thread_local std::vector<uint16_t> scratch;
        if ((int64_t) scratch.size() < group * K) scratch.resize(group * K);
        for (int64_t r0 = row_begin; r0 < row_end; r0 += group) {
            const int64_t    R    = std::min(group, row_end - r0);
            const uint16_t * next = r0 + R < row_end ? rows + (r0 + R) * K : nullptr;
            pack_rows(rows + r0 * K, scratch.data(), R, K, next);
            bf16_gemm(scratch.data(), R, K, act, act_stride, N, dst + r0, dst_stride, 0, R);
        }
        return;
    }
    Column cols[kRowsColumns];
    for (int64_t j = 0; j < N; ++j) cols[j] = column(act, act_stride, j, K);
#ifdef BF16_X86
    if ((path == BF16_PATH_AVX512 || path == BF16_PATH_AVX512_BF16) && N > 1 && N * K * 2 > kChunkFrom) {
        rows_in_chunks(path == BF16_PATH_AVX512 ? kChunkAvx512.data() : kChunkAvx512Bf16.data(), rows, K, cols, N, dst,
                       dst_stride, row_begin, row_end);
        return;
    }
    if (path == BF16_PATH_AVX512 || path == BF16_PATH_AVX512_BF16 || path == BF16_PATH_AVX2) {
        const RowFn * table = path == BF16_PATH_AVX512 ? kRowAvx512.data() : path == BF16_PATH_AVX2 ? kRowAvx2.data() : kRowAvx512Bf16.data();
        const int     most  = path == BF16_PATH_AVX2 ? (int) kRowAvx2.size() : (int) kRowAvx512.size();
        for (int64_t r = row_begin; r < row_end; ++r) {
            for (int64_t j0 = 0; j0 < N; j0 += most) {
                const int nc = (int) std::min<int64_t>(most, N - j0);
                table[nc - 1](rows + r * K, K, cols + j0, dst + j0 * dst_stride + r, dst_stride);
            }
        }
        return;
    }
#endif
    for (int64_t r = row_begin; r < row_end; ++r) rows_scalar(rows + r * K, K, cols, (int) N, dst + r, dst_stride);
}

}  // extern "C"
