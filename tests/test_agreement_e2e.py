"""``--plan``, ``--dry-run`` and a real deploy agree on every host's action, over real sshd test hosts
in mixed states: fresh, up to date, built from older sources, another torch, a broken cuda_home.

The three run the same planners (docs/architecture.md); this test checks it end to end with real
builds (the toy CUDA package of tests/data/toy_kernels: one tiny kernel, seconds per build).
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from fleetctl.reporting.plan_table import plan_rows
from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.support.tiny_ext import memory_cgroup
from tests.test_deploy_e2e import make_host_venv

pytestmark = pytest.mark.sshd

PLAY = """\
name: toy kernels
hosts: all
tasks:
  - name: Upload the toy sources
    copy: {{src: {src}, dest: "{{{{ workdir }}}}/src/toy"}}
  - name: Build the toy wheel
    build_wheel: {{src: "{{{{ workdir }}}}/src/toy", out_dir: "{{{{ workdir }}}}/wheels", required_build_packages: [],
                  check_sass: false, tool: pip, min_free_disk_mib: 1}}
    register: build
  - name: Install the toy wheel
    pip_install: {{wheel: "{{{{ build.data.wheel }}}}"}}
"""


def shadow_torch(venv: str, version: str) -> None:
    """Give a host venv its own torch package (another version than the controller's): what facts
    and the build key see on that host."""
    import subprocess

    purelib = subprocess.run([f"{venv}/bin/python3", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    pkg = Path(purelib, "torch")
    pkg.mkdir()
    (pkg / "version.py").write_text(f"__version__ = {version!r}\ncuda = '13.0'\n")
    (pkg / "__init__.py").write_text("from .version import __version__\nfrom . import version\n")


def actions(hosts: dict) -> dict[str, str]:
    """host -> the build task's action as --plan shows it (build / push / skip / reinstall / fail)."""
    return {h: (r["builds"][0]["action"] if r["builds"] else r["status"]) for h, r in plan_rows(hosts).items()}


def test_plan_dry_run_and_deploy_agree_on_a_mixed_fleet(sshd_farm, tmp_path):
    src = tmp_path / "toy"
    shutil.copytree(REPO / "tests" / "data" / "toy_kernels", src)
    play = tmp_path / "play.yaml"
    play.write_text(textwrap.dedent(PLAY.format(src=src)))
    hosts, started = {}, {}
    for name in ("uptodate", "fresh", "oldsrc", "newtorch", "badcuda"):
        h = started[name] = sshd_farm.start(name)
        write_fake_nvidia_smi(h.bin_dir, [H200])
        hosts[name] = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / name),
                       "venv": make_host_venv(tmp_path / f"venv-{name}")}
    hosts["badcuda"]["cuda_home"] = str(tmp_path / "no-such-cuda")
    shadow_torch(hosts["newtorch"]["venv"], "2.99.0+cu130")
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": hosts})

    def deploy(pattern: str, *extra: str):
        return fleetctl("-i", str(inv), "deploy", "--hosts", pattern, "--playbook", str(play), *extra,
                        home=tmp_path, timeout_s=900)

    assert deploy("oldsrc").returncode == 0                       # built from the old sources
    (src / "toy.cu").write_text((src / "toy.cu").read_text() + "\n// a change\n")
    assert deploy("uptodate").returncode == 0                     # built from the new ones

    plan = deploy("fleet", "--plan", "--json")
    dry = deploy("fleet", "--dry-run", "--json")
    real = deploy("fleet", "--json")
    assert plan.returncode == dry.returncode == real.returncode == 1  # badcuda fails in all three
    planned = actions(_plan_hosts(json.loads(plan.stdout)))
    dried = actions(json.loads(dry.stdout)["hosts"])
    done = actions(json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"])
    expected = {"uptodate": "skip", "fresh": "push", "oldsrc": "push", "newtorch": "build", "badcuda": "fail"}
    assert planned == dried == done == expected, (planned, dried, done)
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    bad = record["hosts"]["badcuda"]
    assert bad["status"] == "failed" and "cuda_home" in bad["error"]
    assert not (tmp_path / "work" / "badcuda" / "src").exists()  # failed while planning: nothing uploaded
    builds = {h: [t for t in r["tasks"] if t["action"] == "build_wheel"] for h, r in record["hosts"].items()}
    assert builds["newtorch"][0]["status"] == "changed" and builds["uptodate"][0]["status"] == "ok"

    # fresh operator's trial: a host whose wheel is installed and current, its login's memory cgroup
    # then set below the build's 1024 MiB (min_free_mem_mib), was refused "only ... MiB of memory for
    # the build" in --plan and in deploy: it compiles nothing, so what a compile needs is not asked
    with memory_cgroup(started["uptodate"].proc.pid, 700, "uptodate"):
        plan = deploy("uptodate", "--plan", "--json")
        real = deploy("uptodate")
    assert plan.returncode == 0 and actions(_plan_hosts(json.loads(plan.stdout))) == {"uptodate": "skip"}, plan.stdout
    facts = json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["uptodate"]["facts"]
    assert facts["mem_limit_mib"] == 700, facts.get("mem_limit_mib")  # the limit was there: not refused for it
    assert real.returncode == 0, real.stdout[-3000:]


def _plan_hosts(doc: dict) -> dict:
    """``--plan --json`` rows back into the shape plan_rows reads (its own output is already rows)."""
    out = {}
    for host, row in doc.items():
        tasks = []
        for t in row.get("tasks", []):
            tasks.append({"name": t["task"], "action": t["action"], "status": t["status"], "msg": t.get("msg", ""),
                          "data": {"decision": t.get("decision") or {}}})
        out[host] = {"status": row["status"], "error": row.get("error"), "tasks": tasks}
    return out
