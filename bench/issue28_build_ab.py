"""Issue 28: two builds of fp4_kernels, timed in one device call (bench/NOTES.md, "Issue 28: the
decode in 8 instructions").

A kernel change that keeps the arithmetic (same products, same order of the sums) is measured
against the build before it: ``issue28_diag.sh`` with ``BUILD_AB=DIR`` builds DIR (the older
``kernel_src``) beside the working tree's and runs this script once per build, alternating
(base, new, base, new), each run in its own process (one ``fp4_kernels`` a process):

    python bench/issue28_build_ab.py run LABEL OUT.json [--m 1,4,16,32] [--fp16-m 1,16]
    python bench/issue28_build_ab.py compare BASE.json NEW.json ...   # best of each label's runs

``run`` times ``scaled_fp4_w4a16_mm`` on prepacked weights (the default dispatch) for the five
layer shapes, CUDA graph replay and eager back-to-back calls (us per call, weights rotated among
4 copies, best of 7 replays; bench/issue28.py's timers) and torch.matmul on the bf16 / fp16
weight, and records a SHA-256 of each row's output bytes (fixed seeds: the same inputs in every
run). ``compare`` prints each row's time per build, new / base, the ratio to torch, the copy
rate's share, and whether the outputs are bit-identical (exit 1 if any row differs).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys

SHAPES = [(8192, 8192), (14336, 4096), (4096, 14336), (2048, 7168), (7168, 2048)]


def run(label, out, ms, fp16_ms):
    import torch

    import fp4_kernels as fk
    from issue28 import copy_rate, eager_us, graph_us
    from issue28_probe import dense, weights

    rows = []
    for n, k in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(n * 31 + k)
        ws = weights(n, k, gen)
        for dt, mlist in ((torch.bfloat16, ms), (torch.float16, fp16_ms)):
            ds = [dense(p).to(dt) for p in ws]
            for m in mlist:
                a = torch.randn((m, k), generator=gen, device="cuda", dtype=dt)
                fns = [lambda p=p: fk.scaled_fp4_w4a16_mm(a, p, None, 1.0) for p in ws]
                tfns = [lambda d=d: torch.matmul(a, d.T) for d in ds]
                digest = hashlib.sha256(fns[0]().float().cpu().numpy().tobytes()).hexdigest()[:16]
                rows.append({"n": n, "k": k, "m": m, "dtype": str(dt).split(".")[-1],
                             "graph": graph_us(fns), "eager": eager_us(fns), "torch": graph_us(tfns),
                             "sha": digest})
                print("%s %5d x %5d M %4d %s graph %.1f us" % (label, n, k, m, rows[-1]["dtype"],
                                                               rows[-1]["graph"]), flush=True)
            del ds
        del ws
    json.dump({"label": label, "device": torch.cuda.get_device_name(), "copy": copy_rate(),
               "rows": rows}, open(out, "w"), indent=1)


def compare(paths):
    runs = [json.load(open(p)) for p in paths]
    labels = list(dict.fromkeys(r["label"] for r in runs))
    if len(labels) != 2:
        raise SystemExit("compare: two labels expected, got %s" % labels)
    key = lambda r: (r["n"], r["k"], r["m"], r["dtype"])  # noqa: E731
    best, shas = {}, {}
    for r in runs:
        for row in r["rows"]:
            b = best.setdefault((r["label"], key(row)), dict(row))
            for f in ("graph", "eager", "torch"):
                b[f] = min(b[f], row[f])
            shas.setdefault(key(row), set()).add(row["sha"])
    copy = max(r["copy"] for r in runs)
    base, new = labels
    print("device %s, copy %.2f TB/s; best of %d runs per build" % (runs[0]["device"], copy / 1e12,
                                                                   len(runs) // 2))
    print("%-12s %5s %5s | %9s %9s %7s | %9s %9s %7s | %8s %7s %6s | %s" % (
        "shape", "M", "dtype", base + " g", new + " g", "new/b", base + " e", new + " e", "new/b",
        "torch", "x torch", "copy%", "bits"))
    same_all = True
    for (lab, k), b in best.items():
        if lab != base:
            continue
        nw = best[(new, k)]
        same = len(shas[k]) == 1
        same_all &= same
        wbytes = k[0] * k[1] * 0.5625
        print("%-12s %5d %5s | %9.1f %9.1f %7.3f | %9.1f %9.1f %7.3f | %8.1f %7.2f %6.0f | %s" % (
            "%dx%d" % (k[0], k[1]), k[2], k[3], b["graph"], nw["graph"], nw["graph"] / b["graph"],
            b["eager"], nw["eager"], nw["eager"] / b["eager"], min(b["torch"], nw["torch"]),
            min(b["torch"], nw["torch"]) / nw["graph"], 100 * wbytes / (nw["graph"] * 1e-6) / copy,
            "same" if same else "DIFFERENT"))
    return 0 if same_all else 1


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("label")
    r.add_argument("out")
    r.add_argument("--m", default="1,4,16,32,64,128")
    r.add_argument("--fp16-m", default="1,16,64")
    c = sub.add_parser("compare")
    c.add_argument("paths", nargs="+")
    a = ap.parse_args()
    if a.cmd == "run":
        ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
        run(a.label, a.out, ints(a.m), ints(a.fp16_m))
        return 0
    return compare(a.paths)


if __name__ == "__main__":
    sys.exit(main())
