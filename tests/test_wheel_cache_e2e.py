"""The controller's wheel cache (an arch class's wheel, built once and pushed to the class's other
members) trusts a wheel only while it is the wheel its record describes, checked as a host's build
stamp is (fleetctl/engine/wheelcache.py): its size and mtime every run, its sha256 when the mtime
differs (a match rewrites the record's mtime: hashed once) and before it is first pushed in a run.
A wheel that fails is never pushed, and the run says why in one line naming the wheel (new-user
trial: a truncated cached wheel was dropped and rebuilt silently). Real sshd test hosts, real venvs,
the toy CUDA package (tests/data/toy_kernels)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.test_agreement_e2e import PLAY
from tests.test_deploy_e2e import make_host_venv

pytestmark = pytest.mark.sshd


def one_class_fleet(sshd_farm, tmp_path: Path) -> tuple[Path, dict]:
    """Two sshd hosts n1, n2 of one arch class (an H200 each, a real venv each, own workdirs):
    n1 builds, n2 is pushed the wheel. Returns (the inventory's path, {host: venv})."""
    hosts, venvs = {}, {}
    for name in ("n1", "n2"):
        h = sshd_farm.start(name)
        write_fake_nvidia_smi(h.bin_dir, [H200])
        venvs[name] = make_host_venv(tmp_path / f"venv-{name}")
        hosts[name] = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / name),
                       "venv": venvs[name]}
    return write_inventory(tmp_path / "inv.yaml", {"fleet": hosts}), venvs


def test_a_cached_wheel_that_is_not_what_its_record_says_is_never_pushed_and_the_run_says_why(sshd_farm, tmp_path):
    src = tmp_path / "toy"
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
    play = tmp_path / "play.yaml"
    play.write_text(textwrap.dedent(PLAY.format(src=src)))
    inv, venvs = one_class_fleet(sshd_farm, tmp_path)

    def deploy() -> tuple[str, dict]:
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "fleet", "--playbook", str(play), home=tmp_path,
                       timeout_s=900)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        record = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]
        return res.stdout + res.stderr, {h: {t["action"]: t for t in r["tasks"]} for h, r in record.items()}

    _, first = deploy()
    assert first["n2"]["build_wheel"]["data"]["pushed_from"] == "n1"
    (folder,) = (tmp_path / "cache" / "fleetctl" / "wheels").iterdir()
    rec = json.loads((folder / "record.json").read_text())
    cached = folder / rec["name"]
    good = cached.read_bytes()
    assert rec["sha256"] == first["n1"]["build_wheel"]["data"]["sha256"]

    def lacks_the_wheel(host: str) -> None:  # a member that must be pushed the class's wheel again
        shutil.rmtree(tmp_path / "work" / host / "wheels")

    # cut short: its size says so; never pushed (n1, which holds the wheel, serves it), one line why
    with open(cached, "r+b") as fh:
        fh.truncate(len(good) // 2)
    lacks_the_wheel("n2")
    why = (f"{rec['name']} in the controller's wheel cache ({folder}) is {len(good) // 2} bytes, its record says "
           f"{len(good)} (truncated or replaced since it was cached)")
    out, ran = deploy()
    assert out.count(why) == 1, out[-3000:]
    assert ran["n2"]["build_wheel"]["data"]["decision"]["action"] == "push", ran["n2"]["build_wheel"]
    assert ran["n1"]["build_wheel"]["data"]["decision"]["action"] == "serve", ran["n1"]["build_wheel"]
    assert cached.read_bytes() == good  # the served wheel replaced it

    # bytes changed in place, size and mtime kept (bit rot, cp -p): its sha256, checked before the
    # first push of the run, says so; not pushed, the class's wheel is built again
    st = cached.stat()
    bad = bytearray(good)
    bad[len(bad) // 2:len(bad) // 2 + 16] = b"\xff" * 16
    cached.write_bytes(bytes(bad))
    os.utime(cached, ns=(st.st_atime_ns, st.st_mtime_ns))
    lacks_the_wheel("n2")
    out, ran = deploy()
    rec = json.loads((folder / "record.json").read_text())
    assert f"{rec['name']} in the controller's wheel cache ({folder}): its sha256 is " in out, out[-3000:]
    assert f"its record says {rec['sha256'][:12]}... (changed since it was cached)" in out, out[-3000:]
    assert ran["n2"]["build_wheel"]["status"] == "changed" and "built" in ran["n2"]["build_wheel"]["msg"]
    assert ran["n2"]["pip_install"]["status"] in ("ok", "changed")
    assert cached.read_bytes() != bytes(bad)
    subprocess.run([f"{venvs['n2']}/bin/python3", "-c", "import toyfp4"], check=True, capture_output=True)

    # touched only (same bytes, a new mtime): hashed once, its record takes the new mtime, pushed
    # (to n1: n2 built the cached wheel)
    later = int(cached.stat().st_mtime) + 100
    os.utime(cached, (later, later))
    lacks_the_wheel("n1")
    out, ran = deploy()
    assert "controller's wheel cache" not in out, out[-3000:]
    assert ran["n1"]["build_wheel"]["data"]["decision"]["action"] == "push"
    assert ran["n1"]["build_wheel"]["data"]["pushed_from"] == "n2"
    rec = json.loads((folder / "record.json").read_text())
    assert (rec["size_bytes"], rec["mtime_s"]) == (len(cached.read_bytes()), later), rec


def test_build_each_says_every_host_built_its_own(sshd_farm, tmp_path):
    """A fresh operator's trial: ``--force --build each`` on two hosts of one class, both logged
    ``built ...``, and the class line said ``(built on ntcsh)``. With --build each every member
    builds its own wheel: the class line says so, in --plan and after the deploy."""
    src = tmp_path / "toy"
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
    play = tmp_path / "play.yaml"
    play.write_text(textwrap.dedent(PLAY.format(src=src)))
    hosts = {}
    for name in ("n1", "n2"):  # one arch class
        h = sshd_farm.start(name)
        write_fake_nvidia_smi(h.bin_dir, [H200])
        hosts[name] = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / name),
                       "venv": make_host_venv(tmp_path / f"venv-{name}")}
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": hosts})
    base = ("-i", str(inv), "deploy", "--hosts", "fleet", "--playbook", str(play), "--force", "--build", "each")
    plan = fleetctl(*base, "--plan", home=tmp_path)
    assert plan.returncode == 0 and "n[1-2]" in plan.stdout and "(build on each host)" in plan.stdout, plan.stdout
    res = fleetctl(*base, home=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    ran = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]
    built = {h: next(t["msg"] for t in r["tasks"] if t["action"] == "build_wheel") for h, r in ran.items()}
    assert all(msg.startswith("built ") for msg in built.values()), built
    classes = res.stdout.split("build classes:\n")[1].splitlines()
    assert classes[0].strip().startswith("n[1-2] ") and classes[0].endswith("(built on each host)"), classes


def test_a_host_whose_class_wheel_is_cached_does_not_wait_for_a_host_with_a_hung_nvidia_smi(sshd_farm, tmp_path):
    """A fresh operator's trial: ``deploy --hosts nzsh,nbash``, nzsh's nvidia-smi hung; nbash, up
    to date, had its facts at 10:18:15 and its first task at 10:18:35 (the group's settle grace).
    A host whose every build reuses its wheel or is given the class's wheel from the controller's
    cache needs nobody: it goes on at once (README: dead hosts delay no one)."""
    src = tmp_path / "toy"
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
    play = tmp_path / "play.yaml"
    play.write_text(textwrap.dedent(PLAY.format(src=src)))
    hosts, bins = {}, {}
    for name in ("n1", "n2"):  # one arch class
        h = sshd_farm.start(name)
        bins[name] = h.bin_dir
        write_fake_nvidia_smi(h.bin_dir, [H200])
        hosts[name] = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / name),
                       "venv": make_host_venv(tmp_path / f"venv-{name}"), "gpu_probe_timeout_s": 8}
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": hosts})
    base = ("-i", str(inv), "deploy", "--hosts", "fleet", "--playbook", str(play))
    first = fleetctl(*base, home=tmp_path)
    assert first.returncode == 0, first.stdout[-3000:]
    hung = Path(bins["n2"]) / "nvidia-smi"
    hung.write_text("#!/bin/sh\nexec sleep 30\n")  # a GPU off the bus: nvidia-smi never answers
    res = fleetctl(*base, home=tmp_path)
    ran = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]
    assert ran["n1"]["status"] == "ok", res.stdout[-3000:]
    assert ran["n2"]["duration_s"] >= 8, ran["n2"]  # its facts waited out the probe timeout
    assert ran["n1"]["duration_s"] < 5, (ran["n1"]["duration_s"], res.stdout[-3000:])
