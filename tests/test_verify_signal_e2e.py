"""A verify whose interpreter a real SIGBUS kills says so: the signal, the exit status that told
it, and what it usually means for an installed extension (a mapped file truncated while in use).

Real sshd test host (the command is sshd's own child, so sshd reports the signal as the channel's
exit-signal, unnamed for SIGBUS, which faulthandler's line names) and a local host (Python's subprocess: -7),
each with a real venv holding a package whose import maps a file, truncates it and reads it, as a
``.so`` truncated under a running process does (signal(7): SIGBUS).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.hostvenv import make_venv, site_packages

pytestmark = pytest.mark.sshd

#: An import that dies of a real SIGBUS: a mapped page whose file was truncated under it.
TOYBUS = """\
import mmap, os, tempfile
fd, path = tempfile.mkstemp()
os.write(fd, b"x" * mmap.PAGESIZE * 2)
mapped = mmap.mmap(fd, mmap.PAGESIZE * 2)
os.ftruncate(fd, 0)
os.unlink(path)
mapped[mmap.PAGESIZE]  # SIGBUS
"""

PLAY = """\
name: verify only
hosts: all
tasks:
  - name: Verify toybus
    verify: {package: toybus, needs_torch: false, device: cpu, smoke: false}
"""


def test_a_verify_killed_by_sigbus_names_the_signal_and_the_likely_cause(sshd_farm, tmp_path):
    h = sshd_farm.start("busy")
    venv = make_venv(tmp_path / "venv", "uv", torch=False)
    pkg = site_packages(Path(venv)) / "toybus"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(TOYBUS)
    play = tmp_path / "play.yaml"
    play.write_text(PLAY)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {
        "busy": {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work"), "venv": venv},
        "here": {"ansible_connection": "local", "workdir": str(tmp_path / "work-local"), "venv": venv}}})
    dep = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
    assert dep.returncode == 1, dep.stdout[-3000:] + dep.stderr[-3000:]
    hosts = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]
    # over SSH the signal is sshd's exit-signal, which OpenSSH sends unnamed for SIGBUS (not one of
    # RFC 4254's): Python's faulthandler line names it; locally, Python's subprocess (-7)
    for name, how in (("busy", "signal 7, named by Python's faulthandler"), ("here", "signal 7")):
        verify = [t for t in hosts[name]["tasks"] if t["action"] == "verify"][0]
        assert verify["status"] == "failed", verify
        assert verify["msg"].startswith(f"verify toybus: the verify interpreter died of SIGBUS ({how}) "), verify["msg"]
        assert "is probably truncated or damaged, or was replaced while in use" in verify["msg"], verify["msg"]
