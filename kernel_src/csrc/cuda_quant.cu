// CUDA quantize / grouped quantize / dequantize kernels (memory-bound).
//
// Quantize: one thread owns one 16-element block at a time; a CTA owns "chunks" of
// 2 * 256 consecutive blocks of one matrix (chunks never straddle two matrices of a grouped
// launch). The grid is persistent (resident CTAs x SMs) and each CTA walks a contiguous range
// of chunks. The matrices' descriptors travel in the kernel's parameter space (under 4 KB; no
// host->device table copy). The arithmetic is quant_fast.h: E2M1 codes by saturating
// FMA-pipe roundings, amax/6 by one FMA correction, the E4M3 scale by the SM89+ hardware
// conversion and rs = gs / float(scale) from a 256-entry shared-memory table built per CTA;
// results are bit-identical to nvfp4_math.h (tests/kernel, selfcheck('cuda')). bench/NOTES.md
// has the variants that were measured (one chunk per CTA, prefetching, 1 or 4 blocks per
// thread) and why this one stayed.
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda_common.cuh"
#include "fp4_api.h"
#include "nvfp4_math.h"
#include "quant_fast.h"

// Hardware E2M1 conversion (cvt.rn.satfinite.e2m1x2.f32): PTX ISA 8.6+, architecture- or
// family-specific Blackwell targets (sm_100a/f, sm_103a/f, sm_110a/f, sm_120a/f, sm_121a/f).
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && (__CUDA_ARCH__ >= 1000) && \
    (__CUDA_ARCH_FAMILY_SPECIFIC__ >= 1000) && (__CUDA_ARCH_FAMILY_SPECIFIC__ < 1300)
#define FP4_HW_E2M1 1
#elif defined(__CUDA_ARCH_FEAT_SM100_ALL) || defined(__CUDA_ARCH_FEAT_SM101_ALL) || \
    defined(__CUDA_ARCH_FEAT_SM103_ALL) || defined(__CUDA_ARCH_FEAT_SM120_ALL) ||    \
    defined(__CUDA_ARCH_FEAT_SM121_ALL)
#define FP4_HW_E2M1 1
#else
#define FP4_HW_E2M1 0
#endif

namespace fp4 {

namespace {

constexpr int kThreads = 256;
constexpr float kFltMax = 3.40282346638528859812e38f;

__device__ __forceinline__ float max_nan(float a, float b) {
#if __CUDA_ARCH__ >= 800
    float d;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
#else
    return (a != a || b != b) ? __int_as_float(0x7FFFFFFF) : fmaxf(a, b);
#endif
}

__device__ __forceinline__ uint32_t vmax_u16x2(uint32_t a, uint32_t b) {
#if __CUDA_ARCH__ >= 900
    uint32_t d;
    asm("max.u16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
#else
    return __vmaxu2(a, b);
#endif
}

// E4M3 byte of a non-NaN float: round to nearest even, saturating finite (+-Inf -> +-448).
__device__ __forceinline__ uint32_t e4m3_satfinite(float s) {
#if __CUDA_ARCH__ >= 890
    uint16_t r;  // the second source operand lands in the low byte
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(s));
    return r & 0xFFu;
#else
    return float_to_e4m3_satfinite(s);
#endif
}

// One 16-element block of input: 2 x 16 bytes (fp16 / bf16) or 4 x 16 bytes (fp32).
template <DType DT>
struct Raw {
    static constexpr int N = DT == DType::F32 ? 4 : 2;
    uint4 w[N];
};

template <DType DT>
__device__ __forceinline__ void load_raw(Raw<DT>& r, const void* x, int64_t b) {
    const uint4* p = reinterpret_cast<const uint4*>(x) + Raw<DT>::N * b;
#pragma unroll
    for (int i = 0; i < Raw<DT>::N; ++i) r.w[i] = __ldg(p + i);
}

template <DType DT>
__device__ __forceinline__ void unpack(const Raw<DT>& r, float v[16]) {
#pragma unroll
    for (int j = 0; j < Raw<DT>::N; ++j) {
        const uint32_t w[4] = {r.w[j].x, r.w[j].y, r.w[j].z, r.w[j].w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            if constexpr (DT == DType::F32) {
                v[4 * j + i] = __uint_as_float(w[i]);
            } else if constexpr (DT == DType::BF16) {
                v[8 * j + 2 * i] = __uint_as_float(w[i] << 16);
                v[8 * j + 2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
            } else {
                const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
                v[8 * j + 2 * i] = f.x;
                v[8 * j + 2 * i + 1] = f.y;
            }
        }
    }
}

// 8 codes (element 0 lowest) of v[0..8) * rs for finite rs > 0 and no NaN in v.
template <DType DT>
__device__ __forceinline__ uint32_t encode8(const float* v, float rs, const Raw<DT>& r, int half) {
#if FP4_HW_E2M1
    uint32_t w = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float lo = fminf(fmaxf(mul_rn(v[2 * i], rs), -6.0f), 6.0f);
        const float hi = fminf(fmaxf(mul_rn(v[2 * i + 1], rs), -6.0f), 6.0f);
        uint16_t b;
        asm("{ .reg .b8 fp4tmp;\n"
            "  cvt.rn.satfinite.e2m1x2.f32 fp4tmp, %1, %2;\n"
            "  mov.b16 %0, {fp4tmp, 0}; }\n"
            : "=h"(b)
            : "f"(hi), "f"(lo));
        w |= (uint32_t)(b & 0xFFu) << (8 * i);
    }
    const uint32_t z = w & 0x77777777u;  // -0 -> +0
    return w & (0x77777777u | ((z + 0x77777777u) & 0x88888888u));
#else
    const uint32_t mag = fast::e2m1_mag8(v, rs);
    uint32_t neg;
    if constexpr (DT == DType::F32) {
        neg = fast::signs8_f32(v);
    } else {
        const uint4 w = r.w[half];
        neg = fast::signs8_16(w.x, w.y, w.z, w.w);
    }
    return fast::merge_signs(mag, neg);
#endif
}

// Quantize one block: packed codes and the scale byte. tab[b] = rs for scale byte b.
template <DType DT, bool kTable = true>
__device__ __forceinline__ uint2 quant_block(const Raw<DT>& r, float gs, const float* tab,
                                             uint32_t& sb_out) {
    float v[16];
    unpack<DT>(r, v);
    // NaN-propagating max: a NaN makes s NaN, hence scale 0x7F and rs = 0 (all codes +0).
    float amax = 0.0f;
    if constexpr (DT == DType::F32) {
#pragma unroll
        for (int i = 0; i < 16; ++i) amax = max_nan(amax, fabsf(v[i]));
    } else {
        // on the 16-bit patterns: |x| bit patterns order like the values, and every NaN
        // pattern lies above +Inf, so an unsigned max keeps NaN-ness
        uint32_t m = 0;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            m = vmax_u16x2(m, r.w[j].x & 0x7FFF7FFFu);
            m = vmax_u16x2(m, r.w[j].y & 0x7FFF7FFFu);
            m = vmax_u16x2(m, r.w[j].z & 0x7FFF7FFFu);
            m = vmax_u16x2(m, r.w[j].w & 0x7FFF7FFFu);
        }
        m = vmax_u16x2(m, m >> 16) & 0xFFFFu;
        if constexpr (DT == DType::BF16) amax = __uint_as_float(m << 16);
        else amax = __half2float(__ushort_as_half((unsigned short)m));
    }
    const float s = mul_rn(gs, fast::div6(amax));
    const uint32_t sb = is_nan(s) ? 0x7Fu : e4m3_satfinite(s);
    sb_out = sb;
    const float rs = kTable ? tab[sb] : fast::rs_for_scale(sb, gs);  // same value either way
    uint2 packed = make_uint2(0u, 0u);
    if (rs != 0.0f) {
        if (rs <= kFltMax) {
            packed.x = encode8<DT>(v, rs, r, 0);
            packed.y = encode8<DT>(v + 8, rs, r, 1);
        } else {  // rs = +Inf (huge gs / tiny scale): 0 * Inf = NaN must encode +0
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                packed.x |= float_to_e2m1(mul_rn(v[i], rs)) << (4 * i);
                packed.y |= float_to_e2m1(mul_rn(v[8 + i], rs)) << (4 * i);
            }
        }
    }
    return packed;
}

// Matrices of one launch, compact so that the parameters stay under 4 KB (larger kernel
// parameter blocks, allowed since CUDA 12.1, were measured to serialize back-to-back launches:
// bench/NOTES.md). Matrix e reads x[e], writes its codes at q_base + 8 * bstart[e] and its
// scales at s_base + soff[e]; its global scale is the float at gs_base + 4 * e.
// chunk0[e] = first chunk of matrix e, chunk0[n] = all chunks.
template <int MAXG>
struct QuantArgs {
    int32_t n;
    int32_t swizzle;
    int64_t q_base, s_base, gs_base;
    int32_t chunk0[MAXG + 1];
    int32_t kb[MAXG];          // K / 16
    int64_t x[MAXG];
    int64_t bstart[MAXG + 1];  // first block of matrix e; bstart[n] = all blocks
    int64_t soff[MAXG];
};
constexpr int kMaxGroup = 96;  // matrices per grouped launch
static_assert(sizeof(QuantArgs<kMaxGroup>) <= 4096, "keep kernel parameters under 4 KB");

template <DType DT, int MAXG, int U>
__global__ void __launch_bounds__(kThreads)
    quant_kernel(const __grid_constant__ QuantArgs<MAXG> A) {
    constexpr int64_t kChunk = (int64_t)U * kThreads;
    __shared__ float tab[256];
    const int tid = threadIdx.x;
    const int total = A.chunk0[A.n];
    const int c_begin = (int)((int64_t)blockIdx.x * total / gridDim.x);
    const int c_end = (int)((int64_t)(blockIdx.x + 1) * total / gridDim.x);
    if (c_begin >= c_end) return;

    int e = 0;  // matrix of the current chunk (uniform across the CTA)
    if constexpr (MAXG > 1) {
        int lo = 0, hi = A.n - 1;
        while (lo < hi) {
            const int mid = (lo + hi + 1) >> 1;
            if (A.chunk0[mid] <= c_begin) lo = mid; else hi = mid - 1;
        }
        e = lo;
    }
    int cur = -1;
    float gs = 0.0f;
    for (int c = c_begin; c < c_end; ++c) {
        while (c >= A.chunk0[e + 1]) ++e;
        const int64_t first = A.bstart[e], blocks = A.bstart[e + 1] - first;
        const int64_t b0 = (int64_t)(c - A.chunk0[e]) * kChunk + tid;
        const void* x = reinterpret_cast<const void*>(A.x[e]);
        Raw<DT> raw[U];
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (b0 + u * kThreads < blocks) load_raw<DT>(raw[u], x, b0 + u * kThreads);
        if (e != cur) {  // new matrix: its rs table (uniform branch)
            __syncthreads();
            gs = __ldg(reinterpret_cast<const float*>(A.gs_base) + e);
            tab[tid] = fast::rs_for_scale((uint32_t)tid, gs);
            __syncthreads();
            cur = e;
        }
        uint2* q = reinterpret_cast<uint2*>(A.q_base) + first;
        uint8_t* sc = reinterpret_cast<uint8_t*>(A.s_base) + A.soff[e];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int64_t b = b0 + u * kThreads;
            if (b >= blocks) break;
            uint32_t sb;
            const uint2 packed = quant_block<DT>(raw[u], gs, tab, sb);
            __stcs(q + b, packed);
            int64_t off = b;
            if (A.swizzle) {
                const int64_t kb_n = A.kb[e];
                off = swizzled_offset(b / kb_n, b % kb_n, (kb_n + 3) / 4 * 4);
            }
            sc[off] = (uint8_t)sb;
        }
    }
}

// ---- stacked experts: one [T, K] matrix, rows offsets[e]..offsets[e+1] use gs[e] ----------
// The expert offsets live in device memory (no host synchronization). A chunk of blocks that
// lies in one expert uses the per-CTA rs table like quant_kernel; a chunk that straddles an
// expert boundary computes rs = gs / scale per block (the same value, by division).
struct ExpertsArgs {
    const void* x;
    uint8_t* q;
    uint8_t* s;
    const float* gs;
    const void* offsets;
    int off64;
    int E;
    int64_t T, kb;  // rows, 16-element blocks per row
    int nchunks;
};

__device__ __forceinline__ int64_t expert_off(const ExpertsArgs& A, int i) {
    return A.off64 ? __ldg(reinterpret_cast<const long long*>(A.offsets) + i)
                   : (int64_t)__ldg(reinterpret_cast<const int*>(A.offsets) + i);
}
// Largest e in [0, E) with offsets[e] <= row.
__device__ __forceinline__ int expert_of(const ExpertsArgs& A, int64_t row) {
    int lo = 0, hi = A.E - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (expert_off(A, mid) <= row) lo = mid; else hi = mid - 1;
    }
    return lo;
}

template <DType DT, int U>
__global__ void __launch_bounds__(kThreads) experts_quant_kernel(const __grid_constant__ ExpertsArgs A) {
    constexpr int64_t kChunk = (int64_t)U * kThreads;
    __shared__ float tab[256];
    const int tid = threadIdx.x;
    const int c_begin = (int)((int64_t)blockIdx.x * A.nchunks / gridDim.x);
    const int c_end = (int)((int64_t)(blockIdx.x + 1) * A.nchunks / gridDim.x);
    const int64_t blocks = A.T * A.kb;
    int cur = -1;
    float gs = 0.0f;
    for (int c = c_begin; c < c_end; ++c) {
        const int64_t b0 = (int64_t)c * kChunk;
        Raw<DT> raw[U];
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (b0 + tid + u * kThreads < blocks) load_raw<DT>(raw[u], A.x, b0 + tid + u * kThreads);
        const int e0 = expert_of(A, b0 / A.kb);
        const int e1 = expert_of(A, (min(blocks, b0 + kChunk) - 1) / A.kb);
        uint2* q = reinterpret_cast<uint2*>(A.q);
        if (e0 == e1) {  // uniform branch
            if (e0 != cur) {
                __syncthreads();
                gs = __ldg(A.gs + e0);
                tab[tid] = fast::rs_for_scale((uint32_t)tid, gs);
                __syncthreads();
                cur = e0;
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int64_t b = b0 + tid + u * kThreads;
                if (b >= blocks) break;
                uint32_t sb;
                __stcs(q + b, quant_block<DT>(raw[u], gs, tab, sb));
                A.s[b] = (uint8_t)sb;
            }
        } else {
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int64_t b = b0 + tid + u * kThreads;
                if (b >= blocks) break;
                const float g = __ldg(A.gs + expert_of(A, b / A.kb));
                uint32_t sb;
                __stcs(q + b, quant_block<DT, false>(raw[u], g, tab, sb));
                A.s[b] = (uint8_t)sb;
            }
        }
    }
}

// ---- dequantize -------------------------------------------------------------------------
// One thread per 16-element block, two blocks per thread (strided by the CTA size), one CTA
// per 512 blocks: the kernel of commit b40205f, unchanged (75% / 85% of copy on an H200).
// A persistent grid-stride version with both GEMM operands in one launch measured slower
// (46% / 52%; bench/NOTES.md), so the GEMM path launches this kernel once per operand.
constexpr int kDeqUnroll = 2;

// byte -> the two E2M1 values it holds (low nibble first), as floats.
__device__ __forceinline__ float2 lut_entry(int byte) {
    return make_float2(e2m1_to_float(byte & 15), e2m1_to_float(byte >> 4));
}

// gsp == nullptr: global scale 1.
template <DType DT>
__global__ void __launch_bounds__(kThreads)
    dequant_kernel(const uint8_t* __restrict__ q, const uint8_t* __restrict__ s,
                   const float* __restrict__ gsp, void* __restrict__ out, int64_t total) {
    __shared__ float2 lut[256];
    lut[threadIdx.x] = lut_entry(threadIdx.x);
    const int64_t first = (int64_t)blockIdx.x * kThreads * kDeqUnroll + threadIdx.x;
    uint2 codes[kDeqUnroll];
    uint8_t sb[kDeqUnroll];
#pragma unroll
    for (int u = 0; u < kDeqUnroll; ++u) {
        const int64_t t = first + u * kThreads;
        if (t < total) {
            codes[u] = __ldg(reinterpret_cast<const uint2*>(q) + t);
            sb[u] = __ldg(s + t);
        }
    }
    const float gs = gsp ? __ldg(gsp) : 1.0f;
    __syncthreads();
#pragma unroll
    for (int u = 0; u < kDeqUnroll; ++u) {
        const int64_t t = first + u * kThreads;
        if (t >= total) break;
        const float f = div_rn(e4m3_to_float(sb[u]), gs);
        float v[16];
        const uint32_t w[2] = {codes[u].x, codes[u].y};
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const float2 e = lut[(w[i >> 2] >> (8 * (i & 3))) & 0xFFu];
            v[2 * i] = mul_rn(e.x, f);
            v[2 * i + 1] = mul_rn(e.y, f);
        }
        if constexpr (DT == DType::F32) {
            float4* p = reinterpret_cast<float4*>(out) + 4 * t;
#pragma unroll
            for (int i = 0; i < 4; ++i) __stcs(p + i, make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]));
        } else {
            uint32_t o[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                // hardware RNE conversions (NaN bit patterns may differ from the CPU path;
                // NaN positions do not)
                if constexpr (DT == DType::BF16) {
                    const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
                    o[i] = *reinterpret_cast<const uint32_t*>(&h);
                } else {
                    const __half2 h = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
                    o[i] = *reinterpret_cast<const uint32_t*>(&h);
                }
            }
            uint4* p = reinterpret_cast<uint4*>(out) + 2 * t;
            __stcs(p, make_uint4(o[0], o[1], o[2], o[3]));
            __stcs(p + 1, make_uint4(o[4], o[5], o[6], o[7]));
        }
    }
}

// ---- launch helpers ------------------------------------------------------------------------
int sm_count(int device) {
    static std::mutex mu;
    static std::unordered_map<int, int> cache;
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(device);
    if (it != cache.end()) return it->second;
    int n = 0;
    cuda_check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device),
               "cudaDeviceGetAttribute(multiProcessorCount)");
    cache[device] = n;
    return n;
}

// Resident CTAs of `func` per SM (cached per function and device).
int ctas_per_sm(const void* func, int device) {
    static std::mutex mu;
    static std::unordered_map<const void*, std::unordered_map<int, int>> cache;
    std::lock_guard<std::mutex> lock(mu);
    auto& m = cache[func];
    auto it = m.find(device);
    if (it != m.end()) return it->second;
    int n = 0;
    const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, func, kThreads, 0);
    if (e != cudaSuccess) {
        cudaGetLastError();
        n = 0;  // e.g. no kernel image: the launch reports it
    }
    m[device] = n > 0 ? n : 1;
    return m[device];
}

constexpr int kQuantU = 2;  // blocks per thread per chunk

template <DType DT, int MAXG>
void launch_quant_t(const QuantArgs<MAXG>& a, int device, cudaStream_t st) {
    const int total = a.chunk0[a.n];
    if (total == 0) return;
    auto kern = quant_kernel<DT, MAXG, kQuantU>;
    const int64_t grid = std::min<int64_t>(
        total, (int64_t)sm_count(device) * ctas_per_sm(reinterpret_cast<const void*>(kern), device));
    kern<<<(unsigned)grid, kThreads, 0, st>>>(a);
}

// Fills chunk0 from bstart (blocks per chunk: kQuantU * kThreads) and launches.
template <int MAXG>
void launch_quant(QuantArgs<MAXG>& a, DType dt, int device, cudaStream_t st) {
    constexpr int64_t kChunk = (int64_t)kQuantU * kThreads;
    int64_t c = 0;
    for (int i = 0; i < a.n; ++i) {
        a.chunk0[i] = (int32_t)c;
        c += (a.bstart[i + 1] - a.bstart[i] + kChunk - 1) / kChunk;
        if (c > 0x7FFFFFFF) throw std::runtime_error("fp4_kernels: tensor too large");
    }
    a.chunk0[a.n] = (int32_t)c;
    switch (dt) {
        case DType::F32: launch_quant_t<DType::F32, MAXG>(a, device, st); break;
        case DType::F16: launch_quant_t<DType::F16, MAXG>(a, device, st); break;
        case DType::BF16: launch_quant_t<DType::BF16, MAXG>(a, device, st); break;
    }
}

void launch_dequant(const uint8_t* q, const uint8_t* s, const float* gs, void* out, int64_t total,
                    DType dt, cudaStream_t st) {
    const int64_t per_cta = (int64_t)kThreads * kDeqUnroll;
    const int64_t grid = (total + per_cta - 1) / per_cta;
    if (grid > 0x7FFFFFFF) throw std::runtime_error("fp4_kernels: tensor too large");
    if (grid == 0) return;
    switch (dt) {
        case DType::F32: dequant_kernel<DType::F32><<<(unsigned)grid, kThreads, 0, st>>>(q, s, gs, out, total); break;
        case DType::F16: dequant_kernel<DType::F16><<<(unsigned)grid, kThreads, 0, st>>>(q, s, gs, out, total); break;
        case DType::BF16: dequant_kernel<DType::BF16><<<(unsigned)grid, kThreads, 0, st>>>(q, s, gs, out, total); break;
    }
}

}  // namespace

bool cuda_compiled() { return true; }

int cuda_device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear: no driver / no device is not an error here
        return 0;
    }
    return n;
}

void cuda_quant(const QuantDesc& d, DType dt, int device, uintptr_t stream) {
    DeviceGuard guard(device);
    if (d.k / 16 > 0x7FFFFFFF) throw std::runtime_error("fp4_kernels: K too large");
    QuantArgs<1> a{};
    a.n = 1;
    a.swizzle = (int32_t)d.swizzle;
    a.q_base = d.q;
    a.s_base = d.s;
    a.gs_base = d.gs;
    a.kb[0] = (int32_t)(d.k / 16);
    a.x[0] = d.x;
    a.bstart[0] = 0;
    a.bstart[1] = d.m * d.k / 16;
    a.soff[0] = 0;
    launch_quant<1>(a, dt, device, reinterpret_cast<cudaStream_t>(stream));
    launch_check("scaled_fp4_quant kernel", device);
}

// descs[i].q / .s / .gs must be the packed layout that grouped_quant_cuda (bindings.cpp)
// builds: codes back to back from descs[0].q, scales back to back from descs[0].s, global
// scales consecutive floats from descs[0].gs.
void cuda_grouped_quant_host(const QuantDesc* descs, int n, DType dt, int device, uintptr_t stream) {
    DeviceGuard guard(device);
    auto st = reinterpret_cast<cudaStream_t>(stream);
    QuantArgs<kMaxGroup> a;
    for (int base = 0; base < n; base += kMaxGroup) {
        const int cnt = std::min(kMaxGroup, n - base);
        a = QuantArgs<kMaxGroup>{};
        a.n = cnt;
        a.swizzle = (int32_t)descs[base].swizzle;
        a.q_base = descs[base].q;
        a.s_base = descs[base].s;
        a.gs_base = descs[base].gs;
        int64_t b = 0;
        for (int i = 0; i < cnt; ++i) {
            const QuantDesc& d = descs[base + i];
            if (d.k / 16 > 0x7FFFFFFF) throw std::runtime_error("fp4_kernels: K too large");
            if (d.q != a.q_base + 8 * b || d.gs != a.gs_base + 4 * i)
                throw std::runtime_error("fp4_kernels: grouped quant: outputs not packed");
            a.kb[i] = (int32_t)(d.k / 16);
            a.x[i] = d.x;
            a.bstart[i] = b;
            a.soff[i] = d.s - a.s_base;
            b += d.m * d.k / 16;
        }
        a.bstart[cnt] = b;
        launch_quant<kMaxGroup>(a, dt, device, st);
        launch_check("scaled_fp4_grouped_quant kernel", device);
    }
}

void cuda_experts_quant(const void* x, const float* gs, const void* offsets, bool off64, uint8_t* q,
                        uint8_t* s, int64_t t, int64_t k, int e, DType dt, int device,
                        uintptr_t stream) {
    DeviceGuard guard(device);
    if (t <= 0 || k <= 0 || e <= 0) return;
    ExpertsArgs a{x, q, s, gs, offsets, off64 ? 1 : 0, e, t, k / 16, 0};
    constexpr int64_t kChunk = (int64_t)kQuantU * kThreads;
    const int64_t chunks = (t * (k / 16) + kChunk - 1) / kChunk;
    if (chunks > 0x7FFFFFFF) throw std::runtime_error("fp4_kernels: tensor too large");
    a.nchunks = (int)chunks;
    auto st = reinterpret_cast<cudaStream_t>(stream);
    auto run = [&](auto kern) {
        const int64_t grid = std::min<int64_t>(
            chunks, (int64_t)sm_count(device) * ctas_per_sm(reinterpret_cast<const void*>(kern), device));
        kern<<<(unsigned)grid, kThreads, 0, st>>>(a);
    };
    switch (dt) {
        case DType::F32: run(experts_quant_kernel<DType::F32, kQuantU>); break;
        case DType::F16: run(experts_quant_kernel<DType::F16, kQuantU>); break;
        case DType::BF16: run(experts_quant_kernel<DType::BF16, kQuantU>); break;
    }
    launch_check("scaled_fp4_grouped_quant (expert offsets) kernel", device);
}

void cuda_dequant(const uint8_t* q, const uint8_t* s, const float* gs, void* out, int64_t m,
                  int64_t k, DType dt, int device, uintptr_t stream) {
    DeviceGuard guard(device);
    launch_dequant(q, s, gs, out, m * k / 16, dt, reinterpret_cast<cudaStream_t>(stream));
    launch_check("dequantize_fp4 kernel", device);
}

void cuda_dequant_pair(const uint8_t* aq, const uint8_t* as, const uint8_t* bq, const uint8_t* bs,
                       void* out, int64_t m, int64_t n, int64_t k, DType dt, int device,
                       uintptr_t stream) {
    DeviceGuard guard(device);
    auto st = reinterpret_cast<cudaStream_t>(stream);
    const int64_t elem = dt == DType::F32 ? 4 : 2;
    launch_dequant(aq, as, nullptr, out, m * k / 16, dt, st);
    launch_dequant(bq, bs, nullptr, static_cast<char*>(out) + m * k * elem, n * k / 16, dt, st);
    launch_check("dequantize (GEMM operands) kernel", device);
}

}  // namespace fp4
