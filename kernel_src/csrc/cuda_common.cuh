// Helpers shared by the CUDA translation units.
#pragma once
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace fp4 {

inline void cuda_check(cudaError_t e, const char* what) {
    if (e != cudaSuccess)
        throw std::runtime_error(std::string("fp4_kernels: ") + what + ": " +
                                 cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

// Makes `device` current for the scope and restores the previous device.
struct DeviceGuard {
    int prev = -1;
    explicit DeviceGuard(int device) {
        cuda_check(cudaGetDevice(&prev), "cudaGetDevice");
        if (prev != device) cuda_check(cudaSetDevice(device), "cudaSetDevice");
    }
    ~DeviceGuard() {
        int cur = -1;
        if (cudaGetDevice(&cur) == cudaSuccess && cur != prev && prev >= 0) cudaSetDevice(prev);
    }
};

inline int device_cc(int device) {
    int major = 0, minor = 0;
    cuda_check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
               "cudaDeviceGetAttribute");
    cuda_check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
               "cudaDeviceGetAttribute");
    return major * 10 + minor;
}

#ifndef FP4_CUDA_ARCHS
#define FP4_CUDA_ARCHS ""
#endif

inline void launch_check(const char* kernel, int device) {
    const cudaError_t e = cudaGetLastError();
    if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction)
        throw std::runtime_error(std::string("fp4_kernels: ") + kernel +
                                 ": no kernel image for this GPU (compute capability " +
                                 std::to_string(device_cc(device)) +
                                 "); this build holds SASS for: " + FP4_CUDA_ARCHS +
                                 ". Rebuild with TORCH_CUDA_ARCH_LIST naming this GPU.");
    cuda_check(e, kernel);
}

}  // namespace fp4
