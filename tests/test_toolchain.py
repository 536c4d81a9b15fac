"""The host compiler nvcc accepts and storage write errors: pure rules, checked against the real
toolkit header and real compilers of this machine (nvcc 13.0, g++-12)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetctl.build import archs as fbuild
from fleetctl.build import hostcompiler as hc
from fleetctl.connection.base import CommandResult
from fleetctl.connection.storagefaults import name_write_error, path_in
from fleetctl.tasks.causes import cause_line
from fleetctl.tasks.build_keys import build_inputs, build_key
from fleetctl.tasks.build_space import SPACE_PROBE, space_problems
from tests.support.fleet import REPO

sys.path.insert(0, str(REPO / "playbooks" / "scripts"))
import facts as facts_script  # noqa: E402

REAL_HEADER = Path("/usr/local/cuda/targets/x86_64-linux/include/crt/host_config.h")
NVCC = "/usr/local/cuda/bin/nvcc"


def too_new_gcc(folder: Path, major: int = 16) -> Path:
    """A ``gcc`` (and ``g++``) that is the real gcc-12 but says, and defines, it is ``major``: what
    nvcc's host_config.h sees on a host whose default compiler is newer than the toolkit."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("gcc", "g++"):
        real = "/usr/bin/gcc-12" if name == "gcc" else "/usr/bin/g++-12"
        p = folder / name
        p.write_text("#!/bin/sh\n"
                     f'case " $* " in *" --version "*) echo "{name} (GCC) {major}.1.0"; exit 0;; '
                     f'*" -dumpversion "*) echo {major}; exit 0;; *" -dumpfullversion "*) echo {major}.1.0; exit 0;; esac\n'
                     f"exec {real} -U__GNUC__ -D__GNUC__={major} -U__GNUC_MINOR__ -D__GNUC_MINOR__=1 \"$@\"\n")
        p.chmod(0o755)
    return folder / "gcc"


def test_the_bound_is_read_from_the_toolkits_own_header_and_matches_the_table():
    text = REAL_HEADER.read_text()
    assert hc.parse_host_config(text) == {"gnu": 15, "clang": 20}
    assert facts_script.parse_host_config(text) == hc.parse_host_config(text)  # the host-side copy agrees
    assert hc.table_bound("13.0") == ({"gnu": 15, "clang": 20}, "NVIDIA's host compiler table for CUDA 13.0")
    assert hc.table_bound("12.7")[0] == {"gnu": 13}  # a release not listed keeps its predecessor's bound
    assert hc.table_bound("12.8")[0]["gnu"] == 14 and hc.table_bound("11.8")[0]["gnu"] == 11
    assert hc.table_bound("9.2") is None
    got = facts_script.host_compiler_max("/usr/local/cuda")
    assert got["gnu"] == 15 and got["clang"] == 20 and got["source"].endswith("crt/host_config.h")
    assert facts_script.BUILD_SYSTEM_PATH == fbuild.DEFAULT_PATH  # facts look where the build looks


def test_facts_read_the_compilers_macros_as_nvcc_sees_them(tmp_path):
    too_new_gcc(tmp_path / "venv" / "bin")
    found = facts_script.probe_host_compilers(str(tmp_path / "venv"), "/usr/local/cuda")
    d = found["default"]
    assert d["path"] == str(tmp_path / "venv" / "bin" / "gcc") and (d["kind"], d["major"], d["version"]) == ("gnu", 16, "16.1")
    assert d["banner"] == "gcc (GCC) 16.1.0"
    g12 = [c for c in found["candidates"] if c["path"] == "/usr/bin/g++-12"]
    assert g12 and (g12[0]["kind"], g12[0]["major"]) == ("gnu", 12)


def test_nvcc_itself_refuses_the_too_new_default_and_the_build_scan_names_it(tmp_path):
    gcc = too_new_gcc(tmp_path / "bin")
    (tmp_path / "k.cu").write_text("__global__ void k() {}\n")
    env = {**os.environ, "PATH": f"{gcc.parent}:{os.environ['PATH']}"}
    res = subprocess.run([NVCC, "-c", str(tmp_path / "k.cu"), "-o", str(tmp_path / "k.o")], env=env,
                         capture_output=True, text=True)
    assert res.returncode != 0 and "unsupported GNU version! gcc versions later than 15" in res.stderr
    facts = {"cuda": {"version": "13.0"}, "host_compilers": {"used": {"path": str(gcc), "kind": "gnu", "version": "16.1"}}}
    msg = cause_line(CommandResult(argv=[], rc=1, stderr=res.stderr.encode()), "/w/tmp", facts=facts)
    assert msg.startswith(f"nvcc 13.0 refused the host compiler gcc 16.1 ({gcc}): \"unsupported GNU version! "
                          "gcc versions later than 15 are not supported\""), msg
    assert "install a supported g++" in msg
    # the compiler fleetctl picks instead is accepted by the same nvcc
    ok = subprocess.run([NVCC, "-ccbin", "/usr/bin/g++-12", "-c", str(tmp_path / "k.cu"), "-o", str(tmp_path / "k.o")],
                        env=env, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr


def _facts(default, *cands, bound=None, version="13.0"):
    cuda = {"nvcc": "/usr/local/cuda/bin/nvcc", "version": version, "home": "/usr/local/cuda"}
    if bound:
        cuda["host_compiler_max"] = {**bound, "source": "/usr/local/cuda/include/crt/host_config.h"}
    return {"cuda": cuda, "host_compilers": {"default": default, "candidates": list(cands)}}


def _c(path, kind, major, minor=0):
    return {"path": path, "kind": kind, "major": major, "minor": minor, "version": f"{major}.{minor}"}


def test_choice_keeps_an_accepted_default_picks_the_newest_accepted_or_names_both():
    g16, g14, g12 = _c("/usr/bin/gcc", "gnu", 16, 1), _c("/usr/bin/g++-14", "gnu", 14, 2), _c("/usr/bin/g++-12", "gnu", 12)
    c21 = _c("/usr/bin/clang++-21", "clang", 21)
    keep = hc.choose(_facts(g12, g14))
    assert not keep.chosen and keep.compiler == g12 and keep.env() == {} and not keep.problem
    pick = hc.choose(_facts(g16, g12, g14, c21))
    assert pick.chosen and pick.compiler == g14
    assert pick.env() == {"CUDAHOSTCXX": "/usr/bin/g++-14", "NVCC_CCBIN": "/usr/bin/g++-14"}
    assert pick.defines() == {"CMAKE_CUDA_HOST_COMPILER": "/usr/bin/g++-14"}
    assert "nvcc's default gcc 16.1 (/usr/bin/gcc) is refused by nvcc 13.0" in pick.note
    none = hc.choose(_facts(g16, c21))
    assert none.problem.startswith("nvcc 13.0 at /usr/local/cuda/bin/nvcc refuses the host compiler gcc 16.1 "
                                   "(/usr/bin/gcc) (gcc 16.1 is newer than 15; it accepts clang <= 20 and gcc <= 15, "
                                   "NVIDIA's host compiler table for CUDA 13.0) and no accepted one is installed "
                                   "(others found: clang 21.0 (/usr/bin/clang++-21)): install g++-15 or older"), none.problem
    # the host's own header wins over the table
    hdr = hc.choose(_facts(g12, bound={"gnu": 11}))
    assert "gcc 12.0 is newer than 11" in hdr.problem and "/usr/local/cuda/include/crt/host_config.h" in hdr.problem
    # what the task names is checked, never overridden
    named = hc.choose(_facts(g16, g12), env={"CUDAHOSTCXX": "/usr/bin/gcc"})
    assert not named.chosen and "the host compiler the task names (/usr/bin/gcc: gcc 16.1 is newer than 15)" in named.problem
    assert not hc.choose(_facts(g16, g12), defines={"CMAKE_CUDA_HOST_COMPILER": "/usr/bin/g++-12"}).problem
    # unknown: nothing refused (the build's output is the backstop)
    assert not hc.choose({"cuda": {"nvcc": "/x/nvcc", "version": "9.0"}, "host_compilers": {"default": g16}}).problem
    assert not hc.choose({}).problem


def test_the_class_key_holds_the_host_compiler_nvcc_runs():
    plan = {"torch_cuda_arch_list": "9.0a"}
    g16, g12 = _c("/usr/bin/gcc", "gnu", 16, 1), _c("/usr/bin/g++-12", "gnu", 12, 2)
    picked = hc.with_choice(_facts(g16, g12), hc.choose(_facts(g16, g12)))
    native = hc.with_choice(_facts(_c("/opt/x/gcc", "gnu", 12, 2)), hc.choose(_facts(_c("/opt/x/gcc", "gnu", 12, 2))))
    other = hc.with_choice(_facts(_c("/usr/bin/gcc", "gnu", 13)), hc.choose(_facts(_c("/usr/bin/gcc", "gnu", 13))))
    assert hc.key_material(picked) == {"host_compiler": "gnu 12"}
    key = lambda f: build_key(build_inputs("t", plan, {}, f))  # noqa: E731
    assert key(picked) == key(native) != key(other)  # same compiler major: one class, wherever it lives
    assert key({}) == build_key(build_inputs("t", plan, {}, {"host_compilers": {}}))  # older facts: key unchanged


@pytest.mark.parametrize("line, path", [
    ("cc1plus: fatal error: error writing to /w/tmp/ccAB.s: Disk quota exceeded", "/w/tmp/ccAB.s"),
    ("OSError: [Errno 122] Disk quota exceeded: '/w/out/x.whl'", "/w/out/x.whl"),
    ("/usr/bin/ld: final link failed: No space left on device", None),
    ("sh: 1: cannot create /ro/x.part: Read-only file system", "/ro/x.part"),
    ("nvcc fatal   : Could not write to file /w/tmp/t.cudafe1.cpp: Input/output error", "/w/tmp/t.cudafe1.cpp"),
])
def test_write_errors_are_named_with_their_path(line, path):
    assert path_in(line) == path
    msg = name_write_error("some output\n" + line + "\nmore", "/fallback")
    assert f"writing {path or '/fallback'}:" in msg, msg
    assert msg.split(" (")[0] in ("Disk quota exceeded", "No space left on device", "Read-only file system",
                                  "Input/output error")
    assert name_write_error("all fine", "/x") is None


def test_the_space_probe_really_allocates_and_names_the_errno(tmp_path):
    out = subprocess.run([sys.executable, "-c", SPACE_PROBE, json.dumps({"paths": [str(tmp_path / "no" / "such")], "mib": 1})],
                         capture_output=True, text=True, check=True).stdout
    answer = json.loads(out)
    got = answer[str(tmp_path / "no" / "such")]
    assert got["ok"] and got["checked"] and got["dir"] == str(tmp_path)  # ext4 here: really allocated
    assert list(tmp_path.iterdir()) == []  # the probe file is gone
    bad = json.dumps({"/w/tmp": {"dir": "/w", "ok": False, "errno": 122, "error": "Disk quota exceeded", "free_mib": 9000}})
    (problem,) = space_problems(bad, 2048)
    assert problem.startswith("Disk quota exceeded (EDQUOT) writing 2048 MiB in /w (for /w/tmp; statvfs shows 9000 MiB "
                              "free there; min_free_disk_mib)"), problem
    assert space_problems("not json", 2048) == []


def test_a_refused_default_gxx_is_replaced_too_and_facts_fall_back_to_what_a_compiler_says(tmp_path):
    g12, g16 = _c("/usr/bin/gcc", "gnu", 12, 2), _c("/v/bin/g++", "gnu", 16, 1)
    f = _facts(g12, _c("/usr/bin/g++-12", "gnu", 12, 2))
    f["host_compilers"]["default_cxx"] = g16
    pick = hc.choose(f)
    assert pick.chosen and pick.compiler["path"] == "/usr/bin/g++-12" and "/v/bin/g++" in pick.note
    # a compiler whose macros cannot be read is known by -dumpfullversion
    odd = tmp_path / "g++-99"
    odd.write_text("#!/bin/sh\ncase \"$1\" in -dumpfullversion) echo 99.1.0;; --version) echo 'g++ (odd) 99.1.0';; "
                   "*) exit 1;; esac\n")
    odd.chmod(0o755)
    got = facts_script.probe_compiler(str(odd))
    assert (got["kind"], got["major"], got["minor"], got["version"]) == ("gnu", 99, 1, "99.1") and got["error"]
