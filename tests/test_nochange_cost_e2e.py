"""What a deploy that changes nothing costs each host, counted, not timed (issue 27): over real sshd
test hosts with real venvs and the toy CUDA package of tests/data/toy_kernels, a second and third
deploy of unchanged hosts send NO file (0 bytes of payload) and make ONE exec per host (the run's
first command: folders, login, deploy lock, facts and every probe the planners ask, answered
ahead), counted by fleetctl's own SSH connection (``execs``, ``puts``, ``put_bytes`` in the run
record's ``connection``), and the facts answer their version commands from the host's kept answers
(``probe_cache``) and the install state from the answer the host kept (``probes.answered_ahead``
``kept``); ``--plan`` and ``--dry-run`` of the same hosts agree that nothing is to do. A host whose
install was removed by hand still gets reinstalled (the kept answer is checked against the venv's
files in this run).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from fleetctl.reporting.plan_table import plan_rows
from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.test_agreement_e2e import PLAY, _plan_hosts, actions
from tests.test_deploy_e2e import make_host_venv

pytestmark = pytest.mark.sshd

#: Execs a host of an unchanged deploy may make: the first command, nothing else.
MAX_EXECS = 1
#: Seconds the hosts keep no answer about a file changed more recently (RACY_S of the host scripts).
RACY_S = 2.0


def test_a_no_change_deploy_sends_nothing_and_makes_one_round_trip_per_host(sshd_farm, tmp_path):
    src = tmp_path / "toy"
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
    play = tmp_path / "play.yaml"
    play.write_text(textwrap.dedent(PLAY.format(src=src)))
    hosts = {}
    for name in ("n1", "n2", "n3"):
        h = sshd_farm.start(name)
        write_fake_nvidia_smi(h.bin_dir, [H200])
        hosts[name] = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / name),
                       "venv": make_host_venv(tmp_path / f"venv-{name}")}
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": hosts})

    def deploy(*extra: str):
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "fleet", "--playbook", str(play), "--json", *extra,
                       home=tmp_path, timeout_s=900)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        return res

    deploy()  # installs: every host sends its sources and the wheel
    first = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]
    assert all(r["connection"]["put_bytes"] > 0 and r["connection"]["execs"] > MAX_EXECS for r in first.values())
    # an answer about a file changed in the last 2 s is never kept by the host (coarse file system
    # timestamps: facts.py's RACY_S, session_start.py's): wait that out once, so that the second
    # unchanged deploy answers from what the first kept, and the removal below is read through it
    time.sleep(RACY_S)

    for i in range(2):  # the second learns which probes the planners ask; both change nothing
        deploy()
        record = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]
        assert {h: r["status"] for h, r in record.items()} == {h: "ok" for h in hosts}
        assert not [t for r in record.values() for t in r["tasks"] if t["status"] == "changed"]
        wire = {h: {k: r["connection"].get(k, 0) for k in ("execs", "puts", "put_bytes")} for h, r in record.items()}
        assert wire == {h: {"execs": MAX_EXECS, "puts": 0, "put_bytes": 0} for h in hosts}, wire
        # the facts' version commands answered from the host's kept answers (nvcc, the compilers...)
        assert all(r["facts"]["probe_cache"]["hits"] > 0 for r in record.values()), [
            r["facts"].get("probe_cache") for r in record.values()]
        if i == 1:  # and the install state from the answer the host kept (probe-answers.json)
            events = [json.loads(ln) for ln in (last_run(tmp_path) / "events.jsonl").read_text().splitlines()]
            kept = {e["host"]: e["kept"] for e in events if e["event"] == "probes.answered_ahead"}
            assert kept == {h: 1 for h in hosts}, kept

    plan = actions(_plan_hosts(json.loads(deploy("--plan").stdout)))
    dry = actions(json.loads(deploy("--dry-run").stdout)["hosts"])
    assert plan == dry == {h: "skip" for h in hosts}, (plan, dry)

    # the installed package removed by hand: the answers ahead are this run's, so it is reinstalled
    venv = hosts["n2"]["venv"]
    subprocess.run([f"{venv}/bin/python3", "-m", "pip", "uninstall", "-y", "-q", "toyfp4"], check=True,
                   capture_output=True)
    # n3's installed files cut short and deleted by hand: --plan and the install line say so (new-user
    # trial: "reinstall" with an empty cause column, and "installed ..." alone)
    purelib = subprocess.run([f"{hosts['n3']['venv']}/bin/python3", "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (record_file,) = Path(purelib).glob("toyfp4-*.dist-info/RECORD")
    cut, gone = "toyfp4/__init__.py", f"{record_file.parent.name}/WHEEL"  # both listed in the RECORD, with sizes
    assert f"\n{cut}," in "\n" + record_file.read_text() and f"\n{gone}," in record_file.read_text()
    os.truncate(Path(purelib, cut), 0)
    Path(purelib, gone).unlink()
    why = "installed files differ from their RECORD ("
    shown = fleetctl("-i", str(inv), "deploy", "--hosts", "fleet", "--playbook", str(play), "--plan", home=tmp_path,
                     env={"COLUMNS": "300"})
    rows = {ln.split()[0]: " ".join(ln.split()) for ln in shown.stdout.replace("│", " ").splitlines()
            if ln.split()[:1] in (["n2"], ["n3"]) and "reinstall" in ln}
    assert "nothing installed" in rows["n2"] and why in rows["n3"] and f"{cut} is 0 bytes, RECORD says" in rows["n3"] \
        and f"{gone} missing" in rows["n3"], shown.stdout
    deploy()
    record = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]
    changed = {h: [t["action"] for t in r["tasks"] if t["status"] == "changed"] for h, r in record.items()}
    assert changed == {"n1": [], "n2": ["pip_install"], "n3": ["pip_install"]}, changed
    line = next(t["msg"] for t in record["n3"]["tasks"] if t["action"] == "pip_install")
    assert why in line and f"{gone} missing" in line, line
    assert re.match(r"installed toyfp4-\S+ \(pip\): replaced what was there: installed files differ", line), line
    # what happened, not the plan's reason: "installed ... (pip): nothing installed" read as a contradiction
    line = next(t["msg"] for t in record["n2"]["tasks"] if t["action"] == "pip_install")
    assert re.match(r"installed toyfp4-\S+ \(pip\): none was installed before; torch \S+ unchanged", line), line
    assert record["n1"]["connection"]["execs"] == MAX_EXECS and record["n2"]["connection"]["execs"] > MAX_EXECS
    assert plan_rows(record)["n1"]["status"] == "ok"


def test_a_wheel_cut_short_in_the_build_folder_is_rebuilt_not_installed(sshd_farm, tmp_path):
    """A build stamp is trusted for the wheel it describes only (new-user trial: a wheel truncated
    in a host's build folder was reused, and installed, until --force): the stamp records the
    wheel's size and mtime as written, the stamps probe stats the wheel in the same command (an
    unchanged deploy stays ONE exec), and a wheel of another size is rebuilt, with the line saying
    why; the install takes the rebuilt wheel."""
    src = tmp_path / "toy"
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
    play = tmp_path / "play.yaml"
    play.write_text(textwrap.dedent(PLAY.format(src=src)))
    h = sshd_farm.start("n1")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    venv = make_host_venv(tmp_path / "venv-n1")
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": {"n1": {**h.inventory_vars(sshd_farm.known_hosts),
                                                                   "workdir": str(tmp_path / "work" / "n1"),
                                                                   "venv": venv}}})

    def deploy(*extra: str, as_json: bool = True):
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "fleet", "--playbook", str(play),
                       *(["--json"] if as_json else []), *extra, home=tmp_path, timeout_s=900)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        return res

    def tasks():
        record = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["n1"]
        return {t["action"]: t for t in record["tasks"]}, record

    deploy()
    wheel = Path(tasks()[0]["build_wheel"]["data"]["wheel"])
    good = wheel.read_bytes()
    stamp = json.loads((wheel.parent / ".fleetctl-build.json").read_text())
    assert (stamp["size_bytes"], stamp["mtime_s"]) == (len(good), int(wheel.stat().st_mtime)), stamp

    with open(wheel, "r+b") as fh:  # cut short, and the package removed by hand: the install needs it
        fh.truncate(len(good) // 2)
    subprocess.run([f"{venv}/bin/python3", "-m", "pip", "uninstall", "-y", "-q", "toyfp4"], check=True,
                   capture_output=True)
    shutil.rmtree(tmp_path / "cache" / "fleetctl" / "wheels")  # no class wheel on the controller: rebuilt here
    why = (f"{wheel.name} is {len(good) // 2} bytes, its build stamp says {len(good)} (truncated or replaced since "
           "it was built)")
    planned = _plan_hosts(json.loads(deploy("--plan").stdout))
    assert actions(planned) == {"n1": "build"}
    (build,) = plan_rows(planned)["n1"]["builds"]
    assert build["msg"].endswith(f"(rebuilt: {why})"), build
    shown = deploy("--plan", as_json=False)  # the operator's plan says why
    assert why in shown.stdout + shown.stderr, shown.stdout[-2000:] + shown.stderr[-2000:]
    done = deploy(as_json=False)
    assert why in done.stdout + done.stderr, done.stdout[-2000:] + done.stderr[-2000:]
    ran, _ = tasks()
    assert ran["build_wheel"]["status"] == "changed" and ran["build_wheel"]["msg"].endswith(f"(rebuilt: {why})")
    assert ran["pip_install"]["status"] == "changed"
    assert wheel.stat().st_size == len(good)
    subprocess.run([f"{venv}/bin/python3", "-c", "import toyfp4"], check=True, capture_output=True)

    deploy()  # unchanged again: the new stamp holds, one exec
    ran, record = tasks()
    assert ran["build_wheel"]["status"] == "ok" and "unchanged inputs" in ran["build_wheel"]["msg"]
    assert record["connection"]["execs"] == MAX_EXECS, record["connection"]


def test_a_wheel_changed_in_place_with_its_size_and_mtime_kept_fails_once_naming_why_then_is_rebuilt(
        sshd_farm, tmp_path):
    """Bytes of a built wheel changed in place with its size and mtime kept (bit rot, ``cp -p`` or
    ``rsync -t`` over it; new-user trial) pass the cheap reuse check; when pip then fails on it, the
    install names the wheel and both sha256s instead of pip's bare unzip error, and removes its
    build stamp, so the next deploy rebuilds it and installs (it failed the same way until --force)."""
    src = tmp_path / "toy"
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
    play = tmp_path / "play.yaml"
    play.write_text(textwrap.dedent(PLAY.format(src=src)))
    h = sshd_farm.start("n1")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    venv = make_host_venv(tmp_path / "venv-n1")
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": {"n1": {**h.inventory_vars(sshd_farm.known_hosts),
                                                                   "workdir": str(tmp_path / "work" / "n1"),
                                                                   "venv": venv}}})

    def deploy(rc: int = 0):
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "fleet", "--playbook", str(play), home=tmp_path,
                       timeout_s=900)
        assert res.returncode == rc, res.stdout[-2000:] + res.stderr[-2000:]
        return res

    def tasks():
        record = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["n1"]
        return {t["action"]: t for t in record["tasks"]}

    deploy()
    wheel = Path(tasks()["build_wheel"]["data"]["wheel"])
    good = wheel.read_bytes()
    st = wheel.stat()
    bad = bytearray(good)
    mid = len(bad) // 2
    bad[mid:mid + 64] = b"\xff" * 64  # inside the zip's compressed data: pip's unzip fails
    wheel.write_bytes(bytes(bad))
    os.utime(wheel, ns=(st.st_atime_ns, st.st_mtime_ns))
    subprocess.run([f"{venv}/bin/python3", "-m", "pip", "uninstall", "-y", "-q", "toyfp4"], check=True,
                   capture_output=True)
    shutil.rmtree(tmp_path / "cache" / "fleetctl" / "wheels")

    failed = deploy(rc=1)
    out = failed.stdout + failed.stderr
    assert f"wheel {wheel} changed since it was built" in out, out[-3000:]
    assert "its build stamp was removed, so the next run rebuilds it" in out, out[-3000:]
    assert tasks()["pip_install"]["status"] == "failed"
    assert not (wheel.parent / ".fleetctl-build.json").exists()

    deploy()  # rebuilt and installed, no --force
    ran = tasks()
    assert ran["build_wheel"]["status"] == "changed" and ran["pip_install"]["status"] == "changed", ran
    assert wheel.read_bytes() != bytes(bad)
    subprocess.run([f"{venv}/bin/python3", "-c", "import toyfp4"], check=True, capture_output=True)


def test_a_stamp_of_an_older_fleetctl_is_upgraded_once_its_wheel_hashes_right_then_no_deploy_reads_the_wheel(
        sshd_farm, tmp_path):
    """A build stamp written before fleetctl recorded the wheel's size and mtime (new-user trial: an
    older fleetctl's stamps had their wheels hashed on every run until rebuilt): the first deploy
    hashes the wheel once, finds the stamp's sha256 and rewrites the stamp with the size and mtime
    the wheel has; the next no-change deploy stats it and reads no wheel, neither asked by the
    planner nor answered ahead by the first command (a one-off question is not predicted). Observed
    on the host: ``sha256sum`` there is a wrapper logging its arguments before running the real one."""
    src = tmp_path / "toy"
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
    play = tmp_path / "play.yaml"
    play.write_text(textwrap.dedent(PLAY.format(src=src)))
    h = sshd_farm.start("n1")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    calls = tmp_path / "sha256sum.calls"
    wrapper = h.bin_dir / "sha256sum"
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {calls}\nexec /usr/bin/sha256sum "$@"\n')
    wrapper.chmod(0o755)
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": {"n1": {**h.inventory_vars(sshd_farm.known_hosts),
                                                                   "workdir": str(tmp_path / "work" / "n1"),
                                                                   "venv": make_host_venv(tmp_path / "venv-n1")}}})

    def deploy() -> dict:
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "fleet", "--playbook", str(play), "--json",
                       home=tmp_path, timeout_s=900)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        return {t["action"]: t for t in json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["n1"]["tasks"]}

    def wheel_hashes() -> list[str]:
        lines = calls.read_text().splitlines() if calls.exists() else []
        calls.unlink(missing_ok=True)
        return [ln for ln in lines if ".whl" in ln]

    wheel = Path(deploy()["build_wheel"]["data"]["wheel"])
    stamp_file = wheel.parent / ".fleetctl-build.json"
    old = {k: v for k, v in json.loads(stamp_file.read_text()).items() if k not in ("size_bytes", "mtime_s")}
    stamp_file.write_text(json.dumps(old, sort_keys=True))  # as an older fleetctl wrote it
    wheel_hashes()

    ran = deploy()
    assert ran["build_wheel"]["status"] == "ok" and "unchanged inputs" in ran["build_wheel"]["msg"], ran["build_wheel"]
    assert wheel_hashes() == [str(wheel)]  # hashed once: its sha256 is the stamp's
    upgraded = json.loads(stamp_file.read_text())
    st = wheel.stat()
    assert (upgraded["size_bytes"], upgraded["mtime_s"]) == (st.st_size, int(st.st_mtime)), upgraded
    assert {k: v for k, v in upgraded.items() if k not in ("size_bytes", "mtime_s")} == old

    for _ in range(2):  # the next no-change deploys read no wheel
        ran = deploy()
        assert ran["build_wheel"]["status"] == "ok" and ran["pip_install"]["status"] == "ok", ran
        assert wheel_hashes() == []
