// NVFP4 x NVFP4 -> bf16/fp16/fp32 GEMM for SM80+ (used on SM90 and SM120 alike).
//
// out[M, N] = alpha * A[M, K] . B[N, K]^T where A, B are the e2m1 * e4m3 values without
// the global scales. Each 128x64 tile of A and B is loaded as packed bytes, dequantized
// exactly to bf16 in shared memory (an e2m1 value times an e4m3 scale has at most 6
// significant bits and lies in [2^-10, 2688], so bf16 holds it exactly) and multiplied
// with mma.sync.m16n8k16 bf16 tensor-core instructions accumulating in fp32.
// CTA tile 128x128x64, 8 warps (2 x 4), warp tile 64x32; the next tile's packed bytes
// are fetched into registers while the current tile is multiplied.
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda_common.cuh"
#include "fp4_api.h"
#include "nvfp4_math.h"

namespace fp4 {
namespace {

constexpr int BM = 128, BN = 128, BK = 64, LDS = BK + 8, kThreads = 256;

__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
    uint32_t d;
    // fma with -0.0 addend == exact product (the product is exact here); sm_80+.
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
    return d;
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* smem) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

__device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <DType DT>
__device__ __forceinline__ void store2(void* out, int64_t M, int64_t N, int64_t row, int64_t col,
                                       float v0, float v1) {
    if (row >= M || col >= N) return;
    const int64_t off = row * N + col;
    const bool pair = (col + 1 < N) && ((N & 1) == 0);
    if constexpr (DT == DType::F32) {
        float* o = reinterpret_cast<float*>(out) + off;
        if (pair) *reinterpret_cast<float2*>(o) = make_float2(v0, v1);
        else { o[0] = v0; if (col + 1 < N) o[1] = v1; }
    } else {
        const uint16_t h0 = DT == DType::BF16 ? float_to_bf16_bits(v0) : float_to_half_bits(v0);
        const uint16_t h1 = DT == DType::BF16 ? float_to_bf16_bits(v1) : float_to_half_bits(v1);
        uint16_t* o = reinterpret_cast<uint16_t*>(out) + off;
        if (pair) *reinterpret_cast<uint32_t*>(o) = h0 | ((uint32_t)h1 << 16);
        else { o[0] = h0; if (col + 1 < N) o[1] = h1; }
    }
}

template <DType DT>
__global__ void __launch_bounds__(kThreads, 2)
    mm_kernel(const uint8_t* __restrict__ aq, const uint8_t* __restrict__ bq,
              const uint8_t* __restrict__ as, const uint8_t* __restrict__ bs,
              const float* __restrict__ alpha_p, void* __restrict__ out, int64_t M, int64_t N,
              int64_t K) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    __trap();
#else
    __shared__ __align__(16) uint16_t As[BM * LDS];
    __shared__ __align__(16) uint16_t Bs[BN * LDS];
    __shared__ uint32_t lut[256];  // packed byte -> bf16x2 (low nibble in the low half)

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 2, wn = warp & 3;
    const int64_t m0 = (int64_t)blockIdx.y * BM, n0 = (int64_t)blockIdx.x * BN;
    {
        const uint32_t lo = f2u(e2m1_to_float(tid & 15)) >> 16;
        const uint32_t hi = f2u(e2m1_to_float(tid >> 4)) >> 16;
        lut[tid] = lo | (hi << 16);
    }
    const int64_t kb_n = K / 16, KT = K / BK;
    const int lrow = tid >> 1, lhalf = tid & 1;  // loader: one row-half (32 elements) each
    const bool a_ok = m0 + lrow < M, b_ok = n0 + lrow < N;
    const uint8_t* a_src = aq + (m0 + lrow) * (K / 2) + lhalf * 16;
    const uint8_t* b_src = bq + (n0 + lrow) * (K / 2) + lhalf * 16;
    const uint8_t* as_src = as + (m0 + lrow) * kb_n + lhalf * 2;
    const uint8_t* bs_src = bs + (n0 + lrow) * kb_n + lhalf * 2;

    uint4 ra = make_uint4(0, 0, 0, 0), rb = make_uint4(0, 0, 0, 0);
    uint32_t sa = 0, sb = 0;
    auto gload = [&](int64_t kt) {
        if (a_ok) {
            ra = __ldg(reinterpret_cast<const uint4*>(a_src + kt * 32));
            sa = __ldg(reinterpret_cast<const unsigned short*>(as_src + kt * 4));
        }
        if (b_ok) {
            rb = __ldg(reinterpret_cast<const uint4*>(b_src + kt * 32));
            sb = __ldg(reinterpret_cast<const unsigned short*>(bs_src + kt * 4));
        }
    };
    auto dequant_store = [&](const uint4& r, uint32_t s2, uint16_t* dst) {
        const uint32_t s0 = f2u(e4m3_to_float(s2 & 0xFFu)) >> 16;  // exact in bf16
        const uint32_t s1 = f2u(e4m3_to_float(s2 >> 8)) >> 16;
        const uint32_t sc0 = s0 | (s0 << 16), sc1 = s1 | (s1 << 16);
        const uint32_t w[4] = {r.x, r.y, r.z, r.w};
        uint32_t o[16];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j)
                o[i * 4 + j] = bf16x2_mul(lut[(w[i] >> (8 * j)) & 0xFFu], i < 2 ? sc0 : sc1);
        uint4* d = reinterpret_cast<uint4*>(dst + lrow * LDS + lhalf * 32);
#pragma unroll
        for (int i = 0; i < 4; ++i) d[i] = make_uint4(o[4 * i], o[4 * i + 1], o[4 * i + 2], o[4 * i + 3]);
    };

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;

    gload(0);
    __syncthreads();  // lut ready
    dequant_store(ra, sa, As);
    dequant_store(rb, sb, Bs);
    __syncthreads();

    for (int64_t kt = 0; kt < KT; ++kt) {
        if (kt + 1 < KT) gload(kt + 1);
#pragma unroll
        for (int ks = 0; ks < BK / 16; ++ks) {
            uint32_t af[4][4], bf[2][4];
#pragma unroll
            for (int mi = 0; mi < 4; ++mi)
                ldmatrix_x4(af[mi], As + (wm * 64 + mi * 16 + (lane & 15)) * LDS + ks * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int nj = 0; nj < 2; ++nj)
                ldmatrix_x4(bf[nj], Bs + (wn * 32 + nj * 16 + (lane & 7) + ((lane >> 4) << 3)) * LDS +
                                        ks * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
            for (int mi = 0; mi < 4; ++mi)
#pragma unroll
                for (int ni = 0; ni < 4; ++ni)
                    mma_bf16(acc[mi][ni], af[mi], bf[ni >> 1][(ni & 1) * 2], bf[ni >> 1][(ni & 1) * 2 + 1]);
        }
        if (kt + 1 < KT) {
            __syncthreads();
            dequant_store(ra, sa, As);
            dequant_store(rb, sb, Bs);
            __syncthreads();
        }
    }

    const float alpha = __ldg(alpha_p);
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            const int64_t row = m0 + wm * 64 + mi * 16 + (lane >> 2);
            const int64_t col = n0 + wn * 32 + ni * 8 + (lane & 3) * 2;
            store2<DT>(out, M, N, row, col, mul_rn(acc[mi][ni][0], alpha), mul_rn(acc[mi][ni][1], alpha));
            store2<DT>(out, M, N, row + 8, col, mul_rn(acc[mi][ni][2], alpha), mul_rn(acc[mi][ni][3], alpha));
        }
#endif
}

}  // namespace

void cuda_mm(const uint8_t* aq, const uint8_t* bq, const uint8_t* as, const uint8_t* bs,
             const float* alpha, void* out, int64_t m, int64_t n, int64_t k, DType dt, int device,
             uintptr_t stream) {
    DeviceGuard guard(device);
    if (device_cc(device) < 80)
        throw std::runtime_error("fp4_kernels: scaled_fp4_mm needs compute capability >= 8.0 "
                                 "(bf16 tensor cores)");
    if (k % BK) throw std::runtime_error("fp4_kernels: cuda_mm needs K % 64 == 0");
    if ((n + BN - 1) / BN > 0x7FFFFFFF || (m + BM - 1) / BM > 65535)
        throw std::runtime_error("fp4_kernels: scaled_fp4_mm: M too large (max 8388480 rows)");
    const dim3 grid((unsigned)((n + BN - 1) / BN), (unsigned)((m + BM - 1) / BM));
    auto st = reinterpret_cast<cudaStream_t>(stream);
    switch (dt) {
        case DType::F32: mm_kernel<DType::F32><<<grid, kThreads, 0, st>>>(aq, bq, as, bs, alpha, out, m, n, k); break;
        case DType::F16: mm_kernel<DType::F16><<<grid, kThreads, 0, st>>>(aq, bq, as, bs, alpha, out, m, n, k); break;
        case DType::BF16: mm_kernel<DType::BF16><<<grid, kThreads, 0, st>>>(aq, bq, as, bs, alpha, out, m, n, k); break;
    }
    launch_check("scaled_fp4_mm kernel", device);
}

}  // namespace fp4
