#!/usr/bin/env python3
"""A few calls of the prepacked W4A16 kernel (cuda_pk.cu) for Nsight Compute to read:

    ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats \
        --section SchedulerStats --section LaunchStats -k regex:pk_kernel python3 bench/profile_pk.py [M ...]

N = K = 8192 (bf16 activations, default launch plan), three weight copies (more than L2 together).
"""
import sys

import torch

import fp4_kernels as fk

ms = [int(v) for v in sys.argv[1:]] or [1, 16]
dev = torch.device("cuda")
n = k = 8192
w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
gw = 448.0 * 6.0 / float(w.float().abs().max())
pws = [fk.prepack_fp4_weight(*fk.scaled_fp4_quant(w, gw)) for _ in range(3)]
for m in ms:
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    print("M=%d plan (tokens, rt, split, un) = %s" % (m, fk._gemm._pk_plan("bf16", m, n, k)), flush=True)
    for i in range(3):
        fk.scaled_fp4_w4a16_mm(a, pws[i % 3], None, 1.0 / gw)
torch.cuda.synchronize()
