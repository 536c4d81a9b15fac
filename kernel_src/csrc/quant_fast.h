// Fast, bit-exact building blocks of the CUDA quantize kernel (host-compilable, so that the
// tests can check them on the CPU against nvfp4_math.h; see tests/kernel/test_fp4_fastmath.py).
//
// Every function here returns exactly what the corresponding rule of nvfp4_math.h returns;
// the comments say why. On the device the saturating operations are single PTX
// instructions (mul.rn.sat / fma.rn.sat: round once, then clamp to [0, 1], NaN -> +0); on the
// host they are emulated with the same semantics.
#pragma once
#include <cstdint>

#include "nvfp4_math.h"

#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

namespace fp4 {
namespace fast {

FP4_HD float absf(float x) {
#if defined(__CUDA_ARCH__)
    return fabsf(x);  // an operand modifier in SASS
#else
    return fabs_(x);
#endif
}

FP4_HD float sat01(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }  // NaN -> 0

FP4_HD float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
    return __fmaf_rn(a, b, c);
#else
    return std::fma(a, b, c);
#endif
}
FP4_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
// sat(RN(a * b))
FP4_HD float mul_sat(float a, float b) {
#if defined(__CUDA_ARCH__)
    float d;
    asm("mul.rn.sat.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
#else
    return sat01(a * b);
#endif
}
// sat(RN(a * b + c))
FP4_HD float fma_sat(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
    float d;
    asm("fma.rn.sat.f32 %0, %1, %2, %3;" : "=f"(d) : "f"(a), "f"(b), "f"(c));
    return d;
#else
    return sat01(std::fma(a, b, c));
#endif
}

// ---- amax / 6 ----------------------------------------------------------------------------
// RN(x / 6) for x >= 0 by one multiplication and one FMA correction (Markstein): q = RN(x *
// RN(1/6)), r = x - 6q (exact, FMA), RN(q + r * RN(1/6)). Correct for every x >= 2^-122
// (checked exhaustively: tests/kernel/fastmath_harness.cpp with stride 1); below, where the
// quotient is subnormal, it can be one ulp off, and Inf / NaN need the division, so those take
// the IEEE division (rare, and uniform across a block).
constexpr float kInv6 = 0x1.555556p-3f;
FP4_HD float div6(float x) {
    if (x >= 0x1p-122f && x <= 3.40282346638528859812e38f) {
        const float q = mul_rn(x, kInv6);
        const float r = fma_rn(-q, 6.0f, x);
        return fma_rn(r, kInv6, q);
    }
    return div_rn(x, 6.0f);
}

// ---- E2M1 magnitude by three saturating roundings -------------------------------------------
// For a = |x * rs| >= 0 (not NaN; +Inf allowed) the E2M1 magnitude code (0..7, round to
// nearest even, saturating at 6) is
//     rne(2 * min(a, 2)) + (rne(clamp(a, 2, 4)) - 2) + (rne(clamp(a, 4, 6) / 2) - 2)
// (on [0,2) the grid step is 0.5, on [2,4) 1, on [4,6] 2). With t1 = sat(a/2),
// t2 = sat(a/2 - 1), t3 = sat(a/2 - 2) (each one rounding of an exactly representable value
// wherever it is not saturated: a/2 - 1 is exact on [2,4], a/2 - 2 on [4,8]), the three
// terms are rne(4 t1), rne(2 t2), rne(t3). Each rne is one FP add onto the magic number
// M = 1.5 * 2^23 (unit spacing there, ties to even): r = M + c1 + c2 + c3. Adding the next
// term onto the running sum keeps the tie rule exact because whenever t2 > 0 the running sum
// is M + 4 and whenever t3 > 0 it is M + 6 (even, so a tie rounds the term itself to even).
// The result's bits are bits(M) + code.
constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
constexpr uint32_t kMagicBits = 0x4B400000u;

FP4_HD float e2m1_mag_magic(float a) {
    const float t1 = mul_sat(a, 0.5f);
    const float t2 = fma_sat(a, 0.5f, -1.0f);
    const float t3 = fma_sat(a, 0.5f, -2.0f);
    float r = fma_rn(t1, 4.0f, kMagic);
    r = fma_rn(t2, 2.0f, r);
    return add_rn(t3, r);
}

// sum over i < 8 of kMagicBits << 4i, modulo 2^32 (subtracted once from the packed sum)
constexpr uint32_t kMagicPack = (kMagicBits + (kMagicBits << 4) + (kMagicBits << 8) +
                                 (kMagicBits << 12) + (kMagicBits << 16) + (kMagicBits << 20) +
                                 (kMagicBits << 24) + (kMagicBits << 28));

// 8 elements: mag codes of |v[i]| * rs packed into nibbles (element 0 lowest). rs finite > 0,
// no NaN among v.
FP4_HD uint32_t e2m1_mag8(const float* v, float rs) {
    uint32_t acc = 0u - kMagicPack;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int i = 0; i < 8; ++i) acc += f2u(e2m1_mag_magic(mul_rn(absf(v[i]), rs))) << (4 * i);
    return acc;
}

// Merge sign bits into 8 packed magnitudes: `neg` has bit 4i+3 set when element i is
// negative (other bits clear). Elements whose magnitude code is 0 keep +0 (never -0):
// mag + 7 carries into bit 3 of a nibble exactly when the nibble is non-zero.
FP4_HD uint32_t merge_signs(uint32_t mag, uint32_t neg) {
    return (neg & (mag + 0x77777777u)) | mag;
}

// Sign bits of 8 fp32 values in the layout merge_signs expects.
FP4_HD uint32_t signs8_f32(const float* v) {
    uint32_t s = 0;
    for (int i = 0; i < 8; ++i) s |= (f2u(v[i]) >> 31) << (4 * i + 3);
    return s;
}

// Sign bits of 8 fp16/bf16 values held as 4 words (element 2j in the low half of word j).
FP4_HD uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
#if defined(__CUDA_ARCH__)
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
#else
    // default mode: byte k of the result is byte (sel >> 4k) & 7 of {b:a}; if bit 3 of that
    // selector nibble is set, the selected byte's sign bit is replicated over the byte
    const uint64_t src = ((uint64_t)b << 32) | a;
    uint32_t d = 0;
    for (int k = 0; k < 4; ++k) {
        const uint32_t n = (sel >> (4 * k)) & 0xFu;
        uint32_t byte = (uint32_t)(src >> (8 * (n & 7u))) & 0xFFu;
        if (n & 8u) byte = (byte & 0x80u) ? 0xFFu : 0u;
        d |= byte << (8 * k);
    }
    return d;
#endif
}
FP4_HD uint32_t signs8_16(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3) {
    // a = [sign(e0) x8, sign(e2) x8, hi byte of e1, hi byte of e3]; b likewise for e4..e7
    const uint32_t a = prmt(w0, w1, 0x73D9u), b = prmt(w2, w3, 0x73D9u);
    const uint32_t even = prmt(a, b, 0x5410u) & 0x08080808u;  // e0, e2, e4, e6 -> bit 8j+3
    return (prmt(a, b, 0x7632u) & 0x80808080u) | even;       // e1, e3, e5, e7 -> bit 8j+7
}

// Reference table entry: rs for scale byte b under global scale gs (nvfp4_math.h block_scale).
FP4_HD float rs_for_scale(uint32_t b, float gs) {
    const float sf = e4m3_to_float((uint8_t)b);
    return (sf == 0.0f || is_nan(sf)) ? 0.0f : div_rn(gs, sf);
}

}  // namespace fast
}  // namespace fp4
