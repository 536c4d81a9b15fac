#!/usr/bin/env python3
"""Controller cost per host at 50, 200 and 1,000 hosts: ``run``, ``facts`` and a no-change deploy
against the bare asyncssh floor.

Run by hand, not by CI (bench/README.md has the exact commands and the numbers measured):

    .venv/bin/python bench/scale_bench.py --hosts 50,200,1000 --sshd 5 --repeats 2 \\
        --json-out bench/results/scale_bench.json

The inventory hosts are aliases spread over ``--sshd`` real OpenSSH sshd test hosts on 127.0.0.1
(``MaxStartups 1000``): alias ``a0001`` is the first sshd, ``a0002`` the second, and so on. Each
alias has its own venv (:func:`alias_venv`: ``python -m venv --without-pip`` that sees the
controller's site-packages, pip and setuptools included, through a ``.pth`` file: 0.1 s and a few
KiB, not a 20 MB venv per alias), its own working folder (``workdir``) and deploy lock file
(``deploy_lock``), as separate machines would: fleetctl refuses hosts that share a venv or a
workdir (one venv holds one wheel), so aliases sharing them could not deploy at all. Before each
size is measured, a setup deploy (untimed, ``--forks 50``) installs the toy on every alias of
that size (one build, the wheel pushed to the others); the measured deploy then changes nothing.
The playbook is bench/deploy_bench.py's toy in fp4-kernels.yaml's shape, without verify.

Measured per tool and size (medians of ``--repeats`` rounds after a warm-up round; method as
bench/fleet_bench.py): wall seconds, controller CPU seconds (the tool process and its children,
wait4) and per host in milliseconds, and the tool process's peak RSS (wait4 ``ru_maxrss``). A
cost that grows with the hosts at a steady rate is linear; the table's ``ms/host`` column staying
flat from 50 to 1,000 hosts is the check for a superlinear step. Every fleetctl run uses
``--forks 50`` and the floor ``--parallel 50``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

import deploy_bench as db  # noqa: E402
import fleet_bench as fb  # noqa: E402
import yaml  # noqa: E402

from tests.support.fake_gpu import H200, write_fake_nvidia_smi  # noqa: E402
from tests.support.sshd import ensure_client_key, start_sshd  # noqa: E402

FORKS = 50


def start(root: Path, k: int, key: Path):
    hosts = []
    for i in range(k):
        name = f"s{i + 1}"
        home = root / "hosts" / name / "home"
        home.mkdir(parents=True, exist_ok=True)
        h = start_sshd(name, root / "hosts" / name, key, env={"HOME": str(home)},
                       extra_config="MaxStartups 1000\nMaxSessions 50")
        write_fake_nvidia_smi(h.bin_dir, [H200])
        hosts.append(h)
    kh = root / "known_hosts"
    kh.write_text("".join(h.known_hosts_line + "\n" for h in hosts))
    return hosts, kh


def inventories(root: Path, hosts: list, key: Path, kh: Path, n: int) -> tuple[Path, Path]:
    entries, floor = {}, []
    for i in range(n):
        h = hosts[i % len(hosts)]
        alias = f"a{i + 1:04d}"
        entries[alias] = {**h.inventory_vars(kh), "venv": alias_venv(root / "venvs" / alias),
                          "workdir": str(root / "work" / alias), "deploy_lock": str(root / "locks" / f"{alias}.lock")}
        floor.append({"name": alias, "host": "127.0.0.1", "port": h.port, "user": h.user, "key": str(key),
                      "known_hosts": str(kh)})
    inv = root / f"inv{n}.yaml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"bench": {"hosts": entries}}}}, sort_keys=False))
    fl = root / f"floor{n}.json"
    fl.write_text(json.dumps(floor))
    return inv, fl


def alias_venv(path: Path) -> str:
    """An alias's own venv: no pip of its own; the controller's site-packages (pip, setuptools,
    torch) through a ``.pth`` file, as :func:`deploy_bench.make_venv` gives its venvs."""
    if not (path / "bin" / "python3").exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
        purelib = subprocess.run([str(path / "bin" / "python3"), "-c",
                                  "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 check=True, capture_output=True, text=True).stdout.strip()
        import sysconfig

        Path(purelib, "_controller_site.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return str(path)


def setup_deploy(root: Path, inv: Path, env: dict[str, str], log) -> None:
    """Install the toy on every alias of ``inv`` (untimed): the measured deploy changes nothing."""
    p = subprocess.run([str(fb.FLEETCTL), "-i", str(inv), "deploy", "--hosts", "bench", "--playbook",
                        str(_play(root)), "--json", "--skip-tags", "verify", "--forks", str(FORKS)],
                       capture_output=True, text=True, cwd=root,
                       env={**os.environ, **env, "FLEETCTL_HOME": str(root / "home"),
                            "XDG_CACHE_HOME": str(root / "cache")})
    bad = db.check_deploy(len(yaml.safe_load(inv.read_text())["all"]["children"]["bench"]["hosts"]), want=None)(
        p.returncode, p.stdout, p.stderr)
    log(f"setup deploy of {inv.name}: rc={p.returncode}" + (f": {bad}" if bad else ""))


def tools(root: Path, inv: Path, floor: Path, n: int, env: dict[str, str]) -> list[fb.Tool]:
    play = root / "toy.yaml"
    play.write_text(db.PLAY)
    base = {**env, "FLEETCTL_HOME": str(root / "home"), "XDG_CACHE_HOME": str(root / "cache")}
    f = [str(fb.FLEETCTL), "-i", str(inv)]
    return [
        fb.Tool("fleetctl run", f + ["run", "--hosts", "bench", "--json", "--forks", str(FORKS), "--", "true"],
                db._check_run(n), env=base),
        fb.Tool("asyncssh floor", [str(fb.VENV_PY), str(REPO / "bench" / "asyncssh_floor.py"), "--parallel",
                                   str(FORKS), str(floor), "--", "true"],
                lambda rc, o, e: None if rc == 0 else f"rc={rc}: {fb._tail(o + e)}"),
        fb.Tool("fleetctl facts", f + ["facts", "--hosts", "bench", "--json", "--forks", str(FORKS)],
                fb.check_fleetctl_facts(n), env=base),
        fb.Tool("deploy, no change", f + ["deploy", "--hosts", "bench", "--playbook", str(play), "--json",
                                          "--forks", str(FORKS), "--skip-tags", "verify"],
                db.check_deploy(n), env=base),
    ]


def per_host(results: dict) -> str:
    lines = [f"{'scenario':11} {'tool':20} {'hosts':>6} {'wall s':>8} {'ctl cpu':>8} {'ms/host':>8} {'peak MiB':>9}"]
    for sc in results["scenarios"]:
        n = int(sc["label"].split("@")[1])
        for name in sc["tools"]:
            m = sc["summary"][name]
            cpu = m["ctl_cpu_s"]
            lines.append(f"{sc['label']:11} {name:20} {n:>6} {fb.fmt(m['wall_s'], '.2f'):>8} {fb.fmt(cpu):>8} "
                         f"{fb.fmt(cpu * 1000 / n if cpu else None, '.1f'):>8} {fb.fmt(m['proc_peak_mib'], '.1f'):>9}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="50,200,1000")
    ap.add_argument("--sshd", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--tools", default="", help="only tools whose name contains one of these (comma list)")
    ap.add_argument("--json-out", default="")
    ap.add_argument("--workdir", default="")
    args = ap.parse_args()
    sizes = [int(x) for x in args.hosts.split(",") if x.strip()]
    root = Path(args.workdir or tempfile.mkdtemp(prefix="scale-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    (root / "locks").mkdir(exist_ok=True)
    fb.set_child_subreaper()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    key = ensure_client_key(root / "client")
    hosts, kh = start(root, args.sshd, key)
    env = db.snapshot(root, "HEAD", "now")
    rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    results: dict = {"started": dt.datetime.now(dt.timezone.utc).isoformat(), "args": vars(args),
                     "versions": {**fb.versions(Path("/tmp/fleet-bench-peers")), "fleetctl_under_test": rev},
                     "load1_start": os.getloadavg()[0], "scenarios": []}
    bench = fb.Bench(root=root, hosts=hosts, poll_s=0, sshd_pids={h.proc.pid for h in hosts})
    filt = [s.strip() for s in args.tools.split(",") if s.strip()]
    try:
        for n in sizes:
            inv, floor = inventories(root, hosts, key, kh, n)
            if not filt or any(f in "deploy, no change" for f in filt):
                setup_deploy(root, inv, env, log)
            ts = [t for t in tools(root, inv, floor, n, env) if not filt or any(f in t.name for f in filt)]
            results["scenarios"].append(fb.run_scenario(bench, f"scale@{n}", ts, args.repeats, root, log))
    finally:
        for h in hosts:
            h.stop()
    results["finished"] = dt.datetime.now(dt.timezone.utc).isoformat()
    results["load1_end"] = os.getloadavg()[0]
    out = Path(args.json_out) if args.json_out else root / "results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    table = per_host(results)
    print(table)
    out.with_suffix(".txt").write_text(table + "\n")
    print(f"\nresults: {out}")
    return 0


def _play(root: Path) -> Path:
    play = root / "toy.yaml"
    play.write_text(db.PLAY)
    return play


if __name__ == "__main__":
    sys.exit(main())
