"""Staged nightly vs in-place nightly, through the real CLI, on a real venv with torch.

Two identical venvs are made with torch (the wheel pip finds: ``scripts/setup.sh``'s torch) and
its dependencies. Each "nightly" is the part of ``playbooks/nightly.yaml`` that differs between
the two modes: torch reinstalled from its wheel (the nightly's upgrade: every torch file written
anew), in place (``-e staged=false``) or staged (``venv_stage`` + the reinstall in the stage +
``venv_switch``). The kernels' build, install and verify cost the same in both modes and are left
out. Runs alternate between the modes (the machine is shared and noisy); medians are reported.

Disk: ``du`` counting each inode once (hard links shared between versions count once), of the
live venv (in place) and of the live venv's versions folder (staged), after each nightly.

    .venv/bin/python bench/staged_bench.py --rounds 3 --out bench/results/staged.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PLAY = """\
name: nightly (the part staging changes)
hosts: all
vars:
  staged: true
tasks:
  - name: Stage the next environment
    venv_stage: {}
    when: staged | bool
  - name: Update torch to the nightly (reinstalled from its wheel)
    command:
      argv: ["{{ python }}", -m, pip, install, -q, --no-input, --force-reinstall, --no-deps, "%(wheel)s"]
    timeout: 3600
  - name: Switch to the verified environment
    venv_switch: {to: staged}
    when: staged | bool
"""


def du_mib(*paths: Path) -> float:
    """Disk use (MiB) of ``paths`` together, each inode once (``du -s -k`` counts hard links once)."""
    out = subprocess.run(["du", "-s", "-k", "-c", *map(str, paths)], capture_output=True, text=True, check=True).stdout
    return round(int(out.strip().splitlines()[-1].split()[0]) / 1024, 1)


def make_venv(path: Path, wheel: str) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    subprocess.run([str(path / "bin" / "python3"), "-m", "pip", "install", "-q", wheel], check=True)


def nightly(inv: Path, play: Path, home: Path, staged: bool) -> float:
    env = {**os.environ, "FLEETCTL_HOME": str(home / "state"), "XDG_CACHE_HOME": str(home / "cache")}
    t0 = time.monotonic()
    res = subprocess.run([str(REPO / ".venv" / "bin" / "fleetctl"), "-i", str(inv), "deploy", "--hosts", "all",
                          "--playbook", str(play), "-e", f"staged={'true' if staged else 'false'}"],
                         capture_output=True, text=True, env=env)
    took = time.monotonic() - t0
    if res.returncode != 0:
        raise SystemExit(f"nightly failed:\n{res.stdout[-3000:]}\n{res.stderr[-2000:]}")
    return round(took, 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--wheel", default=None, help="the torch wheel (default: the one in /opt/wheels or pip's cache)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    wheel = args.wheel or next((str(p) for p in sorted(Path("/opt/wheels").glob("torch-*.whl"))), None)
    if not wheel:
        raise SystemExit("no torch wheel: give --wheel PATH")
    root = Path(tempfile.mkdtemp(prefix="fleetctl-staged-bench-"))
    try:
        venvs = {"in_place": root / "inplace" / "venv", "staged": root / "staged" / "venv"}
        for mode, venv in venvs.items():
            venv.parent.mkdir(parents=True)
            make_venv(venv, wheel)
        play = root / "play.yaml"
        play.write_text(PLAY % {"wheel": wheel})
        invs = {}
        for mode, venv in venvs.items():
            invs[mode] = root / f"{mode}.yaml"
            invs[mode].write_text(json.dumps({"all": {"hosts": {"bench": {
                "ansible_connection": "local", "venv": str(venv), "workdir": str(venv.parent / "work")}}}}))
        base = du_mib(venvs["in_place"])
        times: dict[str, list[float]] = {"in_place": [], "staged": []}
        disk: dict[str, list[float]] = {"in_place": [], "staged": []}
        for _ in range(args.rounds):
            for mode in ("in_place", "staged"):
                times[mode].append(nightly(invs[mode], play, root, mode == "staged"))
                if mode == "staged":
                    folder = Path(os.path.realpath(venvs[mode])).parent
                    disk[mode].append(du_mib(folder))
                else:
                    disk[mode].append(du_mib(venvs[mode]))
        index = json.loads((Path(os.path.realpath(venvs["staged"])).parent / "envs.json").read_text())
        stage_s = [v.get("seconds") for v in index["versions"].values() if v.get("seconds") is not None]
        result = {
            "torch_wheel": Path(wheel).name, "venv_mib": base, "rounds": args.rounds,
            "seconds": {m: t for m, t in times.items()},
            "median_s": {m: statistics.median(t) for m, t in times.items()},
            "extra_s_median": round(statistics.median(times["staged"]) - statistics.median(times["in_place"]), 2),
            "stage_script_s": stage_s,
            "disk_mib_after_each": disk,
            "versions_kept": sorted(index["versions"]),
            "linked_files": [v.get("linked_files") for v in index["versions"].values() if v.get("linked_files")],
            "copied_mib": [v.get("copied_mib") for v in index["versions"].values() if v.get("copied_mib") is not None],
            "disk_by_version": index.get("disk"),
        }
        text = json.dumps(result, indent=1)
        print(text)
        if args.out:
            Path(args.out).write_text(text + "\n")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
