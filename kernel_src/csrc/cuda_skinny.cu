// Fused NVFP4 GEMM for skinny shapes (decode, small batches) and its grouped (MoE) form.
//
// out[m, n] = alpha * sum_k A[m, k] * B[n, k] where B (the weights, [N, K]) is NVFP4 (packed
// E2M1 + one E4M3 scale per 16 elements, no global scale) and A (the activations, [T, K]) is
// NVFP4 as well (W4A4) or bf16 / fp16 (W4A16). Nothing is dequantized to memory: the packed
// bytes are streamed into shared memory with cp.async (3 stages), each warp turns its FP4
// fragments into fp16 / bf16 registers and multiplies them with mma.sync.m16n8k16 (fp32
// accumulation).
//
// Layout of the work: a CTA (8 warps) owns R = 256 / KW weight rows and a tile of TM = 8 * MT
// tokens; its warps are KW groups along K (each takes one 128-element chunk of every k-block of
// 128 * KW elements) times 8 / KW groups of 32 rows. The weights are the mma's A operand (16 rows
// per tile, 2 tiles per warp), the tokens its B operand (8 per tile), so that a single token
// still fills the tensor core's k dimension. For small N the K range is split over a thread-block
// cluster of up to 8 CTAs whose partial sums are added in a fixed order through distributed
// shared memory (deterministic, no workspace, one launch). The grouped form walks a persistent
// grid over (expert, token tile, row group) tiles, read from expert offsets in device memory.
//
// The k order inside a chunk is permuted (the dot product does not care, and A and B use the
// same permutation): thread t of a quad owns 32 consecutive elements, and the mma's register
// pair j of element word q holds elements (8q + j, 8q + j + 4), which is what the bit-level
// E2M1 decode produces cheaply. Decode (exact): the 3 magnitude bits of a code placed at the
// fp16 bits 9-11 (bf16: 6-8) and its sign at bit 15 give e2m1 * 2^-14 (bf16: * 2^-126, a
// subnormal for 0.5); multiplied by the block scale times 2^7 (bf16: 2^119) that is the exact
// value e2m1 * scale * 2^-7 (at most 6 significant bits, magnitudes in [2^-17, 21]). The
// power of two is undone on the fp32 result together with alpha (one rounding, as documented).
//
// SM120 (sm_120a / sm_121a) has a block-scaled FP4 tensor-core MMA (mma.sync ... kind::mxf4nvf4
// .block_scale.scale_vec::4X, m16n8k64, E4M3 scales applied by the hardware): W4A4 uses it there
// (skinny_omma_kernel) instead of decoding. bench/NOTES.md has the measurements.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "cuda_common.cuh"
#include "fp4_api.h"
#include "nvfp4_math.h"

#if defined(__CUDA_ARCH__) && (defined(__CUDA_ARCH_FEAT_SM120_ALL) || defined(__CUDA_ARCH_FEAT_SM121_ALL) || \
    (defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && (__CUDA_ARCH_FAMILY_SPECIFIC__ >= 1200) &&                     \
     (__CUDA_ARCH_FAMILY_SPECIFIC__ < 1300)))
#define FP4_HAS_OMMA 1
#else
#define FP4_HAS_OMMA 0
#endif

namespace fp4 {
namespace {

namespace cg = cooperative_groups;

constexpr int kSkThreads = 256;   // 8 warps
constexpr int kWR = 2;            // 16-row weight tiles per warp
constexpr int kMaxNS = 4;         // cp.async pipeline stages: 4, or 3 where shared memory is short
constexpr int kWqBytes = 16384;   // weight codes per stage: R rows x 64 * KW bytes (R * KW = 256)
constexpr int kWsBytes = 2048;    // weight scales per stage: R rows x 8 * KW bytes
constexpr int kAOff = kWqBytes + kWsBytes;

enum AKind : int { kAFp4 = 0, kABf16 = 1, kAF16 = 2 };

struct SkArgs {
    const uint8_t* bq;     // [E][N][K/2]
    const uint8_t* bs;     // [E][N][K/16]
    int64_t bq_es, bs_es;  // bytes per expert
    const void* a;         // [T][K/2] codes or [T][K] 16-bit
    const uint8_t* as;     // [T][K/16] (FP4 only)
    const float* alpha;    // alpha[e * alpha_stride]; null: alpha_val
    int alpha_stride;
    float alpha_val;
    const void* offsets;   // grouped: [E+1] int32 / int64 rows of a per expert; null otherwise
    int off64;
    void* out;             // element (row m of a, weight row n) at m * ld_tok + n
    int64_t ld_tok;
    int out_dt;            // DType
    int64_t T, N, K;
    int E;
    int lkw;               // log2(KW)
    int split;             // CTAs per cluster along K (non-grouped)
    int groups;            // row groups: ceil(N / R)
    int stage_bytes;
    int ns;                // pipeline stages (3 or 4)
    int x_off;             // FP4 activations decoded (fp16) here
    int prefix_off;        // grouped: int prefix[E + 1] here
    float fix;             // power of two undoing the decode scaling
};

// ---- small device helpers -----------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void cp16(uint32_t dst, const void* src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void cp8(uint32_t dst, const void* src, bool ok) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src),
                 "r"(ok ? 8 : 0));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

template <bool BF16>
__device__ __forceinline__ uint32_t hmul2(uint32_t a, uint32_t b) {
    uint32_t d;
    if constexpr (BF16) {
#if __CUDA_ARCH__ >= 900
        asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#else
        asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
#endif
    } else {
        asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    }
    return d;
}

// Two E4M3 scale bytes (low byte: the first block) -> for each, a register holding the scale
// times 2^7 (fp16) or 2^119 (bf16) in both halves. Exact; NaN stays NaN.
template <bool BF16>
__device__ __forceinline__ void scales2(uint32_t two, uint32_t& s0, uint32_t& s1) {
    uint32_t h;
#if __CUDA_ARCH__ >= 890
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"((unsigned short)(two & 0xFFFFu)));
#else
    {
        const __half2 v = __floats2half2_rn(e4m3_to_float((uint8_t)(two & 0xFFu)),
                                            e4m3_to_float((uint8_t)((two >> 8) & 0xFFu)));
        h = *reinterpret_cast<const uint32_t*>(&v);
    }
#endif
    if constexpr (BF16) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
        const __nv_bfloat162 b = __floats2bfloat162_rn(f.x * 0x1p119f, f.y * 0x1p119f);
        h = *reinterpret_cast<const uint32_t*>(&b);
    } else {
        h = hmul2<false>(h, 0x58005800u);  // * 128
    }
    s0 = __byte_perm(h, h, 0x1010);
    s1 = __byte_perm(h, h, 0x3232);
}

// Eight E2M1 codes (element i in nibble i) times one block scale -> four fp16x2 / bf16x2
// registers, register j = (element j, element j + 4), each e2m1 * scale * 2^-7 exactly.
template <bool BF16>
__device__ __forceinline__ void decode8(uint32_t w, uint32_t sc, uint32_t o[4]) {
    constexpr uint32_t P = BF16 ? 6 : 9;  // bit of the mantissa's top bit
    const uint32_t hi = w >> 8;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const uint32_t src = j < 2 ? w : hi;
        const int s = 4 * (j & 1);
        const uint32_t mag = src & (0x00070007u << s);
        const uint32_t sgn = src & (0x00080008u << s);
        o[j] = hmul2<BF16>(mag * (1u << (P - s)) + sgn * (1u << (12 - s)), sc);
    }
}

template <bool BF16>
__device__ __forceinline__ void mma16816(float c[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
    if constexpr (BF16) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    } else {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
}

// Swizzled 16-byte slot of the 16-bit activation rows (raw or decoded): slot s (8 elements)
// of token row `tok`. Makes the 4 x LDS.128 of a quarter warp (2 tokens x 4 threads) hit 8
// distinct bank groups.
__device__ __forceinline__ int aslot(int s, int tok) { return s ^ (((s >> 3) & 1) << 1) ^ (tok & 1); }
// Swizzled 16-byte slot of the weight-code rows (and FP4 activation rows): for KW >= 2 the row
// length is a multiple of 128 bytes, so odd rows flip bit 2.
__device__ __forceinline__ int wslot(int s, int row, int lkw) { return lkw ? s ^ ((row & 1) << 2) : s; }

__device__ __forceinline__ void store_out(void* out, int dt, int64_t off, float v) {
    if (dt == (int)DType::F32) reinterpret_cast<float*>(out)[off] = v;
    else if (dt == (int)DType::F16) reinterpret_cast<__half*>(out)[off] = __float2half_rn(v);
    else reinterpret_cast<__nv_bfloat16*>(out)[off] = __float2bfloat16_rn(v);
}

__device__ __forceinline__ int64_t load_off(const SkArgs& p, int i) {
    const int64_t v = p.off64 ? reinterpret_cast<const int64_t*>(p.offsets)[i]
                              : (int64_t)reinterpret_cast<const int32_t*>(p.offsets)[i];
    return v < 0 ? 0 : (v > p.T ? p.T : v);
}

// One tile: which expert, token rows and weight rows, and the range of k-blocks.
struct Tile {
    int e;
    int64_t tok0;  // first row of a / out
    int mval;      // valid tokens (<= TM)
    int64_t row0;  // first weight row
    int kb0, kb1;  // k-blocks [kb0, kb1)
};

// Grouped: prefix[e] = tiles before expert e (tiles(e) = ceil(M_e / TM) * groups), by warp 0.
__device__ void build_prefix(const SkArgs& p, int tm, int* prefix) {
    const int lane = threadIdx.x & 31;
    if (threadIdx.x < 32) {
        const int per = (p.E + 31) / 32, lo = min(p.E, lane * per), hi = min(p.E, lo + per);
        auto tiles = [&](int e) {
            const int64_t a = load_off(p, e), b = load_off(p, e + 1);
            const int64_t m = b > a ? b - a : 0;
            return (int)((m + tm - 1) / tm) * p.groups;
        };
        int local = 0;
        for (int e = lo; e < hi; ++e) local += tiles(e);
        int incl = local;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int v = __shfl_up_sync(0xFFFFFFFFu, incl, o);
            if (lane >= o) incl += v;
        }
        int run = incl - local;
        for (int e = lo; e < hi; ++e) {
            prefix[e] = run;
            run += tiles(e);
        }
        if (lane == 31) prefix[p.E] = incl;
    }
    __syncthreads();
}

__device__ __forceinline__ Tile grouped_tile(const SkArgs& p, const int* prefix, int tile, int tm,
                                             int nkb) {
    int lo = 0, hi = p.E - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (prefix[mid] <= tile) lo = mid; else hi = mid - 1;
    }
    const int local = tile - prefix[lo];
    const int tb = local / p.groups, gi = local - tb * p.groups;
    const int64_t a = load_off(p, lo), b = load_off(p, lo + 1);
    Tile tl;
    tl.e = lo;
    tl.tok0 = a + (int64_t)tb * tm;
    tl.mval = (int)(b - tl.tok0 < tm ? b - tl.tok0 : (int64_t)tm);
    tl.row0 = (int64_t)gi * (256 >> p.lkw);
    tl.kb0 = 0;
    tl.kb1 = nkb;
    return tl;
}

// The pipelined k loop of one tile, shared by the HMMA and OMMA kernels. `compute(buf)` consumes
// stage `buf`; for FP4 activations on the HMMA path `transform(buf)` first decodes them into X.
template <int AK, int TM, bool TRANSFORM, class Compute, class Transform>
__device__ __forceinline__ void k_loop(const SkArgs& p, const Tile& tl, uint8_t* smem,
                                       Compute&& compute, Transform&& transform) {
    const int tid = threadIdx.x, lkw = p.lkw, KW = 1 << lkw;
    const int64_t K = p.K, N = p.N;
    const uint8_t* wq = p.bq + (int64_t)tl.e * p.bq_es;
    const uint8_t* ws = p.bs + (int64_t)tl.e * p.bs_es;
    // Per-thread copy plan, fixed for the tile; each issued k-block advances the sources. The
    // k-blocks are issued in order, so pointers and chunk counters just step. Invalid pieces
    // (rows past N, tokens past the tile, k past K) are zero-filled (cp.async src-size 0).
    const int K32 = (int)(K / 32);  // 32-element chunks per row
    // Weight codes: pieces tid + 256 i (i < 4) = rows rl0 + i * (64 / KW), slot s: the smem
    // destinations are 4096 bytes apart and share the swizzle (the row steps are even).
    const int w_rl0 = tid >> (2 + lkw), w_s = tid & ((4 << lkw) - 1), w_rstep = 64 >> lkw;
    const uint32_t w_dst = w_rl0 * (64 << lkw) + wslot(w_s, w_rl0, lkw) * 16;
    const int64_t w_step = (int64_t)w_rstep * (K / 2);
    const uint8_t* w_src = wq + (tl.row0 + w_rl0) * (K / 2) + ((int64_t)tl.kb0 * (4 << lkw) + w_s) * 16;
    int w_chunk = tl.kb0 * (4 << lkw) + w_s;
    uint32_t w_rows = 0;  // bit i: the row of piece i exists
#pragma unroll
    for (int i = 0; i < 4; ++i) w_rows |= (uint32_t)(tl.row0 + w_rl0 + i * w_rstep < N) << i;
    // Weight scales: one 8-byte piece per thread (row tid / KW, 128-element chunk tid % KW).
    const int s_rl = tid >> lkw, s_c = tid & (KW - 1);
    const uint32_t s_dst = kWqBytes + s_rl * (8 << lkw) + s_c * 8;
    const uint8_t* s_src = ws + (tl.row0 + s_rl) * (K / 16) + ((int64_t)tl.kb0 * KW + s_c) * 8;
    int s_chunk = (tl.kb0 * KW + s_c) * 4;  // in 32-element units
    const bool s_row = tl.row0 + s_rl < N;
    // Activations.
    int a_n = 0, a_tok = 0, a_chunk = 0, a_cstep = 0;
    uint32_t a_dst = 0;
    const uint8_t* a_src = nullptr;
    int64_t a_step = 0, a_kstep = 0;
    const uint8_t* as_src = nullptr;
    uint32_t as_dst = 0;
    bool as_on = false, as_ok = false;
    int as_chunk = 0;
    if constexpr (AK == kAFp4) {
        // codes: TM * 4KW <= 256 pieces of 16 bytes; scales: TM * KW pieces of 8 bytes
        const int s = tid & ((4 << lkw) - 1);
        a_tok = tid >> (2 + lkw);
        a_n = tid < TM * (4 << lkw) ? 1 : 0;
        a_dst = kAOff + a_tok * (64 << lkw) + wslot(s, a_tok, lkw) * 16;
        a_src = static_cast<const uint8_t*>(p.a) + (tl.tok0 + a_tok) * (K / 2) +
                ((int64_t)tl.kb0 * (4 << lkw) + s) * 16;
        a_chunk = tl.kb0 * (4 << lkw) + s;
        a_cstep = 4 << lkw;
        a_kstep = 64 << lkw;
        const int st_tok = tid >> lkw, st_c = tid & (KW - 1);
        as_on = tid < TM * KW;
        as_ok = st_tok < tl.mval;
        as_dst = kAOff + TM * (64 << lkw) + st_tok * (8 << lkw) + st_c * 8;
        as_src = p.as + (tl.tok0 + st_tok) * (K / 16) + ((int64_t)tl.kb0 * KW + st_c) * 8;
        as_chunk = (tl.kb0 * KW + st_c) * 4;
    } else {
        // TM * 16KW <= 1024 pieces of 16 bytes (8 elements): tid + 256 i, tokens 16 / KW apart
        const int total = TM * (16 << lkw), s = tid & ((16 << lkw) - 1);
        a_n = total >= kSkThreads ? total / kSkThreads : (tid < total ? 1 : 0);
        a_tok = tid >> (4 + lkw);
        a_dst = kAOff + a_tok * (256 << lkw) + aslot(s, a_tok) * 16;
        a_src = static_cast<const uint8_t*>(p.a) + ((tl.tok0 + a_tok) * K + (int64_t)tl.kb0 * (128 << lkw) + s * 8) * 2;
        a_step = (int64_t)(16 >> lkw) * K * 2;
        a_chunk = (tl.kb0 * (128 << lkw) + s * 8) / 32;
        a_cstep = 4 << lkw;
        a_kstep = 256 << lkw;
    }
    auto issue = [&](int buf) {
        const uint32_t st = smem_addr(smem + buf * p.stage_bytes);
        const bool wk = w_chunk < K32;
#pragma unroll
        for (int i = 0; i < 4; ++i)
            cp16(st + w_dst + 4096 * i, w_src + i * w_step, wk && ((w_rows >> i) & 1));
        w_src += 64 << lkw;
        w_chunk += 4 << lkw;
        cp8(st + s_dst, s_src, s_row && s_chunk < K32);
        s_src += 8 << lkw;
        s_chunk += 4 << lkw;
        if constexpr (AK == kAFp4) {
            if (a_n) cp16(st + a_dst, a_src, a_tok < tl.mval && a_chunk < K32);
            if (as_on) cp8(st + as_dst, as_src, as_ok && as_chunk < K32);
            as_src += 8 << lkw;
            as_chunk += 4 << lkw;
        } else {
            const bool kok = a_chunk < K32;
            for (int i = 0; i < a_n; ++i)
                cp16(st + a_dst + 4096 * i, a_src + i * a_step, kok && a_tok + i * (16 >> lkw) < tl.mval);
        }
        a_src += a_kstep;
        a_chunk += a_cstep;
    };
    const int nk = tl.kb1 - tl.kb0, ns = p.ns;
    for (int s = 0; s < ns - 1; ++s) {
        if (s < nk) issue(s);
        cp_commit();
    }
    int buf = 0, nbuf = ns - 1;  // stage consumed now, stage refilled now
    if constexpr (TRANSFORM) {
        // FP4 activations are decoded one k-block ahead into a double buffer X[2], so one
        // barrier per k-block covers both "stage i + 1 landed" and "X[i & 1] complete".
        if (ns == 4) cp_wait<2>(); else cp_wait<1>();
        __syncthreads();
        if (nk > 0) transform(0, 0);
        for (int i = 0; i < nk; ++i) {
            if (ns == 4) cp_wait<1>(); else cp_wait<0>();  // stage i + 1 landed (own copies)
            __syncthreads();  // ... for every thread; X[i & 1] complete; compute(i - 1) done
            if (i + ns - 1 < nk) issue(nbuf);
            cp_commit();
            const int nb = buf + 1 == ns ? 0 : buf + 1;
            if (i + 1 < nk) transform(nb, (i + 1) & 1);
            compute(buf, i & 1);
            buf = nb;
            nbuf = nbuf + 1 == ns ? 0 : nbuf + 1;
        }
    } else {
        for (int i = 0; i < nk; ++i) {
            if (ns == 4) cp_wait<2>(); else cp_wait<1>();
            __syncthreads();  // stage i complete for every thread; compute(i - 1) done everywhere
            if (i + ns - 1 < nk) issue(nbuf);
            cp_commit();
            compute(buf, 0);
            buf = buf + 1 == ns ? 0 : buf + 1;
            nbuf = nbuf + 1 == ns ? 0 : nbuf + 1;
        }
    }
    cp_wait<0>();
    __syncthreads();
}

// Sum the KW k-groups' partials (in smem, [KW][TM][R] fp32), then across the cluster's CTAs,
// and write alpha * fix * sum (one rounding) to out.
template <int MT>
__device__ __forceinline__ void epilogue(const SkArgs& p, const Tile& tl, uint8_t* smem,
                                         float (&acc)[kWR][MT][4]) {
    constexpr int TM = 8 * MT;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int lkw = p.lkw, KW = 1 << lkw, R = 256 >> lkw;
    const int kwi = warp & (KW - 1), rw = warp >> lkw, g = lane >> 2, t = lane & 3;
    float* red = reinterpret_cast<float*>(smem);
    const int tot = TM * R;
#pragma unroll
    for (int r = 0; r < kWR; ++r)
#pragma unroll
        for (int nt = 0; nt < MT; ++nt) {
            const int rl = rw * 32 + r * 16 + g, tok = nt * 8 + 2 * t;
            float* b = red + kwi * tot;
            b[tok * R + rl] = acc[r][nt][0];
            b[(tok + 1) * R + rl] = acc[r][nt][1];
            b[tok * R + rl + 8] = acc[r][nt][2];
            b[(tok + 1) * R + rl + 8] = acc[r][nt][3];
        }
    __syncthreads();
    if (KW > 1) {
        for (int i = tid; i < tot; i += kSkThreads) {
            float v = red[i];
            for (int k = 1; k < KW; ++k) v += red[k * tot + i];
            red[i] = v;
        }
        __syncthreads();
    }
    const float al = __fmul_rn(p.alpha ? p.alpha[(int64_t)tl.e * p.alpha_stride] : p.alpha_val, p.fix);
    auto put = [&](int i, float v) {
        const int tok = i >> (8 - lkw), rl = i & (R - 1);
        const int64_t n = tl.row0 + rl;
        if (tok < tl.mval && n < p.N)
            store_out(p.out, p.out_dt, (tl.tok0 + tok) * p.ld_tok + n, __fmul_rn(v, al));
    };
#if __CUDA_ARCH__ >= 900
    if (p.split > 1) {
        cg::cluster_group cluster = cg::this_cluster();
        cluster.sync();
        const int S = p.split, rank = (int)cluster.block_rank();
        const int per = (tot + S - 1) / S, lo = rank * per, hi = min(tot, lo + per);
        for (int i = lo + tid; i < hi; i += kSkThreads) {
            float v = 0.0f;
            for (int s = 0; s < S; ++s) v += cluster.map_shared_rank(red, s)[i];
            put(i, v);
        }
        cluster.sync();  // keep this CTA's shared memory alive until the others have read it
        return;
    }
#endif
    for (int i = tid; i < tot; i += kSkThreads) put(i, red[i]);
    __syncthreads();  // the next tile (grouped) reuses the shared memory
}

// ---- the HMMA kernel (SM80+, used on SM90 / SM100 and for W4A16 everywhere) -----------------
template <int AK, int MT>
__global__ void __launch_bounds__(kSkThreads, (MT >= 4 ? 1 : MT == 2 ? 2 : 3))
    skinny_kernel(const __grid_constant__ SkArgs p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    __trap();
#else
    constexpr int TM = 8 * MT;
    constexpr bool BF16 = AK == kABf16;  // mma type (W4A4 decodes both operands to fp16)
    extern __shared__ __align__(128) uint8_t smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3, lkw = p.lkw, KW = 1 << lkw;
    const int kwi = warp & (KW - 1), rw = warp >> lkw;
    const int nkb = (int)((p.K + 128 * KW - 1) / (128 * KW));
    auto transform = [&](int buf, int xb) {  // FP4 activations of stage buf -> fp16 in X[xb]
        const uint8_t* st = smem + buf * p.stage_bytes + kAOff;
        uint8_t* X = smem + p.x_off + xb * (TM * (256 << lkw));
        for (int pc = tid; pc < TM * 4 * KW; pc += kSkThreads) {
            const int tok = pc >> (2 + lkw), c = pc & ((4 << lkw) - 1);
            const uint4 w = *reinterpret_cast<const uint4*>(st + tok * (64 << lkw) +
                                                            wslot(c, tok, lkw) * 16);
            const uint32_t sb = *reinterpret_cast<const uint16_t*>(st + TM * (64 << lkw) +
                                                                   tok * (8 << lkw) + c * 2);
            uint32_t s0, s1;
            scales2<false>(sb, s0, s1);
            const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                uint32_t o[4];
                decode8<false>(words[q], q < 2 ? s0 : s1, o);
                *reinterpret_cast<uint4*>(X + tok * (256 << lkw) + aslot(c * 4 + q, tok) * 16) =
                    make_uint4(o[0], o[1], o[2], o[3]);
            }
        }
    };

    float acc[kWR][MT][4];
    auto compute = [&](int buf, int xb) {
        const uint8_t* st = smem + buf * p.stage_bytes;
        const uint8_t* bsrc = AK == kAFp4 ? smem + p.x_off + xb * (TM * (256 << lkw)) : st + kAOff;
        uint4 wv[kWR][2];
        uint32_t sc[kWR][2][2];
#pragma unroll
        for (int r = 0; r < kWR; ++r)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int rl = rw * 32 + r * 16 + g + 8 * h;
                wv[r][h] = *reinterpret_cast<const uint4*>(st + rl * (64 << lkw) +
                                                           wslot(kwi * 4 + t, rl, lkw) * 16);
                const uint32_t sb = *reinterpret_cast<const uint16_t*>(
                    st + kWqBytes + rl * (8 << lkw) + kwi * 8 + 2 * t);
                scales2<BF16>(sb, sc[r][h][0], sc[r][h][1]);
            }
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            uint32_t A[kWR][2][4];
#pragma unroll
            for (int r = 0; r < kWR; ++r)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const uint32_t w = q == 0 ? wv[r][h].x : q == 1 ? wv[r][h].y : q == 2 ? wv[r][h].z
                                                                                       : wv[r][h].w;
                    decode8<BF16>(w, sc[r][h][q >> 1], A[r][h]);
                }
#pragma unroll
            for (int nt = 0; nt < MT; ++nt) {
                const int tok = nt * 8 + g;
                const uint4 bv = *reinterpret_cast<const uint4*>(
                    bsrc + tok * (256 << lkw) + aslot(kwi * 16 + 4 * t + q, tok) * 16);
                uint32_t B[4];
                if constexpr (AK == kAFp4) {
                    B[0] = bv.x; B[1] = bv.y; B[2] = bv.z; B[3] = bv.w;
                } else {  // natural order (e0 e1)(e2 e3)(e4 e5)(e6 e7) -> (e0 e4)(e1 e5)(e2 e6)(e3 e7)
                    B[0] = __byte_perm(bv.x, bv.z, 0x5410);
                    B[1] = __byte_perm(bv.x, bv.z, 0x7632);
                    B[2] = __byte_perm(bv.y, bv.w, 0x5410);
                    B[3] = __byte_perm(bv.y, bv.w, 0x7632);
                }
#pragma unroll
                for (int r = 0; r < kWR; ++r) {
                    mma16816<BF16>(acc[r][nt], A[r][0][0], A[r][1][0], A[r][0][1], A[r][1][1], B[0], B[1]);
                    mma16816<BF16>(acc[r][nt], A[r][0][2], A[r][1][2], A[r][0][3], A[r][1][3], B[2], B[3]);
                }
            }
        }
    };

    auto run = [&](const Tile& tl) {
#pragma unroll
        for (int r = 0; r < kWR; ++r)
#pragma unroll
            for (int nt = 0; nt < MT; ++nt)
#pragma unroll
                for (int c = 0; c < 4; ++c) acc[r][nt][c] = 0.0f;
        k_loop<AK, TM, AK == kAFp4>(p, tl, smem, compute, transform);
        epilogue<MT>(p, tl, smem, acc);
    };

    if (p.offsets == nullptr) {
        Tile tl;
        tl.e = 0;
        tl.tok0 = (int64_t)blockIdx.z * TM;
        tl.mval = (int)(p.T - tl.tok0 < TM ? p.T - tl.tok0 : (int64_t)TM);
        tl.row0 = (int64_t)blockIdx.y * (256 >> lkw);
        tl.kb0 = (int)((int64_t)blockIdx.x * nkb / p.split);
        tl.kb1 = (int)((int64_t)(blockIdx.x + 1) * nkb / p.split);
        run(tl);
    } else {
        int* prefix = reinterpret_cast<int*>(smem + p.prefix_off);
        build_prefix(p, TM, prefix);
        const int total = prefix[p.E];
        for (int tile = blockIdx.x; tile < total; tile += gridDim.x) run(grouped_tile(p, prefix, tile, TM, nkb));
    }
#endif
}

// ---- the SM120 kernel: block-scaled FP4 tensor-core MMA (W4A4) ---------------------------
#if FP4_HAS_OMMA
__device__ __forceinline__ void mma_omma(float c[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1, uint32_t sfa,
                                         uint32_t sfb) {
    asm("mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1."
        "f32.ue4m3 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3}, %10, {%11,%12}, %13, "
        "{%14,%15};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(sfa), "h"((uint16_t)0),
          "h"((uint16_t)0), "r"(sfb), "h"((uint16_t)0), "h"((uint16_t)0));
}

// The hardware scales are unsigned (UE4M3): a negative scale byte is applied as its magnitude
// and the signs of its block's elements are flipped instead (bit 3 of every nibble).
__device__ __forceinline__ uint32_t neg_mask(uint32_t scale_word, int block) {
    return ((scale_word >> (8 * block + 7)) & 1u) * 0x88888888u;
}
#endif

template <int MT>
__global__ void __launch_bounds__(kSkThreads, 2) skinny_omma_kernel(const __grid_constant__ SkArgs p) {
#if !FP4_HAS_OMMA
    __trap();
#else
    constexpr int TM = 8 * MT;
    extern __shared__ __align__(128) uint8_t smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3, lkw = p.lkw, KW = 1 << lkw;
    const int kwi = warp & (KW - 1), rw = warp >> lkw;
    const int nkb = (int)((p.K + 128 * KW - 1) / (128 * KW));
    float acc[kWR][MT][4];
    // Fragments of m16n8k64 (E2M1, PTX ISA "mma ... block_scale"): A reg 0 = row g, k 8t..8t+7
    // (8 nibbles), reg 1 = row g + 8, regs 2 / 3 the same at k + 32; B reg 0 = column g, k 8t..,
    // reg 1 at k + 32. Scales: the thread with t == 0 gives row g's four 16-element block scales,
    // t == 1 row g + 8's; every thread of a quad gives column g's. k is not permuted here.
    auto compute = [&](int buf, int) {
        const uint8_t* st = smem + buf * p.stage_bytes;
        const uint8_t* araw = st + kAOff;
#pragma unroll
        for (int step = 0; step < 2; ++step) {
            uint32_t A[kWR][4], SFA[kWR];
#pragma unroll
            for (int r = 0; r < kWR; ++r) {
                uint32_t sw[2];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int rl = rw * 32 + r * 16 + g + 8 * h;
                    const uint8_t* row = st + rl * (64 << lkw);
                    const int s0 = kwi * 4 + step * 2;
                    sw[h] = *reinterpret_cast<const uint32_t*>(st + kWqBytes + rl * (8 << lkw) + kwi * 8 + step * 4);
                    A[r][h] = *reinterpret_cast<const uint32_t*>(row + wslot(s0, rl, lkw) * 16 + 4 * t) ^
                              neg_mask(sw[h], t >> 1);
                    A[r][h + 2] = *reinterpret_cast<const uint32_t*>(row + wslot(s0 + 1, rl, lkw) * 16 + 4 * t) ^
                                  neg_mask(sw[h], 2 + (t >> 1));
                }
                SFA[r] = (t & 1 ? sw[1] : sw[0]) & 0x7F7F7F7Fu;
            }
#pragma unroll
            for (int nt = 0; nt < MT; ++nt) {
                const int tok = nt * 8 + g;
                const uint8_t* row = araw + tok * (64 << lkw);
                const int s0 = kwi * 4 + step * 2;
                const uint32_t sb = *reinterpret_cast<const uint32_t*>(araw + TM * (64 << lkw) +
                                                                      tok * (8 << lkw) + kwi * 8 + step * 4);
                const uint32_t b0 = *reinterpret_cast<const uint32_t*>(row + wslot(s0, tok, lkw) * 16 + 4 * t) ^
                                    neg_mask(sb, t >> 1);
                const uint32_t b1 = *reinterpret_cast<const uint32_t*>(row + wslot(s0 + 1, tok, lkw) * 16 + 4 * t) ^
                                    neg_mask(sb, 2 + (t >> 1));
#pragma unroll
                for (int r = 0; r < kWR; ++r)
                    mma_omma(acc[r][nt], A[r][0], A[r][1], A[r][2], A[r][3], b0, b1, SFA[r],
                             sb & 0x7F7F7F7Fu);
            }
        }
    };
    auto none = [](int, int) {};
    auto run = [&](const Tile& tl) {
#pragma unroll
        for (int r = 0; r < kWR; ++r)
#pragma unroll
            for (int nt = 0; nt < MT; ++nt)
#pragma unroll
                for (int c = 0; c < 4; ++c) acc[r][nt][c] = 0.0f;
        k_loop<kAFp4, TM, false>(p, tl, smem, compute, none);
        epilogue<MT>(p, tl, smem, acc);
    };
    if (p.offsets == nullptr) {
        Tile tl;
        tl.e = 0;
        tl.tok0 = (int64_t)blockIdx.z * TM;
        tl.mval = (int)(p.T - tl.tok0 < TM ? p.T - tl.tok0 : (int64_t)TM);
        tl.row0 = (int64_t)blockIdx.y * (256 >> lkw);
        tl.kb0 = (int)((int64_t)blockIdx.x * nkb / p.split);
        tl.kb1 = (int)((int64_t)(blockIdx.x + 1) * nkb / p.split);
        run(tl);
    } else {
        int* prefix = reinterpret_cast<int*>(smem + p.prefix_off);
        build_prefix(p, TM, prefix);
        const int total = prefix[p.E];
        for (int tile = blockIdx.x; tile < total; tile += gridDim.x) run(grouped_tile(p, prefix, tile, TM, nkb));
    }
#endif
}

// ---- host side ------------------------------------------------------------------------------
struct DevInfo {
    int sms = 0, cc = 0, max_smem = 0;
};

DevInfo dev_info(int device) {
    static std::mutex mu;
    static std::unordered_map<int, DevInfo> cache;
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(device);
    if (it != cache.end()) return it->second;
    DevInfo d;
    cuda_check(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, device), "sm count");
    d.cc = device_cc(device);
    cuda_check(cudaDeviceGetAttribute(&d.max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
               "max shared memory");
    cache[device] = d;
    return d;
}

// Raises the dynamic shared memory limit of `func` (once per function, device and size).
void allow_smem(const void* func, int device, int bytes) {
    static std::mutex mu;
    static std::unordered_map<const void*, std::unordered_map<int, int>> done;
    std::lock_guard<std::mutex> lock(mu);
    int& cur = done[func][device];
    if (cur >= bytes) return;
    cuda_check(cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
               "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
    cur = bytes;
}

int resident_ctas(const void* func, int device, int smem) {
    static std::mutex mu;
    static std::unordered_map<const void*, std::unordered_map<int64_t, int>> cache;
    std::lock_guard<std::mutex> lock(mu);
    const int64_t key = (int64_t)device << 32 | (uint32_t)smem;
    auto& m = cache[func];
    auto it = m.find(key);
    if (it != m.end()) return it->second;
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, func, kSkThreads, smem) != cudaSuccess) {
        cudaGetLastError();
        n = 1;
    }
    m[key] = n > 0 ? n : 1;
    return m[key];
}

template <int AK, int MT>
const void* pick_hmma() { return reinterpret_cast<const void*>(&skinny_kernel<AK, MT>); }
template <int MT>
const void* pick_omma() { return reinterpret_cast<const void*>(&skinny_omma_kernel<MT>); }

const void* kernel_for(int akind, int mt, bool omma) {
    if (omma) {
        switch (mt) {
            case 1: return pick_omma<1>();
            case 2: return pick_omma<2>();
            case 4: return pick_omma<4>();
            default: return pick_omma<8>();
        }
    }
#define FP4_SK_CASE(AKV)                          \
    switch (mt) {                                 \
        case 1: return pick_hmma<AKV, 1>();       \
        case 2: return pick_hmma<AKV, 2>();       \
        case 4: return pick_hmma<AKV, 4>();       \
        default: return pick_hmma<AKV, 8>();      \
    }
    if (akind == kAFp4) FP4_SK_CASE(kAFp4)
    if (akind == kABf16) FP4_SK_CASE(kABf16)
    FP4_SK_CASE(kAF16)
#undef FP4_SK_CASE
}

// Shared memory of one CTA for a plan (stages, decoded FP4 activations, reduction buffer, and
// the grouped prefix table).
int plan_smem(const SkinnyProblem& pr, const SkinnyPlan& pl, int* stage_bytes, int* x_off, int* prefix_off) {
    const int araw = pr.a_kind == kAFp4 ? pl.tm * 72 * pl.kw : pl.tm * 256 * pl.kw;
    const int stage = kAOff + araw;
    const int xbytes = (pr.a_kind == kAFp4 && !pl.omma) ? 2 * pl.tm * 256 * pl.kw : 0;
    int smem = std::max(pl.ns * stage + xbytes, pl.tm * 1024);
    smem = (smem + 15) / 16 * 16;
    if (stage_bytes) *stage_bytes = stage;
    if (x_off) *x_off = pl.ns * stage;
    if (prefix_off) *prefix_off = smem;
    if (pr.offsets != nullptr) smem += (pr.e + 1) * 4;
    return smem;
}

}  // namespace

// Launch configuration. The token tile is 8 / 16 / 32 / 64 rows by M (32-row tiles beat 64-row
// ones up to M = 64: bench/NOTES.md). For each number of K-warps per CTA (KW), pipeline depth
// (4 or 3 stages: whichever keeps more CTAs resident) and cluster split along K, a small cost
// model estimates the time, and the cheapest wins:
//   waves * (F + max(bytes per SM / (B * e), MACs per SM / C)) + S * (split - 1)
// with the CTAs spread over the SMs as the hardware does (ceil(CTAs / SMs) per SM, at most the
// resident count from the occupancy API), F = 6 us of fixed cost per CTA (pipeline fill, the
// reduction epilogue, launch), B = 30 GB/s of weight bytes (the activations come from L2)
// and C = 2.5e12 MAC/s per SM, e = 0.6 / 0.8 / 1 for
// 1 / 2 / 3+ resident CTAs per SM (warps to hide latency: the kernel is latency-bound, see
// bench/NOTES.md), S = 1.5 us per extra CTA of a cluster. Grouped (persistent) launches: every
// tile pays 2 us of fixed cost and the bytes of all tiles spread over the SMs. The constants are fitted to the launch-configuration sweep on an H200
// (bench/NOTES.md, "v2 plan"); what matters is that a second wave, or CTAs too small to pay
// their fixed cost, lose.
SkinnyPlan skinny_plan(const SkinnyProblem& pr, int device) {
    const DevInfo d = dev_info(device);
    const bool grouped = pr.offsets != nullptr;
    SkinnyPlan best;
    best.omma = pr.a_kind == kAFp4 && d.cc >= 120 && d.cc < 130 && !pr.no_omma;
    const int64_t hint = grouped ? (pr.t + std::max(pr.e, 1) - 1) / std::max(pr.e, 1) : pr.t;
    const int tm = pr.tm > 0 ? pr.tm : hint <= 8 ? 8 : hint <= 16 ? 16 : hint <= 64 ? 32 : 64;
    const int64_t nkb128 = std::max<int64_t>(1, (pr.k + 127) / 128);
    const int64_t tblocks = grouped ? 1 : (pr.t + tm - 1) / tm;
    const double act_b = pr.a_kind == kAFp4 ? 0.5625 : 2.0;  // activation bytes per element
    double best_cost = 0.0;
    bool found = false;
    for (int kw = 1; kw <= 8; kw *= 2) {
        if (pr.kw > 0 && kw != pr.kw) continue;
        if (tm * kw > 64 || (pr.kw == 0 && kw > nkb128 && kw > 1)) continue;
        const void* func = kernel_for(pr.a_kind, tm / 8, best.omma);
        for (int ns = kMaxNS; ns >= 3; --ns) {
            SkinnyPlan pl = best;
            pl.tm = tm;
            pl.kw = kw;
            pl.ns = ns;
            const int smem = plan_smem(pr, pl, nullptr, nullptr, nullptr);
            if (smem > d.max_smem) continue;
            allow_smem(func, device, smem);
            const int per_sm = resident_ctas(func, device, smem);
            const int64_t slots = (int64_t)d.sms * per_sm;
            const int64_t rows = 256 / kw;
            const int64_t groups = (pr.n + rows - 1) / rows;
            const int64_t nkb = (pr.k + 128 * kw - 1) / (128 * kw);
            const int max_split = grouped || d.cc < 90 ? 1 : (int)std::min<int64_t>(8, nkb);
            for (int split = 1; split <= max_split; ++split) {
                if (pr.split > 0 && split != pr.split) continue;
                double t;
                int64_t ctas;
                if (grouped) {  // persistent: every tile pays the fixed cost, work spreads over the SMs
                    const double tiles = (double)groups * ((double)pr.t / tm + std::max(pr.e, 1));
                    const double bytes = tiles * rows * (double)pr.k * 0.5625 + tiles * tm * (double)pr.k * act_b;
                    ctas = slots;
                    const double eff = per_sm >= 3 ? 1.0 : per_sm == 2 ? 0.8 : 0.6;  // warps per SM
                    t = 2e-6 * tiles / slots + bytes / d.sms / (30e9 * eff);
                } else {
                    ctas = groups * tblocks * split;
                    const int64_t waves = (ctas + slots - 1) / slots;
                    const int64_t on_sm = std::min<int64_t>(per_sm, (std::min(ctas, slots) + d.sms - 1) / d.sms);
                    const double eff = on_sm >= 3 ? 1.0 : on_sm == 2 ? 0.8 : 0.6;  // warps per SM
                    const double kc = (double)pr.k / split;  // K elements per CTA
                    const double bytes = (double)rows * kc * 0.5625;  // weights (activations: L2)
                    const double macs = (double)rows * kc * tm;
                    t = (double)waves * (6e-6 + std::max((double)on_sm * bytes / (30e9 * eff),
                                                         (double)on_sm * macs / 2.5e12)) +
                        1.5e-6 * (split - 1);
                }
                const double cost = t + 1e-9 * kw + 1e-10 * (kMaxNS - ns);  // ties: fewer K-warps, deeper
                if (!found || cost < best_cost) {
                    found = true;
                    best_cost = cost;
                    pl.split = split;
                    pl.groups = (int)groups;
                    pl.tblocks = tblocks;
                    pl.slots = slots;
                    best = pl;
                }
                (void)ctas;
            }
        }
    }
    if (!found)
        throw std::runtime_error("fp4_kernels: skinny GEMM: no launch configuration fits (tm " +
                                 std::to_string(tm) + ", kw " + std::to_string(pr.kw) + ", split " +
                                 std::to_string(pr.split) + "; kw must be 1, 2, 4 or 8 with tm * kw "
                                 "<= 64, split 1..8 and at most the k-blocks)");
    return best;
}

namespace {
// Plans by problem shape (the planner queries occupancy and loops over configurations; a call
// must cost about a microsecond of host time, so each shape is planned once).
struct PlanKey {
    int64_t t, n, k;
    int e, a_kind, tm, kw, split, device;
    bool grouped, no_omma;
    bool operator==(const PlanKey& o) const {
        return t == o.t && n == o.n && k == o.k && e == o.e && a_kind == o.a_kind && tm == o.tm &&
               kw == o.kw && split == o.split && device == o.device && grouped == o.grouped &&
               no_omma == o.no_omma;
    }
};
struct PlanKeyHash {
    size_t operator()(const PlanKey& p) const {
        size_t h = std::hash<int64_t>()(p.t) * 1000003u ^ std::hash<int64_t>()(p.n) * 10007u ^
                   std::hash<int64_t>()(p.k);
        h ^= (size_t)(((p.e * 31 + p.a_kind) * 131 + p.tm) * 17 + p.kw) * 2654435761u;
        h ^= (size_t)((p.split * 64 + p.device) * 4 + p.grouped * 2 + p.no_omma) * 40503u;
        return h;
    }
};

SkinnyPlan cached_plan(const SkinnyProblem& pr, int device) {
    static std::mutex mu;
    static std::unordered_map<PlanKey, SkinnyPlan, PlanKeyHash> cache;
    const PlanKey key{pr.t, pr.n, pr.k, pr.e, pr.a_kind, pr.tm, pr.kw, pr.split, device,
                      pr.offsets != nullptr, pr.no_omma};
    {
        std::lock_guard<std::mutex> lock(mu);
        auto it = cache.find(key);
        if (it != cache.end()) return it->second;
    }
    const SkinnyPlan pl = skinny_plan(pr, device);
    std::lock_guard<std::mutex> lock(mu);
    if (cache.size() > 4096) cache.clear();
    cache[key] = pl;
    return pl;
}
}  // namespace

void cuda_skinny_mm(const SkinnyProblem& pr, int device, uintptr_t stream) {
    DeviceGuard guard(device);
    const DevInfo d = dev_info(device);
    if (d.cc < 80)
        throw std::runtime_error("fp4_kernels: the fused FP4 GEMM needs compute capability >= 8.0");
    if (pr.k <= 0 || pr.k % 128)
        throw std::runtime_error("fp4_kernels: the fused FP4 GEMM needs K a positive multiple of 128");
    if (pr.n <= 0 || pr.t <= 0) return;
    const SkinnyPlan pl = cached_plan(pr, device);
    const bool grouped = pr.offsets != nullptr;
    const int mt = pl.tm / 8, lkw = pl.kw == 1 ? 0 : pl.kw == 2 ? 1 : pl.kw == 4 ? 2 : 3;

    SkArgs a{};
    a.bq = pr.b_q;
    a.bs = pr.b_scale;
    a.bq_es = pr.n * (pr.k / 2);
    a.bs_es = pr.n * (pr.k / 16);
    a.a = pr.a;
    a.as = pr.a_scale;
    a.alpha = pr.alpha;
    a.alpha_stride = grouped && pr.alpha_per_expert ? 1 : 0;
    a.alpha_val = pr.alpha_value;
    a.offsets = pr.offsets;
    a.off64 = pr.offsets_int64 ? 1 : 0;
    a.out = pr.out;
    a.ld_tok = pr.n;
    a.out_dt = (int)pr.out_dt;
    a.T = pr.t;
    a.N = pr.n;
    a.K = pr.k;
    a.E = grouped ? pr.e : 1;
    a.lkw = lkw;
    a.split = pl.split;
    a.groups = pl.groups;
    a.ns = pl.ns;
    const int smem = plan_smem(pr, pl, &a.stage_bytes, &a.x_off, &a.prefix_off);
    a.fix = pl.omma ? 1.0f : pr.a_kind == kAFp4 ? 16384.0f : 128.0f;
    if (smem > d.max_smem)
        throw std::runtime_error("fp4_kernels: skinny GEMM needs " + std::to_string(smem) +
                                 " bytes of shared memory; the device allows " +
                                 std::to_string(d.max_smem));

    const void* func = kernel_for(pr.a_kind, mt, pl.omma);
    allow_smem(func, device, smem);  // done by the planner already: a map lookup
    auto st = reinterpret_cast<cudaStream_t>(stream);
    cudaLaunchConfig_t cfg{};
    cudaLaunchAttribute attr[1];
    cfg.blockDim = dim3(kSkThreads);
    cfg.dynamicSmemBytes = (size_t)smem;
    cfg.stream = st;
    cfg.numAttrs = 0;
    if (grouped) {
        const int64_t bound = ((pr.t + pl.tm - 1) / pl.tm + pr.e) * (int64_t)pl.groups;
        cfg.gridDim = dim3((unsigned)std::max<int64_t>(1, std::min(bound, pl.slots)));
    } else {
        if (pl.groups > 65535 || pl.tblocks > 65535)
            throw std::runtime_error("fp4_kernels: skinny GEMM: N or M too large for one launch");
        cfg.gridDim = dim3((unsigned)pl.split, (unsigned)pl.groups, (unsigned)pl.tblocks);
        if (pl.split > 1) {
            attr[0].id = cudaLaunchAttributeClusterDimension;
            attr[0].val.clusterDim.x = (unsigned)pl.split;
            attr[0].val.clusterDim.y = 1;
            attr[0].val.clusterDim.z = 1;
            cfg.attrs = attr;
            cfg.numAttrs = 1;
        }
    }
    void* args[] = {&a};
    const cudaError_t e = cudaLaunchKernelExC(&cfg, func, args);
    if (e != cudaSuccess) {
        cudaGetLastError();
        throw std::runtime_error(std::string("fp4_kernels: skinny FP4 GEMM launch: ") +
                                 cudaGetErrorName(e) + ": " + cudaGetErrorString(e) +
                                 " (this build holds SASS for: " FP4_CUDA_ARCHS ")");
    }
    launch_check("skinny FP4 GEMM kernel", device);
}

}  // namespace fp4
