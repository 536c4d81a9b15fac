"""Issue 28: one prepacked W4A16 GEMM for Nsight Compute, and a summary of its source page.

    python bench/issue28_ncu.py run N K M [groups units lanes]   # 3 calls of the forced wgmma kernel
                                                                 # (FP4_NCU_KERNEL=pk: the prepacked one)
    python bench/issue28_ncu.py summary SOURCE.csv               # top SASS lines by stall samples

Used as: ncu --clock-control none -k regex:wg_kernel -s 2 -c 1 --set full --import-source no
-o REP python bench/issue28_ncu.py run 8192 8192 128; then ncu -i REP.ncu-rep --page source
--print-source sass --csv > SOURCE.csv and the summary."""
import csv
import os
import sys
from collections import Counter


def run(n, k, m, groups=0, units=0, lanes=0):
    import torch
    import fp4_kernels as fk
    from fp4_kernels import _gemm_fast
    g = torch.Generator(device="cuda").manual_seed(7)
    w = torch.randn((n, k), generator=g, device="cuda", dtype=torch.bfloat16)
    gs = 448 * 6 / float(w.abs().max())
    pw = fk.prepack_fp4_weight(*fk.scaled_fp4_quant(w, gs))
    a = torch.randn((m, k), generator=g, device="cuda", dtype=torch.bfloat16)
    _gemm_fast.set_pk_kernel(os.environ.get("FP4_NCU_KERNEL", "wg"))  # pk: the prepacked mma.sync kernel
    fk._C.wg_set_tuning(groups, units, lanes)
    for _ in range(3):
        fk.scaled_fp4_w4a16_mm(a, pw, None, 1.0 / gs)
    torch.cuda.synchronize()


def summary(path):
    rows = list(csv.reader(open(path, newline="")))
    head = None
    for i, r in enumerate(rows):
        if r and r[0] in ("Address", "# Address") or (len(r) > 2 and "Source" in r):
            head, body = r, rows[i + 1:]
            break
    if head is None:
        print("no header in", path, rows[:3])
        return
    print("columns:", head)
    src = head.index("Source")
    cols = [c for c in head if "Stall Sampling" in c or "Warp Stall" in c]
    col = head.index(cols[0]) if cols else None
    if col is None:
        print("no stall column")
        return
    def num(x):
        try:
            return float(x.replace(",", ""))
        except ValueError:
            return 0.0
    tot = sum(num(r[col]) for r in body if len(r) > col)
    by_op = Counter()
    for r in body:
        if len(r) > col:
            by_op[r[src].split()[0] if r[src].split() else "?"] += num(r[col])
    print("stall samples %d; by opcode:" % tot)
    for op, v in by_op.most_common(15):
        print("  %-28s %5.1f%%" % (op, 100 * v / max(tot, 1)))
    print("top lines:")
    for r in sorted((r for r in body if len(r) > col), key=lambda r: -num(r[col]))[:30]:
        print("  %5.1f%%  %s" % (100 * num(r[col]) / max(tot, 1), r[src][:100]))


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(*[int(v) for v in sys.argv[2:]])
    else:
        summary(sys.argv[2])
