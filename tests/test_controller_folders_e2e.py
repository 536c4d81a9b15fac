"""The controller folders a run writes (fleetctl/util/ctlfolders.py). A fresh operator's trial:
``XDG_CACHE_HOME`` pointing at a file let ``--plan`` pass and the deploy build for 78 s, then fail
with ``NotADirectoryError`` ("a fault of fleetctl"), nothing installed. Now such a folder is refused
before any host is touched (one line naming the variable and the path, exit 2), and a cache write
that still fails after a build is a warning: the run goes on with the wheel in hand. Real sshd test
hosts, real venvs, the toy CUDA package (tests/data/toy_kernels)."""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.test_agreement_e2e import PLAY
from tests.test_deploy_e2e import make_host_venv
from tests.test_wheel_cache_e2e import one_class_fleet

pytestmark = pytest.mark.sshd


def test_a_cache_or_state_folder_that_cannot_be_written_is_refused_before_any_host_is_touched(sshd_farm, tmp_path):
    h = sshd_farm.start("n1")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    work = tmp_path / "work"
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": {"n1": {**h.inventory_vars(sshd_farm.known_hosts),
                                                                   "workdir": str(work)}}})
    a_file = tmp_path / "not-a-folder"
    a_file.write_text("x")
    for variable, value in (("XDG_CACHE_HOME", a_file), ("FLEETCTL_HOME", a_file / "state"),
                            ("XDG_STATE_HOME", a_file)):
        env = {variable: str(value), **({"FLEETCTL_HOME": None} if variable == "XDG_STATE_HOME" else {})}
        for mode in (["--plan"], []):
            res = fleetctl("-i", str(inv), "deploy", "--hosts", "fleet", *mode, home=tmp_path, env=env, timeout_s=120)
            assert res.returncode == 2, (variable, mode, res.stdout[-2000:], res.stderr[-2000:])
            lines = res.stderr.strip().splitlines()
            assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
            assert lines[0].startswith(f"fleetctl: {variable}") or f" {variable}: " in lines[0], lines[0]
            assert f"{a_file} is not a folder" in lines[0] and f"point {variable} at" in lines[0], lines[0]
    assert not work.exists()  # no host was touched


SPOIL = """\
  - name: The controller's wheel cache becomes a file while the class builds (a disk filled, a cleaner ran)
    command: {{argv: ["/bin/sh", "-c", "mkdir -p -- \\"${{0%/*}}\\" && rm -rf -- \\"$0\\" && : > \\"$0\\"", "{wheels}"]}}
"""


def test_a_cache_write_that_fails_after_the_build_warns_and_the_class_gets_the_wheel_in_hand(sshd_farm, tmp_path):
    src = tmp_path / "toy"
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
    wheels = tmp_path / "cache" / "fleetctl" / "wheels"
    text = textwrap.dedent(PLAY.format(src=src))
    head, tail = text.split("  - name: Build the toy wheel\n")
    play = tmp_path / "play.yaml"
    play.write_text(head + SPOIL.format(wheels=wheels) + "  - name: Build the toy wheel\n" + tail)
    inv, venvs = one_class_fleet(sshd_farm, tmp_path)  # one arch class: n1 builds, n2 is given the wheel
    import tempfile

    before = set(Path(tempfile.gettempdir()).glob("fleetctl-wheels-*"))
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "fleet", "--playbook", str(play), home=tmp_path,
                   timeout_s=900)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert set(Path(tempfile.gettempdir()).glob("fleetctl-wheels-*")) == before  # the run's copy is gone
    assert wheels.is_file()  # the cache stayed unusable for the whole run
    assert f"the controller's wheel cache {wheels}/" in out and "the wheel is kept for this run only" in out, out[-3000:]
    assert "a fault of fleetctl" not in out
    ran = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]
    tasks = {h: {t["action"]: t for t in r["tasks"]} for h, r in ran.items()}
    assert tasks["n2"]["build_wheel"]["data"]["pushed_from"] == "n1", tasks["n2"]["build_wheel"]
    for name in ("n1", "n2"):  # each venv holds the one wheel built
        show = subprocess.run([f"{venvs[name]}/bin/python3", "-m", "pip", "show", "toyfp4"],
                              capture_output=True, text=True)
        assert show.returncode == 0, (name, show.stdout, show.stderr)


def test_the_sass_check_reads_a_temporary_copy_when_the_cache_cannot_hold_one(sshd_farm, tmp_path):
    """The host has no cuobjdump: the wheel is fetched to the controller to list its SASS, into
    ``<cache>/sass-check/``, which became a file during the build. The check still runs (from a
    temporary copy, removed after it) and says what it found: the toy wheel holds no SASS."""
    import tempfile

    src = tmp_path / "toy"
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
    sass = tmp_path / "cache" / "fleetctl" / "sass-check"
    text = textwrap.dedent(PLAY.format(src=src)).replace("check_sass: false", "check_sass: true")
    head, tail = text.split("  - name: Build the toy wheel\n")
    play = tmp_path / "play.yaml"
    play.write_text(head + SPOIL.format(wheels=sass) + "  - name: Build the toy wheel\n" + tail)
    h = sshd_farm.start("n1")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": {"n1": {
        **h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work"),
        "venv": make_host_venv(tmp_path / "venv")}}})
    before = set(Path(tempfile.gettempdir()).glob("fleetctl-sass-*"))
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "fleet", "--playbook", str(play), home=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out[-3000:]
    build = next(t for t in json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["n1"]["tasks"]
                 if t["action"] == "build_wheel")
    assert build["msg"].startswith("SASS check (on the controller): toyfp4-0.1.0-py3-none-any.whl lacks sm_90a"), build
    assert f"the controller cannot make {sass}/" in out and "checked from a temporary copy" in out, out[-3000:]
    assert "a fault of fleetctl" not in out
    assert set(Path(tempfile.gettempdir()).glob("fleetctl-sass-*")) == before  # the copy is gone


def test_a_full_wheel_cache_warns_its_builder_which_keeps_its_wheel_and_its_receivers_are_told_why(sshd_farm,
                                                                                                    tmp_path):
    """Finding 4 of a fresh operator's trial: ``XDG_CACHE_HOME`` on a full tmpfs failed the builder
    ("built, but cannot fetch the wheel for the class: ... No space left on device"), the receiver
    that cannot build "took over" as if the builder were lost and failed its own preflight, and the
    next ``--plan`` found the builder's stamp gone. The controller's disk is no host's fault: the
    builder keeps (installs) its wheel with a warning naming the cache, its free space and
    ``XDG_CACHE_HOME``; the receiver is given the wheel from a folder of this run, and when that
    folder (``TMPDIR``) is full too, it fails naming the controller's cache. A real full tmpfs, two
    sshd hosts of one class (n2 lacks a build requirement: it can only receive), the toy package."""
    from tests.support.tiny_ext import fill, site_packages, tmpfs
    from tests.test_agreement_e2e import _plan_hosts, actions

    src = tmp_path / "toy"
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
    backend = src / "toy_backend.py"  # a 64 KiB wheel (stored, not compressed): more than the tmpfs below holds
    backend.write_text(backend.read_text().replace('NAME + "/__init__.py": init,',
                                                   'NAME + "/__init__.py": init, NAME + "/pad.txt": "x" * 65536,'))
    play = tmp_path / "play.yaml"
    play.write_text(textwrap.dedent(PLAY.format(src=src)).replace("required_build_packages: []",
                                                                  "required_build_packages: [toyneed]"))
    inv, venvs = one_class_fleet(sshd_farm, tmp_path)
    (site_packages(venvs["n1"]) / "toyneed.py").write_text("")  # only n1 can build
    cache = tmp_path / "cache"

    def deploy(*extra: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, dict]:
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "fleet", "--playbook", str(play), *extra, home=tmp_path,
                       env=env, timeout_s=600)
        ran = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"] if "--plan" not in extra else {}
        return res, {h: {t["action"]: t for t in r["tasks"]} for h, r in ran.items()}

    with tmpfs(cache, "1m"):
        fill(cache)
        res, tasks = deploy()
        out = res.stdout + res.stderr
        assert res.returncode == 0, out[-4000:]
        wheels = cache / "fleetctl" / "wheels"
        assert f"the controller's wheel cache {wheels}/" in out and "No space left on device" in out, out[-3000:]
        assert f"XDG_CACHE_HOME={cache}" in out and "free there" in out, out[-3000:]
        assert tasks["n1"]["build_wheel"]["status"] == "changed", tasks["n1"]["build_wheel"]
        assert tasks["n2"]["build_wheel"]["data"]["pushed_from"] == "n1", tasks["n2"]["build_wheel"]
        assert "builder was lost" not in out and "build requirements missing" not in out, out[-3000:]
        plan, _ = deploy("--plan", "--json")
        assert plan.returncode == 0, plan.stdout[-2000:] + plan.stderr[-2000:]
        assert actions(_plan_hosts(json.loads(plan.stdout))) == {"n1": "skip", "n2": "skip"}, plan.stdout[-2000:]

        # this run's own folder cannot hold the wheel either (a file of 4 bytes fits: Python's
        # tempfile takes TMPDIR only where it can write one)
        with tmpfs(tmp_path / "tmp", "32k") as tmp:
            res, tasks = deploy("--force", env={"TMPDIR": str(tmp)})
        out = res.stdout + res.stderr
        assert res.returncode == 1, out[-4000:]
        assert tasks["n1"]["build_wheel"]["status"] == "changed", tasks["n1"]["build_wheel"]
        assert tasks["n1"]["pip_install"]["status"] in ("changed", "ok"), tasks["n1"]
        msg = tasks["n2"]["build_wheel"]["msg"]
        assert msg.startswith(f"the class's wheel could not be stored in the controller's cache ({wheels}/"), msg
        assert "No space left on device" in msg and "builder was lost" not in msg and "requirements missing" not in msg, msg
    for name in ("n1", "n2"):  # nothing built was lost: each venv holds the toy wheel
        show = subprocess.run([f"{venvs[name]}/bin/python3", "-m", "pip", "show", "toyfp4"],
                              capture_output=True, text=True)
        assert show.returncode == 0, (name, show.stdout, show.stderr)
