// Device helpers shared by the prepacked-weight kernels (cuda_pk.cu: mma.sync, cuda_wg.cu: wgmma):
// the block scales as bf16 / fp16 pairs, the scaled decode and the output store.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "fp4_api.h"
#include "nvfp4_math.h"

namespace fp4 {
namespace {

// Two E4M3 scale bytes (low byte: row g, next: row g + 8) -> a register holding both scales
// times 2^119 (bf16) or 2^7 (fp16). Exact; NaN stays NaN.
template <bool BF16>
__device__ __forceinline__ uint32_t pk_scale_pair(uint32_t two) {
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
        return *reinterpret_cast<const uint32_t*>(&b);
    } else {
        const __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&h), __half2half2(__ushort_as_half(0x5800)));
        return *reinterpret_cast<const uint32_t*>(&r);
    }
}

// x (two placed codes) times the low (row g) or high (row g + 8) scale of the pair register.
template <bool BF16, bool HI>
__device__ __forceinline__ uint32_t pk_mul(uint32_t x, uint32_t sc) {
    if constexpr (BF16) {
        const __nv_bfloat162 s = *reinterpret_cast<const __nv_bfloat162*>(&sc);
        const __nv_bfloat162 r = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&x),
                                         HI ? __high2bfloat162(s) : __low2bfloat162(s));
        return *reinterpret_cast<const uint32_t*>(&r);
    } else {
        const __half2 s = *reinterpret_cast<const __half2*>(&sc);
        const __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&x), HI ? __high2half2(s) : __low2half2(s));
        return *reinterpret_cast<const uint32_t*>(&r);
    }
}

__device__ __forceinline__ void pk_store(void* out, int dt, int64_t off, float v) {
    if (dt == (int)DType::F32) reinterpret_cast<float*>(out)[off] = v;
    else if (dt == (int)DType::F16) reinterpret_cast<__half*>(out)[off] = __float2half_rn(v);
    else reinterpret_cast<__nv_bfloat16*>(out)[off] = __float2bfloat16_rn(v);
}

}  // namespace
}  // namespace fp4
