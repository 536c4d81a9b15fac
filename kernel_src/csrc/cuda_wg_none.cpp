// Linked instead of cuda_wg.cu in a CUDA build without sm_90a: no wgmma kernel, the prepacked
// GEMM runs cuda_pk.cu's kernel at every M it takes.
#include <stdexcept>

#include "fp4_api.h"

namespace fp4 {
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
WgPlan wg_plan(const PkProblem&, int) {
    throw std::runtime_error("fp4_kernels: this build holds no sm_90a code (the wgmma GEMM)");
}
void cuda_wg_mm(const PkProblem&, int, uintptr_t, const WgPlan*) {
    throw std::runtime_error("fp4_kernels: this build holds no sm_90a code (the wgmma GEMM)");
}
}  // namespace fp4
