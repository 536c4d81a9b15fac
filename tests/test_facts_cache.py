"""The facts script's kept answers (``--cache``, ``AnswerCache`` in playbooks/scripts/facts.py):
an unchanged host answers its version commands from the file, and every real change to what an
answer depends on is seen by the next run (issue 27).

Each case runs the real script three times on one cache file: the first asks every program, the
second must answer them from the file (no nvcc, compiler, cmake, ninja or interpreter started:
counted, so a cache that is not used fails here), then the change is made as it happens on a
host (a new nvcc in the toolkit, a package pip-installs into the venv, torch upgraded or
removed, a driver updated without a reboot...) and the third run must report the new state.
The GPU side (nvidia-smi and NVML) is never answered from the file: a fake nvidia-smi that
starts failing as the real one does after a driver update is seen at once.

``--cache-min-age-s 0`` lets the answers about the files a test has just made be kept; the
default (2 s, the coarsest file system timestamps) is tested on its own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.fake_gpu import H200, MISMATCH_RC, write_fake_nvidia_smi, write_mismatched_nvidia_smi
from tests.support.tiny_ext import fake_torch_files, write_wheel
from tests.test_facts_script import SCRIPT, SYSTEM_PATH, _make_venv, write_fake_cuda
from tests.test_fast_paths import COUNTING

#: Programs whose answers the file keeps (the interpreter probe is the venv's python).
KEPT = ("nvcc", "g++", "gcc", "cmake", "ninja", "python3")


def facts_run(tmp_path: Path, *args: str, path_dirs=(), min_age_s: float | None = 0.0,
              script: Path = SCRIPT) -> tuple[dict, list[list[str]]]:
    """One run of the real script with ``--cache``: its facts and every argv it started."""
    forks = tmp_path / "forks.jsonl"
    forks.unlink(missing_ok=True)
    # a login's environment as a deploy meets it: no PYTHONDONTWRITEBYTECODE (``--read-only 1`` sets it)
    env = {k: v for k, v in os.environ.items()
           if k not in ("CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH", "PYTHONDONTWRITEBYTECODE")}
    env.update(PATH=":".join([str(d) for d in path_dirs] + [SYSTEM_PATH]), FORKS_LOG=str(forks))
    extra = [] if min_age_s is None else ["--cache-min-age-s", str(min_age_s)]
    proc = subprocess.run([sys.executable, "-c", COUNTING, str(script), "--workdir", str(tmp_path),
                           "--cache", str(tmp_path / "state" / "facts-cache.json"), *extra, *args],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    argvs = [json.loads(line) for line in forks.read_text().splitlines()] if forks.exists() else []
    return json.loads(proc.stdout), argvs


def asked(argvs: list[list[str]]) -> list[str]:
    """The kept-answer programs among what a run started (by file name)."""
    return sorted(os.path.basename(a[0]) for a in argvs if os.path.basename(a[0]) in KEPT)


def write_exe(path: Path, text: str) -> Path:
    """A new file at ``path`` (a new inode, as an installer writes one), executable."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    tmp.chmod(0o755)
    os.replace(tmp, path)
    return path


def fake_gxx(major: int, minor: int = 2) -> str:
    """A ``g++`` answering the facts script's two questions as GCC does."""
    return (f"#!/bin/sh\ncase \"$1\" in\n  -dM) printf '#define __GNUC__ {major}\\n#define __GNUC_MINOR__ {minor}\\n' ;;\n"
            f"  --version) echo 'g++ (fake) {major}.{minor}.0' ;;\n  *) exit 1 ;;\nesac\n")


def pip_install(venv: Path, *args: str) -> None:
    """The controller's real pip, installing into ``venv`` (``pip --python``), offline."""
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python3"), "install", "-q",
                    "--no-index", "--no-deps", *args], check=True, capture_output=True, timeout=300)


def site_of(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


class Host:
    """A host for the facts script: a fake toolkit (``--cuda-home``), a fake nvidia-smi, a venv
    with a stand-in torch pip-installed, and venv-local g++ and cmake (found first, as pip's are)."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path
        self.smi = tmp_path / "smibin"
        write_fake_nvidia_smi(self.smi, [H200], driver="580.82.07")
        self.cuda = write_fake_cuda(tmp_path / "cuda-12.4", version="12.4")
        self.venv = _make_venv(tmp_path / "venv", None)
        self.wheels = tmp_path / "wheels"
        pip_install(self.venv, str(write_wheel(self.wheels, "torch", "2.9.0+cu130", fake_torch_files("2.9.0+cu130"))))
        write_exe(self.venv / "bin" / "g++", fake_gxx(13))
        write_exe(self.venv / "bin" / "cmake", "#!/bin/sh\necho 'cmake version 3.28.3'\n")

    def run(self, min_age_s: float | None = 0.0, script: Path = SCRIPT) -> tuple[dict, list[list[str]]]:
        return facts_run(self.root, "--cuda-home", str(self.cuda), "--venv", str(self.venv), path_dirs=[self.smi],
                         min_age_s=min_age_s, script=script)


def new_nvcc(h: Host) -> None:
    write_fake_cuda(h.root / "cuda-12.8", version="12.8")
    os.replace(h.root / "cuda-12.8" / "bin" / "nvcc", h.cuda / "bin" / "nvcc")


def nvcc_rewritten_in_place(h: Host) -> None:
    nvcc = h.cuda / "bin" / "nvcc"
    text = nvcc.read_text()
    nvcc.write_text(text.replace("12.4", "12.5"))  # same file, same size, same inode


def toolkit_link_repointed(h: Host) -> None:
    # cuda-12.4 becomes a link to another toolkit, as /usr/local/cuda is repointed by an installer
    other = write_fake_cuda(h.root / "cuda-13.0", version="13.0")
    shutil.rmtree(h.cuda)
    h.cuda.symlink_to(other)


def package_installed(h: Host) -> None:
    pip_install(h.venv, str(write_wheel(h.wheels, "nanobind", "2.9.0", {"nanobind/__init__.py": ""})))


def torch_upgraded(h: Host) -> None:
    pip_install(h.venv, str(write_wheel(h.wheels, "torch", "2.9.1+cu130", fake_torch_files("2.9.1+cu130"))))


def torch_removed(h: Host) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--python", str(h.venv / "bin" / "python3"), "uninstall", "-y", "-q",
                    "torch"], check=True, capture_output=True, timeout=300)


def torch_version_edited(h: Host) -> None:
    path = site_of(h.venv) / "torch" / "version.py"  # by hand, not by pip: no folder changes
    path.write_text(path.read_text().replace("2.9.0", "2.9.7"))


def pth_points_elsewhere(h: Host) -> None:
    extra = h.root / "extra-site"
    (extra / "numpy-2.3.0.dist-info").mkdir(parents=True, exist_ok=True)
    (extra / "numpy-2.3.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: numpy\nVersion: 2.3.0\n")
    pth = site_of(h.venv) / "zz_extra.pth"
    if not pth.exists():  # made before the first run (empty), edited in place now
        pth.write_text("")
        return
    pth.write_text(str(extra) + "\n")


def compiler_upgraded(h: Host) -> None:
    write_exe(h.venv / "bin" / "g++", fake_gxx(14, 1))


def cmake_upgraded(h: Host) -> None:
    write_exe(h.venv / "bin" / "cmake", "#!/bin/sh\necho 'cmake version 3.31.6'\n")


def driver_updated_without_reboot(h: Host) -> None:
    write_mismatched_nvidia_smi(h.smi)


def driver_and_gpus_changed(h: Host) -> None:
    write_fake_nvidia_smi(h.smi, [H200, H200], driver="590.44.01")


#: change -> (what the next run must report, the program it must ask again or None: never kept)
CHANGES = {
    "a new nvcc in the toolkit": (new_nvcc, lambda f: f["cuda"]["version"] == "12.8", "nvcc"),
    "nvcc rewritten in place (same size, same inode)": (nvcc_rewritten_in_place, lambda f: f["cuda"]["version"] == "12.5",
                                                         "nvcc"),
    "the toolkit folder repointed to another toolkit": (toolkit_link_repointed, lambda f: f["cuda"]["version"] == "13.0",
                                                        "nvcc"),
    "a package pip-installed into the venv": (package_installed,
                                              lambda f: f["python"]["packages"]["nanobind"] == "2.9.0", "python3"),
    "torch upgraded by pip": (torch_upgraded, lambda f: f["python"]["torch"] == "2.9.1+cu130", "python3"),
    "torch uninstalled": (torch_removed, lambda f: f["python"]["torch"] is None
                          and "No module named 'torch'" in f["python"]["torch_error"], "python3"),
    "torch's version.py edited by hand": (torch_version_edited, lambda f: f["python"]["torch"] == "2.9.7+cu130",
                                          "python3"),
    "a .pth file edited to add a folder": (pth_points_elsewhere, lambda f: f["python"]["packages"]["numpy"] == "2.3.0",
                                           "python3"),
    "the venv's g++ upgraded": (compiler_upgraded, lambda f: f["host_compilers"]["default_cxx"]["version"] == "14.1",
                                "g++"),
    "the venv's cmake upgraded": (cmake_upgraded, lambda f: f["cmake"]["version"] == "3.31.6", "cmake"),
    "the driver updated without a reboot": (driver_updated_without_reboot,
                                            lambda f: f["gpu_stack"]["status"] == "broken" and
                                            f"exit {MISMATCH_RC}" in f["gpu_stack"]["reason"] and
                                            "Driver/library version mismatch" in f["gpu_stack"]["reason"], None),
    "another driver and another GPU": (driver_and_gpus_changed,
                                       lambda f: f["driver_version"] == "590.44.01" and len(f["gpus"]) == 2, None),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_the_next_run_sees_each_change_the_one_before_answered_from_the_file(tmp_path, change):
    make, seen, program = CHANGES[change]
    h = Host(tmp_path)
    if make is pth_points_elsewhere:
        make(h)  # the empty .pth exists before the first run
    first, argvs = h.run()
    assert set(asked(argvs)) == {"nvcc", "g++", "gcc", "cmake", "ninja", "python3"} - (
        set() if shutil.which("ninja", path=SYSTEM_PATH) else {"ninja"}) - (
        set() if shutil.which("gcc", path=SYSTEM_PATH) else {"gcc"}), asked(argvs)
    assert not seen(first)
    second, argvs = h.run()
    assert asked(argvs) == [] and second["probe_cache"]["misses"] == 0, (asked(argvs), second["probe_cache"])
    assert [os.path.basename(a[0]) for a in argvs] == ["nvidia-smi"]  # the GPUs are asked every run
    make(h)
    third, argvs = h.run()
    assert seen(third), json.dumps({k: third[k] for k in ("cuda", "python", "gpu_stack", "cmake", "host_compilers")})[:3000]
    if program is not None:
        assert program in asked(argvs), asked(argvs)


def live(facts: dict) -> dict:
    """Facts without what changes by itself between two runs (time, free memory and disk)."""
    skip = ("duration_s", "probe_cache", "mem_available_mib", "disk_free_mib", "workdir_fs", "tmp", "cgroup")
    out = {k: v for k, v in facts.items() if k not in skip}
    # the venv's file system's free space is measured every run (another process writes there)
    fs = dict(out["python"].get("site_packages_fs") or {}, free_mib=None)
    out["python"] = dict(out["python"], site_packages_fs=fs, torch_import=dict(out["python"]["torch_import"] or {}, seconds=None))
    return out


def test_an_unchanged_host_answers_the_same_from_the_file_and_keeps_no_gpu_or_system_fact(tmp_path):
    h = Host(tmp_path)
    first, _ = h.run()
    second, argvs = h.run()
    assert live(second) == live(first)
    assert second["probe_cache"]["hits"] >= 5 and second["probe_cache"]["error"] is None
    doc = json.loads((tmp_path / "state" / "facts-cache.json").read_text())
    kinds = {json.loads(key)[0] for key in doc["entries"]}
    assert kinds == {"nvcc", "compiler", "tool", "python"}, kinds
    text = json.dumps(doc["entries"])
    for fact in ("nvidia-smi", "driver", "gpus", "mem_", "disk_free", "cpu_count", "cgroup"):
        assert fact not in text, fact


def test_an_answer_about_a_file_changed_within_the_min_age_is_not_kept(tmp_path):
    """A dependency changed within ``--cache-min-age-s`` (default 2 s: a file system's timestamp
    granularity may be a second or two) could change again without its stat changing: its
    answer is not kept, and the next run asks again. Here every file is younger than an hour."""
    h = Host(tmp_path)
    h.run(min_age_s=3600)
    facts, argvs = h.run(min_age_s=3600)
    assert {"nvcc", "g++", "cmake", "python3"} <= set(asked(argvs)), asked(argvs)  # (the system's gcc is older)
    h.run()  # the same files, kept now
    facts, argvs = h.run(min_age_s=3600)  # what was kept is used whatever its age
    assert asked(argvs) == [] and facts["probe_cache"]["misses"] == 0


def test_another_script_another_host_or_a_broken_file_starts_afresh(tmp_path):
    h = Host(tmp_path)
    h.run()
    cache = tmp_path / "state" / "facts-cache.json"
    other = tmp_path / "facts-other.py"  # another version of the script: another digest
    other.write_text(SCRIPT.read_text() + "\n# another version\n")
    facts, argvs = h.run(script=other)
    assert "nvcc" in asked(argvs) and facts["probe_cache"]["hits"] == 0
    h.run()  # this script's answers again
    doc = json.loads(cache.read_text())
    cache.write_text(json.dumps({**doc, "machine_id": "another-machine"}))  # a workdir copied from another host
    facts, argvs = h.run()
    assert "nvcc" in asked(argvs) and facts["probe_cache"]["hits"] == 0
    cache.write_text('{"version": 1, "entr')  # cut short
    facts, argvs = h.run()
    assert "nvcc" in asked(argvs) and facts["cuda"]["version"] == "12.4" and facts["probe_cache"]["error"] is None
    assert json.loads(cache.read_text())["entries"]


def test_a_read_only_run_answers_the_interpreter_probe_from_what_a_deploy_kept(tmp_path):
    """``fleetctl facts`` runs the script with ``--read-only 1``, which sets
    ``PYTHONDONTWRITEBYTECODE`` for its probes: that variable changes no answer, so the answer a
    deploy kept (torch's import included) is used, and no interpreter is started."""
    h = Host(tmp_path)
    h.run()  # a deploy's gathering: keeps its answers
    facts, argvs = facts_run(tmp_path, "--cuda-home", str(h.cuda), "--venv", str(h.venv), "--read-only", "1",
                             path_dirs=[h.smi])
    assert "python3" not in asked(argvs), asked(argvs)
    assert facts["python"]["torch"] == "2.9.0+cu130" and facts["probe_cache"]["misses"] == 0, facts["probe_cache"]


def test_answers_about_files_just_made_are_kept_where_the_file_system_stamps_finer_than_a_second(tmp_path):
    """The default window (no ``--cache-min-age-s``): the venv, the toolkit and the tools were made
    a moment ago on a file system with nanosecond times (the suite's temporary folder), so one tick
    of the coarse clock (>= 10 ms) is the racy window, not 2 s: the next run answers from the file."""
    h = Host(tmp_path)
    h.run(min_age_s=None)
    facts, argvs = h.run(min_age_s=None)
    assert asked(argvs) == [] and facts["probe_cache"]["misses"] == 0, (asked(argvs), facts["probe_cache"])


def test_the_racy_window_is_two_seconds_for_whole_second_times_and_a_tick_for_finer_ones(tmp_path):
    """:meth:`AnswerCache.put` on the stats a file system gives: whole-second mtime and ctime (FAT,
    ext3, an NFS server sending seconds) must be :data:`RACY_S` old; sub-second ones
    :data:`FINE_RACY_S`; a window given (``--cache-min-age-s``) holds for every file."""
    from tests.test_facts_script import fs

    now = time.time_ns()

    def stat(age_s: float, whole: bool) -> list:
        t = now - int(age_s * 1e9)
        t = t - t % 10**9 if whole else t - t % 10**9 + 123_456_789
        return [1, t, t, 1, 1, 0o100644]

    def kept(st, min_age_s=None) -> bool:
        cache = fs.AnswerCache(str(tmp_path / "c.json"), "digest", min_age_s)
        cache.put("k", [["/some/file", st]], {"a": 1})
        return "k" in cache.used

    assert not kept(stat(0.5, whole=True))   # under a second ago, seconds-only stamps: could change unseen
    assert kept(stat(3.2, whole=True))
    assert kept(stat(0.5, whole=False))      # finer stamps: a tick is enough
    assert not kept(stat(0.5, whole=False), min_age_s=3600)
