"""Issue 28: launch overlap of the prepacked kernel and of the wgmma path's permute (bench/NOTES.md,
"Issue 28: launch overlap of the prepacked kernel").

The prepacked (mma.sync) kernel runs M = 1 .. 32 on the large weights; a call reads 7-34 MiB of
weight and lasts 5-25 us, so its ramp (launch, first loads, the tail of the last CTAs) is a large
part of it. Two knobs (``fk._C.pk_set_launch(pdl, prefetch)``, compute capability >= 9.0):

  pdl       programmatic dependent launch: the call may start while the grid before it finishes;
            it reads activations and writes its output only after ``griddepcontrol.wait``; it lets
            the next grid launch from its start (1) or once its k loop is done (2)
  prefetch  each warp asks for the first PREFETCH bytes of its weight range (contiguous) with one
            bulk L2 prefetch when its CTA starts (before that wait)

and for the wgmma path (M = 33 .. 512) ``fk._C.wg_set_chain(True)``: the next call's activation
permute launches as a programmatic dependent of this call's GEMM.

Graph replay (and eager, back-to-back) us per call of CALLS calls, weights rotated among 4 copies,
ROUNDS rounds interleaved, best of the rounds; each variant's output is compared bit for bit with
the baseline's (exit 1 on a difference). ``sep`` rows put a non-PDL kernel (``torch.mul(x, 1, out=a)``,
the activation written by the grid before, as in a model) before every call: the overlap a model
gets when the kernel before is not ours.

    python bench/issue28_pdl.py [--m 1,4,16,32] [--wg-m 64,128,256,512] [--rounds 2]

Needs a compute capability 9.0 GPU (sm_90a build for the wgmma rows).
"""
from __future__ import annotations

import argparse

import torch

import fp4_kernels as fk
from issue28 import eager_us, graph_us
from issue28_probe import SHAPES, copy_rate, dense, weights

WHOLE = 1 << 30
# (pdl, prefetch) of fk._C.pk_set_launch: pdl 1 triggers the next grid at the start, 2 after the k
# loop; prefetch bytes; -1 the package's rule (cuda_pk.cu, kPkAuto)
PK_PATHS = {"base": (0, 0), "pf": (0, WHOLE), "pdl1": (1, 0), "pdl2": (2, 0), "pdl2+pf": (2, WHOLE),
            "default": (-1, -1)}
WG_PATHS = {"base": False, "chain": True}


def timed(fns, sep):
    """(graph us, eager us) of fns; with `sep`, each call after a non-PDL write of its activation."""
    if sep is not None:
        x, a = sep
        fns = [lambda f=f: (torch.mul(x, 1.0, out=a), f())[1] for f in fns]
    return graph_us(fns), eager_us(fns)


def ab_row(ws, ds, n, k, m, rounds, gen, sep, paths, knob, default):
    """One row of the A/B: each of `paths` (name -> the value `knob` is called with) timed against torch
    in `rounds` interleaved rounds, best of the rounds; outputs compared bit for bit with the first
    path's. `knob(default)` restores the package's default. False on a mismatch."""
    a = torch.randn((m, k), generator=gen, device="cuda", dtype=torch.bfloat16)
    x = a.clone()
    fns = [lambda p=p: fk.scaled_fp4_w4a16_mm(a, p, None, 1.0) for p in ws]
    tfns = [lambda d=d: torch.matmul(a, d.T) for d in ds]
    best, ok, base = {}, True, None

    def keep(name, g, e):
        old = best.get(name, (1e30, 1e30))
        best[name] = min(old[0], g), min(old[1], e)
    try:
        for name, value in paths.items():
            knob(value)
            out = fns[0]()
            torch.cuda.synchronize()
            if base is None:
                base = out
            elif not torch.equal(out, base):
                print("MISMATCH %s %dx%d M=%d" % (name, n, k, m), flush=True)
                ok = False
        for _ in range(rounds):
            knob(default)
            keep("torch", *timed(tfns, (x, a) if sep else None))
            for name, value in paths.items():
                knob(value)
                keep(name, *timed(fns, (x, a) if sep else None))
    finally:
        knob(default)
    t = best["torch"][0]
    print("%5dx%-5d M=%-4d %s torch %6.1f | " % (n, k, m, "sep " if sep else "    ", t) +
          " | ".join("%s %6.1f (%.2fx) e %6.1f" % (nm, best[nm][0], t / best[nm][0], best[nm][1]) for nm in paths),
          flush=True)
    return ok


def pk_row(ws, ds, n, k, m, rounds, gen, sep):
    return ab_row(ws, ds, n, k, m, rounds, gen, sep, PK_PATHS, lambda v: fk._C.pk_set_launch(*v), (-1, -1))


def wg_row(ws, ds, n, k, m, rounds, gen, sep):
    return ab_row(ws, ds, n, k, m, rounds, gen, sep, WG_PATHS, fk._C.wg_set_chain, True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", default="1,4,16,32")
    ap.add_argument("--wg-m", default="64,128,256,512")
    ap.add_argument("--sep-m", default="1,16,128", help="M also run with a non-PDL kernel before every call")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(2829)
    print("copy %.2f TB/s, %s" % (copy_rate() / 1e12, torch.cuda.get_device_name()), flush=True)
    ok = True
    ms = [int(v) for v in args.m.split(",") if v]
    wms = [int(v) for v in args.wg_m.split(",") if v] if fk._C.wg_supported(0) else []
    sep = {int(v) for v in args.sep_m.split(",") if v}
    for n, k in SHAPES:
        ws = weights(n, k, gen)
        ds = [dense(p) for p in ws]
        for m in ms + wms:
            row = pk_row if m in ms else wg_row
            ok &= row(ws, ds, n, k, m, args.rounds, gen, False)
            if m in sep:
                ok &= row(ws, ds, n, k, m, args.rounds, gen, True)
        del ws, ds
        torch.cuda.empty_cache()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
