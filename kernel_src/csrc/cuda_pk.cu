// Fused W4A16 GEMM on prepacked NVFP4 weights (layout: pk_layout.h), for skinny (decode) shapes.
//
// out[m, n] = alpha * sum_k a[m, k] * B[n, k], a bf16 / fp16 [T, K], B the NVFP4 weight [N, K]
// prepared once by fp4_kernels.prepack_fp4_weight. W4A4 with a prepacked weight runs this kernel
// after an exact dequantization of the (small) FP4 activations to bf16 (_gemm.py).
//
// Every weight byte is read once, straight into the registers of the one thread that uses it:
// a warp owns one 16-row tile and a range of 128-k units; per unit and lane two 16-byte loads
// bring the A fragments of 8 mma k-steps and one 4-byte load the 4 E4M3 scales they need, and
// the next unit's loads are issued before the current unit is decoded (no shared memory, no
// barrier in the k loop). The activations (B fragments: tokens = mma columns) are read through
// L1 as 16-byte loads of 8 consecutive k, which is what the k order of the layout was chosen
// for. Decode per 8 codes: pk_decode (4 shifts, 4 LOP3) and 4 HMUL2 by the block scale
// (* 2^119 in bf16, * 2^7 in fp16; the HMUL2 reads the row's scale straight from the scale-pair
// register, .H0_H0 / .H1_H1), then mma.sync.m16n8k16 with fp32 accumulation; the power of two
// is undone with alpha on the fp32 sum (one rounding, as documented).
//
// A CTA (8 warps) covers RT row tiles x 8 / RT k-groups of warps; the k range may be split
// further over a thread-block cluster of `split` CTAs. Partial sums meet in shared memory and,
// across the cluster, through distributed shared memory, added in a fixed order
// (deterministic, no workspace, one launch).
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
#include "pk_decode.cuh"
#include "pk_layout.h"

namespace fp4 {
namespace {

namespace cg = cooperative_groups;

constexpr int kPkThreads = 256;
constexpr int kABf16Pk = 1, kAF16Pk = 2;  // a_kind codes (fp4_api.h)
// Launch (pk_set_launch; kPkAuto = the rule below). pdl: 0 plain launch, 1 programmatic dependent
// launch triggering the next grid at the start, 2 after the k loop; prefetch: bytes of each warp's
// weight range asked into L2 when its CTA starts. The rule, from the A/Bs on an H100
// (bench/results/2026-12-06-h100-issue28/p1, p2; bench/NOTES.md, "Issue 28: launch overlap"):
// - a small weight (at most a quarter of L2) and 8-token tiles: prefetch the whole range and pdl 2
//   (2048x7168 M = 1 7.7 -> 5.9 us, 7168x2048 6.6 -> 4.9; alone the prefetch 7.3 and 6.0). On the
//   28-34 MiB weights the prefetch made every call 15-30% slower, at 16 tokens it did nothing.
// - pdl 2 where the grid fills >= 80% of the resident CTA slots (8192^2 M = 1 15.9 -> 15.3,
//   14336x4096 (85%) 14.8 -> 14.5, H200 13.3 -> 12.8; 4096x14336 M = 32 39.5 -> 38.2). Where it
//   leaves slots free the next grid's CTAs land in the slots that free first, unevenly, and the call
//   gets slower: 4096x14336 M = 1 (48% of the slots) 15.2 -> 16.2, 8192^2 M = 16 (65%) 24.5 -> 33.0.
//   pdl 1 was never better than 2. pk_plan counts the ~1 us it hides at 8-token tiles, so
//   4096x14336 M = 1 takes a K split of 2 (97% of the slots): 14.2 -> 12.4 us on the H200 (p4).
constexpr int kPkAuto = -1;

struct PkArgs {
    const uint8_t* w;  // [Nt][U][1152]
    const void* a;     // [T][lda] bf16 / fp16
    int64_t lda;
    const float* alpha;
    float alpha_val;
    void* out;  // [T][N]
    int out_dt;
    int64_t T, N, K;
    int U, Nt;
    int lrt;    // log2(row tiles per CTA)
    int split;  // CTAs per cluster along K
    float fix;  // power of two undoing the decode scaling
    int pdl;    // launched as a programmatic dependent (griddepcontrol.wait before the activations),
                // triggering the next grid 1 at the start, 2 after the k loop; 0 a plain launch
    int pf;     // bytes of each warp's weight range prefetched into L2 at the start (0 none)
};

__device__ __forceinline__ uint4 ldg_stream128(const void* p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}
__device__ __forceinline__ uint32_t ldg_stream32(const void* p) {
    uint32_t v;
    asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ uint4 ldg_act128(const void* p) {
    uint4 v;
    asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

template <bool BF16>
__device__ __forceinline__ void pk_mma(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                       uint32_t b0, uint32_t b1) {
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

// Resident CTAs per SM the kernel is compiled for (registers per thread: 64 / 80 for 8 tokens,
// 80 / 128 for 16, 128 for 32; no spills). More tokens run as several 32-token tiles.
constexpr int pk_min_blocks(int mt, int un) {
    return mt == 1 ? (un == 1 ? 4 : 3) : mt == 2 ? (un == 1 ? 3 : 2) : 2;
}

// KF: every unit lies inside K (K = 128 U), so no activation load needs a k bound.
template <int AK, int MT, int UN, bool KF>
__global__ void __launch_bounds__(kPkThreads, pk_min_blocks(MT, UN))
    pk_kernel(const __grid_constant__ PkArgs p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    __trap();
#else
    constexpr bool BF16 = AK == kABf16Pk;
    constexpr int TM = 8 * MT;
    constexpr int PER = TM * 16;  // floats of one row tile's partial sums
    extern __shared__ __align__(16) float red[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int lkg = 3 - p.lrt, KG = 1 << lkg;
    const int kg = warp & (KG - 1), rtl = warp >> lkg;
    const int rt = (int)blockIdx.y * (1 << p.lrt) + rtl;
    const int cu0 = (int)((int64_t)p.U * blockIdx.x / p.split);
    const int cu1 = (int)((int64_t)p.U * (blockIdx.x + 1) / p.split);
    const int u0 = cu0 + (cu1 - cu0) * kg / KG;
    const int u1 = cu0 + (cu1 - cu0) * (kg + 1) / KG;
    const int64_t tok0 = (int64_t)blockIdx.z * TM;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // A warp's weight range (units u0 .. u1 of row tile rt) is contiguous: one bulk L2 prefetch
    // (cp.async.bulk.prefetch.L2, PTX ISA; sm_90) asks for its first pf bytes at once, so DRAM is
    // busy from the first instruction. A prefetch only fills L2, which every SM's writes reach
    // first: it cannot make a load see stale data, so it may precede griddepcontrol.wait even
    // when the grid before this one writes the weight (a weight update, a prepack).
    if (p.pf > 0 && lane == 0 && rt < p.Nt && u1 > u0) {
        const int64_t all = (int64_t)(u1 - u0) * kPkUnitBytes;
        const uint32_t bytes = (uint32_t)min(all, (int64_t)p.pf / kPkUnitBytes * kPkUnitBytes);
        if (bytes)
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;"
                         :: "l"(p.w + ((int64_t)rt * p.U + u0) * kPkUnitBytes), "r"(bytes) : "memory");
    }
    // Programmatic dependent launch (CUDA Programming Guide, "Programmatic Dependent Launch"): the
    // next grid (launched with the attribute) may start once every CTA of this one got here; this
    // grid reads the activations and writes its output only after the grid before it completed.
    if (p.pdl) {
        if (p.pdl == 1) asm volatile("griddepcontrol.launch_dependents;");
        asm volatile("griddepcontrol.wait;" ::: "memory");
    }
#endif
    float acc[MT][4];
#pragma unroll
    for (int nt = 0; nt < MT; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[nt][c] = 0.0f;

    if (rt < p.Nt && u1 > u0) {
        // Running pointers: this lane's code piece and scale word of the current unit, and the
        // activations (token tok0 + 8 nt + g, k = kb + 32 t ...) of the current unit.
        const uint8_t* wp = p.w + ((int64_t)rt * p.U + u0) * kPkUnitBytes + lane * 16;
        const uint8_t* sp = p.w + ((int64_t)rt * p.U + u0) * kPkUnitBytes + kPkCodeBytes + lane * 4;
        // A token past T reads the last token's row instead: an mma's output column depends on
        // its own B column only, and those columns are never stored, so no load needs a token
        // predicate (nor a zero fill). Loads past K (the last unit when K < 128 U) read zeros.
        const int64_t tl = p.T - 1, r0 = min(tok0 + g, tl);
        const uint16_t* ap = static_cast<const uint16_t*>(p.a) + r0 * p.lda + (int64_t)u0 * kPkUnitK + 32 * t;
        int64_t aoff[MT];  // row of token tok0 + 8 nt + g (clamped) relative to ap's
#pragma unroll
        for (int nt = 0; nt < MT; ++nt) aoff[nt] = (min(tok0 + 8 * nt + g, tl) - r0) * p.lda;
        int kleft = (int)(p.K - (int64_t)u0 * kPkUnitK) - 32 * t;  // valid k of this lane in the unit
        auto load_act = [&](int nt, int i) -> uint4 {
            if (KF || 8 * i < kleft) return ldg_act128(ap + aoff[nt] + 8 * i);
            return make_uint4(0u, 0u, 0u, 0u);
        };
        // One unit (8 k-steps of 16 k for this warp's 16 rows) from its codes and scale word.
        auto unit = [&](const uint4& c0, const uint4& c1, uint32_t sw) {
            uint4 av[MT <= 2 ? MT : 1][4];
            if constexpr (MT <= 2) {
#pragma unroll
                for (int nt = 0; nt < MT; ++nt)
#pragma unroll
                    for (int i = 0; i < 4; ++i) av[nt][i] = load_act(nt, i);
            }
            const uint32_t sc0 = pk_scale_pair<BF16>(sw), sc1 = pk_scale_pair<BF16>(sw >> 16);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                uint4 avc[MT > 2 ? MT : 1];
                if constexpr (MT > 2) {
#pragma unroll
                    for (int nt = 0; nt < MT; ++nt) avc[nt] = load_act(nt, i);
                }
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int s = 2 * i + h;
                    const uint4& cw = s < 4 ? c0 : c1;
                    const uint32_t w = (s & 3) == 0 ? cw.x : (s & 3) == 1 ? cw.y : (s & 3) == 2 ? cw.z : cw.w;
                    uint32_t r[4];
                    pk_decode(w, r);
                    if constexpr (!BF16) {
#pragma unroll
                        for (int j = 0; j < 4; ++j) r[j] = pk_to_f16(r[j]);
                    }
                    const uint32_t sc = s < 4 ? sc0 : sc1;
                    const uint32_t A0 = pk_mul<BF16, false>(r[0], sc), A1 = pk_mul<BF16, true>(r[1], sc);
                    const uint32_t A2 = pk_mul<BF16, false>(r[2], sc), A3 = pk_mul<BF16, true>(r[3], sc);
#pragma unroll
                    for (int nt = 0; nt < MT; ++nt) {
                        uint4 v;
                        if constexpr (MT <= 2) v = av[nt][i];
                        else v = avc[nt];
                        pk_mma<BF16>(acc[nt], A0, A1, A2, A3, h ? v.z : v.x, h ? v.w : v.y);
                    }
                }
            }
            ap += kPkUnitK;
            kleft -= kPkUnitK;
        };
        struct Buf {
            uint4 c[UN][2];
            uint32_t s[UN];
        };
        // loads units u .. u + UN - 1 (those below u1) at wp / sp, then advances them
        auto load = [&](Buf& b, int u) {
#pragma unroll
            for (int j = 0; j < UN; ++j) {
                if (u + j < u1) {
                    b.c[j][0] = ldg_stream128(wp + j * kPkUnitBytes);
                    b.c[j][1] = ldg_stream128(wp + j * kPkUnitBytes + 512);
                    b.s[j] = ldg_stream32(sp + j * kPkUnitBytes);
                }
            }
            wp += UN * kPkUnitBytes;
            sp += UN * kPkUnitBytes;
        };
        auto compute = [&](const Buf& b, int u) {
#pragma unroll
            for (int j = 0; j < UN; ++j)
                if (u + j < u1) unit(b.c[j][0], b.c[j][1], b.s[j]);
        };
        Buf b0{}, b1{};
        load(b0, u0);
        for (int u = u0;;) {  // double buffer: the next UN units are in flight while these decode
            if (u + UN < u1) load(b1, u + UN);
            compute(b0, u);
            u += UN;
            if (u >= u1) break;
            if (u + UN < u1) load(b0, u + UN);
            compute(b1, u);
            u += UN;
            if (u >= u1) break;
        }
    }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (p.pdl == 2) asm volatile("griddepcontrol.launch_dependents;");
#endif
    // ---- epilogue: red[warp][token][row] -> sum over the CTA's k-groups, then the cluster
    {
        float* mine = red + warp * PER;
#pragma unroll
        for (int nt = 0; nt < MT; ++nt) {
            const int tok = nt * 8 + 2 * t;
            mine[tok * 16 + g] = acc[nt][0];
            mine[(tok + 1) * 16 + g] = acc[nt][1];
            mine[tok * 16 + g + 8] = acc[nt][2];
            mine[(tok + 1) * 16 + g + 8] = acc[nt][3];
        }
    }
    __syncthreads();
    const int RT = 1 << p.lrt, tot = RT * PER;
    if (KG > 1) {  // into the slot of k-group 0, in k-group order
        for (int i = tid; i < tot; i += kPkThreads) {
            const int rl = i / PER, e = i - rl * PER;
            float* b = red + rl * KG * PER + e;
            float v = b[0];
            for (int k = 1; k < KG; ++k) v += b[k * PER];
            b[0] = v;
        }
        __syncthreads();
    }
    const float al = __fmul_rn(p.alpha ? *p.alpha : p.alpha_val, p.fix);
    auto slot = [&](int i) {
        const int rl = i / PER;
        return rl * KG * PER + (i - rl * PER);
    };
    auto put = [&](int i, float v) {
        const int rl = i / PER, e = i - rl * PER;
        const int64_t n = ((int64_t)blockIdx.y * RT + rl) * 16 + (e & 15);
        const int64_t m = tok0 + (e >> 4);
        if (m < p.T && n < p.N) pk_store(p.out, p.out_dt, m * p.N + n, __fmul_rn(v, al));
    };
#if __CUDA_ARCH__ >= 900
    if (p.split > 1) {
        cg::cluster_group cluster = cg::this_cluster();
        cluster.sync();
        const int S = p.split, rank = (int)cluster.block_rank();
        const int per = (tot + S - 1) / S, lo = rank * per, hi = min(tot, lo + per);
        for (int i = lo + tid; i < hi; i += kPkThreads) {
            const int o = slot(i);
            float v = 0.0f;
            for (int s = 0; s < S; ++s) v += cluster.map_shared_rank(red, s)[o];
            put(i, v);
        }
        cluster.sync();  // keep this CTA's shared memory alive until the others have read it
        return;
    }
#endif
    for (int i = tid; i < tot; i += kPkThreads) put(i, red[slot(i)]);
#endif
}

// Prepacked weight -> dense [N, K] bf16 / fp16 values e2m1 * scale (global scale 1, exact: at
// most 6 significant bits, magnitudes in [2^-10, 2688]), for the dequantize + cuBLAS path of
// large M. One warp per unit: lane (g, t) decodes k = 32 t .. 32 t + 31 of rows g and g + 8 into
// the warp's 16 x 128 tile in shared memory (rows padded to 272 bytes), then every store
// instruction writes two whole 256-byte rows (16 lanes x 16 bytes each): full sectors only.
constexpr int kPkDeqRow = 272;  // bytes per staged row (256 + 16: spreads the rows over the banks)

template <bool BF16OUT>
__global__ void __launch_bounds__(256) pk_dequant_kernel(const uint8_t* __restrict__ w, void* __restrict__ out,
                                                         int64_t N, int64_t K, int U, int Nt) {
    __shared__ __align__(16) uint8_t tile[8][16 * kPkDeqRow];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int64_t unit = (int64_t)blockIdx.x * 8 + warp;
    if (unit >= (int64_t)Nt * U) return;  // warp-uniform; no block-wide barrier below
    const int rt = (int)(unit / U), u = (int)(unit - (int64_t)rt * U);
    const uint8_t* q = w + unit * kPkUnitBytes;
    const uint4 c0 = ldg_stream128(q + lane * 16), c1 = ldg_stream128(q + 512 + lane * 16);
    const uint32_t sw = ldg_stream32(q + kPkCodeBytes + lane * 4);
    const uint32_t sc0 = pk_scale_pair<true>(sw), sc1 = pk_scale_pair<true>(sw >> 16);
    uint8_t* my = tile[warp];
#pragma unroll
    for (int s = 0; s < 8; ++s) {
        const uint4& cw = s < 4 ? c0 : c1;
        const uint32_t wd = (s & 3) == 0 ? cw.x : (s & 3) == 1 ? cw.y : (s & 3) == 2 ? cw.z : cw.w;
        uint32_t r[4];
        pk_decode(wd, r);
        const uint32_t sc = s < 4 ? sc0 : sc1;
        const uint32_t A[4] = {pk_mul<true, false>(r[0], sc), pk_mul<true, true>(r[1], sc),
                               pk_mul<true, false>(r[2], sc), pk_mul<true, true>(r[3], sc)};
#pragma unroll
        for (int h8 = 0; h8 < 2; ++h8) {  // row g: A0 (k0, k1), A2 (k2, k3); row g + 8: A1, A3
            uint32_t o[2];
#pragma unroll
            for (int pr = 0; pr < 2; ++pr) {
                const uint32_t x = A[h8 + 2 * pr];
                const float lo = __uint_as_float(x << 16) * 128.0f, hi = __uint_as_float(x & 0xFFFF0000u) * 128.0f;
                if constexpr (BF16OUT) {
                    const __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);  // exact
                    o[pr] = *reinterpret_cast<const uint32_t*>(&b);
                } else {
                    const __half2 b = __floats2half2_rn(lo, hi);  // exact
                    o[pr] = *reinterpret_cast<const uint32_t*>(&b);
                }
            }
            *reinterpret_cast<uint2*>(my + (g + 8 * h8) * kPkDeqRow + 64 * t + 8 * s) = make_uint2(o[0], o[1]);
        }
    }
    __syncwarp();
    const int64_t kb = (int64_t)u * kPkUnitK + 8 * (lane & 15);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int rl = 2 * j + (lane >> 4);
        const int64_t row = (int64_t)rt * 16 + rl;
        const uint4 v = *reinterpret_cast<const uint4*>(my + rl * kPkDeqRow + 16 * (lane & 15));
        if (row < N && kb < K) *reinterpret_cast<uint4*>(static_cast<uint16_t*>(out) + row * K + kb) = v;
    }
}

// ---- host side --------------------------------------------------------------------------------
struct PkDev {
    int sms = 0, cc = 0, l2 = 0;  // SMs, compute capability, L2 bytes
};

PkDev pk_dev(int device) {
    static std::mutex mu;
    static std::unordered_map<int, PkDev> cache;
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(device);
    if (it != cache.end()) return it->second;
    PkDev d;
    cuda_check(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, device), "sm count");
    cuda_check(cudaDeviceGetAttribute(&d.l2, cudaDevAttrL2CacheSize, device), "L2 size");
    d.cc = device_cc(device);
    cache[device] = d;
    return d;
}

template <int AK, int MT, int UN, bool KF>
const void* pk_ptr() { return reinterpret_cast<const void*>(&pk_kernel<AK, MT, UN, KF>); }

template <int AK, bool KF>
const void* pk_kernel_for_kind(int mt, int un) {
    // two units per load only for the 8- and 16-token tiles (registers)
    switch (mt) {
        case 1: return un == 1 ? pk_ptr<AK, 1, 1, KF>() : pk_ptr<AK, 1, 2, KF>();
        case 2: return un == 1 ? pk_ptr<AK, 2, 1, KF>() : pk_ptr<AK, 2, 2, KF>();
        default: return pk_ptr<AK, 4, 1, KF>();
    }
}

// kfull: K = 128 U (no unit reaches past K)
const void* pk_kernel_for(int akind, int mt, int un, bool kfull) {
    if (akind == kABf16Pk)
        return kfull ? pk_kernel_for_kind<kABf16Pk, true>(mt, un) : pk_kernel_for_kind<kABf16Pk, false>(mt, un);
    return kfull ? pk_kernel_for_kind<kAF16Pk, true>(mt, un) : pk_kernel_for_kind<kAF16Pk, false>(mt, un);
}

int pk_smem(int mt) { return 8 * (8 * mt) * 16 * 4; }

int pk_resident(const void* func, int device, int smem) {
    static std::mutex mu;
    static std::unordered_map<const void*, std::unordered_map<int64_t, int>> cache;
    std::lock_guard<std::mutex> lock(mu);
    const int64_t key = (int64_t)device << 32 | (uint32_t)smem;
    auto& m = cache[func];
    auto it = m.find(key);
    if (it != m.end()) return it->second;
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, func, kPkThreads, smem) != cudaSuccess) {
        cudaGetLastError();
        n = 1;
    }
    m[key] = n > 0 ? n : 1;
    return m[key];
}

}  // namespace

// Launch of the prepacked kernel on compute capability >= 9.0, process-wide (benchmarks switch them
// to measure them): programmatic dependent launch, and the bytes of each warp's weight range
// prefetched into L2 when a CTA starts (0 none).
static int g_pk_pdl = kPkAuto, g_pk_pf = kPkAuto;
void pk_set_launch(int pdl, int prefetch) {
    if (pdl < -1 || pdl > 2) throw std::invalid_argument("prepacked GEMM: pdl must be -1 (default), 0, 1 or 2");
    if (prefetch < -1) throw std::invalid_argument("prepacked GEMM: prefetch must be -1 (default) or bytes >= 0");
    g_pk_pdl = pdl;
    g_pk_pf = prefetch;
}

// Launch plan. Token tile 8 / 16 / 32 by M (more tokens: several 32-token tiles, grid z). For each RT (row tiles per CTA; 8 / RT warps
// split the CTA's k range), cluster split along K (1..8) and units per load (1 or 2), the time is
// estimated as waves * (F + bytes on the busiest SM / (B * e)) + S (split > 1): B = 30 GB/s of
// weight bytes per SM (4 TB/s over 132 SMs), e = min(1, resident warps / 16) for 8-token tiles
// (latency: the loads of one warp cover ~1 KB in flight) and 1 for larger tiles (bound by L1,
// which serves the activations), F = 1.5 us per CTA (first loads, reduction), S = 0.7 us (cluster
// barrier and the DSMEM reduction). bench/NOTES.md ("v8" .. "v10") has the sweeps behind it.
PkPlan pk_plan(const PkProblem& pr, int device) {
    const PkDev d = pk_dev(device);
    PkPlan best;
    best.mt = pr.t <= 8 ? 1 : pr.t <= 16 ? 2 : 4;
    const int64_t tz = (pr.t + 8 * best.mt - 1) / (8 * best.mt);
    const int smem = pk_smem(best.mt);
    double best_cost = 0.0;
    bool found = false;
    // a small weight at 8-token tiles: prefetched whole and launched programmatically (kPkAuto)
    const bool small = best.mt == 1 && (int64_t)pr.nt * pr.u * kPkUnitBytes <= d.l2 / 4;
    for (int un = 1; un <= 2; ++un) {
        if (pr.un > 0 && un != pr.un) continue;
        if (pr.un == 0 && un != 1) continue;  // default: one unit per load (sweep: bench/NOTES.md)
        if (un == 2 && best.mt > 2) continue;  // not instantiated
        const void* func = pk_kernel_for(pr.a_kind, best.mt, un, pr.k == (int64_t)pr.u * kPkUnitK);
        const int occ = pk_resident(func, device, smem);
        const int64_t slots = (int64_t)d.sms * occ;
        for (int rt = 1; rt <= 8; rt *= 2) {
            if (pr.rt > 0 && rt != pr.rt) continue;
            const int kgs = 8 / rt;
            for (int split = 1; split <= (d.cc >= 90 ? 8 : 1); ++split) {
                if (pr.split > 0 && split != pr.split) continue;
                if (pr.split == 0 && (int64_t)split * kgs > std::max<int64_t>(pr.u, 1) && split > 1) continue;
                const int64_t ctas = (pr.nt + rt - 1) / rt * split * tz;
                const int64_t waves = (ctas + slots - 1) / slots;
                const int64_t on_sm = std::min<int64_t>(occ, (std::min(ctas, slots) + d.sms - 1) / d.sms);
                // 8 tokens: latency-bound below 16 resident warps; more tokens: bound by L1, which
                // serves the activations (bench/NOTES.md, "v8" / "v9" sweeps)
                const double eff = best.mt > 1 ? 1.0 : std::min(1.0, (double)on_sm * 8.0 / 16.0);
                const double units_cta = std::ceil((double)pr.u / split);
                const double bytes = (double)rt * units_cta * kPkUnitBytes;
                // programmatic dependent launch where the grid fills >= 80% of the CTA slots (or the
                // weight is small); at 8-token tiles it hides ~1 us of the call's ramp (kPkAuto)
                const bool pdl = d.cc >= 90 && (small || 10 * ctas >= 8 * slots);
                const double t = (double)waves * (1.5e-6 + (double)on_sm * bytes / (30e9 * eff)) +
                                 (split > 1 ? 0.7e-6 : 0.0) - (pdl && best.mt == 1 ? 1.0e-6 : 0.0);
                const double cost = t + 1e-10 * split + 1e-11 * rt;  // ties: fewer splits, fewer rows
                if (!found || cost < best_cost) {
                    found = true;
                    best_cost = cost;
                    best.rt = rt;
                    best.split = split;
                    best.un = un;
                    best.pdl = pdl;
                    best.prefetch = d.cc >= 90 && small;
                }
            }
        }
    }
    if (!found)
        throw std::runtime_error("fp4_kernels: prepacked GEMM: no launch configuration (rt " +
                                 std::to_string(pr.rt) + ", split " + std::to_string(pr.split) +
                                 ", un " + std::to_string(pr.un) + "; rt 1, 2, 4 or 8, split 1..8, un 1 or 2)");
    return best;
}

namespace {
struct PkKey {
    int64_t t, n, k;
    int a_kind, rt, split, un, device;
    bool operator==(const PkKey& o) const {
        return t == o.t && n == o.n && k == o.k && a_kind == o.a_kind && rt == o.rt && split == o.split &&
               un == o.un && device == o.device;
    }
};
struct PkKeyHash {
    size_t operator()(const PkKey& p) const {
        size_t h = std::hash<int64_t>()(p.t) * 1000003u ^ std::hash<int64_t>()(p.n) * 10007u ^
                   std::hash<int64_t>()(p.k);
        h ^= (size_t)((((p.a_kind * 16 + p.rt) * 16 + p.split) * 4 + p.un) * 64 + p.device) * 2654435761u;
        return h;
    }
};

PkPlan pk_cached_plan(const PkProblem& pr, int device) {
    static std::mutex mu;
    static std::unordered_map<PkKey, PkPlan, PkKeyHash> cache;
    const PkKey key{pr.t, pr.n, pr.k, pr.a_kind, pr.rt, pr.split, pr.un, device};
    {
        std::lock_guard<std::mutex> lock(mu);
        auto it = cache.find(key);
        if (it != cache.end()) return it->second;
    }
    const PkPlan pl = pk_plan(pr, device);
    std::lock_guard<std::mutex> lock(mu);
    if (cache.size() > 4096) cache.clear();
    cache[key] = pl;
    return pl;
}
}  // namespace

void cuda_pk_mm(const PkProblem& pr, int device, uintptr_t stream) {
    DeviceGuard guard(device);
    const PkDev d = pk_dev(device);
    if (d.cc < 80)
        throw std::runtime_error("fp4_kernels: the prepacked FP4 GEMM needs compute capability >= 8.0");
    if (pr.a_kind != kABf16Pk && pr.a_kind != kAF16Pk)
        throw std::runtime_error("fp4_kernels: prepacked GEMM: activations must be bf16 or fp16");
    if (pr.n <= 0 || pr.t <= 0) return;
    if (pr.k <= 0 || pr.u <= 0 || pr.nt <= 0 || (int64_t)pr.u * kPkUnitK < pr.k || (int64_t)pr.nt * 16 < pr.n ||
        pr.lda < pr.k || pr.lda % 8)
        throw std::runtime_error("fp4_kernels: prepacked GEMM: inconsistent shapes");
    const PkPlan pl = pk_cached_plan(pr, device);
    PkArgs a{};
    a.w = pr.w;
    a.a = pr.a;
    a.lda = pr.lda;
    a.alpha = pr.alpha;
    a.alpha_val = pr.alpha_value;
    a.out = pr.out;
    a.out_dt = (int)pr.out_dt;
    a.T = pr.t;
    a.N = pr.n;
    a.K = pr.k;
    a.U = pr.u;
    a.Nt = pr.nt;
    a.lrt = pl.rt == 1 ? 0 : pl.rt == 2 ? 1 : pl.rt == 4 ? 2 : 3;
    a.split = pl.split;
    a.fix = 128.0f;
    a.pdl = d.cc < 90 ? 0 : g_pk_pdl != kPkAuto ? g_pk_pdl : pl.pdl ? 2 : 0;
    a.pf = d.cc < 90 ? 0 : g_pk_pf != kPkAuto ? g_pk_pf : pl.prefetch ? (1 << 30) : 0;
    const int64_t tz = (pr.t + 8 * pl.mt - 1) / (8 * pl.mt);
    const int64_t gy = (pr.nt + pl.rt - 1) / pl.rt;
    if (gy > 65535 || tz > 65535)
        throw std::runtime_error("fp4_kernels: prepacked GEMM: N or M too large for one launch");
    const void* func = pk_kernel_for(pr.a_kind, pl.mt, pl.un, pr.k == (int64_t)pr.u * kPkUnitK);
    cudaLaunchConfig_t cfg{};
    cudaLaunchAttribute attr[2];
    cfg.blockDim = dim3(kPkThreads);
    cfg.gridDim = dim3((unsigned)pl.split, (unsigned)gy, (unsigned)tz);
    cfg.dynamicSmemBytes = (size_t)pk_smem(pl.mt);
    cfg.stream = reinterpret_cast<cudaStream_t>(stream);
    cfg.attrs = attr;
    cfg.numAttrs = 0;
    if (pl.split > 1) {
        attr[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
        attr[cfg.numAttrs].val.clusterDim.x = (unsigned)pl.split;
        attr[cfg.numAttrs].val.clusterDim.y = 1;
        attr[cfg.numAttrs].val.clusterDim.z = 1;
        ++cfg.numAttrs;
    }
    if (a.pdl) {
        attr[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[cfg.numAttrs].val.programmaticStreamSerializationAllowed = 1;
        ++cfg.numAttrs;
    }
    void* args[] = {&a};
    const cudaError_t e = cudaLaunchKernelExC(&cfg, func, args);
    if (e != cudaSuccess) {
        cudaGetLastError();
        throw std::runtime_error(std::string("fp4_kernels: prepacked FP4 GEMM launch: ") + cudaGetErrorName(e) +
                                 ": " + cudaGetErrorString(e) + " (this build holds SASS for: " FP4_CUDA_ARCHS ")");
    }
    launch_check("prepacked FP4 GEMM kernel", device);
}

void cuda_pk_dequant(const uint8_t* w, void* out, int64_t n, int64_t k, int nt, int u, DType out_dt,
                     int device, uintptr_t stream) {
    DeviceGuard guard(device);
    if (n <= 0 || k <= 0) return;
    if (out_dt == DType::F32 || (int64_t)u * kPkUnitK < k || (int64_t)nt * 16 < n || k % 16)
        throw std::runtime_error("fp4_kernels: prepacked dequantize: bf16 / fp16 output and consistent shapes");
    const int64_t units = (int64_t)nt * u;
    const dim3 grid((unsigned)((units + 7) / 8));
    auto st = reinterpret_cast<cudaStream_t>(stream);
    if (out_dt == DType::BF16) pk_dequant_kernel<true><<<grid, 256, 0, st>>>(w, out, n, k, u, nt);
    else pk_dequant_kernel<false><<<grid, 256, 0, st>>>(w, out, n, k, u, nt);
    launch_check("prepacked dequantize kernel", device);
}

}  // namespace fp4
