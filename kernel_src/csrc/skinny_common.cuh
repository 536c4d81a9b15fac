// Device-side building blocks of the fused skinny / grouped FP4 GEMM (cuda_skinny.cu): the
// launch arguments, the register-level E2M1 decode, the mma wrappers, the cp.async k-loop and
// the reduction epilogue. Included by cuda_skinny.cu only (one translation unit).
#pragma once
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "fp4_api.h"
#include "nvfp4_math.h"

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

// Runs `run(tile)` for this CTA's tile (non-grouped: from blockIdx; grouped: every tile of the
// persistent loop). One call site, so the kernel body is instantiated once.
template <int TM, class Run>
__device__ __forceinline__ void for_each_tile(const SkArgs& p, uint8_t* smem, int nkb, Run&& run) {
    const bool grouped = p.offsets != nullptr;
    int* prefix = reinterpret_cast<int*>(smem + p.prefix_off);
    int total = 1, tile = blockIdx.x;
    if (grouped) {
        build_prefix(p, TM, prefix);
        total = prefix[p.E];
    }
    for (; tile < total || !grouped; tile += gridDim.x) {
        Tile tl;
        if (grouped) {
            tl = grouped_tile(p, prefix, tile, TM, nkb);
        } else {
            tl.e = 0;
            tl.tok0 = (int64_t)blockIdx.z * TM;
            tl.mval = (int)(p.T - tl.tok0 < TM ? p.T - tl.tok0 : (int64_t)TM);
            tl.row0 = (int64_t)blockIdx.y * (256 >> p.lkw);
            tl.kb0 = (int)((int64_t)blockIdx.x * nkb / p.split);
            tl.kb1 = (int)((int64_t)(blockIdx.x + 1) * nkb / p.split);
        }
        run(tl);
        if (!grouped) break;
    }
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

}  // namespace
}  // namespace fp4
