// The prepacked NVFP4 weight layout of the fused W4A16 kernel (cuda_pk.cu) and its register
// decode. Host and device code (the Python prepack in fp4_kernels/_prepack.py mirrors
// pk_decode and is checked against this header by tests/kernel/test_fp4_prepack.py).
//
// Layout (bytes), for a weight [N, K] padded with zero codes / zero scales to Np = 16 * Nt rows
// and Kp = 128 * U columns: unit (rt, u) = rows 16 rt .. 16 rt + 15, k = 128 u .. 128 u + 127,
// 1152 bytes at offset (rt * U + u) * 1152:
//   bytes [0, 1024): 2 x 32 lanes x 16 bytes of codes; lane L = 4 g + t, 16-byte piece h holds
//     the 32-bit words of mma k-steps s = 4 h .. 4 h + 3 (word s at byte 4 (s - 4 h));
//   bytes [1024, 1152): 32 lanes x 4 E4M3 scale bytes: (row g, block 2t), (row g + 8, block 2t),
//     (row g, block 2t + 1), (row g + 8, block 2t + 1), blocks counted inside the unit.
// Lane (g, t) owns k = 128 u + 32 t .. 128 u + 32 t + 31 of rows g and g + 8; k-step s covers
// k0..k3 = 32 t + 4 s + 0..3, and its word holds the mma.m16n8k16 A fragment of that step:
//   a0 = (row g: k0, k1), a1 = (row g+8: k0, k1), a2 = (row g: k2, k3), a3 = (row g+8: k2, k3)
// (first element in the low half). So one 16-byte load gives four k-steps of fragments and the
// activations of a step are the 4 consecutive elements k0..k3 (b0 = k0, k1; b1 = k2, k3).
//
// Decode: pk_decode turns a word into the four registers with each E2M1 code placed as a bf16
// bit pattern: magnitude bits (e1 e0 m) at bits 8 7 6, sign at bit 15 (and +16 for the high
// half), i.e. the value e2m1 * 2^-126 (a bf16 subnormal for 0.5). The word is NOT the plain
// nibbles: it is the unique w with pk_decode(w) = the wanted placement, a linear map over GF(2)
// (shifts, a rotate, XOR, AND with a constant) that the prepack inverts. Cost per 8 codes: 4
// shifts (one a 32-bit rotate, SHF.L.W) and 4 LOP3: register 0 is the word masked, 1 and 2 a
// shifted / rotated copy masked, 3 the XOR of two shifted copies masked. Without the rotate no
// shift / XOR / mask program does it in fewer than 5 + 5 (bench/NOTES.md, "v8" and "the decode
// in 8 instructions"); placing plain nibbles costs ~20.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define FP4_PK_HD __host__ __device__ __forceinline__
#else
#define FP4_PK_HD inline
#endif

namespace fp4 {

constexpr int kPkUnitK = 128;        // k per unit
constexpr int kPkUnitBytes = 1152;   // 1024 code bytes + 128 scale bytes
constexpr int kPkCodeBytes = 1024;
constexpr uint32_t kPkBf16Mask = 0x81C081C0u;  // bits 6, 7, 8, 15 of each half

FP4_PK_HD uint32_t pk_rotl(uint32_t w, int n) {
#if defined(__CUDA_ARCH__)
    return __funnelshift_l(w, w, n);
#else
    return (w << n) | (w >> (32 - n));
#endif
}

FP4_PK_HD void pk_decode(uint32_t w, uint32_t r[4]) {
    r[0] = w & kPkBf16Mask;
    r[1] = (w << 4) & kPkBf16Mask;
    r[2] = pk_rotl(w, 10) & kPkBf16Mask;
    r[3] = ((w >> 2) ^ (w << 6)) & kPkBf16Mask;
}

// bf16 placement -> fp16 placement (magnitude bits at 9..11, sign kept): (r | r << 3) masked.
FP4_PK_HD uint32_t pk_to_f16(uint32_t r) { return (r | (r << 3)) & 0x8E008E00u; }

}  // namespace fp4
