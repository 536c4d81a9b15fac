"""``fleetctl deploy`` end to end: real sshd test hosts, real nvcc builds, real pip installs into real venvs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.fake_gpu import H200, RTX_PRO_6000, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, last_run, write_inventory
from tests.support.hostvenv import make_venv

pytestmark = pytest.mark.sshd


def make_host_venv(path: Path, kind: str = "virtualenv") -> str:
    """A real venv for one test host, made as users make them (``kind``: see
    :mod:`tests.support.hostvenv`); torch and the build requirements come from a folder holding
    only those (:func:`~tests.support.hostvenv.base_site`, through a .pth file), never the
    controller's ``.venv``, where ``fleetctl deploy --hosts local`` installs fp4_kernels; what
    fleetctl installs lands in the host venv's own site-packages, which comes first on sys.path."""
    return make_venv(path, kind)


def host_entry(farm, host, tmp_path: Path, **extra) -> dict:
    # the test hosts' GPUs are a fake nvidia-smi and the controller's torch is a CPU build: verify on the CPU
    return {**host.inventory_vars(farm.known_hosts), "workdir": str(tmp_path / "work" / host.name),
            "verify_device": "cpu", **extra}


def test_deploy_builds_each_host_for_its_own_sm_installs_and_verifies(sshd_farm, tmp_path):
    """The main job (the shipped playbook, kernel_src) on three hosts in two arch classes: each
    class builds once, for exactly its SM (the ``build_host`` var names the H200 class's builder),
    the other member receives that wheel, and all three install and verify."""
    hosts = {}
    # venvs as users make them: python -m venv (Python's bundled pip, then a current setuptools),
    # and virtualenv
    for name, gpu, kind in (("sm90-1", H200, "venv"), ("sm90-2", H200, "virtualenv"),
                            ("sm120", RTX_PRO_6000, "virtualenv")):
        h = sshd_farm.start(name)
        write_fake_nvidia_smi(h.bin_dir, [gpu])
        hosts[name] = host_entry(sshd_farm, h, tmp_path, venv=make_host_venv(tmp_path / f"venv-{name}", kind))
    for name in ("sm90-1", "sm90-2"):
        hosts[name]["build_host"] = "sm90-2"
    inv = write_inventory(tmp_path / "inv.yaml", {"gpu-nodes": hosts})
    default_play = REPO / "playbooks" / "fp4-kernels.yaml"
    before = plan_of(inv, default_play, tmp_path)
    assert before == {"sm90-1": [("push", ["nothing installed"])], "sm90-2": [("build", ["nothing installed"])],
                      "sm120": [("build", ["nothing installed"])]}, before

    res = fleetctl("-i", str(inv), "deploy", "--hosts", "gpu-nodes", home=tmp_path, timeout_s=1500)
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-3000:]
    # live output, prefixed by host, as it arrived
    assert re.search(r"^sm90-2 +\| ", res.stdout, re.M) and re.search(r"^sm120 +\| ", res.stdout, re.M)
    run_dir = last_run(tmp_path)
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "ok"
    builds = {h: [t for t in r["tasks"] if t["action"] == "build_wheel"][0] for h, r in record["hosts"].items()}
    assert [h for h, t in builds.items() if not t["data"].get("pushed_from")] == ["sm90-2", "sm120"]
    assert builds["sm90-1"]["data"]["pushed_from"] == "sm90-2"
    # the builders' task lines say the SASS was checked, and where (a package's own "cuobjdump not
    # found: SASS check SKIPPED" in the build log is then not the last word)
    for name, sass in (("sm90-2", "sm_90a"), ("sm120", "sm_120a")):
        msg = builds[name]["msg"]
        assert re.search(rf"; SASS {sass} checked on the (host|controller)$", msg), msg
    assert builds["sm90-1"]["data"]["sha256"] == builds["sm90-2"]["data"]["sha256"] != builds["sm120"]["data"]["sha256"]
    assert res.stdout.count("*** Created fp4_kernels") == 2  # scikit-build-core ran once per class
    assert "sm90-[1-2] sm_90a cu13.0" in res.stdout and "(built on sm90-2)" in res.stdout
    assert list((tmp_path / "cache" / "fleetctl" / "wheels").glob("*/fp4_kernels-*.whl"))
    for name, arch, sass in (("sm90-1", "9.0a", ["sm_90a"]), ("sm90-2", "9.0a", ["sm_90a"]),
                             ("sm120", "12.0a", ["sm_120a"])):
        tasks = {t["action"]: t for t in record["hosts"][name]["tasks"]}
        assert tasks["build_wheel"]["status"] == "changed"
        assert tasks["build_wheel"]["data"]["archs"] == arch
        assert tasks["build_wheel"]["data"]["sass"] == sass  # exactly the host's SM, nothing else
        assert tasks["pip_install"]["status"] == "changed"
        assert tasks["verify"]["status"] == "ok"
        torch_before = tasks["pip_install"]["data"]["torch_before"]
        assert torch_before == tasks["pip_install"]["data"]["torch_after"]
        log = (run_dir / "logs" / f"{name}.log").read_bytes()
        assert b"PASS smoke" in log
        site = Path(hosts[name]["venv"], "lib", f"python{sys.version_info.major}.{sys.version_info.minor}", "site-packages")
        assert (site / "fp4_kernels" / "__init__.py").exists()
    for name in ("sm90-2", "sm120"):  # the builders' logs hold their builds
        log = (run_dir / "logs" / f"{name}.log").read_bytes()
        assert b"*** Created fp4_kernels" in log or b"Successfully built" in log
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert any(e["event"] == "task.finished" and e["host"] == "sm120" for e in events)

    # Second deploy, nothing changed: nothing is rebuilt or reinstalled, and it says so; facts, the
    # deploy lock, the stamps and the install state take ONE command per host (verify one more).
    sessions = {name: _sessions(sshd_farm, name) for name in hosts}
    again = fleetctl("-i", str(inv), "deploy", "--hosts", "gpu-nodes", home=tmp_path, timeout_s=600)
    assert again.returncode == 0, again.stdout[-3000:]
    assert "*** Created fp4_kernels" not in again.stdout  # no compiler ran
    assert "nothing changed: every host was already up to date" in again.stdout
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    for name in hosts:
        tasks = {t["action"]: t for t in record["hosts"][name]["tasks"]}
        assert tasks["copy"]["status"] == "ok"
        assert tasks["build_wheel"]["status"] == "ok" and "unchanged" in tasks["build_wheel"]["msg"]
        assert tasks["pip_install"]["status"] == "ok" and "already installed" in tasks["pip_install"]["msg"]
        assert tasks["verify"]["status"] == "ok"
        assert _sessions(sshd_farm, name) - sessions[name] == 2, name  # the first command and verify's
    assert {a for (a, _), in plan_of(inv, default_play, tmp_path).values()} == {"skip"}

    # The package uninstalled by hand: the next deploy reads the venv, not only its own stamp,
    # and installs it again (verify would otherwise fail the host, or pass on another copy).
    venv_py = Path(hosts["sm90-1"]["venv"]) / "bin" / "python3"
    subprocess.run([str(venv_py), "-m", "pip", "uninstall", "-y", "fp4_kernels"], check=True, capture_output=True)
    third = fleetctl("-i", str(inv), "deploy", "--hosts", "gpu-nodes", home=tmp_path, timeout_s=600)
    assert third.returncode == 0, third.stdout[-3000:]
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    tasks = {t["action"]: t for t in record["hosts"]["sm90-1"]["tasks"]}
    assert tasks["build_wheel"]["status"] == "ok"  # the wheel it holds is reused, not rebuilt
    assert tasks["pip_install"]["status"] == "changed"
    assert tasks["pip_install"]["data"]["decision"] == {"action": "install", "why": "nothing installed"}
    assert tasks["verify"]["status"] == "ok"
    other = {t["action"]: t for t in record["hosts"]["sm120"]["tasks"]}
    assert other["pip_install"]["status"] == "ok"

    # The same tree copied elsewhere plans as the same build (its key is the files, not their
    # path); one file changed there, every class builds again, for the tree alone
    src = tmp_path / "kernel_src"
    shutil.copytree(REPO / "kernel_src", src, ignore=shutil.ignore_patterns("build", "__pycache__", "*.so"))
    play = tmp_path / "fp4.yaml"
    play.write_text(default_play.read_text().replace("src: ../kernel_src", f"src: {src}"))
    assert {a for (a, _), in plan_of(inv, play, tmp_path).values()} == {"skip"}
    with open(src / "src" / "fp4_kernels" / "__init__.py", "a") as fh:
        fh.write("# a change\n")
    after = plan_of(inv, play, tmp_path)
    assert after == {"sm90-1": [("push", ["tree"])], "sm90-2": [("build", ["tree"])], "sm120": [("build", ["tree"])]}, after


def _sessions(farm, name: str) -> int:
    """Exec sessions the host's sshd has started so far (its log says each at LogLevel VERBOSE)."""
    host = next(h for h in farm.hosts if h.name == name)
    return host.log.count("Starting session: command")


PREFLIGHT_PLAY = """\
name: preflight only
hosts: all
tasks:
  - name: upload
    copy: {{src: {src}, dest: "{{{{ workdir }}}}/src"}}
  - name: build
    build_wheel:
      src: "{{{{ workdir }}}}/src"
      out_dir: "{{{{ workdir }}}}/wheels"
      min_free_disk_mib: {disk}
"""


def test_preflight_fails_in_seconds_with_the_cause(sshd_farm, tmp_path):
    venv = make_host_venv(tmp_path / "venv")
    cases = {
        # the line facts warns with too (fleetctl/facts/refusals.py missing_python_problem)
        "badvenv": ({"venv": str(tmp_path / "no-such-venv")}, [H200], "the host var venv names an environment that is not there"),
        "nonvcc": ({"venv": venv, "cuda_home": str(tmp_path / "no-cuda")}, [H200], "has no bin/nvcc"),
        "oldarch": ({"venv": venv}, [("7.7", "Imaginary GPU", 1024)], "rejects compute_77"),
        # a Python installation that is no venv (the trial's venv: /usr): pip would write into it
        "notvenv": ({"venv": sys.base_prefix}, [H200], f"venv {sys.base_prefix} is not a virtual environment"),
    }
    hosts = {}
    for name, (extra, gpus, _) in cases.items():
        h = sshd_farm.start(name)
        write_fake_nvidia_smi(h.bin_dir, gpus)
        hosts[name] = host_entry(sshd_farm, h, tmp_path, **extra)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": hosts})
    play = tmp_path / "preflight.yaml"
    play.write_text(PREFLIGHT_PLAY.format(src=REPO / "kernel_src", disk=1))
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
    assert res.returncode == 1
    assert "*** Created" not in res.stdout and "Build files have been written" not in res.stdout  # no build began
    record = json.loads((last_run(tmp_path) / "run.json").read_text())
    for name, (_, _, expected) in cases.items():
        build = [t for t in record["hosts"][name]["tasks"] if t["action"] == "build_wheel"][0]
        assert build["status"] == "failed" and "preflight" in build["msg"] and expected in build["msg"], build
    assert "make one (python3 -m venv ~/venv, or uv venv ~/venv) and point the host var 'venv' at it" in \
        " ".join(res.stdout.replace("│", " ").split())

    # facts: every host the deploy refused reads FAILED (exit 1), never ok, with the deploy's own line,
    # and --json lists it in warnings (one rule: the trial's cuda_home read "ok" with a bare note)
    facts = fleetctl("-i", str(inv), "facts", "--hosts", "g", home=tmp_path, env={"COLUMNS": "250"})
    assert facts.returncode == 1, facts.stdout + facts.stderr
    notes = " ".join(facts.stdout.split())
    for name in ("badvenv", "nonvcc", "notvenv"):
        assert f"{name}: FAILED (the cause below)" in facts.stdout and f"{name}: ok" not in facts.stdout, facts.stdout
    # the fix names where the value was set: the inventory file and line (fresh operator's trial)
    assert re.search(rf"nonvcc: FAILED: cuda_home {re.escape(str(tmp_path / 'no-cuda'))} has no bin/nvcc \(fix the "
                     rf"inventory var 'cuda_home' \({re.escape(str(inv))}:\d+\)\); found ", notes), notes
    assert f"notvenv: FAILED: venv {sys.base_prefix} is not a virtual environment" in notes, notes
    doc = json.loads(fleetctl("-i", str(inv), "facts", "--hosts", "g", "--json", home=tmp_path).stdout)
    assert [w for w in doc["nonvcc"]["warnings"] if "has no bin/nvcc (fix the inventory var 'cuda_home' (" in w], doc["nonvcc"]
    nonvcc = [t for t in record["hosts"]["nonvcc"]["tasks"] if t["action"] == "build_wheel"][0]
    assert f"(fix the inventory var 'cuda_home' ({inv}:" in nonvcc["msg"], nonvcc
    # a value given with -e is named as typed, in facts and in the deploy's preflight alike
    other = tmp_path / "notcuda"
    given = json.loads(fleetctl("-i", str(inv), "facts", "--hosts", "nonvcc", "--json", "-e", f"cuda_home={other}",
                                home=tmp_path).stdout)
    assert [w for w in given["nonvcc"]["warnings"] if f"cuda_home {other} has no bin/nvcc (fix -e cuda_home)" in w], given
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "nonvcc", "--playbook", str(play), "--plan", "-e",
                   f"cuda_home={other}", home=tmp_path, env={"COLUMNS": "400"})
    assert res.returncode == 1 and f"cuda_home {other} has no bin/nvcc (fix -e cuda_home)" in " ".join(res.stdout.split()), \
        res.stdout[-3000:]
    assert [w for w in doc["notvenv"]["warnings"] if "is not a virtual environment" in w], doc["notvenv"]

    # a full disk: the workdir's file system has less room than the build needs
    ok = {"ok": host_entry(sshd_farm, sshd_farm.start("ok"), tmp_path, venv=venv)}
    write_fake_nvidia_smi(sshd_farm.hosts[-1].bin_dir, [H200])
    inv2 = write_inventory(tmp_path / "inv2.yaml", {"g": ok})
    play.write_text(PREFLIGHT_PLAY.format(src=REPO / "kernel_src", disk=10**9))
    res = fleetctl("-i", str(inv2), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
    assert res.returncode == 1
    assert "MiB free" in res.stdout and "needs 1000000000 MiB" in res.stdout


def test_twenty_mib_of_warnings_stream_without_stalling(sshd_farm, tmp_path):
    h = sshd_farm.start("chatty")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"chatty": host_entry(sshd_farm, h, tmp_path)}})
    play = tmp_path / "chatty.yaml"
    script = ("import sys\n"
              "line = b'warning: #177-D: variable declared but never referenced ' + b'x' * 1000 + b'\\n'\n"
              "for i in range(20 * 1024):\n"
              "    sys.stderr.buffer.write(line)\n"
              "    if i % 4096 == 0: print(f'[{i // 4096 + 1}/5] compiling', flush=True)\n")
    play.write_text(textwrap.dedent(f"""\
        name: warnings
        hosts: all
        gather_facts: false
        tasks:
          - name: noisy build
            command:
              argv: [/usr/bin/python3, -c, {json.dumps(script)}]
        """))
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path, timeout_s=300)
    assert res.returncode == 0, res.stderr[-2000:]
    log = (last_run(tmp_path) / "logs" / "chatty.log").read_bytes()
    assert log.count(b"err| warning: #177-D") == 20 * 1024
    assert b"out| [5/5] compiling" in log
    assert os.path.getsize(last_run(tmp_path) / "logs" / "chatty.log") > 20 * 1024 * 1024


def plan_of(inv, play, home) -> dict:
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "gpu-nodes", "--playbook", str(play), "--plan", "--json",
                   home=home)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    return {h: [(b["action"], b["changed"]) for b in r["builds"]] for h, r in json.loads(res.stdout).items()}
