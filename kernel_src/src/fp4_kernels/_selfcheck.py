"""selfcheck(): every kernel against the torch reference on fresh random inputs."""
from __future__ import annotations

import random
import traceback


def _same_bytes(torch, a, b):
    """Bitwise equality of two tensors of the same dtype (NaNs compared by position)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False, "shape/dtype %s %s vs %s %s" % (tuple(a.shape), a.dtype, tuple(b.shape), b.dtype)
    a, b = a.cpu(), b.cpu()
    if a.is_floating_point() and a.dtype not in (torch.float8_e4m3fn,):
        na, nb = torch.isnan(a), torch.isnan(b)
        if not torch.equal(na, nb):
            return False, "NaN positions differ (%d vs %d NaNs)" % (int(na.sum()), int(nb.sum()))
        a, b = a.masked_fill(na, 0), b.masked_fill(nb, 0)
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[a.element_size()]
    ia, ib = a.contiguous().view(ints), b.contiguous().view(ints)
    diff = int((ia != ib).sum())
    if diff:
        idx = (ia != ib).nonzero()[0].tolist()
        return False, "%d of %d elements differ, first at %s" % (diff, ia.numel(), idx)
    return True, "%d elements identical" % ia.numel()


def _inputs(torch, gen, m, k, dtype, device, edge=False):
    x = torch.randn((m, k), generator=gen, dtype=torch.float32) * float(
        torch.empty(()).uniform_(0.01, 100.0, generator=gen))
    if edge:  # zeros, NaN, Inf, huge outlier, tiny (subnormal E4M3 scale) blocks
        x[0, :16] = 0.0
        x[0, 16:32] = -0.0
        if k >= 64:
            x[0, 37] = float("nan")
            x[0, 50] = float("inf")
        if m > 1:
            x[1, :16] = x[1, :16] * 1e-6
            x[1, 16:32] *= 1e-3
            x[1, 20] = 3e4
    return x.to(dtype).to(device)


def selfcheck(device: str = "cpu", seed=None) -> dict:
    """Run every fp4_kernels function against fp4_kernels.reference.

    Args:
        device: "cpu" or "cuda" (or "cuda:N").
        seed: int seed for the random inputs; None draws a fresh one (reported).

    Returns:
        JSON-able ``{"ok": bool, "device": str, "seed": int, "build": build_info(),
        "checks": [{"name", "ok", "detail"}, ...]}``. Quantization, grouped quantization
        and dequantization must be bit-identical to the reference; the GEMM within
        ``reference.scaled_fp4_mm_error_bound``. On CUDA the CPU and CUDA paths must also
        produce identical bytes. Exceptions inside a check become a failed check.
    """
    import torch

    import fp4_kernels as fk
    from fp4_kernels import reference as ref

    seed = random.SystemRandom().randrange(2 ** 31) if seed is None else int(seed)
    gen = torch.Generator().manual_seed(seed)
    dev = torch.device(device)
    checks = []

    def check(name, fn):
        try:
            ok, detail = fn()
        except Exception as e:  # noqa: BLE001 - reported, not raised
            ok, detail = False, "%s: %s | %s" % (type(e).__name__, e,
                                                 traceback.format_exc(limit=3).replace("\n", " "))
        checks.append({"name": name, "ok": bool(ok), "detail": str(detail)})

    def both(*pairs):
        details = []
        for a, b in pairs:
            ok, d = _same_bytes(torch, a, b)
            if not ok:
                return False, d
            details.append(d)
        return True, "; ".join(details)

    shapes = [(1, 16), (37, 80), (130, 256)]
    dtypes = [torch.float32, torch.float16, torch.bfloat16]
    for dt in dtypes:
        for (m, k) in shapes:
            for edge in (False, True):
                x = _inputs(torch, gen, m, k, dt, dev, edge)
                gs = (448.0 * 6.0) / max(float(x.float().abs().nan_to_num(0, 0, 0).max()), 1e-12)
                name = "quant %s %dx%d%s" % (str(dt).split(".")[-1], m, k, " edge" if edge else "")

                def run(x=x, gs=gs):
                    q, s = fk.scaled_fp4_quant(x, gs)
                    rq, rs = ref.scaled_fp4_quant(x, gs)
                    res = [(q, rq), (s.view(torch.uint8), rs.view(torch.uint8))]
                    if dev.type == "cuda":
                        cq, cs = fk.scaled_fp4_quant(x.cpu(), gs)
                        res += [(q.cpu(), cq), (s.view(torch.uint8).cpu(), cs.view(torch.uint8))]
                    return both(*res)
                check(name, run)

    # A block whose scale lies on an E4M3 tie: with gs = 34.516853..., RN(31.984375 / 6) * gs =
    # 183.99998 gives scale 176 (byte 0x73), while 31.984375 * RN(1 / 6) * gs = 184.00002 would give
    # 192: only a correctly rounded amax / 6 (as the definition says) finds 176. Seen on an H200
    # when the reference divided by a Python 6.0 on the GPU (a reciprocal multiplication there).
    tie = torch.tensor([[19.96875, -0.7724609375, 2.740234375, 8.6796875, -21.796875, -8.71875, -1.9921875,
                         -31.984375, 6.0859375, -13.34375, -1.7724609375, 8.4453125, -30.640625, 7.7578125,
                         7.27734375, -9.9765625]], dtype=torch.float16).to(dev)

    def scale_tie():
        gs = 34.51685393258427
        q, s = fk.scaled_fp4_quant(tie, gs)
        rq, rs = ref.scaled_fp4_quant(tie, gs)
        got = int(s.view(torch.uint8).reshape(-1)[0])
        if got != 0x73:
            return False, "scale byte %#x, want 0x73 (176): amax / 6 not correctly rounded" % got
        return both((q, rq), (s.view(torch.uint8), rs.view(torch.uint8)))
    check("quant scale on an E4M3 tie", scale_tie)

    x = _inputs(torch, gen, 200, 272, torch.bfloat16, dev, True)
    check("quant swizzled 200x272", lambda: both(
        (fk.scaled_fp4_quant(x, 3.5, swizzle=True)[1].view(torch.uint8),
         ref.scaled_fp4_quant(x, 3.5, swizzle=True)[1].view(torch.uint8))))

    xs = [_inputs(torch, gen, m, 128, torch.bfloat16, dev) for m in (5, 0, 64, 33)]
    gss = torch.rand((4,), generator=gen).add_(0.5).to(dev)

    def grouped():
        qs, ss = fk.scaled_fp4_grouped_quant(xs, gss)
        rq, rs = ref.scaled_fp4_grouped_quant(xs, gss)
        pairs = [p for i in range(4) for p in ((qs[i], rq[i]), (ss[i].view(torch.uint8), rs[i].view(torch.uint8)))]
        if dev.type == "cuda":
            cq, cs = fk.scaled_fp4_grouped_quant([t.cpu() for t in xs], gss.cpu())
            pairs += [(qs[i].cpu(), cq[i]) for i in range(4)]
        return both(*pairs)
    check("grouped quant 4 experts", grouped)

    xq = _inputs(torch, gen, 67, 160, torch.float32, dev, True)
    q, s = ref.scaled_fp4_quant(xq, 7.0)
    for dt in dtypes:
        def deq(dt=dt):
            pairs = [(fk.dequantize_fp4(q, s, 7.0, dt), ref.dequantize_fp4(q, s, 7.0, dt))]
            if dev.type == "cuda":
                pairs.append((pairs[0][0].cpu(), fk.dequantize_fp4(q.cpu(), s.cpu(), 7.0, dt)))
            return both(*pairs)
        check("dequant %s 67x160" % str(dt).split(".")[-1], deq)

    impls = (None, "mma", "cublas") if dev.type == "cuda" else (None,)
    for dt in dtypes:
        for (m, n, k) in ((70, 45, 96), (128, 128, 256), (1, 40, 16)):
            for impl in impls:
                def mm(dt=dt, m=m, n=n, k=k, impl=impl):
                    a = torch.randn((m, k), generator=gen).to(dev)
                    b = torch.randn((n, k), generator=gen).to(dev)
                    ga = 448.0 * 6.0 / float(a.abs().max())
                    gb = 448.0 * 6.0 / float(b.abs().max())
                    aq, asc = fk.scaled_fp4_quant(a, ga)
                    bq, bsc = fk.scaled_fp4_quant(b, gb)
                    alpha = torch.tensor(1.0 / (ga * gb), device=dev) if impl else 1.0 / (ga * gb)
                    out = fk.scaled_fp4_mm(aq, bq, asc, bsc, alpha, dt, impl=impl)
                    exp = ref.scaled_fp4_mm(aq, bq, asc, bsc, alpha, torch.float64)
                    bound = ref.scaled_fp4_mm_error_bound(aq, bq, asc, bsc, alpha, dt)
                    err = (out.double() - exp).abs()
                    worst = float((err / bound).max())
                    return worst <= 1.0, "max |err|/bound = %.3g" % worst
                check("mm %s %dx%dx%d%s" % (str(dt).split(".")[-1], m, n, k,
                                            " impl=%s" % impl if impl else ""), mm)

    # the fused GEMMs (CUDA: FP4 read directly; K = 256 / 384 takes the fused kernel) and the
    # grouped forms, within the documented bound
    def within(out, exp, bound):
        worst = float(((out.double().cpu() - exp.cpu()).abs() / bound.cpu()).max()) if out.numel() else 0.0
        return worst <= 1.0, "max |err|/bound = %.3g" % worst

    def qz(shape):
        x = torch.randn(shape, generator=gen)
        gs = 448.0 * 6.0 / float(x.abs().max())
        q, s = fk.scaled_fp4_quant(x.to(dev), gs)
        return x, q, s, gs

    for (m, n, k) in ((1, 72, 256), (19, 300, 384), (130, 40, 256)):
        def fused(m=m, n=n, k=k):
            a, aq, asc, ga = qz((m, k))
            _, bq, bsc, gb = qz((n, k))
            al = 1.0 / (ga * gb)
            impl = "fused" if dev.type == "cuda" else None
            out = fk.scaled_fp4_mm(aq, bq, asc, bsc, al, torch.bfloat16, impl=impl)
            ok, d = within(out, ref.scaled_fp4_mm(aq, bq, asc, bsc, al, torch.float64),
                           ref.scaled_fp4_mm_error_bound(aq, bq, asc, bsc, al, torch.bfloat16))
            a16 = a.to(torch.bfloat16).to(dev)
            out16 = fk.scaled_fp4_w4a16_mm(a16, bq, bsc, 1.0 / gb)
            ok16, d16 = within(out16, ref.scaled_fp4_w4a16_mm(a16, bq, bsc, 1.0 / gb, torch.float64),
                               ref.scaled_fp4_w4a16_mm_error_bound(a16, bq, bsc, 1.0 / gb))
            return ok and ok16, "w4a4 %s; w4a16 %s" % (d, d16)
        check("fused mm %dx%dx%d (w4a4, w4a16)" % (m, n, k), fused)

    # prepacked weights (CUDA: the kernel of cuda_pk.cu for small M, dequantize + cuBLAS for M = 150)
    for (m, n, k) in ((1, 72, 256), (19, 300, 1040), (150, 40, 256)):
        def packed(m=m, n=n, k=k):
            a, aq, asc, ga = qz((m, k))
            _, bq, bsc, gb = qz((n, k))
            pw = fk.prepack_fp4_weight(bq, bsc)
            rq, rs = pw.unpack()
            same, d0 = both((rq, bq), (rs.view(torch.uint8), bsc.view(torch.uint8)))
            al = 1.0 / (ga * gb)
            out = fk.scaled_fp4_mm(aq, pw, asc, None, al, torch.bfloat16)
            ok, d = within(out, ref.scaled_fp4_mm(aq, bq, asc, bsc, al, torch.float64),
                           ref.scaled_fp4_mm_error_bound(aq, bq, asc, bsc, al, torch.bfloat16))
            details = ["unpack %s" % d0, "w4a4 %s" % d]
            for adt in (torch.bfloat16, torch.float16):
                a16 = a.to(adt).to(dev)
                out16 = fk.scaled_fp4_w4a16_mm(a16, pw, None, 1.0 / gb, torch.float32)
                ok16, d16 = within(out16, ref.scaled_fp4_w4a16_mm(a16, bq, bsc, 1.0 / gb, torch.float64),
                                   ref.scaled_fp4_w4a16_mm_error_bound(a16, bq, bsc, 1.0 / gb, torch.float32))
                ok = ok and ok16
                details.append("w4a16 %s %s" % (str(adt).split(".")[-1], d16))
            return same and ok, "; ".join(details)
        check("prepacked mm %dx%dx%d (w4a4, w4a16 bf16 / fp16)" % (m, n, k), packed)

    def grouped():
        e, n, k, sizes = 4, 96, 256, [2, 0, 21, 5]
        off = torch.tensor([0, 2, 2, 23, 28], dtype=torch.int32, device=dev)
        a, aq, asc, ga = qz((sum(sizes), k))
        bs = [qz((n, k)) for _ in range(e)]
        bq = torch.stack([b[1] for b in bs])
        bsc = torch.stack([b[2] for b in bs])
        al = torch.tensor([1.0 / (ga * b[3]) for b in bs], device=dev)
        out = fk.scaled_fp4_grouped_mm(aq, asc, bq, bsc, al, off)
        ok, d = within(out, ref.scaled_fp4_grouped_mm(aq, asc, bq, bsc, al, off, torch.float64),
                       ref.grouped_mm_error_bound(aq, bq, bsc, al, off, torch.bfloat16, a_scale=asc))
        a16 = a.to(torch.bfloat16).to(dev)
        out16 = fk.scaled_fp4_w4a16_grouped_mm(a16, bq, bsc, al, off)
        ok16, d16 = within(out16, ref.scaled_fp4_w4a16_grouped_mm(a16, bq, bsc, al, off, torch.float64),
                           ref.grouped_mm_error_bound(a16, bq, bsc, al, off, torch.bfloat16))
        q1, s1 = fk.scaled_fp4_grouped_quant(a16, al * 1e3, expert_offsets=off)
        rq = [ref.scaled_fp4_quant(a16[lo:hi], float(al[i]) * 1e3) for i, (lo, hi) in
              enumerate(zip(off.tolist()[:-1], off.tolist()[1:]))]
        okq, dq = both((q1, torch.cat([r[0] for r in rq])),
                       (s1.view(torch.uint8), torch.cat([r[1] for r in rq]).view(torch.uint8)))
        return ok and ok16 and okq, "w4a4 %s; w4a16 %s; stacked quant %s" % (d, d16, dq)
    check("grouped mm 4 experts + stacked quant", grouped)

    return {"ok": all(c["ok"] for c in checks), "device": str(dev), "seed": seed,
            "build": fk.build_info(), "checks": checks}
