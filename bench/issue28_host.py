"""Issue 28: where the host time of one eager prepacked W4A16 call goes on the dequantize + cuBLAS
path (M above pk_max_rows), against torch.matmul's. Host time = wall time of 200 calls queued without
waiting, per call (us; issue28.host_us); the GPU's work is queued, not waited for.

    python bench/issue28_host.py
"""
from __future__ import annotations

import torch

import fp4_kernels as fk
from fp4_kernels import _gemm, _ops
from issue28 import host_us


def main() -> int:
    dev = torch.device("cuda", 0)
    g = torch.Generator(device="cuda").manual_seed(5)
    for n, k, m in ((8192, 8192, 1024), (2048, 7168, 128), (2048, 7168, 1024)):
        w = torch.randn((n, k), generator=g, device="cuda", dtype=torch.bfloat16)
        gs = 448 * 6 / float(w.abs().max())
        pw = fk.prepack_fp4_weight(*fk.scaled_fp4_quant(w, gs))
        a = torch.randn((m, k), generator=g, device="cuda", dtype=torch.bfloat16)
        dense = _gemm._pk_dense(torch, pw, torch.bfloat16, dev)
        al_t = _ops._scalar(torch, 1.0 / gs, dev, "alpha")
        parts = {
            "call": lambda: fk.scaled_fp4_w4a16_mm(a, pw, None, 1.0 / gs),
            "call_alpha_tensor": lambda: fk.scaled_fp4_w4a16_mm(a, pw, None, al_t),
            "pk_dense": lambda: _gemm._pk_dense(torch, pw, torch.bfloat16, dev),
            "empty_dense": lambda: torch.empty((n, k), dtype=torch.bfloat16, device=dev),
            "scalar": lambda: _ops._scalar(torch, 1.0 / gs, dev, "alpha"),
            "gemm_16": lambda: _gemm._gemm_16(torch, a, dense, al_t, torch.bfloat16, m, n, k, dev),
            "gemm_16_host_alpha": lambda: _gemm._gemm_16(torch, a, dense, 1.0 / gs, torch.bfloat16, m, n, k, dev),
            "blas_handle": lambda: torch.cuda.current_blas_handle(),
            "torch_matmul": lambda: torch.matmul(a, dense.T),
        }
        same = torch.equal(fk.scaled_fp4_w4a16_mm(a, pw, None, 1.0 / gs), fk.scaled_fp4_w4a16_mm(a, pw, None, al_t))
        print("%5dx%-5d M=%-4d pk_max_rows %d | alpha float vs tensor %s | %s" % (
            n, k, m, fk._gemm_fast.pk_max_rows(0, n, k), "bit-identical" if same else "MISMATCH",
            " ".join("%s %.1f" % (name, host_us(fn)) for name, fn in parts.items())), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
