"""The wgmma kernel's split sweep and per-kernel device times (issue 28 diagnostics).

For each shape and M: graph time (us per call, 4 rotated weights) of the wgmma kernel per tuning (``g1u2l32``: one
consumer warpgroup, 2 units per pipeline stage, 32 producer lanes issuing the bulk copies; all but
the default need a build with ``FP4_WG_SWEEP=ON``) and the split
along K forced to 1..8 (``c``: partial sums through a cluster's DSMEM, ``g``: global memory), the plan the dispatch picks, and, from torch.profiler, the
device time of each launch of one call (activation permute, GEMM) to see where a call's time goes.

    python bench/issue28_sweep.py [--shapes 8192x8192,...] [--m 1,16,64] [--tunings g1u1l1,g1u2l32] [--reduce 1,2]
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
    ap.add_argument("--tunings", default="g1u1l1,g1u1l32,g1u2l32,g1u4l32,g2u1l32,g2u2l32",
                    help="gGuUlL: G consumer warpgroups, U units per stage, L producer lanes (0 = the plan's)")
    ap.add_argument("--reduce", default="1", help="1 cluster DSMEM, 2 global memory (e.g. 1,2)")
    args = ap.parse_args()
    tunings = []
    for t in args.tunings.split(","):
        g, rest = t[1:].split("u")
        up, lanes = rest.split("l")
        tunings.append((t, (int(g), int(up), int(lanes))))
    reduces = [int(v) for v in args.reduce.split(",")]
    gen = torch.Generator(device="cuda").manual_seed(7)
    for s in args.shapes.split(","):
        n, k = (int(v) for v in s.split("x"))
        ws, raw = [], None
        for _ in range(b28.COPIES):
            w = torch.randn((n, k), generator=gen, device="cuda", dtype=torch.bfloat16)
            q, sc = fk.scaled_fp4_quant(w, 1.0)
            raw = raw or (q, sc)
            ws.append(fk.prepack_fp4_weight(q, sc))
        # columns checked against float64: a spread over N and the last 16 (partial row groups)
        cols = torch.cat([torch.arange(0, n, max(1, n // 256)), torch.arange(max(0, n - 16), n)]).unique().cuda()
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
            times, worst, bad = [], 0.0, 0
            for tname, (g, up, lanes) in tunings:  # all but the default need an FP4_WG_SWEEP build
                fk._C.wg_set_tuning(g, up, lanes)
                try:
                    call(ws[0], 1)
                except ValueError:  # not built for this tile (shared memory), or a default build
                    continue
                for red in reduces:  # 1 cluster DSMEM, 2 global memory
                    fk._C.wg_set_reduce(red)
                    for split in range(1 if red == 1 else 2, 9):
                        if k // 128 // split < 2:
                            break
                        us = b28.graph_us([lambda pw=pw, sp=split: call(pw, sp) for pw in ws])
                        out.fill_(float("nan"))
                        call(ws[0], split)
                        err, nan = b28.check(out, a, raw[0], raw[1], 1.0, cols)
                        worst = max(worst, err)
                        bad += nan or err > 1.0
                        times.append(("%s%s%d" % (tname, "c" if red == 1 else "g", split), us))
            fk._C.wg_set_tuning(0, 0, 0)
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
            print("%dx%d M=%d plan(nt, split, scratch, groups)=%s | %s | worst |err|/bound %.2f%s | pk %.1f | kernels: %s" % (
                n, k, m, plan, " ".join("%s %.1f" % t for t in times), worst, " FAILED %d" % bad if bad else "", pk,
                ", ".join("%s %.1f us" % e for e in ev)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
