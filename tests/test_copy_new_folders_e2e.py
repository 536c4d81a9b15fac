"""``fleetctl copy FILE /new/a/b/file`` makes the missing folders as ``mkdir -p`` would, 0777 less
the login's umask (typically 0755), over SFTP, the exec fallback, the local connection and Slurm (sbcast's helper step) alike
(new-user trial: ``/new``, ``a``, ``b`` were made 0700, so another user got ``Permission denied``
on the 0644 file); fleetctl's own folders stay private (0700)."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from tests.support.fleet import fleetctl, write_inventory
from tests.support.slurm import slurm_cluster, slurm_cluster_session  # noqa: F401 (fixtures)
from tests.test_slurm_cli_e2e import cli


def _umask_of(inv: Path, host: str, home: Path) -> int:
    res = fleetctl("-i", str(inv), "run", "--hosts", host, "--json", "--", "sh", "-c", "umask", home=home)
    assert res.returncode == 0, res.stdout + res.stderr
    return int(json.loads(res.stdout)[host]["stdout"].strip(), 8)


@pytest.mark.sshd
@pytest.mark.parametrize("kind", ["sftp", "exec-fallback", "local"])
def test_copy_makes_missing_parents_as_mkdir_p(sshd_farm, tmp_path, kind):
    if kind == "local":
        vars_ = {"ansible_connection": "local"}
    else:
        vars_ = sshd_farm.start(f"mk{kind[:4]}", sftp=kind == "sftp").inventory_vars(sshd_farm.known_hosts)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h": vars_}})
    src = tmp_path / "hello.yaml"
    src.write_text("hello: 1\n")
    src.chmod(0o644)
    base = Path(sshd_farm.root) / f"new-{kind}"  # a folder the login user (maybe a test user) may write in
    base.mkdir(mode=0o777)
    base.chmod(0o777)
    try:
        res = fleetctl("-i", str(inv), "copy", "--hosts", "h", str(src), f"{base}/new/a/b/hello.yaml", home=tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        want = 0o777 & ~_umask_of(inv, "h", tmp_path)
        modes = {p: stat.S_IMODE(os.stat(base / p).st_mode) for p in ("new", "new/a", "new/a/b")}
        assert modes == {p: want for p in modes}, (oct(want), {p: oct(m) for p, m in modes.items()})
        assert stat.S_IMODE(os.stat(base / "new/a/b/hello.yaml").st_mode) == 0o644
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_copy_over_slurm_makes_missing_parents_as_mkdir_p(slurm_cluster, tmp_path):
    src = tmp_path / "hello.yaml"
    src.write_text("hello: 1\n")
    src.chmod(0o644)
    dest = f"{slurm_cluster.local}/new/a/b/hello.yaml"
    res = cli("-i", "slurm:", "copy", "--hosts", "n1", str(src), dest, home=tmp_path, launcher=slurm_cluster.launcher_text)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    umask = os.umask(0)
    os.umask(umask)  # the step's: srun passes its own (SLURM_UMASK), the controller's
    disk = slurm_cluster.node_disk("n1")
    modes = {p: oct(stat.S_IMODE(os.stat(disk / p).st_mode)) for p in ("new", "new/a", "new/a/b")}
    assert modes == {p: oct(0o777 & ~umask) for p in modes}, modes
