"""The install fleetctl runs with uv repairs a damaged install: a real ``uv venv``, real uv.

uv's default link mode on Linux hard-links installed files from its cache (uv's docs,
``--link-mode``), so truncating an installed file truncates the cached unpack too; a later
``--force-reinstall`` linked the damaged file again (a truncated ``_C*.so``: "Bus error" on every
verify). fleetctl's uv argv (:func:`fleetctl.tasks.pip_install.install_argv`) must re-read the wheel
and give the venv its own copies.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from fleetctl.tasks.pip_install import PipInstallArgs, install_argv
from tests.support.hostvenv import make_venv, site_packages, uv
from tests.support.tiny_ext import write_wheel

BODY = "X = 1\n" * 500  # 3000 bytes


def test_a_uv_reinstall_repairs_a_file_damaged_through_uvs_hardlinked_cache(tmp_path):
    venv = Path(make_venv(tmp_path / "venv", "uv", torch=False))
    python = str(venv / "bin" / "python3")
    wheel = str(write_wheel(tmp_path / "wheels", "toyk", "0.1", {"toyk/__init__.py": BODY}))
    env = {**os.environ, "UV_CACHE_DIR": str(tmp_path / "uv-cache"), "UV_NO_CONFIG": "1"}
    installed = site_packages(venv) / "toyk" / "__init__.py"
    # the venv as the operator had it: installed by uv with its defaults (hard links into uv's cache)
    subprocess.run([uv(), "pip", "install", "-q", "--python", python, "--no-deps", wheel], check=True, env=env)
    assert installed.stat().st_nlink == 2  # the cached unpack and the venv share the file
    args = PipInstallArgs(wheel=wheel)
    for _ in range(2):  # the damage uv's own link made, then damage after fleetctl's own install
        os.truncate(installed, 1000)
        subprocess.run(install_argv("uv", python, uv(), wheel, args), check=True, env=env, capture_output=True)
        assert installed.read_text() == BODY, f"{installed} is {installed.stat().st_size} bytes after the reinstall"
        assert installed.stat().st_nlink == 1  # the venv's own copy: damaging it damages no cache
