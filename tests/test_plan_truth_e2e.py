"""The plan tells the truth after a failure: a real nvcc build on real sshd test hosts, then a
``--force`` build that fails (its compiler fails the way a broken toolkit does); ``--plan`` still
names the wheel installed, ``--dry-run`` names the class's real builder and wheel, and the failed
build's class line prints the class's real arch, CUDA and torch. The package built is the toy CUDA
package (tests/data/toy_kernels: real nvcc, seconds): what is checked is the engine's and the
plan's, whatever the package."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.test_agreement_e2e import PLAY
from tests.test_deploy_e2e import host_entry, make_host_venv

pytestmark = pytest.mark.sshd


def breakable_cuda_home(root: Path, marker: Path) -> Path:
    """A CUDA home whose nvcc fails every compile while ``marker`` exists, else is the real one."""
    real = Path("/usr/local/cuda")
    home = root / "cuda-breakable"
    (home / "bin").mkdir(parents=True)
    for entry in real.iterdir():
        if entry.name != "bin":
            (home / entry.name).symlink_to(entry)
    for tool in (real / "bin").iterdir():
        if tool.name != "nvcc":
            (home / "bin" / tool.name).symlink_to(tool)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case " $* " in *" -c "*|*" -cubin "*) if [ -e {marker} ]; then echo "nvcc fatal   : Could not open output file" >&2; exit 1; fi;; esac
        exec /usr/local/cuda/bin/nvcc "$@"
        """))
    nvcc.chmod(0o755)
    return home


def test_plan_dry_run_and_class_lines_tell_the_truth_after_a_failed_forced_build(sshd_farm, tmp_path):
    marker = tmp_path / "broken"
    cuda = breakable_cuda_home(tmp_path, marker)
    hosts = {}
    for name in ("a", "b"):
        h = sshd_farm.start(f"truth-{name}")
        write_fake_nvidia_smi(h.bin_dir, [H200])
        hosts[name] = host_entry(sshd_farm, h, tmp_path, venv=make_host_venv(tmp_path / f"venv-{name}"),
                                 cuda_home=str(cuda))
    inv = write_inventory(tmp_path / "inv.yaml", {"gpu-nodes": hosts})
    src = tmp_path / "toy"
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
    play = tmp_path / "play.yaml"
    play.write_text(PLAY.format(src=src))
    i = ["-i", str(inv)]
    p = ["--playbook", str(play)]
    res = fleetctl(*i, "deploy", "--hosts", "a", *p, home=tmp_path, timeout_s=1500)
    assert res.returncode == 0, res.stdout[-4000:]
    wheel = next(t for t in json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["a"]["tasks"]
                 if t["action"] == "build_wheel")["data"]["wheel"].rsplit("/", 1)[-1]

    # --dry-run for both: b receives a's class wheel, named, from a (never "<class wheel>"/"<builder>")
    res = fleetctl(*i, "deploy", "--hosts", "gpu-nodes", *p, "--dry-run", home=tmp_path)
    assert res.returncode == 0, res.stdout[-4000:]
    assert "<class wheel>" not in res.stdout and "<builder>" not in res.stdout
    assert wheel in res.stdout.split("--- b: planned commands", 1)[1]

    marker.touch()
    res = fleetctl(*i, "deploy", "--hosts", "a", *p, "--force", home=tmp_path, timeout_s=1500)
    assert res.returncode == 1, res.stdout[-4000:]
    assert "Could not open output file" in res.stdout
    summary = res.stdout
    assert "None" not in "\n".join(ln for ln in summary.splitlines() if "sm_90a" in ln or "arch " in ln)
    assert "torch?" not in summary and "cuNone" not in summary
    assert any("sm_90a cu" in ln and "torch2." in ln for ln in summary.splitlines()), summary[-3000:]

    # the earlier wheel is still installed, its stamp kept by the failed build: --plan reuses it and
    # names it (never "nothing installed", nor a rebuild for a stamp the failure removed)
    marker.unlink()
    res = fleetctl(*i, "deploy", "--hosts", "a", *p, "--plan", "--json", home=tmp_path)
    plan = json.loads(res.stdout)
    build = next(t for t in plan["a"]["tasks"] if t["action"] == "build_wheel")
    decision = build["decision"]
    assert decision["action"] == "reuse" and decision["installed"] is True and decision["changed"] == [], build
    assert build["msg"] == f"unchanged inputs: reusing {wheel}", build


def test_a_plans_log_says_what_it_would_do_in_its_tables_words(sshd_farm, tmp_path):
    """Operator trial: ``logs <plan run> qa`` read ``==> Install ...: CHANGED installed <built wheel>
    (pip): none was installed before`` of a venv holding fp4_kernels, the plan's table having said
    it was installed. A plan's log says WOULD CHANGE, as its table does, and names what the venv
    holds (the venv's install record: the wheel to be built has no name yet)."""
    from tests.test_platform_targets_e2e import _setup

    play = _setup(tmp_path)
    h = sshd_farm.start("pl")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": {"pl": {
        **h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work"),
        "venv": make_host_venv(tmp_path / "venv")}}})
    base = ("-i", str(inv), "deploy", "--hosts", "pl", "--playbook", str(play))
    first = fleetctl(*base, home=tmp_path, timeout_s=600)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    plan = fleetctl(*base, "--plan", "--force", "--json", home=tmp_path, timeout_s=600)
    assert plan.returncode == 0, plan.stdout[-3000:] + plan.stderr[-3000:]
    install = next(t for t in json.loads(plan.stdout)["pl"]["tasks"] if t["action"] == "pip_install")
    logs = fleetctl("logs", last_run(tmp_path).name, "pl", home=tmp_path, timeout_s=60)
    assert logs.returncode == 0, logs.stderr
    line = next(ln for ln in logs.stdout.splitlines() if ln.startswith("==> Install the toy wheel: "))
    assert line == f"==> Install the toy wheel: {install['status'].upper()} {install['msg']}", (line, install)
    assert line.startswith("==> Install the toy wheel: WOULD CHANGE would install "), line
    assert "none was installed before" not in line and "replaced the earlier wheel" in line, line
