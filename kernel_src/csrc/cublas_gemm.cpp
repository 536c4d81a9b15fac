// cuBLAS GEMM with a device-resident alpha, through the cuBLAS library that torch already
// loaded (dlopen / dlsym; no link-time dependency and no cuBLAS headers needed).
//
// Why: scaled_fp4_mm's CUDA fast path dequantizes A and B to bf16 / fp16 (exactly) and needs
// out = dtype(RN_fp32(alpha * sum)) with alpha a device tensor. torch's matmul takes alpha
// only as a host number, and a bf16-output matmul followed by a scale rounds twice (outside
// the documented error bound). cublasGemmEx with CUBLAS_POINTER_MODE_DEVICE applies alpha
// to the fp32 accumulator in its epilogue and rounds once.
#include <dlfcn.h>

#include <climits>
#include <mutex>
#include <stdexcept>
#include <string>

#include "fp4_api.h"

namespace fp4 {
namespace {

// cublas_api.h / library_types.h enum values (stable ABI)
constexpr int kOpN = 0, kOpT = 1;
constexpr int kR32F = 0, kR16F = 2, kR16BF = 14;
constexpr int kCompute32F = 68;       // CUBLAS_COMPUTE_32F
constexpr int kGemmDefault = -1;      // CUBLAS_GEMM_DEFAULT
constexpr int kPointerModeHost = 0;   // CUBLAS_POINTER_MODE_HOST
constexpr int kPointerModeDevice = 1; // CUBLAS_POINTER_MODE_DEVICE
constexpr int kDisallowRPR = 16;      // CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION

using GemmExFn = int (*)(void*, int, int, int, int, int, const void*, const void*, int, int,
                         const void*, int, int, const void*, void*, int, int, int, int);
using SetIntFn = int (*)(void*, int);
using GetIntFn = int (*)(void*, int*);

struct Api {
    GemmExFn gemm = nullptr;
    SetIntFn set_ptr = nullptr;
    GetIntFn get_ptr = nullptr;
    SetIntFn set_math = nullptr;
    GetIntFn get_math = nullptr;
};

std::mutex g_mu;
Api g_api;
bool g_loaded = false;

int cuda_type(DType d) {
    switch (d) {
        case DType::F32: return kR32F;
        case DType::F16: return kR16F;
        default: return kR16BF;
    }
}

}  // namespace

std::string cublas_load(const std::string& lib) {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_loaded) return "";
    void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (!h) h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char* e = dlerror();
        return std::string("dlopen(") + lib + "): " + (e ? e : "failed");
    }
    Api a;
    a.gemm = reinterpret_cast<GemmExFn>(dlsym(h, "cublasGemmEx"));
    a.set_ptr = reinterpret_cast<SetIntFn>(dlsym(h, "cublasSetPointerMode_v2"));
    a.get_ptr = reinterpret_cast<GetIntFn>(dlsym(h, "cublasGetPointerMode_v2"));
    a.set_math = reinterpret_cast<SetIntFn>(dlsym(h, "cublasSetMathMode"));
    a.get_math = reinterpret_cast<GetIntFn>(dlsym(h, "cublasGetMathMode"));
    if (!a.gemm || !a.set_ptr || !a.get_ptr || !a.set_math || !a.get_math)
        return "cuBLAS symbols missing in " + lib;
    g_api = a;
    g_loaded = true;
    return "";
}

void cublas_gemm_nt(uintptr_t handle, int64_t m, int64_t n, int64_t k, const void* a, const void* b,
                    DType ab_dt, void* out, DType out_dt, const float* alpha_dev,
                    const float* zero_dev, float alpha_host) {
    Api api;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        if (!g_loaded) throw std::runtime_error("fp4_kernels: cuBLAS not loaded");
        api = g_api;
    }
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
        throw std::runtime_error("fp4_kernels: cublas path: dimension above 2^31 - 1");
    void* h = reinterpret_cast<void*>(handle);
    int old_ptr = 0, old_math = 0;
    if (api.get_ptr(h, &old_ptr) != 0 || api.get_math(h, &old_math) != 0)
        throw std::runtime_error("fp4_kernels: cublasGet{Pointer,Math}Mode failed");
    const bool host = alpha_dev == nullptr;
    const float zero_host = 0.0f;
    api.set_ptr(h, host ? kPointerModeHost : kPointerModeDevice);
    api.set_math(h, old_math | kDisallowRPR);
    // Column-major view: out^T [n, m] = B [n, k] . A^T; B and A are k-major (lda = ldb = k).
    const int st = api.gemm(h, kOpT, kOpN, (int)n, (int)m, (int)k, host ? &alpha_host : alpha_dev, b,
                            cuda_type(ab_dt), (int)k, a, cuda_type(ab_dt), (int)k, host ? &zero_host : zero_dev,
                            out, cuda_type(out_dt), (int)n, kCompute32F, kGemmDefault);
    api.set_ptr(h, old_ptr);
    api.set_math(h, old_math);
    if (st != 0)
        throw std::runtime_error("fp4_kernels: cublasGemmEx failed with status " +
                                 std::to_string(st));
}

}  // namespace fp4
