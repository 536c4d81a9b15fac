"""Issue 28: two consumer warpgroups on 256-token tiles ("wide": 128 weight rows x 256 tokens a CTA;
the consumers hold 232 registers a thread through setmaxnreg, the producer is a warpgroup of its
own holding 40) against the package's paths of today, M = 256 .. 4096 (bench/NOTES.md, "Issue 28:
wide tiles").

For the 5 shapes, graph replay us per call, ROUNDS rounds interleaved, best of the rounds:

  torch   torch.matmul on the dense bf16 weight
  auto    the package's dispatch (the wgmma kernel to M = 256, dequantize + cuBLAS above)
  wg      the wgmma kernel forced at its plan (two warpgroups on 128-token tiles where the K split
          is at most 2, else one warpgroup)
  wide    the wgmma kernel forced with two warpgroups on 256-token tiles (wg_set_tuning(2, 1, 0),
          wg_set_tile(256)); in brackets its plan's K split

and each path's error against the float32 product of the dense weight (max |out - ref| / max |ref|).
Exit status 1 when wide's error exceeds twice wg's + 1e-3 (a wrong result, not a rounding order).

    python bench/issue28_wide.py [--m 256,512,1024,2048,4096] [--fp16-m 256,1024] [--rounds 2]

Needs an sm_90a build on a 9.0 GPU.
"""
from __future__ import annotations

import argparse
import sys

import torch

import fp4_kernels as fk
from fp4_kernels import _gemm_fast
from issue28_probe import SHAPES, copy_rate, dense, graph_us, weights

PATHS = ("torch", "auto", "wg", "wide")


def knobs(path):
    """Set the process-wide knobs of `path` (the package's default for torch and auto)."""
    _gemm_fast.set_pk_kernel("wg" if path in ("wg", "wide") else "auto")
    fk._C.wg_set_tuning(*((2, 1, 0) if path == "wide" else (0, 0, 0)))
    fk._C.wg_set_tile(256 if path == "wide" else 0)


def row(ws, ds, n, k, m, dt, rounds, gen):
    a = torch.randn((m, k), generator=gen, device="cuda", dtype=dt)
    fns = {
        "torch": [lambda d=d: torch.matmul(a, d.T) for d in ds],
        "auto": [lambda p=p: fk.scaled_fp4_w4a16_mm(a, p, None, 1.0) for p in ws],
    }
    fns["wg"] = fns["wide"] = fns["auto"]
    ref = a.float() @ ds[0].float().T
    scale = float(ref.abs().max())
    best, err, split = {}, {}, 0
    try:
        for path in PATHS:
            knobs(path)
            out = fns[path][0]()
            torch.cuda.synchronize()
            err[path] = float((out.float() - ref).abs().max()) / scale
            if path == "wide":
                split = fk._C.wg_plan_cuda(1 if dt == torch.bfloat16 else 2, m, n, k, 0, 0)[1]
        for _ in range(rounds):
            for path in PATHS:
                knobs(path)
                best[path] = min(best.get(path, 1e30), graph_us(fns[path]))
    finally:
        knobs("auto")
    t = best["torch"]
    print("%5dx%-5d %-8s M=%-4d torch %7.1f | auto %7.1f (%.2fx) | wg %7.1f (%.2fx) | wide %7.1f (%.2fx, s%d) | "
          "err auto %.4f wg %.4f wide %.4f" % (
              n, k, "bf16" if dt == torch.bfloat16 else "fp16", m, t, best["auto"], t / best["auto"], best["wg"],
              t / best["wg"], best["wide"], t / best["wide"], split, err["auto"], err["wg"], err["wide"]), flush=True)
    return err["wide"] <= 2 * err["wg"] + 1e-3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", default="256,512,1024,2048,4096")
    ap.add_argument("--fp16-m", default="256,1024")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    if not fk._C.wg_supported(0):
        print("the wgmma kernel needs an sm_90a build on a 9.0 GPU", file=sys.stderr)
        return 2
    gen = torch.Generator(device="cuda").manual_seed(2828)
    print("copy %.2f TB/s, %s" % (copy_rate() / 1e12, torch.cuda.get_device_name()), flush=True)
    ok = True
    for n, k in SHAPES:
        ws = weights(n, k, gen)
        ds = [dense(p) for p in ws]
        for m in (int(v) for v in args.m.split(",")):
            ok &= row(ws, ds, n, k, m, torch.bfloat16, args.rounds, gen)
        if n == k:
            for m in (int(v) for v in args.fp16_m.split(",") if v):
                ok &= row(ws, [d.half() for d in ds], n, k, m, torch.float16, args.rounds, gen)
        del ws, ds
        torch.cuda.empty_cache()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
