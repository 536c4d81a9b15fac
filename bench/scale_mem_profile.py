#!/usr/bin/env python3
"""tracemalloc view of one scale_double.py measurement (issue 27): the traced memory at each phase
of ``fleetctl deploy|run|facts`` at N double hosts (before and at the end of each play, the run's
end: record closed and old records pruned, the output), the peak in each phase, and the lines
holding the most memory when the measured play ends (what the run keeps of its hosts). Slow
(tracemalloc makes the CPU numbers meaningless: ~4x); memory only. Writes nothing outside a fresh
folder under the given --workdir, which it removes.

    .venv/bin/python3 bench/scale_mem_profile.py --tool deploy --hosts 1000

A phase's peak minus the traced memory before it is what that phase holds at once: the play's
is the hosts at work (``forks`` of them) plus what the run keeps of every host so far; the end's
is the record's last rewrite, the prune, and the ``--json`` document.
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
    sys.path.insert(0, str(scale_double.REPO))
    import fleetctl.engine.runner as runner
    import fleetctl.reporting.prune as prune

    marks: list[tuple[str, int, int]] = []
    ended: list[tracemalloc.Snapshot] = []

    def mark(label: str) -> None:
        cur, peak = tracemalloc.get_traced_memory()
        marks.append((label, cur, peak))
        tracemalloc.reset_peak()

    play, prune_runs = runner.run_playbook, prune.prune_runs

    async def traced_play(*args, **kwargs):
        mark("before the play")
        try:
            return await play(*args, **kwargs)
        finally:
            mark("the play")
            ended.append(tracemalloc.take_snapshot())

    def traced_prune(*args, **kwargs):  # the last step of the run's end (fleetctl.api.lifecycle.finish_run)
        try:
            return prune_runs(*args, **kwargs)
        finally:
            mark("the run's end (record closed, records pruned)")

    runner.run_playbook, prune.prune_runs = traced_play, traced_prune
    try:
        tracemalloc.start(1)
        res = scale_double.child(a.tool, a.hosts, root, False)
        mark("the output (--json) and exit")
        print(res)
        print(f"{'phase (setup deploy first for deploy)':48} {'traced after':>13} {'peak in it':>11}")
        for label, cur, peak in marks:
            print(f"{label:48} {cur / 2**20:10.1f} MiB {peak / 2**20:7.1f} MiB")
        if ended:
            stats = ended[-1].statistics("lineno")
            print(f"\ntraced when the measured play ended: {sum(s.size for s in stats) / 2**20:.1f} MiB; top lines:")
            for st in stats[:a.top]:
                print(f"{st.size / 1024:9.0f} KiB {st.count:8d}  {st.traceback}")
    finally:
        tracemalloc.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
