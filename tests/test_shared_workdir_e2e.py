"""Login users of one host given one workdir (a site-wide ``/opt/fleetctl`` or ``/scratch/fleetctl``,
a folder under ``/tmp``; ``ansible_user: alice`` and ``bob``, root and a service user): each works in
a folder of its own below a shared base, and a folder another user owns or can change is never used
but named, with its owner and mode (real sshd on loopback, real users, real file modes)."""

from __future__ import annotations

import json
import os
import pwd
import stat
from pathlib import Path

from tests.support.fleet import fleetctl, write_inventory

PLAY = "name: t\nhosts: all\ngather_facts: false\ntasks:\n  - name: t\n    command: {argv: ['true']}\n"


def _scratch(sshd_farm) -> Path:
    """A folder as /tmp or /scratch are (root's, sticky, world-writable), inside the farm's root
    (removed with it)."""
    top = sshd_farm.root / "scratch"
    top.mkdir()
    top.chmod(0o1777)
    return top


def _deploy(tmp_path: Path, sshd_farm, hosts: list, workdir: Path) -> tuple[int, dict]:
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {h.name: {**h.inventory_vars(sshd_farm.known_hosts),
                                                                  "workdir": str(workdir)} for h in hosts}})
    play = tmp_path / "play.yaml"
    play.write_text(PLAY)
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "--json", home=tmp_path)
    doc = json.loads(res.stdout)
    return res.returncode, doc


def _own_run_folder(folder: Path, user: str, run_id: str) -> None:
    """``folder`` is ``user``'s, mode 0700, and holds the run's folder."""
    st = folder.lstat()
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == pwd.getpwnam(user).pw_uid, (folder, st)
    assert stat.S_IMODE(st.st_mode) == 0o700, (folder, oct(st.st_mode))
    assert (folder / "runs" / run_id).is_dir()


def test_a_shared_base_gives_each_login_user_its_own_folder(sshd_farm, tmp_path):
    base = _scratch(sshd_farm) / "fleetctl"  # an administrator's shared base: root's, mode 1777, as /tmp
    base.mkdir()
    base.chmod(0o1777)
    hosts = [sshd_farm.start("sa", shell="bash"), sshd_farm.start("sb", shell="dash"), sshd_farm.start("sr")]
    rc, doc = _deploy(tmp_path, sshd_farm, hosts, base)  # all three at once: root's too
    assert rc == 0, doc
    for h in hosts:
        assert doc["hosts"][h.name]["status"] in ("ok", "changed"), doc["hosts"][h.name]
        _own_run_folder(base / h.user, h.user, doc["run_id"])
    assert sorted(p.name for p in base.iterdir()) == sorted(h.user for h in hosts)  # nothing in the base itself


def test_a_folder_another_user_made_is_named_never_used_until_shared(sshd_farm, tmp_path):
    alice, bob, root = sshd_farm.start("ua", shell="bash"), sshd_farm.start("ub", shell="dash"), sshd_farm.start("ur")
    work = _scratch(sshd_farm) / "fleetctl"  # missing: the first user makes it, private (as before)
    rc, doc = _deploy(tmp_path, sshd_farm, [alice], work)
    assert rc == 0, doc
    _own_run_folder(work, alice.user, doc["run_id"])
    for other in (bob, root):  # root could enter it, but must not write into alice's folder
        rc, doc = _deploy(tmp_path, sshd_farm, [other], work)
        assert rc == 1 and doc["hosts"][other.name]["status"] == "failed", doc
        error = doc["hosts"][other.name]["error"]
        assert error.startswith(f"workdir {work} (owner {alice.user}, mode 0700) is {alice.user}'s, not "
                                f"{other.user}'s: {other.user} cannot work in it; "), error
        assert f"chmod 1777 {work}" in error and "Permission denied" not in error, error
    assert {p.stat().st_uid for p in work.rglob("*")} == {pwd.getpwnam(alice.user).pw_uid}
    work.chmod(0o1777)  # as the line says: shared, every user (alice too) works in its own folder
    rc, doc = _deploy(tmp_path, sshd_farm, [alice, bob, root], work)
    assert rc == 0, doc
    for h in (alice, bob, root):
        _own_run_folder(work / h.user, h.user, doc["run_id"])


def test_folders_others_can_change_are_never_used(sshd_farm, tmp_path):
    alice, bob = sshd_farm.start("xa", shell="bash"), sshd_farm.start("xb", shell="dash")
    a = pwd.getpwnam(alice.user)
    top = _scratch(sshd_farm)
    open_dir = top / "open"  # alice's, world-writable without the sticky bit: anyone may swap its folders
    open_dir.mkdir()
    os.chown(open_dir, a.pw_uid, a.pw_gid)
    open_dir.chmod(0o777)
    rc, doc = _deploy(tmp_path, sshd_farm, [bob], open_dir)
    assert rc == 1, doc
    assert doc["hosts"]["xb"]["error"].startswith(
        f"workdir {open_dir} (owner {alice.user}, mode 0777) is writable by every user without the sticky bit: "
        "never used"), doc
    assert list(open_dir.iterdir()) == []
    shared = top / "shared"  # a shared base where alice made bob's folder first (to read or plant files)
    shared.mkdir()
    shared.chmod(0o1777)
    planted = shared / bob.user
    planted.mkdir()
    os.chown(planted, a.pw_uid, a.pw_gid)
    planted.chmod(0o777)
    rc, doc = _deploy(tmp_path, sshd_farm, [bob], shared)
    assert rc == 1, doc
    assert doc["hosts"]["xb"]["error"].startswith(
        f"workdir {planted} (owner {alice.user}, mode 0777) in the shared {shared} is not {bob.user}'s: never used"), doc
    assert list(planted.iterdir()) == []
    planted.rmdir()
    target = top / "elsewhere"  # or a symbolic link of alice's pointing where bob would write
    target.mkdir()
    planted.symlink_to(target)
    os.lchown(planted, a.pw_uid, a.pw_gid)
    rc, doc = _deploy(tmp_path, sshd_farm, [bob], shared)
    assert rc == 1, doc
    assert f"in the shared {shared} is a symbolic link: never used" in doc["hosts"]["xb"]["error"], doc
    assert list(target.iterdir()) == []


def _deploy_locked(tmp_path: Path, sshd_farm, host, workdir: Path, lock: Path) -> tuple[int, dict]:
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {host.name: {**host.inventory_vars(sshd_farm.known_hosts),
                                                                     "workdir": str(workdir),
                                                                     "deploy_lock": str(lock)}}})
    play = tmp_path / "play.yaml"
    play.write_text(PLAY)
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "--json", home=tmp_path)
    return res.returncode, json.loads(res.stdout)


def test_one_deploy_lock_for_two_users_is_shared_or_named_and_never_followed(sshd_farm, tmp_path):
    alice, bob = sshd_farm.start("la", shell="bash"), sshd_farm.start("lb", shell="dash")
    a = pwd.getpwnam(alice.user)
    top = _scratch(sshd_farm)
    shared = top / "work"  # a shared base: each user's own workdir, one deploy_lock for both
    shared.mkdir()
    shared.chmod(0o1777)
    lock = top / "gpu.lock"
    rc, doc = _deploy_locked(tmp_path, sshd_farm, alice, shared, lock)
    assert rc == 0, doc
    assert lock.stat().st_uid == a.pw_uid and stat.S_IMODE(lock.stat().st_mode) == 0o600
    rc, doc = _deploy_locked(tmp_path, sshd_farm, bob, shared, lock)
    assert rc == 1 and doc["hosts"]["lb"]["status"] == "failed", doc
    error = doc["hosts"]["lb"]["error"]
    assert f"cannot take the deploy lock {lock}: Permission denied (EACCES): {lock} (owner {alice.user}, " \
           f"mode 0600) is {alice.user}'s and {bob.user} cannot write it; " in error, error
    lock.chmod(0o666)  # as the line says: one lock every user may take (in a sticky folder, made by another)
    rc, doc = _deploy_locked(tmp_path, sshd_farm, bob, shared, lock)
    assert rc == 0, doc
    lock.unlink()  # a symbolic link of alice's where bob's lock would be: bob would truncate its target
    target = top / "target"
    target.write_text("alice's file\n")
    os.chown(target, a.pw_uid, a.pw_gid)
    target.chmod(0o666)
    lock.symlink_to(target)
    os.lchown(lock, a.pw_uid, a.pw_gid)
    rc, doc = _deploy_locked(tmp_path, sshd_farm, bob, shared, lock)
    assert rc == 1, doc
    assert f"cannot take the deploy lock {lock}: " in doc["hosts"]["lb"]["error"], doc
    assert "is a symbolic link (owner " in doc["hosts"]["lb"]["error"], doc
    assert target.read_text() == "alice's file\n"


def test_facts_never_run_a_script_from_another_users_workdir(sshd_farm, tmp_path):
    """``fleetctl facts`` writes nothing and uses a facts script a deploy left in the workdir; in a
    workdir of another user's that copy may be anything: it is never run (a private copy is)."""
    import hashlib

    from tests.support.fleet import REPO

    alice, bob = sshd_farm.start("fa", shell="bash"), sshd_farm.start("fb", shell="dash")
    a = pwd.getpwnam(alice.user)
    theirs = _scratch(sshd_farm) / "fleetctl"
    (theirs / "scripts").mkdir(parents=True)
    source = (REPO / "playbooks" / "scripts" / "facts.py").read_bytes()
    marker = sshd_farm.root / "scratch" / "ran"
    planted = theirs / "scripts" / f"facts-{hashlib.sha256(source).hexdigest()[:16]}.py"
    planted.write_text(source.decode() + f"\nimport os\nopen({str(marker)!r}, 'w').write(str(os.getuid()))\n")
    for p in (theirs, theirs / "scripts", planted):
        os.chown(p, a.pw_uid, a.pw_gid)
        p.chmod(0o755)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"fb": {**bob.inventory_vars(sshd_farm.known_hosts),
                                                                "workdir": str(theirs)}}})
    res = fleetctl("-i", str(inv), "facts", "--hosts", "g", "--json", home=tmp_path)
    # the workdir is another user's: a deploy cannot make its run folder there, so facts fail the host
    got = json.loads(res.stdout)["fb"]
    assert res.returncode == 1 and got["error"].startswith("workdir "), res.stdout[-2000:] + res.stderr[-2000:]
    assert got["cpu_count"] >= 1
    assert not marker.exists()
    assert sorted(p.name for p in theirs.iterdir()) == ["scripts"]  # and nothing was written there
