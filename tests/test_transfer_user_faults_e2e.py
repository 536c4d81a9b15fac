"""``fleetctl copy``/``fetch`` as a new user's trial hit them, against real sshd hosts (SFTP and
the exec fallback; login shells whose rc files print a banner): a DEST that is an existing folder,
a put whose rename cannot make the file, fetch under a chatty login shell, ``{host}`` in copy's
DEST, permission errors over SFTP, skipped symlinks, modes, and a full disk on an explicit DEST."""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import socket
from pathlib import Path

import pytest

from tests.support.fleet import fleetctl, write_inventory

pytestmark = pytest.mark.sshd

BANNERS = {"bash": (".bashrc", 'echo "Welcome to the cluster! Be nice."\n'),
           "fish": (".config/fish/config.fish", 'echo "Welcome, fish user"\n')}


def _home(h) -> Path:
    return Path(pwd.getpwnam(h.user).pw_dir)


def _inv(tmp_path: Path, farm, hosts: dict) -> Path:
    return write_inventory(tmp_path / "inv.yaml", {"g": {n: h.inventory_vars(farm.known_hosts)
                                                         for n, h in hosts.items()}})


@pytest.mark.parametrize("sftp", [True, False], ids=["sftp", "exec-fallback"])
def test_copy_into_an_existing_folder_puts_the_file_inside_and_a_folder_in_the_way_fails(sshd_farm, tmp_path, sftp):
    h = sshd_farm.start("dA" + ("s" if sftp else "e"), shell="bash", sftp=sftp)
    home = _home(h)
    inv = _inv(tmp_path, sshd_farm, {"h": h})
    src = tmp_path / "a.txt"
    src.write_text("hello\n")
    made = [home / "dA", home / "abs", home / "tree"]
    try:
        for p in made[:2]:
            p.mkdir(mode=0o755)
            shutil.chown(p, h.user)
        for dest, where in [("dA", home / "dA" / "a.txt"), (str(home / "abs"), home / "abs" / "a.txt")]:
            res = fleetctl("-i", str(inv), "copy", "--hosts", "h", str(src), dest, home=tmp_path)
            assert res.returncode == 0, res.stdout + res.stderr
            assert res.stdout == "h: ok: 1 files, 6 bytes\n"
            assert where.read_text() == "hello\n", list(where.parent.iterdir())
            assert sorted(p.name for p in where.parent.iterdir()) == ["a.txt"]  # no .part left behind
        # a folder where a file of a copied folder must go: the host fails, naming the path, never ok
        tree = tmp_path / "tree"
        tree.mkdir()
        (tree / "b.txt").write_text("b\n")
        (home / "tree" / "b.txt").mkdir(parents=True)
        shutil.chown(home / "tree", h.user)
        shutil.chown(home / "tree" / "b.txt", h.user)
        res = fleetctl("-i", str(inv), "copy", "--hosts", "h", str(tree), ".", home=tmp_path)
        assert res.returncode == 1, res.stdout + res.stderr
        line = next(ln for ln in res.stderr.splitlines() if ln.startswith("h: FAILED: "))
        assert "tree/b.txt" in line and "Is a directory" in line, line
        assert res.stderr.splitlines()[-1] == "ok 0, failed 1, unreachable 0"
        assert list((home / "tree" / "b.txt").iterdir()) == []
    finally:
        for p in made:
            shutil.rmtree(p, ignore_errors=True)


@pytest.mark.parametrize("shell,sftp", [("bash", True), ("bash", False), ("fish", True)],
                         ids=["bash-sftp", "bash-exec-fallback", "fish-sftp"])
def test_fetch_works_on_hosts_whose_login_shell_prints_a_banner(sshd_farm, tmp_path, shell, sftp):
    h = sshd_farm.start(f"ban{shell}{int(sftp)}", shell=shell, sftp=sftp)
    home = _home(h)
    rc_file, banner = BANNERS[shell]
    rc = home / rc_file
    rc.parent.mkdir(parents=True, exist_ok=True)
    rc.write_text(banner)
    inv = _inv(tmp_path, sshd_farm, {"h": h})
    data = bytes(range(256)) * 400
    try:
        (home / "dst1" / "sub").mkdir(parents=True)
        (home / "dst1" / "sub" / "big.bin").write_bytes(data)
        tool = home / "dst1" / "tool.sh"
        tool.write_text("#!/bin/sh\necho tool\n")
        tool.chmod(0o755)
        for p in [home / "dst1", home / "dst1" / "sub", home / "dst1" / "sub" / "big.bin", tool]:
            shutil.chown(p, h.user)
        up = tmp_path / "up.txt"
        up.write_text("up\n")  # copy's after-check reads its answer past the banner too
        res = fleetctl("-i", str(inv), "copy", "--hosts", "h", str(up), "dst1", home=tmp_path)
        assert res.returncode == 0 and res.stdout == "h: ok: 1 files, 3 bytes\n", res.stdout + res.stderr
        assert (home / "dst1" / "up.txt").read_text() == "up\n"
        out = tmp_path / "out"
        res = fleetctl("-i", str(inv), "fetch", "--hosts", "h", "dst1/sub/big.bin", str(out), home=tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        assert (out / "h" / "dst1" / "sub" / "big.bin").read_bytes() == data  # not a byte of the banner in it
        res = fleetctl("-i", str(inv), "fetch", "--hosts", "h", str(home / "dst1"), str(out / "{host}-tree") + "/",
                       home=tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        got = out / "h-tree" / "dst1"
        assert (got / "sub" / "big.bin").read_bytes() == data
        assert (got / "tool.sh").stat().st_mode & 0o111 == 0o111  # the exec bit is kept, as scp keeps it
        assert (got / "sub" / "big.bin").stat().st_mode & 0o111 == 0
        # a missing file is named as such, whatever the banner
        res = fleetctl("-i", str(inv), "fetch", "--hosts", "h", "dst1/nope.bin", str(out), home=tmp_path)
        assert res.returncode == 1
        assert "h: FAILED: fetch dst1/nope.bin: no such file or folder on the host" in res.stderr, res.stderr
    finally:
        rc.write_text("")
        shutil.rmtree(home / "dst1", ignore_errors=True)


@pytest.mark.parametrize("sftp", [True, False], ids=["sftp", "exec-fallback"])
def test_copy_fills_host_in_dest_and_names_permission_denied(sshd_farm, tmp_path, sftp):
    a = sshd_farm.start("ha" + str(int(sftp)), sftp=sftp)
    b = sshd_farm.start("hb" + str(int(sftp)), sftp=sftp)
    u = sshd_farm.start("hu" + str(int(sftp)), shell="bash", sftp=sftp)
    inv = _inv(tmp_path, sshd_farm, {"a": a, "b": b, "u": u})
    src = tmp_path / "src"
    src.mkdir()
    (src / "one.txt").write_text("one\n")
    base = a.root.parent / f"dst-{int(sftp)}"
    locked = a.root.parent / f"locked-{int(sftp)}"
    locked.mkdir(mode=0o700)  # root's own: the dedicated user cannot enter it
    try:
        res = fleetctl("-i", str(inv), "copy", "--hosts", "a,b", str(src), f"{base}_{{host}}", "--json",
                       home=tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        doc = json.loads(res.stdout)
        for n in ("a", "b"):
            assert (Path(f"{base}_{n}") / "src" / "one.txt").read_text() == "one\n"
            assert doc[n]["files"][0]["dest"] == f"{base}_{n}/src/one.txt"
        assert not Path(f"{base}_{{host}}").exists()
        res = fleetctl("-i", str(inv), "copy", "--hosts", "u", str(src / "one.txt"), f"{locked}/sub/deeper/x.txt",
                       home=tmp_path)
        assert res.returncode == 1
        line = next(ln for ln in res.stderr.splitlines() if ln.startswith("u: FAILED: "))
        assert "Permission denied" in line and str(locked) in line, line
        assert "No such file" not in line
        # a folder that cannot be made names the source as every upload error does (operator trial:
        # `upload -> DEST: FOLDER: Permission denied` over SFTP)
        assert line.startswith(f"u: FAILED: upload {src / 'one.txt'} -> {locked}/sub/deeper/x.txt: "), line
        (locked / "secret.txt").write_text("s\n")
        res = fleetctl("-i", str(inv), "fetch", "--hosts", "u", str(locked / "secret.txt"), str(tmp_path / "got"),
                       home=tmp_path)
        assert res.returncode == 1
        assert f"u: FAILED: fetch {locked}/secret.txt: Permission denied" in res.stderr, res.stderr
    finally:
        for n in ("a", "b"):
            shutil.rmtree(f"{base}_{n}", ignore_errors=True)
        shutil.rmtree(locked, ignore_errors=True)


def _own_disk(folder: Path, size: str = "256k") -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'mount -t tmpfs -o size={size} tmpfs "$0" && exec "$@"', str(folder)]


def test_copy_says_skipped_links_keeps_folder_modes_and_a_full_dest_gets_no_workdir_advice(sshd_farm, tmp_path):
    shared = tmp_path.parent / f"{tmp_path.name}-disk"
    h = sshd_farm.start("m1")
    small = sshd_farm.start("m2", wrap=_own_disk(shared))
    inv = _inv(tmp_path, sshd_farm, {"m1": h, "m2": small})
    src = tmp_path / "kit"
    (src / "bin").mkdir(parents=True)
    (src / "bin").chmod(0o750)
    (src / "bin" / "run.sh").write_text("#!/bin/sh\n")
    (src / "bin" / "run.sh").chmod(0o755)
    (src / "bin" / "link").symlink_to("run.sh")
    os.mkfifo(src / "bin" / "pipe")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(src / "bin" / "sock"))
    sock.close()
    dst = h.root / "kitdst"
    try:
        res = fleetctl("-i", str(inv), "copy", "--hosts", "m1", str(src), f"{dst}/", home=tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        # each skipped entry named for what it is, in the words of the host's log and of fetch
        # (it was "skipped 3 not a regular file (symlinks are never followed)" for all three)
        assert res.stdout == (f"m1: ok: 1 files, 10 bytes; skipped 3: {src}/bin/link: not a regular file (symlinks "
                              f"are never followed); {src}/bin/pipe: a FIFO (named pipe), not a regular file; "
                              f"{src}/bin/sock: a socket, not a regular file\n"), res.stdout
        assert (dst / "kit" / "bin").stat().st_mode & 0o777 == 0o750
        assert (dst / "kit" / "bin" / "run.sh").stat().st_mode & 0o777 == 0o755
        big = tmp_path / "big.bin"
        big.write_bytes(b"\0" * (1 << 20))
        res = fleetctl("-i", str(inv), "copy", "--hosts", "m2", str(big), f"{shared}/big.bin", home=tmp_path)
        assert res.returncode == 1
        line = next(ln for ln in res.stderr.splitlines() if ln.startswith("m2: FAILED: "))
        assert "No space left on device (ENOSPC)" in line and f"{shared}/" in line, line
        assert "workdir" not in line and "cat:" not in line, line
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def _ansible_fetch(tmp_path: Path, farm, hosts: dict, src: str, dest: Path) -> None:
    """``ansible HOSTS -m fetch -a 'src=SRC dest=DEST'``: ansible-core itself, over the same sshd
    hosts (its own home, config and ssh control folder under ``tmp_path``; nothing in the real ~)."""
    import subprocess
    import sys

    import yaml

    inv = tmp_path / "ansible-inv.yaml"
    common = f"-F /dev/null -o UserKnownHostsFile={farm.known_hosts} -o StrictHostKeyChecking=yes"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {n: {
        "ansible_host": "127.0.0.1", "ansible_port": h.port, "ansible_user": h.user,
        "ansible_ssh_private_key_file": str(h.client_key), "ansible_ssh_common_args": common,
        "ansible_python_interpreter": "/usr/bin/python3"} for n, h in hosts.items()}}}))
    (tmp_path / "ansible.cfg").write_text("")
    env = {**os.environ, "HOME": str(tmp_path), "ANSIBLE_HOME": str(tmp_path / ".ansible"),
           "ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg"), "ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp_path / "cp"),
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / ".ansible-tmp"), "ANSIBLE_NOCOLOR": "1"}
    res = subprocess.run([str(Path(sys.executable).parent / "ansible"), "all", "-i", str(inv), "-m", "fetch",
                          "-a", f"src={src} dest={dest}"], env=env, capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_fetch_from_two_hosts_of_one_path_lands_where_ansible_puts_it_and_host_in_src_is_filled(sshd_farm, tmp_path):
    """New-user trial: ``fetch /x/logs/app.log out`` kept only ``out/<host>/app.log`` (not Ansible's
    ``out/<host>/x/logs/app.log``) and ``{host}`` in SRC stayed a literal ``{host}``."""
    shared = tmp_path.parent / f"{tmp_path.name}-logs"  # each host its own tmpfs here: one path, two files
    hosts = {n: sshd_farm.start(n, wrap=_own_disk(shared)) for n in ("fa", "fb")}
    inv = _inv(tmp_path, sshd_farm, hosts)
    log = f"{shared}/logs/app.log"
    try:
        res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--", "sh", "-c",
                       f'mkdir -p {shared}/logs && echo "log of $FLEETCTL_TEST_HOST" > {log} && '
                       f'echo "own $FLEETCTL_TEST_HOST" > {shared}/logs/app-$FLEETCTL_TEST_HOST.log', home=tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        out = tmp_path / "out"
        res = fleetctl("-i", str(inv), "fetch", "--hosts", "g", log, str(out), "--json", home=tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        for n in hosts:
            mine = out / n / log.lstrip("/")
            assert mine.read_text() == f"log of {n}\n"  # DEST/<host>/<path on the host>, one file per host
            assert json.loads(res.stdout)[n]["files"][0] == {"src": log, "dest": str(mine), "bytes": len(f"log of {n}\n")}
        # ansible-core's own fetch of the same path puts the same bytes at the same places
        theirs = tmp_path / "ansible-out"
        _ansible_fetch(tmp_path, sshd_farm, hosts, log, theirs)
        assert _files(theirs) == _files(out)
        # {host} in SRC is each host's inventory name; in DEST, one folder per host, as given
        res = fleetctl("-i", str(inv), "fetch", "--hosts", "g", f"{shared}/logs/app-{{host}}.log",
                       str(tmp_path / "own" / "{host}") + "/", home=tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        assert {n: (tmp_path / "own" / n / f"app-{n}.log").read_text() for n in hosts} == {n: f"own {n}\n" for n in hosts}
        # --flat (Ansible's flat: yes): DEST is the file; for two hosts without {host}: refused, one line
        flat = tmp_path / "flat"
        res = fleetctl("-i", str(inv), "fetch", "--hosts", "g", "--flat", log, str(flat / "app.log"), home=tmp_path)
        assert res.returncode == 2 and res.stdout == "" and not flat.exists()
        assert res.stderr == (f"fleetctl: error: fetch --flat: DEST {flat}/app.log has no {{host}}: the 2 hosts would "
                              f"write the same path; put {{host}} in DEST (e.g. {flat}/{{host}}/app.log) or leave out "
                              f"--flat (files land at DEST/<host>/<path on the host>)\n"), res.stderr
        res = fleetctl("-i", str(inv), "fetch", "--hosts", "fb", "--flat", log, str(flat / "app.log"), home=tmp_path)
        assert res.returncode == 0 and (flat / "app.log").read_text() == "log of fb\n", res.stdout + res.stderr
        res = fleetctl("-i", str(inv), "fetch", "--hosts", "fa", "--flat", log, str(flat), home=tmp_path)
        assert res.returncode == 1  # an existing folder without the trailing /: refused as Ansible does
        assert f"fa: FAILED: fetch {log} -> {flat}: {flat} is an existing folder here; end DEST with /" in res.stderr
        assert sorted(p.name for p in flat.iterdir()) == ["app.log"]
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_fetch_keeps_hosts_of_alike_names_apart_and_refuses_a_src_outside_dest(tmp_path):
    """``n@1`` and ``n_1`` were once one file name under DEST (``n_1``), refused (exit 2); the host
    name's file name is one-to-one now (:func:`fleetctl.util.paths.safe_name`), so each host's
    files land in a folder of its own."""
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"n@1": {"ansible_connection": "local"},
                                                        "n_1": {"ansible_connection": "local"}}})
    out = tmp_path / "out"
    res = fleetctl("-i", str(inv), "fetch", "--hosts", "n_1", "../x", str(out), home=tmp_path)
    assert res.returncode == 2
    assert res.stderr == ("fleetctl: error: fetch: SRC ../x climbs above the login folder ('..'): its files would "
                          "land outside DEST/<host>/; give the path without '..' (an absolute path)\n"), res.stderr
    assert not out.exists() and not (tmp_path / "runs").exists()  # refused before any host was touched
    res = fleetctl("-i", str(inv), "fetch", "--hosts", "g", str(inv), str(out), home=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert sorted(p.name for p in out.iterdir()) == ["n%401", "n_1"]
    for folder in ("n%401", "n_1"):
        assert (out / folder / str(inv).lstrip("/")).read_bytes() == inv.read_bytes()
    res = fleetctl("-i", str(inv), "fetch", "--hosts", "g", str(inv), str(out / "{host}.yaml"), home=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (out / "n%401.yaml").read_bytes() == (out / "n_1.yaml").read_bytes() == inv.read_bytes()


def test_copy_into_a_folder_the_user_cannot_write_leads_with_permission_denied_not_sftp(sshd_farm, tmp_path):
    """New-user trial: under a login shell whose ~/.bashrc prints a banner (SFTP cannot start:
    ``Max packet size exceeded``), a copy into a folder the user cannot write led with ``cannot
    start SFTP: ...`` and gave ``Permission denied`` second, after the part file's ``rm`` noise.
    The real cause leads; why SFTP was not used follows it."""
    u = sshd_farm.start("chatty-locked", shell="bash")
    rc, banner = BANNERS["bash"]
    (_home(u) / rc).write_text(banner)
    inv = _inv(tmp_path, sshd_farm, {"u": u})
    locked = u.root.parent / "locked-chatty"
    locked.mkdir(mode=0o700)  # root's own: the dedicated user cannot write it
    src = tmp_path / "one.txt"
    src.write_text("one\n")
    try:
        res = fleetctl("-i", str(inv), "copy", "--hosts", "u", str(src), f"{locked}/x.txt", home=tmp_path)
        assert res.returncode == 1, res.stdout + res.stderr
        line = next(ln for ln in res.stderr.splitlines() if ln.startswith("u: FAILED: "))
        assert re.match(re.escape(f"u: FAILED: upload {src} -> {locked}/x.txt: cannot create {locked}/.x.txt.")
                        + r"[0-9a-f]{8}\.part: " + re.escape("Permission denied (sent through the shell, as SFTP could "
                                                             "not be used: cannot start SFTP: "), line), line
        assert "rm: " not in res.stderr and "fleetctl-put" not in res.stderr, res.stderr
    finally:
        (_home(u) / rc).write_text("")
        shutil.rmtree(locked, ignore_errors=True)


@pytest.mark.parametrize("sftp", [True, False], ids=["sftp", "exec-fallback"])
def test_fetch_of_a_folder_keeps_every_readable_file_and_names_each_unreadable_one(sshd_farm, tmp_path, sftp):
    """Operator trial: ``fetch '~/fdir' fo`` with one mode-000 file in fdir failed on it and fetched
    nothing else (``fo/qa/.../fdir`` an empty tree), and called a FIFO ``not a regular file
    (symlinks are never followed)``. Every readable file lands; the host fails naming each file it
    could not read; a skipped entry is named for what it is."""
    h = sshd_farm.start("fd" + ("s" if sftp else "e"), shell="bash", sftp=sftp)
    home = _home(h)
    inv = _inv(tmp_path, sshd_farm, {"qa": h})
    fdir = home / "fdir"
    try:
        (fdir / "sub").mkdir(parents=True)
        (fdir / "a").write_text("a\n")
        (fdir / "sub" / "b").write_text("b\n")
        (fdir / "secret").write_text("s\n")
        (fdir / "link").symlink_to("a")
        os.mkfifo(fdir / "fifo")
        for p in [fdir, fdir / "sub", fdir / "a", fdir / "sub" / "b", fdir / "secret", fdir / "fifo"]:
            shutil.chown(p, h.user)
        os.lchown(fdir / "link", pwd.getpwnam(h.user).pw_uid, -1)
        (fdir / "secret").chmod(0)  # its owner, the login user, cannot read it
        out = tmp_path / "fo"
        res = fleetctl("-i", str(inv), "fetch", "--hosts", "qa", "~/fdir", str(out), home=tmp_path)
        assert res.returncode == 1, res.stdout + res.stderr
        got = out / "qa" / str(fdir).lstrip("/")
        assert _files(got) == {"a": b"a\n", "sub/b": b"b\n"}  # nothing readable lost, nothing else made
        line = next(ln for ln in res.stderr.splitlines() if ln.startswith("qa: FAILED: "))
        assert line.startswith(f"qa: FAILED: fetch ~/fdir: 1 of 3 files could not be read (the other 2 were "
                               f"fetched): get {fdir}/secret: "), line
        assert "Permission denied" in line, line
        record = next(p for p in (tmp_path / "runs").iterdir() if p.is_dir())  # (not runs/.seq)
        logs = fleetctl("logs", record.name, home=tmp_path).stdout
        assert f"qa: skipped {fdir}/fifo: a FIFO (named pipe), not a regular file" in logs, logs
        assert f"qa: skipped {fdir}/link: not a regular file (symlinks are never followed)" in logs, logs
    finally:
        shutil.rmtree(fdir, ignore_errors=True)


def test_copy_and_fetch_refuse_a_templated_dest_before_any_host_is_touched(tmp_path):
    """Operator trial: ``copy src/a.txt '/tmp/x_{{ inventory_hostname }}'`` made that literal path
    (and a typo ``{hostname}`` too). A DEST (fetch's SRC too) holding ``{{ }}`` or a placeholder
    other than ``{host}`` is bad input: one line naming it, exit 2, no host touched, no run."""
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"qa": {"ansible_connection": "local"},
                                                        "qb": {"ansible_connection": "local"}}})
    src = tmp_path / "a.txt"
    src.write_text("a\n")
    hint = "{host} is the placeholder, each host's inventory name"
    for cmd, args, bad, what in (
            ("copy", [str(src), f"{tmp_path}/x_{{{{ inventory_hostname }}}}"], "DEST", "holds a Jinja template "
             "(never rendered here)"),
            ("copy", [str(src), f"{tmp_path}/x_{{hostname}}"], "DEST", "holds the unknown placeholder {hostname}"),
            ("fetch", [str(src), f"{tmp_path}/x_{{{{ inventory_hostname }}}}/"], "DEST", "holds a Jinja template "
             "(never rendered here)"),
            ("fetch", [f"{tmp_path}/{{name}}.txt", f"{tmp_path}/out"], "SRC", "holds the unknown placeholder {name}")):
        res = fleetctl("-i", str(inv), cmd, "--hosts", "g", *args, home=tmp_path)
        value = args[0] if bad == "SRC" else args[1]
        example = value.replace("{{ inventory_hostname }}", "{host}").replace("{hostname}", "{host}").replace(
            "{name}", "{host}")
        assert (res.returncode, res.stdout) == (2, ""), res.stderr
        assert res.stderr == f"fleetctl: error: {cmd}: {bad} {value} {what}: {hint} (e.g. {example})\n", res.stderr
    made = [p.name for p in tmp_path.iterdir() if p.name.startswith(("x_", "out", "runs"))]
    assert made == [], made  # no path made, no run recorded


def test_fetch_of_a_folder_with_a_subfolder_the_user_cannot_list_fails_naming_it(sshd_farm, tmp_path):
    """Operator trial: ``fetch /tmp/r out`` with ``r/closed/`` root-owned mode 700 said ``ok: 1
    files`` (closed/z silently missing). The folder is named and fails the host like an unreadable
    file; the readable files are still fetched."""
    h = sshd_farm.start("fcl", shell="bash")
    inv = _inv(tmp_path, sshd_farm, {"hb": h})
    r = _home(h) / "r"
    try:
        (r / "closed").mkdir(parents=True)
        (r / "ok.txt").write_text("ok")
        (r / "closed" / "z").write_text("z\n")
        for p in [r, r / "ok.txt"]:
            shutil.chown(p, h.user)
        (r / "closed").chmod(0o700)  # root's: the login user cannot list it
        out = tmp_path / "out"
        res = fleetctl("-i", str(inv), "fetch", "--hosts", "hb", str(r), str(out), home=tmp_path)
        assert res.returncode == 1, res.stdout + res.stderr
        assert _files(out / "hb" / str(r).lstrip("/")) == {"ok.txt": b"ok"}
        line = next(ln for ln in res.stderr.splitlines() if ln.startswith("hb: FAILED: "))
        assert line == (f"hb: FAILED: fetch {r}: 1 folder could not be read (1 files were fetched): {r}/closed/: "
                        f"Permission denied (the login user cannot list it)"), line
    finally:
        shutil.rmtree(r, ignore_errors=True)


@pytest.mark.parametrize("sftp", [True, False], ids=["sftp", "exec-fallback"])
def test_fetch_onto_a_full_controller_disk_names_the_local_dest_and_leaves_no_cut_short_file(sshd_farm, tmp_path,
                                                                                               sftp):
    """Operator trial: a 1 MiB DEST here, a 3,000,000-byte file: ``1 of 1 files could not be read
    (...): [Errno 28] No space left on device`` and a 1,044,480-byte file left under its final name
    (SFTP; the exec fallback left ``.big.bin.part`` and advice about the host's workdir). The
    message names the local DEST and the controller's cause; no partial file is left."""
    import subprocess
    import sys

    from tests.support.fleet import REPO

    h = sshd_farm.start("fdk" + ("s" if sftp else "e"), shell="bash", sftp=sftp)
    inv = _inv(tmp_path, sshd_farm, {"hb": h})
    big = _home(h) / "big.bin"
    out = tmp_path.parent / f"{tmp_path.name}-out"
    try:
        big.write_bytes(b"\1" * 3_000_000)
        shutil.chown(big, h.user)
        env = {**os.environ, "FLEETCTL_HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
        out.mkdir()
        listing = tmp_path / "left.txt"  # what is on the 1 MiB disk when fleetctl is done (it goes with its namespace)
        script = ('d=$0; l=$1; shift; mount -t tmpfs -o size=1m tmpfs "$d" && '
                  '{ "$@"; rc=$?; find "$d" -type f -printf "%s %P\\n" > "$l"; exit $rc; }')
        res = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(out),
                              str(listing), sys.executable, "-m", "fleetctl", "-i", str(inv), "fetch", "--hosts", "hb",
                              str(big), str(out)], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
        assert res.returncode == 1, res.stdout + res.stderr
        line = next(ln for ln in res.stderr.splitlines() if ln.startswith("hb: FAILED: "))
        assert line == (f"hb: FAILED: fetch {big}: could not be written here: {out}/hb/{str(big).lstrip('/')}: "
                        f"No space left on device"), line
        assert "workdir" not in res.stderr and "could not be read" not in res.stderr, res.stderr
        assert listing.read_text() == "", listing.read_text()  # no cut-short file, under any name
    finally:
        big.unlink(missing_ok=True)
        shutil.rmtree(out, ignore_errors=True)


def test_copy_and_fetch_refuse_an_empty_unbalanced_or_unmakeable_dest_before_any_host_is_touched(tmp_path):
    """Operator trial: ``copy src/a.txt ''`` connected and failed ``upload src/a.txt -> : No such file``;
    ``'/tmp/d_{host'`` made a folder of that literal name; ``fetch /tmp/f_{host} '/proc/x/{host}'
    --flat`` called the host's file unreadable (``[Errno 2] ... '/proc/x'``). Each is bad input:
    one line, exit 2, no run, no path made."""
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"qa": {"ansible_connection": "local"}}})
    src = tmp_path / "a.txt"
    src.write_text("a\n")
    (tmp_path / "afile").write_text("")
    hint = "{host} is the placeholder, each host's inventory name"
    for cmd, args, want in (
            ("copy", [str(src), ""], "copy: DEST is empty: give a path"),
            ("copy", ["", f"{tmp_path}/d"], "copy: SRC is empty: give a path"),
            ("fetch", ["", f"{tmp_path}/out"], "fetch: SRC is empty: give a path"),
            ("fetch", [str(src), ""], "fetch: DEST is empty: give a path"),
            ("copy", [str(src), f"{tmp_path}/d_{{host"], f"copy: DEST {tmp_path}/d_{{host holds an unbalanced {{ or }} "
             f"({{host): {hint} (e.g. {tmp_path}/d_{{host}})"),
            ("fetch", [str(src), f"{tmp_path}/afile/{{host}}", "--flat"], f"fetch: DEST {tmp_path}/afile/qa cannot be "
             f"made here: {tmp_path}/afile is not a folder"),
            ("fetch", [str(src), "/proc/x/{host}", "--flat"], "fetch: DEST /proc/x/qa cannot be made here: no folder "
             "can be made in /proc (")):
        res = fleetctl("-i", str(inv), cmd, "--hosts", "g", *args, home=tmp_path)
        assert (res.returncode, res.stdout) == (2, ""), (args, res.stderr)
        assert res.stderr.startswith(f"fleetctl: error: {want}") and len(res.stderr.splitlines()) == 1, res.stderr
    made = sorted(p.name for p in tmp_path.iterdir())
    assert made == ["a.txt", "afile", "inv.yaml"], made  # no path made, no run recorded


@pytest.mark.parametrize("sftp", [True, False], ids=["sftp", "exec-fallback"])
def test_copy_of_a_sparse_file_arrives_whole(sshd_farm, tmp_path, sftp):
    """A sparse file (holes, a hole at its end: a VM image, a preallocated file) arrives with its
    size and bytes: asyncssh's put skips holes by default and never extends the file over a hole at
    its end, so an all-hole 256 MiB file arrived as 0 bytes and the copy failed its size check."""
    h = sshd_farm.start("sp" + ("s" if sftp else "e"), sftp=sftp)
    inv = _inv(tmp_path, sshd_farm, {"h": h})
    src = tmp_path / "sparse.img"
    with open(src, "wb") as f:
        f.truncate(8 << 20)
        f.seek(3 << 20)
        f.write(b"data in the middle")
    assert os.stat(src).st_blocks * 512 < (1 << 20)  # really sparse here
    dest = tmp_path / "landed" / "sparse.img"  # the host is this machine: never the login user's real home
    res = fleetctl("-i", str(inv), "copy", "--hosts", "h", str(src), str(dest), home=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout == f"h: ok: 1 files, {8 << 20} bytes\n"
    assert dest.read_bytes() == src.read_bytes()


def test_a_failed_fetch_leaves_no_empty_folder_it_made_and_keeps_those_that_were_there(sshd_farm, tmp_path):
    """Operator trial: ``fetch '~/fdir/deep/er/secret' out`` of an unreadable file failed and left
    ``out/qa/home/<user>/fdir/deep/er/``, empty folders it had made. Every folder the failed fetch
    made and left empty is removed; one that existed before (empty or not) is kept, and so is
    every folder holding a fetched file."""
    h = sshd_farm.start("fe", shell="bash")
    home = _home(h)
    inv = _inv(tmp_path, sshd_farm, {"qa": h})
    fdir = home / "fdir"
    out = tmp_path / "out"
    (out / "keep").mkdir(parents=True)  # there before: stays, though empty
    try:
        (fdir / "deep" / "er").mkdir(parents=True)
        (fdir / "a").write_text("a\n")
        (fdir / "deep" / "er" / "secret").write_text("s\n")
        for p in [fdir, fdir / "deep", fdir / "deep" / "er", fdir / "a", fdir / "deep" / "er" / "secret"]:
            shutil.chown(p, h.user)
        (fdir / "deep" / "er" / "secret").chmod(0)  # its owner, the login user, cannot read it
        for dest in [str(out / "gone"), str(out / "new_{host}" / "x") + "/", str(out)]:
            res = fleetctl("-i", str(inv), "fetch", "--hosts", "qa", "~/fdir/deep/er/secret", dest, home=tmp_path)
            assert res.returncode == 1 and "Permission denied" in res.stderr, res.stdout + res.stderr
            assert sorted(p.name for p in out.iterdir()) == ["keep"], list(out.rglob("*"))
        res = fleetctl("-i", str(inv), "fetch", "--hosts", "qa", "~/fdir", str(out), home=tmp_path)
        assert res.returncode == 1, res.stdout + res.stderr
        assert [p.relative_to(out).as_posix() for p in sorted(out.rglob("*")) if not p.is_dir() or
                not any(p.iterdir())] == ["keep", f"qa/{str(fdir).lstrip('/')}/a"], list(out.rglob("*"))
    finally:
        shutil.rmtree(fdir, ignore_errors=True)
