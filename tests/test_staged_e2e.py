"""Staged environments end to end (docs/staged.md): real sshd test hosts, real venvs, real pip
installs from a local wheel folder standing in for the nightly index, real nvcc compiles.

The "torch" builds are small stand-in packages written by the test (as tests/test_build_kinds_e2e.py
does): each ships ``torch/include/stagedk_api.h``, the header the kernel package
(``tests/data/staged_kernels``) compiles against. torch 2.2.0's header renamed the function the
kernel calls: that nightly breaks the kernel build. One host goes through, in order: a ``--staged``
deploy (the live venv folder adopted as v1), a good nightly, a bad one (the live venv unchanged), two
good ones in a row (3 environments kept), rollbacks, and verify after each.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.support.tiny_ext import fake_torch_files, site_packages, write_wheel
from tests.test_deploy_e2e import make_host_venv

pytestmark = pytest.mark.sshd

KERNELS = REPO / "tests" / "data" / "staged_kernels"

#: What playbooks/nightly.yaml does, with the tiny kernel package instead of sgl-kernel.
NIGHTLY = """\
name: toy nightly
hosts: all
vars:
  staged: true
  torch_spec: torch
  src_dir: "{{ workdir }}/src/stagedk"
tasks:
  - name: Stage the next environment
    venv_stage: {}
    when: staged | bool
  - name: Update torch to the nightly
    venv_upgrade: {packages: ["{{ torch_spec }}"], pre: true, pip_args: [--no-index, --find-links, "{{ wheel_folder }}"]}
  - name: Upload the kernel sources
    copy: {src: "%(src)s", dest: "{{ src_dir }}"}
  - name: Build the kernels
    build_wheel: {src: "{{ src_dir }}", out_dir: "{{ workdir }}/wheels", check_sass: false, tool: pip,
                  min_free_disk_mib: 1}
    register: build
  - name: Install the kernels
    pip_install: {wheel: "{{ build.data.wheel }}", tool: pip}
  - name: Verify the kernels
    verify: {package: stagedk, symbols: [hello, build_info], smoke: false, device: cpu}
  - name: Switch to the verified environment
    venv_switch: {to: staged}
    when: staged | bool
""" % {"src": KERNELS}

#: A plain deploy of the kernels (no torch change): run with --staged.
DEPLOY = """\
name: toy deploy
hosts: all
vars:
  src_dir: "{{ workdir }}/src/stagedk"
tasks:
  - name: Upload the kernel sources
    copy: {src: "%(src)s", dest: "{{ src_dir }}"}
  - name: Build the kernels
    build_wheel: {src: "{{ src_dir }}", out_dir: "{{ workdir }}/wheels", check_sass: false, tool: pip,
                  min_free_disk_mib: 1}
    register: build
  - name: Install the kernels
    pip_install: {wheel: "{{ build.data.wheel }}", tool: pip}
  - name: Verify the kernels
    verify: {package: stagedk, symbols: [hello, build_info], smoke: false, device: cpu}
""" % {"src": KERNELS}

VERIFY = """\
name: verify
hosts: all
tasks:
  - name: Verify the kernels
    verify: {package: stagedk, symbols: [hello, build_info], smoke: false, device: cpu}
"""


def torch_wheel(folder: Path, version: str, breaks: bool = False) -> Path:
    """A stand-in torch wheel whose header declares ``stagedk_scale`` (renamed when ``breaks``)."""
    name = "stagedk_scale_v2" if breaks else "stagedk_scale"
    header = f"#pragma once\n__device__ inline float {name}(float x) {{ return 2.0f * x; }}  // torch {version}\n"
    files = {**fake_torch_files(version), "torch/include/stagedk_api.h": header,
             # imports like torch for verify: torch.version.cuda, torch.cuda.is_available() (no GPU)
             "torch/__init__.py": f"from . import cuda, version\nfrom .version import __version__  # stand-in torch {version}\n",
             "torch/cuda/__init__.py": "def is_available():\n    return False\n\n\ndef device_count():\n    return 0\n"}
    return write_wheel(folder, "torch", version, files)


def freeze(venv: str) -> str:
    """``pip freeze`` of the venv (the controller's pip, run by the venv's interpreter)."""
    return subprocess.run([f"{venv}/bin/python3", "-m", "pip", "freeze", "--local"], check=True, capture_output=True,
                          text=True, env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
                          cwd="/").stdout


def kernel_sha(venv: str) -> str:
    """sha256 over the installed kernel package's files, as they are on disk."""
    h = hashlib.sha256()
    root = site_packages(venv)
    for path in sorted(list((root / "stagedk").rglob("*.py")) + list(root.glob("stagedk-*.dist-info/*"))):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def imports(venv: str) -> dict:
    """torch's version and the kernels' build info, imported by the venv users run."""
    out = subprocess.run([f"{venv}/bin/python3", "-c", "import json, torch, stagedk; "
                          "print(json.dumps({'torch': torch.__version__, 'built': stagedk.build_info()['torch'], "
                          "'file': stagedk.__file__}))"], check=True, capture_output=True, text=True, cwd="/")
    return json.loads(out.stdout)


def host_record(home: Path, host: str = "gpu01") -> dict:
    return json.loads((last_run(home) / "run.json").read_text())["hosts"][host]


def versions(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.is_dir())


def test_staged_deploys_nightlies_and_rollbacks(sshd_farm, tmp_path):
    h = sshd_farm.start("gpu01")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    venv = make_host_venv(tmp_path / "serve")
    wheels = tmp_path / "index"
    for v in ("2.0.0", "2.1.0", "2.3.0", "2.4.0"):
        torch_wheel(wheels / v, v)
    torch_wheel(wheels / "2.2.0", "2.2.0", breaks=True)
    subprocess.run([f"{venv}/bin/python3", "-m", "pip", "install", "-q", "--no-index", "--find-links",
                    str(wheels / "2.0.0"), "torch==2.0.0"], check=True, cwd="/")
    work = tmp_path / "work"
    inv = write_inventory(tmp_path / "inv.yaml", {"gpus": {"gpu01": {
        **h.inventory_vars(sshd_farm.known_hosts), "workdir": str(work), "venv": venv}}})
    (tmp_path / "nightly.yaml").write_text(NIGHTLY)
    (tmp_path / "deploy.yaml").write_text(DEPLOY)
    (tmp_path / "verify.yaml").write_text(VERIFY)

    def run(*args: str, ok: bool = True):
        res = fleetctl("-i", str(inv), *args, home=tmp_path, timeout_s=900)
        assert (res.returncode == 0) == ok, res.stdout[-6000:] + res.stderr[-3000:]
        return res

    def nightly(version: str, ok: bool = True):
        return run("deploy", "--hosts", "gpus", "--playbook", str(tmp_path / "nightly.yaml"),
                   "-e", f"wheel_folder={wheels / version}", "-e", f"torch_spec=torch=={version}", ok=ok)

    def verify():
        run("verify", "--hosts", "gpus", "--playbook", str(tmp_path / "verify.yaml"))
        return host_record(tmp_path)["tasks"][-1]

    # --plan and --dry-run show the stage and the switch; nothing changes
    plan = run("deploy", "--hosts", "gpus", "--playbook", str(tmp_path / "deploy.yaml"), "--staged", "--dry-run")
    assert "venv_envs.py" in plan.stdout and '"stage"' in plan.stdout and '"switch"' in plan.stdout
    plan = run("deploy", "--hosts", "gpus", "--playbook", str(tmp_path / "deploy.yaml"), "--staged", "--plan")
    assert "stage v2" in plan.stdout and "switch live folder -> v2" in plan.stdout and "build" in plan.stdout
    assert Path(venv).is_dir() and not Path(venv).is_symlink() and not (work / "envs").exists()

    # 1. a --staged deploy: the real venv folder is adopted as v1 (moved, not copied), v2 goes live
    inode = os.stat(venv).st_ino
    run("deploy", "--hosts", "gpus", "--playbook", str(tmp_path / "deploy.yaml"), "--staged")
    assert Path(venv).is_symlink()
    folder = Path(os.path.realpath(venv)).parent
    assert folder == Path(venv).parent / ".serve-versions" and Path(os.path.realpath(venv)).name == "v2"
    assert os.stat(folder / "v1").st_ino == inode  # the old folder itself, renamed
    # the install record went into v2 (live only with the switch), not the folder live during the
    # run; v2's id file is its own copy (new-user trial: a failed staged deploy rewrote the live record)
    assert json.loads((folder / "v2" / ".fleetctl-install.json").read_text())["host"] == "gpu01"
    assert not (folder / "v1" / ".fleetctl-install.json").exists()
    assert os.stat(folder / "v2" / ".fleetctl-id").st_ino != os.stat(folder / "v1" / ".fleetctl-id").st_ino
    env = host_record(tmp_path)["environment"]
    assert env["state"] == "live" and env["live"]["version"] == 2 and env["live"]["torch"] == "2.0.0"
    assert env["live"]["kernels"]["stagedk"]["wheel_sha256"]  # the installed wheel, named by its sha256
    assert env["live"]["live_since"]
    assert imports(venv)["built"] == "2.0.0"
    assert verify()["status"] == "ok"
    # ...holding the live folder's id, never where the live folder was: a version is no copy of a
    # venv (facts would give it a fresh id, and its install record would stop counting)
    first = (folder / "v1" / ".fleetctl-id").read_text().splitlines()[0]
    assert (folder / "v2" / ".fleetctl-id").read_text().splitlines()[0] == first
    # the venv's torch is a CPU-only build on a GPU host: the shipped deploy's verify refuses it,
    # so facts fail the host (exit 1) with that line; the facts are there all the same
    facts = json.loads(run("facts", "--hosts", "gpus", "--json", ok=False).stdout)
    assert "CPU-only build" in facts["gpu01"]["error"], facts["gpu01"]["error"]
    facts = facts.get("gpu01", facts.get("hosts", {}).get("gpu01"))
    venv_target = (facts.get("facts", facts))["targets"]["venv"]
    assert venv_target["copied"] is None and venv_target["installed_copied"] is None, venv_target
    assert venv_target["id"] == first

    # 1b. the same --staged deploy again, nothing changed: no new version, v2 stays live (no switch
    # to restart for), in --plan and the deploy alike
    plan = json.loads(run("deploy", "--hosts", "gpus", "--playbook", str(tmp_path / "deploy.yaml"), "--staged",
                          "--plan", "--json").stdout)["gpu01"]
    envs = {t["action"]: (t["status"], t["decision"]["action"], t["msg"]) for t in plan["tasks"]
            if t["action"].startswith("venv_")}
    keep = ("ok", "skip", "nothing to change: the live venv stays v2")
    assert envs == {"venv_stage": keep, "venv_switch": keep} and [b["action"] for b in plan["builds"]] == ["skip"]
    run("deploy", "--hosts", "gpus", "--playbook", str(tmp_path / "deploy.yaml"), "--staged")
    assert versions(folder) == ["v1", "v2"] and Path(os.path.realpath(venv)).name == "v2"
    rec = host_record(tmp_path)
    assert rec["environment"]["state"] == "live" and not rec["environment"]["switched"]
    assert rec["environment"]["live"]["version"] == 2
    assert {t["action"]: t["msg"] for t in rec["tasks"]}["venv_switch"] == "nothing to change: the live venv stays v2"
    assert all(t["status"] == "ok" for t in rec["tasks"])

    # 2. a good nightly: torch moves in v3, the kernels are built against it there, verified, switched
    nightly("2.1.0")
    assert Path(os.path.realpath(venv)).name == "v3"
    got = imports(venv)
    assert got == {**got, "torch": "2.1.0", "built": "2.1.0"} and "/v3/" in os.path.realpath(got["file"])
    rec = host_record(tmp_path)
    tasks = {t["action"]: t for t in rec["tasks"]}
    assert "torch 2.0.0 (CPU) -> 2.1.0" in tasks["venv_upgrade"]["msg"]
    assert rec["environment"]["live"]["torch"] == "2.1.0" and rec["environment"]["previous"] == 2
    assert verify()["status"] == "ok"

    # 3. a bad nightly (its torch breaks the kernel build): the live venv is untouched
    before = (freeze(venv), kernel_sha(venv), os.path.realpath(venv), (Path(venv) / ".fleetctl-install.json").read_bytes())
    res = nightly("2.2.0", ok=False)
    assert "stagedk_scale" in res.stdout + res.stderr  # the compiler's own error is the summary
    assert (freeze(venv), kernel_sha(venv), os.path.realpath(venv), (Path(venv) / ".fleetctl-install.json").read_bytes()) == before
    assert imports(venv)["torch"] == "2.1.0"
    rec = host_record(tmp_path)
    assert rec["status"] == "failed"
    env = rec["environment"]
    assert env["state"] == "not switched" and env["failed_stage"] == "build" and env["failed_action"] == "build_wheel"
    assert env["live"]["version"] == 3 and env["staged"]["version"] == 4 and env["staged"]["torch"] == "2.2.0"
    # kept on purpose for the post-mortem, and said in one line: where, and what it holds (MiB)
    v4 = folder / "v4"
    kept = [w for w in rec["warnings"] if w.startswith(f"staged v4 kept for inspection at {v4}, ")]
    assert v4.is_dir() and kept and " MiB when staged, " in kept[0] and "the next stage removes it" in kept[0], rec
    assert kept[0] in " ".join(res.stdout.split()), res.stdout[-3000:]
    assert verify()["status"] == "ok"
    # the report and the metrics say which environment runs and which stage failed
    bad_run = sorted(p for p in (tmp_path / "runs").iterdir() if p.is_dir())[-2]
    run("report", bad_run.name, "--html", str(tmp_path / "bad.html"))
    page = (tmp_path / "bad.html").read_text()
    assert "v3 since" in page and "staged v4 failed at build" in page and "torch 2.1.0" in page
    from fleetctl.reporting.metrics import registry_for
    from prometheus_client import generate_latest
    text = generate_latest(registry_for(json.loads((bad_run / "run.json").read_text()))).decode()
    assert 'fleetctl_host_environment_info{' in text and 'failed_stage="build"' in text and 'version="3"' in text
    verify_run = sorted(p for p in (tmp_path / "runs").iterdir() if p.is_dir())[-1]
    run("report", verify_run.name, "--html", str(tmp_path / "verify.html"))
    assert "v3 since" in (tmp_path / "verify.html").read_text()  # a verify run names it too (from facts)

    # 4. two good nightlies in a row: the failed stage is cleared, 3 environments kept at most
    nightly("2.3.0")
    assert versions(folder) == ["v2", "v3", "v5"]  # v4 (the failed stage) cleared, v1 the oldest pruned
    nightly("2.4.0")
    assert versions(folder) == ["v3", "v5", "v6"] and Path(os.path.realpath(venv)).name == "v6"
    assert imports(venv)["torch"] == "2.4.0"
    index = json.loads((folder / "envs.json").read_text())
    assert [h["why"] for h in index["history"]][-2:] == ["deploy", "deploy"]

    # 5. rollback: back to the environment live before (torch 2.3.0), verify passes there
    live_before = Path(os.path.realpath(venv)).name
    run("rollback", "--hosts", "gpus")
    assert imports(venv) == {**imports(venv), "torch": "2.3.0", "built": "2.3.0"}
    rec = host_record(tmp_path)
    assert rec["environment"]["live"]["torch"] == "2.3.0" and f"v{rec['environment']['previous']}" == live_before
    assert verify()["status"] == "ok"
    # --to N, and a version that was pruned is refused, naming what is there
    oldest = versions(folder)[0]
    run("rollback", "--hosts", "gpus", "--to", oldest[1:])
    assert Path(os.path.realpath(venv)).name == oldest
    res = run("rollback", "--hosts", "gpus", "--to", "1", ok=False)
    assert "no environment v1" in res.stdout + res.stderr
    # facts show the environments and their disk use
    assert f"gpu01: environments in {folder}: live {oldest}" in run("facts", "--hosts", "gpus", ok=False).stdout
    facts = json.loads(run("facts", "--hosts", "gpus", "--json", ok=False).stdout)["gpu01"]
    assert facts["environments"]["live_version"] == int(oldest[1:])
    assert set(facts["environments"]["disk"]["versions"]) == {v[1:] for v in versions(folder)}


#: A play that changes the host (``command`` always reports changed) and one that changes nothing
#: (``creates: /`` exists: skipped), both deployed with --staged.
CHANGES = "name: e\nhosts: all\ngather_facts: false\ntasks:\n  - name: hi\n    command: {argv: [echo, hi]}\n"
NO_CHANGE = ("name: e\nhosts: all\ngather_facts: false\ntasks:\n  - name: hi\n"
             "    command: {argv: [echo, hi], creates: /}\n")


def test_a_staged_switch_keeps_the_venv_runnable_by_other_users(sshd_farm, tmp_path):
    """The trial's finding: the login user's venv in a home other users can enter (0755) is run by
    a serving account. A --staged deploy switches it; that account must still run the venv's
    python (before the fix the versions went into the login's 0700 ``~/.fleetctl/<host>`` and it
    got Permission denied, exit 0); so must it after a rollback. A versions folder it could not
    reach is refused while planning, nothing switched. The adopt note is told only when a version
    is staged."""
    from tests.support.sshd import ensure_homeless_user

    h = sshd_farm.start("stagedusers", shell="bash")  # logs in as a dedicated test user
    other = ensure_homeless_user()  # the serving account: not the login user, no group shared
    home = Path(h.home)
    home_mode = os.stat(home).st_mode & 0o7777
    venv, versions = home / "serve", home / ".serve-versions"
    workdir = home / ".fleetctl" / "stagedusers"
    as_login = ["runuser", "-u", h.user, "--"]

    def as_other(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(["runuser", "-u", other, "--", *argv], capture_output=True, text=True, cwd="/")

    def other_runs_the_venv() -> str:
        res = as_other(f"{venv}/bin/python3", "-c", "import sys; print(sys.prefix)")
        assert res.returncode == 0, res.stderr
        return res.stdout.strip()

    try:
        os.chmod(home, 0o755)
        subprocess.run([*as_login, "/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True, cwd="/")
        assert other_runs_the_venv() == str(venv)
        inv = write_inventory(tmp_path / "inv.yaml", {"gpus": {"gpu01": {
            **h.inventory_vars(sshd_farm.known_hosts), "venv": str(venv)}}})
        (tmp_path / "changes.yaml").write_text(CHANGES)
        (tmp_path / "nochange.yaml").write_text(NO_CHANGE)

        def run(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
            res = fleetctl("-i", str(inv), *args, home=tmp_path, timeout_s=300)
            assert (res.returncode == 0) == ok, res.stdout[-4000:] + res.stderr[-3000:]
            return res

        def deploy(play: str, *more: str, ok: bool = True) -> subprocess.CompletedProcess:
            return run("deploy", "--hosts", "gpus", "--playbook", str(tmp_path / play), "--staged", *more, ok=ok)

        def notes(res: subprocess.CompletedProcess) -> list[str]:
            return [line for line in res.stdout.splitlines() if "| note: " in line]

        # a versions folder the serving account cannot reach (inside the login's 0700 workdir) is
        # refused while planning, naming the host, the venv and the var; nothing moves
        res = deploy("changes.yaml", "-e", f"venv_versions_dir={workdir}/envs/serve", ok=False)
        out = res.stdout + res.stderr
        assert "host gpu01: other users can run" in out and str(venv) in out and "venv_versions_dir" in out, out
        assert venv.is_dir() and not venv.is_symlink() and not notes(res)
        assert "Traceback" not in out

        # --plan tells no note (nothing is staged); the deploy tells the adoption once
        assert not notes(deploy("changes.yaml", "--plan"))
        told = notes(deploy("changes.yaml"))
        assert len(told) == 1 and "adopts it as v1" in told[0], told
        assert venv.is_symlink() and Path(os.path.realpath(venv)) == versions / "v2"
        assert not (workdir / "envs").exists()  # nothing of production under the scratch folder
        assert stat_mode(versions) == 0o755 and other_runs_the_venv() == str(venv)

        # nothing to change: nothing staged, no note
        res = deploy("nochange.yaml")
        assert not notes(res) and Path(os.path.realpath(venv)).name == "v2", res.stdout

        # rollback to the adopted v1: still the serving account's
        run("rollback", "--hosts", "gpus")
        assert Path(os.path.realpath(venv)) == versions / "v1" and other_runs_the_venv() == str(venv)

        # an install staged before this default, its versions in the private workdir (made while
        # the home was the login's alone, so nobody was refused): it keeps working there, stage and
        # rollback alike, and the stage says who cannot run it
        subprocess.run(["rm", "-rf", str(venv), str(versions)], check=True)
        subprocess.run([*as_login, "/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True, cwd="/")
        os.chmod(home, 0o700)
        old = workdir / "envs" / "serve-0123abcd"
        deploy("changes.yaml", "-e", f"venv_versions_dir={old}")
        assert Path(os.path.realpath(venv)) == old / "v2"
        os.chmod(home, 0o755)
        told = notes(deploy("changes.yaml"))
        assert Path(os.path.realpath(venv)) == old / "v3" and not versions.exists()
        assert any(f"other users cannot run {venv}: it leads into {old}" in n for n in told), told
        run("rollback", "--hosts", "gpus")
        assert Path(os.path.realpath(venv)) == old / "v2"
        assert subprocess.run([f"{venv}/bin/python3", "-c", "1"], cwd="/").returncode == 0
    finally:
        subprocess.run(["rm", "-rf", str(venv), str(versions), str(workdir)], check=False)
        os.chmod(home, home_mode)


def stat_mode(path: Path) -> int:
    return os.stat(path).st_mode & 0o7777


#: A deploy that changes the venv without building: an upgrade from a local index, then a wheel's install.
UPGRADE_INSTALL = """\
name: upgrade and install
hosts: all
tasks:
  - name: Update the dependency
    venv_upgrade: {packages: ["toydep==1.1"], pip_args: [--no-index, --find-links, "%(index)s"]}
  - name: Install the kernels
    pip_install: {wheel: "%(wheel)s", tool: pip}
"""


def _commands(planned_or_events: list[dict], run_id: str) -> list[list[str]]:
    """The argv of every command that changes the host, the run's own id read as RUN."""
    return [[a.replace(run_id, "RUN") for a in argv] for argv in planned_or_events]


def test_a_staged_dry_run_shows_the_commands_the_staged_deploy_runs(sshd_farm, tmp_path):
    """``deploy --staged --dry-run`` names the staged version's paths (its python, its pip) for the
    install and record commands, exactly the commands the real ``--staged`` deploy then runs, not
    the live venv's (an operator reading the dry run would think the live venv is changed)."""
    h = sshd_farm.start("gpu01")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    venv = make_host_venv(tmp_path / "serve")
    index = tmp_path / "index"
    for v in ("1.0", "1.1"):
        write_wheel(index, "toydep", v, {"toydep/__init__.py": f"V = {v!r}\n"})
    subprocess.run([f"{venv}/bin/python3", "-m", "pip", "install", "-q", "--no-index", "--find-links", str(index),
                    "toydep==1.0"], check=True, cwd="/")
    wheel = write_wheel(tmp_path / "wheels", "toykern", "0.1", {"toykern/__init__.py": "K = 1\n"})
    inv = write_inventory(tmp_path / "inv.yaml", {"gpus": {"gpu01": {
        **h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work"), "venv": venv}}})
    play = tmp_path / "play.yaml"
    play.write_text(UPGRADE_INSTALL % {"index": index, "wheel": wheel})

    def deploy(*more: str) -> subprocess.CompletedProcess:
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "gpus", "--playbook", str(play), "--staged", *more,
                       home=tmp_path, timeout_s=300)
        assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-3000:]
        return res

    dry = json.loads(deploy("--dry-run", "--json").stdout)
    dry_id = dry["run_id"]
    shown = {t["name"]: _commands([s["argv"] for s in t.get("planned") or [] if s.get("argv")], dry_id)
             for t in dry["hosts"]["gpu01"]["tasks"]}
    assert any(str(Path(venv).parent / ".serve-versions" / "v2" / "bin" / "python3") in argv[0]
               for argv in shown["Install the kernels"]), shown  # the staged version's interpreter installs
    assert not any(argv[0].startswith(f"{venv}/") for cmds in shown.values() for argv in cmds), shown  # never the live one's
    deploy()
    run_dir = last_run(tmp_path)
    ran: dict[str, list] = {}  # every command of each task, in order: (argv, a probe)
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        ev = json.loads(line)
        if ev.get("event") == "command.started" and ev.get("host") == "gpu01":
            argv = [(run_dir / a.split()[0][1:]).read_text() if a.startswith("@scripts/") else a  # the record's
                    for a in ev["argv"]]  # long texts are kept once in <run>/scripts/
            ran.setdefault(ev.get("task"), []).append((_commands([argv], run_dir.name)[0], bool(ev.get("probe"))))
    for task in set(ran) | set(shown):
        done = [argv for argv, _ in ran.get(task, [])]
        changes = [argv for argv, probe in ran.get(task, []) if not probe]
        planned = shown.get(task) or []
        it = iter(done)  # the dry run's commands are the deploy's, in its order (its probes besides)
        missing = [argv for argv in planned if argv not in it]
        cut = [[[x[:300] for x in argv] for argv in cmds] for cmds in (missing, done)]
        assert not missing, json.dumps([task, *cut], indent=1)
        # and every command that changed the host was shown
        assert [a for a in planned if a in changes] == changes, json.dumps([task, planned, changes], indent=1)[:6000]
