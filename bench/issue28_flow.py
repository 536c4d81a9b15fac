"""Issue 28: the A/B of the wgmma kernel's stage round trip (`fk._C.wg_set_stage_flow`) against
the default, interleaved in one process on one GPU (bench/NOTES.md, "Issue 28: the stage round
trip"). Flows: 0 as built (the baseline), 1 early release (a stage given back as soon as its wgmma
group is done), 2 split producer (lanes 0 and 31 each wait and issue their copy), 3 both.

  selfcheck  the 5 shapes at M = 16 .. 256 (the wgmma kernel forced, fresh random inputs): every
             flow's output bit-identical to flow 0's, else MISMATCH (the flows change when a
             stage is waited for, never what is summed or in which order)
  unit       split 1 at M = 64, 128, 256, K = 8192, N = 1024 and 8448 (16 and 132 CTAs, one per
             row group): ns per 128-k unit per CTA as built (d0) and with loads alone (d5: no
             decode, no MMA), each flow, ROUNDS rounds interleaved (flow 0 1 2 3 0 1 2 3 ...), best of
             the rounds
  shapes     the 5 shapes at M = 16 .. 256, the wgmma kernel forced at its default plan, graph
             replay us per call, each flow, ROUNDS rounds interleaved, best of the rounds

    python bench/issue28_flow.py [--only selfcheck,unit,shapes] [--rounds 2]

Exit status 1 when any selfcheck row is a MISMATCH. Needs an sm_90a build on a 9.0 GPU.
"""
from __future__ import annotations

import argparse
import sys

import torch

import fp4_kernels as fk
from fp4_kernels import _gemm_fast
from issue28_probe import SHAPES, copy_rate, graph_us, weights

FLOWS = (0, 1, 2, 3)
MS = (16, 32, 64, 128, 256)


def with_flow(flow, diag, fn):
    """fn() with the wgmma kernel forced, stage flow `flow` and diag `diag`; the knobs back to 0 after."""
    _gemm_fast.set_pk_kernel("wg")
    fk._C.wg_set_stage_flow(flow)
    fk._C.wg_set_diag(diag)
    try:
        return fn()
    finally:
        fk._C.wg_set_diag(0)
        fk._C.wg_set_stage_flow(-1)
        _gemm_fast.set_pk_kernel("auto")


def selfcheck(gen):
    bad = 0
    for n, k in SHAPES:
        ws = weights(n, k, gen)[:1]
        for m in MS:
            a = torch.randn((m, k), generator=gen, device="cuda", dtype=torch.bfloat16)
            outs = [with_flow(f, 0, lambda: fk.scaled_fp4_w4a16_mm(a, ws[0], None, 1.0)) for f in FLOWS]
            same = [torch.equal(o, outs[0]) for o in outs[1:]]
            finite = bool(torch.isfinite(outs[0]).all())
            bad += (not all(same)) + (not finite)
            print("flow selfcheck %5dx%-5d M=%-4d %s%s" % (
                n, k, m, " ".join("f%d %s" % (f, "same" if s else "MISMATCH") for f, s in zip(FLOWS[1:], same)),
                "" if finite else " NONFINITE"), flush=True)
        del ws
        torch.cuda.empty_cache()
    print("flow selfcheck %s" % ("ok" if bad == 0 else "FAILED (%d)" % bad), flush=True)
    return bad


def per_unit(gen, rounds):
    k = 8192
    units = k // 128
    for m in (64, 128, 256):
        a = torch.randn((m, k), generator=gen, device="cuda", dtype=torch.bfloat16)
        for n in (1024, 8448):
            ws = weights(n, k, gen)
            out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")

            def call(pw):  # split 1: every CTA runs all `units` units
                fk._C.pk_mm_cuda(1, a.data_ptr(), k, pw.data.data_ptr(), 0, 1.0, out.data_ptr(), 2, m, n, k,
                                 pw.data.shape[0], pw.data.shape[1], 0, 1, 0, 0,
                                 torch.cuda.current_stream().cuda_stream)
            best = {}
            for _ in range(rounds):
                for f in FLOWS:
                    for d in (0, 5):
                        us = with_flow(f, d, lambda: graph_us([lambda p=p: call(p) for p in ws]))
                        best[f, d] = min(best.get((f, d), 1e30), us)
            print("flow unit M=%-4d N=%-5d CTAs %3d  %s" % (m, n, n // 64, "  ".join(
                "f%d d%d %5.1f us %4.0f ns" % (f, d, best[f, d], 1000 * best[f, d] / units)
                for f in FLOWS for d in (0, 5))), flush=True)
            del ws
            torch.cuda.empty_cache()


def shapes(gen, rounds):
    for n, k in SHAPES:
        ws = weights(n, k, gen)
        for m in MS:
            a = torch.randn((m, k), generator=gen, device="cuda", dtype=torch.bfloat16)
            plan = fk._C.wg_plan_cuda(1, m, n, k, 0, 0)
            best = {}
            for _ in range(rounds):
                for f in FLOWS:
                    us = with_flow(f, 0, lambda: graph_us([lambda p=p: fk.scaled_fp4_w4a16_mm(a, p, None, 1.0)
                                                           for p in ws]))
                    best[f] = min(best.get(f, 1e30), us)
            print("flow shape %5dx%-5d M=%-4d split %d  %s" % (n, k, m, plan[1], "  ".join(
                "f%d %6.1f us (%+5.1f%%)" % (f, best[f], 100 * (best[f] / best[0] - 1)) for f in FLOWS)), flush=True)
        del ws
        torch.cuda.empty_cache()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="selfcheck,unit,shapes")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    only = set(args.only.split(","))
    if not fk._C.wg_supported(0):
        print("flow: no wgmma kernel here (an sm_90a build on a 9.0 GPU is needed)", file=sys.stderr)
        return 2
    gen = torch.Generator(device="cuda").manual_seed(2828)
    print("copy %.2f TB/s  %s" % (copy_rate() / 1e12, torch.cuda.get_device_name(0)), flush=True)
    bad = selfcheck(gen) if "selfcheck" in only else 0
    if "unit" in only:
        per_unit(gen, args.rounds)
    if "shapes" in only:
        shapes(gen, args.rounds)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
