"""verify imports the package as the host's users do, not only isolated: a login environment whose
PYTHONPATH (or user site-packages) puts another copy first fails verify, naming the variable, its
value, the shadowing copy and the fix; one that holds no copy stays OK.

A new operator's trial: ``~/.bashrc`` exported ``PYTHONPATH=$HOME/junk`` holding a stale copy that
raises ImportError; verify said OK (``python -I`` ignores PYTHONPATH) while every user job failed.
Here: real sshd test hosts whose real ``~/.bashrc`` exports PYTHONPATH (bash reads it for an ssh
command), a local host whose "login environment" is the controller's (PYTHONPATH given to
fleetctl), real venvs; and the script itself with a PYTHONPATH that shadows a dependency.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.hostvenv import make_venv, site_packages

VERIFY = Path(__file__).parents[1] / "playbooks" / "scripts" / "verify_package.py"
STALE = "raise ImportError('stale shadow copy of toypkg')\n"
PLAY = """\
name: verify only
hosts: all
tasks:
  - name: Verify toypkg
    verify: {package: toypkg, needs_torch: false, device: cpu, smoke: false}
"""


def toy_venv(path: Path, *extra: str) -> Path:
    """A venv (``python -m venv --without-pip``) holding ``toypkg``, which imports ``toydep``."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", *extra, str(path)], check=True)
    sp = site_packages(path)
    (sp / "toypkg").mkdir()
    (sp / "toypkg" / "__init__.py").write_text("import toydep\nWHERE = 'venv'\n")
    (sp / "toydep.py").write_text("WHERE = 'venv'\n")
    return path


def shadow(folder: Path) -> Path:
    (folder / "toypkg").mkdir(parents=True)
    (folder / "toypkg" / "__init__.py").write_text(STALE)
    return folder


@pytest.mark.sshd
def test_a_login_pythonpath_holding_a_stale_copy_fails_verify_and_one_without_a_copy_passes(sshd_farm, tmp_path):
    venv = toy_venv(tmp_path / "venv")
    bad, good = sshd_farm.start("shadowed"), sshd_farm.start("clean")
    (bad.home / ".bashrc").write_text('export PYTHONPATH="$HOME/junk"\n')  # the operator's rc file
    (good.home / ".bashrc").write_text('export PYTHONPATH="$HOME/mine"\n')
    junk = shadow(bad.home / "junk").resolve()
    (good.home / "mine").mkdir()
    (good.home / "mine" / "helpers.py").write_text("")  # the user's own modules: no copy of toypkg
    local_junk = shadow(tmp_path / "local-junk").resolve()
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {
        "shadowed": {**bad.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "w1"), "venv": str(venv)},
        "clean": {**good.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "w2"), "venv": str(venv)},
        "here": {"ansible_connection": "local", "workdir": str(tmp_path / "w3"), "venv": str(venv)}}})
    play = tmp_path / "play.yaml"
    play.write_text(PLAY)
    here_env = {"PYTHONPATH": os.pathsep.join(p for p in (str(local_junk), os.environ.get("PYTHONPATH")) if p)}
    # the host state is real: a user's job on the shadowed host imports the stale copy
    job = fleetctl("-i", str(inv), "run", "--hosts", "shadowed", "--", f"{venv}/bin/python3", "-c", "import toypkg",
                   home=tmp_path)
    assert job.returncode == 1 and "stale shadow copy of toypkg" in job.stdout + job.stderr, job.stdout[-2000:]
    dep = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path, env=here_env)
    assert dep.returncode == 1, dep.stdout[-3000:] + dep.stderr[-3000:]
    hosts = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]
    verify = {h: [t for t in hosts[h]["tasks"] if t["action"] == "verify"][0] for h in ("shadowed", "clean", "here")}
    sp = site_packages(venv).resolve()
    for host, folder, value in (("shadowed", junk, bad.home / "junk"), ("here", local_junk, here_env["PYTHONPATH"])):
        msg = verify[host]["msg"]
        assert verify[host]["status"] == "failed", verify[host]
        assert msg.startswith(f"verify toypkg: login-import: as the host's users import it (the venv's python with "
                              f"PYTHONPATH={value}), `import toypkg` fails: ImportError: stale shadow copy of toypkg; "
                              f"toypkg comes from {folder}/toypkg/__init__.py (PYTHONPATH={value} in the login "
                              f"environment), not the venv's {sp}/toypkg/__init__.py: remove PYTHONPATH"), msg
        assert "~/.bashrc, ~/.profile" in msg and f"or delete {folder}/toypkg" in msg, msg
    assert verify["clean"]["status"] == "ok", verify["clean"]
    login = [c for c in verify["clean"]["data"]["checks"] if c["name"] == "login-import"]
    assert login == [{"name": "login-import", "ok": True, "detail": (
        f"imports the venv's copy with PYTHONPATH={good.home / 'mine'} (the login environment): no other copy "
        "of toypkg or of what it imports comes first")}], login
    assert (f"the login environment sets PYTHONPATH={bad.home / 'junk'}: fleetctl's python steps run without it, "
            "the host's users' python puts it ahead of the venv") in dep.stdout, dep.stdout[-3000:]


def run_script(venv: Path, home: Path, *extra: str) -> dict:
    """The real verify script as the planner runs it (``python -I``, from ``/``, PYTHONPATH unset)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    proc = subprocess.run([str(venv / "bin" / "python3"), "-I", str(VERIFY), "--package", "toypkg", "--venv",
                           str(venv), *extra], capture_output=True, text=True, cwd="/", timeout=120,
                          env={**env, "HOME": str(home)})
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == (0 if summary["ok"] else 1)
    return summary


def test_a_login_pythonpath_that_shadows_a_dependency_fails_when_it_breaks_the_import_else_warns(tmp_path):
    venv = toy_venv(tmp_path / "venv")
    sp = site_packages(venv).resolve()
    assert "login-import" not in {c["name"] for c in run_script(venv, tmp_path)["checks"]}  # nothing set: no check
    broken, other = tmp_path / "broken", tmp_path / "other"
    for folder, text in ((broken, "raise ImportError('stale toydep')\n"), (other, "WHERE = 'another copy'\n")):
        folder.mkdir()
        (folder / "toydep.py").write_text(text)
    got = run_script(venv, tmp_path, "--login-env", json.dumps({"PYTHONPATH": str(broken)}))
    login = [c for c in got["checks"] if c["name"] == "login-import"][0]
    assert not got["ok"] and login["detail"] == (
        f"as the host's users import it (the venv's python with PYTHONPATH={broken}), `import toypkg` fails: "
        f"ImportError: stale toydep; toydep comes from {broken.resolve()}/toydep.py (PYTHONPATH={broken} in the "
        f"login environment), not the venv's {sp}/toydep.py: remove PYTHONPATH (or {broken} in it) from the login "
        f"environment (the rc file or module that exports it: ~/.bashrc, ~/.profile, /etc/profile.d/...), or delete "
        f"{broken.resolve()}/toydep.py"), login
    got = run_script(venv, tmp_path, "--login-env", json.dumps({"PYTHONPATH": str(other)}))
    assert got["ok"], got["checks"]
    assert got["warnings"] == [f"toydep comes from {other.resolve()}/toydep.py (PYTHONPATH={other} in the login "
                               f"environment), not the venv's {sp}/toydep.py: remove PYTHONPATH (or {other} in it) "
                               f"from the login environment (the rc file or module that exports it: ~/.bashrc, "
                               f"~/.profile, /etc/profile.d/...), or delete {other.resolve()}/toydep.py"], got
