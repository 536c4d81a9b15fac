"""``fleetctl facts`` warns of a venv whose installed fp4_kernels the login user cannot replace, with
the line ``pip_install``'s preflight refuses the host with (fleetctl/facts/venv_locks.py). Operator
trial: a local host with ``ansible_user`` (then ignored) deployed as root into fltestok's venv,
leaving ``fp4_kernels/`` and its dist-info owned by root; reached over SSH as fltestok, ``facts``
said ok with no warning, and ``deploy --plan`` refused the host. Real sshd test host logging in
as a dedicated user, a real venv of that user's, root-owned installed files in it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import fleetctl, write_inventory

pytestmark = pytest.mark.sshd


def test_facts_warn_of_installed_files_the_login_cannot_replace(sshd_farm, tmp_path):
    h = sshd_farm.start("lockedkern", shell="bash")  # logs in as a dedicated (non-root) test user
    write_fake_nvidia_smi(h.bin_dir, [H200])
    venv = Path(h.home) / f"venv-{os.getpid()}"
    try:
        subprocess.run(["runuser", "-u", h.user, "--", "/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)],
                       check=True, cwd="/", capture_output=True)
        site = next(venv.glob("lib/python3*/site-packages"))
        inv = write_inventory(tmp_path / "inv.yaml", {"g": {"k": {
            **h.inventory_vars(sshd_farm.known_hosts), "venv": str(venv), "workdir": str(tmp_path / "w")}}})

        def warnings() -> list[str]:
            res = fleetctl("-i", str(inv), "facts", "--hosts", "k", "--json", home=tmp_path)
            # exit 1: facts fail a host a deploy refuses (here also for the venv's missing torch)
            assert res.returncode == 1 and res.stdout, res.stderr[-3000:]
            return [w for w in json.loads(res.stdout)["k"].get("warnings") or [] if "a folder of the installed" in w]

        # what a deploy run as root leaves: the package and its dist-info, root's (0755)
        pkg, info = site / "fp4_kernels", site / "fp4_kernels-0.1.0.dist-info"
        for folder in (pkg, pkg / "lib", info):
            folder.mkdir()
        (pkg / "__init__.py").write_text("")
        (pkg / "lib" / "x.so").write_text("")
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fp4_kernels\nVersion: 0.1.0\n")
        (info / "RECORD").write_text("fp4_kernels/__init__.py,,0\nfp4_kernels/lib/x.so,,0\n"
                                     "fp4_kernels-0.1.0.dist-info/METADATA,,\nfp4_kernels-0.1.0.dist-info/RECORD,,\n")
        got = warnings()
        want = (f"warning: {pkg}, a folder of the installed fp4_kernels, is owned by root and not writable by "
                f"{h.user} (and 2 more of its folders): pip must remove it to replace fp4_kernels, and would fail in "
                f"the middle of the install (Permission denied), leaving its stash (~...) behind; fix: sudo chown -R "
                f"{h.user} {pkg} {info}, or deploy as root (ansible_user); a deploy refuses this host until it is "
                f"fixed")
        assert got == [want], got
        subprocess.run(["chown", "-R", h.user, str(pkg), str(info)], check=True)  # the fix the line gives
        assert warnings() == []
    finally:
        subprocess.run(["rm", "-rf", str(venv)], check=False)
