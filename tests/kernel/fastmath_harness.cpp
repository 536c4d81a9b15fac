// Host check of kernel_src/csrc/quant_fast.h (the CUDA quantize kernel's arithmetic) against
// nvfp4_math.h, the definition. Built and run by test_fp4_fastmath.py; prints "ok <counts>"
// or the first mismatches and exits 1.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "nvfp4_math.h"
#include "quant_fast.h"

using namespace fp4;

static int failures = 0;
static void fail(const char* what, uint32_t a, uint32_t got, uint32_t want) {
    if (failures++ < 10) std::printf("MISMATCH %s: input 0x%08x got 0x%08x want 0x%08x\n", what, a, got, want);
}

int main(int argc, char** argv) {
    const uint32_t stride = argc > 1 ? (uint32_t)std::strtoul(argv[1], nullptr, 10) : 61u;
    uint64_t n_div = 0, n_enc = 0, n_blk = 0;

    // 1. amax / 6 on every stride-th finite non-negative float, plus the ends of each binade
    for (uint64_t u = 0; u < 0x7F800000ull; u += stride) {
        for (uint32_t d : {0u, 1u}) {
            const uint32_t b = (uint32_t)u + d;
            const float x = u2f(b), got = fast::div6(x), want = x / 6.0f;
            if (f2u(got) != f2u(want)) fail("div6", b, f2u(got), f2u(want));
            ++n_div;
        }
    }
    for (uint32_t e = 0; e < 255; ++e)
        for (uint32_t m : {0u, 1u, 0x7FFFFEu, 0x7FFFFFu, 0x555555u, 0x2AAAAAu}) {
            const uint32_t b = (e << 23) | m;
            const float x = u2f(b), got = fast::div6(x), want = x / 6.0f;
            if (f2u(got) != f2u(want)) fail("div6", b, f2u(got), f2u(want));
            ++n_div;
        }
    for (float x : {INFINITY, NAN}) {
        const float got = fast::div6(x);
        if (!(got == INFINITY || (std::isnan(got) && std::isnan(x)))) fail("div6 special", f2u(x), f2u(got), 0);
    }

    // 2. E2M1 magnitude of a >= 0: every stride-th float up to 16, the thresholds and their
    //    neighbours, huge values and +Inf
    auto check_mag = [&](float a) {
        const uint32_t got = f2u(fast::e2m1_mag_magic(a)) - fast::kMagicBits;
        const uint32_t want = float_to_e2m1(a);
        if (got != want) fail("e2m1_mag", f2u(a), got, want);
        ++n_enc;
    };
    for (uint32_t u = 0; u <= 0x41800000u; u += stride) check_mag(u2f(u));
    for (float t : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f,
                    4.0f, 6.0f, 7.0f, 8.0f}) {
        const uint32_t b = f2u(t);
        for (int d = -3; d <= 3; ++d) check_mag(u2f(b + d));
    }
    for (float a : {1e30f, 3.4e38f, (float)INFINITY, 0.0f, 1e-45f, 1e-40f}) check_mag(a);

    // 3. whole blocks: packed codes from the fast pieces vs the definition, random data
    std::mt19937_64 rng(12345);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    std::uniform_int_distribution<int> expo(-40, 40);
    std::uniform_int_distribution<uint32_t> bits32;
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, 1e-40f, -1e-40f, 65504.0f, 3e38f};
    for (int trial = 0; trial < 200000; ++trial) {
        float v[16];
        uint16_t h[16];  // the bf16 patterns (inputs are bf16 values)
        const float mag = std::ldexp(1.0f, expo(rng));
        for (int i = 0; i < 16; ++i) {
            float f = uni(rng) * mag;
            if ((bits32(rng) & 31u) == 0) f = specials[bits32(rng) % 8];
            if ((bits32(rng) & 63u) == 0) f = u2f(bits32(rng));           // any pattern
            h[i] = (uint16_t)(f2u(f) >> 16);                                // truncate to bf16
            if ((h[i] & 0x7FFFu) > 0x7F80u) h[i] = 0x3F80u;                 // no NaN here
            v[i] = bf16_bits_to_float(h[i]);
        }
        float gs;
        switch (trial % 5) {
            case 0: gs = 448.0f * 6.0f / 5.0f; break;
            case 1: gs = std::ldexp(1.0f + uni(rng) * 0.5f, expo(rng)); break;
            case 2: gs = 1.0f; break;
            case 3: gs = -std::ldexp(1.5f, expo(rng) / 4); break;
            default: gs = std::ldexp(0.75f, expo(rng) * 3); break;
        }
        float amax = 0.0f;
        for (int i = 0; i < 16; ++i) amax = std::fabs(v[i]) > amax ? std::fabs(v[i]) : amax;
        // the definition
        float rs_def;
        const uint8_t sb_def = block_scale(amax, false, gs, &rs_def);
        uint32_t want[2] = {0, 0};
        for (int i = 0; i < 16; ++i) want[i / 8] |= float_to_e2m1(mul_rn(v[i], rs_def)) << (4 * (i % 8));
        // the kernel's pieces (hardware E4M3 conversion == float_to_e4m3_satfinite)
        const float s = mul_rn(gs, fast::div6(amax));
        const uint32_t sb = is_nan(s) ? 0x7Fu : float_to_e4m3_satfinite(s);
        const float rs = fast::rs_for_scale(sb, gs);
        if (sb != sb_def || f2u(rs) != f2u(rs_def)) fail("scale", f2u(amax), sb, sb_def);
        if (rs != 0.0f && rs <= 3.4028234e38f) {
            uint32_t w[8];
            for (int j = 0; j < 8; ++j) w[j] = (uint32_t)h[2 * j] | ((uint32_t)h[2 * j + 1] << 16);
            for (int half = 0; half < 2; ++half) {
                const uint32_t m = fast::e2m1_mag8(v + 8 * half, rs);
                const uint32_t n16 = fast::signs8_16(w[4 * half], w[4 * half + 1], w[4 * half + 2],
                                                     w[4 * half + 3]);
                const uint32_t n32 = fast::signs8_f32(v + 8 * half);
                if (n16 != n32) fail("signs8_16", w[4 * half], n16, n32);
                const uint32_t got = fast::merge_signs(m, n16);
                if (got != want[half]) fail("block codes", f2u(amax), got, want[half]);
            }
        }
        ++n_blk;
    }
    if (failures) {
        std::printf("FAILED %d\n", failures);
        return 1;
    }
    std::printf("ok div6 %llu e2m1 %llu blocks %llu\n", (unsigned long long)n_div,
                (unsigned long long)n_enc, (unsigned long long)n_blk);
    return 0;
}
