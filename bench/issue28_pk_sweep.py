"""Issue 28: every launch configuration (rt, split, un) of the prepacked kernel at M = 1 .. 4, with a
plain launch and with programmatic dependent launch (pdl 2), against the plan's choice with the
package's launch rule (bench/NOTES.md, "Issue 28: launch overlap of the prepacked kernel").

Graph replay us per call (bench/skinny_cases.py's sweep timing: 20 calls a graph, weights rotated
over enough copies to miss L2), the best four configurations per launch mode, and the plan's.

    python bench/issue28_pk_sweep.py [--m 1,4] [--shapes 8192x8192,...]
"""
from __future__ import annotations

import argparse

import torch

import fp4_kernels as fk
import skinny_cases as sk
from issue28_probe import SHAPES


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", default="1,4")
    ap.add_argument("--shapes", default=",".join("%dx%d" % s for s in SHAPES))
    args = ap.parse_args()
    dev = torch.device("cuda", 0)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    ms = [int(v) for v in args.m.split(",")]
    print(torch.cuda.get_device_name(), "L2 %d MiB" % (l2 >> 20), flush=True)
    try:
        for pdl, pf in ((0, 0), (2, 0), (-1, -1)):
            fk._C.pk_set_launch(pdl, pf)
            print("== pk_set_launch(%d, %d)" % (pdl, pf), flush=True)
            sk.sweep_pk(torch, fk, dev, l2, shapes, ms, 10)
    finally:
        fk._C.pk_set_launch(-1, -1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
