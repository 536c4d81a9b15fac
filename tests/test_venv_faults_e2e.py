"""Venvs where ``fleetctl facts`` said ok and ``deploy --plan`` said push, and the deploy then
failed (a new operator's trial): a venv the login user cannot write, a venv on a full disk, a
torch whose own library was moved aside, and an install cut short that verify named only as
``symbols: missing``. Each is made real: a real sshd login as an unprivileged user, a real tmpfs,
real venvs (tests/support/hostvenv.py), a real torch's files, real wheels installed by pip.
The rules: fleetctl/facts/venv.py, fleetctl/tasks/pip_install.py, fleetctl/tasks/runtime_preflight.py,
playbooks/scripts/verify_package.py (``install_problem``).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.support.hostvenv import make_venv, site_packages

def _flat(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


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
    assert facts.returncode == 0, facts.stdout + facts.stderr
    assert "lh: WARNING (below)" in facts.stdout and (
        f"warning: venv {venv}: torch {torch.__version__} does not import ({err})") in _flat(facts.stdout), facts.stdout
    line = f"preflight: torch {torch.__version__} in {venv} does not import ({err}): fp4_kernels needs torch at run time"
    base = ("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(REPO / "playbooks" / "fp4-kernels.yaml"))
    plan = fleetctl(*base, "--plan", "--json", home=tmp_path)
    assert plan.returncode == 1, plan.stdout + plan.stderr
    assert any(t["msg"].startswith(line) for t in json.loads(plan.stdout)["lh"]["tasks"]), plan.stdout
    dep = fleetctl(*base, home=tmp_path)
    tasks = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["lh"]["tasks"]
    assert dep.returncode == 1 and any(t["msg"].startswith(line) for t in tasks), tasks
    assert not (work / "src").exists() and not (work / "wheels").exists()  # nothing uploaded or built
