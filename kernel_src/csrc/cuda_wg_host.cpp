// Host-side pieces of the wgmma GEMM (cuda_wg.cu) that need no device code: whether this build
// and a device can run it, and its stream-ordered scratch.
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "cuda_common.cuh"
#include "fp4_api.h"

namespace fp4 {

bool wg_built() {
    // the build's targets (FP4_CUDA_ARCHS, e.g. "sm_90a,sm_120a") hold sm_90a SASS
    const std::string archs = FP4_CUDA_ARCHS;
    size_t pos = 0;
    while ((pos = archs.find("sm_90a", pos)) != std::string::npos) {
        const size_t end = pos + 6;
        if (end == archs.size() || archs[end] == ',' || archs[end] == ';' || archs[end] == ' ') return true;
        pos = end;
    }
    return false;
}

bool wg_supported(int device) {
    static std::mutex mu;
    static std::unordered_map<int, bool> cache;
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(device);
    if (it != cache.end()) return it->second;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();
        count = 0;
    }
    const bool ok = wg_built() && device >= 0 && device < count && device_cc(device) == 90;
    cache[device] = ok;
    return ok;
}

// The permuted activations live in the device's default memory pool, allocated and freed in
// stream order around the two launches (so CUDA graph capture records them as memory nodes).
// The pool keeps up to 256 MiB cached instead of releasing it at every synchronization.
uint8_t* wg_scratch(int device, int64_t bytes, cudaStream_t st) {
    static std::mutex mu;
    static std::unordered_map<int, bool> tuned;
    {
        std::lock_guard<std::mutex> lock(mu);
        if (!tuned[device]) {
            cudaMemPool_t pool;
            if (cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
                uint64_t keep = 256ull << 20, cur = 0;
                if (cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &cur) == cudaSuccess && cur < keep)
                    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
            }
            cudaGetLastError();
            tuned[device] = true;
        }
    }
    void* p = nullptr;
    cuda_check(cudaMallocAsync(&p, (size_t)bytes, st), "wgmma GEMM: scratch for the permuted activations");
    return static_cast<uint8_t*>(p);
}

}  // namespace fp4
