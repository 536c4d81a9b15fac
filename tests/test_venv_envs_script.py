"""The host side of staged environments (``playbooks/scripts/venv_envs.py``) on real venvs, made by
uv (PyPI's ``uv``, a test requirement) and by ``python -m venv``: what a stage shares and what it
rewrites, the adoption of the live folder, the atomic switch, pruning, numbering, refusals. The
same script runs over sshd in tests/test_staged_e2e.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fleet import REPO
from tests.support.tiny_ext import fake_torch_files, site_packages, write_wheel

SCRIPT = REPO / "playbooks" / "scripts" / "venv_envs.py"


def uv() -> str:
    found = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    if not os.access(found, os.X_OK):
        pytest.fail("uv missing: pip install -e '.[test]' installs it")
    return found


def envs(*args: str, ok: bool = True) -> dict:
    res = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert (res.returncode == 0) == ok and out["ok"] is ok, res.stdout + res.stderr
    return out


def venv_with_torch(path: Path, wheels: Path, tool: str) -> str:
    if tool == "uv":
        subprocess.run([uv(), "venv", "-q", "--python", sys.executable, str(path)], check=True)
    else:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    whl = write_wheel(wheels, "torch", "2.0.0", fake_torch_files("2.0.0"))
    subprocess.run([uv(), "pip", "install", "-q", "--python", str(path / "bin" / "python3"), str(whl)], check=True)
    # a console script naming its interpreter, and a .pth naming the venv (a path that must move)
    script = path / "bin" / "torchrun"
    script.write_text(f"#!{path}/bin/python3\nimport torch\nprint(torch.__version__)\n")
    script.chmod(0o755)
    (site_packages(str(path)) / "local.pth").write_text(f"{path}/extra\n")
    return str(path)


@pytest.mark.parametrize("tool", ["uv", "venv"])
def test_stage_links_rewrites_and_a_switch_adopts_the_live_folder(tmp_path, tool):
    live = venv_with_torch(tmp_path / "serve", tmp_path / "wheels", tool)
    folder = tmp_path / "envs"
    inode = os.stat(live).st_ino
    before = {p: p.stat().st_mtime_ns for p in Path(live).rglob("*") if p.is_file()}
    st = envs("status", "--venv", live, "--versions", str(folder))
    assert st["kind"] == "dir" and st["adopt_as"] == 1 and st["next"] == 2 and st["same_fs"] is True

    out = envs("stage", "--venv", live, "--versions", str(folder), "--run-id", "r1",
               *(["--uv", uv()] if tool == "uv" else []))
    v2 = folder / "v2"
    assert out["version"] == 2 and out["made_with"] == ("uv venv" if tool == "uv" else "python -m venv")
    assert out["copied_files"] == 0 and out["rewritten_files"] == 2  # the script and the .pth
    # torch's files are the live venv's inodes; the rewritten ones are new and name v2
    assert os.stat(site_packages(str(v2)) / "torch" / "version.py").st_ino == \
        os.stat(site_packages(live) / "torch" / "version.py").st_ino
    assert (v2 / "bin" / "torchrun").read_text().startswith(f"#!{v2}/bin/python3\n")
    assert (site_packages(str(v2)) / "local.pth").read_text() == f"{v2}/extra\n"
    assert subprocess.run([str(v2 / "bin" / "torchrun")], capture_output=True, text=True).stdout == "2.0.0\n"
    assert {p: p.stat().st_mtime_ns for p in Path(live).rglob("*") if p.is_file()} == before  # only read

    sw = envs("switch", "--venv", str(v2), "--to", "staged", "--run-id", "r1")
    assert sw["from"] == 1 and sw["to"] == 2 and sw["adopted"] == 1 and sw["how"] == "exchange"
    assert os.readlink(live) == str(v2) and os.stat(folder / "v1").st_ino == inode  # moved, not copied
    py = subprocess.run([f"{live}/bin/python3", "-c", "import sys, torch; print(sys.prefix, torch.__file__)"],
                        capture_output=True, text=True, check=True).stdout.split()
    assert py[0] == live and py[1].startswith(live + "/")  # the path users run from, through the symlink
    index = json.loads((folder / "envs.json").read_text())
    assert index["versions"]["1"]["state"] == "was-live" and index["versions"]["2"]["state"] == "live"
    assert index["versions"]["1"]["freeze"] == index["versions"]["2"]["freeze"] == ["torch==2.0.0"]


def test_failed_stages_are_cleared_numbers_never_reused_three_kept_and_rollback(tmp_path):
    live = venv_with_torch(tmp_path / "serve", tmp_path / "wheels", "venv")
    folder = str(tmp_path / "envs")

    def nightly(run_id: str, switch: bool = True) -> int:
        n = envs("stage", "--venv", live, "--versions", folder, "--run-id", run_id)["version"]
        if switch:
            envs("switch", "--venv", f"{folder}/v{n}", "--to", "staged", "--run-id", run_id)
        return n

    assert nightly("r1") == 2
    assert nightly("r2", switch=False) == 3  # a failed nightly: v3 stays for the post-mortem
    assert sorted(os.listdir(folder)) == ["envs.json", "v1", "v2", "v3"]
    assert nightly("r3") == 4  # v3 cleared first, its number not reused
    assert sorted(os.listdir(folder)) == ["envs.json", "v1", "v2", "v4"]
    assert nightly("r4") == 5
    assert sorted(os.listdir(folder)) == ["envs.json", "v2", "v4", "v5"]  # the last 3, v1 pruned
    back = envs("switch", "--venv", live, "--to", "previous", "--why", "rollback")
    assert (back["from"], back["to"], os.readlink(live)) == (5, 4, f"{folder}/v4")
    assert envs("switch", "--venv", live, "--to", "previous")["to"] == 5  # previous of v4 is v5 now
    refused = envs("switch", "--venv", live, "--to", "1", ok=False)
    assert refused["error"].startswith(f"no environment v1 in {folder} (there: v2 (was-live), v4 (was-live), v5 (live))")
    disk = json.loads(Path(folder, "envs.json").read_text())["disk"]
    assert set(disk["versions"]) == {"2", "4", "5"} and disk["total_mib"] < sum(
        v["size_mib"] for v in disk["versions"].values())  # shared files counted once


def test_the_prune_keeps_the_version_live_before_the_switch_ranked_by_when_live_not_by_number(tmp_path):
    """Operator trial: after ``rollback --to 1`` a new stage's switch removed v1 (the lowest number),
    the version serving until that switch and the one a rollback goes back to. ``status --to``
    checks a target as the switch does (what the planner asks, so --plan agrees)."""
    live = venv_with_torch(tmp_path / "serve", tmp_path / "wheels", "venv")
    folder = str(tmp_path / "envs")

    def deploy(*keep: str) -> dict:
        n = envs("stage", "--venv", live, "--versions", folder, "--run-id", "r")["version"]
        return envs("switch", "--venv", f"{folder}/v{n}", "--to", "staged", *keep)

    deploy()
    deploy()  # v1 adopted, v2, v3 live
    assert envs("switch", "--venv", live, "--to", "1", "--why", "rollback")["to"] == 1
    assert deploy()["removed"] == [2]  # v4: v1 (live until now) and v3 (live before it) stay
    assert sorted(os.listdir(folder)) == ["envs.json", "v1", "v3", "v4"]
    st = envs("status", "--venv", live, "--to", "previous")
    assert (st["to_version"], st["to_error"]) == (1, None)
    st = envs("status", "--venv", live, "--to", "2")
    assert st["to_error"] == f"no environment v2 in {folder} (there: v1 (was-live), v3 (was-live), v4 (live))"
    assert envs("switch", "--venv", live, "--to", "2", ok=False)["error"] == st["to_error"]
    # keep 1 still keeps the version live until the switch: the rollback target
    assert deploy("--keep", "1")["removed"] == [1, 3]
    assert sorted(os.listdir(folder)) == ["envs.json", "v4", "v5"]
    assert envs("switch", "--venv", live, "--to", "previous")["to"] == 4


def test_refusals_change_nothing(tmp_path):
    other = tmp_path / "elsewhere"
    other.mkdir()
    (tmp_path / "serve").symlink_to(other)
    out = envs("stage", "--venv", str(tmp_path / "serve"), "--versions", str(tmp_path / "envs"), ok=False)
    assert "a symlink to" in out["error"] and not (tmp_path / "envs").exists()
    out = envs("stage", "--venv", str(tmp_path / "none"), "--versions", str(tmp_path / "envs"), ok=False)
    assert out["error"] == f"venv {tmp_path / 'none'} does not exist"
    out = envs("switch", "--venv", str(other), "--to", "staged", ok=False)
    assert "not a staged environment" in out["error"]


def test_a_stage_under_umask_077_keeps_the_venv_as_readable_as_it_was(tmp_path):
    """Service logins often have umask 077: the versions folder (beside the venv, as the default
    is) gets its parent's group/other read/search bits, and the new version the live venv's modes
    (its folder, bin/, pyvenv.cfg, site-packages), so whoever ran the venv still can after the
    switch."""
    parent = tmp_path / "opt"
    parent.mkdir(mode=0o755)
    os.chmod(parent, 0o755)
    live = venv_with_torch(parent / "serve", tmp_path / "wheels", "venv")
    folder = parent / ".serve-versions"
    res = subprocess.run(["/bin/sh", "-c", 'umask 077 && exec "$@"', "sh", sys.executable, str(SCRIPT), "stage",
                          "--venv", live, "--versions", str(folder), "--run-id", "r1"], capture_output=True, text=True)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["ok"], res.stdout + res.stderr
    dest = Path(out["path"])

    def mode(p: Path) -> int:
        return p.stat().st_mode & 0o777

    assert mode(folder) == 0o755
    for rel in ("", "bin", "pyvenv.cfg", str(site_packages(live).relative_to(live))):
        assert mode(dest / rel) == mode(Path(live) / rel), rel


def test_status_tells_which_folders_the_login_cannot_write(tmp_path):
    """Operator trial: a venv the login user owns in a root-owned 0755 folder. The stage would make
    ``.serve-versions`` there and the switch rename a symlink over the venv, so ``status`` (what the
    planner refuses on, in --plan and the deploy alike) must say the parent is not writable, as
    that user: root writes everywhere, so it runs as a dedicated test user (needs root)."""
    from tests.support.sshd import SshdUnavailable, ensure_user

    try:
        user = ensure_user("bash")
    except SshdUnavailable as exc:  # CI runs as root with useradd: a missing user is a failure, never a skip
        pytest.fail(f"the test user could not be made: {exc}")
    import pwd

    home = Path(pwd.getpwnam(user).pw_dir)
    parent = home / f"rootowned-{os.getpid()}"  # root's, 0755: the user can enter it, not write it
    parent.mkdir(mode=0o755)
    try:
        os.chmod(parent, 0o755)
        venv = parent / "serve"
        venv.mkdir()
        shutil.chown(venv, user)

        def status(versions: Path) -> dict:
            res = subprocess.run(["runuser", "-u", user, "--", "/usr/bin/python3", str(SCRIPT), "status", "--venv", str(venv),
                                  "--versions", str(versions)], capture_output=True, text=True, cwd="/")
            assert res.stdout.strip(), res.stderr
            return json.loads(res.stdout.strip().splitlines()[-1])

        out = status(parent / ".serve-versions")
        assert out["ok"] and out["user"] == user and out["parent"] == str(parent), out
        assert out["parent_writable"] is False and out["versions_writable"] is False, out
        # the stage itself (had the planner let it run) fails in one line that does not name its
        # command: the planner says "stage: " (the trial saw "stage: stage: PermissionError")
        (venv / "bin").mkdir()
        (venv / "bin" / "python3").touch()
        res = subprocess.run(["runuser", "-u", user, "--", "/usr/bin/python3", str(SCRIPT), "stage", "--venv", str(venv),
                              "--versions", str(parent / ".serve-versions")], capture_output=True, text=True, cwd="/")
        err = json.loads(res.stdout.strip().splitlines()[-1])["error"]
        assert err.startswith("PermissionError: [Errno 13] Permission denied: "), err
        # writable once the folder is the user's: nothing refused
        shutil.chown(parent, user)
        out = status(parent / ".serve-versions")
        assert out["parent_writable"] is True and out["versions_writable"] is True, out
        # an existing versions folder is itself asked, not its parent
        (parent / ".serve-versions").mkdir(mode=0o755)
        out = status(parent / ".serve-versions")
        assert out["versions_probe"] == str(parent / ".serve-versions") and out["versions_writable"] is False, out
    finally:
        shutil.rmtree(parent, ignore_errors=True)
