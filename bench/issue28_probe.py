"""Issue 28 diagnostics on a GPU host: where the large-M (dequantize + cuBLAS) path and the wgmma
kernel's producer lanes spend their time. Not the issue's table (bench/issue28.py is); numbers
for bench/NOTES.md.

  dequant   the prepacked dequantize alone per shape (graph replay), against the copy rate:
            bytes read (0.5625 B a weight) + written (2 B a weight)
  cublas    at M = 512 .. 4096: torch.matmul on the dense weight (bf16 reduced-precision
            reduction allowed, torch's default, and disallowed), fp4_kernels' cuBLAS call alone
            (alpha on the device, reduced-precision reduction disallowed), and dequantize + it
  overlap   dequantize + cuBLAS in C chunks of weight rows on two streams (chunk i + 1 dequantized
            while chunk i multiplies), against one dequantize then one GEMM
  lanes     the wgmma kernel with 1 or 32 producer lanes issuing the bulk copies, M = 32 .. 256
  mc        the wgmma kernel (forced) with its activation tiles multicast to 1, 2 or 4 CTAs of a
            cluster along N, M = 16 .. 1024: time, and bit-identical to 1 CTA or MISMATCH
  stages    the wgmma kernel (forced, a FP4_WG_SWEEP build) with 2 .. 10 pipeline stages of one
            unit (st0: the default tuning), M = 16 .. 256: time, and whether bit-identical
  diag      the wgmma kernel (forced) as it is (d0), without its decode (d1: A constant), without
            its loads (d2: no copies, no waits), without both (d3: the MMA and epilogue alone), at
            the default tuning and at 3 stages (a FP4_WG_SWEEP build); results wrong by design
  occ       the wgmma kernel (forced, split 1, default tuning) at M = 64, 128, 256, K = 8192 over
            N = 1024 .. 8448 (16 .. 132 CTAs, one per row group), as built (d0) and without loads
            (d2) and with loads alone (d5), each with a stage's weight tiles as one bulk copy a row
            tile (w1) and as one tensor box (w2; d0's output bit-identical to w1's or MISMATCH): ns per 128-k unit per CTA against how many SMs run at once, and the L2 -> SM
            bytes a second the grid moves (activation tile + weight tile per unit and CTA). Flat
            d0 per-unit time = a per-SM limit; rising with the CTA count = a shared one (L2, crossbar)
  epi       the wgmma kernel (forced) with its epilogue reading the partial sums four at a time (e4, the
            default: one 16-byte load from every rank of a split-K cluster before the adds) against one
            at a time (e1, wg_set_reduce(3), the epilogue before), M = 16 .. 256, at the plan's tuning
            (def) and with two consumer warpgroups (g2, a FP4_WG_SWEEP build, M <= 128), each as built
            (d0) and as the MMA and epilogue alone (d3): time, and e4 bit-identical to e1 or MISMATCH
  pdl       the default dispatch with and without the wgmma kernel's programmatic dependent launch,
            M = 1 .. 256,
            and a chain of 8 GEMMs each reading the one before's output (8192^2), replayed as a
            CUDA graph with PDL, against eager calls without it: bit-identical or MISMATCH

    python bench/issue28_probe.py [--only dequant,cublas,overlap,lanes,mc,pdl,epi]
"""
from __future__ import annotations

import argparse

import torch

import fp4_kernels as fk
from fp4_kernels import _gemm, _gemm_fast

SHAPES = [(8192, 8192), (14336, 4096), (4096, 14336), (2048, 7168), (7168, 2048)]
COPIES, CALLS = 4, 20
WCOPY = (1, 2)  # occ: a stage's weight tiles as one bulk copy a row tile (1), as one tensor box (2)
OCC_TUNINGS = [(0, 0, 0)]  # occ: (groups, units per stage, lanes) for wg_set_tuning; 0 = the plan's
OCC_DIAG = (0, 2, 5)  # occ: as built, no loads, loads alone


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
    for _ in range(5):
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        best = min(best, e0.elapsed_time(e1) * 1000.0 / CALLS)
    del g
    return best


def copy_rate():
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = graph_us([lambda: dst.copy_(src)])
    del src, dst
    return 2 * (1 << 30) / (us * 1e-6)


def weights(n, k, gen):
    out = []
    for _ in range(COPIES):
        w = torch.randn((n, k), generator=gen, device="cuda", dtype=torch.bfloat16)
        gs = 448 * 6 / float(w.abs().max())
        b_q, b_s = fk.scaled_fp4_quant(w, gs)
        out.append(fk.prepack_fp4_weight(b_q, b_s))
    return out


def dense(pw):
    return _gemm._pk_dense(torch, pw, torch.bfloat16, pw.data.device)


def chunked(a, pw, chunks, side, bufs):
    """out = a @ W^T, W dequantized in `chunks` row ranges on stream `side`, each chunk's GEMM on
    the current stream once its rows are ready (two dequantize buffers alternate)."""
    n, k = pw.n, pw.k
    rows = -(-n // chunks)
    rows = -(-rows // 16) * 16
    cur = torch.cuda.current_stream()
    outs, evs = [], []
    side.wait_stream(cur)
    for c in range(chunks):
        r0, r1 = c * rows, min(n, (c + 1) * rows)
        if r0 >= n:
            break
        buf = bufs[c % 2]
        with torch.cuda.stream(side):
            if c >= 2:
                side.wait_event(evs[c - 2][1])  # the GEMM that read this buffer is done
            rt0 = r0 // 16
            _gemm._C.pk_dequant_cuda(pw.data[rt0:].data_ptr(), buf.data_ptr(), r1 - r0, k, (r1 - r0 + 15) // 16,
                                     pw.data.shape[1], 2, a.device.index, side.cuda_stream)
            ready = torch.cuda.Event()
            ready.record(side)
        cur.wait_event(ready)
        outs.append(torch.matmul(a, buf[: r1 - r0].T))  # the chunks stay apart (a probe)
        done = torch.cuda.Event()
        done.record(cur)
        evs.append((ready, done))
    cur.wait_stream(side)
    return outs


def occupancy(gen):
    """The ``occ`` mode (see the module's docstring)."""
    k = 8192
    units = k // 128
    for tun in OCC_TUNINGS:
        occupancy_at(gen, k, units, tun)


def occupancy_at(gen, k, units, tun):
    for m in (64, 128, 256):
        a = torch.randn((m, k), generator=gen, device="cuda", dtype=torch.bfloat16)
        nt = 16 if m <= 16 else 32 if m <= 32 else 64 if m <= 64 else 128 if m <= 128 else 256
        for n in (1024, 4096, 8448):
            ws = weights(n, k, gen)
            out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")

            def call(pw):
                fk._C.pk_mm_cuda(1, a.data_ptr(), k, pw.data.data_ptr(), 0, 1.0, out.data_ptr(), 2, m, n, k,
                                 pw.data.shape[0], pw.data.shape[1], 0, 1, 0, 0,
                                 torch.cuda.current_stream().cuda_stream)
            _gemm_fast.set_pk_kernel("wg")
            fk._C.wg_set_tuning(*tun)
            try:
                call(ws[0])
            except ValueError as e:  # this build holds no kernel for that tuning at this tile
                print("occ g%du%d M=%-4d N=%-5d %s" % (tun[0], tun[1], m, n, e), flush=True)
                fk._C.wg_set_tuning(0, 0, 0)
                continue
            res, pfs = [], []
            try:
                ref, same = None, True
                for pf in WCOPY:
                    fk._C.wg_set_weight_copy(pf)
                    fk._C.wg_set_diag(0)
                    out.fill_(float("nan"))
                    call(ws[0])
                    ref = out.clone() if ref is None else ref
                    same = same and torch.equal(out, ref)
                    for d in OCC_DIAG:
                        fk._C.wg_set_diag(d)
                        res.append(graph_us([lambda p=p: call(p) for p in ws]))
                        pfs.append((pf, d))
            finally:
                fk._C.wg_set_diag(0)
                fk._C.wg_set_weight_copy(0)
                fk._C.wg_set_tuning(0, 0, 0)
                _gemm_fast.set_pk_kernel("auto")
            ctas = n // 64
            per_unit = [1000 * us / units for us in res]  # ns per unit (every CTA runs all units)
            moved = ctas * units * (nt * 256 + 4 * 1152)  # bytes L2 -> SM
            print("occ g%du%d M=%-4d N=%-5d CTAs %3d %s %s  L2->SM %.2f TB/s" % (
                tun[0], tun[1], m, n, ctas, "same" if same else "MISMATCH", "  ".join("w%d d%d %5.1f us %4.0f ns" % (pf, d, us, pu) for (pf, d), us, pu in
                                      zip(pfs, res, per_unit)),
                moved / (res[0] * 1e-6) / 1e12), flush=True)
            del ws
            torch.cuda.empty_cache()


def epilogue_ab(gen, ws, n, k, m):
    """The ``epi`` mode at one shape and M (see the module's docstring)."""
    a = torch.randn((m, k), generator=gen, device="cuda", dtype=torch.bfloat16)
    res = []
    _gemm_fast.set_pk_kernel("wg")
    try:
        for name, tun in (("def", (0, 0, 0)), ("g2", (2, 1, 0))):
            fk._C.wg_set_tuning(*tun)
            try:
                plan = fk._C.wg_plan_cuda(1, m, n, k, 0, 0)
                fk.scaled_fp4_w4a16_mm(a, ws[0], None, 1.0)
            except (ValueError, RuntimeError):  # no such kernel in this build at this tile
                continue
            res.append("%s(s%d)" % (name, plan[1]))
            outs = []
            for d in (0, 3):
                fk._C.wg_set_diag(d)
                for mode, tag in ((3, "e1"), (0, "e4")):
                    fk._C.wg_set_reduce(mode)
                    if d == 0:
                        outs.append(fk.scaled_fp4_w4a16_mm(a, ws[0], None, 1.0))
                    res.append("d%d %s %.1f" % (d, tag, graph_us(
                        [lambda p=p: fk.scaled_fp4_w4a16_mm(a, p, None, 1.0) for p in ws])))
            torch.cuda.synchronize()
            res.append("same" if torch.equal(outs[0], outs[1]) else "MISMATCH")
    finally:
        fk._C.wg_set_diag(0)
        fk._C.wg_set_reduce(0)
        fk._C.wg_set_tuning(0, 0, 0)
        _gemm_fast.set_pk_kernel("auto")
    print("epi     %5dx%-5d M=%-4d %s" % (n, k, m, " ".join(res)), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="pdl,lanes")
    ap.add_argument("--occ-tuning", default="0,0,0",
                    help="occ: groups,units,lanes[;...] (a FP4_WG_SWEEP build for all but 0,0,0)")
    args = ap.parse_args()
    OCC_TUNINGS[:] = [tuple(int(v) for v in t.split(",")) for t in args.occ_tuning.split(";")]
    only = set(args.only.split(","))
    gen = torch.Generator(device="cuda").manual_seed(1234)
    rate = copy_rate()
    print("copy %.2f TB/s" % (rate / 1e12), flush=True)
    if "occ" in only and fk._C.wg_supported(0):
        occupancy(gen)
    for n, k in SHAPES:
        if not only - {"occ"}:
            break
        ws = weights(n, k, gen)
        if "dequant" in only:
            us = graph_us([lambda p=p: dense(p) for p in ws])
            floor = n * k * (0.5625 + 2) / rate * 1e6
            print("dequant %5dx%-5d %7.1f us (copy-rate floor %.1f: %.0f%%)" % (n, k, us, floor, 100 * floor / us),
                  flush=True)
        ds = [dense(p) for p in ws] if only & {"cublas", "overlap"} else []
        al = torch.tensor([1.0], device="cuda")
        for m in (512, 1024, 4096) if ds else ():
            a = torch.randn((m, k), generator=gen, device="cuda", dtype=torch.bfloat16)
            if "cublas" in only:
                r = {}
                for rpr in (True, False):
                    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = rpr
                    r["torch_rpr" if rpr else "torch_norpr"] = graph_us([lambda d=d: torch.matmul(a, d.T) for d in ds])
                torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
                r["ours_gemm"] = graph_us([lambda d=d: _gemm._gemm_16(torch, a, d, al, torch.bfloat16, m, n, k, a.device)
                                           for d in ds])
                r["ours_path"] = graph_us([lambda p=p: fk.scaled_fp4_w4a16_mm(a, p, None, 1.0) for p in ws])
                print("cublas  %5dx%-5d M=%-4d " % (n, k, m) + " ".join("%s %.1f" % kv for kv in r.items()), flush=True)
            if "overlap" in only and m >= 1024:
                side = torch.cuda.Stream()
                one = graph_us([lambda p=p: torch.matmul(a, dense(p).T) for p in ws])
                res = ["one %.1f" % one]
                for c in (2, 4, 8):
                    rows_c = -(-(-(-n // c)) // 16) * 16
                    bufs = [torch.empty((rows_c, k), dtype=torch.bfloat16, device="cuda") for _ in range(2)]
                    ref = torch.matmul(a, dense(ws[0]).T)
                    got = torch.cat(chunked(a, ws[0], c, side, bufs), dim=1)
                    torch.cuda.synchronize()
                    ok = torch.equal(ref, got)
                    res.append("c%d %.1f%s" % (c, graph_us([lambda p=p: chunked(a, p, c, side, bufs) for p in ws]),
                                               "" if ok else " MISMATCH"))
                print("overlap %5dx%-5d M=%-4d %s" % (n, k, m, " ".join(res)), flush=True)
        if "pdl" in only and n == k:
            for m in (1, 16, 64, 128, 256):
                a0 = torch.randn((m, k), generator=gen, device="cuda", dtype=torch.bfloat16)
                al = 1.0 / (k ** 0.5 * float(ws[0].unpack()[1].float().abs().mean()) * 4)

                def chain():
                    y = a0
                    for i in range(8):
                        y = fk.scaled_fp4_w4a16_mm(y, ws[i % COPIES], None, al)
                    return y
                fk._C.wg_set_pdl(False)
                want = chain()
                fk._C.wg_set_pdl(True)
                s_ = torch.cuda.Stream()
                s_.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s_):
                    chain()
                torch.cuda.current_stream().wait_stream(s_)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    got = chain()
                bad = 0
                for _ in range(20):
                    got.fill_(float("nan"))
                    g.replay()
                    torch.cuda.synchronize()
                    bad += not torch.equal(got, want)
                print("pdl chain M=%-4d %s (20 replays; |y| mean %.3g)" % (
                    m, "bit-identical" if not bad else "MISMATCH in %d" % bad, float(want.float().abs().mean())),
                    flush=True)
                del g
        if "pdl" in only:
            for m in (1, 16, 32, 64, 128, 256):
                a = torch.randn((m, k), generator=gen, device="cuda", dtype=torch.bfloat16)
                res = []
                try:
                    for on in (True, False):
                        fk._C.wg_set_pdl(on)
                        res.append("%s %.1f" % ("pdl" if on else "nopdl", graph_us(
                            [lambda p=p: fk.scaled_fp4_w4a16_mm(a, p, None, 1.0) for p in ws])))
                finally:
                    fk._C.wg_set_pdl(True)
                print("pdl     %5dx%-5d M=%-4d %s" % (n, k, m, " ".join(res)), flush=True)
        if "lanes" in only and fk._C.wg_supported(0):
            for m in (32, 64, 128, 256):
                a = torch.randn((m, k), generator=gen, device="cuda", dtype=torch.bfloat16)
                res = []
                _gemm_fast.set_pk_kernel("wg")
                try:
                    for lanes in (1, 32):
                        fk._C.wg_set_tuning(0, 0, lanes)
                        res.append("l%d %.1f" % (lanes, graph_us([lambda p=p: fk.scaled_fp4_w4a16_mm(a, p, None, 1.0)
                                                                   for p in ws])))
                finally:
                    fk._C.wg_set_tuning(0, 0, 0)
                    _gemm_fast.set_pk_kernel("auto")
                print("lanes   %5dx%-5d M=%-4d %s" % (n, k, m, " ".join(res)), flush=True)
        if "mc" in only and fk._C.wg_supported(0):
            for m in (16, 32, 64, 128, 256, 512, 1024):
                a = torch.randn((m, k), generator=gen, device="cuda", dtype=torch.bfloat16)
                res, base = [], None
                _gemm_fast.set_pk_kernel("wg")
                try:
                    for mc in (1, 2, 4):
                        fk._C.wg_set_multicast(mc)
                        plan = fk._C.wg_plan_cuda(1, m, n, k, 0, 0)
                        out = fk.scaled_fp4_w4a16_mm(a, ws[0], None, 1.0)
                        same = "" if base is None else "" if torch.equal(out, base) else " MISMATCH"
                        base = out if base is None else base
                        res.append("mc%d(%d,s%d) %.1f%s" % (mc, plan[6], plan[1], graph_us(
                            [lambda p=p: fk.scaled_fp4_w4a16_mm(a, p, None, 1.0) for p in ws]), same))
                finally:
                    fk._C.wg_set_multicast(0)
                    _gemm_fast.set_pk_kernel("auto")
                print("mc      %5dx%-5d M=%-4d %s" % (n, k, m, " ".join(res)), flush=True)
        if "stages" in only and fk._C.wg_supported(0):
            for m in (16, 32, 64, 128, 256):
                a = torch.randn((m, k), generator=gen, device="cuda", dtype=torch.bfloat16)
                res, base = [], None
                _gemm_fast.set_pk_kernel("wg")
                try:
                    for st in (0, 2, 3, 4, 6, 8, 10):
                        fk._C.wg_set_tuning(*((0, 0, 0) if st == 0 else (1, 1, 0)))
                        fk._C.wg_set_stages(st)
                        try:
                            plan = fk._C.wg_plan_cuda(1, m, n, k, 0, 0)
                            out = fk.scaled_fp4_w4a16_mm(a, ws[0], None, 1.0)
                        except (ValueError, RuntimeError):
                            continue
                        same = "" if base is None or torch.equal(out, base) else " MISMATCH"
                        base = out if base is None else base
                        res.append("st%d(s%d) %.1f%s" % (st, plan[1], graph_us(
                            [lambda p=p: fk.scaled_fp4_w4a16_mm(a, p, None, 1.0) for p in ws]), same))
                finally:
                    fk._C.wg_set_stages(0)
                    fk._C.wg_set_tuning(0, 0, 0)
                    _gemm_fast.set_pk_kernel("auto")
                print("stages  %5dx%-5d M=%-4d %s" % (n, k, m, " ".join(res)), flush=True)
        if "epi" in only and fk._C.wg_supported(0):
            for m in (16, 32, 64, 128, 256):
                epilogue_ab(gen, ws, n, k, m)
        if "diag" in only and fk._C.wg_supported(0):
            for m in (16, 32, 64, 128, 256):
                a = torch.randn((m, k), generator=gen, device="cuda", dtype=torch.bfloat16)
                res = []
                _gemm_fast.set_pk_kernel("wg")
                try:
                    # the default; 3 stages (2 CTAs per SM from 64 tokens); two consumer warpgroups
                    for name, tun, st in (("def", (0, 0, 0), 0), ("st3", (1, 1, 0), 3), ("g2", (2, 1, 0), 0)):
                        fk._C.wg_set_tuning(*tun)
                        fk._C.wg_set_stages(st)
                        try:
                            plan = fk._C.wg_plan_cuda(1, m, n, k, 0, 0)
                        except (ValueError, RuntimeError):
                            continue
                        res.append("%s(s%d)" % (name, plan[1]))
                        for d in (0, 1, 2, 3):
                            fk._C.wg_set_diag(d)
                            res.append("d%d %.1f" % (d, graph_us(
                                [lambda p=p: fk.scaled_fp4_w4a16_mm(a, p, None, 1.0) for p in ws])))
                finally:
                    fk._C.wg_set_diag(0)
                    fk._C.wg_set_stages(0)
                    fk._C.wg_set_tuning(0, 0, 0)
                    _gemm_fast.set_pk_kernel("auto")
                print("diag    %5dx%-5d M=%-4d %s" % (n, k, m, " ".join(res)), flush=True)
        del ws, ds
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
