// Linked instead of the CUDA kernels in a CPU-only build.
#include <stdexcept>

#include "fp4_api.h"

namespace fp4 {
namespace {
[[noreturn]] void no_cuda() {
    throw std::runtime_error("fp4_kernels was built without CUDA kernels (CPU-only build)");
}
}  // namespace
bool cuda_compiled() { return false; }
int cuda_device_count() { return 0; }
void cuda_quant(const QuantDesc&, DType, int, uintptr_t) { no_cuda(); }
void cuda_grouped_quant_host(const QuantDesc*, int, DType, int, uintptr_t) { no_cuda(); }
void cuda_experts_quant(const void*, const float*, const void*, bool, uint8_t*, uint8_t*, int64_t,
                        int64_t, int, DType, int, uintptr_t) { no_cuda(); }
void cuda_dequant(const uint8_t*, const uint8_t*, const float*, void*, int64_t, int64_t, DType,
                  int, uintptr_t) { no_cuda(); }
void cuda_dequant_pair(const uint8_t*, const uint8_t*, const uint8_t*, const uint8_t*, void*,
                       int64_t, int64_t, int64_t, DType, int, uintptr_t) { no_cuda(); }
void cuda_mm(const uint8_t*, const uint8_t*, const uint8_t*, const uint8_t*, const float*, void*,
             int64_t, int64_t, int64_t, DType, int, uintptr_t) { no_cuda(); }
SkinnyPlan skinny_plan(const SkinnyProblem&, int) { no_cuda(); }
void cuda_skinny_mm(const SkinnyProblem&, int, uintptr_t) { no_cuda(); }
PkPlan pk_plan(const PkProblem&, int) { no_cuda(); }
void cuda_pk_mm(const PkProblem&, int, uintptr_t) { no_cuda(); }
void pk_set_launch(int, int) {}
void cuda_pk_dequant(const uint8_t*, void*, int64_t, int64_t, int, int, DType, int, uintptr_t) { no_cuda(); }
bool wg_built() { return false; }
bool wg_supported(int) { return false; }
void wg_set_reduce(int) {}
void wg_set_tuning(int, int, int) {}
void wg_set_pdl(bool) {}
void wg_set_chain(bool) {}
void wg_set_multicast(int) {}
void wg_set_tile(int) {}
void wg_set_stages(int) {}
void wg_set_diag(int) {}
void wg_set_weight_copy(int) {}
void wg_set_stage_flow(int) {}
WgPlan wg_plan(const PkProblem&, int) { no_cuda(); }
void cuda_wg_mm(const PkProblem&, int, uintptr_t, const WgPlan*) { no_cuda(); }
}  // namespace fp4
