"""Ctrl-C (a real SIGINT to a real ``fleetctl deploy``) while an arch class's builder builds, and
what the next runs make of it. Real sshd test hosts, real venvs, the toy CUDA package
(tests/data/toy_kernels) whose build backend here waits, once it has started, while a hold file
exists: the signal arrives during the build, whatever the machine's speed, with no sleep.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.fake_gpu import H200, B200, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.test_deploy_e2e import make_host_venv
from tests.test_faults_e2e import wait_for

pytestmark = pytest.mark.sshd

PLAY = """\
name: toy kernels
hosts: all
tasks:
  - name: Upload the toy sources
    copy: {{src: {src}, dest: "{{{{ workdir }}}}/src/toy"}}
  - name: Build the toy wheel
    build_wheel: {{src: "{{{{ workdir }}}}/src/toy", out_dir: "{{{{ workdir }}}}/wheels", required_build_packages: [],
                  check_sass: false, tool: pip, min_free_disk_mib: 1, env: {{TOY_HOLD: "{{{{ toy_hold }}}}"}}}}
    register: build
  - name: Install the toy wheel
    pip_install: {{wheel: "{{{{ build.data.wheel }}}}"}}
"""

#: Put at the start of the toy backend's build_wheel: while the host's hold file (its ``toy_hold`` var)
#: exists, say so once and wait.
HOLD = '''
    import time
    hold = os.environ.get("TOY_HOLD")
    if hold and os.path.exists(hold):
        print("TOY BUILD HELD", flush=True)
        while os.path.exists(hold):
            time.sleep(0.05)
'''


class HeldFleet:
    """A fleet of sshd test hosts (``gpus``: name -> its GPUs, in inventory order), the play above,
    and per host a hold file that makes its toy build wait once started."""

    def __init__(self, farm, tmp_path: Path, gpus: dict[str, list]) -> None:
        self.home = tmp_path
        src = tmp_path / "toy"
        shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
        backend = src / "toy_backend.py"
        text = backend.read_text()
        head = "def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):\n"
        assert head in text
        backend.write_text(text.replace(head, head + HOLD.lstrip("\n")))
        self.play = tmp_path / "play.yaml"
        self.play.write_text(textwrap.dedent(PLAY.format(src=src)))
        hosts = {}
        for name, cards in gpus.items():
            h = farm.start(name)
            write_fake_nvidia_smi(h.bin_dir, cards)
            hosts[name] = {**h.inventory_vars(farm.known_hosts), "workdir": str(tmp_path / "work" / name),
                           "venv": make_host_venv(tmp_path / f"venv-{name}"), "toy_hold": str(self.hold(name))}
        self.inv = write_inventory(tmp_path / "inv.yaml", {"fleet": hosts})

    def hold(self, host: str) -> Path:
        return self.home / f"hold-{host}"

    def argv(self, *extra: str) -> list[str]:
        return ["-i", str(self.inv), "deploy", "--hosts", "fleet", "--playbook", str(self.play), *extra]

    def deploy(self, *extra: str, rc: int = 0) -> tuple[str, dict]:
        res = fleetctl(*self.argv(*extra), home=self.home, timeout_s=900)
        assert res.returncode == rc, res.stdout[-3000:] + res.stderr[-3000:]
        record = json.loads((last_run(self.home) / "run.json").read_text())
        return res.stdout + res.stderr, record

    def start_held(self, *extra: str, builder: str) -> subprocess.Popen:
        """A deploy running, ``builder``'s toy build held (its hold file made, the build waiting)."""
        self.hold(builder).touch()
        env = {**os.environ, "FLEETCTL_HOME": str(self.home), "XDG_CACHE_HOME": str(self.home / "cache")}
        proc = subprocess.Popen([sys.executable, "-m", "fleetctl", *self.argv(*extra)], cwd=REPO, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert wait_for(lambda: self._held(builder) or proc.poll() is not None, 300)
            if proc.poll() is not None:  # it ended before the build was held
                out, err = proc.communicate(timeout=60)
                pytest.fail(f"the deploy ended before {builder}'s build was held:\n{out[-4000:]}\n{err[-2000:]}")
        except BaseException:
            self.end(proc, builder, signal.SIGKILL)
            raise
        return proc

    def end(self, proc: subprocess.Popen, builder: str, sig: int | None = None) -> tuple[int, str]:
        """Send ``sig`` (when given), let the held build go on, and wait: ``(exit status, output)``."""
        try:
            if sig is not None:
                proc.send_signal(sig)
            self.hold(builder).unlink(missing_ok=True)  # the held build (if it still runs on the host) goes on
            out, err = proc.communicate(timeout=300)
        finally:
            self.hold(builder).unlink(missing_ok=True)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        return proc.returncode, out + err

    def interrupted(self, *extra: str, builder: str) -> dict:
        """A deploy sent SIGINT (as Ctrl-C) while ``builder``'s toy build is held; its run record."""
        rc, out = self.end(self.start_held(*extra, builder=builder), builder, signal.SIGINT)
        assert rc == 130, out[-3000:]
        return json.loads((last_run(self.home) / "run.json").read_text())

    def _held(self, host: str) -> bool:
        return any(b"TOY BUILD HELD" in log.read_bytes() for log in (self.home / "runs").glob(f"*/logs/{host}.log"))


def builds(record: dict) -> dict[str, dict]:
    return {h: next(t for t in r["tasks"] if t["action"] == "build_wheel") for h, r in record["hosts"].items()
            if any(t["action"] == "build_wheel" for t in r["tasks"])}


def test_after_a_forced_build_is_interrupted_its_builder_builds_again_never_pushed_its_own_wheel(sshd_farm, tmp_path):
    """New-user trial: Ctrl-C during ``deploy --force``, then a plain deploy reported "pushed ...
    (built once for this arch class on n1)" to n1 itself. The forced build had emptied n1's build
    folder (a fresh folder for the build) and was stopped; the controller's cache still held the
    class's wheel from n1's earlier build, so n1, now without a wheel, was made a receiver of its
    own wheel. A host is never pushed a wheel it built: it builds again."""
    fleet = HeldFleet(sshd_farm, tmp_path, {"n1": [H200], "n2": [H200]})
    _, first = fleet.deploy()
    assert builds(first)["n1"]["data"]["decision"]["action"] == "build"
    assert builds(first)["n2"]["data"]["pushed_from"] == "n1"

    stopped = fleet.interrupted("--force", builder="n1")
    assert stopped["status"] == "interrupted"

    out, again = fleet.deploy()
    b = builds(again)
    assert "(built once for this arch class on n1)" not in b["n1"]["msg"], b["n1"]
    assert b["n1"]["data"]["decision"]["action"] == "build" and b["n1"]["status"] == "changed", b["n1"]
    assert b["n2"]["status"] == "ok", b["n2"]  # n2 kept its wheel: reused
    assert "n1 | note: this host built its arch class's wheel and no longer holds it" in out, out[-3000:]
    subprocess.run([f"{again['inventory']['hosts']['n1']['venv']}/bin/python3", "-c", "import toyfp4"], check=True,
                   capture_output=True)



def test_an_interrupted_deploy_counts_its_unfinished_hosts_interrupted_not_failed_and_retries_them(sshd_farm, tmp_path):
    """New-user trial: a deploy stopped by Ctrl-C was listed by ``fleetctl runs`` with its hosts
    "failed". Interrupted is its own state: in the run record (each host's status), in ``fleetctl
    runs`` and ``runs --json`` (``interrupted``, apart from ``failed`` and ``not started``) and in
    ``runs show`` (under ``interrupted:``, not ``failures:``). A host the run never reached (it
    waited for a fork) is recorded ``not started``. The retry set is every host that did not
    finish, interrupted or never started; a host that ended ok (n4, the first ``--serial`` batch)
    is not deployed again."""
    fleet = HeldFleet(sshd_farm, tmp_path, {"n4": [B200], "n1": [H200], "n2": [H200], "n3": [H200]})
    # batch 1: n4 alone, ends ok; batch 2: n1 builds the H200 class (held), n2 waits for its wheel,
    # n3 waits for a fork (--forks 2) that the interrupted run never frees
    record = fleet.interrupted("--serial", "1,3", "--forks", "2", builder="n1")
    status = {h: o["status"] for h, o in record["hosts"].items()}
    assert status == {"n4": "ok", "n1": "interrupted", "n2": "interrupted", "n3": "not started"}, status
    assert "interrupted" in record["hosts"]["n3"]["error"], record["hosts"]["n3"]

    listed = fleetctl("runs", "--json", home=tmp_path)
    (row,) = [r for r in json.loads(listed.stdout) if r["run_id"] == record["run_id"]]
    assert (row["status"], row["hosts"], row["failed"], row["interrupted"], row["not_started"]) == (
        "interrupted", 4, 0, 2, 1), row
    line = next(ln for ln in fleetctl("runs", home=tmp_path).stdout.splitlines() if ln.startswith(record["run_id"]))
    assert "0 failed" in line and "2 interrupted" in line and "1 not started" in line, line
    shown = fleetctl("runs", "show", record["run_id"], home=tmp_path).stdout
    assert "failures:" not in shown, shown
    assert "interrupted:" in shown and "n[1-2] (2)" in shown, shown

    retry = fleetctl(*fleet.argv("--retry-failed", "--plan", "--json"), home=tmp_path)
    assert sorted(json.loads(retry.stdout)) == ["n1", "n2", "n3"], retry.stdout[-2000:] + retry.stderr[-2000:]
