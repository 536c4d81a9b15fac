// CUDA quantize / grouped quantize / dequantize kernels (memory-bound).
// One thread owns 8 consecutive elements (16 bytes of fp16/bf16 input); two neighbouring
// lanes own one 16-element block and exchange amax through one shuffle.
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda_common.cuh"
#include "fp4_api.h"
#include "nvfp4_math.h"

// Hardware E2M1 conversion (cvt.rn.satfinite.e2m1x2.f32): PTX ISA 8.6+, architecture- or
// family-specific Blackwell targets (sm_100a/f, sm_103a/f, sm_110a/f, sm_120a/f, sm_121a/f).
// Same condition as CUDA 13's cuda_fp8.h (__CUDA_FP8_INTERNAL_CAN_RELY_ON_PTX_FOR_SHORTTYPESCVT__)
// plus the CUDA 12.8 feature macros.
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
constexpr int kUnroll = 2;  // 16-element blocks per thread (all loads issued before compute)

// |v| -> E2M1 magnitude code, RNE, saturating; v must not be NaN. Same results as
// float_to_e2m1 (checked exhaustively on the host by the tests' reference comparison):
// on [0,2) the code is rne(2a), on [2,4) 2 + rne(a), on [4,6] 4 + rne(a/2); the products are
// exact and fma(.., 1.5*2^23) rounds them to an integer with ties to even.
__device__ __forceinline__ uint32_t e2m1_code_fast(float v) {
    const float a = fminf(fabsf(v), 6.0f);
    const bool lt2 = a < 2.0f, lt4 = a < 4.0f;
    const float mult = lt2 ? 2.0f : (lt4 ? 1.0f : 0.5f);
    const uint32_t base = lt2 ? 0u : (lt4 ? 2u : 4u);
    const uint32_t m = (f2u(__fmaf_rn(a, mult, 12582912.0f)) & 7u) + base;
    return m | ((f2u(v) >> 28) & 8u);
}

__device__ __forceinline__ float max_nan(float a, float b) {
#if __CUDA_ARCH__ >= 800
    float d;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
#else
    return (a != a || b != b) ? __int_as_float(0x7FFFFFFF) : fmaxf(a, b);
#endif
}

// Clear the sign of every zero-magnitude nibble (-0 -> +0) in 8 packed codes.
__device__ __forceinline__ uint32_t canon_zero(uint32_t w) {
    const uint32_t z = w & 0x77777777u;
    return w & (0x77777777u | ((z + 0x77777777u) & 0x88888888u));
}

// 8 values (already multiplied by rs, none NaN) -> 8 packed codes, element 0 lowest.
__device__ __forceinline__ uint32_t encode8(const float* v) {
    uint32_t w = 0;
#if FP4_HW_E2M1
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float lo = fminf(fmaxf(v[2 * i], -6.0f), 6.0f);
        const float hi = fminf(fmaxf(v[2 * i + 1], -6.0f), 6.0f);
        uint16_t r;
        asm("{ .reg .b8 fp4tmp;\n"
            "  cvt.rn.satfinite.e2m1x2.f32 fp4tmp, %1, %2;\n"
            "  mov.b16 %0, {fp4tmp, 0}; }\n"
            : "=h"(r)
            : "f"(hi), "f"(lo));
        w |= (uint32_t)(r & 0xFFu) << (8 * i);
    }
#else
#pragma unroll
    for (int i = 0; i < 8; ++i) w |= e2m1_code_fast(v[i]) << (4 * i);
#endif
    return canon_zero(w);
}

template <DType DT>
__device__ __forceinline__ void load16(const void* x, int64_t b, float v[16]) {
    if constexpr (DT == DType::F32) {
        const float4* p = reinterpret_cast<const float4*>(x) + 4 * b;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float4 a = __ldg(p + i);
            v[4 * i] = a.x; v[4 * i + 1] = a.y; v[4 * i + 2] = a.z; v[4 * i + 3] = a.w;
        }
    } else {
        const uint4* p = reinterpret_cast<const uint4*>(x) + 2 * b;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const uint4 r = __ldg(p + j);
            const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                if constexpr (DT == DType::BF16) {
                    v[8 * j + 2 * i] = u2f(w[i] << 16);
                    v[8 * j + 2 * i + 1] = u2f(w[i] & 0xFFFF0000u);
                } else {
                    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
                    v[8 * j + 2 * i] = f.x;
                    v[8 * j + 2 * i + 1] = f.y;
                }
            }
        }
    }
}

// One thread per 16-element block, kUnroll blocks per thread (strided by the CTA size so
// that every load instruction of a warp covers contiguous memory).
template <DType DT, bool GROUPED>
__global__ void __launch_bounds__(kThreads)
    quant_kernel(QuantDesc single, const QuantDesc* __restrict__ table, int n, int64_t total) {
    const int64_t first = (int64_t)blockIdx.x * kThreads * kUnroll + threadIdx.x;
    float v[kUnroll][16];
    QuantDesc d[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
        const int64_t t = first + u * kThreads;  // global block index
        d[u] = single;
        if constexpr (GROUPED) {
            int lo = 0, hi = n - 1;
            const int64_t tt = t < total ? t : 0;
            while (lo < hi) {
                const int mid = (lo + hi + 1) >> 1;
                if (table[mid].start <= tt) lo = mid; else hi = mid - 1;
            }
            d[u] = table[lo];
        }
        if (t < total) load16<DT>(reinterpret_cast<const void*>(d[u].x), t - d[u].start, v[u]);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
        const int64_t t = first + u * kThreads;
        if (t >= total) break;
        const int64_t b = t - d[u].start;  // block index inside its matrix
        // NaN-propagating max: a NaN anywhere makes amax NaN, and a block holding a NaN
        // gets scale 0x7F whatever its other values are, so amax is not needed then.
        float amax = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; ++i) amax = max_nan(amax, fabsf(v[u][i]));
        const bool has_nan = amax != amax;
        float rs;
        const uint8_t sb = block_scale(amax, has_nan, __ldg(reinterpret_cast<const float*>(d[u].gs)), &rs);
        uint2 packed = make_uint2(0u, 0u);  // rs == 0: every element encodes +0
        if (rs != 0.0f) {
            float p[16];
#pragma unroll
            for (int i = 0; i < 16; ++i) p[i] = mul_rn(v[u][i], rs);
            if (rs <= 3.402823466e38f) {  // finite rs and no NaN in the block: no NaN products
                packed.x = encode8(p);
                packed.y = encode8(p + 8);
            } else {                        // rs = +Inf: 0 * Inf = NaN must encode +0
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    packed.x |= float_to_e2m1(p[i]) << (4 * i);
                    packed.y |= float_to_e2m1(p[8 + i]) << (4 * i);
                }
            }
        }
        reinterpret_cast<uint2*>(d[u].q)[b] = packed;
        int64_t off = b;
        if (d[u].swizzle) {
            const int64_t kb_n = d[u].k >> 4;
            off = swizzled_offset(b / kb_n, b % kb_n, (kb_n + 3) / 4 * 4);
        }
        reinterpret_cast<uint8_t*>(d[u].s)[off] = sb;
    }
}

// byte -> the two E2M1 values it holds (low nibble first), as floats.
__device__ __forceinline__ float2 lut_entry(int byte) {
    return make_float2(e2m1_to_float(byte & 15), e2m1_to_float(byte >> 4));
}

template <DType DT>
__global__ void __launch_bounds__(kThreads)
    dequant_kernel(const uint8_t* __restrict__ q, const uint8_t* __restrict__ s,
                   const float* __restrict__ gsp, void* __restrict__ out, int64_t total) {
    __shared__ float2 lut[256];
    lut[threadIdx.x] = lut_entry(threadIdx.x);
    const int64_t first = (int64_t)blockIdx.x * kThreads * kUnroll + threadIdx.x;
    uint2 codes[kUnroll];
    uint8_t sb[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
        const int64_t t = first + u * kThreads;
        if (t < total) {
            codes[u] = __ldg(reinterpret_cast<const uint2*>(q) + t);
            sb[u] = __ldg(s + t);
        }
    }
    const float gs = __ldg(gsp);
    __syncthreads();
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
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

inline unsigned grid_for(int64_t work) {  // work items (16-element blocks)
    const int64_t per_cta = (int64_t)kThreads * kUnroll;
    const int64_t blocks = (work + per_cta - 1) / per_cta;
    if (blocks > 0x7FFFFFFF) throw std::runtime_error("fp4_kernels: tensor too large");
    return (unsigned)blocks;
}

template <bool GROUPED>
void launch_quant(const QuantDesc& single, const QuantDesc* table, int n, int64_t total,
                  DType dt, cudaStream_t st) {
    const unsigned g = grid_for(total);
    switch (dt) {
        case DType::F32: quant_kernel<DType::F32, GROUPED><<<g, kThreads, 0, st>>>(single, table, n, total); break;
        case DType::F16: quant_kernel<DType::F16, GROUPED><<<g, kThreads, 0, st>>>(single, table, n, total); break;
        case DType::BF16: quant_kernel<DType::BF16, GROUPED><<<g, kThreads, 0, st>>>(single, table, n, total); break;
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
    launch_quant<false>(d, nullptr, 1, d.m * d.k / 16, dt, reinterpret_cast<cudaStream_t>(stream));
    launch_check("scaled_fp4_quant kernel", device);
}

void cuda_grouped_quant(const QuantDesc* descs_dev, int n, int64_t total, DType dt, int device,
                        uintptr_t stream) {
    DeviceGuard guard(device);
    QuantDesc none{};
    launch_quant<true>(none, descs_dev, n, total, dt, reinterpret_cast<cudaStream_t>(stream));
    launch_check("scaled_fp4_grouped_quant kernel", device);
}

void cuda_dequant(const uint8_t* q, const uint8_t* s, const float* gs, void* out, int64_t m,
                  int64_t k, DType dt, int device, uintptr_t stream) {
    DeviceGuard guard(device);
    const int64_t total = m * k / 16;
    const unsigned g = grid_for(total);
    auto st = reinterpret_cast<cudaStream_t>(stream);
    switch (dt) {
        case DType::F32: dequant_kernel<DType::F32><<<g, kThreads, 0, st>>>(q, s, gs, out, total); break;
        case DType::F16: dequant_kernel<DType::F16><<<g, kThreads, 0, st>>>(q, s, gs, out, total); break;
        case DType::BF16: dequant_kernel<DType::BF16><<<g, kThreads, 0, st>>>(q, s, gs, out, total); break;
    }
    launch_check("dequantize_fp4 kernel", device);
}

}  // namespace fp4
