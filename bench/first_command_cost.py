#!/usr/bin/env python3
"""What a host spends on a no-change deploy's first command, piece by piece (issue 27).

The no-change deploy is one exec a host (``python3 -S -c BOOT``, its stdin the session script,
the facts script and a job: :mod:`fleetctl.engine.session_start`). On loopback test hosts the
hosts' CPU shares the controller's cores, so this command's CPU is what bounds the deploy's wall
time against ``fleetctl run -- true`` at 50 hosts. This script measures it apart from SSH:

1. one real sshd test host (tests/support/sshd.py) with a fake nvidia-smi (an H200) and its own
   ``python -m venv`` venv, the toy playbook of bench/deploy_bench.py deployed twice (install,
   then no change) and a third time with the first command's stdin captured (the job as the
   engine wrote it: the probes it answers ahead, the lock, the pruning);
2. that stdin run again locally, as the host's user would run it (same HOME and PATH), by
   ``/usr/bin/python3 -S -c BOOT``, in variants: the whole job, without the probes answered
   ahead, without the facts, with neither; and the interpreter alone and its stdlib imports;
   every variant once a round, ``--rounds`` rounds interleaved, CPU of the child
   (``getrusage(RUSAGE_CHILDREN)`` deltas, milliseconds), medians and the first quartile.

Run by hand, not by CI (bench/README.md has the numbers):

    .venv/bin/python bench/first_command_cost.py --rounds 25
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

import deploy_bench as db  # noqa: E402

from fleetctl.engine.session_start import BOOT  # noqa: E402
from tests.support.sshd import ensure_client_key  # noqa: E402

#: Put first on the captured deploy's PYTHONPATH: saves each first command's stdin to a file.
CAPTURE = """\
import os
if os.environ.get("FIRST_COMMAND_CAPTURE"):
    import fleetctl.engine.session_start as ss
    _orig = ss.boot_stdin
    def _capture(job):
        data = _orig(job)
        with open(os.environ["FIRST_COMMAND_CAPTURE"], "wb") as fh:
            fh.write(data)
        return data
    ss.boot_stdin = _capture
"""

IMPORTS = {"python3 -S alone": "pass", "+ json": "import json", "+ re": "import re",
           "+ subprocess": "import subprocess",
           "+ the session script's imports": "import base64,fcntl,json,os,signal,subprocess,sys,threading,time,zlib"}


def blocks(data: bytes) -> list[bytes]:
    r = io.BytesIO(data)
    out = []
    for _ in range(3):
        n = int(r.readline())
        out.append(r.read(n))
    return out


def pack(parts: list[bytes]) -> bytes:
    return b"".join(b"%d\n" % len(p) + p for p in parts)


def child_cpu(argv: list[str], stdin: bytes | None, env: dict[str, str]) -> float:
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(argv, input=stdin, env=env, capture_output=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"{argv[:3]} failed (rc {p.returncode}): {p.stderr[-400:]!r}")
    return (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--python", default="/usr/bin/python3", help="the host's python3 (not a pyenv shim)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="fleet-first-command-"))
    hosts = []
    try:
        key = ensure_client_key(root / "key")
        hosts, kh = db.start_hosts(root, 1, key)
        inv = db.inventory(root, hosts, kh, 1, "one")
        play = root / "toy.yaml"
        play.write_text(db.PLAY)
        (root / "patch").mkdir()
        (root / "patch" / "sitecustomize.py").write_text(CAPTURE)
        env = dict(os.environ, FLEETCTL_HOME=str(root / "home"), XDG_CACHE_HOME=str(root / "cache"))
        cmd = [str(REPO / ".venv" / "bin" / "fleetctl"), "-i", str(inv), "deploy", "--hosts", "bench",
               "--playbook", str(play), "--skip-tags", "verify"]
        for i in range(3):  # install; no change (the probes of an install asked once more); captured
            if i == 2:
                env.update(FIRST_COMMAND_CAPTURE=str(root / "stdin"), PYTHONPATH=str(root / "patch"))
            p = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if p.returncode != 0:
                raise SystemExit(f"deploy {i + 1} failed (rc {p.returncode}): {p.stdout[-600:]}{p.stderr[-600:]}")
        script, facts, job_text = blocks((root / "stdin").read_bytes())
        job = json.loads(job_text)
        variants = {
            "whole first command": pack([script, facts, job_text]),
            "without the probes answered ahead": pack([script, facts, json.dumps({**job, "probes": []}).encode()]),
            "without the facts": pack([script, b"", json.dumps({**job, "facts": False}).encode()]),
            "neither (lock, prune, result)": pack([script, b"", json.dumps({**job, "probes": [], "facts": False}).encode()]),
        }
        host = hosts[0]
        henv = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        henv.update(HOME=str(root / "hosts" / host.name / "home"), PATH=f"{host.bin_dir}:{os.environ['PATH']}")
        cpu: dict[str, list[float]] = {k: [] for k in [*IMPORTS, *variants]}
        for _ in range(args.rounds):
            for name, src in IMPORTS.items():
                cpu[name].append(child_cpu([args.python, "-S", "-c", src], None, henv))
            for name, stdin in variants.items():
                cpu[name].append(child_cpu([args.python, "-S", "-c", BOOT], stdin, henv))
        print(f"probes answered ahead: {len(job.get('probes') or [])}; load average {os.getloadavg()[0]:.1f}")
        print(f"{'CPU of the child, ms':40} {'median':>8} {'q1':>8}")
        for name, v in cpu.items():
            print(f"{name:40} {statistics.median(v) * 1e3:8.1f} {sorted(v)[len(v) // 4] * 1e3:8.1f}")
        return 0
    finally:
        for h in hosts:
            h.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
