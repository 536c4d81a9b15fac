// W4A16 GEMM on prepacked NVFP4 weights with Hopper's warpgroup MMA (wgmma), sm_90a only.
//
// out[m, n] = alpha * sum_k a[m, k] * B[n, k], the same problem and the same prepacked weight
// (pk_layout.h) as cuda_pk.cu, for the batch sizes where mma.sync's rate and the per-warp
// activation reads bound that kernel (bench/NOTES.md, "Issue 28"). Swap-AB, as vLLM's Machete does
// on Hopper: the weight rows are wgmma's M (64 per CTA = 4 row tiles, one per consumer warp), the
// tokens its N (NT = 16 .. 256 per CTA; more tokens run as several token tiles, grid z).
//
//   A = the weight unit decoded in registers: the unit's fragment layout is mma.m16n8k16's A
//       layout, which is also wgmma's register-A layout per warp (PTX ISA, "Register fragment
//       for matrix A" of wgmma .m64nNk16), so the decode is cuda_pk.cu's, unchanged.
//   B = the activations in shared memory, K-major without swizzle: core matrices of 8 tokens x
//       16 bytes, LBO = 128 bytes between the two k-halves of a k-step, SBO = 256 bytes between
//       8-token groups. The pk layout permutes k inside a unit (lane t, step s holds k = 32 t +
//       4 s + 0..3), so a first small launch (wg_permute) writes the activations as the exact
//       shared-memory image of each unit; one cp.async.bulk then brings a unit's tile.
//
// A CTA is 4 consumer warps (one warpgroup; or two, 128 weight rows, sharing each activation
// stage) and 1 producer warp; two warpgroups on 256 tokens ("wide") make the producer a warpgroup
// of its own that hands its registers to the consumers (setmaxnreg). The producer's lane 0 brings,
// per 128-k unit, the activation tile and the 4 weight row tiles with cp.async.bulk into one of
// ST stages, all completing on the stage's "full" mbarrier (expect_tx); the consumers wait on it,
// decode unit k + 1 while unit k's 8 wgmma run (wait_group 1), and arrive on the stage's "empty"
// mbarrier. The k range may be split over a thread-block cluster of `split` CTAs; partial sums
// meet through distributed shared memory in a fixed order (deterministic, one launch, no
// workspace beyond the permuted activations).
#include <cooperative_groups.h>
#include <cuda.h>  // CUtensorMap and cuTensorMapEncodeTiled's declaration (called through the runtime's entry point)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "cuda_common.cuh"
#include "fp4_api.h"
#include "pk_decode.cuh"
#include "pk_layout.h"
#include "wgmma_ops.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FP4_WG_DEVICE 1
#else
#define FP4_WG_DEVICE 0
#endif

namespace fp4 {
namespace {

namespace cg = cooperative_groups;

constexpr int kWgRowTiles = 4;   // 16-row tiles per consumer warpgroup (wgmma M = 64)
constexpr int kWgW = kWgRowTiles * kPkUnitBytes;
// G consumer warpgroups (64 G weight rows per CTA, sharing each activation stage) + 1 producer warp
// A CTA of two warpgroups on 256 tokens ("wide") holds 128 accumulators a consumer thread, more than the
// 168 registers ptxas grants 288 threads (it counts whole warpgroups): its producer is a warpgroup
// of its own that gives registers back (setmaxnreg, PTX ISA; as CUTLASS's warp-specialized kernels)
__host__ __device__ constexpr bool wg_wide(int g, int nt) { return g > 1 && nt > 128; }
__host__ __device__ constexpr int wg_threads(int g, int nt) { return 128 * g + (wg_wide(g, nt) ? 128 : 32); }
// registers a thread of a wide CTA: consumers while their main loop runs, the producer warpgroup
// meanwhile (2 x 128 x 232 + 128 x 40 <= 64 Ki), and everyone before and after (384 x 168)
constexpr int kWgWideConsumerRegs = 232, kWgWideProducerRegs = 40, kWgWideRegs = 168;

#include "sm90_async.cuh"  // mbarrier, bulk copy and descriptor helpers (inside this namespace)

struct WgArgs {
    CUtensorMap wmap;   // the weight [Nt][U][1152 B] as a 3-D map (144 x 8 B, U, Nt): one box a stage
    int wtma;           // 1: a stage's weight row tiles come as one box of wmap, 0: one bulk copy each
    const uint8_t* w;   // [Nt][U][1152]
    const uint8_t* xp;  // permuted activations [tz][U][NT * 256 B]
    const float* alpha;
    float alpha_val;
    void* out;  // [T][N]
    int out_dt;
    int64_t T, N;
    int U, Nt;
    int split;  // CTAs along K (grid x)
    int lanes;  // producer lanes issuing a stage's bulk copies: 1 (lane 0 all) or 32 (one copy each)
    int mc;     // CTAs along N (grid y) in one cluster sharing each activation tile by multicast (1, 2, 4)
    int flow;   // benchmarks, same results: bit 0 a consumer gives a stage back as soon as its wgmma group
                // is done (wait_group 0), bit 1 the producer's lanes 0 (weights) and 31 (activations)
                // each wait for the stage and issue their copy (bench/NOTES.md, "the stage round trip")
    int diag;   // benchmarks only, results wrong: bit 0 no decode (A constant), bit 1 no loads (no copies, waits),
                // bit 2 no MMA (no wgmma issued: loads and decode alone)
    int chain;  // 1: the next call's permute (launched as a programmatic dependent) may launch once
                // every CTA of this grid started (wg_set_chain)
    int epi1;   // benchmarks, same results: 1 = the epilogue reads the partial sums one float at a time
                // (the epilogue before bench/NOTES.md, "Issue 28: the epilogue"), 0 = four at a time
    float* ws;  // reduce through global memory: [tz][gy][split][NT * 64] partial sums, else null
    int* sem;   // and [tz][gy] arrival counters, zero at launch (the last CTA resets its own)
};

template <int NT, int ST, int G, int UP>
struct WgSmem {  // a stage: UP activation tiles, then per row tile its UP units (one bulk copy each)
    static constexpr int kAct = NT * 256;
    static constexpr int kStage = UP * (kAct + G * kWgW);  // a multiple of 128
    static constexpr int kBytes = ST * kStage + 2 * ST * 8;
    static_assert(NT * 64 * G * 4 <= ST * kStage, "the epilogue's partial sums fit in the stages");
};


// Activations [T][lda] (bf16 / fp16 bits) -> the stage image of every (token tile, unit): step s,
// hardware k position p (0..15), token n at s * NT * 32 + (n / 8) * 256 + (p / 8) * 128 +
// (n % 8) * 16 + (p % 8) * 2, holding a[n][128 u + 32 t + 4 s + j] with t = (p % 8) / 2,
// j = (p & 1) | ((p / 8) << 1). Tokens >= T and k >= K are zeros. 16 consecutive threads read
// one token's 256 contiguous bytes of a unit.
__global__ void wg_permute(const uint16_t* __restrict__ x, int64_t lda, int64_t T, int64_t K, int U, int NT,
                           int64_t tz, uint8_t* __restrict__ xp) {
#if FP4_WG_DEVICE
    // the GEMM launched after this (programmatic dependent launch) may start now: it reads this
    // grid's output only after griddepcontrol.wait, which waits for this grid's completion
    asm volatile("griddepcontrol.launch_dependents;");
    // launched itself as a programmatic dependent (wg_set_chain): x may be the grid before's output,
    // and xp may be memory that grid still reads (stream-ordered reuse), so nothing is read or
    // written before that grid completed; launched without the attribute this returns at once
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    const int64_t total = tz * U * NT * 16;  // (z, u, n, s, khalf): 16 bytes each
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int kh = (int)(i & 1), s = (int)((i >> 1) & 7);
        const int64_t r = i >> 4;
        const int n = (int)(r % NT);
        const int64_t zu = r / NT;
        const int u = (int)(zu % U);
        const int64_t z = zu / U;
        const int64_t tok = z * NT + n;
        const int64_t k0 = (int64_t)u * kPkUnitK + 4 * s + 2 * kh;
        uint32_t v[4] = {0u, 0u, 0u, 0u};
        if (tok < T) {
            const uint16_t* row = x + tok * lda;
#pragma unroll
            for (int tt = 0; tt < 4; ++tt)
                if (k0 + 32 * tt < K) v[tt] = *reinterpret_cast<const uint32_t*>(row + k0 + 32 * tt);
        }
        uint8_t* dst = xp + (zu * NT * 256) + s * NT * 32 + (n >> 3) * 256 + kh * 128 + (n & 7) * 16;
        *reinterpret_cast<uint4*>(dst) = make_uint4(v[0], v[1], v[2], v[3]);
    }
}

template <bool BF16, int NT, int ST, int G, int UP>
__global__ void __launch_bounds__(wg_threads(G, NT), 1) wg_kernel(const __grid_constant__ WgArgs p) {
#if !FP4_WG_DEVICE
    __trap();
#else
    constexpr int NACC = NT <= 16 ? 4 : NT <= 32 ? 2 : 1;  // independent chains: small wgmma are latency-bound
    using S = WgSmem<NT, ST, G, UP>;
    constexpr int kThreads = wg_threads(G, NT), kRows = G * kWgRowTiles;  // row tiles per CTA
    constexpr bool kWide = wg_wide(G, NT);
    if (p.chain) asm volatile("griddepcontrol.launch_dependents;");
    extern __shared__ __align__(1024) uint8_t smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int rank = (int)blockIdx.x;
    const int u0 = (int)((int64_t)p.U * rank / p.split), u1 = (int)((int64_t)p.U * (rank + 1) / p.split);
    const int nu = u1 - u0;
    const int rt0 = (int)blockIdx.y * kRows;
    const int64_t z = blockIdx.z;
    const uint32_t sbase = smem_u32(smem);
    const uint32_t full0 = sbase + ST * S::kStage, empty0 = full0 + ST * 8;
    // Activation multicast: the mc CTAs of a cluster with the same k range (cluster ranks rank +
    // split j, j = 0 .. mc - 1) each bring 1/mc of a stage's activation tile into all mc CTAs'
    // shared memory, so a stage is free only once the consumers of all mc CTAs gave it back.
    const int mc = p.mc, my = (int)blockIdx.y % mc;
    uint16_t mc_mask = 0;
    for (int j = 0; j < mc; ++j) mc_mask |= (uint16_t)(1u << (rank + p.split * j));
    if (tid == 0) {
        for (int s = 0; s < ST; ++s) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, kRows * mc);  // the 4 G consumer warps of each sharing CTA
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (mc > 1) cluster_sync_all();  // every CTA's barriers exist before a peer's copy signals them
    float acc[NACC][NT / 2];
    auto zero_acc = [&]() {
#pragma unroll
        for (int c = 0; c < NACC; ++c)
#pragma unroll
            for (int i = 0; i < NT / 2; ++i) acc[c][i] = 0.f;
    };
    // a wide CTA's producer warpgroup holds no sums (its registers are given back)
    if constexpr (!kWide) zero_acc();
    float* red = reinterpret_cast<float*>(smem);  // [NT tokens][64 G rows]
    auto put_acc = [&]() {
        const int g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int j = 0; j < NT / 8; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i)
                red[(8 * j + 2 * t + (i & 1)) * (64 * G) + 16 * warp + g + (i >= 2 ? 8 : 0)] = acc[0][4 * j + i];
    };
    // setmaxnreg inside each role's branch: ptxas keeps it only where no path joins two register limits
    if (warp >= kRows) {  // the producer warp (a wide CTA: and its warpgroup's three idle warps)
        if constexpr (kWide) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kWgWideProducerRegs));
        if (warp == kRows) {  // producer: stage b holds units UP b .. UP b + UP - 1
            const int nrt = min(kRows, p.Nt - rt0);
            const uint8_t* xs = p.xp + (z * p.U + u0) * (int64_t)S::kAct;
            const uint8_t* ws = p.w + ((int64_t)rt0 * p.U + u0) * kPkUnitBytes;
            const int nb = (nu + UP - 1) / UP;
            // Programmatic dependent launch (CUDA Programming Guide, "Programmatic Dependent Launch"):
            // this grid may start while the activation permute still runs. The weights were written
            // before the permute started (stream order), so the first stages' weight copies go out at
            // once; the activation copies only after griddepcontrol.wait (the permute is complete and
            // its writes visible). Launched without the attribute, the wait returns at once.
            const bool solo = p.lanes <= 1;
            auto arm = [&](int b) {  // lane 0: the stage is free again, and how many bytes will land
                const int s = b % ST, n = min(UP, nu - b * UP);
                if (b >= ST) mbar_wait(empty0 + 8 * s, ((b / ST) - 1) & 1);
                // a tensor box always completes with its full size (UP units of kRows row tiles, the
                // units past the CTA's range and the row tiles past N included, the latter zero-filled)
                mbar_expect_tx(full0 + 8 * s, n * S::kAct + (p.wtma ? UP * kRows : n * nrt) * kPkUnitBytes);
            };
            auto copy_w = [&](int b) {  // the stage's weight row tiles: lane r (or lane 0 alone)
                const int s = b % ST, k0 = b * UP, n = min(UP, nu - k0);
                const uint32_t st = sbase + s * S::kStage + UP * S::kAct;
                if (p.wtma) {  // one copy: per SM the copy count, not the bytes, bounds the stage rate
                    if (lane == 0) tma_load_3d(st, &p.wmap, 0, u0 + k0, rt0, full0 + 8 * s);
                    return;
                }
                for (int r = solo ? 0 : lane; r < (solo ? nrt : min(lane + 1, nrt)); ++r)
                    bulk_g2s(st + r * UP * kPkUnitBytes, ws + ((int64_t)r * p.U + k0) * kPkUnitBytes, n * kPkUnitBytes,
                             full0 + 8 * s);
            };
            auto copy_x = [&](int b) {  // the stage's activation tile: lane 31 (or lane 0 alone)
                const int s = b % ST, k0 = b * UP, n = min(UP, nu - k0);
                if (mc == 1) {
                    bulk_g2s(sbase + s * S::kStage, xs + (int64_t)k0 * S::kAct, n * S::kAct, full0 + 8 * s);
                } else {  // this CTA's 1/mc of the tile (n * kAct is a multiple of 4096 bytes), to all
                    const uint32_t piece = (uint32_t)(n * S::kAct / mc);
                    bulk_g2s_mc(sbase + s * S::kStage + my * piece, xs + (int64_t)k0 * S::kAct + my * piece, piece,
                                full0 + 8 * s, mc_mask);
                }
            };
            const int xl = solo ? 0 : 31;  // the lane that copies activations
            if (p.diag & 2) {
                // nothing is loaded
            } else if (p.flow & 2) {
                // Split producer: lane 0 (weights) and lane 31 (activations) each wait for the stage to
                // be free and issue their own copy, no __syncwarp between them; lane 0 arrives with the
                // stage's byte count after its copy. A complete_tx before that expect_tx only takes the
                // tx-count below zero while lane 0's pending arrival keeps the phase open (PTX ISA,
                // "mbarrier": tx-count range +-(2^20 - 1)), so the stage still completes once, with every byte.
                if (lane == 0) {
                    for (int b = 0; b < nb; ++b) {
                        const int s = b % ST, k0 = b * UP, n = min(UP, nu - k0);
                        if (b >= ST) mbar_wait(empty0 + 8 * s, ((b / ST) - 1) & 1);
                        const uint32_t st = sbase + s * S::kStage + UP * S::kAct;
                        if (p.wtma) tma_load_3d(st, &p.wmap, 0, u0 + k0, rt0, full0 + 8 * s);
                        else
                            for (int r = 0; r < nrt; ++r)
                                bulk_g2s(st + r * UP * kPkUnitBytes, ws + ((int64_t)r * p.U + k0) * kPkUnitBytes,
                                         n * kPkUnitBytes, full0 + 8 * s);
                        mbar_expect_tx(full0 + 8 * s, n * S::kAct + (p.wtma ? UP * kRows : n * nrt) * kPkUnitBytes);
                    }
                } else if (lane == 31) {
                    asm volatile("griddepcontrol.wait;" ::: "memory");
                    for (int b = 0; b < nb; ++b) {
                        if (b >= ST) mbar_wait(empty0 + 8 * (b % ST), ((b / ST) - 1) & 1);
                        copy_x(b);
                    }
                }
            } else if (solo && lane != 0) {
                // the other lanes have nothing to do
            } else {
                const int pre = min(ST, nb);
                for (int b = 0; b < pre; ++b) {
                    if (lane == 0) arm(b);
                    if (!solo) __syncwarp();
                    copy_w(b);
                }
                asm volatile("griddepcontrol.wait;" ::: "memory");
                if (lane == xl)
                    for (int b = 0; b < pre; ++b) copy_x(b);
                for (int b = pre; b < nb; ++b) {
                    if (lane == 0) arm(b);
                    if (!solo) __syncwarp();
                    copy_w(b);
                    if (lane == xl) copy_x(b);
                }
            }
        }
        if constexpr (kWide) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kWgWideRegs));
    } else {  // consumers: warp wq owns row tile rt0 + wq
        if constexpr (kWide) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kWgWideConsumerRegs));
        const int wq = warp;
        if constexpr (kWide) zero_acc();
        uint32_t A0[8][4], A1[8][4];
        auto decode = [&](uint32_t(&A)[8][4], int k) {
            const int b = k / UP, s = b % ST;
            if (!(p.diag & 2)) mbar_wait(full0 + 8 * s, (b / ST) & 1);  // at once for a stage's later units
            if (p.diag & 1) {
#pragma unroll
                for (int q = 0; q < 8; ++q)
#pragma unroll
                    for (int j = 0; j < 4; ++j) A[q][j] = 0x3F803F80u + (uint32_t)k;
                return;
            }
            const uint8_t* wb = smem + s * S::kStage + UP * S::kAct + (wq * UP + k % UP) * kPkUnitBytes;
            const uint4 c0 = *reinterpret_cast<const uint4*>(wb + lane * 16);
            const uint4 c1 = *reinterpret_cast<const uint4*>(wb + 512 + lane * 16);
            const uint32_t sw = *reinterpret_cast<const uint32_t*>(wb + kPkCodeBytes + lane * 4);
            const uint32_t sc0 = pk_scale_pair<BF16>(sw), sc1 = pk_scale_pair<BF16>(sw >> 16);
#pragma unroll
            for (int q = 0; q < 8; ++q) {
                const uint4& cw = q < 4 ? c0 : c1;
                const uint32_t w = (q & 3) == 0 ? cw.x : (q & 3) == 1 ? cw.y : (q & 3) == 2 ? cw.z : cw.w;
                uint32_t r[4];
                pk_decode(w, r);
                if constexpr (!BF16) {
#pragma unroll
                    for (int j = 0; j < 4; ++j) r[j] = pk_to_f16(r[j]);
                }
                const uint32_t sc = q < 4 ? sc0 : sc1;
                A[q][0] = pk_mul<BF16, false>(r[0], sc);
                A[q][1] = pk_mul<BF16, true>(r[1], sc);
                A[q][2] = pk_mul<BF16, false>(r[2], sc);
                A[q][3] = pk_mul<BF16, true>(r[3], sc);
            }
        };
        auto mma = [&](uint32_t(&A)[8][4], int k) {
            // one descriptor per unit; step q's is q * NT * 32 bytes on, i.e. + q * NT * 2 in the
            // address field (bits 0-13 of address >> 4: no carry, shared memory is under 256 KiB)
            if (p.diag & 4) return;  // diag: loads (and decode) alone
            const uint64_t d0 = wg_desc(sbase + ((k / UP) % ST) * S::kStage + (k % UP) * S::kAct);
            const uint32_t lo = (uint32_t)d0, hi = (uint32_t)(d0 >> 32);
            asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
            for (int q = 0; q < 8; ++q)
                WgMma<NT, BF16>::run(acc[q % NACC], A[q][0], A[q][1], A[q][2], A[q][3],
                                     (uint64_t)hi << 32 | (lo + (uint32_t)(q * NT * 2)), 1);
            asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        };
        auto release = [&](int k) {  // after the stage's last unit
            if ((k % UP != UP - 1 && k != nu - 1) || (p.diag & 2)) return;
            __syncwarp();
            if (lane == 0) {
                const uint32_t bar = empty0 + 8 * ((k / UP) % ST);
                if (mc == 1) mbar_arrive(bar);
                else
                    for (int j = 0; j < mc; ++j) mbar_arrive_in(bar, (uint32_t)(rank + p.split * j));
            }
        };
        // unit k's wgmma group runs while unit k + 1 is decoded; group k - 1 is waited for before
        // the registers it read are overwritten, and its stage is given back. That release waits
        // for unit k + 1's bytes (decode's full-barrier wait comes first), so at most ST - 1 stages
        // are in flight. flow bit 0: wait for group k at once (wait_group 0) and give its stage back
        // before waiting for unit k + 1's; the decode of k + 1 then no longer overlaps group k.
        const bool early = p.flow & 1;
        auto retire = [&](int k) {  // unit k's group was just issued
            if (early) {
                asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
                release(k);
            } else {
                asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
                if (k >= 1) release(k - 1);
            }
        };
        if (nu > 0) decode(A0, 0);
        for (int k = 0; k < nu; k += 2) {
            mma(A0, k);
            retire(k);
            if (k + 1 >= nu) break;
            decode(A1, k + 1);
            mma(A1, k + 1);
            retire(k + 1);
            if (k + 2 < nu) decode(A0, k + 2);
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        if (nu > 0 && !early) release(nu - 1);
#pragma unroll
        for (int c = 1; c < NACC; ++c)
#pragma unroll
            for (int i = 0; i < NT / 2; ++i) acc[0][i] += acc[c][i];
        if constexpr (kWide) {  // the consumers alone (named barrier 1) put their sums down, then hand registers back
            asm volatile("bar.sync 1, %0;" ::"n"(128 * G) : "memory");
            put_acc();
            asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kWgWideRegs));
        }
    }
    // ---- epilogue: every stage is idle (the consumers waited for each one the producer filled)
    __syncthreads();
    if (!kWide && warp < kRows) put_acc();
    __syncthreads();
    const float al = __fmul_rn(p.alpha ? *p.alpha : p.alpha_val, 128.0f);  // undoes the decode's 2^-7
    constexpr int tot = NT * 64 * G;
    auto put = [&](int i, float v) {
        const int64_t n = (int64_t)rt0 * 16 + (i % (64 * G)), m = z * NT + (i / (64 * G));
        if (m < p.T && n < p.N) pk_store(p.out, p.out_dt, m * p.N + n, __fmul_rn(v, al));
    };
    if (p.split > 1 && p.ws) {
        // every CTA stores its partial tile; the last one to arrive adds them in rank order
        // (deterministic) and writes the output (CUDA Programming Guide, "Memory Fence Functions")
        const int64_t tile = z * gridDim.y + blockIdx.y;
        float* mine = p.ws + (tile * p.split + rank) * tot;
        for (int i = tid; i < tot; i += kThreads) mine[i] = red[i];
        __threadfence();
        __syncthreads();
        __shared__ int last;
        if (tid == 0) last = atomicAdd(p.sem + tile, 1) == p.split - 1;
        __syncthreads();
        if (!last) return;
        __threadfence();
        const float* all = p.ws + tile * p.split * tot;
        for (int i = tid; i < tot; i += kThreads) {
            float v = 0.0f;
            for (int s = 0; s < p.split; ++s) v += __ldcg(all + (int64_t)s * tot + i);
            put(i, v);
        }
        if (tid == 0) p.sem[tile] = 0;
        return;
    }
    if (p.split > 1) {
        cg::cluster_group cluster = cg::this_cluster();
        cluster.sync();
        if (p.epi1) {
            const int per = (tot + p.split - 1) / p.split, lo = rank * per, hi = min(tot, lo + per);
            for (int i = lo + tid; i < hi; i += kThreads) {
                float v = 0.0f;
                for (int s = 0; s < p.split; ++s) v += cluster.map_shared_rank(red, s + p.split * my)[i];
                put(i, v);
            }
        } else {
            // Four consecutive sums a thread: one 16-byte load from every rank's tile, all issued before
            // the adds, so a distributed-shared-memory load's latency is paid once an iteration, not
            // once a rank and element. Added in rank order from 0.0f, as one at a time: bit-identical.
            constexpr int kMaxSplit = 8;  // split x mc <= 8, the portable cluster size
            const float4* src[kMaxSplit];
#pragma unroll
            for (int s = 0; s < kMaxSplit; ++s)
                src[s] = reinterpret_cast<const float4*>(
                    cluster.map_shared_rank(red, min(s, p.split - 1) + p.split * my));
            constexpr int q = tot / 4;
            const int per = (q + p.split - 1) / p.split, lo = rank * per, hi = min(q, lo + per);
            for (int i = lo + tid; i < hi; i += kThreads) {
                float4 v[kMaxSplit];
#pragma unroll
                for (int s = 0; s < kMaxSplit; ++s)
                    if (s < p.split) v[s] = src[s][i];
                float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
                for (int s = 0; s < kMaxSplit; ++s)
                    if (s < p.split) {
                        a.x += v[s].x;
                        a.y += v[s].y;
                        a.z += v[s].z;
                        a.w += v[s].w;
                    }
                put(4 * i, a.x);
                put(4 * i + 1, a.y);
                put(4 * i + 2, a.z);
                put(4 * i + 3, a.w);
            }
        }
        cluster.sync();  // keep this CTA's shared memory alive until the others have read it
        return;
    }
    if (p.epi1) {
        for (int i = tid; i < tot; i += kThreads) put(i, red[i]);
    } else {
        const float4* r4 = reinterpret_cast<const float4*>(red);
        for (int i = tid; i < tot / 4; i += kThreads) {
            const float4 v = r4[i];
            put(4 * i, v.x);
            put(4 * i + 1, v.y);
            put(4 * i + 2, v.z);
            put(4 * i + 3, v.w);
        }
    }
    if (mc > 1) cluster_sync_all();  // no CTA leaves while a peer may still signal its barriers
#endif
}

// ---- host side --------------------------------------------------------------------------------
struct WgCfg {
    int nt, st, groups, units;
    const void* func;
    int smem;
    int threads() const { return wg_threads(groups, nt); }
};

template <bool BF16, int NT, int ST, int G, int UP>
WgCfg wg_cfg() {
    return {NT, ST, G, UP, reinterpret_cast<const void*>(&wg_kernel<BF16, NT, ST, G, UP>),
            WgSmem<NT, ST, G, UP>::kBytes};
}

// Token tile, stages, consumer warpgroups (G) and units per stage (UP) per M. G = 1, UP = 1:
// 6 stages for 16 and 32 tokens, 4 for 64 and 128, 3 for 256 (bench/NOTES.md, "Issue 28" sweeps:
// shared memory decides the occupancy, 2 CTAs per SM up to 64 tokens). G = 2 (128 weight rows
// per CTA sharing each activation stage): one CTA per SM, as many stages as fit in ~200 KiB.
// UP > 1: the same shared memory in fewer, larger stages (one bulk copy per row tile brings UP
// consecutive units). The default per tile: wg_default; FP4_WG_SWEEP builds every combination
// that fits (benchmarks: wg_set_tuning).
template <int NT, int G, int UP>
constexpr int wg_stages() {
    constexpr int one = NT * 256 + G * kWgW;
    // two warpgroups on 256 tokens: 3 stages of 73 KiB (the most that fit in 227 KiB)
    int st = G == 1 ? (NT <= 32 ? 6 : NT <= 128 ? 4 : 3) : NT > 128 ? 3 : (200 * 1024) / one;
    st = st > 12 ? 12 : st;
    st = st / UP;
    return st < 2 ? 2 : st;
}
template <int NT, int G, int UP>
constexpr bool wg_fits() {
    return wg_stages<NT, G, UP>() * (UP * (NT * 256 + G * kWgW) + 16) <= 227 * 1024 && G <= 2;
}
struct WgChoice {
    int groups, units;
};
// From the sweep (bench/results/2026-12-02-h200-issue28-wg/sweep2_tuning.txt): 4 units per stage for
// 16 and 32 tokens (fewer, larger bulk copies: 4-10% faster), one above (fewer stages hurt more);
// two warpgroups nowhere faster than one by more than the noise.
constexpr WgChoice wg_default(int nt) { return {1, nt <= 32 ? 4 : 1}; }
// Activation multicast CTAs by token tile: none. Predicted to help from 64 tokens (activation bytes
// are 78-93% of a CTA's loads), measured slower on every shape and M (bench/NOTES.md, "Issue 28:
// multicast"): 2 CTAs 3-15%, 4 CTAs up to 2x where clusters of 4 leave a second wave.
constexpr int wg_default_mc(int) { return 1; }
// Two consumer warpgroups (128 weight rows a CTA sharing each activation stage) for 128-token tiles,
// i.e. M = 65 .. 256, where the plan's K split stays <= 2 (wg_plan): with the epilogue reading four
// partial sums at a time, 4-25% faster than one warpgroup at M = 128 and 4-11% at 256 on the five
// shapes, slower at a split of 4 (clusters of 4 one-CTA-per-SM CTAs leave a second wave) and at
// 64 tokens (bench/NOTES.md, "Issue 28: the epilogue", H100 run e1).
constexpr int kWgG2Tile = 128, kWgG2MaxSplit = 2;
// Two consumer warpgroups on 256-token tiles ("wide", 384 threads with setmaxnreg) for M > 128 on
// weights of at least 2^25 elements where their K split stays <= kWgG2MaxSplit: on an H100 against
// the 128-token plan (graph, bench/NOTES.md "Issue 28: wide tiles", runs w1/w2) M = 256 8192^2 65.6 ->
// 61.6 us, 14336x4096 74.1 -> 61.8 (one wave instead of 1.7); M = 512 against dequantize + cuBLAS
// 150.5 -> 112.0, 141.9 -> 119.8, 4096x14336 130.4 -> 101.9. Lost at a split of 4 (4096x14336
// M = 256 102.5 against 60.9) and on the two smaller weights (2048x7168, 7168x2048).
constexpr int kWgWideTile = 256;
constexpr int64_t kWgWideMinElems = int64_t(1) << 25;
template <int NT, int G, int UP>
constexpr bool wg_built() {
#ifdef FP4_WG_SWEEP
    return wg_fits<NT, G, UP>();
#else
    return (wg_default(NT).groups == G && wg_default(NT).units == UP) || (NT >= kWgG2Tile && G == 2 && UP == 1);
#endif
}

template <bool BF16, int NT, int G, int UP>
WgCfg wg_cfg_if() {
    if constexpr (wg_built<NT, G, UP>()) return wg_cfg<BF16, NT, wg_stages<NT, G, UP>(), G, UP>();
    else throw std::invalid_argument("wgmma GEMM: this build holds no kernel for that tuning (groups, units)");
}

// A sweep build's G = 1, UP = 1 kernels with `st` stages instead of wg_stages (benchmarks: the
// pipeline depth A/B); 0 = wg_stages.
template <bool BF16, int NT, int ST>
WgCfg wg_cfg_st() {
#ifdef FP4_WG_SWEEP
    if constexpr (ST * (NT * 256 + kWgW + 16) <= 227 * 1024) return wg_cfg<BF16, NT, ST, 1, 1>();
#endif
    throw std::invalid_argument("wgmma GEMM: this build holds no kernel with that many stages");
}
template <bool BF16, int NT>
WgCfg wg_cfg_stages(int st) {
    switch (st) {
        case 2: return wg_cfg_st<BF16, NT, 2>();
        case 3: return wg_cfg_st<BF16, NT, 3>();
        case 4: return wg_cfg_st<BF16, NT, 4>();
        case 6: return wg_cfg_st<BF16, NT, 6>();
        case 8: return wg_cfg_st<BF16, NT, 8>();
        default: return wg_cfg_st<BF16, NT, 10>();
    }
}
static int g_wg_stages = 0, g_wg_diag = 0, g_wg_tile = 0;

template <bool BF16, int NT>
WgCfg wg_cfg_t(int g, int up) {
    if (g_wg_stages && g == 1 && up == 1) return wg_cfg_stages<BF16, NT>(g_wg_stages);
    if (g == 2) return up == 1 ? wg_cfg_if<BF16, NT, 2, 1>() : up == 2 ? wg_cfg_if<BF16, NT, 2, 2>() : wg_cfg_if<BF16, NT, 2, 4>();
    return up == 1 ? wg_cfg_if<BF16, NT, 1, 1>() : up == 2 ? wg_cfg_if<BF16, NT, 1, 2>() : wg_cfg_if<BF16, NT, 1, 4>();
}

template <bool BF16>
WgCfg wg_config_t(int nt, int g, int up) {
    switch (nt) {
        case 16: return wg_cfg_t<BF16, 16>(g, up);
        case 32: return wg_cfg_t<BF16, 32>(g, up);
        case 64: return wg_cfg_t<BF16, 64>(g, up);
        case 128: return wg_cfg_t<BF16, 128>(g, up);
        default: return wg_cfg_t<BF16, 256>(g, up);
    }
}
WgCfg wg_config(bool bf16, int nt, int g, int up) {
    return bf16 ? wg_config_t<true>(nt, g, up) : wg_config_t<false>(nt, g, up);
}

int wg_tile(int64_t t) { return t <= 16 ? 16 : t <= 32 ? 32 : t <= 64 ? 64 : t <= 128 ? 128 : 256; }

struct WgDev {
    int sms = 0, cc = 0;
    std::unordered_map<const void*, int> resident;
};

int wg_resident(int device, const WgCfg& c, int* sms) {
    static std::mutex mu;
    static std::unordered_map<int, WgDev> cache;
    std::lock_guard<std::mutex> lock(mu);
    WgDev& d = cache[device];
    if (!d.sms) cuda_check(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, device), "sm count");
    *sms = d.sms;
    auto it = d.resident.find(c.func);
    if (it != d.resident.end()) return it->second;
    cuda_check(cudaFuncSetAttribute(c.func, cudaFuncAttributeMaxDynamicSharedMemorySize, c.smem),
               "wgmma GEMM: shared memory attribute");
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, c.func, c.threads(), c.smem) != cudaSuccess) {
        cudaGetLastError();
        n = 1;
    }
    d.resident[c.func] = std::max(n, 1);
    return d.resident[c.func];
}

}  // namespace

// How split-K partial sums meet: 0 by the plan (a cluster's DSMEM), 1 through a cluster's
// distributed shared memory, 2 global memory (the last CTA of a tile adds them), 3 as 0 with the
// epilogue reading one partial sum at a time (benchmarks: the A/B of bench/NOTES.md, "Issue 28:
// the epilogue"; same results). Process-wide.
static int g_wg_reduce = 0;
void wg_set_reduce(int mode) {
    if (mode < 0 || mode > 3) throw std::invalid_argument("wgmma GEMM: reduce mode must be 0, 1, 2 or 3");
    g_wg_reduce = mode;
}
// Tuning for benchmarks, process-wide; 0 = the plan's choice: consumer warpgroups per CTA (1, 2),
// units per stage (1, 2, 4), producer lanes issuing the bulk copies (1, 32). A default build
// refuses a (groups, units) it does not hold when a GEMM is launched.
static int g_wg_groups = 0, g_wg_units = 0, g_wg_lanes = 0, g_wg_mc = 0, g_wg_wcopy = 0, g_wg_flow = -1;
// The stage round trip for benchmarks (bench/NOTES.md, "Issue 28: the stage round trip"), same
// results: bit 0 early release (a stage back as soon as its wgmma group is done), bit 1 split
// producer (lanes 0 and 31 each wait and issue); -1 = the plan's choice (WgPlan::flow).
void wg_set_stage_flow(int mode) {
    if (mode < -1 || mode > 3)
        throw std::invalid_argument("wgmma GEMM: stage flow must be -1 (plan) or 0 .. 3 (bit 0 early release, bit 1 split producer)");
    g_wg_flow = mode;
}
void wg_set_weight_copy(int mode) {
    if (mode < 0 || mode > 2) throw std::invalid_argument("wgmma GEMM: weight copy must be 0 (plan), 1 (bulk) or 2 (tensor)");
    g_wg_wcopy = mode;
}
void wg_set_diag(int mode) {
    if (mode < 0 || mode > 7) throw std::invalid_argument("wgmma GEMM: diag must be 0 .. 7");
    g_wg_diag = mode;
}
void wg_set_stages(int st) {
    if (st != 0 && st != 2 && st != 3 && st != 4 && st != 6 && st != 8 && st != 10)
        throw std::invalid_argument("wgmma GEMM: stages must be 0, 2, 3, 4, 6, 8 or 10");
    g_wg_stages = st;
}
// Tokens per CTA for benchmarks (16, 32, 64, 128, 256; 0 = the plan's choice by M). Process-wide.
void wg_set_tile(int nt) {
    if (nt != 0 && nt != 16 && nt != 32 && nt != 64 && nt != 128 && nt != 256)
        throw std::invalid_argument("wgmma GEMM: token tile must be 0, 16, 32, 64, 128 or 256");
    g_wg_tile = nt;
}
// Activation multicast for benchmarks: CTAs along N per cluster sharing each activation tile
// (1, 2, 4; 0 = the plan's choice). Process-wide.
void wg_set_multicast(int ctas) {
    if (ctas != 0 && ctas != 1 && ctas != 2 && ctas != 4)
        throw std::invalid_argument("wgmma GEMM: multicast CTAs must be 0, 1, 2 or 4");
    g_wg_mc = ctas;
}
static bool g_wg_pdl = true;
void wg_set_pdl(bool on) { g_wg_pdl = on; }
// The next call's permute launched as a programmatic dependent of this call's GEMM, which lets it
// launch from its start (the permute's launch, and the next GEMM's first weight stages, behind this
// GEMM's tail). On an H100 (bench/results/2026-12-06-h100-issue28/p1, graph): M = 512 on the three
// large shapes 4-8% faster, M = 256 -2 .. +1%, M <= 128 +-0.5%; eager 2-8% faster at M = 64 .. 512.
static bool g_wg_chain = true;
void wg_set_chain(bool on) { g_wg_chain = on; }
void wg_set_tuning(int groups, int units, int lanes) {
    if (groups < 0 || groups > 2) throw std::invalid_argument("wgmma GEMM: warpgroups must be 0, 1 or 2");
    if (units != 0 && units != 1 && units != 2 && units != 4)
        throw std::invalid_argument("wgmma GEMM: units per stage must be 0, 1, 2 or 4");
    if (lanes != 0 && lanes != 1 && lanes != 32) throw std::invalid_argument("wgmma GEMM: lanes must be 0, 1 or 32");
    g_wg_groups = groups;
    g_wg_units = units;
    g_wg_lanes = lanes;
}
static int64_t wg_act_bytes(const WgPlan& pl, int u, int64_t tz) {
    return (tz * u * (int64_t)pl.nt * 256 + 255) / 256 * 256;
}
static int64_t wg_red_bytes(const WgPlan& pl, int64_t gy, int64_t tz) {
    return tz * gy * pl.split * (int64_t)pl.nt * 64 * pl.groups * 4 + tz * gy * 4;
}

// Split along K: the largest S (1..8) whose grid stays within one wave of at most 2 CTAs per SM
// (row groups x token tiles x S <= SMs x min(resident CTAs, 2)), keeping >= 4 units per CTA.
// From the sweep of every S on the five shapes (bench/results/2026-12-02-h200-issue28-wg/
// sweep.txt): 8192^2 M = 16..64 fastest at S = 2 (256 CTAs), 128 and 256 tokens at S = 1
// (1 CTA per SM); more CTAs than that made it slower, not faster (cluster waves).
static int wg_auto_split(const PkProblem& pr, int sms, int occ, int64_t gy, int64_t tz) {
    const int64_t cap = (int64_t)sms * std::min(occ, 2);
    int split = 1;
    while (split < 8 && gy * tz * (split + 1) <= cap && pr.u / (split + 1) >= 4) ++split;
    return split;
}

WgPlan wg_plan(const PkProblem& pr, int device) {
    WgPlan pl;
    pl.nt = g_wg_tile ? g_wg_tile : wg_tile(pr.t);
    pl.groups = g_wg_groups ? g_wg_groups : wg_default(pl.nt).groups;
    int sms = 0;
    // two warpgroups on `tile`-token tiles keep their K split small (<= kWgG2MaxSplit)
    auto g2_split_small = [&](int tile) {
        const int occ = wg_resident(device, wg_config(pr.a_kind == 1, tile, 2, 1), &sms);
        const int64_t tz = (pr.t + tile - 1) / tile, gy = (pr.nt + 2 * kWgRowTiles - 1) / (2 * kWgRowTiles);
        return (pr.split > 0 ? pr.split : wg_auto_split(pr, sms, occ, gy, tz)) <= kWgG2MaxSplit;
    };
    const bool tuned = g_wg_groups || g_wg_units;
    const bool wide = !tuned && !g_wg_tile && pl.nt >= kWgWideTile && pr.n * pr.k >= kWgWideMinElems &&
                      g2_split_small(kWgWideTile);
    if (wide || (!tuned && pl.nt >= kWgG2Tile && g2_split_small(kWgG2Tile))) pl.groups = 2;
    // otherwise two warpgroups run 256 tokens as two 128-token tiles
    if (pl.groups > 1 && pl.nt > 128 && !g_wg_tile && !wide) pl.nt = 128;
    pl.units = g_wg_units ? g_wg_units : pl.groups > 1 ? 1 : wg_default(pl.nt).units;
    // lane 0 issues every bulk copy, but for 256-token tiles one lane per copy: 1-3% either way in
    // the A/B of both on the H200 (bench/NOTES.md, "Issue 28: PDL, rotation, lanes")
    pl.lanes = g_wg_lanes ? g_wg_lanes : pl.nt >= 256 ? 32 : 1;
    // the split producer (lanes 0 and 31 each wait for a stage and issue their own copy) where it won
    // on all five shapes in the A/B on the H200: 256-token tiles 3-4%, 16 and 32 tokens 1-3%; +-1% at
    // 64 and 128. The early release lost 9-25% at 128 and 256 tokens (bench/NOTES.md, "Issue 28:
    // stage-flow variants, measured"; bench/results/2026-12-06-h200-issue28/f1)
    pl.flow = g_wg_flow >= 0 ? g_wg_flow : (pl.nt >= 256 || pl.nt <= 32) ? 2 : 0;
    const WgCfg c = wg_config(pr.a_kind == 1, pl.nt, pl.groups, pl.units);
    const int occ = wg_resident(device, c, &sms);
    const int rows = kWgRowTiles * pl.groups;
    const int64_t tz = (pr.t + pl.nt - 1) / pl.nt, gy = (pr.nt + rows - 1) / rows;
    pl.split = pr.split > 0 ? pr.split : wg_auto_split(pr, sms, occ, gy, tz);
    // the last wave's idle CTA slots and the last token tile's missing tokens, as a share of the work
    // the grid's waves could hold (one CTA slot = one SM's share of `occ`)
    const int64_t ctas = gy * tz * pl.split, slots = (int64_t)sms * occ;
    if (ctas > 0 && slots > 0)
        pl.fill = (float)((double)ctas / (double)(((ctas + slots - 1) / slots) * slots) * (double)pr.t /
                          (double)(tz * pl.nt));
    pl.global_reduce = pl.split > 1 && g_wg_reduce == 2;  // the sweep: DSMEM faster at every split
    // Activation multicast over mc CTAs along N (a cluster of split x mc, at most 8, the portable
    // cluster size: CUDA Programming Guide, "Thread Block Clusters"): each L2 read of an
    // activation tile feeds mc SMs. The grid's row groups must fill whole clusters.
    const int want = g_wg_mc ? g_wg_mc : wg_default_mc(pl.nt);
    pl.mc = 1;
    if (!pl.global_reduce)
        for (int m = want; m > 1; m /= 2)
            if (gy % m == 0 && pl.split * m <= 8) {
                pl.mc = m;
                break;
            }
    pl.scratch = wg_act_bytes(pl, pr.u, tz) + (pl.global_reduce ? wg_red_bytes(pl, gy, tz) : 0);
    return pl;
}

// Stream-ordered scratch of the permuted activations (cuda_wg_host.cpp).
uint8_t* wg_scratch(int device, int64_t bytes, cudaStream_t st);

// The weight as a 3-D tensor map whose box is one stage's weight tiles: dims (144 8-byte words of
// a 1152-byte unit, U units, Nt row tiles), box (144, units, rows); the stage image is then the
// same as the per-row-tile copies' (row tile r's units at r * units * 1152). cuTensorMapEncodeTiled
// through the runtime's driver entry point (no libcuda link; CUDA Driver API, "Tensor Map Object
// Management"). False (the bulk copies are used) where the driver lacks it or refuses the map
// (e.g. a weight address not 16-byte aligned).
static bool wg_weight_map(CUtensorMap* map, const void* w, int64_t u, int64_t nt, int units, int rows) {
    using Encode = decltype(&cuTensorMapEncodeTiled);
    static Encode encode = []() -> Encode {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult q{};
#if CUDART_VERSION >= 12050
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess)
#else
        if (cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &q) != cudaSuccess)
#endif
        {
            cudaGetLastError();
            return nullptr;
        }
        return q == cudaDriverEntryPointSuccess ? reinterpret_cast<Encode>(fn) : nullptr;
    }();
    if (!encode) return false;
    const cuuint64_t dims[3] = {(cuuint64_t)(kPkUnitBytes / 8), (cuuint64_t)u, (cuuint64_t)nt};
    const cuuint64_t strides[2] = {(cuuint64_t)kPkUnitBytes, (cuuint64_t)(u * kPkUnitBytes)};
    const cuuint32_t box[3] = {(cuuint32_t)(kPkUnitBytes / 8), (cuuint32_t)units, (cuuint32_t)rows};
    const cuuint32_t estr[3] = {1, 1, 1};
    return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT64, 3, const_cast<void*>(w), dims, strides, box, estr,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

void cuda_wg_mm(const PkProblem& pr, int device, uintptr_t stream, const WgPlan* plan) {
    DeviceGuard guard(device);
    if (!wg_supported(device))
        throw std::runtime_error("fp4_kernels: the wgmma GEMM needs an sm_90a build on a compute capability 9.0 GPU");
    if (pr.n <= 0 || pr.t <= 0) return;
    const WgPlan pl = plan ? *plan : wg_plan(pr, device);
    const WgCfg c = wg_config(pr.a_kind == 1, pl.nt, pl.groups, pl.units);
    const int rows = kWgRowTiles * pl.groups;
    const int64_t tz = (pr.t + pl.nt - 1) / pl.nt, gy = (pr.nt + rows - 1) / rows;
    if (gy > 65535 || tz > 65535)
        throw std::runtime_error("fp4_kernels: wgmma GEMM: N or M too large for one launch");
    auto st = reinterpret_cast<cudaStream_t>(stream);
    uint8_t* scratch = wg_scratch(device, pl.scratch, st);
    const int64_t pieces = tz * pr.u * pl.nt * 16;
    const unsigned pblocks = (unsigned)std::min<int64_t>((pieces + 255) / 256, 4096);
    cudaError_t pe;
    {
        cudaLaunchConfig_t pc{};
        cudaLaunchAttribute pa[1];
        pc.gridDim = dim3(pblocks);
        pc.blockDim = dim3(256);
        pc.stream = st;
        pc.attrs = pa;
        pc.numAttrs = 0;
        if (g_wg_chain) {
            pa[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            pa[0].val.programmaticStreamSerializationAllowed = 1;
            pc.numAttrs = 1;
        }
        pe = cudaLaunchKernelEx(&pc, wg_permute, static_cast<const uint16_t*>(pr.a), pr.lda, pr.t, pr.k, pr.u,
                                pl.nt, tz, scratch);
        if (pe == cudaSuccess) pe = cudaGetLastError();
        else cudaGetLastError();
    }
    if (pe != cudaSuccess) {
        cudaFreeAsync(scratch, st);
        cuda_check(pe, "wgmma GEMM (activation permute)");
    }
    WgArgs a{};
    a.w = pr.w;
    a.xp = scratch;
    a.alpha = pr.alpha;
    a.alpha_val = pr.alpha_value;
    a.out = pr.out;
    a.out_dt = (int)pr.out_dt;
    a.T = pr.t;
    a.N = pr.n;
    a.U = pr.u;
    a.Nt = pr.nt;
    a.split = pl.split;
    a.lanes = pl.lanes;
    a.mc = pl.mc;
    // a stage's weight tiles as one tensor box where a stage holds one unit (64 .. 256 tokens: 8-19%
    // faster at 64 and 128 tokens, 5-8% at 256 on the H100), one bulk copy a row tile where it holds
    // 4 (16 and 32 tokens: the box was up to 8% slower there); bench/NOTES.md, "Issue 28: copy count"
    const bool box = g_wg_wcopy == 2 || (g_wg_wcopy == 0 && pl.units == 1);
    a.wtma = box && wg_weight_map(&a.wmap, pr.w, pr.u, pr.nt, pl.units, rows);
    a.flow = pl.flow;
    a.diag = g_wg_diag;
    a.epi1 = g_wg_reduce == 3;
    a.chain = g_wg_chain;
    if (pl.global_reduce) {
        const int64_t act = wg_act_bytes(pl, pr.u, tz), part = tz * gy * pl.split * (int64_t)pl.nt * 64 * pl.groups * 4;
        a.ws = reinterpret_cast<float*>(scratch + act);
        a.sem = reinterpret_cast<int*>(scratch + act + part);
        const cudaError_t me = cudaMemsetAsync(a.sem, 0, (size_t)(tz * gy * 4), st);
        if (me != cudaSuccess) {
            cudaFreeAsync(scratch, st);
            cuda_check(me, "wgmma GEMM (arrival counters)");
        }
    }
    cudaLaunchConfig_t cfg{};
    cudaLaunchAttribute attr[2];
    cfg.blockDim = dim3((unsigned)c.threads());
    cfg.gridDim = dim3((unsigned)pl.split, (unsigned)gy, (unsigned)tz);
    cfg.dynamicSmemBytes = (size_t)c.smem;
    cfg.stream = st;
    cfg.attrs = attr;
    cfg.numAttrs = 0;
    if (!pl.global_reduce && g_wg_pdl) {  // overlaps the permute (not the global reduction's memset)
        attr[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[cfg.numAttrs].val.programmaticStreamSerializationAllowed = 1;
        ++cfg.numAttrs;
    }
    if ((pl.split > 1 || pl.mc > 1) && !pl.global_reduce) {
        attr[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
        attr[cfg.numAttrs].val.clusterDim.x = (unsigned)pl.split;
        attr[cfg.numAttrs].val.clusterDim.y = (unsigned)pl.mc;
        attr[cfg.numAttrs].val.clusterDim.z = 1;
        ++cfg.numAttrs;
    }
    void* args[] = {&a};
    const cudaError_t e = cudaLaunchKernelExC(&cfg, c.func, args);
    cudaFreeAsync(scratch, st);
    if (e != cudaSuccess) {
        cudaGetLastError();
        throw std::runtime_error(std::string("fp4_kernels: wgmma GEMM launch: ") + cudaGetErrorName(e) + ": " +
                                 cudaGetErrorString(e) + " (this build holds SASS for: " FP4_CUDA_ARCHS ")");
    }
    launch_check("wgmma GEMM kernel", device);
}

}  // namespace fp4
