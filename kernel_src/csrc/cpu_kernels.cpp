// C++ CPU implementation (always built). Same rules as nvfp4_math.h, element by element.
#include <algorithm>
#include <thread>
#include <vector>

#include "fp4_api.h"
#include "nvfp4_math.h"

namespace fp4 {
namespace {

inline float load_elem(const void* base, int64_t i, DType dt) {
    switch (dt) {
        case DType::F32: return static_cast<const float*>(base)[i];
        case DType::F16: return half_bits_to_float(static_cast<const uint16_t*>(base)[i]);
        default: return bf16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    }
}

inline void store_elem(void* base, int64_t i, float v, DType dt) {
    switch (dt) {
        case DType::F32: static_cast<float*>(base)[i] = v; break;
        case DType::F16: static_cast<uint16_t*>(base)[i] = float_to_half_bits(v); break;
        default: static_cast<uint16_t*>(base)[i] = float_to_bf16_bits(v); break;
    }
}

// Run fn(row_begin, row_end) over [0, rows) on a few threads when the work is large.
template <class F>
void parallel_rows(int64_t rows, int64_t work_per_row, F fn) {
    const int64_t total = rows * std::max<int64_t>(work_per_row, 1);
    unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    int64_t nthreads = std::min<int64_t>({(int64_t)hw, 16, rows, total / (1 << 18) + 1});
    if (nthreads <= 1) { fn(0, rows); return; }
    std::vector<std::thread> pool;
    const int64_t chunk = (rows + nthreads - 1) / nthreads;
    for (int64_t b = 0; b < rows; b += chunk)
        pool.emplace_back(fn, b, std::min(rows, b + chunk));
    for (auto& t : pool) t.join();
}

void quant_one(const QuantDesc& d, DType dt) {
    const void* x = reinterpret_cast<const void*>(d.x);
    uint8_t* q = reinterpret_cast<uint8_t*>(d.q);
    uint8_t* s = reinterpret_cast<uint8_t*>(d.s);
    const float gs = *reinterpret_cast<const float*>(d.gs);
    const int64_t m = d.m, k = d.k, kb_n = k / 16, kp = (kb_n + 3) / 4 * 4;
    parallel_rows(m, k, [&](int64_t r0, int64_t r1) {
        float xf[16];
        for (int64_t r = r0; r < r1; ++r) {
            for (int64_t kb = 0; kb < kb_n; ++kb) {
                const int64_t base = r * k + kb * 16;
                float amax = 0.0f;
                bool has_nan = false;
                for (int i = 0; i < 16; ++i) {
                    xf[i] = load_elem(x, base + i, dt);
                    const float a = fabs_(xf[i]);
                    has_nan |= is_nan(a);
                    amax = a > amax ? a : amax;  // NaN compares false: ignored
                }
                float rs;
                const uint8_t sb = block_scale(amax, has_nan, gs, &rs);
                s[d.swizzle ? swizzled_offset(r, kb, kp) : r * kb_n + kb] = sb;
                for (int i = 0; i < 16; i += 2) {
                    const uint32_t lo = float_to_e2m1(mul_rn(xf[i], rs));
                    const uint32_t hi = float_to_e2m1(mul_rn(xf[i + 1], rs));
                    q[base / 2 + i / 2] = (uint8_t)(lo | (hi << 4));
                }
            }
        }
    });
}

}  // namespace

void cpu_quant(const QuantDesc* descs, int n, DType dt) {
    for (int i = 0; i < n; ++i) quant_one(descs[i], dt);
}

void cpu_dequant(const uint8_t* q, const uint8_t* s, const float* gs_ptr, void* out, int64_t m,
                 int64_t k, DType out_dt) {
    const float gs = *gs_ptr;
    const int64_t kb_n = k / 16;
    parallel_rows(m, k, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
            for (int64_t kb = 0; kb < kb_n; ++kb) {
                const float f = div_rn(e4m3_to_float(s[r * kb_n + kb]), gs);
                for (int i = 0; i < 16; ++i) {
                    const int64_t e = r * k + kb * 16 + i;
                    const uint32_t code = (q[e >> 1] >> ((e & 1) * 4)) & 0xFu;
                    store_elem(out, e, mul_rn(e2m1_to_float(code), f), out_dt);
                }
            }
    });
}

// out[i, j] = alpha * sum_k A[i,k] * B[j,k] with A, B the dequantized values WITHOUT the
// global scales (e2m1 * e4m3, exact in fp32); fp32 accumulation in increasing k.
void cpu_mm(const uint8_t* aq, const uint8_t* bq, const uint8_t* as, const uint8_t* bs,
            const float* alpha_ptr, void* out, int64_t m, int64_t n, int64_t k, DType out_dt) {
    const float alpha = *alpha_ptr;
    const int64_t kb_n = k / 16;
    auto deq = [&](const uint8_t* q, const uint8_t* s, int64_t rows) {
        std::vector<float> v((size_t)(rows * k));
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < k; ++c) {
                const int64_t e = r * k + c;
                const uint32_t code = (q[e >> 1] >> ((e & 1) * 4)) & 0xFu;
                v[(size_t)e] = e2m1_to_float(code) * e4m3_to_float(s[r * kb_n + c / 16]);
            }
        return v;
    };
    const std::vector<float> a = deq(aq, as, m), b = deq(bq, bs, n);
    parallel_rows(m, n * k, [&](int64_t r0, int64_t r1) {
        for (int64_t i = r0; i < r1; ++i)
            for (int64_t j = 0; j < n; ++j) {
                const float* ar = a.data() + i * k;
                const float* br = b.data() + j * k;
                float acc = 0.0f;
                for (int64_t c = 0; c < k; ++c) acc += ar[c] * br[c];
                store_elem(out, i * n + j, mul_rn(acc, alpha), out_dt);
            }
    });
}

// Fused-GEMM problem (see fp4_api.h) on the CPU: out[m, n] = alpha_e * sum_k A[m,k] * B_e[n,k]
// with A either NVFP4 (e2m1 * e4m3, exact in fp32) or bf16 / fp16 values, B_e = e2m1 * e4m3;
// every product is exact in fp32 and the sum runs in increasing k in fp32.
void cpu_skinny_mm(const SkinnyProblem& p) {
    const int64_t K = p.k, N = p.n, T = p.t, kb_n = K / 16;
    const bool grouped = p.offsets != nullptr;
    const int E = grouped ? p.e : 1;
    auto offset = [&](int i) -> int64_t {
        if (!grouped) return i == 0 ? 0 : T;
        const int64_t v = p.offsets_int64 ? static_cast<const int64_t*>(p.offsets)[i]
                                          : (int64_t) static_cast<const int32_t*>(p.offsets)[i];
        return std::min<int64_t>(std::max<int64_t>(v, 0), T);
    };
    // activations as fp32, row by row
    std::vector<float> a((size_t)(T * K));
    parallel_rows(T, K, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = 0; c < K; ++c) {
                const int64_t e = r * K + c;
                float v;
                if (p.a_kind == 0) {
                    const uint8_t* q = static_cast<const uint8_t*>(p.a);
                    const uint32_t code = (q[e >> 1] >> ((e & 1) * 4)) & 0xFu;
                    v = e2m1_to_float(code) * e4m3_to_float(p.a_scale[r * kb_n + c / 16]);
                } else {
                    v = load_elem(p.a, e, p.a_kind == 1 ? DType::BF16 : DType::F16);
                }
                a[(size_t)e] = v;
            }
    });
    for (int ex = 0; ex < E; ++ex) {
        const int64_t lo = offset(ex), hi = std::max(lo, offset(ex + 1));
        if (hi <= lo) continue;
        const uint8_t* bq = p.b_q + (int64_t)ex * N * (K / 2);
        const uint8_t* bs = p.b_scale + (int64_t)ex * N * kb_n;
        const float alpha = p.alpha ? p.alpha[grouped && p.alpha_per_expert ? ex : 0] : p.alpha_value;
        std::vector<float> b((size_t)(N * K));
        parallel_rows(N, K, [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r)
                for (int64_t c = 0; c < K; ++c) {
                    const int64_t e = r * K + c;
                    const uint32_t code = (bq[e >> 1] >> ((e & 1) * 4)) & 0xFu;
                    b[(size_t)e] = e2m1_to_float(code) * e4m3_to_float(bs[r * kb_n + c / 16]);
                }
        });
        parallel_rows(hi - lo, N * K, [&](int64_t r0, int64_t r1) {
            for (int64_t i = lo + r0; i < lo + r1; ++i)
                for (int64_t j = 0; j < N; ++j) {
                    const float* ar = a.data() + i * K;
                    const float* br = b.data() + j * K;
                    float acc = 0.0f;
                    for (int64_t c = 0; c < K; ++c) acc += ar[c] * br[c];
                    store_elem(p.out, i * N + j, mul_rn(acc, alpha), p.out_dt);
                }
        });
    }
}

}  // namespace fp4
