"""prepack_fp4_weight / PackedFP4Weight: the prepacked layout of the fused W4A16 kernel.

CPU: the prepack is an exact inverse of unpack; every register of every lane decodes (through the
Python model of csrc/pk_layout.h's pk_decode) to the codes the layout promises; the model agrees
with the C++ header compiled by g++; GEMMs with a prepacked weight give the same bytes as with the
plain arrays on the CPU path and in the reference. CUDA: the kernels compile for sm_90a with
tensor-core instructions, 16-byte streaming loads and no local memory (their numbers are checked
on a GPU by selfcheck('cuda') and bench/bench_fp4.py).
"""
from __future__ import annotations

import random
import re
import shutil
import subprocess

import pytest
import torch

from fp4_helpers import KERNEL_SRC, sass_functions


def _weights(g, n, k):
    return (torch.randint(0, 256, (n, k // 2), generator=g, dtype=torch.uint8),
            torch.randint(0, 256, (n, k // 16), generator=g, dtype=torch.uint8))


@pytest.mark.parametrize("nk", [(1, 16), (16, 128), (17, 272), (40, 1040), (129, 256)],
                         ids=lambda t: "%dx%d" % t)
def test_prepack_roundtrip_is_exact(fk, nk):
    n, k = nk
    g = torch.Generator().manual_seed(n * 1000 + k)
    bq, bs = _weights(g, n, k)
    pw = fk.prepack_fp4_weight(bq, bs.view(torch.float8_e4m3fn))
    assert isinstance(pw, fk.PackedFP4Weight) and pw.shape == (n, k)
    assert tuple(pw.data.shape) == ((n + 15) // 16, (k + 127) // 128, 1152) and pw.data.dtype == torch.uint8
    q2, s2 = pw.unpack()
    assert s2.dtype == torch.float8_e4m3fn
    assert torch.equal(q2, bq) and torch.equal(s2.view(torch.uint8), bs)


def test_layout_places_the_promised_codes(fk):
    """Every lane's word of every k-step decodes to a0..a3 = rows g / g + 8, k = 32 t + 4 s + 0..3;
    the scale word holds (g, 2t), (g+8, 2t), (g, 2t+1), (g+8, 2t+1)."""
    from fp4_kernels import _prepack as pp

    g = torch.Generator().manual_seed(7)
    bq, bs = _weights(g, 32, 256)
    pw = fk.prepack_fp4_weight(bq, bs)
    codes = torch.stack([bq & 15, bq >> 4], -1).reshape(32, 256)
    for rt in range(2):
        for u in range(2):
            d = pw.data[rt, u].tolist()
            for lane in range(32):
                gg, t = lane >> 2, lane & 3
                for s in range(8):
                    off = (s >> 2) * 512 + lane * 16 + (s & 3) * 4
                    regs = pp._decode_regs(int.from_bytes(bytes(d[off:off + 4]), "little"))
                    for j, r in enumerate(regs):
                        row = 16 * rt + gg + 8 * (j & 1)
                        for h in range(2):
                            kk = 128 * u + 32 * t + 4 * s + 2 * (j >> 1) + h
                            c = ((r >> (6 + 16 * h)) & 7) | (((r >> (15 + 16 * h)) & 1) << 3)
                            assert c == int(codes[row, kk]), (rt, u, lane, s, j, h)
                sw = d[1024 + 4 * lane:1028 + 4 * lane]
                r0 = 16 * rt + gg
                assert sw == [int(bs[r0, 8 * u + 2 * t]), int(bs[r0 + 8, 8 * u + 2 * t]),
                              int(bs[r0, 8 * u + 2 * t + 1]), int(bs[r0 + 8, 8 * u + 2 * t + 1])]


def test_python_decode_model_matches_the_header(tmp_path, fk):
    """csrc/pk_layout.h compiled by g++ against fp4_kernels._prepack's model, on random words."""
    from fp4_kernels import _prepack as pp

    src = tmp_path / "h.cpp"
    src.write_text('#include <cstdio>\n#include "pk_layout.h"\nint main(){unsigned w;'
                   'while(std::scanf("%u",&w)==1){uint32_t r[4];fp4::pk_decode(w,r);'
                   'std::printf("%u %u %u %u %u\\n",r[0],r[1],r[2],r[3],fp4::pk_to_f16(r[3]));}}\n')
    exe = tmp_path / "h"
    cxx = shutil.which("g++") or shutil.which("c++")
    r = subprocess.run([cxx, "-O1", "-std=c++17", "-I", str(KERNEL_SRC / "csrc"), str(src), "-o", str(exe)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    assert r.returncode == 0, r.stdout
    rnd = random.Random(3)
    words = [rnd.getrandbits(32) for _ in range(3000)] + [0, 0xFFFFFFFF, 1, 0x80000000]
    out = subprocess.run([str(exe)], input="\n".join(map(str, words)), stdout=subprocess.PIPE,
                         universal_newlines=True, check=True).stdout.split("\n")
    for w, line in zip(words, out):
        regs = pp._decode_regs(w)
        f16 = (regs[3] | (regs[3] << 3)) & 0x8E008E00
        assert [int(x) for x in line.split()] == [*regs, f16], hex(w)
    # and the inverse: every nibble vector has exactly one word
    for _ in range(500):
        v = rnd.getrandbits(32)
        assert pp._nibbles(pp._decode_regs(pp.encode_word(v))) == v


@pytest.mark.parametrize("mnk", [(1, 40, 128), (5, 33, 272), (20, 17, 1040)], ids=lambda t: "%dx%dx%d" % t)
def test_gemms_with_a_prepacked_weight_give_the_same_bytes(fk, ref, mnk):
    m, n, k = mnk
    g = torch.Generator().manual_seed(m + n + k)
    a = torch.randn(m, k, generator=g) * 3
    b = torch.randn(n, k, generator=g)
    ga, gb = 448.0 * 6.0 / float(a.abs().max()), 448.0 * 6.0 / float(b.abs().max())
    aq, asc = fk.scaled_fp4_quant(a, ga)
    bq, bsc = fk.scaled_fp4_quant(b, gb)
    pw = fk.prepack_fp4_weight(bq, bsc)
    al = 1.0 / (ga * gb)
    for dt in (torch.bfloat16, torch.float16, torch.float32):
        assert torch.equal(fk.scaled_fp4_mm(aq, pw, asc, None, al, dt), fk.scaled_fp4_mm(aq, bq, asc, bsc, al, dt))
        assert torch.equal(ref.scaled_fp4_mm(aq, pw, asc, None, al, dt), ref.scaled_fp4_mm(aq, bq, asc, bsc, al, dt))
    for adt in (torch.bfloat16, torch.float16):
        a16 = a.to(adt)
        assert torch.equal(fk.scaled_fp4_w4a16_mm(a16, pw, None, 1.0 / gb),
                           fk.scaled_fp4_w4a16_mm(a16, bq, bsc, 1.0 / gb))
        assert torch.equal(ref.scaled_fp4_w4a16_mm(a16, pw, None, 1.0 / gb, torch.float64),
                           ref.scaled_fp4_w4a16_mm(a16, bq, bsc, 1.0 / gb, torch.float64))
        assert torch.equal(ref.scaled_fp4_w4a16_mm_error_bound(a16, pw, None, 1.0 / gb),
                           ref.scaled_fp4_w4a16_mm_error_bound(a16, bq, bsc, 1.0 / gb))


def test_prepack_rejects_bad_input(fk):
    bq = torch.zeros(4, 8, dtype=torch.uint8)
    bs = torch.zeros(4, 1, dtype=torch.uint8)
    with pytest.raises(TypeError, match="b_q"):
        fk.prepack_fp4_weight(bq.float(), bs)
    with pytest.raises(TypeError, match="b_scale"):
        fk.prepack_fp4_weight(bq, bs.float())
    with pytest.raises(ValueError, match="b_scale"):
        fk.prepack_fp4_weight(bq, torch.zeros(4, 2, dtype=torch.uint8))
    with pytest.raises(ValueError, match="multiple of 16"):
        fk.prepack_fp4_weight(torch.zeros(4, 0, dtype=torch.uint8), torch.zeros(4, 0, dtype=torch.uint8))
    pw = fk.prepack_fp4_weight(bq, bs)
    a = torch.zeros(2, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="b_scale: must be None"):
        fk.scaled_fp4_w4a16_mm(a, pw, bs, 1.0)
    with pytest.raises(ValueError, match="K = 32"):
        fk.scaled_fp4_w4a16_mm(torch.zeros(2, 32, dtype=torch.bfloat16), pw, None, 1.0)
    with pytest.raises(ValueError, match="b_scale: must be None"):
        fk.scaled_fp4_mm(torch.zeros(2, 8, dtype=torch.uint8), pw, torch.zeros(2, 1, dtype=torch.uint8), bs, 1.0)


def test_prepacked_kernels_sass_sm90a(fp4_build):
    """bf16 / fp16 activations x 8 / 16 / 32-token tiles (x 1 or 2 units per load for 8 and 16)
    x K a multiple of the unit or not: HMMA on bf16 / fp16, 16-byte non-allocating loads of the
    weights, the decode's 32-bit rotate (SHF.L.W, csrc/pk_layout.h), no local memory."""
    funcs = sass_functions(fp4_build.so, "pk_kernel")
    k90 = {k: v for k, v in funcs.items() if k[0] == "sm_90a"}
    assert len(k90) == 20, sorted(k[1] for k in k90)
    for (arch, name), text in k90.items():
        assert re.search(r"HMMA\.16816\.F32(\.BF16)?", text), name
        assert "LDG.E.NA.128.CONSTANT" in text, name
        assert "SHF.L.W" in text, name
        assert "LDL" not in text and "STL" not in text, name
    deq = {k: v for k, v in sass_functions(fp4_build.so, "pk_dequant").items() if k[0] == "sm_90a"}
    assert len(deq) == 2 and all("LDL" not in v for v in deq.values())
    # the launch overlap on every arch of the build (bench/NOTES.md, "Issue 28: launch overlap"): the
    # wait for the grid before (griddepcontrol.wait: ACQBULK), the trigger of the next (launch_dependents:
    # PREEXIT, at the start or after the k loop) and the bulk L2 prefetch of a warp's range (UBLKPF.L2)
    assert {k[0] for k in funcs} == {"sm_90a", "sm_120a"} and len(funcs) == 40, sorted(funcs)
    for (arch, name), text in funcs.items():
        assert "ACQBULK" in text and text.count("PREEXIT") >= 2 and "UBLKPF.L2" in text, (arch, name)
