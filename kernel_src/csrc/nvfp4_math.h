// NVFP4 numerics shared by the C++ CPU path and the CUDA kernels.
//
// This header is THE definition of the arithmetic (fp4_kernels/reference.py is
// the same rules written in torch). Every step is a single IEEE-754 binary32
// operation with round-to-nearest-even, no FMA contraction, no flush-to-zero,
// so CPU, CUDA and the torch reference produce identical bytes.
//
// Sources:
//  * NVFP4: NVIDIA, "NVFP4" (Blackwell) - E2M1 elements, one E4M3 scale per
//    16 elements, one FP32 global scale; PTX ISA 8.6+ `cvt.rn.satfinite.e2m1x2.f32`
//    (round to nearest even, saturate to +-6; the FIRST source operand goes to
//    the UPPER nibble).
//  * E2M1 and E4M3 encodings: OCP Microscaling Formats (MX) Specification v1.0,
//    sections 5.3.3 (FP4 E2M1: 0, 0.5, 1, 1.5, 2, 3, 4, 6; no Inf/NaN) and
//    5.3.2 / OFP8 spec (E4M3 "fn": bias 7, max 448, 0x7F/0xFF NaN, no Inf,
//    subnormals m * 2^-9).
//
// Rules for one 16-element block with FP32 global scale gs (all fp32):
//   xf        = float(x)                       (exact for fp16/bf16)
//   amax      = max |xf| over non-NaN elements  (0 for an all-zero block)
//   s         = gs * (amax / 6.0f)
//   scale     = 0x7F (E4M3 NaN) if the block holds a NaN or s is NaN,
//               else e4m3_rne(clamp(s, -448, 448))    (satfinite)
//   sf        = float(scale)
//   rs        = (sf == 0 || sf is NaN) ? 0 : gs / sf
//   code(x)   = e2m1_rne_satfinite(xf * rs); a NaN product encodes +0; every
//               element whose magnitude rounds to 0 encodes +0 (0x0, never 0x8)
// Dequantization:  f = sf / gs ;  out = dtype_rne(e2m1_value(code) * f)
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FP4_HD __host__ __device__ __forceinline__
#else
#define FP4_HD inline
#endif

namespace fp4 {

FP4_HD uint32_t f2u(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
#endif
}

FP4_HD float u2f(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    std::memcpy(&f, &u, 4);
    return f;
#endif
}

// Single IEEE ops that nvcc may not contract into FMA.
FP4_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
FP4_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

FP4_HD bool is_nan(float x) { return (f2u(x) & 0x7FFFFFFFu) > 0x7F800000u; }
FP4_HD float fabs_(float x) { return u2f(f2u(x) & 0x7FFFFFFFu); }

// ---- E4M3 (float8_e4m3fn) -------------------------------------------------
FP4_HD float e4m3_to_float(uint8_t b) {
    const uint32_t sign = (uint32_t)(b & 0x80u) << 24;
    const uint32_t e = (b >> 3) & 0xFu, m = b & 7u;
    if (e == 0xFu && m == 7u) return u2f(0x7FC00000u);  // NaN (canonical, positive)
    float mag;
    if (e == 0) mag = (float)m * 0.001953125f;             // subnormal: m * 2^-9 (exact)
    else mag = u2f(((e + 120u) << 23) | (m << 20));         // 2^(e-7) * (1 + m/8)
    return u2f(f2u(mag) | sign);
}

// Round to nearest even, saturating finite (|x| > 448 and +-Inf -> +-448), NaN -> 0x7F.
FP4_HD uint8_t float_to_e4m3_satfinite(float x) {
    const uint32_t u = f2u(x);
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t au = u & 0x7FFFFFFFu;
    if (au > 0x7F800000u) return 0x7F;
    if (au >= 0x43E00000u) return (uint8_t)(sign | 0x7E);   // >= 448 (incl. Inf): 448
    if (au < 0x3C800000u) {                                  // < 2^-6: subnormal range
        const float t = u2f(au) * 512.0f;                    // exact scaling by 2^9, t < 8
        uint32_t i = (uint32_t)t;                            // truncation
        const float frac = t - (float)i;                     // exact
        if (frac > 0.5f || (frac == 0.5f && (i & 1u))) ++i;  // ties to even; 8 -> 0x08 = 2^-6
        return (uint8_t)(sign | i);
    }
    // normal: keep 3 mantissa bits, round to nearest even on bit 20
    au += 0x7FFFFu + ((au >> 20) & 1u);
    au &= ~0xFFFFFu;
    const uint32_t e = (au >> 23) - 120u;   // >= 1, <= 15 (448 bound checked above)
    const uint32_t m = (au >> 20) & 7u;
    return (uint8_t)(sign | (e << 3) | m);
}

// ---- E2M1 ------------------------------------------------------------------
FP4_HD float e2m1_to_float(uint32_t code) {
    const uint32_t c = code & 7u;
    float mag;
    if (c == 0) mag = 0.0f;
    else if (c == 1) mag = 0.5f;
    else mag = u2f(((c >> 1) + 126u) << 23 | (c & 1u) << 22);  // 2^(e-1) * (1 + m/2)
    return (code & 8u) ? -mag : mag;
}

// Round to nearest even, saturate at +-6 (Inf -> +-6), NaN -> +0, zero results -> +0.
// The thresholds are the midpoints between neighbours; a tie goes to the even code.
FP4_HD uint32_t float_to_e2m1(float v) {
    if (is_nan(v)) return 0u;
    const float a = fabs_(v);
    const uint32_t m = (uint32_t)(a > 0.25f) + (uint32_t)(a >= 0.75f) + (uint32_t)(a > 1.25f) +
                       (uint32_t)(a >= 1.75f) + (uint32_t)(a > 2.5f) + (uint32_t)(a >= 3.5f) +
                       (uint32_t)(a > 5.0f);
    return (m != 0u && (f2u(v) >> 31)) ? (m | 8u) : m;
}

// ---- block rules -------------------------------------------------------------
// Scale byte and element multiplier for one block. amax is the max of |x| over the
// non-NaN elements, has_nan tells whether any element was NaN.
FP4_HD uint8_t block_scale(float amax, bool has_nan, float gs, float* rs) {
    const float s = mul_rn(gs, div_rn(amax, 6.0f));
    const uint8_t sb = has_nan ? (uint8_t)0x7F : float_to_e4m3_satfinite(s);
    const float sf = e4m3_to_float(sb);
    *rs = (sf == 0.0f || is_nan(sf)) ? 0.0f : div_rn(gs, sf);
    return sb;
}

// Offset of scale (row, kb) in the 128x4-tile swizzled layout used by CUTLASS-style
// FP4 GEMMs (vLLM / SGLang / FlashInfer "swizzled blockscale"): the padded
// [Mp = round_up(M,128), Kp = round_up(K/16,4)] matrix viewed as
// [Mp/128, 4, 32, Kp/4, 4] and permuted to [Mp/128, Kp/4, 32, 4, 4].
FP4_HD int64_t swizzled_offset(int64_t row, int64_t kb, int64_t kp) {
    const int64_t mt = row >> 7, kt = kb >> 2;
    return (((mt * (kp >> 2) + kt) * 32 + (row & 31)) * 4 + ((row & 127) >> 5)) * 4 + (kb & 3);
}

// ---- output conversions (round to nearest even) --------------------------------
FP4_HD uint16_t float_to_bf16_bits(float f) {
    uint32_t u = f2u(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0u;  // NaN -> canonical quiet NaN
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

FP4_HD float bf16_bits_to_float(uint16_t h) { return u2f((uint32_t)h << 16); }

FP4_HD float half_bits_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    uint32_t bits;
    if (e == 0x1F) bits = sign | 0x7F800000u | (m << 13);
    else if (e != 0) bits = sign | ((e + 112u) << 23) | (m << 13);
    else if (m == 0) bits = sign;
    else return u2f(f2u((float)m * 5.9604644775390625e-08f) | sign);  // m * 2^-24, exact
    return u2f(bits);
}

FP4_HD uint16_t float_to_half_bits(float f) {
    const uint32_t u = f2u(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t au = u & 0x7FFFFFFFu;
    if (au > 0x7F800000u) return 0x7E00u;                     // NaN -> canonical
    if (au >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); // rounds to >= 65536: Inf
    if (au < 0x38800000u) {                                   // < 2^-14: half subnormal
        const float t = u2f(au) * 16777216.0f;                // * 2^24, exact, t < 1024
        uint32_t i = (uint32_t)t;
        const float frac = t - (float)i;
        if (frac > 0.5f || (frac == 0.5f && (i & 1u))) ++i;
        return (uint16_t)(sign | i);
    }
    uint32_t r = au + 0xFFFu + ((au >> 13) & 1u);
    r &= ~0x1FFFu;
    return (uint16_t)(sign | (((r >> 23) - 112u) << 10) | ((r >> 13) & 0x3FFu));
}

}  // namespace fp4
