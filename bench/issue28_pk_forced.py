"""Issue 28: the prepacked kernel at 16 and 32 tokens, the plan's launch configuration against
forced ones, all timed the same way (bench/issue28.py's graph_us: 40 calls, 4 rotated weights, best of
7) and through the same call (``_gemm._run_pk``), to check the sweep of run p8
(bench/results/2026-12-06-h200-issue28/p8) where forced configurations read 1.5x the table's times.
Run p9 found why: a forced small K split sends M >= 9 to the wgmma kernel (bindings.cpp use_wg plans
it with the forced split), so "forced" rows with split 1 (and 2 at M >= 17) time that kernel.

    python bench/issue28_pk_forced.py
"""
from __future__ import annotations

import torch

import fp4_kernels as fk
from fp4_kernels import _gemm, _gemm_fast
from issue28 import graph_us
from issue28_probe import weights

# (shape, M, forced (rt, split, un)); p11: K splits of 3 and 6 (the sweep tries 1, 2, 4, 8) that fill
# ~97% of the CTA slots at 16 tokens (3 CTAs an SM) where the plan's grid fills 57-65%
CASES = [((8192, 8192), 16, [(4, 3, 1), (8, 6, 1), (2, 3, 1)]), ((4096, 14336), 16, [(2, 3, 1), (4, 6, 1)]),
         ((14336, 4096), 16, [(8, 3, 1), (4, 3, 1)]), ((2048, 7168), 16, [(2, 3, 1), (1, 3, 1)]),
         ((8192, 8192), 32, [(4, 3, 1), (8, 6, 1)]), ((4096, 14336), 32, [(2, 3, 1), (4, 6, 1)])]


def main() -> int:
    _gemm_fast.set_pk_kernel("pk")  # a forced small split must not send M >= 9 to the wgmma kernel (p9)
    try:
        return _main()
    finally:
        _gemm_fast.set_pk_kernel("auto")


def _main() -> int:
    gen = torch.Generator(device="cuda").manual_seed(2830)
    dev = torch.device("cuda", 0)
    print(torch.cuda.get_device_name(), flush=True)
    for (n, k), m, forced in CASES:
        ws = weights(n, k, gen)
        a = torch.randn((m, k), generator=gen, device="cuda", dtype=torch.bfloat16)
        plan = tuple(_gemm._pk_plan("bf16", m, n, k, device=0)[1:])
        api = [lambda p=p: fk.scaled_fp4_w4a16_mm(a, p, None, 1.0) for p in ws]

        def run(cfg, ws=ws):
            return [lambda p=p: _gemm._run_pk(torch, 1, a, p, 1.0, torch.bfloat16, m, n, k, dev,
                                              rt=cfg[0], split=cfg[1], un=cfg[2]) for p in ws]
        base = api[0]()
        res = {}
        for _ in range(2):
            for name, fns in [("api", api), ("run_pk plan", run((0, 0, 0))), ("forced %s" % (plan,), run(plan))] + \
                    [("forced %s" % (c,), run(c)) for c in forced]:
                out = fns[0]()
                torch.cuda.synchronize()
                same = torch.equal(out, base)
                res[name] = (min(res.get(name, (1e30,))[0], graph_us(fns)), same)
        print("%5dx%-5d M=%-3d plan %s | " % (n, k, m, plan) +
              " | ".join("%s %.1f%s" % (nm, t, "" if s else " (other split: sums differ)") for nm, (t, s) in res.items()),
              flush=True)
        del ws
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
