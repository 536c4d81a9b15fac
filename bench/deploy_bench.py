#!/usr/bin/env python3
"""Deploys on real sshd test hosts: a deploy that changes nothing against ``fleetctl run``, and
8 hosts of 2 arch classes built once per class against ``--build each``.

Run by hand, not by CI (bench/README.md has the exact commands and the numbers measured):

    .venv/bin/python bench/deploy_bench.py --hosts 8,50 --repeats 3 --before 339b2b2 \\
        --json-out bench/results/deploy_bench.json

The playbook is the toy CUDA package of the end-to-end tests (``tests/data/toy_kernels``: one
real nvcc compile per arch, seconds) in fp4-kernels.yaml's shape: copy the sources, build_wheel
(once per arch class), pip_install, verify. Every host is its own OpenSSH sshd on 127.0.0.1
(``tests/support/sshd.py``) with a fake ``nvidia-smi`` (an H200, or a B200 for the
second class) and its own real venv (torch through a .pth file, as tests/test_deploy_e2e.py).

Scenarios (``--only``):

``nochange``  on each size of ``--hosts``, after one untimed deploy that installs: ``fleetctl
              run -- true`` (the reference the issue names), the bare asyncssh floor, ``fleetctl
              deploy --skip-tags verify`` (nothing changes), and on the smallest size the same
              deploy with verify (its cost is the difference: it imports torch by design); with
              ``--before REV`` the same deploys and run of that fleetctl too.
``classes``   8 hosts, 4 per arch class (SM 9.0 and 10.0), from nothing (host folders, the
              controller's wheel cache and probe memory wiped before each run): a deploy (one
              build per class, the wheel pushed to the others) against ``--build each``; the
              number of builds each made is checked (2 and 8).

Method and columns as bench/fleet_bench.py (one process per tool run, interleaved rounds after
one warm-up round, medians); the fleetctl under test is a byte-compiled ``git archive`` of HEAD.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

import fleet_bench as fb  # noqa: E402
import yaml  # noqa: E402

from tests.support.fake_gpu import B200, H200, write_fake_nvidia_smi  # noqa: E402
from tests.support.sshd import ensure_client_key, start_sshd  # noqa: E402

TOY = REPO / "tests" / "data" / "toy_kernels"
PLAY = f"""\
name: toy kernels
hosts: all
vars:
  src_dir: "{{{{ workdir }}}}/src/toy"
tasks:
  - name: Upload the toy sources
    copy: {{src: {TOY}, dest: "{{{{ src_dir }}}}"}}
    tags: [build]
  - name: Build the toy wheel for {{{{ facts.build.torch_cuda_arch_list }}}}
    build_wheel: {{src: "{{{{ src_dir }}}}", out_dir: "{{{{ workdir }}}}/wheels", required_build_packages: [],
                  check_sass: false, tool: pip, min_free_disk_mib: 1}}
    register: build
    tags: [build]
  - name: Install the toy wheel
    pip_install: {{wheel: "{{{{ build.data.wheel }}}}"}}
    tags: [install]
  - name: Verify toyfp4
    verify: {{package: toyfp4, symbols: [hello, build_info], smoke: false}}
    tags: [verify]
"""


def make_venv(path: Path) -> str:
    """A host venv: its own site-packages first, the controller's (torch) through a .pth file."""
    if not (path / "bin" / "python3").exists():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        purelib = subprocess.run([str(path / "bin" / "python3"), "-c",
                                  "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 check=True, capture_output=True, text=True).stdout.strip()
        import sysconfig

        Path(purelib, "_controller_site.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return str(path)


def start_hosts(root: Path, n: int, key: Path) -> tuple[list, Path]:
    hosts = []
    for i in range(n):
        name = f"g{i + 1:02d}"
        home = root / "hosts" / name / "home"
        home.mkdir(parents=True, exist_ok=True)
        h = start_sshd(name, root / "hosts" / name, key, env={"HOME": str(home)}, extra_config="MaxStartups 100")
        hosts.append(h)
    kh = root / "known_hosts"
    kh.write_text("".join(h.known_hosts_line + "\n" for h in hosts))
    return hosts, kh


def inventory(root: Path, hosts: list, kh: Path, n: int, tag: str, gpus=lambda i: [H200]) -> Path:
    entries = {}
    for i, h in enumerate(hosts[:n]):
        write_fake_nvidia_smi(h.bin_dir, gpus(i))
        entries[h.name] = {**h.inventory_vars(kh), "venv": make_venv(root / "venvs" / h.name),
                         "verify_device": "cpu"}  # fake GPUs, a CPU torch: verify on the CPU
    doc = {"all": {"children": {"bench": {"hosts": entries}}}}
    path = root / f"inv-{tag}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def check_deploy(n: int, want: str | None = "ok"):
    """rc 0, every host ok, and (``want="ok"``) no task changed anything."""
    def check(rc: int, out: str, err: str) -> str | None:
        try:
            doc = json.loads(out)
        except ValueError:
            return f"rc={rc}, no JSON; stderr: {fb._tail(err)}"
        hosts = doc.get("hosts", {})
        bad = {h: r.get("error") for h, r in hosts.items() if r.get("status") != "ok"}
        if rc != 0 or len(hosts) != n or bad:
            return f"rc={rc}, {len(hosts) - len(bad)}/{n} ok; failures: {json.dumps(dict(list(bad.items())[:3]))}"
        if want == "ok":
            changed = {h: [t["name"] for t in r["tasks"] if t["status"] == "changed"] for h, r in hosts.items()}
            changed = {h: c for h, c in changed.items() if c}
            if changed:
                return f"not a no-change deploy: {json.dumps(dict(list(changed.items())[:3]))}"
        return None
    return check


def snapshot(root: Path, rev: str, label: str) -> dict[str, str]:
    dest = fb.export_tree(rev, root / f"fleetctl-{label}")
    return {"PYTHONPATH": str(dest)}


def nochange_tools(root: Path, inv: Path, n: int, envs: dict[str, dict[str, str]], floor_hosts: Path,
                   with_verify: bool) -> list[fb.Tool]:
    play = root / "toy.yaml"
    play.write_text(PLAY)
    tools = []
    for label, env in envs.items():
        base = {**env, "FLEETCTL_HOME": str(root / f"home-{label}"), "XDG_CACHE_HOME": str(root / f"cache-{label}")}
        suffix = "" if label == "now" else f" [{label}]"
        deploy = [str(fb.FLEETCTL), "-i", str(inv), "deploy", "--hosts", "bench", "--playbook", str(play), "--json",
                  "--forks", str(n)]
        tools.append(fb.Tool("fleetctl run" + suffix, [str(fb.FLEETCTL), "-i", str(inv), "run", "--hosts", "bench",
                                                       "--json", "--forks", str(n), "--", "true"],
                             _check_run(n), env=base))
        tools.append(fb.Tool("deploy, no change" + suffix, deploy + ["--skip-tags", "verify"], check_deploy(n),
                             env=base))
        if with_verify:
            tools.append(fb.Tool("deploy, no change, +verify" + suffix, deploy, check_deploy(n), env=base))
    tools.insert(1, fb.Tool("asyncssh floor", [str(fb.VENV_PY), str(REPO / "bench" / "asyncssh_floor.py"),
                                               str(floor_hosts), "--", "true"], lambda rc, o, e: None if rc == 0
                            else f"rc={rc}: {fb._tail(o + e)}"))
    return tools


def _check_run(n: int):
    def check(rc: int, out: str, err: str) -> str | None:
        try:
            doc = json.loads(out)
        except ValueError:
            return f"rc={rc}, no JSON; stderr: {fb._tail(err)}"
        good = sum(1 for r in doc.values() if r.get("rc") == 0)
        return None if rc == 0 and good == n else f"rc={rc}, {good}/{n} ok"
    return check


def floor_inventory(root: Path, hosts: list, key: Path, kh: Path, n: int) -> Path:
    path = root / f"floor-{n}.json"
    path.write_text(json.dumps([{"name": h.name, "host": "127.0.0.1", "port": h.port, "user": h.user,
                                 "key": str(key), "known_hosts": str(kh)} for h in hosts[:n]]))
    return path


def classes_tools(root: Path, inv: Path, hosts: list, env: dict[str, str]) -> list[fb.Tool]:
    play = root / "toy.yaml"
    play.write_text(PLAY)
    names = [h.name for h in hosts[:8]]

    def wipe() -> None:
        for h in hosts[:8]:
            shutil.rmtree(h.root / "home" / ".fleetctl", ignore_errors=True)
        shutil.rmtree(root / "cache-classes", ignore_errors=True)

    def builds(expected: int):
        def check(rc: int, out: str, err: str) -> str | None:
            bad = check_deploy(8, want=None)(rc, out, err)
            if bad:
                return bad
            doc = json.loads(out)
            built = [h for h, r in doc["hosts"].items() for t in r["tasks"]
                     if t["action"] == "build_wheel" and (t.get("data") or {}).get("decision", {}).get("action") == "build"]
            return None if len(built) == expected else f"{len(built)} builds ({built}), expected {expected}"
        return check

    base = {**env, "FLEETCTL_HOME": str(root / "home-classes"), "XDG_CACHE_HOME": str(root / "cache-classes")}
    argv = [str(fb.FLEETCTL), "-i", str(inv), "deploy", "--hosts", "bench", "--playbook", str(play), "--json",
            "--forks", "8", "--skip-tags", "verify"]
    assert len(names) == 8
    return [fb.Tool("deploy, build once per class", argv, builds(2), env=base, pre=wipe),
            fb.Tool("deploy --build each", argv + ["--build", "each"], builds(8), env=base, pre=wipe)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="8,50")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default="nochange,classes")
    ap.add_argument("--before", default="", help="also measure the fleetctl of this git revision")
    ap.add_argument("--json-out", default="")
    ap.add_argument("--workdir", default="")
    args = ap.parse_args()
    sizes = sorted(int(x) for x in args.hosts.split(",") if x.strip())
    only = {s.strip() for s in args.only.split(",")}
    root = Path(args.workdir or tempfile.mkdtemp(prefix="deploy-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    fb.set_child_subreaper()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    key = ensure_client_key(root / "client")
    need = max(sizes + ([8] if "classes" in only else []))
    log(f"workdir {root}; starting {need} sshd test hosts")
    hosts, kh = start_hosts(root, need, key)
    envs = {"now": snapshot(root, "HEAD", "now")}
    rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    if args.before:
        envs[args.before] = snapshot(root, args.before, "before")
    results: dict = {"started": dt.datetime.now(dt.timezone.utc).isoformat(), "args": vars(args),
                     "versions": {**fb.versions(Path("/tmp/fleet-bench-peers")), "fleetctl_under_test": rev},
                     "scenarios": []}
    bench = fb.Bench(root=root, hosts=hosts, poll_s=0.05, sshd_pids={h.proc.pid for h in hosts})
    try:
        if "nochange" in only:
            for n in sizes:
                inv = inventory(root, hosts, kh, n, f"nochange{n}")
                play = root / "toy.yaml"
                play.write_text(PLAY)
                for label, env in envs.items():  # the untimed deploy that installs (and a second, to learn)
                    for _ in range(2):
                        p = subprocess.run([str(fb.FLEETCTL), "-i", str(inv), "deploy", "--hosts", "bench",
                                            "--playbook", str(play), "--json", "--forks", str(n)],
                                           capture_output=True, text=True, cwd=root,
                                           env={**os.environ, **env, "FLEETCTL_HOME": str(root / f"home-{label}"),
                                                "XDG_CACHE_HOME": str(root / f"cache-{label}")})
                        log(f"   setup deploy [{label}] on {n}: rc={p.returncode}")
                tools = nochange_tools(root, inv, n, envs, floor_inventory(root, hosts, key, kh, n),
                                       with_verify=(n == sizes[0]))
                results["scenarios"].append(fb.run_scenario(bench, f"nochange@{n}", tools, args.repeats, root, log))
        if "classes" in only:
            inv = inventory(root, hosts, kh, 8, "classes", gpus=lambda i: [H200] if i < 4 else [B200])
            results["scenarios"].append(fb.run_scenario(bench, "classes@8", classes_tools(root, inv, hosts, envs["now"]),
                                                        args.repeats, root, log))
    finally:
        for h in hosts:
            h.stop()
    results["finished"] = dt.datetime.now(dt.timezone.utc).isoformat()
    out = Path(args.json_out) if args.json_out else root / "results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(fb.print_tables(results, []))
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
