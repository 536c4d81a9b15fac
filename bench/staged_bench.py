"""Staged nightly vs in-place nightly, through the real CLI, on a real venv with torch.

Three identical venvs are made with torch (the wheel pip finds: ``scripts/setup.sh``'s torch) and
its dependencies. Each "nightly" is the part of ``playbooks/nightly.yaml`` that differs between
the modes: torch reinstalled from its wheel (the nightly's upgrade: every torch file written
anew), in place (``-e staged=false``) or staged (``venv_stage`` + the reinstall in the stage +
``venv_switch``), and a third mode: ``--staged`` for a deploy that changes no torch (stage and
switch only). The kernels' build, install and verify cost the same in every mode and are left out.
Besides each run's wall time (CLI start to exit), each task's time is read from its run record.
Runs alternate between the modes (the machine is shared and noisy); medians are reported.

Disk: ``du`` counting each inode once (hard links shared between versions count once), of the
live venv (in place) and of the live venv's versions folder (staged), after each nightly.

    .venv/bin/python bench/staged_bench.py --rounds 3 --out bench/results/staged.json
    .venv/bin/python bench/staged_bench.py --script-only 5 --out bench/results/staged_script.json
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
  upgrade: true
tasks:
  - name: Stage the next environment
    venv_stage: {}
    when: staged | bool
  - name: Update torch to the nightly (reinstalled from its wheel)
    command:
      argv: ["{{ python }}", -m, pip, install, -q, --no-input, --force-reinstall, --no-deps, "%(wheel)s"]
    when: upgrade | bool
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


def nightly(inv: Path, play: Path, home: Path, staged: bool, upgrade: bool = True) -> dict:
    """One run through the CLI: its wall seconds and each task's seconds from its run record."""
    env = {**os.environ, "FLEETCTL_HOME": str(home / "state"), "XDG_CACHE_HOME": str(home / "cache")}
    t0 = time.monotonic()
    res = subprocess.run([str(REPO / ".venv" / "bin" / "fleetctl"), "-i", str(inv), "deploy", "--hosts", "all",
                          "--playbook", str(play), "-e", f"staged={'true' if staged else 'false'}",
                          "-e", f"upgrade={'true' if upgrade else 'false'}"],
                         capture_output=True, text=True, env=env)
    took = time.monotonic() - t0
    if res.returncode != 0:
        raise SystemExit(f"nightly failed:\n{res.stdout[-3000:]}\n{res.stderr[-2000:]}")
    run_dir = sorted(p for p in (home / "state" / "runs").iterdir() if p.is_dir())[-1]
    host = json.loads((run_dir / "run.json").read_text())["hosts"]["bench"]
    tasks = {t["action"]: t["duration_s"] for t in host["tasks"] if t["status"] != "skipped"}
    return {"wall_s": round(took, 2), "stage_s": tasks.get("venv_stage", 0.0), "upgrade_s": tasks.get("command", 0.0),
            "switch_s": tasks.get("venv_switch", 0.0)}


def script_only(wheel: str, reps: int) -> dict:
    """The host script alone on a torch venv (no CLI, no connection, no facts): ``stage`` then
    ``switch`` ``reps`` times, each timed; what the stage and the switch cost by themselves."""
    root = Path(tempfile.mkdtemp(prefix="fleetctl-staged-script-"))
    try:
        live = root / "venv"
        make_venv(live, wheel)
        venv_mib = du_mib(live)
        script = REPO / "playbooks" / "scripts" / "venv_envs.py"
        folder = root / "envs"
        stage_s, switch_s = [], []
        for i in range(reps):
            t0 = time.monotonic()
            out = json.loads(subprocess.run([sys.executable, str(script), "stage", "--venv", str(live), "--versions",
                                             str(folder)], capture_output=True, text=True, check=True).stdout)
            stage_s.append(round(time.monotonic() - t0, 3))
            t0 = time.monotonic()
            subprocess.run([sys.executable, str(script), "switch", "--venv", out["path"], "--to", "staged"],
                           capture_output=True, text=True, check=True)
            switch_s.append(round(time.monotonic() - t0, 3))
        return {"torch_wheel": Path(wheel).name, "venv_mib": venv_mib, "files_linked": out["linked_files"],
                "stage_s": stage_s, "switch_s": switch_s, "median_stage_s": statistics.median(stage_s),
                "median_switch_s": statistics.median(switch_s), "versions_mib": du_mib(folder),
                "note": "the first switch adopts the live folder (its freeze read too); each switch measures disk use"}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--wheel", default=None, help="the torch wheel (default: the one in /opt/wheels or pip's cache)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--script-only", type=int, default=0, metavar="REPS",
                    help="time the host script's stage and switch alone, REPS times")
    args = ap.parse_args()
    wheel = args.wheel or next((str(p) for p in sorted(Path("/opt/wheels").glob("torch-*.whl"))), None)
    if not wheel:
        raise SystemExit("no torch wheel: give --wheel PATH")
    if args.script_only:
        text = json.dumps(script_only(wheel, args.script_only), indent=1)
        print(text)
        if args.out:
            Path(args.out).write_text(text + "\n")
        return
    root = Path(tempfile.mkdtemp(prefix="fleetctl-staged-bench-"))
    try:
        modes = ("in_place", "staged", "staged_no_upgrade")
        venvs = {m: root / m / "venv" for m in modes}
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
        runs: dict[str, list[dict]] = {m: [] for m in modes}
        disk: dict[str, list[float]] = {m: [] for m in modes}
        for _ in range(args.rounds):
            for mode in modes:
                runs[mode].append(nightly(invs[mode], play, root, mode != "in_place", mode != "staged_no_upgrade"))
                if mode == "in_place":
                    disk[mode].append(du_mib(venvs[mode]))
                else:
                    disk[mode].append(du_mib(Path(os.path.realpath(venvs[mode])).parent))
        med = {m: {k: statistics.median(r[k] for r in runs[m]) for k in runs[m][0]} for m in modes}
        index = json.loads((Path(os.path.realpath(venvs["staged"])).parent / "envs.json").read_text())
        quiet = json.loads((Path(os.path.realpath(venvs["staged_no_upgrade"])).parent / "envs.json").read_text())
        result = {
            "torch_wheel": Path(wheel).name, "venv_mib": base, "rounds": args.rounds, "runs": runs, "median": med,
            "extra_s": {"staged_nightly_wall": round(med["staged"]["wall_s"] - med["in_place"]["wall_s"], 2),
                        "stage_plus_switch": round(med["staged"]["stage_s"] + med["staged"]["switch_s"], 2),
                        "staged_deploy_without_upgrade": round(med["staged_no_upgrade"]["stage_s"]
                                                               + med["staged_no_upgrade"]["switch_s"], 2)},
            "disk_mib_after_each": disk,
            "versions_kept": sorted(index["versions"]),
            "linked_files": [v.get("linked_files") for v in index["versions"].values() if v.get("linked_files")],
            "copied_mib": [v.get("copied_mib") for v in index["versions"].values() if v.get("copied_mib") is not None],
            "disk_by_version": index.get("disk"), "disk_by_version_without_upgrade": quiet.get("disk"),
        }
        text = json.dumps(result, indent=1)
        print(text)
        if args.out:
            Path(args.out).write_text(text + "\n")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
