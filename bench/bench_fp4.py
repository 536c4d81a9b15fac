#!/usr/bin/env python3
"""Benchmark fp4_kernels on a CUDA GPU (run by hand, e.g. on an H200).

Measures, with CUDA events (median of timed repetitions after warm-up, inputs larger than
L2 and rotated among several buffers):
  * a device-to-device copy (the bandwidth ceiling, bytes read + written);
  * scaled_fp4_quant and dequantize_fp4 for bf16 M x K = 8192^2 and 16384^2: achieved
    bandwidth, fraction of the copy bandwidth, speedup vs fp4_kernels.reference;
  * scaled_fp4_grouped_quant for 64 experts;
  * scaled_fp4_mm for 8192^3: TFLOP/s vs torch bf16 matmul and vs dequantize + bf16 matmul.
Prints a table and writes JSON to --out.

Usage: python bench/bench_fp4.py --out bench_fp4.json [--quick] [--iters 30]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="fp4_kernels benchmark (CUDA)")
    ap.add_argument("--out", required=True, help="path of the JSON results file")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--iters", type=int, default=30, help="timed repetitions per case")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="small shapes (smoke test)")
    ap.add_argument("--no-reference", action="store_true", help="skip timing the torch reference")
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--expert-rows", type=int, default=1024)
    ap.add_argument("--expert-k", type=int, default=4096)
    ap.add_argument("--gemm", type=int, default=8192, help="M = N = K of the GEMM case")
    return ap.parse_args(argv)


def bench(torch, fn, bufs, iters, warmup, inner=10):
    """Median milliseconds per fn(buf) call, rotating through bufs.

    Each of ``iters`` samples times ``inner`` back-to-back calls between two CUDA events
    (so host-side launch overhead overlaps GPU work, as in a real pipeline) and divides.
    """
    for i in range(warmup):
        fn(bufs[i % len(bufs)])
    torch.cuda.synchronize()
    times = []
    k = 0
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(inner):
            fn(bufs[k % len(bufs)])
            k += 1
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / inner)
    return statistics.median(times)


def n_buffers(bytes_per_buf, l2_bytes):
    """How many buffers to rotate so that together they exceed 3 x L2 (at least 2)."""
    return max(2, min(8, int(3 * l2_bytes // max(bytes_per_buf, 1)) + 1))


def main(argv=None):
    args = parse_args(argv)
    import torch

    import fp4_kernels as fk
    from fp4_kernels import reference as ref

    if not torch.cuda.is_available():
        print("bench_fp4: no CUDA device; nothing to measure", file=sys.stderr)
        return 2
    dev = torch.device(args.device)
    props = torch.cuda.get_device_properties(dev)
    l2 = getattr(props, "L2_cache_size", 64 << 20)
    it, wu = args.iters, args.warmup
    results = {"device": props.name, "sm": "%d.%d" % (props.major, props.minor),
               "build": fk.build_info(), "torch": torch.__version__, "cases": []}
    rows = []

    # ---- copy ceiling
    n = (1 << 28) if not args.quick else (1 << 24)  # elements of bf16 (512 MiB)
    src = [torch.randn(n, device=dev, dtype=torch.bfloat16) for _ in range(2)]
    dst = torch.empty_like(src[0])
    ms = bench(torch, lambda s: dst.copy_(s), src, it, wu)
    copy_gbs = 2 * n * 2 / ms / 1e6
    results["copy_GBps"] = copy_gbs
    rows.append(("d2d copy %d MiB" % (n * 2 >> 20), ms, copy_gbs, 1.0, None, ""))
    del src, dst

    shapes = [(8192, 8192), (16384, 16384)] if not args.quick else [(1024, 1024), (2048, 4096)]
    for (m, k) in shapes:
        x_bytes = m * k * 2
        nb = n_buffers(x_bytes, l2)
        xs = [torch.randn(m, k, device=dev, dtype=torch.bfloat16) for _ in range(nb)]
        gs = torch.tensor(448.0 * 6.0 / 5.0, device=dev)
        moved = x_bytes + m * k // 2 + m * k // 16
        ms = bench(torch, lambda x: fk.scaled_fp4_quant(x, gs), xs, it, wu)
        ref_ms = None
        if not args.no_reference:
            ref_ms = bench(torch, lambda x: ref.scaled_fp4_quant(x, gs), xs[:2], max(3, it // 5), 1, inner=2)
        case = {"name": "scaled_fp4_quant", "shape": [m, k], "ms": ms, "GBps": moved / ms / 1e6,
                "frac_copy": moved / ms / 1e6 / copy_gbs, "ref_ms": ref_ms}
        results["cases"].append(case)
        rows.append(("quant bf16 %dx%d" % (m, k), ms, case["GBps"], case["frac_copy"], ref_ms, ""))

        qs = [fk.scaled_fp4_quant(x, gs) for x in xs]
        del xs
        ms = bench(torch, lambda qs_: fk.dequantize_fp4(qs_[0], qs_[1], gs, torch.bfloat16), qs, it, wu)
        ref_ms = None
        if not args.no_reference:
            ref_ms = bench(torch, lambda qs_: ref.dequantize_fp4(qs_[0], qs_[1], gs, torch.bfloat16),
                           qs[:2], max(3, it // 5), 1, inner=2)
        case = {"name": "dequantize_fp4", "shape": [m, k], "ms": ms, "GBps": moved / ms / 1e6,
                "frac_copy": moved / ms / 1e6 / copy_gbs, "ref_ms": ref_ms}
        results["cases"].append(case)
        rows.append(("dequant bf16 %dx%d" % (m, k), ms, case["GBps"], case["frac_copy"], ref_ms, ""))
        del qs
        torch.cuda.empty_cache()

    # ---- grouped quant (MoE)
    e, em, ek = args.experts, args.expert_rows, args.expert_k
    if args.quick:
        e, em, ek = 8, 128, 512
    group_bytes = e * em * ek * 2
    nb = n_buffers(group_bytes, l2)
    groups = [[torch.randn(em, ek, device=dev, dtype=torch.bfloat16) for _ in range(e)] for _ in range(nb)]
    ggs = torch.full((e,), 448.0 * 6.0 / 5.0, device=dev)
    moved = e * (em * ek * 2 + em * ek // 2 + em * ek // 16)
    ms = bench(torch, lambda g: fk.scaled_fp4_grouped_quant(g, ggs), groups, it, wu)
    ref_ms = None
    if not args.no_reference:
        ref_ms = bench(torch, lambda g: ref.scaled_fp4_grouped_quant(g, ggs), groups[:2], max(3, it // 5), 1, inner=2)
    case = {"name": "scaled_fp4_grouped_quant", "experts": e, "shape": [em, ek], "ms": ms,
            "GBps": moved / ms / 1e6, "frac_copy": moved / ms / 1e6 / copy_gbs, "ref_ms": ref_ms}
    results["cases"].append(case)
    rows.append(("grouped quant %dx[%dx%d]" % (e, em, ek), ms, case["GBps"], case["frac_copy"], ref_ms, ""))
    del groups
    torch.cuda.empty_cache()

    # ---- GEMM
    g = args.gemm if not args.quick else 1024
    a = torch.randn(g, g, device=dev, dtype=torch.bfloat16)
    b = torch.randn(g, g, device=dev, dtype=torch.bfloat16)
    ga = 448.0 * 6.0 / float(a.abs().max())
    gb = 448.0 * 6.0 / float(b.abs().max())
    aq, asc = fk.scaled_fp4_quant(a, ga)
    bq, bsc = fk.scaled_fp4_quant(b, gb)
    alpha = torch.tensor(1.0 / (ga * gb), device=dev)
    flops = 2.0 * g * g * g
    ms = bench(torch, lambda _: fk.scaled_fp4_mm(aq, bq, asc, bsc, alpha, torch.bfloat16), [0], it, wu)
    bf_ms = bench(torch, lambda _: a @ b.T, [0], it, wu)
    deq_ms = bench(torch, lambda _: fk.dequantize_fp4(aq, asc, ga, torch.bfloat16)
                   @ fk.dequantize_fp4(bq, bsc, gb, torch.bfloat16).T, [0], it, wu)
    out = fk.scaled_fp4_mm(aq, bq, asc, bsc, alpha, torch.float32)
    exp = (fk.dequantize_fp4(aq, asc, ga, torch.float32) @ fk.dequantize_fp4(bq, bsc, gb, torch.float32).T)
    rel = float((out - exp).norm() / exp.norm())
    case = {"name": "scaled_fp4_mm", "shape": [g, g, g], "ms": ms, "TFLOPs": flops / ms / 1e9,
            "bf16_matmul_TFLOPs": flops / bf_ms / 1e9, "dequant_plus_bf16_TFLOPs": flops / deq_ms / 1e9,
            "rel_err_vs_fp32_dequant_matmul": rel}
    results["cases"].append(case)
    rows.append(("fp4 mm %d^3" % g, ms, None, None, None,
                 "%.0f TFLOP/s | bf16 mm %.0f | deq+bf16 %.0f | rel.err %.1e"
                 % (case["TFLOPs"], case["bf16_matmul_TFLOPs"], case["dequant_plus_bf16_TFLOPs"], rel)))

    print("%-34s %10s %10s %8s %10s  %s" % ("case", "ms", "GB/s", "vs copy", "ref x", "notes"))
    for name, ms_, gbs, frac, rms, notes in rows:
        print("%-34s %10.4f %10s %8s %10s  %s" % (
            name, ms_, "%.0f" % gbs if gbs else "", "%.1f%%" % (100 * frac) if frac else "",
            "%.1fx" % (rms / ms_) if rms else "", notes))
    results["timestamp"] = time.time()
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
