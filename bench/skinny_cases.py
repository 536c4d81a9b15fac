"""Skinny / decode GEMM cases of bench_fp4.py (issue 14): the fused FP4 GEMM against torch's bf16
matmul side by side, W4A16, grouped (MoE), host cost per call, a launch-configuration sweep, and
the quantizer's rounding against sgl-kernel's / vLLM's formula.

Every timing rotates among enough weight copies to exceed 3x L2 (the FP4 weight of an
8192 x 8192 layer, 36 MB, would otherwise be served from the H200's 60 MB L2) and interleaves
the variants (A, B, C, A, B, C, ...) so that clock and power drift hit all of them alike.
"""
from __future__ import annotations

import statistics
import time


def _interleaved(torch, fns, iters, warmup=3, inner=5):
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


def _graph_ms(torch, fn, iters=10, inner=20):
    """GPU time per call of `inner` calls replayed from one CUDA graph (no launch gaps)."""
    fn()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(inner):
            fn()
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / inner)
    del g
    return statistics.median(ts)


class Rot:
    """Cycles through buffers: each call of next() returns the next one."""

    def __init__(self, items):
        self.items, self.i = items, 0

    def next(self):
        self.i = (self.i + 1) % len(self.items)
        return self.items[self.i]


def _weights(torch, fk, n, k, copies, dev, gen_seed, bf16_copies):
    g = torch.Generator(device=dev).manual_seed(gen_seed)
    w = torch.randn(n, k, device=dev, dtype=torch.bfloat16, generator=g)
    gw = 448.0 * 6.0 / float(w.float().abs().max())
    bq, bs = fk.scaled_fp4_quant(w, gw)
    fp4 = [(bq, bs)] + [(bq.clone(), bs.clone()) for _ in range(copies - 1)]
    bf = [w] + [w.clone() for _ in range(bf16_copies - 1)]
    return fp4, bf, gw


def n_copies(nbytes, l2):
    return max(2, min(12, int(3 * l2 // max(nbytes, 1)) + 1))


# ---- correctness on the GPU -----------------------------------------------------------------
def verify(torch, fk, ref, dev):
    """Fused kernels against the float64 reference (within the documented bound) and against
    the CPU path, over shapes that exercise partial tiles, token blocks, every K-warp count
    and cluster split. Returns (failures, worst err/bound)."""
    from fp4_kernels import _gemm

    bad, worst = [], 0.0
    g = torch.Generator().manual_seed(1414)

    def q(x):
        gs = 448.0 * 6.0 / float(x.abs().max())
        a, s = fk.scaled_fp4_quant(x, gs)
        return a, s, gs

    def check(name, out, exact, bound):
        nonlocal worst
        nan = torch.isnan(exact)
        nan_ok = bool(torch.equal(torch.isnan(out.double()), nan))
        fin = ~nan
        r = float(((out.double()[fin] - exact[fin]).abs() / bound[fin]).max()) if fin.any() else 0.0
        worst = max(worst, r)
        if not (r <= 1.0 and nan_ok):
            bad.append("%s: err/bound %.3g%s" % (name, r, "" if nan_ok else " NaN mismatch"))

    shapes = [(1, 40, 128), (5, 300, 1024), (16, 257, 4096), (33, 130, 512), (64, 512, 2048),
              (130, 72, 256), (200, 1000, 384)]
    for (m, n, k) in shapes:
        a = torch.randn(m, k, generator=g) * 2
        b = torch.randn(n, k, generator=g)
        aq, asc, ga = q(a)
        bq, bsc, gb = q(b)
        al = 1.0 / (ga * gb)
        exact = ref.scaled_fp4_mm(aq, bq, asc, bsc, al, torch.float64)
        for dt in (torch.bfloat16, torch.float16, torch.float32):
            bound = ref.scaled_fp4_mm_error_bound(aq, bq, asc, bsc, al, dt)
            out = fk.scaled_fp4_mm(aq.to(dev), bq.to(dev), asc.to(dev), bsc.to(dev),
                                   torch.tensor(al, device=dev), dt, impl="fused").cpu()
            check("w4a4 %dx%dx%d %s" % (m, n, k, dt), out, exact, bound)
        cpu = fk.scaled_fp4_mm(aq, bq, asc, bsc, al, torch.float32)
        check("w4a4 cpu %dx%dx%d" % (m, n, k), cpu, exact, ref.scaled_fp4_mm_error_bound(aq, bq, asc, bsc, al, torch.float32))
        for adt in (torch.bfloat16, torch.float16):
            a16 = a.to(adt)
            ex16 = ref.scaled_fp4_w4a16_mm(a16, bq, bsc, 1.0 / gb, torch.float64)
            out = fk.scaled_fp4_w4a16_mm(a16.to(dev), bq.to(dev), bsc.to(dev), 1.0 / gb).cpu()
            check("w4a16 %dx%dx%d %s" % (m, n, k, adt), out, ex16,
                  ref.scaled_fp4_w4a16_mm_error_bound(a16, bq, bsc, 1.0 / gb))
        # every launch configuration the heuristic can pick (kw, split) on one shape per size
        if (m, n, k) in ((5, 300, 1024), (16, 257, 4096), (64, 512, 2048)):
            a16 = a.to(torch.bfloat16)
            b32 = ref.scaled_fp4_mm_error_bound(aq, bq, asc, bsc, al, torch.float32)
            e16 = ref.scaled_fp4_w4a16_mm(a16, bq, bsc, 1.0 / gb, torch.float64)
            b16 = ref.scaled_fp4_w4a16_mm_error_bound(a16, bq, bsc, 1.0 / gb, torch.float32)
            tms = [t for t in (8, 16, 32, 64) if t >= min(m, 8)]
            for tm in tms:
                for kw in (1, 2, 4, 8):
                    if tm * kw > 64 or kw * 128 > k:
                        continue
                    nkb = (k + 128 * kw - 1) // (128 * kw)
                    for split in sorted({1, 2, 3, min(8, nkb)}):
                        if split > nkb:
                            continue
                        for kind, a_, as_ in (("fp4", aq, asc), ("bf16", a.to(torch.bfloat16), None)):
                            out = _gemm._run_fused(
                                torch, 0 if kind == "fp4" else 1, a_.to(dev),
                                as_.to(dev) if as_ is not None else None, bq.to(dev), bsc.to(dev),
                                al if kind == "fp4" else 1.0 / gb, None, torch.float32, m, n, k, 1,
                                torch.device(dev), tm=tm, kw=kw, split=split).cpu()
                            check("cfg %s %dx%dx%d tm%d kw%d s%d" % (kind, m, n, k, tm, kw, split), out,
                                  exact if kind == "fp4" else e16, b32 if kind == "fp4" else b16)
    # prepacked weights: default dispatch (pk kernel up to PK_MAX_ROWS, dequantize + cuBLAS above),
    # every launch configuration on a few shapes, W4A4 through the pk kernel, NaN scales
    for (m, n, k) in [(1, 40, 128), (5, 300, 1024), (16, 257, 4096), (33, 130, 512), (64, 512, 2048),
                      (130, 72, 256), (200, 1000, 384), (3, 70, 1040)]:
        a = torch.randn(m, k, generator=g) * 2
        b = torch.randn(n, k, generator=g)
        aq, asc, ga = q(a)
        bq, bsc, gb = q(b)
        al = 1.0 / (ga * gb)
        pw = fk.prepack_fp4_weight(bq, bsc).to(dev)
        exact = ref.scaled_fp4_mm(aq, bq, asc, bsc, al, torch.float64)
        for dt in (torch.bfloat16, torch.float32):
            out = fk.scaled_fp4_mm(aq.to(dev), pw, asc.to(dev), None, torch.tensor(al, device=dev), dt).cpu()
            check("pk w4a4 %dx%dx%d %s" % (m, n, k, dt), out, exact,
                  ref.scaled_fp4_mm_error_bound(aq, bq, asc, bsc, al, dt))
        for adt in (torch.bfloat16, torch.float16):
            a16 = a.to(adt)
            ex16 = ref.scaled_fp4_w4a16_mm(a16, bq, bsc, 1.0 / gb, torch.float64)
            for odt in (None, torch.float32):
                out = fk.scaled_fp4_w4a16_mm(a16.to(dev), pw, None, 1.0 / gb, odt).cpu()
                check("pk w4a16 %dx%dx%d %s out %s" % (m, n, k, adt, odt), out, ex16,
                      ref.scaled_fp4_w4a16_mm_error_bound(a16, bq, bsc, 1.0 / gb, odt))
            if (m, n, k) in ((5, 300, 1024), (16, 257, 4096), (33, 130, 512), (3, 70, 1040)):
                b32 = ref.scaled_fp4_w4a16_mm_error_bound(a16, bq, bsc, 1.0 / gb, torch.float32)
                for rt in (1, 2, 4, 8):
                    for split in (1, 2, 3, 8):
                        for un in ((1, 2) if m <= 16 else (1,)):
                            out = _gemm._run_pk(torch, 1 if adt == torch.bfloat16 else 2, a16.to(dev), pw, 1.0 / gb,
                                                torch.float32, m, n, k, torch.device(dev), rt=rt, split=split,
                                                un=un).cpu()
                            check("pk cfg %s %dx%dx%d rt%d s%d un%d" % (adt, m, n, k, rt, split, un), out, ex16, b32)
    bq = torch.full((20, 64), 0x31, dtype=torch.uint8)
    bsc = torch.full((20, 8), 0x30, dtype=torch.uint8)
    bsc[3, 2] = 0x7F
    a16 = torch.randn(3, 128, generator=g).to(torch.bfloat16)
    out = fk.scaled_fp4_w4a16_mm(a16.to(dev), fk.prepack_fp4_weight(bq, bsc).to(dev), None, 1.0, torch.float32).cpu()
    exact = ref.scaled_fp4_w4a16_mm(a16, bq, bsc, 1.0, torch.float64)
    check("pk nan weight scale", out, exact, ref.scaled_fp4_w4a16_mm_error_bound(a16, bq, bsc, 1.0, torch.float32))
    # NaN scale, Inf / NaN activations
    aq = torch.full((3, 64), 0x22, dtype=torch.uint8)
    asc = torch.tensor([[0x38] * 8, [0x7F] + [0x38] * 7, [0x38] * 8], dtype=torch.uint8)
    bq = torch.full((20, 64), 0x31, dtype=torch.uint8)
    bsc = torch.full((20, 8), 0x30, dtype=torch.uint8)
    out = fk.scaled_fp4_mm(aq.to(dev), bq.to(dev), asc.to(dev), bsc.to(dev), 1.0, torch.float32, impl="fused").cpu()
    exact = ref.scaled_fp4_mm(aq, bq, asc, bsc, 1.0, torch.float64)
    check("nan scale", out, exact, ref.scaled_fp4_mm_error_bound(aq, bq, asc, bsc, 1.0, torch.float32))
    # grouped
    e, n, k = 7, 200, 1024
    sizes = [0, 3, 17, 1, 0, 40, 9]
    off = torch.tensor([0] + torch.tensor(sizes).cumsum(0).tolist(), dtype=torch.int32)
    t = sum(sizes)
    a = torch.randn(t, k, generator=g)
    aq, asc, ga = q(a)
    qs = [q(torch.randn(n, k, generator=g)) for _ in range(e)]
    bq = torch.stack([x[0] for x in qs])
    bsc = torch.stack([x[1] for x in qs])
    alphas = torch.tensor([1.0 / (ga * x[2]) for x in qs])
    for offd in (off, off.long()):
        out = fk.scaled_fp4_grouped_mm(aq.to(dev), asc.to(dev), bq.to(dev), bsc.to(dev), alphas.to(dev),
                                       offd.to(dev), torch.float32).cpu()
        check("grouped w4a4 %s" % offd.dtype, out, ref.scaled_fp4_grouped_mm(aq, asc, bq, bsc, alphas, off, torch.float64),
              ref.grouped_mm_error_bound(aq, bq, bsc, alphas, off, torch.float32, a_scale=asc))
    a16 = a.to(torch.bfloat16)
    al16 = torch.tensor([1.0 / x[2] for x in qs])
    out = fk.scaled_fp4_w4a16_grouped_mm(a16.to(dev), bq.to(dev), bsc.to(dev), al16.to(dev), off.to(dev)).cpu()
    check("grouped w4a16", out, ref.scaled_fp4_w4a16_grouped_mm(a16, bq, bsc, al16, off, torch.float64),
          ref.grouped_mm_error_bound(a16, bq, bsc, al16, off, torch.bfloat16))
    # stacked grouped quantize: bit-exact with the CPU path
    x = (torch.randn(1000, 512, generator=g) * 3).to(torch.bfloat16)
    offq = torch.tensor([0, 100, 100, 613, 1000], dtype=torch.int64)
    gq = torch.tensor([1.0, 3.0, 0.25, 448.0])
    qc, sc = fk.scaled_fp4_grouped_quant(x, gq, expert_offsets=offq)
    qd, sd = fk.scaled_fp4_grouped_quant(x.to(dev), gq.to(dev), expert_offsets=offq.to(dev))
    if not (torch.equal(qc, qd.cpu()) and torch.equal(sc.view(torch.uint8), sd.cpu().view(torch.uint8))):
        bad.append("stacked grouped quant: CUDA != CPU")
    xs = [torch.randn(m_, 256, generator=g).to(torch.bfloat16) for m_ in (5, 0, 300, 1)]
    for sw in (False, True):
        a1, b1 = fk.scaled_fp4_grouped_quant([x_.to(dev) for x_ in xs], [1.0, 2.0, 3.0, 4.0], swizzle=sw, packed=True)
        a2, b2 = fk.scaled_fp4_grouped_quant(xs, [1.0, 2.0, 3.0, 4.0], swizzle=sw, packed=True)
        if not (torch.equal(a1.cpu(), a2) and torch.equal(b1.cpu().view(torch.uint8), b2.view(torch.uint8))):
            bad.append("list grouped quant (C++ descriptors) swizzle=%s: CUDA != CPU" % sw)
    return bad, worst


# ---- host cost ---------------------------------------------------------------------------------
def host_costs(torch, fk, dev, host_us, experts=64):
    k = 256
    a = torch.randn(8, k, device=dev, dtype=torch.bfloat16)
    gs = torch.tensor(3.0, device=dev)
    aq, asc = fk.scaled_fp4_quant(a, gs)
    bq, bsc = fk.scaled_fp4_quant(torch.randn(64, k, device=dev, dtype=torch.bfloat16), gs)
    pw = fk.prepack_fp4_weight(bq, bsc)
    bqe = bq[None].repeat(experts, 1, 1).contiguous()
    bse = bsc.view(torch.uint8)[None].repeat(experts, 1, 1).contiguous()
    off = torch.zeros(experts + 1, dtype=torch.int32, device=dev)
    off[1:] = 8
    al = torch.ones(experts, device=dev)
    xs = [torch.randn(16, 128, device=dev, dtype=torch.bfloat16) for _ in range(experts)]
    xst = torch.randn(16 * experts, 128, device=dev, dtype=torch.bfloat16)
    offq = torch.arange(0, 16 * experts + 1, 16, dtype=torch.int32, device=dev)
    ggs = torch.ones(experts, device=dev)
    return {
        "mm_fused": host_us(torch, lambda: fk.scaled_fp4_mm(aq, bq, asc, bsc, gs, impl="fused")),
        "mm_prepacked": host_us(torch, lambda: fk.scaled_fp4_mm(aq, pw, asc, None, gs)),
        "w4a16_prepacked": host_us(torch, lambda: fk.scaled_fp4_w4a16_mm(a, pw, None, gs)),
        "mm_fused_float_alpha": host_us(torch, lambda: fk.scaled_fp4_mm(aq, bq, asc, bsc, 0.5, impl="fused")),
        "w4a16": host_us(torch, lambda: fk.scaled_fp4_w4a16_mm(a, bq, bsc, gs)),
        "grouped_mm_%d" % experts: host_us(torch, lambda: fk.scaled_fp4_grouped_mm(aq, asc, bqe, bse, al, off)),
        "w4a16_grouped_%d" % experts: host_us(torch, lambda: fk.scaled_fp4_w4a16_grouped_mm(a, bqe, bse, al, off)),
        "grouped_quant_list_%d" % experts: host_us(torch, lambda: fk.scaled_fp4_grouped_quant(xs, ggs), 100),
        "grouped_quant_list_packed_%d" % experts: host_us(
            torch, lambda: fk.scaled_fp4_grouped_quant(xs, ggs, packed=True), 100),
        "grouped_quant_stacked_%d" % experts: host_us(
            torch, lambda: fk.scaled_fp4_grouped_quant(xst, ggs, expert_offsets=offq)),
        "torch_bf16_matmul": host_us(torch, lambda: a @ a.T),
    }


# ---- timing ---------------------------------------------------------------------------------
def dense_cases(torch, fk, dev, copy_gbs, l2, shapes, ms, iters, graph=True):
    """Each (N, K) weight and each M: bf16 matmul vs fused W4A4 (default dispatch), W4A16 and
    the previous path (impl='cublas'). Returns a list of result dicts."""
    res = []
    for si, (n, k) in enumerate(shapes):
        fp4_bytes = n * k // 2 + n * k // 16
        fp4, bf, gw = _weights(torch, fk, n, k, n_copies(fp4_bytes, l2), dev, 100 + si,
                               n_copies(2 * n * k, l2))
        rf, rb = Rot(fp4), Rot(bf)
        pk0 = fk.prepack_fp4_weight(*fp4[0])
        rp = Rot([pk0] + [fk.PackedFP4Weight(pk0.data.clone(), n, k) for _ in range(len(fp4) - 1)])
        for m in ms:
            a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            ga = 448.0 * 6.0 / float(a.float().abs().max())
            aq, asc = fk.scaled_fp4_quant(a, ga)
            alpha = torch.tensor(1.0 / (ga * gw), device=dev)
            inv = torch.tensor(1.0 / gw, device=dev)

            def f_bf16():
                return a @ rb.next().T

            def f_fp4():
                w, s = rf.next()
                return fk.scaled_fp4_mm(aq, w, asc, s, alpha)

            def f_w4a16():
                w, s = rf.next()
                return fk.scaled_fp4_w4a16_mm(a, w, s, inv)

            def f_old():
                w, s = rf.next()
                return fk.scaled_fp4_mm(aq, w, asc, s, alpha, impl="cublas")

            def f_fp4_pk():
                return fk.scaled_fp4_mm(aq, rp.next(), asc, None, alpha)

            def f_w4a16_pk():
                return fk.scaled_fp4_w4a16_mm(a, rp.next(), None, inv)

            def f_fp4_pk_cublas():
                return fk.scaled_fp4_mm(aq, rp.next(), asc, None, alpha, impl="cublas")

            def f_fp4_pk_kernel():
                return fk.scaled_fp4_mm(aq, rp.next(), asc, None, alpha, impl="fused")

            fns = {"bf16": f_bf16, "fp4": f_fp4, "w4a16": f_w4a16, "fp4_cublas": f_old,
                   "fp4_pk": f_fp4_pk, "w4a16_pk": f_w4a16_pk, "fp4_pk_cublas": f_fp4_pk_cublas}
            if m <= 128:
                fns["fp4_pk_kernel"] = f_fp4_pk_kernel
            t = _interleaved(torch, fns, iters)
            case = {"n": n, "k": k, "m": m, "ms": t,
                    "impl": "fused" if (m <= fk._gemm_fast.FUSED_MAX_ROWS and k % 128 == 0) else "cublas"}
            if case["impl"] == "fused":
                case["plan"] = list(fk._gemm._fused_plan("fp4", m, n, k, device=dev.index))
            if m <= fk._gemm_fast.PK_MAX_ROWS:
                case["pk_plan"] = list(fk._gemm._pk_plan("bf16", m, n, k, device=dev.index))
            moved = fp4_bytes + m * (k // 2 + k // 16) + m * n * 2
            moved16 = fp4_bytes + m * k * 2 + m * n * 2
            case["GBps"] = moved / t["fp4"] / 1e6
            case["frac_copy"] = case["GBps"] / copy_gbs
            case["frac_copy_w4a16"] = moved16 / t["w4a16"] / 1e6 / copy_gbs
            case["bf16_over_fp4"] = t["bf16"] / t["fp4"]
            case["bf16_over_w4a16"] = t["bf16"] / t["w4a16"]
            case["cublas_path_over_fp4"] = t["fp4_cublas"] / t["fp4"]
            case["TFLOPs_fp4"] = 2.0 * m * n * k / t["fp4"] / 1e9
            case["frac_copy_pk"] = moved / t["fp4_pk"] / 1e6 / copy_gbs
            case["frac_copy_w4a16_pk"] = moved16 / t["w4a16_pk"] / 1e6 / copy_gbs
            if graph:
                case["graph_ms"] = {k_: _graph_ms(torch, f_) for k_, f_ in fns.items()}
                gm = case["graph_ms"]
                case["graph_frac_copy"] = moved / gm["fp4"] / 1e6 / copy_gbs
                case["graph_bf16_over_fp4"] = gm["bf16"] / gm["fp4"]
                case["graph_bf16_over_w4a16"] = gm["bf16"] / gm["w4a16"]
                case["graph_frac_copy_pk"] = moved / gm["fp4_pk"] / 1e6 / copy_gbs
                case["graph_frac_copy_w4a16_pk"] = moved16 / gm["w4a16_pk"] / 1e6 / copy_gbs
                print("   pk %5dx%5d M=%4d  graph: bf16 %.4f | W4A4 pk %.4f (%.2fx, %.0f%%) old %.4f | "
                      "W4A16 pk %.4f (%.2fx, %.0f%%) old %.4f | back to back: W4A4 pk %.4f W4A16 pk %.4f  plan %s" % (
                          n, k, m, gm["bf16"], gm["fp4_pk"], gm["bf16"] / gm["fp4_pk"],
                          100 * case["graph_frac_copy_pk"], gm["fp4"], gm["w4a16_pk"],
                          gm["bf16"] / gm["w4a16_pk"], 100 * case["graph_frac_copy_w4a16_pk"], gm["w4a16"],
                          t["fp4_pk"], t["w4a16_pk"], case.get("pk_plan")), flush=True)
                print("   pk %5dx%5d M=%4d  graph: W4A4 pk kernel %s | W4A4 pk dequantize + cuBLAS %.4f" % (
                    n, k, m, "%.4f" % gm["fp4_pk_kernel"] if "fp4_pk_kernel" in gm else "-", gm["fp4_pk_cublas"]),
                    flush=True)
            res.append(case)
            print("skinny %5dx%5d M=%4d  bf16 %.4f  fp4 %.4f (%.2fx, %.0f%% of copy)  w4a16 %.4f (%.2fx)  "
                  "old %.4f%s" % (n, k, m, t["bf16"], t["fp4"], case["bf16_over_fp4"],
                                  100 * case["frac_copy"], t["w4a16"], case["bf16_over_w4a16"],
                                  t["fp4_cublas"],
                                  "  | graph: bf16 %.4f fp4 %.4f (%.2fx, %.0f%%) w4a16 %.4f (%.2fx) old %.4f" % (
                                      case["graph_ms"]["bf16"], case["graph_ms"]["fp4"],
                                      case["graph_bf16_over_fp4"], 100 * case["graph_frac_copy"],
                                      case["graph_ms"]["w4a16"], case["graph_bf16_over_w4a16"],
                                      case["graph_ms"]["fp4_cublas"]) if "graph_ms" in case else ""),
                  flush=True)
        del fp4, bf, rf, rb, rp, pk0
        torch.cuda.empty_cache()
    return res


def sweep_pk(torch, fk, dev, l2, shapes, ms, iters):
    """GPU time (graph replay) of every launch configuration (rt, split, un) of the prepacked W4A16
    kernel; the best per (shape, M) next to the plan's choice. The prepacked (mma.sync) kernel is
    forced for the sweep: on a 9.0 GPU the dispatch sends M >= 9 to the wgmma kernel where the
    (forced) K split is small, so an unforced sweep times that kernel for some configurations."""
    from fp4_kernels import _gemm, _gemm_fast

    _gemm_fast.set_pk_kernel("pk")
    try:
        return _sweep_pk(torch, fk, dev, l2, shapes, ms, iters, _gemm)
    finally:
        _gemm_fast.set_pk_kernel("auto")


def _sweep_pk(torch, fk, dev, l2, shapes, ms, iters, _gemm):

    out = []
    for si, (n, k) in enumerate(shapes):
        fp4_bytes = n * k // 2 + n * k // 16
        fp4, _, gw = _weights(torch, fk, n, k, 1, dev, 300 + si, 1)
        pk0 = fk.prepack_fp4_weight(*fp4[0])
        rp = Rot([pk0] + [fk.PackedFP4Weight(pk0.data.clone(), n, k)
                          for _ in range(n_copies(fp4_bytes, l2) - 1)])
        for m in ms:
            a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            auto = tuple(_gemm._pk_plan("bf16", m, n, k, device=dev.index)[1:])
            cfgs = {}

            def add(rt, split, un):
                def f():
                    return _gemm._run_pk(torch, 1, a, rp.next(), 1.0, torch.bfloat16, m, n, k, dev,
                                         rt=rt, split=split, un=un)
                cfgs[(rt, split, un)] = f
            for rt in (1, 2, 4, 8):
                for split in (1, 2, 4, 8):
                    if split * (8 // rt) > 2 * pk0.u:
                        continue
                    for un in ((1, 2) if m <= 16 else (1,)):
                        add(rt, split, un)
            t = {c: _graph_ms(torch, f, iters=max(5, iters // 2)) for c, f in cfgs.items()}
            best = min(t, key=t.get)
            out.append({"n": n, "k": k, "m": m, "best": list(best), "best_ms": t[best], "auto": list(auto),
                        "auto_ms": t.get(auto), "all": {"%d/%d/%d" % c: v for c, v in t.items()}})
            top = sorted(t, key=t.get)[:4]
            print("sweep pk %5dx%5d M=%4d best rt/split/un %s %.4f ms (%.0f%% of copy); auto %s %s; next %s" % (
                n, k, m, best, t[best], 100 * fp4_bytes / t[best] / 1e6 / 4180.0, auto,
                "%.4f" % t[auto] if auto in t else "-",
                ", ".join("%s %.4f" % (c, t[c]) for c in top[1:])), flush=True)
        del fp4, rp, pk0
        torch.cuda.empty_cache()
    return out


def sweep(torch, fk, dev, l2, shapes, ms, iters):
    """Time every launch configuration (tm, kw, split) of the fused W4A4 kernel; returns the
    best per (shape, M) next to the heuristic's choice."""
    from fp4_kernels import _gemm

    out = []
    for si, (n, k) in enumerate(shapes):
        fp4_bytes = n * k // 2 + n * k // 16
        fp4, _, gw = _weights(torch, fk, n, k, n_copies(fp4_bytes, l2), dev, 200 + si, 1)
        rf = Rot(fp4)
        for m in ms:
            a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            aq, asc = fk.scaled_fp4_quant(a, 1.0)
            asc8 = asc.view(torch.uint8)
            auto = tuple(_gemm._fused_plan("fp4", m, n, k, device=dev.index)[:3])
            cfgs = {}
            for tm in (8, 16, 32, 64):
                if tm < min(m, 8) or (tm > 8 and tm // 2 >= m) or tm > max(8, 2 * m):
                    continue
                for kw in (1, 2, 4, 8):
                    if tm * kw > 64:
                        continue
                    nkb = (k + 128 * kw - 1) // (128 * kw)
                    for split in (1, 2, 4, 8):
                        if split > nkb:
                            continue

                        def f(tm=tm, kw=kw, split=split):
                            w, s = rf.next()
                            return _gemm._run_fused(torch, 0, aq, asc8, w, s.view(torch.uint8), 1.0, None,
                                                    torch.bfloat16, m, n, k, 1, dev, tm=tm, kw=kw, split=split)
                        cfgs[(tm, kw, split)] = f
            # GPU time (CUDA graph replay): back-to-back launches are host-bound on this machine
            t = {c: _graph_ms(torch, f, iters=max(5, iters // 2)) for c, f in cfgs.items()}
            best = min(t, key=t.get)
            out.append({"n": n, "k": k, "m": m, "best": list(best), "best_ms": t[best], "auto": list(auto),
                        "auto_ms": t.get(auto), "all": {"%d/%d/%d" % c: v for c, v in t.items()}})
            print("sweep %5dx%5d M=%4d best tm/kw/split %s %.4f ms; auto %s %s" % (
                n, k, m, best, t[best], auto, "%.4f" % t[auto] if auto in t else "-"), flush=True)
        del fp4, rf
        torch.cuda.empty_cache()
    return out


def grouped_cases(torch, fk, dev, copy_gbs, iters, experts=64, n=2048, k=7168, per_expert=(1, 8, 64)):
    """MoE: `experts` experts of [n, k] NVFP4 weights, `p` tokens per expert, one launch
    (W4A4 and W4A16); torch._grouped_mm on bf16 weights where this torch has it."""
    res = []
    g = torch.Generator(device=dev).manual_seed(7)
    w = torch.randn(experts, n, k, device=dev, dtype=torch.bfloat16, generator=g)
    gw = 448.0 * 6.0 / float(w.float().abs().max())
    bq, bs = fk.scaled_fp4_quant(w.reshape(experts * n, k), gw)
    bq = bq.view(experts, n, k // 2)
    bs = bs.view(experts, n, k // 16)
    for p in per_expert:
        t = experts * p
        a = torch.randn(t, k, device=dev, dtype=torch.bfloat16)
        ga = 448.0 * 6.0 / float(a.float().abs().max())
        aq, asc = fk.scaled_fp4_quant(a, ga)
        off = torch.arange(0, t + 1, p, dtype=torch.int32, device=dev)
        al = torch.full((experts,), 1.0 / (ga * gw), device=dev)
        inv = torch.full((experts,), 1.0 / gw, device=dev)
        fns = {"fp4": lambda: fk.scaled_fp4_grouped_mm(aq, asc, bq, bs, al, off),
               "w4a16": lambda: fk.scaled_fp4_w4a16_grouped_mm(a, bq, bs, inv, off)}
        gm = getattr(torch, "_grouped_mm", None)
        if gm is not None:
            try:
                wt = w.transpose(-2, -1)
                gm(a, wt, offs=off[1:])
                fns["bf16_grouped_mm"] = lambda: gm(a, wt, offs=off[1:])
            except Exception as e:  # noqa: BLE001
                print("torch._grouped_mm unavailable here: %s" % e)
        tt = _interleaved(torch, fns, iters)
        gt = {k_: _graph_ms(torch, f_, iters=5, inner=5) for k_, f_ in fns.items()}
        moved = experts * n * (k // 2 + k // 16) + t * (k // 2 + k // 16) + t * n * 2
        case = {"experts": experts, "n": n, "k": k, "tokens_per_expert": p, "ms": tt, "graph_ms": gt,
                "graph_frac_copy": moved / gt["fp4"] / 1e6 / copy_gbs,
                "GBps": moved / tt["fp4"] / 1e6, "frac_copy": moved / tt["fp4"] / 1e6 / copy_gbs}
        if "bf16_grouped_mm" in tt:
            case["bf16_over_fp4"] = tt["bf16_grouped_mm"] / tt["fp4"]
        res.append(case)
        print("grouped %dx[%dx%d] %d tok/expert: fp4 %.4f ms (%.0f%% of copy) w4a16 %.4f%s" % (
            experts, n, k, p, tt["fp4"], 100 * case["frac_copy"], tt["w4a16"],
            "  bf16 _grouped_mm %.4f (%.2fx)" % (tt["bf16_grouped_mm"], case["bf16_over_fp4"])
            if "bf16_grouped_mm" in tt else ""), flush=True)
    del w
    torch.cuda.empty_cache()
    return res


# ---- rounding: ours (gs / sf, correctly rounded) vs sgl-kernel / vLLM (rcp(sf * rcp(gs))) -----
_COMPAT_SRC = r'''
extern "C" __global__ void quant_rcp(const unsigned short* __restrict__ x, float gs,
                                     unsigned char* __restrict__ q, unsigned char* __restrict__ s,
                                     long long nblocks) {
    long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= nblocks) return;
    float v[16], amax = 0.0f;
    for (int i = 0; i < 16; ++i) {
        v[i] = __uint_as_float(((unsigned)x[b * 16 + i]) << 16);
        amax = fmaxf(amax, fabsf(v[i]));
    }
    float r6, rgs;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r6) : "f"(6.0f));
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(rgs) : "f"(gs));
    float sfv = __fmul_rn(gs, __fmul_rn(amax, r6));
    unsigned short pair;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(sfv));
    unsigned sb = pair & 0xFFu;
    unsigned e = (sb >> 3) & 15u, mm = sb & 7u;   // E4M3 -> float (exact)
    float sf = e ? __uint_as_float(((e + 120u) << 23) | (mm << 20)) : (float)mm * 0.001953125f;
    if (sb & 0x80u) sf = -sf;
    float os = 0.0f;
    if (sf != 0.0f) asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(os) : "f"(__fmul_rn(sf, rgs)));
    s[b] = (unsigned char)sb;
    for (int i = 0; i < 16; i += 2) {
        unsigned c[2];
        for (int j = 0; j < 2; ++j) {
            float t = __fmul_rn(v[i + j], os), a = fabsf(t);
            unsigned m = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                         (a >= 3.5f) + (a > 5.0f);
            c[j] = m | (t < 0.0f ? 8u : 0u);   // like cvt.rn.satfinite.e2m1x2: the sign stays
        }
        q[b * 8 + i / 2] = (unsigned char)(c[0] | (c[1] << 4));
    }
}
'''


def rounding_compare(torch, fk, dev):
    """Fraction of E2M1 codes and E4M3 scale bytes that differ between our quantizer and the
    sgl-kernel / vLLM formula (amax * rcp(6), then rcp(sf * rcp(gs)), rcp = rcp.approx.ftz.f32)
    on random bf16 data. Needs cupy (NVRTC) for the foreign formula."""
    try:
        import cupy
    except ImportError as e:
        return {"skipped": "cupy not importable: %s" % e}
    kern = cupy.RawKernel(_COMPAT_SRC, "quant_rcp", options=("--std=c++17",))
    out = {}
    g = torch.Generator(device=dev).manual_seed(2024)
    for name, make in (
            ("randn", lambda: torch.randn(8192, 8192, device=dev, generator=g)),
            ("randn_x_10^U(-1,1)_per_block", lambda: (torch.randn(8192, 512, 16, device=dev, generator=g)
                                                      * 10.0 ** (torch.rand(8192, 512, 1, device=dev, generator=g) * 2 - 1)
                                                      ).reshape(8192, 8192))):
        x = make().to(torch.bfloat16)
        gs = 448.0 * 6.0 / float(x.float().abs().max())
        q, s = fk.scaled_fp4_quant(x, gs)
        nb = x.numel() // 16
        q2 = torch.empty_like(q)
        s2 = torch.empty(x.shape[0], x.shape[1] // 16, dtype=torch.uint8, device=dev)
        xc = cupy.asarray(x.view(torch.int16))
        kern(((nb + 255) // 256,), (256,), (xc, cupy.float32(gs), cupy.asarray(q2), cupy.asarray(s2),
                                             cupy.int64(nb)))
        torch.cuda.synchronize()
        lo1, hi1, lo2, hi2 = q & 15, q >> 4, q2 & 15, q2 >> 4
        diff_bits = int((lo1 != lo2).sum() + (hi1 != hi2).sum())
        mag = lambda c: torch.where(c == 8, torch.zeros_like(c), c)  # noqa: E731  (-0 == +0)
        diff_val = int((mag(lo1) != mag(lo2)).sum() + (mag(hi1) != mag(hi2)).sum())
        diff_s = int((s.view(torch.uint8) != s2).sum())
        out[name] = {"elements": x.numel(), "codes_differ": diff_bits / x.numel(),
                     "code_values_differ": diff_val / x.numel(), "scales_differ": diff_s / nb,
                     "negative_zero_codes_theirs": int((lo2 == 8).sum() + (hi2 == 8).sum()) / x.numel()}
        print("rounding vs rcp(sf*rcp(gs)) [%s]: codes differ %.3e (values %.3e, -0 codes %.3e), "
              "scales differ %.3e" % (name, out[name]["codes_differ"], out[name]["code_values_differ"],
                                      out[name]["negative_zero_codes_theirs"], out[name]["scales_differ"]),
              flush=True)
    return out


def now():
    return time.time()
