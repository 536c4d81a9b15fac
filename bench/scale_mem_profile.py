#!/usr/bin/env python3
"""tracemalloc view of one scale_double.py measurement: the lines holding the most memory after
``fleetctl deploy|run|facts`` at N double hosts (issue 27). Slow (tracemalloc makes the CPU numbers
meaningless: ~4x); memory only. Writes nothing outside a fresh folder under the given --workdir,
which it removes.

    .venv/bin/python3 bench/scale_mem_profile.py --tool deploy --hosts 1000
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale_double  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tool", default="deploy", choices=["run", "facts", "deploy"])
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--workdir", default=str(Path(__file__).resolve().parents[1] / ".bench-work"))
    a = ap.parse_args()
    Path(a.workdir).mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(dir=a.workdir))
    try:
        tracemalloc.start(1)
        res = scale_double.child(a.tool, a.hosts, root, False)
        cur, peak = tracemalloc.get_traced_memory()
        snap = tracemalloc.take_snapshot()
        print(res)
        print(f"traced after run {cur / 2**20:.1f} MiB, traced peak {peak / 2**20:.1f} MiB")
        for st in snap.statistics("lineno")[:a.top]:
            print(st)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
