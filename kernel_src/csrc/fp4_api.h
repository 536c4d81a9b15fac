// Plain-pointer entry points shared by the bindings, the CPU path and the CUDA path.
// All tensors are dense row-major; validation happens in bindings.cpp.
#pragma once
#include <cstdint>
#include <string>

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
// descs: HOST array of n QuantDesc (device pointers inside, same dtype and swizzle); one
// kernel launch per 256 matrices, the descriptors travel as kernel parameters.
void cuda_grouped_quant_host(const QuantDesc* descs, int n, DType dt, int device,
                             uintptr_t stream);
// Stacked experts: x [t, k] of dt, rows [offsets[e], offsets[e+1]) quantized with gs[e]
// (offsets: DEVICE int32 / int64 [e+1], covering [0, t]); q [t, k/2], s [t, k/16] unswizzled.
void cuda_experts_quant(const void* x, const float* gs, const void* offsets, bool off64, uint8_t* q,
                        uint8_t* s, int64_t t, int64_t k, int e, DType dt, int device,
                        uintptr_t stream);
// gs may be null: global scale 1.
void cuda_dequant(const uint8_t* q, const uint8_t* s, const float* gs, void* out, int64_t m,
                  int64_t k, DType out_dt, int device, uintptr_t stream);
// A [m, k] and B [n, k] (global scale 1) into out = [m + n, k] of out_dt, one launch.
void cuda_dequant_pair(const uint8_t* aq, const uint8_t* as, const uint8_t* bq,
                       const uint8_t* bs, void* out, int64_t m, int64_t n, int64_t k,
                       DType out_dt, int device, uintptr_t stream);
// k must be a multiple of 64 and the scale row stride k/16 (padding done in Python).
void cuda_mm(const uint8_t* aq, const uint8_t* bq, const uint8_t* as, const uint8_t* bs,
             const float* alpha, void* out, int64_t m, int64_t n, int64_t k, DType out_dt,
             int device, uintptr_t stream);

// ---- fused skinny / grouped GEMM (cuda_skinny.cu) ----
// out[m, n] (row-major [T, N], out_dt) = alpha[e] * sum_k A[m, k] * B_e[n, k], with B_e the
// NVFP4 weights of expert e ([N, K/2] codes + [N, K/16] E4M3 scales, experts back to back) and
// A either NVFP4 (a_kind 0: [T, K/2] codes + [T, K/16] scales) or bf16 / fp16 (a_kind 1 / 2:
// [T, K]). Non-grouped (offsets == null): E = 1, rows m = 0..T-1. Grouped: rows
// [offsets[e], offsets[e+1]) of A and out belong to expert e (offsets: DEVICE int32 / int64
// [E+1], clamped to [0, T]). K must be a positive multiple of 128; pointers 16-byte aligned.
struct SkinnyProblem {
    int a_kind = 0;
    const void* a = nullptr;
    const uint8_t* a_scale = nullptr;
    const uint8_t* b_q = nullptr;
    const uint8_t* b_scale = nullptr;
    const float* alpha = nullptr;  // device memory (host for the CPU path); null: alpha_value
    bool alpha_per_expert = false;
    float alpha_value = 1.0f;
    const void* offsets = nullptr;
    bool offsets_int64 = false;
    void* out = nullptr;
    DType out_dt = DType::BF16;
    int64_t t = 0, n = 0, k = 0;
    int e = 1;
    int tm = 0, kw = 0, split = 0;  // 0: chosen by shape (tuning knobs for the benchmark)
    bool no_omma = false;           // SM120: use the decode + HMMA kernel instead of OMMA
};
struct SkinnyPlan {
    int tm = 8, kw = 1, split = 1, groups = 1, ns = 4;
    int64_t tblocks = 1, slots = 1;
    bool omma = false;
};
SkinnyPlan skinny_plan(const SkinnyProblem& p, int device);
void cuda_skinny_mm(const SkinnyProblem& p, int device, uintptr_t stream);

// ---- fused W4A16 GEMM on prepacked weights (cuda_pk.cu, layout in pk_layout.h) ----
// out[m, n] (row-major [T, N], out_dt) = alpha * sum_k a[m, k] * B[n, k], a bf16 / fp16
// (a_kind 1 / 2) [T, K] with row stride lda elements, B the NVFP4 weight prepacked into
// units of 16 rows x 128 k (nt row tiles, u units per row tile, u * 128 >= k). Pointers 16-byte
// aligned; lda a multiple of 8.
struct PkProblem {
    int a_kind = 1;
    const void* a = nullptr;
    int64_t lda = 0;
    const uint8_t* w = nullptr;
    const float* alpha = nullptr;  // device memory; null: alpha_value
    float alpha_value = 1.0f;
    void* out = nullptr;
    DType out_dt = DType::BF16;
    int64_t t = 0, n = 0, k = 0;
    int nt = 0, u = 0;
    int rt = 0, split = 0, un = 0;  // 0: chosen by shape (tuning knobs for the benchmark)
};
struct PkPlan {
    int mt = 1, rt = 1, split = 1, un = 1;
    bool pdl = false, prefetch = false;  // launch rule (cuda_pk.cu, kPkAuto): programmatic dependent
                                         // launch; each warp's weight range prefetched into L2
};
PkPlan pk_plan(const PkProblem& p, int device);
// Launch knobs on compute capability >= 9.0 (benchmarks): pdl 1 / 2 = programmatic dependent launch
// triggering the next grid at the start / after the k loop, 0 plain; prefetch = bytes of each warp's
// weight range prefetched into L2 at the start; -1 = the default, the rule in cuda_pk.cu.
void pk_set_launch(int pdl, int prefetch);
void cuda_pk_mm(const PkProblem& p, int device, uintptr_t stream);
// Prepacked weight (nt x u units) -> dense [n, k] bf16 / fp16 values e2m1 * scale (exact).
void cuda_pk_dequant(const uint8_t* w, void* out, int64_t n, int64_t k, int nt, int u, DType out_dt,
                     int device, uintptr_t stream);

// ---- the same GEMM with wgmma (cuda_wg.cu; sm_90a builds on compute capability 9.0 GPUs) ----
// wg_built: this build holds sm_90a SASS; wg_supported: and `device` is a 9.0 GPU.
// cuda_wg_mm: rt / un of the problem are ignored, split > 0 forces the cluster split along K;
// `plan`: wg_plan(p, device) where the caller already made it (else made here);
// the permuted activations (WgPlan::scratch bytes) are allocated stream-ordered on `stream`.
struct WgPlan {
    int nt = 0, split = 1;  // tokens per CTA, CTAs per cluster along K
    int groups = 1;         // consumer warpgroups per CTA (64 weight rows each)
    int units = 1;          // 128-k units per pipeline stage
    int lanes = 1;          // producer lanes issuing a stage's bulk copies
    int mc = 1;             // CTAs along N per cluster sharing each activation tile (multicast)
    int flow = 0;           // stage flow: bit 0 early stage release, bit 1 split producer (lanes 0 and 31)
    int64_t scratch = 0;    // bytes of permuted activations (+ partial sums and counters)
    bool global_reduce = false;  // split-K sums meet in global memory (else: a cluster's DSMEM)
    float fill = 1.0f;      // share of the grid's waves of CTA slots, times its token tiles, that holds work
};
void wg_set_reduce(int mode);  // 0 by the plan, 1 cluster DSMEM, 2 global memory, 3 the one-at-a-time epilogue (benchmarks)
void wg_set_tuning(int groups, int units, int lanes);  // benchmarks; 0 = the plan's choice
void wg_set_multicast(int ctas);
void wg_set_tile(int nt);  // benchmarks: tokens per CTA (16 .. 256); 0 = the plan's
void wg_set_diag(int mode);  // benchmarks only, wrong results: bit 0 no decode, bit 1 no loads, bit 2 no MMA; 0 off
void wg_set_stage_flow(int mode);  // benchmarks, same results: bit 0 early stage release, bit 1 split producer; -1 the plan's
void wg_set_weight_copy(int mode);  // benchmarks: a stage's weight tiles 0 as planned, 1 bulk copy a row tile, 2 one tensor box
void wg_set_stages(int st);  // benchmarks, a sweep build: G = 1, UP = 1 with st stages; 0 = default  // benchmarks: 1, 2, 4 CTAs sharing activations; 0 = the plan's
// Programmatic dependent launch of the wgmma kernel after its activation permute (on by default;
// benchmarks switch it off to measure it)
void wg_set_pdl(bool on);
// the next call's permute as a programmatic dependent of this GEMM (on by default; benchmarks switch it)
void wg_set_chain(bool on);
bool wg_built();
bool wg_supported(int device);
WgPlan wg_plan(const PkProblem& p, int device);
void cuda_wg_mm(const PkProblem& p, int device, uintptr_t stream, const WgPlan* plan = nullptr);

// ---- CPU versions of the W4A16 and grouped GEMMs (cpu_kernels.cpp) ----
// The same problem with HOST pointers (offsets a host array, alpha host floats). Products are
// exact in fp32 and summed in increasing k in fp32, then alpha * sum is rounded once.
void cpu_skinny_mm(const SkinnyProblem& p);

// ---- cuBLAS through the library torch already loaded (cublas_gemm.cpp) ----
// Loads cublasGemmEx & co. from `lib` (a path; dlopen). Returns "" on success, else why not.
std::string cublas_load(const std::string& lib);
// out[m, n] (row-major, out_dt) = alpha * A[m, k] . B[n, k]^T with A, B of ab_dt (bf16 or
// fp16), fp32 accumulation (CUBLAS_COMPUTE_32F, no reduced-precision reductions) and alpha /
// beta = 0 read from DEVICE memory, or, where alpha_dev is null, alpha_host / 0 read from the host
// (cuBLAS documentation, cublasSetPointerMode); runs on the stream already set on `handle`.
void cublas_gemm_nt(uintptr_t handle, int64_t m, int64_t n, int64_t k, const void* a,
                    const void* b, DType ab_dt, void* out, DType out_dt, const float* alpha_dev,
                    const float* zero_dev, float alpha_host = 0.0f);

}  // namespace fp4
