// Hopper (sm_90a) asynchronous-copy helpers of cuda_wg.cu: mbarriers, cp.async.bulk into shared
// memory and the wgmma shared-memory matrix descriptor (PTX ISA: "mbarrier", "cp.async.bulk",
// "Matrix Descriptor Format"). Included inside cuda_wg.cu's anonymous namespace; device code
// for sm_90a only (FP4_WG_DEVICE).
#pragma once

#if FP4_WG_DEVICE
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    asm volatile(
        "{\n.reg .pred P1;\nWG_WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
        "@P1 bra.uni WG_DONE;\nbra.uni WG_WAIT;\nWG_DONE:\n}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}
__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}
// A 3-D box of a tensor map (cuTensorMapEncodeTiled) into shared memory, completing on bar with
// the box's full byte count, out-of-bound elements zero-filled (PTX ISA, "cp.async.bulk.tensor";
// the map must live in parameter, constant or global memory: a __grid_constant__ kernel argument).
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const void* map, int c0, int c1, int c2, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
        "[%5];" ::"r"(dst),
        "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
        : "memory");
}
// The same copy delivered to every CTA of the cluster whose bit is set in `mask` (bit i: the CTA
// of %cluster_ctarank i), at dst's CTA-relative offset, each signalling its own mbarrier at bar's
// offset (PTX ISA, cp.async.bulk: ".multicast::cluster"). One L2 read feeds several SMs.
__device__ __forceinline__ void bulk_g2s_mc(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar,
                                            uint16_t mask) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], "
        "%4;" ::"r"(dst),
        "l"(src), "r"(bytes), "r"(bar), "h"(mask)
        : "memory");
}
// Arrive on the mbarrier at CTA-relative offset `bar` in the cluster's CTA `rank` (itself
// included), as CUTLASS's ClusterBarrier::arrive(cta_id) does: the stage's readers are wgmma
// groups already waited for, so no fence is needed (PTX ISA: mapa, mbarrier.arrive).
__device__ __forceinline__ void mbar_arrive_in(uint32_t bar, uint32_t rank) {
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bar), "r"(rank));
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
// Every thread of every CTA of the cluster (barrier.cluster, .aligned: all threads execute it)
__device__ __forceinline__ void cluster_sync_all() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// Shared-memory matrix descriptor without swizzle (PTX ISA, "Matrix Descriptor Format"): start
// address >> 4 at bits 0-13, leading byte offset >> 4 at 16-29, stride byte offset >> 4 at 32-45.
__device__ __forceinline__ uint64_t wg_desc(uint32_t saddr) {
    constexpr uint32_t lbo = 128, sbo = 256;
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | (uint64_t)(lbo >> 4) << 16 | (uint64_t)(sbo >> 4) << 32;
}
#endif
