#!/usr/bin/env python3
"""A few calls of the fused FP4 GEMM for a profiler (Nsight Compute) to read:

    ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
        -k regex:skinny python3 bench/profile_fused.py [M ...]

N = K = 8192, W4A4 (scaled_fp4_mm) and W4A16, default launch plan, weights larger than L2.
"""
import sys

import torch

import fp4_kernels as fk

ms = [int(v) for v in sys.argv[1:]] or [1, 64]
dev = torch.device("cuda")
n = k = 8192
w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
gw = 448.0 * 6.0 / float(w.float().abs().max())
ws = [fk.scaled_fp4_quant(w, gw) for _ in range(3)]
for m in ms:
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    aq, asc = fk.scaled_fp4_quant(a, 1.0)
    print("M=%d plan (tm, kw, split, groups, omma) = %s" % (m, fk._gemm._fused_plan("fp4", m, n, k)), flush=True)
    for i in range(3):
        bq, bs = ws[i % 3]
        fk.scaled_fp4_mm(aq, bq, asc, bs, 1.0 / gw)
        fk.scaled_fp4_w4a16_mm(a, bq, bs, 1.0 / gw)
torch.cuda.synchronize()
