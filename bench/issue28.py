"""Issue 28's table: NVFP4 GEMMs on prepacked weights against torch's 16-bit matmul on the GPU.

For the five layer shapes N x K and M = 1 .. 4096 tokens: torch.matmul with the weight in bf16
(fp16 for fp16 activations) against ``scaled_fp4_w4a16_mm`` on a ``PackedFP4Weight`` (the default
dispatch, and each kernel forced: cuda_pk.cu's mma.sync kernel, cuda_wg.cu's wgmma kernel, the
dequantize + cuBLAS path) and W4A4 ``scaled_fp4_mm`` with the activation quantize counted. Times
are microseconds per call: CUDA graph replay of CALLS calls and eager back-to-back calls, weights
rotated among 4 copies (every call reads its weight from DRAM, not L2), the best of 7 replays.
The graph times of torch and of the default dispatch are each measured twice, apart (first, and again
after the forced kernels), and the table's ratio is best against best: on an H100 the compute-heavy
rows moved by 5-18% between two measurements of the same graph (bench/NOTES.md, "Issue 28: wide
tiles"); both measurements are kept in the JSON (``*_graph_first``, ``*_graph_again``).
The copy bandwidth (read + write bytes of a 2 GiB device copy, per second) is measured in the
same run; "copy %" is the weight bytes at that rate over the measured time. Every result is
checked against the float64 reference on 256 output columns with the documented error bound
(fp4_kernels.reference), on fresh random inputs each run (seed printed).

    python bench/issue28.py --out DIR   # on a GPU host with fp4_kernels installed
"""
from __future__ import annotations

import argparse
import json
import os
import time

import torch

import fp4_kernels as fk
from fp4_kernels import _gemm_fast
from fp4_kernels import reference as ref

SHAPES = [(8192, 8192), (14336, 4096), (4096, 14336), (2048, 7168), (7168, 2048)]
MS = [1, 4, 16, 32, 64, 128, 256, 512, 1024, 4096]
TARGET = {1: 3.0, 4: 3.0, 16: 3.0, 32: 2.5, 64: 1.8, 128: 1.2}  # vs torch; 0.95 from 256
COPIES, CALLS = 4, 40


def graph_us(fns):
    """Best per-call time (us) of a CUDA graph replaying CALLS calls of fns (rotated)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fns:
            f()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(CALLS):
            fns[i % len(fns)]()
    g.replay()
    torch.cuda.synchronize()
    best = 1e30
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(7):
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        best = min(best, e0.elapsed_time(e1) * 1000.0 / CALLS)
    del g
    return best


def eager_us(fns):
    """Best per-call time (us) of CALLS eager back-to-back calls (host cost included)."""
    for f in fns:
        f()
    torch.cuda.synchronize()
    best = 1e30
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(7):
        e0.record()
        for i in range(CALLS):
            fns[i % len(fns)]()
        e1.record()
        e1.synchronize()
        best = min(best, e0.elapsed_time(e1) * 1000.0 / CALLS)
    return best


def host_us(fn, n=200):
    """Host cost (us) of one call: wall time of n calls queued without waiting (GPU kept busy)."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) * 1e6 / n


def copy_rate():
    """Device copy bandwidth, bytes read + written per second, of a 2 GiB buffer."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = eager_us([lambda: dst.copy_(src)])
    del src, dst
    return 2 * (1 << 30) / (us * 1e-6)


def check(out, a, b_q, b_scale, alpha, cols):
    """worst |out - ref| / bound over the columns `cols`, and whether anything is NaN."""
    a64 = a.to(torch.float64)
    b_q, b_scale = b_q[cols], b_scale.view(torch.uint8)[cols].view(b_scale.dtype)
    b = ref.dequantize_unscaled(b_q, b_scale).to(torch.float64)
    r = (a64 @ b.T) * alpha
    bound = ref.scaled_fp4_w4a16_mm_error_bound(a, b_q, b_scale, alpha, out.dtype)
    got = out[:, cols].to(torch.float64)
    return float(((got - r).abs() / bound).max()), bool(torch.isnan(out).any())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", default=",".join("%dx%d" % s for s in SHAPES))
    ap.add_argument("--m", default=",".join(map(str, MS)))
    ap.add_argument("--fp16-m", default="1,16,64,256,1024", help="M also run with fp16 activations")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    seed = int(time.time())
    gen = torch.Generator(device="cuda").manual_seed(seed)
    rate = copy_rate()
    print("seed %d, copy bandwidth %.2f TB/s, wgmma kernel: %s" % (seed, rate / 1e12, fk._C.wg_supported(0)))
    rows = []
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    ms = [int(v) for v in args.m.split(",")]
    fp16_ms = {int(v) for v in args.fp16_m.split(",") if v}
    for n, k in shapes:
        ws = []
        for _ in range(COPIES):
            w = torch.randn((n, k), generator=gen, device="cuda", dtype=torch.bfloat16)
            gs = 448 * 6 / float(w.abs().max())
            b_q, b_s = fk.scaled_fp4_quant(w, gs)
            ws.append((b_q, b_s, fk.prepack_fp4_weight(b_q, b_s), 1.0 / gs))
        alpha = ws[0][3]
        cols = torch.randperm(n, generator=gen, device="cuda")[:256]
        wbytes = ws[0][2].data.numel()
        for dt in (torch.bfloat16, torch.float16):
            dense = [ref.dequantize_unscaled(b_q, b_s).to(dt) * al for b_q, b_s, _, al in ws]
            for m in ms:
                if dt is torch.float16 and m not in fp16_ms:
                    continue
                a = torch.randn((m, k), generator=gen, device="cuda", dtype=dt)
                gsa = 448 * 6 / float(a.abs().max())
                r = {"n": n, "k": k, "m": m, "dtype": str(dt).split(".")[-1]}
                torch_fns = [lambda d=d: torch.matmul(a, d.T) for d in dense]
                r["torch_graph"] = graph_us(torch_fns)
                r["torch_eager"] = eager_us(torch_fns)
                fns = [lambda p=p, al=al: fk.scaled_fp4_w4a16_mm(a, p, None, al) for _, _, p, al in ws]
                out = fns[0]()
                r["err"], r["nan"] = check(out, a, ws[0][0], ws[0][1], alpha, cols)
                r["w4a16_graph"] = graph_us(fns)
                r["w4a16_eager"] = eager_us(fns)
                r["host_w4a16"] = host_us(fns[0])
                r["host_torch"] = host_us(torch_fns[0])
                for kern in ("pk", "wg"):
                    if kern == "wg" and not fk._C.wg_supported(0):
                        continue
                    _gemm_fast.set_pk_kernel(kern)
                    try:  # "pk" above M = 64: the dequantize + cuBLAS path
                        o = fns[0]()
                        r[kern + "_err"], r[kern + "_nan"] = check(o, a, ws[0][0], ws[0][1], alpha, cols)
                        r[kern + "_graph"] = graph_us(fns)
                    finally:
                        _gemm_fast.set_pk_kernel("auto")
                # the default dispatch once more, after the forced kernels: the same calls measured
                # first and last (an order effect shows as a gap between the two)
                r["torch_graph_again"] = graph_us(torch_fns)
                r["w4a16_graph_again"] = graph_us(fns)
                for key in ("torch_graph", "w4a16_graph"):  # best of the two, apart (see the docstring)
                    r[key + "_first"] = r[key]
                    r[key] = min(r[key], r[key + "_again"])
                if dt is torch.bfloat16:
                    def w4a4(p, al):
                        a_q, a_s = fk.scaled_fp4_quant(a, gsa)
                        return fk.scaled_fp4_mm(a_q, p, a_s, None, al / gsa)
                    f4 = [lambda p=p, al=al: w4a4(p, al) for _, _, p, al in ws]
                    f4[0]()
                    r["w4a4_graph"] = graph_us(f4)
                    r["w4a4_eager"] = eager_us(f4)
                r["copy_us"] = wbytes / rate * 1e6
                rows.append(r)
                tgt = TARGET.get(m, 0.95)
                sp = r["torch_graph"] / r["w4a16_graph"]
                print("%5dx%-5d %s M=%-4d torch %7.1f | w4a16 %7.1f (%.2fx, target %.2fx %s) eager %.2fx | "
                      "first %.1f / %.1f | pk %s wg %s | w4a4 %s | copy %.0f%% | err %.2f%s" % (
                          n, k, r["dtype"], m, r["torch_graph"], r["w4a16_graph"], sp, tgt,
                          "met" if sp >= tgt else "MISSED", r["torch_eager"] / r["w4a16_eager"],
                          r["torch_graph_first"], r["w4a16_graph_first"],
                          "%.1f" % r["pk_graph"] if "pk_graph" in r else "-",
                          "%.1f" % r["wg_graph"] if "wg_graph" in r else "-",
                          "%.1f" % r["w4a4_graph"] if "w4a4_graph" in r else "-",
                          100 * r["copy_us"] / r["w4a16_graph"], r["err"], " NaN" if r["nan"] else ""),
                      flush=True)
        del ws, dense
        torch.cuda.empty_cache()
    with open(os.path.join(args.out, "issue28.json"), "w") as f:
        json.dump({"seed": seed, "copy_bytes_per_s": rate, "device": torch.cuda.get_device_name(0),
                   "torch": torch.__version__, "build": fk.build_info(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
