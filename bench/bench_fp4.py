#!/usr/bin/env python3
"""Benchmark fp4_kernels on a CUDA GPU (run by hand or by bench/run_on_gpu.sh, e.g. on an H200).

Measures, with CUDA events (median of timed samples after warm-up; each sample times
``inner`` back-to-back calls, inputs larger than L2 and rotated among several buffers):
  * a device-to-device copy (the bandwidth ceiling, bytes read + written);
  * the host-side cost of one call of each function (tiny tensors, wall clock);
  * scaled_fp4_quant and dequantize_fp4 for bf16 M x K = 8192^2 and 16384^2: achieved
    bandwidth, fraction of the copy bandwidth, speedup vs fp4_kernels.reference, and the
    GPU-only time of the same calls replayed from a CUDA graph;
  * scaled_fp4_grouped_quant for 64 experts;
  * scaled_fp4_mm for 8192^3 (impl cublas / mma) vs torch bf16 matmul and vs dequantize +
    bf16 matmul, plus skinny shapes that decide the impl dispatch.
Before timing, the CUDA quantize / dequantize paths are checked bit for bit against the CPU
path (edge values, special global scales, swizzle, grouped). GEMM variants are timed
interleaved (one sample of each in turn) so that clock / power drift hits all alike.
Prints a table and writes JSON.

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
    ap.add_argument("--iters", type=int, default=30, help="timed samples per case")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="small shapes (smoke test)")
    ap.add_argument("--no-reference", action="store_true", help="skip timing the torch reference")
    ap.add_argument("--expert-rows", type=int, default=1024)
    ap.add_argument("--expert-k", type=int, default=4096)
    ap.add_argument("--gemm", type=int, default=8192, help="M = N = K of the GEMM case")
    ap.add_argument("--skinny", default="16,128,1024",
                    help="M values of the skinny GEMM cases (N = K = --gemm); '' for none")
    ap.add_argument("--fused-shapes", default="8192x8192,4096x14336,14336x4096,7168x2048,2048x7168",
                    help="N x K weight shapes of the fused-GEMM table ('' for none)")
    ap.add_argument("--fused-m", default="1,16,64,128,256,1024",
                    help="M (tokens) values of the fused-GEMM table")
    ap.add_argument("--sweep-m", default="1,16,64,128",
                    help="M values of the launch-configuration sweep ('' for none)")
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--no-verify-fused", action="store_true")
    ap.add_argument("--only-skinny", action="store_true",
                    help="copy ceiling, host costs, fused-GEMM checks, the fused table and the sweeps only")
    ap.add_argument("--sweep-pk-m", default="1,16,64,128",
                    help="M values of the prepacked-kernel launch sweep ('' for none)")
    ap.add_argument("--no-sweep", action="store_true", help="skip the old kernel's launch sweep")
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


def bench_interleaved(torch, fns, iters, warmup, inner=3):
    """Median milliseconds per call of each fn in ``fns`` (name -> fn()), sampled in turn."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    times = {k: [] for k in fns}
    for _ in range(iters):
        for name, fn in fns.items():
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(inner):
                fn()
            e.record()
            e.synchronize()
            times[name].append(s.elapsed_time(e) / inner)
    return {k: statistics.median(v) for k, v in times.items()}


def bench_graph(torch, fn, bufs, iters, inner=10):
    """Median GPU milliseconds per call of ``inner`` calls captured in one CUDA graph."""
    for b in bufs[:2]:
        fn(b)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn(bufs[0])
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        for i in range(inner):
            fn(bufs[i % len(bufs)])
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / inner)
    del g
    return statistics.median(times)


def host_us(torch, fn, n=300):
    """Wall-clock microseconds per call for a GPU-trivial call (host-side cost)."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def n_buffers(bytes_per_buf, l2_bytes):
    """How many buffers to rotate so that together they exceed 3 x L2 (at least 2)."""
    return max(2, min(8, int(3 * l2_bytes // max(bytes_per_buf, 1)) + 1))


def _same(torch, a, b):
    a, b = a.cpu().contiguous(), b.cpu().contiguous()
    if a.dtype == torch.float8_e4m3fn:
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    return a.shape == b.shape and torch.equal(a, b)


def verify_quant(torch, fk, gen, dev):
    """Bit-exact check of the CUDA quantize path against the CPU path."""
    bad = []
    for dt, (m, k) in ((torch.bfloat16, (1031, 2064)), (torch.float16, (257, 528)),
                       (torch.float32, (129, 272))):
        x = torch.randn((m, k), generator=gen) * (10.0 ** (torch.rand((m, k // 16, 1), generator=gen)
                                                            * 8 - 4)).repeat_interleave(16, 1).reshape(m, k)
        x[0, :16] = 0.0
        x[0, 16:32] = -0.0
        x[0, 37] = float("nan")
        x[0, 50] = float("inf")
        x[0, 70] = float("-inf")
        x[1, :16] *= 1e-30
        x[2, 16:32] = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0] * 2) * (1 - 2 * (torch.arange(16) % 2))
        x = x.to(dt)
        for gs in (448.0 * 6.0 / 5.0, 1.0, 2.0 ** -20, 3e38, -2.0, float("nan"), float("inf"), 0.0):
            for swz in (False, True):
                q, s = fk.scaled_fp4_quant(x.to(dev), gs, swizzle=swz)
                cq, cs = fk.scaled_fp4_quant(x, gs, swizzle=swz)
                if not (_same(torch, q, cq) and _same(torch, s, cs)):
                    bad.append("%s %dx%d gs=%g swizzle=%s" % (dt, m, k, gs, swz))
    xs = [torch.randn((mm, 256), generator=gen).to(torch.bfloat16) for mm in (5, 0, 300, 1, 64)]
    gss = torch.rand((5,), generator=gen) + 0.5
    for swz in (False, True):
        qs, ss = fk.scaled_fp4_grouped_quant([x.to(dev) for x in xs], gss.to(dev), swizzle=swz)
        cq, cs = fk.scaled_fp4_grouped_quant(xs, gss, swizzle=swz)
        for i in range(len(xs)):
            if not (_same(torch, qs[i], cq[i]) and _same(torch, ss[i], cs[i])):
                bad.append("grouped[%d] swizzle=%s" % (i, swz))
    return bad


def verify_dequant(torch, fk, gen, dev):
    bad = []
    q = torch.randint(0, 256, (515, 64), generator=gen, dtype=torch.uint8)
    s = torch.randint(0, 256, (515, 8), generator=gen, dtype=torch.uint8)
    for dt in (torch.bfloat16, torch.float16, torch.float32):
        for gs in (1.0, 0.37, 1e6):
            a = fk.dequantize_fp4(q.to(dev), s.to(dev), gs, dt).cpu()
            b = fk.dequantize_fp4(q, s, gs, dt)
            na, nb = torch.isnan(a), torch.isnan(b)
            if not (torch.equal(na, nb) and torch.equal(a.masked_fill(na, 0), b.masked_fill(nb, 0))):
                bad.append("%s gs=%g" % (dt, gs))
    return bad


def main(argv=None):
    args = parse_args(argv)
    import torch

    import fp4_kernels as fk
    from fp4_kernels import _gemm
    from fp4_kernels import reference as ref

    sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
    import skinny_cases as sk

    if not torch.cuda.is_available():
        print("bench_fp4: no CUDA device; nothing to measure", file=sys.stderr)
        return 2
    dev = torch.device(args.device)
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(dev)
    props = torch.cuda.get_device_properties(dev)
    l2 = getattr(props, "L2_cache_size", 64 << 20)
    it, wu = args.iters, args.warmup
    gen = torch.Generator().manual_seed(20261129)
    results = {"device": props.name, "sm": "%d.%d" % (props.major, props.minor),
               "sms": props.multi_processor_count, "build": fk.build_info(),
               "torch": torch.__version__, "cases": [], "checks": {}}
    rows = []

    def row(name, ms, gbs=None, frac=None, ref_ms=None, notes=""):
        rows.append((name, ms, gbs, frac, ref_ms, notes))

    results["errors"] = []

    def guard(name, fn, *a):
        """Run one section; an exception is recorded and printed, the benchmark goes on."""
        try:
            return fn(*a)
        except Exception as e:  # noqa: BLE001
            import traceback
            msg = "%s: %s: %s" % (name, type(e).__name__, e)
            results["errors"].append(msg + " | " + traceback.format_exc(limit=4).replace("\n", " "))
            print("ERROR", msg, flush=True)
            torch.cuda.synchronize()
            return None

    # ---- copy ceiling
    n = (1 << 28) if not args.quick else (1 << 24)  # elements of bf16 (512 MiB)
    src = [torch.randn(n, device=dev, dtype=torch.bfloat16) for _ in range(2)]
    dst = torch.empty_like(src[0])
    ms = bench(torch, lambda s: dst.copy_(s), src, it, wu)
    copy_gbs = 2 * n * 2 / ms / 1e6
    results["copy_GBps"] = copy_gbs
    row("d2d copy %d MiB" % (n * 2 >> 20), ms, copy_gbs, 1.0)
    del src, dst

    # ---- host-side cost per call (GPU work negligible)
    xt = torch.randn(128, 128, device=dev, dtype=torch.bfloat16)
    gst = torch.tensor(3.0, device=dev)
    qt, st = fk.scaled_fp4_quant(xt, gst)
    gxt = [torch.randn(16, 128, device=dev, dtype=torch.bfloat16) for _ in range(args.experts)]
    ggt = torch.ones(args.experts, device=dev)
    host = {
        "quant": guard("host quant", host_us, torch, lambda: fk.scaled_fp4_quant(xt, gst)),
        "dequant": guard("host dequant", host_us, torch, lambda: fk.dequantize_fp4(qt, st, gst)),
        "grouped_quant_%d" % args.experts: guard("host grouped", host_us, torch,
                                                 lambda: fk.scaled_fp4_grouped_quant(gxt, ggt), 50),
        "mm_cublas": guard("host mm cublas", host_us, torch,
                           lambda: fk.scaled_fp4_mm(qt, qt, st, st, gst, impl="cublas")),
        "mm_mma": guard("host mm mma", host_us, torch,
                        lambda: fk.scaled_fp4_mm(qt, qt, st, st, gst, impl="mma")),
        "torch_empty_x2": host_us(torch, lambda: (torch.empty(128, 64, dtype=torch.uint8, device=dev),
                                                  torch.empty(128, 8, dtype=torch.uint8, device=dev))),
    }
    host.update(guard("host fused", sk.host_costs, torch, fk, dev, host_us, args.experts) or {})
    results["host_us_per_call"] = host
    results["cublas"] = {"lib": _gemm._cublas_lib, "why_not": _gemm._cublas_why}
    del xt, gxt

    # ---- correctness (bit for bit against the CPU path)
    for name, fn in (("quant", verify_quant), ("dequant", verify_dequant)):
        bad = guard("verify " + name, fn, torch, fk, gen, dev)
        results["checks"][name] = bad
        print("%s: %s" % (name, "bit-exact" if bad == [] else "MISMATCH / ERROR %s" % (bad or [])[:4]),
              flush=True)
    if not args.no_verify_fused:
        r = guard("verify fused", sk.verify, torch, fk, ref, dev)
        if r is not None:
            results["checks"]["fused"] = {"failures": r[0], "worst_err_over_bound": r[1]}
            print("fused GEMMs: %s (worst |err| / bound %.3g)" % (
                "all within bound" if not r[0] else "FAILURES %s" % r[0][:6], r[1]), flush=True)
    if not args.only_skinny:
        results["rounding_vs_rcp_formula"] = guard("rounding compare", sk.rounding_compare, torch, fk, dev)
        guard("big shapes", big_shapes, torch, fk, ref, args, dev, l2, it, wu, results, row, guard, copy_gbs)
    skinny_tables(torch, fk, sk, args, dev, l2, it, results, row, guard, copy_gbs)
    report(args, rows, host, results)
    return 0


def big_shapes(torch, fk, ref, args, dev, l2, it, wu, results, row, guard, copy_gbs):
    """quant / dequant / grouped quant at 8192^2 and 16384^2, the 8192^3 GEMM and its skinny rows."""
    shapes = [(8192, 8192), (16384, 16384)] if not args.quick else [(1024, 1024), (2048, 4096)]
    for (m, k) in shapes:
        x_bytes = m * k * 2
        nb = n_buffers(x_bytes, l2)
        xs = [torch.randn(m, k, device=dev, dtype=torch.bfloat16) for _ in range(nb)]
        gs = torch.tensor(448.0 * 6.0 / 5.0, device=dev)
        moved = x_bytes + m * k // 2 + m * k // 16
        ms = guard("quant", bench, torch, lambda x: fk.scaled_fp4_quant(x, gs), xs, it, wu)
        if ms is not None:
            gms = guard("graph quant", bench_graph, torch, lambda x: fk.scaled_fp4_quant(x, gs), xs,
                        max(5, it // 3)) or float("nan")
            ref_ms = None
            if not args.no_reference:
                ref_ms = bench(torch, lambda x: ref.scaled_fp4_quant(x, gs), xs[:2], max(3, it // 5), 1, inner=2)
            case = {"name": "scaled_fp4_quant", "shape": [m, k], "ms": ms,
                    "GBps": moved / ms / 1e6, "frac_copy": moved / ms / 1e6 / copy_gbs,
                    "graph_ms": gms, "graph_frac_copy": moved / gms / 1e6 / copy_gbs, "ref_ms": ref_ms}
            results["cases"].append(case)
            row("quant bf16 %dx%d" % (m, k), ms, case["GBps"], case["frac_copy"], ref_ms,
                "graph %.1f%%" % (100 * case["graph_frac_copy"]))
        qs = [fk.scaled_fp4_quant(x, gs) for x in xs]
        del xs
        ms = guard("dequant", bench, torch,
                   lambda qs_: fk.dequantize_fp4(qs_[0], qs_[1], gs, torch.bfloat16), qs, it, wu)
        if ms is not None:
            gms = guard("graph dequant", bench_graph, torch,
                        lambda qs_: fk.dequantize_fp4(qs_[0], qs_[1], gs, torch.bfloat16), qs,
                        max(5, it // 3)) or float("nan")
            ref_ms = None
            if not args.no_reference:
                ref_ms = bench(torch, lambda qs_: ref.dequantize_fp4(qs_[0], qs_[1], gs, torch.bfloat16),
                               qs[:2], max(3, it // 5), 1, inner=2)
            case = {"name": "dequantize_fp4", "shape": [m, k], "ms": ms,
                    "GBps": moved / ms / 1e6, "frac_copy": moved / ms / 1e6 / copy_gbs,
                    "graph_ms": gms, "graph_frac_copy": moved / gms / 1e6 / copy_gbs, "ref_ms": ref_ms}
            results["cases"].append(case)
            row("dequant bf16 %dx%d" % (m, k), ms, case["GBps"], case["frac_copy"], ref_ms,
                "graph %.1f%%" % (100 * case["graph_frac_copy"]))
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
    ms = guard("grouped", bench, torch, lambda g: fk.scaled_fp4_grouped_quant(g, ggs), groups, it, wu)
    if ms is not None:
        gms = guard("graph grouped", bench_graph, torch, lambda g: fk.scaled_fp4_grouped_quant(g, ggs),
                    groups, max(5, it // 3)) or float("nan")
        ref_ms = None
        if not args.no_reference:
            ref_ms = bench(torch, lambda g: ref.scaled_fp4_grouped_quant(g, ggs), groups[:2], 3, 1, inner=1)
        case = {"name": "scaled_fp4_grouped_quant", "experts": e, "shape": [em, ek],
                "ms": ms, "GBps": moved / ms / 1e6, "frac_copy": moved / ms / 1e6 / copy_gbs,
                "graph_ms": gms, "graph_frac_copy": moved / gms / 1e6 / copy_gbs, "ref_ms": ref_ms}
        results["cases"].append(case)
        row("grouped quant %dx[%dx%d]" % (e, em, ek), ms, case["GBps"], case["frac_copy"], ref_ms,
            "graph %.1f%%" % (100 * case["graph_frac_copy"]))
    del groups
    torch.cuda.empty_cache()

    # ---- GEMM
    g = args.gemm if not args.quick else 1024
    git = max(5, it // 3)

    def gemm_case(m, full):
        a = torch.randn(m, g, device=dev, dtype=torch.bfloat16)
        b = torch.randn(g, g, device=dev, dtype=torch.bfloat16)
        ga = 448.0 * 6.0 / float(a.abs().max())
        gb = 448.0 * 6.0 / float(b.abs().max())
        aq, asc = fk.scaled_fp4_quant(a, ga)
        bq, bsc = fk.scaled_fp4_quant(b, gb)
        alpha = torch.tensor(1.0 / (ga * gb), device=dev)
        flops = 2.0 * m * g * g
        fns = {
            "default": lambda: fk.scaled_fp4_mm(aq, bq, asc, bsc, alpha, torch.bfloat16),
            "mma": lambda: fk.scaled_fp4_mm(aq, bq, asc, bsc, alpha, torch.bfloat16, impl="mma"),
            "bf16_matmul": lambda: a @ b.T,
            "dequant_plus_bf16": lambda: (fk.dequantize_fp4(aq, asc, ga, torch.bfloat16)
                                          @ fk.dequantize_fp4(bq, bsc, gb, torch.bfloat16).T),
        }
        if full:
            fal = float(alpha)
            fns["float_alpha"] = lambda: fk.scaled_fp4_mm(aq, bq, asc, bsc, fal, torch.bfloat16)
            try:  # torch.mm(..., out_dtype=float32) exists from torch 2.8 on
                torch.mm(a[:16], b[:16].T, out_dtype=torch.float32)
                has_out_dtype = True
            except (TypeError, RuntimeError):
                has_out_dtype = False
        if full and has_out_dtype:
            fns["fp32_out_then_scale"] = lambda: torch.mul(
                torch.mm(fk.dequantize_fp4(aq, asc, 1.0, torch.bfloat16),
                         fk.dequantize_fp4(bq, bsc, 1.0, torch.bfloat16).T, out_dtype=torch.float32),
                alpha).to(torch.bfloat16)
        t = guard("gemm timing", bench_interleaved, torch, fns, git, 2) or {}
        errs = {}
        exp = (fk.dequantize_fp4(aq, asc, ga, torch.float32).double()
               @ fk.dequantize_fp4(bq, bsc, gb, torch.float32).double().T)
        for impl in ("cublas", "mma"):
            out = fk.scaled_fp4_mm(aq, bq, asc, bsc, alpha, torch.float32, impl=impl).double()
            errs[impl] = float((out - exp).norm() / exp.norm())
            if full:  # the documented bound, element-wise, on a row slab
                sl = slice(0, 256)
                bound = ref.scaled_fp4_mm_error_bound(aq[sl], bq, asc[sl], bsc, float(alpha),
                                                      torch.bfloat16)
                o16 = fk.scaled_fp4_mm(aq[sl], bq, asc[sl], bsc, alpha, torch.bfloat16, impl=impl)
                e16 = ref.scaled_fp4_mm(aq[sl], bq, asc[sl], bsc, float(alpha), torch.float64)
                errs[impl + "_worst_err_over_bound_bf16"] = float(((o16.double() - e16).abs() / bound).max())
        case = {"name": "scaled_fp4_mm", "shape": [m, g, g], "ms": t,
                "TFLOPs": {k_: flops / v / 1e9 for k_, v in t.items()}, "rel_err_vs_fp64": errs}
        results["cases"].append(case)
        tf = case["TFLOPs"]
        row("fp4 mm %dx%dx%d" % (m, g, g), t["default"], None, None, None,
            "%.0f TFLOP/s (mma %.0f) | bf16 mm %.0f | deq+bf16 %.0f%s"
            % (tf["default"], tf["mma"], tf["bf16_matmul"], tf["dequant_plus_bf16"],
               " | float alpha %.0f, fp32-out+scale %s" % (
                   tf["float_alpha"], "%.0f" % tf["fp32_out_then_scale"] if "fp32_out_then_scale" in tf else "-")
               if full else ""))
        del a, b
        torch.cuda.empty_cache()

    guard("gemm %d" % g, gemm_case, g, True)
    for m in [int(v) for v in args.skinny.split(",") if v.strip()]:
        if not args.quick:
            guard("gemm skinny %d" % m, gemm_case, m, False)


def skinny_tables(torch, fk, sk, args, dev, l2, it, results, row, guard, copy_gbs):
    """The fused-GEMM table (old fused kernel, prepacked kernel, cuBLAS path, torch bf16), the MoE
    cases and the launch sweeps."""
    shapes = [tuple(int(v) for v in s_.split("x")) for s_ in args.fused_shapes.split(",") if s_.strip()]
    fms = [int(v) for v in args.fused_m.split(",") if v.strip()]
    if args.quick:
        shapes, fms = [(1024, 2048)], [1, 16]
    if shapes:
        results["fused"] = guard("fused cases", sk.dense_cases, torch, fk, dev, copy_gbs, l2, shapes, fms,
                                 max(7, it // 2)) or []
        for c in results["fused"]:
            if "graph_ms" in c:
                gm = c["graph_ms"]
                row("prepacked %dx%d M=%d" % (c["n"], c["k"], c["m"]), c["ms"]["w4a16_pk"], None,
                    c["frac_copy_w4a16_pk"], None,
                    "graph: bf16 %.4f | W4A16 pk %.4f (%.2fx, %.0f%%) | W4A4 pk %.4f (%.2fx, %.0f%%) | old W4A4 %.4f "
                    "W4A16 %.4f | back to back: bf16 %.4f W4A4 pk %.4f W4A16 pk %.4f" % (
                        gm["bf16"], gm["w4a16_pk"], gm["bf16"] / gm["w4a16_pk"], 100 * c["graph_frac_copy_w4a16_pk"],
                        gm["fp4_pk"], gm["bf16"] / gm["fp4_pk"], 100 * c["graph_frac_copy_pk"], gm["fp4"],
                        gm["w4a16"], c["ms"]["bf16"], c["ms"]["fp4_pk"], c["ms"]["w4a16_pk"]))
            row("fused %dx%d M=%d" % (c["n"], c["k"], c["m"]), c["ms"]["fp4"], c["GBps"], c["frac_copy"], None,
                "bf16 %.4f -> %.2fx | w4a16 %.4f %.2fx | old %.4f%s" % (
                    c["ms"]["bf16"], c["bf16_over_fp4"], c["ms"]["w4a16"], c["bf16_over_w4a16"],
                    c["ms"]["fp4_cublas"], " || graph bf16 %.4f fp4 %.4f %.2fx %.0f%% w4a16 %.2fx" % (
                        c["graph_ms"]["bf16"], c["graph_ms"]["fp4"], c["graph_bf16_over_fp4"],
                        100 * c["graph_frac_copy"], c["graph_bf16_over_w4a16"])
                    if "graph_ms" in c else ""))
        results["fused_grouped"] = guard("grouped cases", sk.grouped_cases, torch, fk, dev, copy_gbs,
                                         max(7, it // 2), args.experts) or []
        for c in results["fused_grouped"]:
            row("grouped %dx[%dx%d] %d tok/e" % (c["experts"], c["n"], c["k"], c["tokens_per_expert"]),
                c["ms"]["fp4"], c["GBps"], c["frac_copy"], None,
                "w4a16 %.4f%s" % (c["ms"]["w4a16"], " | bf16 _grouped_mm %.4f (%.2fx)" % (
                    c["ms"]["bf16_grouped_mm"], c["bf16_over_fp4"]) if "bf16_grouped_mm" in c["ms"] else ""))
    pms = [int(v) for v in args.sweep_pk_m.split(",") if v.strip()]
    if shapes and pms and not args.quick:
        results["pk_sweep"] = guard("sweep pk", sk.sweep_pk, torch, fk, dev, l2, shapes, pms, max(7, it // 2))
    sms = [int(v) for v in args.sweep_m.split(",") if v.strip()]
    if shapes and sms and not args.quick and not args.no_sweep:
        results["fused_sweep"] = guard("sweep", sk.sweep, torch, fk, dev, l2, shapes, sms, max(7, it // 2))


def report(args, rows, host, results):
    print("%-36s %10s %10s %8s %10s  %s" % ("case", "ms", "GB/s", "vs copy", "ref x", "notes"))
    for name, ms_, gbs, frac, rms, notes in rows:
        print("%-36s %10.4f %10s %8s %10s  %s" % (
            name, ms_, "%.0f" % gbs if gbs else "", "%.1f%%" % (100 * frac) if frac else "",
            "%.1fx" % (rms / ms_) if rms else "", notes))
    print("host us/call: " + ", ".join("%s %s" % (k_, "%.1f" % v_ if v_ else "-") for k_, v_ in host.items()))
    for e_ in results["errors"]:
        print("ERROR", e_[:300])
    print("cublas: %s" % (results["cublas"]["lib"] or "unavailable: " + results["cublas"]["why_not"]))
    results["timestamp"] = time.time()
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
    print("wrote", args.out)


if __name__ == "__main__":
    sys.exit(main())
