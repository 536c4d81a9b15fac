// Plain-pointer entry points shared by the bindings, the CPU path and the CUDA path.
// All tensors are dense row-major; validation happens in bindings.cpp.
#pragma once
#include <cstdint>

namespace fp4 {

enum class DType : int { F32 = 0, F16 = 1, BF16 = 2 };

// One matrix of a (grouped) quantization. Pointers are host pointers on the CPU
// path and device pointers on the CUDA path.
struct QuantDesc {
    int64_t x;        // const void*  [M, K] of the input dtype
    int64_t q;        // uint8_t*     [M, K/2]
    int64_t s;        // uint8_t*     [M, K/16] or swizzled [round_up(M,128), round_up(K/16,4)]
    int64_t gs;       // const float* one fp32 global scale
    int64_t m;        // rows
    int64_t k;        // columns (multiple of 16)
    int64_t start;    // first 16-element block of this matrix in the (grouped) launch
    int64_t swizzle;  // 0: row-major scales, 1: swizzled scales
};
static_assert(sizeof(QuantDesc) == 64, "QuantDesc is exchanged as int64[8]");

// ---- CPU (always built) ----
void cpu_quant(const QuantDesc* descs, int n, DType dt);
void cpu_dequant(const uint8_t* q, const uint8_t* s, const float* gs, void* out, int64_t m,
                 int64_t k, DType out_dt);
void cpu_mm(const uint8_t* aq, const uint8_t* bq, const uint8_t* as, const uint8_t* bs,
            const float* alpha, void* out, int64_t m, int64_t n, int64_t k, DType out_dt);

// ---- CUDA (built when FP4_WITH_CUDA); every function throws std::runtime_error ----
bool cuda_compiled();
int cuda_device_count();
void cuda_quant(const QuantDesc& d, DType dt, int device, uintptr_t stream);
// descs_dev points to DEVICE memory holding n QuantDesc (same dtype); total_blocks is
// sum(M*K/16) and each desc's start is the prefix sum. One kernel launch.
void cuda_grouped_quant(const QuantDesc* descs_dev, int n, int64_t total_blocks, DType dt,
                        int device, uintptr_t stream);
void cuda_dequant(const uint8_t* q, const uint8_t* s, const float* gs, void* out, int64_t m,
                  int64_t k, DType out_dt, int device, uintptr_t stream);
// k must be a multiple of 64 and the scale row stride k/16 (padding done in Python).
void cuda_mm(const uint8_t* aq, const uint8_t* bq, const uint8_t* as, const uint8_t* bs,
             const float* alpha, void* out, int64_t m, int64_t n, int64_t k, DType out_dt,
             int device, uintptr_t stream);

}  // namespace fp4
