"""The wgmma kernel's split sweep and per-kernel device times (issue 28 diagnostics).

For each shape and M: graph time (us per call, 4 rotated weights) of the wgmma kernel with the
cluster split along K forced to 1..8, the plan the dispatch picks, and, from torch.profiler, the
device time of each launch of one call (activation permute, GEMM) to see where a call's time goes.

    python bench/issue28_sweep.py [--shapes 8192x8192,...] [--m 1,16,64]
"""
from __future__ import annotations

import argparse

import torch

import fp4_kernels as fk
from fp4_kernels import _gemm_fast

import issue28 as b28


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="8192x8192,4096x14336,7168x2048")
    ap.add_argument("--m", default="1,16,32,64,128,256")
    args = ap.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(7)
    for s in args.shapes.split(","):
        n, k = (int(v) for v in s.split("x"))
        ws = []
        for _ in range(b28.COPIES):
            w = torch.randn((n, k), generator=gen, device="cuda", dtype=torch.bfloat16)
            q, sc = fk.scaled_fp4_quant(w, 1.0)
            ws.append(fk.prepack_fp4_weight(q, sc))
        for m in (int(v) for v in args.m.split(",")):
            a = torch.randn((m, k), generator=gen, device="cuda", dtype=torch.bfloat16)
            out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
            st = torch.cuda.current_stream().cuda_stream

            def call(pw, split):
                fk._C.pk_mm_cuda(1, a.data_ptr(), k, pw.data.data_ptr(), 0, 1.0, out.data_ptr(), 2, m, n, k,
                                 pw.data.shape[0], pw.data.shape[1], 0, split, 0, 0,
                                 torch.cuda.current_stream().cuda_stream)
            _gemm_fast.set_pk_kernel("wg")
            plan = fk._C.wg_plan_cuda(1, m, n, k, 0, 0)
            times = []
            for red in (1, 2):  # cluster DSMEM, global memory
                fk._C.wg_set_reduce(red)
                for split in range(1 if red == 1 else 2, 9):
                    if k // 128 // split < 2:
                        break
                    times.append(("%s%d" % ("c" if red == 1 else "g", split),
                                  b28.graph_us([lambda pw=pw, sp=split: call(pw, sp) for pw in ws])))
            fk._C.wg_set_reduce(0)
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(3):
                    call(ws[0], 0)
                torch.cuda.synchronize()
            ev = [(e.key[:40], e.device_time_total / e.count) for e in prof.key_averages()
                  if e.device_time_total > 0]
            _gemm_fast.set_pk_kernel("pk")
            pk = b28.graph_us([lambda pw=pw: fk.scaled_fp4_w4a16_mm(a, pw, None, 1.0) for pw in ws]) if m <= 64 else 0
            _gemm_fast.set_pk_kernel("auto")
            print("%dx%d M=%d plan(nt, split, scratch)=%s | %s | pk %.1f | kernels: %s" % (
                n, k, m, plan, " ".join("%s %.1f" % t for t in times), pk,
                ", ".join("%s %.1f us" % e for e in ev)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
