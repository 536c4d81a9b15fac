// CUDA quantize / grouped quantize / dequantize kernels (memory-bound).
// One thread owns 8 consecutive elements (16 bytes of fp16/bf16 input); two neighbouring
// lanes own one 16-element block and exchange amax through one shuffle.
#include <cstdint>

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

// Two elements -> one byte, `lo` in the low nibble. Results identical to float_to_e2m1.
__device__ __forceinline__ uint32_t e2m1x2(float lo, float hi) {
#if FP4_HW_E2M1
    // Pre-sanitise so the hardware only sees finite values in [-6, 6]; canonicalise -0.
    lo = is_nan(lo) ? 0.0f : fminf(fmaxf(lo, -6.0f), 6.0f);
    hi = is_nan(hi) ? 0.0f : fminf(fmaxf(hi, -6.0f), 6.0f);
    uint16_t r;
    asm("{ .reg .b8 fp4tmp;\n"
        "  cvt.rn.satfinite.e2m1x2.f32 fp4tmp, %1, %2;\n"
        "  mov.b16 %0, {fp4tmp, 0}; }\n"
        : "=h"(r)
        : "f"(hi), "f"(lo));
    uint32_t b = r & 0xFFu;
    if ((b & 0x07u) == 0) b &= 0xF0u;
    if ((b & 0x70u) == 0) b &= 0x0Fu;
    return b;
#else
    return float_to_e2m1(lo) | (float_to_e2m1(hi) << 4);
#endif
}

template <DType DT>
__device__ __forceinline__ void load8(const void* x, int64_t h, float v[8]) {
    if constexpr (DT == DType::F32) {
        const float4* p = reinterpret_cast<const float4*>(x) + 2 * h;
        const float4 a = __ldcs(p), b = __ldcs(p + 1);
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
        v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else {
        const uint4 r = __ldcs(reinterpret_cast<const uint4*>(x) + h);
        const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint16_t l = (uint16_t)(w[i] & 0xFFFFu), u = (uint16_t)(w[i] >> 16);
            if constexpr (DT == DType::BF16) {
                v[2 * i] = bf16_bits_to_float(l);
                v[2 * i + 1] = bf16_bits_to_float(u);
            } else {
                v[2 * i] = half_bits_to_float(l);
                v[2 * i + 1] = half_bits_to_float(u);
            }
        }
    }
}

// t: global half-block index. Grouped launches look the matrix up by binary search over
// the descriptors' `start` (prefix sums of M*K/8, all even, so lane pairs never straddle).
template <DType DT, bool GROUPED>
__global__ void __launch_bounds__(kThreads)
    quant_kernel(QuantDesc single, const QuantDesc* __restrict__ table, int n, int64_t total) {
    const int64_t t = (int64_t)blockIdx.x * kThreads + threadIdx.x;
    const bool active = t < total;
    QuantDesc d = single;
    if constexpr (GROUPED) {
        int lo = 0, hi = n - 1;
        const int64_t tt = active ? t : 0;
        while (lo < hi) {
            const int mid = (lo + hi + 1) >> 1;
            if (table[mid].start <= tt) lo = mid; else hi = mid - 1;
        }
        d = table[lo];
    }
    const int64_t h = t - d.start;
    float v[8];
    float amax = 0.0f;
    bool has_nan = false;
    if (active) {
        load8<DT>(reinterpret_cast<const void*>(d.x), h, v);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const float a = fabs_(v[i]);
            has_nan |= is_nan(a);
            amax = a > amax ? a : amax;
        }
    }
    const float other = __shfl_xor_sync(0xFFFFFFFFu, amax, 1);
    const int other_nan = __shfl_xor_sync(0xFFFFFFFFu, (int)has_nan, 1);
    if (!active) return;
    amax = other > amax ? other : amax;
    has_nan = has_nan || other_nan;

    float rs;
    const uint8_t sb = block_scale(amax, has_nan, *reinterpret_cast<const float*>(d.gs), &rs);
    uint32_t packed = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i)
        packed |= e2m1x2(mul_rn(v[2 * i], rs), mul_rn(v[2 * i + 1], rs)) << (8 * i);
    __stcs(reinterpret_cast<unsigned int*>(d.q) + h, packed);
    if ((h & 1) == 0) {
        const int64_t b = h >> 1;
        int64_t off = b;
        if (d.swizzle) {
            const int64_t kb_n = d.k >> 4;
            off = swizzled_offset(b / kb_n, b % kb_n, (kb_n + 3) / 4 * 4);
        }
        reinterpret_cast<uint8_t*>(d.s)[off] = sb;
    }
}

template <DType DT>
__global__ void __launch_bounds__(kThreads)
    dequant_kernel(const uint8_t* __restrict__ q, const uint8_t* __restrict__ s,
                   const float* __restrict__ gsp, void* __restrict__ out, int64_t total) {
    const int64_t t = (int64_t)blockIdx.x * kThreads + threadIdx.x;
    if (t >= total) return;
    const uint32_t codes = __ldcs(reinterpret_cast<const unsigned int*>(q) + t);
    const float f = div_rn(e4m3_to_float(__ldg(s + (t >> 1))), __ldg(gsp));
    float v[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = mul_rn(e2m1_to_float((codes >> (4 * i)) & 0xFu), f);
    if constexpr (DT == DType::F32) {
        float4* p = reinterpret_cast<float4*>(out) + 2 * t;
        __stcs(p, make_float4(v[0], v[1], v[2], v[3]));
        __stcs(p + 1, make_float4(v[4], v[5], v[6], v[7]));
    } else {
        uint32_t w[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            if constexpr (DT == DType::BF16)
                w[i] = float_to_bf16_bits(v[2 * i]) | ((uint32_t)float_to_bf16_bits(v[2 * i + 1]) << 16);
            else
                w[i] = float_to_half_bits(v[2 * i]) | ((uint32_t)float_to_half_bits(v[2 * i + 1]) << 16);
        }
        __stcs(reinterpret_cast<uint4*>(out) + t, make_uint4(w[0], w[1], w[2], w[3]));
    }
}

inline unsigned grid_for(int64_t threads) {
    const int64_t blocks = (threads + kThreads - 1) / kThreads;
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
    launch_quant<false>(d, nullptr, 1, d.m * d.k / 8, dt, reinterpret_cast<cudaStream_t>(stream));
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
    const int64_t total = m * k / 8;
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
