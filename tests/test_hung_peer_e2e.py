"""One hung host never delays the others that need nothing of it (README, "Dead hosts delay no one").

A fresh operator's trial: ``verify --hosts good,hang``, hang's nvidia-smi hung until the GPU probe's
timeout; good (2.5 s alone) took 21.8 s, its first task 20 s after its facts, with no word of why. A
host ``nonvcc`` took 20.4 s to fail a check found while planning. The 20 s settle grace is for hosts
whose arch class is settled with their group (they build, or may serve or receive a wheel); a host of
a run that builds nothing, and a host refused while planning, are in no class and wait for no one. A
host that does wait for its group says for whom and why (``class.waiting``). Real sshd test hosts on
loopback, a real venv, a fake nvidia-smi that never answers."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import textwrap
from pathlib import Path

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.test_agreement_e2e import PLAY
from tests.test_deploy_e2e import make_host_venv

pytestmark = pytest.mark.sshd

#: Seconds hang's facts wait for its nvidia-smi (its ``gpu_probe_timeout_s``): what a host waiting
#: for it would lose, well above what good takes alone (its facts import torch, and so does its
#: verify: ~5 s on 2 busy cores, where 6 s left good finishing after hang in 2 runs of the suite).
HUNG_S = 8


def _events(run_dir: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run_dir / "events.jsonl").read_text().splitlines()]


def _at(events: list[dict], name: str, host: str) -> dt.datetime:
    stamp = next(e["timestamp"] for e in events if e["event"] == name and e.get("host") == host)
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def test_verify_and_refused_hosts_never_wait_for_a_hung_host_and_a_builder_says_whom_it_waits_for(
        sshd_farm, tmp_path):
    hosts = {}
    for name in ("good", "nonvcc", "hang"):
        h = sshd_farm.start(name)
        write_fake_nvidia_smi(h.bin_dir, [H200])
        hosts[name] = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / name),
                       "venv": make_host_venv(tmp_path / f"venv-{name}"), "verify_device": "cpu",
                       "gpu_probe_timeout_s": HUNG_S}
        if name == "hang":  # a GPU off the bus: nvidia-smi never answers
            (h.bin_dir / "nvidia-smi").write_text("#!/bin/sh\nexec sleep 60\n")
    hosts["nonvcc"]["cuda_home"] = str(tmp_path / "no-cuda-here")  # refused while planning: no nvcc
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": hosts})

    # verify builds nothing: good needs no arch class, so nothing of hang's
    fleetctl("-i", str(inv), "verify", "--hosts", "good,hang", home=tmp_path, timeout_s=300)
    run_dir = last_run(tmp_path)
    ran = json.loads((run_dir / "run.json").read_text())["hosts"]
    events = _events(run_dir)
    assert ran["hang"]["duration_s"] >= HUNG_S, ran["hang"]  # its facts waited out the probe timeout
    # good's own work began while hang still waited for its GPUs (good's facts and verify each import
    # torch: on 2 busy cores good may end after hang, which is no wait)
    assert _at(events, "task.started", "good") < _at(events, "host.finished", "hang"), ran["good"]
    started = _at(events, "task.started", "good") - _at(events, "facts.gathered", "good")
    assert started.total_seconds() < HUNG_S / 2, started  # its first task right after its facts
    assert not [e for e in events if e["event"] == "class.waiting"], events

    # a build's plan: nonvcc is refused while planning and goes at once; good builds its class, so it
    # waits for its group, and says for whom and why
    src = tmp_path / "toy"
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
    play = tmp_path / "play.yaml"
    play.write_text(textwrap.dedent(PLAY.format(src=src)))
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "fleet", "--playbook", str(play), "--plan",
                   home=tmp_path, timeout_s=300)
    run_dir = last_run(tmp_path)
    ran = json.loads((run_dir / "run.json").read_text())["hosts"]
    events = _events(run_dir)
    assert ran["nonvcc"]["status"] == "failed" and "no-cuda-here" in ran["nonvcc"]["error"], ran["nonvcc"]
    assert _at(events, "host.finished", "nonvcc") < _at(events, "host.finished", "hang"), res.stdout[-2000:]
    waits = [e for e in events if e["event"] == "class.waiting"]
    # on a miss, when each host connected, gathered facts and ended: a host still connecting when
    # good planned is not waited for by design (fleetctl/engine/runner.py), a race the test assumes away
    timeline = [(e["timestamp"], e["event"], e.get("host")) for e in events if e["event"] in
                ("connection.opened", "facts.gathered", "class.waiting", "host.finished")]
    assert [e["host"] for e in waits] == ["good"] and "hang" in waits[0]["waiting_for"], (waits, timeline)
    assert "arch class" in waits[0]["reason"], waits
    assert _at(events, "host.finished", "good") > _at(events, "host.finished", "hang")  # it did wait for it
    log = (run_dir / "logs" / "good.log").read_text()
    assert "waiting for hang" in log, log


def test_a_run_that_installs_nothing_never_waits_for_a_hung_twin(sshd_farm, tmp_path):
    """An operator's trial: gpu03 and gpu04, two inventory names of one machine (two login users),
    gpu04's nvidia-smi hung. ``verify --hosts gpu03,gpu04`` held gpu03 until gpu04 planned (the
    machine-twins rule settled them together), and so did a playbook of commands: twins settle
    together only when their plans build or install into a folder they may share."""
    from tests.support.sshd import ensure_user

    h = sshd_farm.start("twinhost")
    other = ensure_user("bash")  # gpu04 logs in as another user of the same machine
    real = write_fake_nvidia_smi(tmp_path / "gpu-bin", [H200])
    (h.bin_dir / "nvidia-smi").write_text(  # for gpu04's user only: a GPU off the bus, never answers
        f'#!/bin/sh\n[ "$(id -un)" = "{other}" ] && exec sleep 60\nexec {real} "$@"\n')
    (h.bin_dir / "nvidia-smi").chmod(0o755)
    good = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / "gpu03"),
            "venv": make_host_venv(tmp_path / "venv-gpu03"), "verify_device": "cpu", "gpu_probe_timeout_s": HUNG_S}
    work04 = sshd_farm.root / f"w04-{tmp_path.name}"  # gpu04's user's workdir (tmp_path is root's own)
    work04.mkdir()
    shutil.chown(work04, other, other)
    hung = {**good, "ansible_user": other, "workdir": str(work04)}
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": {"gpu03": good, "gpu04": hung}})
    play = tmp_path / "cmds.yaml"
    play.write_text("name: commands\nhosts: all\ntasks:\n  - name: say hi\n    command: echo hi\n")

    try:
        for args in (("verify",), ("deploy", "--playbook", str(play))):
            res = fleetctl("-i", str(inv), *args, "--hosts", "gpu03,gpu04", home=tmp_path, timeout_s=300)
            run_dir = last_run(tmp_path)
            ran = json.loads((run_dir / "run.json").read_text())["hosts"]
            events = _events(run_dir)
            assert ran["gpu04"]["duration_s"] >= HUNG_S, ran["gpu04"]  # its facts waited out the probe timeout
            assert ran["gpu03"]["tasks"], (args, ran["gpu03"], res.stdout[-2000:])  # its tasks ran (verify's
            # fails: fp4_kernels is not installed here)
            started = _at(events, "task.started", "gpu03") - _at(events, "facts.gathered", "gpu03")
            assert started.total_seconds() < HUNG_S / 2, (args, started)  # its first task right after its facts
            assert not [e for e in events if e["event"] == "class.waiting"], (args, events)
    finally:
        shutil.rmtree(work04, ignore_errors=True)
