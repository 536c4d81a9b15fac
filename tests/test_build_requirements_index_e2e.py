"""Build requirements come from the index the site configured: the venv's pip installs them when
the venv has pip, even with uv on the host's PATH (uv reads no pip.conf: uv's docs,
"Configuration files"), and a failed install names the network's cause, not the front end's last
generic line.

Fresh operator's trial: ``deploy -e install_build_requirements=true`` on a host whose mirror is set
in ``/etc/pip.conf``: fleetctl used uv, which went to pypi.org and failed ``client error
(Connect)``; the host log had ``invalid peer certificate: UnknownIssuer``. Here: a real sshd host
with its own HOME holding a real pip.conf (pip's docs, "Configuration": the user file
``~/.config/pip/pip.conf``) whose index is a loopback port nothing listens on, a real venv with
pip, the real uv on the host's PATH, the CMake project of tests/data/ext asking for a build
requirement the venv lacks.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.sshd import free_port
from tests.support.tiny_ext import cmake_ext, tool_venv, write_wheel

pytestmark = pytest.mark.sshd

PLAY = """\
name: build with the requirements installed
hosts: all
tasks:
  - name: upload
    copy: {{src: {src}, dest: "{{{{ workdir }}}}/src"}}
  - name: build
    build_wheel:
      src: "{{{{ workdir }}}}/src"
      out_dir: "{{{{ workdir }}}}/wheels"
      no_build_isolation: true
      install_build_requirements: true
      max_jobs: 1
"""

INSTALL = """\
name: install a wheel with its dependencies
hosts: all
tasks:
  - name: install
    pip_install: {wheel: "{{ wheel }}", no_deps: false}
"""


def test_build_requirements_use_the_venvs_pip_and_the_sites_pip_conf_and_name_the_index_fault(sshd_farm, tmp_path):
    host = sshd_farm.start("mirror")
    write_fake_nvidia_smi(host.bin_dir, [H200])
    uv = Path(sys.executable).with_name("uv")  # the real uv, on the host's PATH
    assert uv.is_file(), uv
    os.symlink(uv, host.bin_dir / "uv")
    port = free_port()  # the site's mirror, unreachable: pip's own error shows
    conf = host.home / ".config" / "pip" / "pip.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text(f"[global]\nindex-url = http://127.0.0.1:{port}/simple\nretries = 1\ntimeout = 5\n")
    venv = tool_venv(tmp_path / "venv")
    src = cmake_ext(tmp_path / "cmake-ext")
    pyproject = src / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('requires = ["scikit-build-core>=0.10"]',
                                                       'requires = ["scikit-build-core>=0.10", "tiny-codegen>=1.0"]'))
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"mirror": {
        **host.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work"), "venv": venv}}})
    play = tmp_path / "play.yaml"
    play.write_text(PLAY.format(src=src))
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    facts = record["hosts"]["mirror"]["facts"]
    assert (facts.get("uv") or {}).get("path") == str(host.bin_dir / "uv"), facts.get("uv")  # uv was there
    build = [t for t in record["hosts"]["mirror"]["tasks"] if t["action"] == "build_wheel"][0]
    msg = build["msg"]
    assert build["status"] == "failed", build
    assert msg.startswith("installing the build requirements tiny-codegen>=1.0 failed (pip): "), msg
    assert "ERROR: Could not find a version that satisfies the requirement tiny-codegen>=1.0" in msg, msg
    assert "(the package index could not be read: Failed to establish a new connection: " in msg, msg
    assert "Connection refused" in msg, msg
    log = (last_run(tmp_path) / "logs" / "mirror.log").read_text()
    assert f"Looking in indexes: http://127.0.0.1:{port}/simple" in log, log[-3000:]  # pip read the site's pip.conf
    # a local wheel whose dependencies come from the index: the same rule (pip_install, no_deps: false)
    wheel = write_wheel(tmp_path / "wheels", "tiny_needs_codegen", "0.1.0", {"tiny_needs_codegen/__init__.py": ""},
                        requires=("tiny-codegen>=1.0",))
    install = tmp_path / "install.yaml"
    install.write_text(INSTALL)
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(install), "-e", f"wheel={wheel}",
                   home=tmp_path)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    msg = [t for t in record["hosts"]["mirror"]["tasks"] if t["action"] == "pip_install"][0]["msg"]
    assert msg.startswith("install failed (pip): ERROR: Could not find a version that satisfies the requirement "
                          "tiny-codegen>=1.0"), msg
    assert "Connection refused" in msg, msg
