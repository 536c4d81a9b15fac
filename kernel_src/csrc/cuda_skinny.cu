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

#include "skinny_common.cuh"

namespace fp4 {
namespace {

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

    for_each_tile<TM>(p, smem, nkb, run);
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
    for_each_tile<TM>(p, smem, nkb, run);
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
