"""The CUDA quantize kernel's arithmetic (kernel_src/csrc/quant_fast.h), checked on the host.

The kernel computes amax / 6 with one FMA correction, E2M1 codes with three saturating
roundings onto a magic number, sign bits with byte permutes, and rs from a per-CTA table;
quant_fast.h holds those pieces as host/device functions. fastmath_harness.cpp compares them
with nvfp4_math.h (the definition) on a strided sweep of all floats and on random blocks.
The GPU-only parts (the SM89+ E4M3 conversion, the u16x2 max) are checked bit for bit on a
GPU by selfcheck('cuda') and bench/bench_fp4.py.
"""
from __future__ import annotations

import shutil
import subprocess

import pytest

from fp4_helpers import KERNEL_SRC

HERE = __import__("pathlib").Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if cxx is None:
        pytest.fail("no C++ compiler")
    exe = tmp_path_factory.mktemp("fastmath") / "harness"
    res = subprocess.run([cxx, "-std=c++17", "-O2", "-ffp-contract=off", "-fno-fast-math",
                          "-I", str(KERNEL_SRC / "csrc"), str(HERE / "fastmath_harness.cpp"),
                          "-o", str(exe)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True)
    assert res.returncode == 0, res.stdout
    return exe


def test_fast_quant_arithmetic_matches_definition(harness):
    res = subprocess.run([str(harness), "61"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True, timeout=600)
    assert res.returncode == 0 and res.stdout.startswith("ok"), res.stdout
