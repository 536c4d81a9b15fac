"""What the README says ``fleetctl facts`` checks of a host's venv before anything is uploaded,
facts checks, in the words ``--plan`` refuses the host with (fleetctl/facts/refusals.py's
``warning``): a venv without kernel_src's build requirements (scikit-build-core, nanobind), and a
``uv venv`` (no pip) on a host without uv. Both read ``ok`` in facts while ``--plan`` refused them.
One real sshd test host, real venvs made as users make them (tests/support/hostvenv.py).
"""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest

from fleetctl.facts.venv import DEPLOYED_BUILD_REQUIRES
from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from fleetctl.facts.refusals import BUILDER_TAIL
from tests.support.hostvenv import make_venv

pytestmark = pytest.mark.sshd

PLAYBOOK = str(REPO / "playbooks" / "fp4-kernels.yaml")
TAIL = "; a deploy refuses this host until it is fixed"
TOY_PLAY = """\
name: toy kernels, built and installed, never verified
hosts: all
tasks:
  - copy: {{src: {src}, dest: "{{{{ workdir }}}}/src/toy"}}
  - build_wheel: {{src: "{{{{ workdir }}}}/src/toy", out_dir: "{{{{ workdir }}}}/wheels", required_build_packages: [],
                  check_sass: false, tool: pip, min_free_disk_mib: 1}}
    register: build
  - pip_install: {{wheel: "{{{{ build.data.wheel }}}}"}}
"""


def test_the_deployed_build_requirements_are_kernel_srcs():
    meta = tomllib.loads((REPO / "kernel_src" / "pyproject.toml").read_text())
    assert tuple(meta["build-system"]["requires"]) == DEPLOYED_BUILD_REQUIRES


def test_facts_warn_of_a_venv_without_build_requirements_and_of_no_pip_nor_uv_as_plan_refuses(sshd_farm, tmp_path):
    h = sshd_farm.start("venvfacts")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    notools = make_venv(tmp_path / "notools", "virtualenv", torch=False, build_tools=False)
    uvvenv = make_venv(tmp_path / "uvvenv", "uv", torch=False, build_tools=True)
    conn = h.inventory_vars(sshd_farm.known_hosts)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {
        "notools": {**conn, "workdir": str(tmp_path / "w1"), "venv": notools},
        "nopip": {**conn, "workdir": str(tmp_path / "w2"), "venv": uvvenv}}})

    doc = json.loads(fleetctl("-i", str(inv), "facts", "--hosts", "g", "--json", home=tmp_path).stdout)
    plan = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", PLAYBOOK, "--plan", "--json", home=tmp_path)
    assert plan.returncode == 1, plan.stdout + plan.stderr
    rows = json.loads(plan.stdout)
    refused = {name: " ".join(t["msg"] for t in row["tasks"] if t.get("msg")) for name, row in rows.items()}

    tools = [w for w in doc["notools"]["warnings"] if "build requirements missing" in w]
    assert tools == [f"warning: build requirements missing in {notools}: scikit-build-core>=0.10, nanobind>=2.0 "
                     f"(the package's own [build-system] requires); install them into the venv: {notools}/bin/python3 "
                     f"-m pip install 'scikit-build-core>=0.10' 'nanobind>=2.0' (or have the build install them: -e "
                     f"install_build_requirements=true with the shipped fp4-kernels playbook; "
                     f"install_build_requirements: true in a build_wheel task of your own){BUILDER_TAIL}"], doc["notools"]
    assert tools[0][len("warning: "):-len(BUILDER_TAIL)] in refused["notools"], refused["notools"]

    nopip = [w for w in doc["nopip"]["warnings"] if "no pip" in w]
    line = (f"the venv {uvvenv} has no pip and this host has no uv, so nothing can build or install into it: add "
            f"pip to it ({uvvenv}/bin/python3 -m ensurepip --upgrade), or install uv on the host "
            f"(https://docs.astral.sh/uv/getting-started/installation/)")
    assert nopip == [f"warning: {line}{TAIL}"], doc["nopip"]
    assert line in refused["nopip"], refused["nopip"]
    assert not [w for w in doc["nopip"]["warnings"] if "build requirements" in w]  # it has them


def test_a_venv_whose_python_links_to_a_base_interpreter_that_is_gone_is_named_so(sshd_farm, tmp_path):
    """New-user trial: a venv whose bin/python3 is a symlink to a base interpreter that was
    upgraded away read ``venv python ... does not exist``. Facts and --plan name the link and its
    missing target, and say to make the venv again."""
    import os

    h = sshd_farm.start("dangling")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    venv = tmp_path / "venv"
    make_venv(venv, "bare", torch=False)
    gone = tmp_path / "python-3.11.4" / "bin" / "python3.11"  # the base interpreter, removed
    for name in ("python", "python3", "python3.11"):
        (venv / "bin" / name).unlink(missing_ok=True)
    os.symlink(gone, venv / "bin" / "python3.11")
    os.symlink("python3.11", venv / "bin" / "python3")
    os.symlink("python3.11", venv / "bin" / "python")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"dangling": {**h.inventory_vars(sshd_farm.known_hosts),
                                                                     "workdir": str(tmp_path / "w"), "venv": str(venv)}}})
    line = (f"venv {venv}: {venv}/bin/python3 is a symlink to {gone}, which does not exist: the base interpreter the "
            f"venv was made from is gone (Python upgraded or removed): make the venv again with a python3 that exists "
            f"(python3 -m venv --clear {venv}, then install its packages again), or point the host var 'venv' at "
            "another venv")
    res = fleetctl("-i", str(inv), "facts", "--hosts", "g", "--json", home=tmp_path)
    doc = json.loads(res.stdout)
    assert f"warning: {line}{TAIL}" in doc["dangling"]["warnings"], doc["dangling"].get("warnings")
    # a deploy refuses the host (below, with the same line), so its facts are failed, never ok
    # (docs/contracts.md, Facts), and facts exit 1
    assert res.returncode == 1 and doc["dangling"]["status"] == "failed", res.stdout + res.stderr
    assert doc["dangling"]["error"] == f"{line}{TAIL}", doc["dangling"]["error"]
    plan = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", PLAYBOOK, "--plan", "--json", home=tmp_path)
    assert plan.returncode == 1, plan.stdout + plan.stderr
    msgs = " ".join(t.get("msg") or "" for t in json.loads(plan.stdout)["dangling"]["tasks"])
    assert line in msgs and "does not exist (venv var" not in msgs, msgs


def test_facts_do_not_warn_of_missing_build_requirements_that_the_deploy_installs(sshd_farm, tmp_path):
    """A fresh operator's trial: facts warned ``build requirements missing ... a deploy refuses
    this host`` with ``install_build_requirements`` set (host var, or ``-e``), under which the
    deploy installs them. Facts read the var as the shipped playbook's build does: a note, no warning."""
    h = sshd_farm.start("installs")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    notools = make_venv(tmp_path / "notools", "virtualenv", torch=False, build_tools=False)
    conn = h.inventory_vars(sshd_farm.known_hosts)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {
        "byvar": {**conn, "workdir": str(tmp_path / "w1"), "venv": notools, "install_build_requirements": "yes"},
        "byextra": {**conn, "workdir": str(tmp_path / "w2"), "venv": notools}}})
    note = (f"build requirements missing in {notools}: scikit-build-core>=0.10, nanobind>=2.0; the deploy's build "
            "installs them first (install_build_requirements=true)")

    doc = json.loads(fleetctl("-i", str(inv), "facts", "--hosts", "byvar", "--json", home=tmp_path).stdout)
    assert not [w for w in doc["byvar"]["warnings"] if "build requirements" in w], doc["byvar"]
    assert note in doc["byvar"]["build"]["notes"], doc["byvar"]["build"]["notes"]

    # the deploy tells the facts' notes (it then refuses the host: its venv has no torch)
    dep = fleetctl("-i", str(inv), "-e", "install_build_requirements=true", "deploy", "--hosts", "byextra",
                   "--playbook", PLAYBOOK, home=tmp_path)
    out = dep.stdout + dep.stderr
    assert "build requirements missing" in out, out[-3000:]
    assert note in out and not [ln for ln in out.splitlines() if "build requirements" in ln and "warning" in ln], out
    host = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["byextra"]
    assert not [w for w in host.get("warnings") or [] if "build requirements" in w], host.get("warnings")


def test_a_venv_whose_python_links_into_a_folder_the_login_user_cannot_enter_says_so(sshd_farm, tmp_path):
    """Operator trial: root made ``python3 -m venv /tmp/x`` from root's pyenv (a folder the login
    user cannot enter); ``--plan`` said the link's target ``does not exist: the base interpreter
    ... is gone``. It exists: facts and --plan name the path, the login user and the folder."""
    import os
    import subprocess

    h = sshd_farm.start("denied", shell="bash")  # a user of its own, not root
    write_fake_nvidia_smi(h.bin_dir, [H200])
    root = sshd_farm.root / f"denied-{tmp_path.name}"
    base = root / "rootonly" / "versions" / "3.11.7" / "bin"  # root's pyenv, as root keeps it
    base.mkdir(parents=True)
    os.symlink("/usr/bin/python3", base / "python3")
    venv = root / "venv"
    try:
        subprocess.run([str(base / "python3"), "-m", "venv", "--without-pip", str(venv)], check=True)
        os.chmod(root, 0o755)
        os.chmod(root / "rootonly", 0o700)
        target = os.readlink(venv / "bin" / "python3")
        assert target.startswith(str(root / "rootonly")), target
        inv = write_inventory(tmp_path / "inv.yaml", {"g": {"denied": {
            **h.inventory_vars(sshd_farm.known_hosts), "workdir": f"~/.fleetctl-{tmp_path.name}", "venv": str(venv)}}})
        plan = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", PLAYBOOK, "--plan", "--json",
                        home=tmp_path)
        assert plan.returncode == 1, plan.stdout + plan.stderr
        msgs = " ".join(t.get("msg") or "" for t in json.loads(plan.stdout)["denied"]["tasks"])
        assert (f"{venv}/bin/python3 is a symlink to {base}/python3, which the login user {h.user} cannot run "
                f"(Permission denied: user {h.user} may not enter {root / 'rootonly'})") in msgs, msgs
        assert "does not exist" not in msgs, msgs
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_facts_warn_of_a_cpu_only_torch_on_a_gpu_host_as_plan_refuses(sshd_farm, tmp_path):
    """Operator trial: an H100 host whose venv has a CPU-only torch (``2.13.0+cpu``: its version.py
    says ``cuda = None``) read ``node03: ok: ... torch 2.13.0+cpu (cu -)`` in facts, exit 0, while
    ``deploy --plan`` refused it (verify on the GPU cannot pass). Facts warn with the refusal's own
    line (one rule: :func:`fleetctl.facts.venv.cpu_torch_problem`); ``verify_device: cpu`` clears both."""
    from tests.support.fake_gpu import H100
    from tests.support.tiny_ext import site_packages
    from tests.support.tiny_ext import fake_torch_files

    h = sshd_farm.start("node03")
    write_fake_nvidia_smi(h.bin_dir, [H100])
    venv = make_venv(tmp_path / "venv", "virtualenv", torch=False, build_tools=True)
    for rel, text in fake_torch_files("2.13.0+cpu").items():
        (site_packages(venv) / rel).parent.mkdir(parents=True, exist_ok=True)
        (site_packages(venv) / rel).write_text(text)
    entry = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "w"), "venv": venv}
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"node03": entry}})
    plan = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", PLAYBOOK, "--plan", "--json", home=tmp_path)
    assert plan.returncode == 1, plan.stdout + plan.stderr
    refusals = [t["msg"] for t in json.loads(plan.stdout)["node03"]["tasks"] if "CPU-only build" in (t.get("msg") or "")]
    assert refusals and refusals[0].startswith("preflight: torch 2.13.0+cpu in "), refusals
    line = refusals[0][len("preflight: "):]
    facts = fleetctl("-i", str(inv), "facts", "--hosts", "g", home=tmp_path, env={"COLUMNS": "250"})
    assert facts.returncode == 1 and "node03: FAILED (the cause below)" in facts.stdout, facts.stdout + facts.stderr
    doc = json.loads(fleetctl("-i", str(inv), "facts", "--hosts", "g", "--json", home=tmp_path).stdout)
    assert f"warning: {line}{TAIL}" in doc["node03"]["warnings"], doc["node03"].get("warnings")
    # a playbook of the operator's own that builds and installs, and never verifies: verify's
    # refusal is not its warning (it was, in every deploy's record: "a deploy refuses this host")
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", tmp_path / "toy")
    play = tmp_path / "toy.yaml"
    play.write_text(TOY_PLAY.format(src=tmp_path / "toy"))
    run = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "--json", home=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    host = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["node03"]
    assert host["status"] == "ok" and [t["action"] for t in host["tasks"]][-1] == "pip_install", host
    assert not [w for w in host.get("warnings") or [] if "CPU-only" in w or "refuses" in w], host.get("warnings")
    assert "CPU-only" not in run.stderr, run.stderr[-3000:]
    # verify on the CPU, as the fix says: neither refuses
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"node03": {**entry, "verify_device": "cpu"}}})
    doc = json.loads(fleetctl("-i", str(inv), "facts", "--hosts", "g", "--json", home=tmp_path).stdout)
    assert not [w for w in doc["node03"].get("warnings") or [] if "CPU-only" in w], doc["node03"]


def test_facts_warn_of_every_refusal_the_builds_facts_preflight_makes(sshd_farm, tmp_path):
    """Every line the build's facts preflight refuses a host with (whatever its role:
    :func:`fleetctl.facts.refusals.host_refusals`) is a facts warning, word for word. The host: a
    driver (535) older than the toolkit's CUDA 13 needs, which read ``ok`` in facts, and a venv
    python that is not there; verify on the CPU (the test venv's torch is a CPU build)."""

    h = sshd_farm.start("olddrv")
    write_fake_nvidia_smi(h.bin_dir, [H200], driver="535.104.05")
    venv = make_venv(tmp_path / "venv", "virtualenv", torch=True, build_tools=True)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"olddrv": {
        **h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "w"), "venv": venv,
        "verify_device": "cpu"}}})

    def refused_and_warned() -> tuple[str, list[str]]:
        plan = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", PLAYBOOK, "--plan", "--json",
                        home=tmp_path)
        assert plan.returncode == 1, plan.stdout + plan.stderr
        build = [t for t in json.loads(plan.stdout)["olddrv"]["tasks"] if t["action"] == "build_wheel"][0]
        doc = json.loads(fleetctl("-i", str(inv), "facts", "--hosts", "g", "--json", home=tmp_path).stdout)
        warned = [w[len("warning: "):-len(TAIL)] for w in doc["olddrv"].get("warnings") or [] if w.endswith(TAIL)]
        assert build["msg"].startswith("preflight: "), build
        return build["msg"][len("preflight: "):], warned

    refused, warned = refused_and_warned()  # the refusal is exactly the facts warnings it names, in order
    assert refused.startswith("driver 535.104.05 is older than nvcc 13.0 at "), refused
    assert refused == "; ".join(w for w in warned if w in refused), (refused, warned)
    shutil.rmtree(Path(venv) / "bin")  # the venv's interpreter gone too: both lines, both places
    refused, warned = refused_and_warned()
    assert refused.startswith(f"venv {venv}: ") and "driver 535.104.05" in refused, refused
    assert refused == "; ".join(w for w in warned if w in refused), (refused, warned)
