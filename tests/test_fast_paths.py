"""What keeps ``fleetctl run`` and ``fleetctl facts`` near the floor (issue 27), checked by
structure, never by timing: which modules a command imports (``python -X importtime``, the
interpreter's own list) and which processes the facts script starts on a host.

- ``run`` on local hosts never imports the SSH layer (asyncssh), even when the inventory also
  holds SSH hosts (their settings are read, their connection layer is not loaded); ``run`` and
  ``facts`` never import rich with ``--json`` or when every host is ok, nor structlog, jinja2 or
  torch.
- The facts script starts one interpreter (the build venv's probe), no NVML child when the
  loader certainly cannot find ``libnvidia-ml.so.1``, none at all while nvidia-smi answers, and
  per tool found only its own version commands.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import REPO, last_run, write_inventory

SCRIPT = REPO / "playbooks" / "scripts" / "facts.py"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Never on these paths: the SSH layer where no host is SSH, the terminal renderer where nothing
#: is rendered, the logging and template engines, torch.
HEAVY = ("asyncssh", "rich", "structlog", "jinja2", "torch")


def imported_by(*args: str, home: Path) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run the real CLI under ``python -X importtime``; the top-level packages it imported."""
    env = {**os.environ, "FLEETCTL_HOME": str(home), "XDG_CACHE_HOME": str(home / "cache")}
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "fleetctl", *args], capture_output=True,
                         text=True, env=env, cwd=REPO, timeout=300)
    mods = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in res.stderr.splitlines()
            if line.startswith("import time:") and line.count("|") == 2}
    assert "fleetctl" in mods, res.stderr[-2000:]  # the list was read
    return res, mods


def test_run_on_local_hosts_never_loads_the_ssh_layer(tmp_path, sshd_farm):
    ssh = sshd_farm.start("sshbox")
    inv = write_inventory(tmp_path / "inv.yaml", {"loc": {"l1": {"ansible_connection": "local"}},
                                                  "remote": {"sshbox": ssh.inventory_vars(sshd_farm.known_hosts)}})
    res, mods = imported_by("-i", str(inv), "run", "--hosts", "l1", "--", "echo", "hi", home=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout == "l1 | hi\n"
    assert not mods & set(HEAVY), sorted(mods & set(HEAVY))
    log = last_run(tmp_path) / "logs" / "l1.log"  # the record is still written, every line in the log
    assert b"hi" in log.read_bytes()
    assert json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["l1"]["status"] == "ok"
    # a failure is still worded (rich is imported then, and only then)
    bad, mods = imported_by("-i", str(inv), "run", "--hosts", "l1", "--", "false", home=tmp_path)
    assert bad.returncode == 1
    assert "l1: FAILED: rc=1" in bad.stderr and bad.stderr.splitlines()[-1] == "ok 0, failed 1, unreachable 0"
    assert "rich" in mods and "asyncssh" not in mods


def test_run_and_facts_json_over_ssh_import_only_the_ssh_layer(tmp_path, sshd_farm):
    ssh = sshd_farm.start("sshbox")
    inv = write_inventory(tmp_path / "inv.yaml", {"remote": {"sshbox": ssh.inventory_vars(sshd_farm.known_hosts)}})
    res, mods = imported_by("-i", str(inv), "run", "--hosts", "remote", "--json", "--", "uname", "-s", home=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout)["sshbox"]["stdout"] == "Linux\n"
    assert "asyncssh" in mods and not mods & {"rich", "structlog", "jinja2", "torch"}, sorted(mods)
    res, mods = imported_by("-i", str(inv), "facts", "--hosts", "remote", "--json", home=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout)["sshbox"]["script_version"]
    assert not mods & {"rich", "structlog", "jinja2", "torch"}, sorted(mods & set(HEAVY))


# -- the facts script's processes -------------------------------------------------------------

#: Runs the facts script as ``python3 facts.py`` does, writing every argv it starts (one JSON line
#: each) to the file named by FORKS_LOG: subprocess is how the script starts every process.
COUNTING = r"""
import json, os, runpy, subprocess, sys
log = open(os.environ["FORKS_LOG"], "a")
real = subprocess.Popen.__init__
def counted(self, args, *a, **k):
    log.write(json.dumps([str(x) for x in args]) + "\n"); log.flush()
    return real(self, args, *a, **k)
subprocess.Popen.__init__ = counted
sys.argv = [sys.argv[1]] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def started_by_facts(tmp_path: Path, path_dirs=(), env=None) -> tuple[dict, list[list[str]]]:
    """The facts (one JSON object) and every argv the script started."""
    forks = tmp_path / "forks.jsonl"
    forks.unlink(missing_ok=True)
    full_env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH")}
    full_env.update(PATH=":".join([str(d) for d in path_dirs] + [SYSTEM_PATH]), FORKS_LOG=str(forks), **(env or {}))
    proc = subprocess.run([sys.executable, "-c", COUNTING, str(SCRIPT), "--workdir", str(tmp_path)],
                          capture_output=True, text=True, env=full_env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout)
    return facts, [json.loads(line) for line in forks.read_text().splitlines()] if forks.exists() else []


def version_commands(facts: dict) -> int:
    """The commands the script may start for the tools its facts show it found: 3 per CUDA
    toolkit (nvcc --version, --list-gpu-arch, --list-gpu-code), 1 each for cmake and ninja, 2 per
    host compiler (its macros and its banner)."""
    toolkits = len(facts["cuda"].get("toolkits") or [])
    tools = sum(1 for k in ("cmake", "ninja") if facts[k].get("path"))
    hc = facts["host_compilers"]
    compilers = len({c["path"] for c in [hc.get("default") or {}, hc.get("default_cxx") or {}, *hc.get("candidates", [])]
                     if c.get("path")})
    return 3 * toolkits + tools + 2 * compilers


def pythons(argvs: list[list[str]]) -> list[list[str]]:
    return [a for a in argvs if "python" in os.path.basename(a[0])]


def test_facts_on_a_fake_gpu_host_start_one_interpreter_and_one_nvidia_smi(tmp_path):
    smi = tmp_path / "fakebin"
    write_fake_nvidia_smi(smi, [H200], driver="580.82.07")
    facts, argvs = started_by_facts(tmp_path, path_dirs=[smi])
    assert facts["gpu_source"] == "nvidia-smi" and facts["gpus"][0]["compute_cap"] == "9.0"
    smi_calls = [a for a in argvs if os.path.basename(a[0]) == "nvidia-smi"]
    assert len(smi_calls) == 1 and smi_calls[0][1].startswith("--query-gpu="), argvs
    assert len(pythons(argvs)) == 1, pythons(argvs)  # the interpreter probe; no NVML child
    assert len(argvs) <= 2 + version_commands(facts), argvs


def test_facts_without_any_nvidia_library_start_no_nvml_child(tmp_path):
    facts, argvs = started_by_facts(tmp_path)
    if facts["gpu_source"] is not None or not Path("/etc/ld.so.cache").is_file():
        pytest.fail("this machine has an NVIDIA driver or no glibc loader cache: the case cannot be run here")
    assert len(pythons(argvs)) == 1, pythons(argvs)  # the interpreter probe only
    assert facts["gpu_probe_errors"] == ["nvidia-smi: not found on PATH",
                                         "nvml: libnvidia-ml.so.1: cannot open shared object file: "
                                         "No such file or directory"]
    assert facts["gpu_stack"]["status"] == "none"
    assert len(argvs) <= 1 + version_commands(facts), argvs


def test_nvml_library_absent_only_when_certain(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("fleetctl_facts_fast", SCRIPT)
    fs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fs)
    cache = tmp_path / "ld.so.cache"
    cache.write_bytes(b"glibc-ld.so.cache1.1\0libc.so.6\0/usr/lib/x86_64-linux-gnu/libc.so.6\0")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert fs.nvml_library_absent(str(cache), [str(empty)]) is True
    cache.write_bytes(cache.read_bytes() + b"libnvidia-ml.so.1\0/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1\0")
    assert fs.nvml_library_absent(str(cache), [str(empty)]) is False  # the cache names it
    assert fs.nvml_library_absent(str(tmp_path / "no-cache"), [str(empty)]) is False  # musl: no cache, no answer
    cache.write_bytes(b"glibc-ld.so.cache1.1\0")
    (empty / "libnvidia-ml.so.1").write_bytes(b"")
    assert fs.nvml_library_absent(str(cache), [str(empty)]) is False  # a folder dlopen searches holds it


def test_one_compiler_under_several_names_is_probed_once_and_reported_as_each(tmp_path):
    """g++, g++-12 (and here g++-77) as links to one program: one probe, and each entry is exactly
    what probing that name alone reports (its own banner: GCC prints the name it was run as)."""
    import importlib.util
    import shutil

    real = shutil.which("g++", path=SYSTEM_PATH)
    if real is None:
        pytest.fail("no g++ on this machine: the case cannot be run here")
    spec = importlib.util.spec_from_file_location("fleetctl_facts_cc", SCRIPT)
    fs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fs)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for name in ("g++", "g++-77"):
        (venv / "bin" / name).symlink_to(os.path.realpath(real))
    calls = []
    probe = fs.probe_compiler
    fs.probe_compiler = lambda path: calls.append(path) or probe(path)
    hc = fs.probe_host_compilers(str(venv), None)
    entries = [hc["default_cxx"], *hc["candidates"]]
    names = [e["path"] for e in entries]
    assert str(venv / "bin" / "g++") == names[0] and str(venv / "bin" / "g++-77") in names, names
    for e in entries:
        assert e == probe(e["path"]), e["path"]
    assert len(set(map(os.path.realpath, calls))) == len(calls)  # one probe a program


def test_a_cli_process_collects_garbage_in_batches(tmp_path):
    """The CLI raises the collector's thresholds for its start-up (fleetctl.cli.app.GC_THRESHOLDS):
    its start-up objects live to its end, so CPython's default (a collection every 700
    allocations) walks them again and again for nothing. When the engine starts they are frozen
    and the defaults come back; gc stays enabled throughout."""
    from fleetctl.cli import app, runend

    seen = []
    real = runend.collect_as_usual
    runend.collect_as_usual = lambda: (seen.append(__import__("gc").get_threshold()), real())
    try:
        app.collect_in_batches()
        runend.run_async(asyncio.sleep(0))
    finally:
        runend.collect_as_usual = real
    assert seen == [app.GC_THRESHOLDS]  # start-up in batches, then back to what it was
    inv = write_inventory(tmp_path / "inv.yaml", {"loc": {"l1": {"ansible_connection": "local"}}})
    code = ("import gc, sys\nfrom fleetctl.cli import main\nbefore = gc.get_threshold()\n"
            "try:\n    main(prog_name='fleetctl')\nexcept SystemExit as exc:\n    rc = exc.code\n"
            "print(rc, gc.isenabled(), gc.get_threshold() == before, gc.get_freeze_count() > 0, file=sys.stderr)")
    env = {**os.environ, "FLEETCTL_HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    res = subprocess.run([sys.executable, "-c", code, "-i", str(inv), "run", "--hosts", "l1", "--", "true"],
                         capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert res.stderr.splitlines()[-1].split() == ["0", "True", "True", "True"], res.stderr
