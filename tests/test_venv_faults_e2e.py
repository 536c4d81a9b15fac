"""Venvs where ``fleetctl facts`` said ok and ``deploy --plan`` said push, and the deploy then
failed (a new operator's trial): a venv the login user cannot write, a venv on a full disk, a
torch whose own library was moved aside, and an install cut short that verify named only as
``symbols: missing``. Each is made real: a real sshd login as an unprivileged user, a real tmpfs,
real venvs (tests/support/hostvenv.py), a real torch's files, real wheels installed by pip.
The rules: fleetctl/facts/venv.py, fleetctl/tasks/pip_install.py, fleetctl/tasks/runtime_preflight.py,
playbooks/scripts/verify_package.py (``install_problem``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pwd
import shutil
import subprocess
import sysconfig
import time
import zipfile
from pathlib import Path

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.support.hostvenv import base_site, make_venv, site_packages
from tests.support.tiny_ext import fill, tmpfs

INSTALL_PLAY = """\
name: install a wheel
hosts: all
tasks:
  - name: Install
    pip_install: {{wheel: "{wheel}", tool: pip}}
"""

VERIFY_PLAY = INSTALL_PLAY + """\
  - name: Verify
    verify: {{package: toyinst, smoke: false, symbols: [op]}}
    tags: [verify]
"""


def _wheel(folder: Path, blob_bytes: int = 4096) -> Path:
    """A real pure wheel ``toyinst`` (``__init__.py`` with ``op``, a ``_C.so`` blob of zeros of
    ``blob_bytes``: small packed, that size unpacked), with its RECORD, as build backends write it."""
    files = {"toyinst/__init__.py": b"def op():\n    return 1\n", "toyinst/_C.so": b"\0" * blob_bytes,
             "toyinst-0.1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: toyinst\nVersion: 0.1.0\n",
             "toyinst-0.1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                              b"Tag: py3-none-any\n"}
    record = "".join(f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}\n"
                     for p, d in files.items()) + "toyinst-0.1.0.dist-info/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / "toyinst-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for p, d in files.items():
            zf.writestr(p, d)
        zf.writestr("toyinst-0.1.0.dist-info/RECORD", record)
    os.chmod(folder, 0o755)
    os.chmod(wheel, 0o644)
    return wheel


def _task(home: Path, host: str, action: str) -> dict:
    """The last run's task of ``action`` on ``host``, from its run record."""
    tasks = json.loads((last_run(home) / "run.json").read_text())["hosts"][host]["tasks"]
    return [t for t in tasks if t["action"] == action][-1]


def _flat(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


@pytest.mark.sshd
def test_a_venv_the_login_user_cannot_write_is_named_by_facts_plan_and_deploy(sshd_farm, tmp_path):
    h = sshd_farm.start("ro-venv", shell="bash")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    venv = sshd_farm.root / "venv-of-root"  # root's venv; the login user may run it, not write it
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True)
    sp = subprocess.run([str(venv / "bin" / "python3"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        check=True, capture_output=True, text=True).stdout.strip()
    wheel = _wheel(sshd_farm.root / "wheels")
    play = tmp_path / "play.yaml"
    play.write_text(INSTALL_PLAY.format(wheel=wheel))
    work = Path(os.path.expanduser(f"~{h.user}")) / "fleetctl-work"
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"rov": {**h.inventory_vars(sshd_farm.known_hosts),
                                                                "venv": str(venv), "workdir": str(work)}}})
    before = sorted(os.listdir(sp))
    line = (f"venv's site-packages {sp} is not writable by {h.user} (owned by root): pip would fail in the middle "
            f"of the install (Permission denied); fix: deploy as root (ansible_user), give {h.user} write access "
            f"to the venv, or point the host var 'venv' at a venv {h.user} owns")

    facts = fleetctl("-i", str(inv), "facts", "--hosts", "g", home=tmp_path, env={"COLUMNS": "250"})
    assert facts.returncode == 1, facts.stdout + facts.stderr
    assert "rov: FAILED (the cause below)" in facts.stdout, facts.stdout
    assert f"FAILED: {line}; a deploy refuses this host until it is fixed" in _flat(facts.stdout), facts.stdout
    base = ("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play))
    plan = fleetctl(*base, "--plan", "--json", home=tmp_path)
    assert plan.returncode == 1, plan.stdout + plan.stderr
    tasks = json.loads(plan.stdout)["rov"]["tasks"]
    assert any(t["msg"] == f"preflight: {line}" for t in tasks), tasks
    dep = fleetctl(*base, home=tmp_path)
    assert dep.returncode == 1, dep.stdout[-3000:]
    task = _task(tmp_path, "rov", "pip_install")
    assert task["status"] == "failed" and task["msg"].startswith(f"preflight: {line}"), task
    assert sorted(os.listdir(sp)) == before  # nothing was installed, nothing half-written


@pytest.mark.sshd
def test_a_venv_the_login_user_owns_but_made_read_only_gets_the_chmod_fix_not_deploy_as_itself(sshd_farm, tmp_path):
    """Operator trial: ``chmod a-w site-packages`` on a venv the login user owns; facts and
    ``--plan`` said "fix: deploy as trial15bash (ansible_user)", which it already was. The owner
    may set its own write bit again (chmod(2)): the fix is ``chmod u+w`` on the folder."""
    h = sshd_farm.start("ro-own-venv", shell="bash")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    venv = sshd_farm.root / "venv-of-login"
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True)
    sp = subprocess.run([str(venv / "bin" / "python3"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run(["chown", "-R", h.user, str(venv)], check=True)
    os.chmod(sp, 0o555)  # chmod a-w, on the login user's own folder
    before = sorted(os.listdir(sp))
    wheel = _wheel(sshd_farm.root / "wheels")
    play = tmp_path / "play.yaml"
    play.write_text(INSTALL_PLAY.format(wheel=wheel))
    work = Path(os.path.expanduser(f"~{h.user}")) / "fleetctl-work"
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"own": {**h.inventory_vars(sshd_farm.known_hosts),
                                                                "venv": str(venv), "workdir": str(work)}}})
    line = (f"venv's site-packages {sp} is not writable by {h.user}, who owns it (the owner's w bit is off, mode 0555): "
            f"pip would fail in the middle of the install (Permission denied); fix: chmod u+w {sp} (as {h.user}: "
            "the owner may set its own bits again), or point the host var 'venv' elsewhere")
    try:
        facts = fleetctl("-i", str(inv), "facts", "--hosts", "g", home=tmp_path, env={"COLUMNS": "250"})
        assert facts.returncode == 1, facts.stdout + facts.stderr
        assert f"FAILED: {line}; a deploy refuses this host until it is fixed" in _flat(facts.stdout), facts.stdout
        assert "ansible_user" not in facts.stdout, facts.stdout
        plan = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "--plan", "--json",
                        home=tmp_path)
        assert plan.returncode == 1, plan.stdout + plan.stderr
        tasks = json.loads(plan.stdout)["own"]["tasks"]
        assert any(t["msg"] == f"preflight: {line}" for t in tasks), tasks
        assert sorted(os.listdir(sp)) == before and os.stat(sp).st_mode & 0o777 == 0o555  # nothing installed or changed
    finally:
        os.chmod(sp, 0o755)


def test_the_unwritable_venv_line_gives_the_fix_that_applies_to_who_owns_it():
    """Pure: the owner's missing bits are restored with chmod; older facts (no ``owned``, no
    ``mode``) compare the names; a mode that is complete names what else refuses; another owner
    keeps "deploy as OWNER (ansible_user)"."""
    from fleetctl.facts.venv import install_problem

    def line(**fs):
        return install_problem({"python": {"site_packages_fs": {"path": "/v/sp", "writable": False, **fs}}})

    assert "fix: chmod u+w /v/sp " in line(owner="u", user="u", owned=True, mode="0555")
    assert "the owner's wx bit is off, mode 0444" in line(owner="u", user="u", owned=True, mode="0444")
    assert "fix: chmod u+w /v/sp " in line(owner="u", user="u")  # facts of an older script
    assert "fix: look at lsattr -d /v/sp and getfacl /v/sp" in line(owner="u", user="u", owned=True, mode="0755")
    other = line(owner="root", user="u", owned=False, mode="0755")
    assert "fix: deploy as root (ansible_user), give u write access" in other and "chmod" not in other


@pytest.mark.sshd
def test_a_package_folder_another_user_owns_is_refused_while_planning_and_pips_stash_is_named(sshd_farm, tmp_path):
    """Operator trial: after a ``sudo pip install`` the package's folders in the login user's venv
    are root's. ``--plan`` said reinstall, the deploy's pip moved them aside, installed, then failed
    removing them (``Permission denied: 'RECORD'``), leaving root-owned ``~oyinst`` stash folders
    that the next ``--plan`` never named. Now ``--plan`` and the deploy refuse the host naming the
    folder, its owner and the fix, and a stash left in site-packages is named with its removal."""
    h = sshd_farm.start("pkg-of-root", shell="bash")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    venv = sshd_farm.root / "venv-of-user"
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True)
    wheel = _wheel(sshd_farm.root / "wheels")
    subprocess.run([str(venv / "bin" / "python3"), "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    str(wheel)], check=True, capture_output=True)  # root's install (sudo pip install)
    sp = Path(subprocess.run([str(venv / "bin" / "python3"), "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], check=True, capture_output=True, text=True).stdout.strip())
    subprocess.run(["chown", "-R", h.user, str(venv)], check=True)
    pkg, info = sp / "toyinst", sp / "toyinst-0.1.0.dist-info"
    subprocess.run(["chown", "-R", "root", str(pkg), str(info)], check=True)
    play = tmp_path / "play.yaml"
    play.write_text(INSTALL_PLAY.format(wheel=wheel))
    work = Path(os.path.expanduser(f"~{h.user}")) / "fleetctl-work"
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"pr": {**h.inventory_vars(sshd_farm.known_hosts),
                                                               "venv": str(venv), "workdir": str(work)}}})
    base = ("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play))
    line = (f"preflight: {pkg}, a folder of the installed toyinst, is owned by root and not writable by {h.user} "
            "(and 2 more of its folders): pip "
            "must remove it to replace toyinst, and would fail in the middle of the install (Permission denied), "
            f"leaving its stash (~...) behind; fix: sudo chown -R {h.user} {pkg} {info}, or deploy as root "
            "(ansible_user); nothing was installed")

    plan = fleetctl(*base, "--plan", "--json", home=tmp_path)
    assert plan.returncode == 1, plan.stdout + plan.stderr
    assert any(t["msg"] == line for t in json.loads(plan.stdout)["pr"]["tasks"]), plan.stdout
    dep = fleetctl(*base, home=tmp_path)
    task = _task(tmp_path, "pr", "pip_install")
    assert dep.returncode == 1 and task["status"] == "failed" and task["msg"].startswith(line), task
    assert not [n for n in os.listdir(sp) if n.startswith("~")]  # pip never ran: no stash

    # what the failed pip of the trial left (its stash, root's), the folders then given back to the user
    stash = sp / "~oyinst"
    stash.mkdir()
    subprocess.run(["chown", "-R", h.user, str(pkg), str(info)], check=True)
    named = (f"pip's uninstall stash of toyinst remains from an install that failed half-way: {stash} (owned by "
             f"root); remove it: sudo rm -rf {stash}")
    dep = fleetctl(*base, home=tmp_path)
    task = _task(tmp_path, "pr", "pip_install")
    assert dep.returncode == 0 and task["status"] == "changed" and named in task["msg"], task
    plan = fleetctl(*base, "--plan", "--json", home=tmp_path)
    install = next(t for t in json.loads(plan.stdout)["pr"]["tasks"] if t["action"] == "pip_install")
    assert plan.returncode == 0 and install["decision"]["action"] == "skip" and named in install["msg"], install


def test_a_venv_on_a_full_disk_is_refused_before_pip_runs(tmp_path):
    """A wheel whose unpacked size does not fit the venv's file system is refused before pip runs
    (pip would stop with ENOSPC and leave a partial install); a file system with 0 bytes free is
    named by facts, --plan and the deploy. The workdir is elsewhere, with space."""
    with tmpfs(tmp_path / "disk", "48m") as disk:
        venv = make_venv(disk / "venv", "virtualenv", torch=False)
        sp = str(site_packages(Path(venv)))
        free_mib = shutil.disk_usage(disk).free // 1048576
        wheel = _wheel(tmp_path / "wheels", (free_mib - 8) * 1048576)  # fits the disk, not with the margin
        play = tmp_path / "play.yaml"
        play.write_text(INSTALL_PLAY.format(wheel=wheel))
        inv = write_inventory(tmp_path / "inv.yaml", {"g": {"lh": {"ansible_connection": "local", "venv": venv,
                                                                   "workdir": str(tmp_path / "work")}}})
        base = ("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play))
        dep = fleetctl(*base, home=tmp_path)
        assert dep.returncode == 1, dep.stdout[-3000:]
        task = _task(tmp_path, "lh", "pip_install")
        need = free_mib - 8 + 1 + 16  # the blob, the wheel's small files (1 MiB rounded up), the margin
        assert task["msg"].startswith(f"preflight: venv's site-packages {sp} has ") and (
            f"MiB free; {wheel.name} (unpacked, with a margin) needs {need} MiB: pip would stop with ENOSPC and "
            "leave a partial install; fix: free space on that file system, or point the host var 'venv' at a venv "
            "with space; nothing was installed") in task["msg"], task
        assert not (Path(sp) / "toyinst").exists()

        fill(disk)
        # facts' warning: facts know no playbook, so they count the shipped deploy's wheel as --plan
        # counts a wheel not built yet (nothing of its class is cached here)
        full = (f"venv's site-packages {sp} has 0 MiB free; the fp4_kernels wheel (not built yet: taken as 32 MiB "
                "unpacked, with a margin) needs 48 MiB: pip would stop with ENOSPC and leave a partial install")
        refused = (f"preflight: venv's site-packages {sp} has 0 MiB free; {wheel.name} (unpacked, with a margin) "
                   f"needs {need} MiB: pip would stop with ENOSPC")  # the one estimate, as above
        facts = fleetctl("-i", str(inv), "facts", "--hosts", "g", home=tmp_path, env={"COLUMNS": "250"})
        assert facts.returncode == 1 and "lh: FAILED (the cause below)" in facts.stdout, facts.stdout
        assert "; venv free 0 MiB;" in facts.stdout, facts.stdout
        assert f"FAILED: {full}; fix: free space on that file system, or point the host var 'venv' at a venv with " \
               "space; a deploy refuses this host until it is fixed" in _flat(facts.stdout), facts.stdout
        plan = fleetctl(*base, "--plan", "--json", home=tmp_path)
        assert plan.returncode == 1 and any(t["msg"].startswith(refused)
                                            for t in json.loads(plan.stdout)["lh"]["tasks"]), plan.stdout
        dep = fleetctl(*base, home=tmp_path)
        task = _task(tmp_path, "lh", "pip_install")
        assert dep.returncode == 1 and task["msg"].startswith(refused), task


@pytest.mark.sshd
def test_a_venv_without_room_for_the_wheel_to_build_is_refused_by_plan_and_before_the_build(sshd_farm, tmp_path):
    """A venv with more than the margin free but less than the wheel a build would make needs
    (the fresh operator's trial: 16.5 MiB free, ``--plan`` said build, the deploy built for 57 s
    and the install then refused it): ``--plan`` and the deploy use one estimate
    (``install_need_mib``) and refuse the host before anything is built."""
    from tests.test_agreement_e2e import PLAY

    h = sshd_farm.start("tight-venv")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    src = tmp_path / "toy"
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
    play = tmp_path / "play.yaml"
    play.write_text(PLAY.format(src=src))
    with tmpfs(tmp_path / "disk", "64m") as disk:
        venv = make_venv(disk / "venv", "virtualenv")
        sp = str(site_packages(Path(venv)))
        (disk / "filler").write_bytes(b"\0" * (shutil.disk_usage(disk).free - 24 * 1048576))  # 24 MiB left
        free_mib = shutil.disk_usage(disk).free // 1048576
        assert 16 < free_mib < 48, free_mib  # above the margin, below an unbuilt wheel's estimate
        inv = write_inventory(tmp_path / "inv.yaml", {"g": {"tv": {**h.inventory_vars(sshd_farm.known_hosts),
                                                                   "venv": venv, "workdir": str(tmp_path / "work")}}})
        base = ("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play))
        line = f"venv's site-packages {sp} has "  # then its free MiB (the facts', a moment later)
        need = "(not built yet: taken as 32 MiB unpacked, with a margin) needs 48 MiB: pip would stop with ENOSPC"
        # facts make --plan's check with --plan's number (operator trial: facts said ok, showing the
        # workdir's free GiB, where --plan refused), and show the venv's own free space
        facts = fleetctl("-i", str(inv), "facts", "--hosts", "g", home=tmp_path, env={"COLUMNS": "250"})
        assert facts.returncode == 1 and "tv: FAILED (the cause below)" in facts.stdout, facts.stdout
        assert f"; venv free {free_mib} MiB;" in facts.stdout, facts.stdout
        assert f"FAILED: {line}{free_mib} MiB free; the fp4_kernels wheel {need}" in _flat(facts.stdout), facts.stdout
        plan = fleetctl(*base, "--plan", "--json", home=tmp_path)
        assert plan.returncode == 1, plan.stdout + plan.stderr
        msgs = [t["msg"] for t in json.loads(plan.stdout)["tv"]["tasks"] if t["action"] == "pip_install"]
        assert msgs and msgs[0].startswith(f"preflight: {line}") and need in msgs[0], msgs
        dep = fleetctl(*base, home=tmp_path, timeout_s=600)
        assert dep.returncode == 1, dep.stdout[-3000:]
        task = _task(tmp_path, "tv", "pip_install")
        assert task["status"] == "failed" and task["msg"].startswith(f"preflight: {line}") and need in task["msg"], task
        assert not list((tmp_path / "work").rglob("*.whl")), "built although the venv cannot take the wheel"
        assert not (tmp_path / "work" / "src").exists()  # refused while planning: nothing uploaded


@pytest.mark.sshd
def test_the_room_check_counts_the_cached_class_wheels_real_size_not_the_unbuilt_estimate(sshd_farm, tmp_path):
    """The class's wheel, cached from deploying n1; n2 (same class) has a venv with 24 MiB free,
    above the margin plus the wheel's real unpacked size, below the estimate for a wheel not built
    yet (the fresh operator's trial: ``deploy --hosts B`` and ``--plan`` refused ``(not built yet:
    taken as 32 MiB unpacked, with a margin) needs 48 MiB``). ``--plan`` and the deploy both count
    the cached wheel's size: n2 is pushed the wheel and installs it."""
    from tests.test_agreement_e2e import PLAY

    src = tmp_path / "toy"
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
    play = tmp_path / "play.yaml"
    play.write_text(PLAY.format(src=src))
    with tmpfs(tmp_path / "disk", "64m") as disk:
        hosts = {}
        for name, venv in (("n1", make_venv(tmp_path / "venv-n1", "virtualenv")),
                           ("n2", make_venv(disk / "venv", "virtualenv"))):
            h = sshd_farm.start(name)
            write_fake_nvidia_smi(h.bin_dir, [H200])
            hosts[name] = {**h.inventory_vars(sshd_farm.known_hosts), "venv": venv,
                           "workdir": str(tmp_path / "work" / name)}
        inv = write_inventory(tmp_path / "inv.yaml", {"g": hosts})
        base = ("-i", str(inv), "deploy", "--playbook", str(play))
        first = fleetctl(*base, "--hosts", "n1", home=tmp_path)
        assert first.returncode == 0, first.stdout[-3000:]
        (disk / "filler").write_bytes(b"\0" * (shutil.disk_usage(disk).free - 24 * 1048576))  # 24 MiB left
        assert 17 < shutil.disk_usage(disk).free // 1048576 < 48
        plan = fleetctl(*base, "--hosts", "n2", "--plan", "--json", home=tmp_path)
        assert plan.returncode == 0, plan.stdout[-3000:] + plan.stderr[-3000:]
        tasks = {t["action"]: t for t in json.loads(plan.stdout)["n2"]["tasks"]}
        assert tasks["pip_install"]["status"] != "failed", tasks["pip_install"]
        facts = fleetctl("-i", str(inv), "facts", "--hosts", "n2", home=tmp_path, env={"COLUMNS": "250"})
        # as --plan: room for it (the test venv's torch is the controller's CPU build: facts warn of
        # that alone, as the shipped deploy's verify on the GPU refuses it)
        doc = json.loads(fleetctl("-i", str(inv), "facts", "--hosts", "n2", "--json", home=tmp_path).stdout)
        assert not [w for w in doc["n2"].get("warnings") or [] if "CPU-only" not in w], doc["n2"].get("warnings")
        assert "venv free 2" in facts.stdout, facts.stdout
        # --force rebuilds the class's wheel from the same inputs: the cached one's size is the
        # estimate (operator trial: `needs 48 MiB`, the unbuilt estimate, with that wheel cached)
        forced = fleetctl(*base, "--hosts", "n2", "--plan", "--json", "--force", home=tmp_path)
        tasks = {t["action"]: t for t in json.loads(forced.stdout)["n2"]["tasks"]}
        assert tasks["build_wheel"]["decision"]["action"] == "build", tasks["build_wheel"]
        assert tasks["pip_install"]["status"] != "failed", tasks["pip_install"]
        # a venv with less than the margin free is refused stating the one estimate (operator
        # trial: `an install needs 16 MiB`, a flat floor, at 4 MiB free; `needs 26 MiB` at 19)
        with open(disk / "filler", "ab") as f:
            f.write(b"\0" * (shutil.disk_usage(disk).free - 4 * 1048576))  # 4 MiB left
        small = fleetctl(*base, "--hosts", "n2", "--plan", "--json", home=tmp_path)
        msg = {t["action"]: t for t in json.loads(small.stdout)["n2"]["tasks"]}["pip_install"]["msg"]
        record = json.loads(next((tmp_path / "cache").rglob("record.json")).read_text())
        cached, name = record["unpacked_bytes"], record["name"]
        same = (f" MiB free; {name} (the arch class's wheel in the controller's cache: {-(-cached // 1048576)} "
                f"MiB unpacked, with a margin) needs {-(-cached // 1048576) + 16} MiB: pip would stop")
        assert small.returncode == 1 and same in msg, msg
        facts = fleetctl("-i", str(inv), "facts", "--hosts", "n2", home=tmp_path, env={"COLUMNS": "250"})
        assert facts.returncode == 1 and "n2: FAILED (the cause below)" in facts.stdout, facts.stdout
        assert same in _flat(facts.stdout), facts.stdout  # --plan's number
        (disk / "filler").write_bytes(b"\0" * (shutil.disk_usage(disk).free + 4 * 1048576 - 24 * 1048576))
        dep = fleetctl(*base, "--hosts", "n2", home=tmp_path, timeout_s=600)
        assert dep.returncode == 0, dep.stdout[-3000:]
        assert _task(tmp_path, "n2", "build_wheel")["data"]["pushed_from"] == "n1"
        assert _task(tmp_path, "n2", "pip_install")["status"] == "changed"


def test_verify_names_an_install_cut_short_and_the_fix(tmp_path):
    """A truncated file, then no dist-info and no __init__.py (what pip left on ENOSPC): verify says
    the install is incomplete, naming the files and the fix, not only ``symbols: missing``."""
    venv = make_venv(tmp_path / "venv", "virtualenv")
    sp = site_packages(Path(venv))
    play = tmp_path / "play.yaml"
    play.write_text(VERIFY_PLAY.format(wheel=_wheel(tmp_path / "wheels")))
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"lh": {"ansible_connection": "local", "venv": venv,
                                                               "workdir": str(tmp_path / "work"), "verify_device": "cpu"}}})
    verify = ("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "--tags", "verify")
    dep = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
    assert dep.returncode == 0, dep.stdout[-3000:]
    fix = "fix: free space in the venv if it is full, then fleetctl deploy --force (reinstalls it)"

    with open(sp / "toyinst" / "_C.so", "r+b") as f:
        f.truncate(100)
    res = fleetctl(*verify, home=tmp_path)
    msg = _task(tmp_path, "lh", "verify")["msg"]
    assert res.returncode == 1 and (
        f"install: toyinst in {sp} is incomplete: 1 file(s) its toyinst-0.1.0.dist-info/RECORD lists are missing or "
        f"truncated (toyinst/_C.so 100 of 4096 bytes); {fix}") in msg, msg

    shutil.rmtree(sp / "toyinst-0.1.0.dist-info")
    (sp / "toyinst" / "__init__.py").unlink()
    res = fleetctl(*verify, home=tmp_path)
    msg = _task(tmp_path, "lh", "verify")["msg"]
    assert res.returncode == 1 and (f"install: toyinst in {sp} is incomplete: no .dist-info lists it and its "
                                    f"__init__.py is missing (an install cut short: pip writes the dist-info "
                                    f"last); {fix}") in msg, msg


def test_a_file_changed_in_place_at_its_size_is_named_by_plan_verify_and_reinstalled(tmp_path):
    """Operator trial: bytes of the installed ``.so`` overwritten in place (``dd conv=notrunc``,
    the size kept): ``--plan`` said "nothing changed" and verify "every host passed", both
    comparing sizes only. Now both compare the file with its RECORD's sha256 and name it, and the
    deploy reinstalls it."""
    venv = make_venv(tmp_path / "venv", "virtualenv")
    sp = site_packages(Path(venv))
    play = tmp_path / "play.yaml"
    play.write_text(VERIFY_PLAY.format(wheel=_wheel(tmp_path / "wheels")))
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"lh": {"ansible_connection": "local", "venv": venv,
                                                               "workdir": str(tmp_path / "work"), "verify_device": "cpu"}}})
    base = ("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play))
    dep = fleetctl(*base, home=tmp_path)
    assert dep.returncode == 0, dep.stdout[-3000:]
    with open(sp / "toyinst" / "_C.so", "r+b") as f:
        f.seek(1000)
        f.write(b"CORRUPTCORRUPT!!")
    assert (sp / "toyinst" / "_C.so").stat().st_size == 4096

    res = fleetctl(*base, "--tags", "verify", home=tmp_path)
    msg = _task(tmp_path, "lh", "verify")["msg"]
    assert res.returncode == 1 and (
        f"install: toyinst in {sp} is incomplete: 1 file(s) its toyinst-0.1.0.dist-info/RECORD lists are missing, "
        "truncated or changed (toyinst/_C.so changed in place (its sha256 is not RECORD's, same size)); fix: "
        "free space in the venv if it is full, then fleetctl deploy --force (reinstalls it)") in msg, msg
    plan = fleetctl(*base, "--plan", "--json", home=tmp_path)
    tasks = json.loads(plan.stdout)["lh"]["tasks"]
    install = next(t for t in tasks if t.get("action") == "pip_install")
    assert install["decision"]["action"] == "install" and install["decision"]["why"] == (
        "installed files differ from their RECORD (toyinst/_C.so is 4096 bytes as RECORD says, but its sha256 is "
        "not RECORD's (changed in place))"), install
    dep = fleetctl(*base, home=tmp_path)
    assert dep.returncode == 0, dep.stdout[-3000:]
    assert _task(tmp_path, "lh", "pip_install")["status"] == "changed"
    assert (sp / "toyinst" / "_C.so").read_bytes() == b"\0" * 4096

    # pip's uninstall stash left by an install that failed half-way: verify names it (a warning)
    (sp / "~oyinst").mkdir()
    (sp / "~oyinst-0.1.0.dist-info").mkdir()
    res = fleetctl(*base, "--tags", "verify", home=tmp_path)
    msg = _task(tmp_path, "lh", "verify")["msg"]
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert res.returncode == 0 and (
        f"warning: pip's uninstall stash of toyinst remains from an install that failed half-way: {sp}/~oyinst (owned "
        f"by {me}), {sp}/~oyinst-0.1.0.dist-info (owned by {me}); remove it: rm -rf {sp}/~oyinst "
        f"{sp}/~oyinst-0.1.0.dist-info") in msg, msg


def test_a_torch_missing_its_own_library_is_named_by_facts_and_refused_while_planning(tmp_path):
    """torch's files read fine (version.py, libc10.so, libtorch_python.so) but libtorch_cpu.so
    was moved aside: `import torch` fails in the loader. facts warns with the import's error;
    --plan and the deploy refuse before anything is uploaded or installed."""
    import torch

    venv = make_venv(tmp_path / "venv", "venv", torch=False, build_tools=True)
    real = Path(torch.__file__).parent
    broken = site_packages(Path(venv)) / "torch"  # the real torch's files, libtorch_cpu.so moved aside
    broken.mkdir()
    for entry in real.iterdir():
        if entry.name != "lib":
            (broken / entry.name).symlink_to(entry)
    (broken / "lib").mkdir()
    for entry in (real / "lib").iterdir():
        if entry.name != "libtorch_cpu.so":
            (broken / "lib" / entry.name).symlink_to(entry)
    err = "ImportError: libtorch_cpu.so: cannot open shared object file: No such file or directory"
    said = subprocess.run([f"{venv}/bin/python3", "-c", "import torch"], capture_output=True, text=True, cwd="/")
    assert said.stderr.strip().splitlines()[-1] == err  # what the import really says

    work = tmp_path / "work"
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"lh": {"ansible_connection": "local", "venv": venv,
                                                               "workdir": str(work), "verify_device": "cpu"}}})
    facts = fleetctl("-i", str(inv), "facts", "--hosts", "g", home=tmp_path, env={"COLUMNS": "250"})
    assert facts.returncode == 1, facts.stdout + facts.stderr
    line = f"preflight: torch {torch.__version__} in {venv} does not import ({err}): fp4_kernels needs torch at run time"
    # the deploy's own line, in the one form facts gives every problem a deploy refuses
    said = _flat(facts.stdout)
    assert "lh: FAILED (the cause below)" in facts.stdout and f"FAILED: {line[len('preflight: '):]}" in said, facts.stdout
    assert "or point the host var 'venv' at a venv whose torch imports; a deploy refuses this host until it is fixed" \
        in said, facts.stdout
    base = ("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(REPO / "playbooks" / "fp4-kernels.yaml"))
    plan = fleetctl(*base, "--plan", "--json", home=tmp_path)
    assert plan.returncode == 1, plan.stdout + plan.stderr
    assert any(t["msg"].startswith(line) for t in json.loads(plan.stdout)["lh"]["tasks"]), plan.stdout
    dep = fleetctl(*base, home=tmp_path)
    tasks = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["lh"]["tasks"]
    assert dep.returncode == 1 and any(t["msg"].startswith(line) for t in tasks), tasks
    assert not (work / "src").exists() and not (work / "wheels").exists()  # nothing uploaded or built


def _unmappable_torch(site: Path, build: Path) -> None:
    """A tiny torch laid out as a real one: ``torch/_C<EXT_SUFFIX>`` (a real extension module)
    needs ``torch/lib/libtorch_cpu.so``, whose 2 GiB ``.bss`` the loader must map: under
    ``ulimit -v 1500000`` the import fails as a real CUDA torch's does there."""
    torch_dir = site / "torch"
    (torch_dir / "lib").mkdir(parents=True)
    build.mkdir()
    (build / "cpu.c").write_text("char torch_cpu_arena[2048u << 20];\n"
                                 "int torch_cpu_answer(void) { return torch_cpu_arena[0] + 42; }\n")
    (build / "c.c").write_text("#include <Python.h>\nint torch_cpu_answer(void);\n"
                               "static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, \"_C\", NULL, -1, NULL};\n"
                               "PyMODINIT_FUNC PyInit__C(void) { PyObject *m = PyModule_Create(&def);\n"
                               "  if (m) PyModule_AddIntConstant(m, \"answer\", torch_cpu_answer()); return m; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(torch_dir / "lib" / "libtorch_cpu.so"),
                    str(build / "cpu.c")], check=True)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", f"-I{sysconfig.get_paths()['include']}",
                    "-o", str(torch_dir / f"_C{sysconfig.get_config_var('EXT_SUFFIX')}"), str(build / "c.c"),
                    f"-L{torch_dir / 'lib'}", "-ltorch_cpu", "-Wl,-rpath,$ORIGIN/lib"], check=True)
    (torch_dir / "version.py").write_text("__version__ = '2.99.0+cu130'\ncuda = '13.0'\n")
    (torch_dir / "__init__.py").write_text("from .version import __version__, cuda\nfrom torch._C import *  # noqa\n")


@pytest.mark.sshd
def test_a_torch_that_cannot_import_under_the_logins_ulimit_is_refused_and_the_cache_sees_the_limit_go(
        sshd_farm, tmp_path):
    """The login's ~/.bashrc says ``ulimit -v 1500000``: torch's files read fine, but ``import
    torch`` fails in the loader. facts (which now import torch in the venv's interpreter, under
    the login's limits) warn with the import's own line, --plan refuses the host; the limit taken
    away, the next --plan sees torch import, though its kept answers (facts-cache.json) were made
    under the limit: the limits are part of what the kept answer depends on (without them, the
    second --plan repeats the first one's refusal). The lines name the limit as the cause, never a
    reinstall of torch (:func:`fleetctl.facts.venv.address_space_cause`)."""
    h = sshd_farm.start("ulimit-v")  # the current user, bash: ~/.bashrc runs for every ssh command
    write_fake_nvidia_smi(h.bin_dir, [H200])
    venv = make_venv(tmp_path / "venv", "virtualenv", torch=False, build_tools=True)
    _unmappable_torch(site_packages(Path(venv)), tmp_path / "build")
    rc = h.home / ".bashrc"
    rc.write_text("ulimit -v 1500000\n")
    err = "ImportError: libtorch_cpu.so: failed to map segment from shared object"
    said = subprocess.run(["bash", "-c", f"ulimit -v 1500000; exec {venv}/bin/python3 -c 'import torch'"],
                          capture_output=True, text=True, cwd="/")
    assert said.stderr.strip().splitlines()[-1] == err  # what the import really says there
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"lim": {**h.inventory_vars(sshd_farm.known_hosts),
                                                                "venv": venv, "workdir": str(tmp_path / "work"),
                                                                "verify_device": "cpu"}}})
    line = f"torch 2.99.0+cu130 in {venv} does not import ({err}): fp4_kernels needs torch at run time"
    # the cause is the login's limit (1500000 KiB = 1464 MiB), not torch: no reinstall is advised
    limit = ("could be built and installed but never verified; this login's address-space limit (ulimit -v, "
             "RLIMIT_AS) is 1464 MiB")

    facts = fleetctl("-i", str(inv), "facts", "--hosts", "g", home=tmp_path, env={"COLUMNS": "250"})
    assert facts.returncode == 1, facts.stdout + facts.stderr
    assert "lim: FAILED (the cause below)" in facts.stdout and f"FAILED: {line}" in _flat(facts.stdout), facts.stdout
    assert limit in _flat(facts.stdout) and "--force-reinstall" not in facts.stdout, facts.stdout
    time.sleep(2.0)  # the facts script keeps no answer about files younger than its RACY_S
    base = ("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(REPO / "playbooks" / "fp4-kernels.yaml"))
    plan = fleetctl(*base, "--plan", "--json", home=tmp_path)
    assert plan.returncode == 1, plan.stdout + plan.stderr
    assert any(t["msg"].startswith("preflight: " + line) and limit in t["msg"]
               for t in json.loads(plan.stdout)["lim"]["tasks"]), plan.stdout

    rc.write_text("")  # the limit taken away: torch imports, though the plan's kept answers were made under it
    again = fleetctl(*base, "--plan", "--json", home=tmp_path)
    assert not any("does not import" in (t["msg"] or "") for t in json.loads(again.stdout)["lim"]["tasks"]), again.stdout


def test_a_build_host_without_the_build_requirements_is_told_an_e_var_not_a_playbook_edit(tmp_path):
    """kernel_src builds in the venv, which must hold scikit-build-core and nanobind: the refusal
    names the pip command and ``-e install_build_requirements=true``, which the shipped playbook
    reads (no edit of it): with it, --plan plans the build."""
    venv = make_venv(tmp_path / "venv", "venv", torch=False)
    # torch and what it imports (facts import it), no build tools
    only_torch = tmp_path / "torch-site"
    only_torch.mkdir()
    for entry in base_site().iterdir():
        if entry.is_symlink() and not entry.name.startswith(("scikit_build_core", "nanobind")):
            (only_torch / entry.name).symlink_to(os.readlink(entry))
    (site_packages(Path(venv)) / "_torch_only.pth").write_text(f"{only_torch}\n")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"lh": {"ansible_connection": "local", "venv": venv,
                                                               "workdir": str(tmp_path / "work"), "verify_device": "cpu"}}})
    base = ("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(REPO / "playbooks" / "fp4-kernels.yaml"),
            "--plan", "--json")
    plan = fleetctl(*base, home=tmp_path)
    assert plan.returncode == 1, plan.stdout + plan.stderr
    msgs = " ".join(t["msg"] or "" for t in json.loads(plan.stdout)["lh"]["tasks"])
    assert f"build requirements missing in {venv}: scikit-build-core" in msgs and "nanobind" in msgs, msgs
    assert ("(or have the build install them: -e install_build_requirements=true with the shipped fp4-kernels "
            "playbook; install_build_requirements: true in a build_wheel task of your own)") in msgs, msgs
    plan = fleetctl(*base, "-e", "install_build_requirements=true", home=tmp_path)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    row = json.loads(plan.stdout)["lh"]
    assert row["status"] == "ok" and [b["action"] for b in row["builds"]] == ["build"], row

