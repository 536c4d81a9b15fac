"""What fleetctl installs is readable by whoever can read the venv's site-packages, whatever the
login's umask (fleetctl/tasks/venv_modes.py).

Operator trial: ``umask 077`` as line 1 of the login user's ``~/.bashrc`` (bash reads it for an ssh
command); the user's venv and its site-packages 0755. A deploy installed ``fp4_kernels/`` and its
dist-info ``drwx------`` beside a 0755 torch and said ok; another user's ``import fp4_kernels`` found
an empty namespace package. Also with ``--staged``. A real sshd test host logging in as a dedicated
bash user, a real venv of that user's, a real install (uv), a second real user importing it.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.hostvenv import uv
from tests.support.tiny_ext import link_into, write_wheel

pytestmark = pytest.mark.sshd

PACKAGE = "fp4_kernels"  # the shipped deploy's name: facts read its installed files
PLAY = """\
name: install a wheel and verify it
hosts: all
tasks:
  - name: install
    pip_install: {wheel: "{{ wheel }}"}
    tags: [install]
  - name: verify
    verify: {package: fp4_kernels, smoke: false, needs_torch: false}
    tags: [verify]
"""


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_an_install_under_a_login_umask_077_is_readable_by_other_users_and_verify_names_one_that_is_not(
        sshd_farm, tmp_path):
    from tests.support.sshd import ensure_homeless_user

    h = sshd_farm.start("umask077", shell="bash")  # a dedicated bash user: ~/.bashrc runs for ssh commands
    other = ensure_homeless_user()  # another user of the venv (a serving account), no group shared
    home = Path(h.home)
    home_mode = _mode(home)
    venv, versions = home / f"serve-{os.getpid()}", home / f".serve-{os.getpid()}-versions"
    rc = home / ".bashrc"
    old_rc = rc.read_text() if rc.exists() else None
    link_into(h.bin_dir, Path(uv()))  # the host's uv (the venv has no pip)
    wheels = sshd_farm.root / "wheels"
    wheel = write_wheel(wheels, PACKAGE, "0.1.0", {f"{PACKAGE}/__init__.py": "from .core import VALUE\n",
                                                   f"{PACKAGE}/core.py": "VALUE = 42\n"})
    wheels.chmod(0o755)
    wheel.chmod(0o644)

    def as_other_imports() -> subprocess.CompletedProcess:
        return subprocess.run(["runuser", "-u", other, "--", f"{venv}/bin/python3", "-c",
                               f"import {PACKAGE}; print({PACKAGE}.VALUE, {PACKAGE}.__file__)"],
                              capture_output=True, text=True, cwd="/")

    def site() -> Path:
        return next(Path(os.path.realpath(venv)).glob("lib/python3*/site-packages"))

    def installed_modes() -> dict[str, str]:
        sp = site()
        out = {}
        for top in (sp / PACKAGE, sp / f"{PACKAGE}-0.1.0.dist-info"):
            for path in [top, *top.rglob("*")]:
                if "__pycache__" not in path.parts:
                    out[str(path.relative_to(sp))] = oct(_mode(path))
        return out

    def readable_as_site() -> None:
        want_dir, want_file = oct(_mode(site())), oct(_mode(site()) & 0o666)
        modes = installed_modes()
        assert modes and all(m == (want_dir if (site() / p).is_dir() else want_file) for p, m in modes.items()), modes
        res = as_other_imports()
        assert res.returncode == 0 and res.stdout.startswith("42 "), res.stdout + res.stderr

    try:
        os.chmod(home, 0o755)
        subprocess.run(["runuser", "-u", h.user, "--", "/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)],
                       check=True, cwd="/", capture_output=True)
        assert _mode(site()) == 0o755
        rc.write_text("umask 077\n" + (old_rc or ""))  # line 1, as the trial's login had it
        inv = write_inventory(tmp_path / "inv.yaml", {"g": {"umask077": {
            **h.inventory_vars(sshd_farm.known_hosts), "venv": str(venv), "wheel": str(wheel)}}})
        play = tmp_path / "play.yaml"
        play.write_text(PLAY)
        umask = fleetctl("-i", str(inv), "run", "--hosts", "g", "--", "sh", "-c", "umask", home=tmp_path)
        assert "0077" in umask.stdout, umask.stdout + umask.stderr  # the login's umask is the trial's

        def deploy(*more: str, ok: bool = True) -> dict:
            res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), *more, home=tmp_path,
                           timeout_s=300)
            assert (res.returncode == 0) == ok, res.stdout[-4000:] + res.stderr[-3000:]
            record = json.loads((last_run(tmp_path) / "run.json").read_text())
            return {t["action"]: t for t in record["hosts"]["umask077"]["tasks"]}

        # a deploy under umask 077: the install has site-packages' modes, another user imports it
        tasks = deploy()
        assert tasks["pip_install"]["status"] == "changed", tasks["pip_install"]["msg"]
        readable_as_site()

        # an install left unreadable (as an older fleetctl made it under umask 077): verify names it
        # as a failure; --plan and the deploy install it again (same wheel: no --force needed)
        sp = site()
        for top in (sp / PACKAGE, sp / f"{PACKAGE}-0.1.0.dist-info"):
            subprocess.run(["chmod", "-R", "go-rwx", str(top)], check=True)
        assert as_other_imports().returncode != 0 or "None" in as_other_imports().stdout
        tasks = deploy("--tags", "verify", ok=False)
        msg = tasks["verify"]["msg"]
        assert (f"modes: {PACKAGE} in {sp} is less readable than its site-packages (0755): {PACKAGE}/ 0700" in msg
                and "other users of the venv cannot import it" in msg and "fix: fleetctl deploy" in msg), msg
        facts = fleetctl("-i", str(inv), "facts", "--hosts", "g", "--json", home=tmp_path)
        warned = [w for w in json.loads(facts.stdout)["umask077"].get("warnings") or [] if "less readable" in w]
        named = (f"installed files of {PACKAGE} are less readable than their site-packages (0755): {PACKAGE}/ 0700, "
                 f"{PACKAGE}-0.1.0.dist-info/ 0700, {PACKAGE}-0.1.0.dist-info/METADATA 0600 and ")
        assert len(warned) == 1 and warned[0].startswith(f"warning: {named}") and warned[0].endswith(
            "other users of the venv cannot import it; fix: fleetctl deploy (installs it again with site-packages' "
            "modes)"), facts.stdout[-3000:]
        planned = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "--plan", "--json",
                           home=tmp_path, timeout_s=300)
        assert named in planned.stdout, planned.stdout[-3000:]  # --plan: the same words, as why it installs again
        tasks = deploy()
        assert tasks["pip_install"]["status"] == "changed", tasks["pip_install"]["msg"]
        assert named in tasks["pip_install"]["msg"], tasks["pip_install"]["msg"]
        readable_as_site()
        facts = fleetctl("-i", str(inv), "facts", "--hosts", "g", "--json", home=tmp_path)
        assert "less readable" not in facts.stdout, facts.stdout[-3000:]

        # --staged: the staged version's install likewise, and it is what the venv path runs
        tasks = deploy("--staged", "--force", "-e", f"venv_versions_dir={versions}")
        assert tasks["pip_install"]["status"] == "changed", tasks["pip_install"]["msg"]
        assert venv.is_symlink() and Path(os.path.realpath(venv)).parent == versions
        readable_as_site()
    finally:
        if old_rc is None:
            rc.unlink(missing_ok=True)
        else:
            rc.write_text(old_rc)
        subprocess.run(["rm", "-rf", str(venv), str(versions), str(home / ".fleetctl" / "umask077")], check=False)
        os.chmod(home, home_mode)
