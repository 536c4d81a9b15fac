"""A venv on a read-only file system (a read-only bind mount of it, as a read-only NFS export or a
squashfs image shared by a rack) deployed under a second inventory name (no record of its own):
when the venv already holds exactly the wheel the deploy would install (same sha256, installed
before it became read-only) the host is ok with nothing changed, in ``--plan`` and the deploy
alike (operator trial: the host failed with ``... is on a read-only file system: pip cannot
install there``); a read-only venv that lacks the install is still refused with that line while
planning. ``--plan``, ``--dry-run`` and the deploy give one verdict. Real sshd on loopback, real venvs, a real build of the toy package."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import textwrap

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.test_agreement_e2e import PLAY
from tests.test_deploy_e2e import make_host_venv

pytestmark = pytest.mark.sshd

REFUSED = "is on a read-only file system: pip cannot install there"
#: The toy play and a verify of what is installed (it imports the package: reads, never writes).
VERIFIED = PLAY + """\
  - name: Verify the toy package
    verify: {{package: toyfp4, smoke: false, needs_torch: false, device: cpu}}
"""


@contextlib.contextmanager
def read_only(*folders: str):
    """Each folder bind-mounted read-only onto itself (``mount --bind``, ``remount,bind,ro``:
    EROFS for every write there, root's too), unmounted on the way out; seen by the sshd test
    hosts, which run in this mount namespace."""
    mounted = []
    try:
        for folder in folders:
            subprocess.run(["mount", "--bind", folder, folder], check=True)
            mounted.append(folder)
            subprocess.run(["mount", "-o", "remount,bind,ro", folder], check=True)
        yield
    finally:
        for folder in reversed(mounted):
            subprocess.run(["umount", "-l", folder], check=False)


def _tree(folder: str) -> dict[str, tuple[int, int]]:
    """path -> (size, mtime_ns) of every file under ``folder``: what "nothing changed" compares."""
    out = subprocess.run(["find", folder, "-type", "f", "-printf", "%p %s %T@\\n"], check=True,
                         capture_output=True, text=True).stdout
    return {ln.rsplit(" ", 2)[0]: tuple(ln.rsplit(" ", 2)[1:]) for ln in out.splitlines()}


def test_a_read_only_venv_holding_the_wheel_is_ok_and_one_lacking_it_is_refused(sshd_farm, tmp_path):
    src = tmp_path / "toy"
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
    play = tmp_path / "play.yaml"
    play.write_text(textwrap.dedent(VERIFIED.format(src=src)))
    h = sshd_farm.start("hb")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    venv, bare = make_host_venv(tmp_path / "venv"), make_host_venv(tmp_path / "bare")
    hosts = {name: {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / name),
                    "venv": v} for name, v in (("hb", venv), ("t2", venv), ("t3", bare))}
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": hosts})

    def deploy(pattern: str, *extra: str):
        return fleetctl("-i", str(inv), "deploy", "--hosts", pattern, "--playbook", str(play), *extra,
                        home=tmp_path, timeout_s=600)

    first = deploy("hb")  # installed while the venv was writable
    assert first.returncode == 0, first.stderr[-3000:]
    before = _tree(venv)
    with read_only(venv, bare):
        plan = deploy("t2:t3", "--plan", "--json")
        dry = deploy("t2:t3", "--dry-run")
        real = deploy("t2:t3")
        record = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]
    assert plan.returncode == dry.returncode == real.returncode == 1, plan.stderr[-3000:] + real.stderr[-3000:]
    out = dry.stdout + dry.stderr  # the dry run's verdicts are the plan's and the deploy's
    assert "Install the toy wheel: toyfp4-0.1.0-py3-none-any.whl already installed (same sha256)" in out, out[-3000:]
    assert REFUSED in out, out[-3000:]
    rows = json.loads(plan.stdout)
    install = next(t for t in rows["t2"]["tasks"] if t["action"] == "pip_install")
    assert install["decision"] == {"action": "skip"}, install
    tasks = {t["action"]: t for t in record["t2"]["tasks"]}
    assert not record["t2"].get("error") and {t["status"] for t in tasks.values()} <= {"ok", "changed"}, record["t2"]
    assert tasks["pip_install"]["status"] == "ok", tasks["pip_install"]
    assert "already installed (same sha256)" in tasks["pip_install"]["msg"], tasks["pip_install"]
    assert tasks["verify"]["status"] == "ok", tasks["verify"]  # verify ran, and found the install good
    assert _tree(venv) == before  # nothing changed in the venv
    # a read-only venv that needs the install is still refused while planning, with the old line
    refused = next(t for t in rows["t3"]["tasks"] if t["action"] == "pip_install")
    assert refused["decision"]["action"] == "fail", refused
    t3 = {t["action"]: t for t in record["t3"]["tasks"]}
    assert REFUSED in t3["pip_install"]["msg"] and t3["pip_install"]["msg"].startswith("preflight: "), t3
    assert t3["pip_install"]["status"] == "failed", t3
