"""playbooks/scripts/patch_sgl_kernel.py against small sgl-kernel-shaped trees.

The script runs on the host, so it is run here as the host runs it: a subprocess of a plain Python
interpreter (sys.executable, and Python 3.8 where one is installed). Property tests call its
patch functions directly.
"""

from __future__ import annotations

import ast
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import sgl_fixture as fx
from tests.support.sgl_checks import Prober, find_cmake
from tests.support.hermetic import REAL_HOME

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "playbooks" / "scripts" / "patch_sgl_kernel.py"
NAMES = ("cmake-policy-guards", "cuda13-cccl-include", "fa3-respect-option", "compile-threads-option",
         "fa3-soft-import")


def run_patch(*args, python=None):
    return subprocess.run(
        [python or sys.executable, str(SCRIPT), *[str(a) for a in args]],
        capture_output=True, text=True, timeout=120,
    )


def statuses(stdout):
    """{patch name: status} from the status lines; asserts one line per patch, in order."""
    lines = [l for l in stdout.splitlines() if re.match(r"^(Applied|Already applied|Not needed|Would apply): ", l)]
    names = [l.split(": ", 1)[1] for l in lines]
    assert names == list(NAMES), stdout
    return {l.split(": ", 1)[1]: l.split(": ", 1)[0] for l in lines}


def load_script():
    spec = importlib.util.spec_from_file_location("patch_sgl_kernel", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


psk = load_script()


def guarded_policy_count(text, num=None):
    pattern = r"^[ \t]*if\(POLICY (CMP\d{4})\)\s*$"
    found = re.findall(pattern, text, re.M)
    return len([n for n in found if num in (None, n)])


# --------------------------------------------------------------------------------------------
# layouts


@pytest.mark.parametrize(
    "layout, fa3, expected_fa3",
    [
        (fx.OLD_ROOT, fx.FA3_FORCED, "Applied"),
        (fx.NEW_ROOT, fx.FA3_DEFAULT_ONLY, "Not needed"),
        (fx.NEW_ROOT, fx.FA3_FORCED, "Applied"),
        (fx.KERNEL_DIR, fx.FA3_FORCED, "Applied"),
    ],
)
def test_applies_in_each_layout(tmp_path, layout, fa3, expected_fa3):
    kdir = fx.write_tree(tmp_path, layout=layout, fa3=fa3)
    res = run_patch(tmp_path)
    assert res.returncode == 0, res.stderr
    assert statuses(res.stdout) == {
        "cmake-policy-guards": "Applied",
        "cuda13-cccl-include": "Applied",
        "fa3-respect-option": expected_fa3,
        "compile-threads-option": "Applied",
        "fa3-soft-import": "Applied",
    }
    cm = (kdir / "CMakeLists.txt").read_text()
    assert "if(POLICY CMP0169)\n    cmake_policy(SET CMP0169 OLD)\nendif()\n" in cm
    assert "if(POLICY CMP0177)\n    cmake_policy(SET CMP0177 NEW)\nendif()\n" in cm
    # the cccl block follows the include_directories( ... ) statement
    inc_end = cm.index("${PROJECT_SOURCE_DIR}/csrc  # kernels and their headers\n)\n")
    block = cm.index("if (CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 13.0)")
    assert inc_end < block < cm.index("set(SGL_KERNEL_CUDA_FLAGS")
    assert '/cccl")' in cm
    fa = (kdir / "python" / "sgl_kernel" / "flash_attn.py").read_text()
    assert "except ImportError:\n" in fa and "    flash_ops = None\n" in fa
    assert "raise ImportError" not in fa
    ast.parse(fa)


def test_kernel_dir_of_new_layout_given_directly(tmp_path):
    kdir = fx.write_tree(tmp_path, layout=fx.NEW_ROOT, fa3=fx.FA3_DEFAULT_ONLY)
    res = run_patch(kdir)
    assert res.returncode == 0, res.stderr
    assert statuses(res.stdout)["cmake-policy-guards"] == "Applied"
    assert "if(POLICY CMP0177)" in (kdir / "CMakeLists.txt").read_text()


@pytest.mark.parametrize(
    "make",
    [
        lambda root: None,  # empty directory
        lambda root: (root / "CMakeLists.txt").write_text("project(other)\n"),  # no python/sgl_kernel
        lambda root: (root / "sgl-kernel").mkdir(),  # the old dir, but empty
    ],
    ids=["empty", "cmake-only", "empty-sgl-kernel"],
)
def test_neither_layout_is_a_clear_error(tmp_path, make):
    make(tmp_path)
    before = fx.tree_digest(tmp_path)
    res = run_patch(tmp_path)
    assert res.returncode == 2
    assert res.stdout == ""
    assert "no sgl-kernel source tree found" in res.stderr
    assert "python/sglang/kernels/aot" in res.stderr and "sgl-kernel" in res.stderr
    assert fx.tree_digest(tmp_path) == before


def test_missing_directory_exits_2(tmp_path):
    res = run_patch(tmp_path / "nope")
    assert res.returncode == 2
    assert "not a directory" in res.stderr


def test_both_layouts_in_one_root_is_ambiguous(tmp_path):
    fx.write_tree(tmp_path, layout=fx.OLD_ROOT)
    fx.write_tree(tmp_path, layout=fx.NEW_ROOT)
    before = fx.tree_digest(tmp_path)
    res = run_patch(tmp_path)
    assert res.returncode == 2
    assert "both layouts" in res.stderr
    assert fx.tree_digest(tmp_path) == before


# --------------------------------------------------------------------------------------------
# idempotence


@pytest.mark.parametrize("layout", [fx.OLD_ROOT, fx.NEW_ROOT])
@pytest.mark.parametrize("fa3", [fx.FA3_FORCED, fx.FA3_DEFAULT_ONLY, fx.FA3_NONE])
@pytest.mark.parametrize("flash_import", [fx.IMPORT_HARD_TRY, fx.IMPORT_BARE, fx.IMPORT_NO_FILE])
def test_second_run_changes_no_byte(tmp_path, layout, fa3, flash_import):
    fx.write_tree(tmp_path, layout=layout, fa3=fa3, flash_import=flash_import)
    first = run_patch(tmp_path)
    assert first.returncode == 0, first.stderr
    after_first = fx.tree_digest(tmp_path)

    second = run_patch(tmp_path)
    assert second.returncode == 0, second.stderr
    assert fx.tree_digest(tmp_path) == after_first
    got = statuses(second.stdout)
    for name, status in statuses(first.stdout).items():
        assert got[name] == ("Already applied" if status == "Applied" else status)

    check = run_patch("--check", tmp_path)
    assert check.returncode == 0, check.stdout
    assert fx.tree_digest(tmp_path) == after_first


def test_no_temp_files_left_and_modes_kept(tmp_path):
    kdir = fx.write_tree(tmp_path)
    cm = kdir / "CMakeLists.txt"
    fa = kdir / "python" / "sgl_kernel" / "flash_attn.py"
    cm.chmod(0o751)
    fa.chmod(0o640)
    names_before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    res = run_patch(tmp_path)
    assert res.returncode == 0, res.stderr
    assert (cm.stat().st_mode & 0o7777) == 0o751
    assert (fa.stat().st_mode & 0o7777) == 0o640
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == names_before


def test_crlf_files_keep_crlf(tmp_path):
    kdir = fx.write_tree(tmp_path)
    for p in (kdir / "CMakeLists.txt", kdir / "python" / "sgl_kernel" / "flash_attn.py"):
        p.write_bytes(p.read_bytes().replace(b"\n", b"\r\n"))
    res = run_patch(tmp_path)
    assert res.returncode == 0, res.stderr
    for p in (kdir / "CMakeLists.txt", kdir / "python" / "sgl_kernel" / "flash_attn.py"):
        data = p.read_bytes()
        assert b"fleetctl" in data
        assert data.count(b"\n") == data.count(b"\r\n"), p
    after = fx.tree_digest(tmp_path)
    again = run_patch(tmp_path)
    assert set(statuses(again.stdout).values()) <= {"Already applied", "Not needed"}
    assert fx.tree_digest(tmp_path) == after


# --------------------------------------------------------------------------------------------
# cmake-policy-guards


@pytest.mark.parametrize(
    "policies, guarded, expected",
    [
        ((), (), "Not needed"),
        ((("CMP0169", "OLD"),), (), "Applied"),
        ((("CMP0169", "OLD"), ("CMP0177", "NEW")), (), "Applied"),
        ((("CMP0135", "NEW"), ("CMP0169", "OLD"), ("CMP0177", "NEW")), (), "Applied"),
        ((("CMP0169", "OLD"), ("CMP0177", "NEW")), ("CMP0169",), "Applied"),
        ((("CMP0169", "OLD"), ("CMP0177", "NEW")), ("CMP0169", "CMP0177"), "Already applied"),
    ],
    ids=["none", "2024", "2025", "with-CMP0135", "half-guarded", "all-guarded"],
)
def test_policy_sets(tmp_path, policies, guarded, expected):
    kdir = fx.write_tree(tmp_path, policies=policies, guarded=guarded)
    res = run_patch(tmp_path)
    assert res.returncode == 0, res.stderr
    assert statuses(res.stdout)["cmake-policy-guards"] == expected
    cm = (kdir / "CMakeLists.txt").read_text()
    assert guarded_policy_count(cm) == len(policies)
    for num, value in policies:
        assert guarded_policy_count(cm, num) == 1
        assert re.search(
            r"^if\(POLICY %s\)\n[ \t]+cmake_policy\(SET %s %s\)\nendif\(\)$" % (num, num, value), cm, re.M)


def test_policy_guard_keeps_indent_and_trailing_comment():
    text = "if(UNIX)\n  cmake_policy(SET CMP0177 NEW)  # install() paths\nendif()\n"
    new, status = psk.patch_policy_guards(text)
    assert status == "Applied"
    assert new == (
        "if(UNIX)\n  if(POLICY CMP0177)\n      cmake_policy(SET CMP0177 NEW)  # install() paths\n"
        "  endif()\nendif()\n"
    )


def test_commented_out_policy_is_left_alone():
    text = "# cmake_policy(SET CMP0177 NEW)\n"
    assert psk.patch_policy_guards(text) == (text, "Not needed")


# --------------------------------------------------------------------------------------------
# cuda13-cccl-include


def test_cccl_not_needed_when_tree_names_it():
    text = (
        "include_directories(${PROJECT_SOURCE_DIR}/include)\n"
        'if (CUDA_VERSION VERSION_GREATER_EQUAL 13.0)\n'
        '    include_directories(${CUDAToolkit_INCLUDE_DIRS}/cccl)\nendif()\n'
    )
    assert psk.patch_cccl_include(text) == (text, "Not needed")


def test_cccl_falls_back_to_set_includes_anchor():
    text = "project(x)\nset(INCLUDES\n    ${CUTLASS}/include\n)\nadd_library(y y.cc)\n"
    new, status = psk.patch_cccl_include(text)
    assert status == "Applied"
    assert new.index("VERSION_GREATER_EQUAL 13.0") > new.index("${CUTLASS}/include\n)\n")
    assert new.index("VERSION_GREATER_EQUAL 13.0") < new.index("add_library")


def test_cccl_fetchcontent_of_cccl_repo_does_not_count_as_handled():
    text = (
        "FetchContent_Declare(cccl GIT_REPOSITORY https://github.com/NVIDIA/cccl)\n"
        "include_directories(inc)\n"
    )
    assert psk.patch_cccl_include(text)[1] == "Applied"


# --------------------------------------------------------------------------------------------
# fa3-respect-option


@pytest.mark.parametrize(
    "fa3, expected",
    [
        (fx.FA3_FORCED, "Applied"),
        (fx.FA3_FORCED_SM90A, "Applied"),
        (fx.FA3_FORCED_BELOW_13, "Applied"),
        (fx.FA3_UPSTREAM_GUARDED, "Not needed"),
        (fx.FA3_DEFAULT_ONLY, "Not needed"),
        (fx.FA3_NONE, "Not needed"),
    ],
)
def test_fa3_forcing_variants(tmp_path, fa3, expected):
    kdir = fx.write_tree(tmp_path, fa3=fa3)
    res = run_patch(tmp_path)
    assert res.returncode == 0, res.stderr
    assert statuses(res.stdout)["fa3-respect-option"] == expected
    cm = (kdir / "CMakeLists.txt").read_text()
    if expected == "Applied":
        assert re.search(
            r"^    if \(NOT FLEETCTL_SGL_KERNEL_FA3_EXPLICIT\)\n        set\(SGL_KERNEL_ENABLE_FA3 ON\)\n    endif\(\)$",
            cm, re.M)
        capture = cm.index("if (DEFINED CACHE{SGL_KERNEL_ENABLE_FA3})")
        option = cm.index('option(SGL_KERNEL_ENABLE_FA3 ')
        forget = cm.index("unset(SGL_KERNEL_ENABLE_FA3 CACHE)")
        assert capture < option < forget < cm.index("set(SGL_KERNEL_ENABLE_FA3 ON)")
    else:
        assert "FLEETCTL" not in cm


def test_fa3_forcing_at_top_level_without_option():
    text = "project(x)\nset(SGL_KERNEL_ENABLE_FA3 ON)\nif(SGL_KERNEL_ENABLE_FA3)\nendif()\n"
    new, status = psk.patch_fa3_option(text)
    assert status == "Applied"
    assert new.index("if (DEFINED CACHE{SGL_KERNEL_ENABLE_FA3})") < new.index(
        "if (NOT FLEETCTL_SGL_KERNEL_FA3_EXPLICIT)\n    set(SGL_KERNEL_ENABLE_FA3 ON)\nendif()")
    assert "unset(" not in new  # no option(): nothing to forget
    assert psk.patch_fa3_option(new) == (new, "Already applied")


# --------------------------------------------------------------------------------------------
# fa3-soft-import


def _import_flash_attn(tmp_path, kdir, with_flash_ops):
    """Import sgl_kernel.flash_attn from the tree in a fresh interpreter (torch is a stub)."""
    stub = tmp_path / "stub"
    (stub / "torch").mkdir(parents=True, exist_ok=True)
    (stub / "torch" / "__init__.py").write_text("")
    pkg = kdir / "python" / "sgl_kernel"
    fo = pkg / "flash_ops.py"
    if with_flash_ops:
        fo.write_text("LOADED = True\n")
    elif fo.exists():
        fo.unlink()
    code = (
        "import sgl_kernel.flash_attn as fa\n"
        "print('flash_ops =', None if fa.flash_ops is None else fa.flash_ops.__name__)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(stub), str(kdir / "python")]))
    return subprocess.run([sys.executable, "-W", "always", "-B", "-c", code],
                          capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize("flash_import", [fx.IMPORT_HARD_TRY, fx.IMPORT_HARD_TRY_ONELINE, fx.IMPORT_BARE])
def test_flash_ops_import_becomes_soft(tmp_path, flash_import):
    kdir = fx.write_tree(tmp_path / "src", flash_import=flash_import)
    # the failure story: without FA3 the import of flash_attn fails
    before = _import_flash_attn(tmp_path, kdir, with_flash_ops=False)
    assert before.returncode != 0 and "ImportError" in before.stderr

    sparse = kdir / "python" / "sgl_kernel" / "sparse_flash_attn.py"
    sparse_before = sparse.read_bytes()
    res = run_patch(tmp_path / "src")
    assert res.returncode == 0, res.stderr
    assert statuses(res.stdout)["fa3-soft-import"] == "Applied"
    assert sparse.read_bytes() == sparse_before  # lazy import inside a function: left alone

    without = _import_flash_attn(tmp_path, kdir, with_flash_ops=False)
    assert without.returncode == 0, without.stderr
    assert "flash_ops = None" in without.stdout
    assert "RuntimeWarning" in without.stderr and "without FA3" in without.stderr

    with_fa3 = _import_flash_attn(tmp_path, kdir, with_flash_ops=True)
    assert with_fa3.returncode == 0, with_fa3.stderr
    assert "flash_ops = sgl_kernel.flash_ops" in with_fa3.stdout
    assert "without FA3" not in with_fa3.stderr


@pytest.mark.parametrize("flash_import", [fx.IMPORT_SOFT, fx.IMPORT_NO_FILE])
def test_flash_ops_import_not_needed(tmp_path, flash_import):
    kdir = fx.write_tree(tmp_path, flash_import=flash_import)
    pkg_before = {p.name: p.read_bytes() for p in (kdir / "python" / "sgl_kernel").iterdir()}
    res = run_patch(tmp_path)
    assert res.returncode == 0, res.stderr
    assert statuses(res.stdout)["fa3-soft-import"] == "Not needed"
    assert {p.name: p.read_bytes() for p in (kdir / "python" / "sgl_kernel").iterdir()} == pkg_before


def test_docstring_example_is_not_an_import():
    text = 'def f():\n    """Use it like this:\n\nfrom sgl_kernel import flash_ops\n"""\n'
    assert psk.patch_fa3_import(text) == (text, None)


def test_alias_is_bound_to_none():
    text = "import sgl_kernel.flash_ops as _fa3  # registers torch.ops.sgl_kernel.fwd\n"
    new, status = psk.patch_fa3_import(text)
    assert status == "Applied"
    assert "    _fa3 = None\n" in new
    ns = {}
    with pytest.warns(RuntimeWarning, match="without FA3"):
        exec(compile(new, "flash_attn.py", "exec"), ns)  # sgl_kernel is not importable here
    assert ns["_fa3"] is None


# --------------------------------------------------------------------------------------------
# missing anchors: exit 1, patch and file named, nothing touched


def test_missing_cmake_anchor_touches_nothing(tmp_path):
    kdir = fx.write_tree(tmp_path, include_dirs=False)
    before = fx.tree_digest(tmp_path)
    res = run_patch(tmp_path)
    assert res.returncode == 1
    assert res.stdout == ""
    assert "cuda13-cccl-include" in res.stderr
    assert str(kdir / "CMakeLists.txt") in res.stderr
    assert "nothing was changed" in res.stderr
    assert fx.tree_digest(tmp_path) == before


def test_missing_python_anchor_touches_nothing(tmp_path):
    kdir = fx.write_tree(tmp_path, layout=fx.NEW_ROOT, flash_import=fx.IMPORT_UNKNOWN)
    before = fx.tree_digest(tmp_path)
    res = run_patch(tmp_path)
    assert res.returncode == 1
    assert "fa3-soft-import" in res.stderr
    assert str(kdir / "python" / "sgl_kernel" / "flash_attn.py") in res.stderr
    assert "cuda13-cccl-include" not in res.stderr
    # the CMake patches would apply, but all or nothing: CMakeLists.txt is untouched too
    assert fx.tree_digest(tmp_path) == before


def test_every_missing_anchor_is_reported(tmp_path):
    fx.write_tree(tmp_path, include_dirs=False, flash_import=fx.IMPORT_UNKNOWN)
    before = fx.tree_digest(tmp_path)
    res = run_patch(tmp_path)
    assert res.returncode == 1
    assert "cuda13-cccl-include" in res.stderr and "fa3-soft-import" in res.stderr
    assert fx.tree_digest(tmp_path) == before


def test_try_with_more_than_the_import_is_an_anchor_error():
    text = "try:\n    from sgl_kernel import flash_ops\n    X = 1\nexcept:\n    raise\n"
    with pytest.raises(psk.AnchorMissing, match="more than the flash_ops import"):
        psk.patch_fa3_import(text)


# --------------------------------------------------------------------------------------------
# --dry-run and --check


def test_dry_run_writes_nothing(tmp_path):
    fx.write_tree(tmp_path)
    before = fx.tree_digest(tmp_path)
    res = run_patch("--dry-run", tmp_path)
    assert res.returncode == 0, res.stderr
    assert set(statuses(res.stdout).values()) == {"Would apply"}
    assert "+if(POLICY CMP0177)" in res.stdout
    assert "+    flash_ops = None" in res.stdout
    assert fx.tree_digest(tmp_path) == before

    res = run_patch(tmp_path)
    assert set(statuses(res.stdout).values()) == {"Applied"}
    after = fx.tree_digest(tmp_path)
    dry = run_patch("--dry-run", tmp_path)
    assert dry.returncode == 0
    assert set(statuses(dry.stdout).values()) == {"Already applied"}
    assert "+++" not in dry.stdout
    assert fx.tree_digest(tmp_path) == after


def test_check_reports_pending_and_writes_nothing(tmp_path):
    fx.write_tree(tmp_path, fa3=fx.FA3_NONE)
    before = fx.tree_digest(tmp_path)
    res = run_patch("--check", tmp_path)
    assert res.returncode == 1
    got = statuses(res.stdout)
    assert got["fa3-respect-option"] == "Not needed"
    assert got["cmake-policy-guards"] == "Would apply"
    assert fx.tree_digest(tmp_path) == before
    assert run_patch(tmp_path).returncode == 0
    assert run_patch("--check", tmp_path).returncode == 0


# --------------------------------------------------------------------------------------------
# Python 3.8 on the host


def _python38():
    candidates = [shutil.which("python3.8")]
    candidates += sorted(glob.glob(os.path.join(REAL_HOME, ".pyenv/versions/3.8*/bin/python3.8")))
    for c in candidates:
        if not c:
            continue
        try:
            out = subprocess.run([c, "-c", "import sys; print(sys.version_info[:2])"],
                                 capture_output=True, text=True, timeout=30)
        except OSError:
            continue
        if out.returncode == 0 and out.stdout.strip() == "(3, 8)":
            return c
    return None


def test_script_is_python38_syntax():
    src = SCRIPT.read_text()
    tree = ast.parse(src, feature_version=(3, 8))
    # no builtin generics in annotations/calls evaluated at runtime (list[str] needs 3.9)
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            assert node.value.id not in ("list", "dict", "tuple", "set", "type"), ast.dump(node)
    for banned in ("removeprefix", "removesuffix", "is_relative_to", "BooleanOptionalAction"):
        assert banned not in src


def test_runs_under_python38(tmp_path):
    py38 = _python38()
    if py38 is None:
        pytest.fail("no Python 3.8 interpreter here")
    fx.write_tree(tmp_path)
    res = run_patch(tmp_path, python=py38)
    assert res.returncode == 0, res.stderr
    assert set(statuses(res.stdout).values()) == {"Applied"}
    after = fx.tree_digest(tmp_path)
    res = run_patch(tmp_path, python=py38)
    assert set(statuses(res.stdout).values()) == {"Already applied"}
    assert fx.tree_digest(tmp_path) == after


# --------------------------------------------------------------------------------------------
# real CMake


CMAKE = find_cmake()  # PATH, else PyPI's cmake beside this interpreter (scripts/setup.sh); never skipped


def _cmake(*args, cwd=None):
    return subprocess.run([CMAKE, *[str(a) for a in args]], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def _cmake_version():
    out = _cmake("--version").stdout
    m = re.search(r"cmake version (\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2)))


HERMETIC_CMAKELISTS = """\
cmake_minimum_required(VERSION 3.20)
project(sgl-kernel LANGUAGES CXX)

# CMake
cmake_policy(SET CMP0054 NEW)
cmake_policy(SET CMP0169 OLD)
cmake_policy(SET CMP0177 NEW)

include_directories(
    ${PROJECT_SOURCE_DIR}/include
)

option(SGL_KERNEL_ENABLE_FA3 "Enable FA3" OFF)
if ("${CUDA_VERSION}" VERSION_GREATER_EQUAL "12.4")
    set(SGL_KERNEL_ENABLE_FA3 ON)
endif()

cmake_policy(GET CMP0054 p54)
get_directory_property(incs INCLUDE_DIRECTORIES)
message(STATUS "RESULT FA3=${SGL_KERNEL_ENABLE_FA3} CMP0054=${p54} INCS=${incs}")
"""


def _configure(src, build, *defines):
    res = _cmake("-S", src, "-B", build, *defines)
    m = re.search(r"RESULT (.*)", res.stdout)
    return res, (m.group(1) if m else None)


def test_patched_cmakelists_configure_with_real_cmake(tmp_path):
    """No CUDA needed: the CUDA facts CMake would find are passed in as cache values."""
    src = tmp_path / "sgl-kernel"
    (src / "python" / "sgl_kernel").mkdir(parents=True)
    (src / "CMakeLists.txt").write_text(HERMETIC_CMAKELISTS)
    fake_cuda = tmp_path / "cuda" / "include"
    (fake_cuda / "cccl" / "thrust").mkdir(parents=True)
    cuda13 = ["-DCUDA_VERSION=13.0", "-DCMAKE_CUDA_COMPILER_VERSION=13.0.88",
              "-DCUDAToolkit_INCLUDE_DIRS=%s" % fake_cuda]

    if _cmake_version() < (3, 31):  # the failure story: CMP0177 is not known to this CMake
        res, _ = _configure(src, tmp_path / "b0", *cuda13)
        assert res.returncode != 0
        assert "CMP0177" in res.stderr

    assert run_patch(src).returncode == 0

    res, got = _configure(src, tmp_path / "b1", *cuda13)
    assert res.returncode == 0, res.stderr
    assert "FA3=ON" in got and "CMP0054=NEW" in got  # a known policy is still set
    assert "%s/cccl" % fake_cuda in got

    # FA3 obeys -DSGL_KERNEL_ENABLE_FA3=OFF, and a re-configure keeps each choice
    res, got = _configure(src, tmp_path / "b2", "-DSGL_KERNEL_ENABLE_FA3=OFF", *cuda13)
    assert res.returncode == 0 and "FA3=OFF" in got
    res, got = _configure(src, tmp_path / "b2", *cuda13)
    assert "FA3=OFF" in got
    res, got = _configure(src, tmp_path / "b1", *cuda13)
    assert "FA3=ON" in got

    # CUDA 12: no cccl directory is added
    res, got = _configure(src, tmp_path / "b3", "-DCUDA_VERSION=12.8",
                          "-DCMAKE_CUDA_COMPILER_VERSION=12.8.93",
                          "-DCUDAToolkit_INCLUDE_DIRS=%s" % fake_cuda)
    assert res.returncode == 0 and "cccl" not in got and "FA3=ON" in got


def _nvcc():
    for c in (shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if c and os.path.exists(c):
            return c
    return None


REAL_CUDA_CMAKELISTS = """\
cmake_minimum_required(VERSION 3.20)
project(sgl-kernel LANGUAGES CXX CUDA)
cmake_policy(SET CMP0169 OLD)
cmake_policy(SET CMP0177 NEW)
find_package(CUDAToolkit REQUIRED)
set(CUDA_VERSION ${CUDAToolkit_VERSION})

include_directories(
    ${PROJECT_SOURCE_DIR}/include
)

option(SGL_KERNEL_ENABLE_FA3 "Enable FA3" OFF)
if ("${CUDA_VERSION}" VERSION_GREATER_EQUAL "12.4")
    set(SGL_KERNEL_ENABLE_FA3 ON)
endif()
message(STATUS "RESULT FA3=${SGL_KERNEL_ENABLE_FA3}")

# a host-compiled source reaching the CCCL headers, as the CUTLASS headers do
add_library(host_ops STATIC csrc/host_ops.cc)
target_link_libraries(host_ops PRIVATE CUDA::cudart)
"""

HOST_OPS_CC = """\
#include <cuda/std/cstdint>
#include <thrust/version.h>

int host_thrust_version() { return THRUST_VERSION; }
"""


def test_real_cuda_toolkit_builds_host_source_after_patch(tmp_path):
    nvcc = _nvcc()
    if nvcc is None:
        pytest.fail("no nvcc on PATH or at /usr/local/cuda (CI has CUDA 13 there)")
    ver = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    if not re.search(r"release 1[3-9]\.", ver):
        pytest.fail("the cccl move needs CUDA >= 13; nvcc here: %s" % ver.strip().splitlines()[-1:])
    src = tmp_path / "sgl-kernel"
    (src / "python" / "sgl_kernel").mkdir(parents=True)
    (src / "csrc").mkdir()
    (src / "csrc" / "host_ops.cc").write_text(HOST_OPS_CC)
    # the failure story, unpatched (minus the policies this CMake may not know): FA3 is forced
    # on despite -DSGL_KERNEL_ENABLE_FA3=OFF and the host source cannot find the CCCL headers
    (src / "CMakeLists.txt").write_text(re.sub(r"cmake_policy\(.*\)\n", "", REAL_CUDA_CMAKELISTS))
    res, got = _configure(src, tmp_path / "b0", "-DCMAKE_CUDA_COMPILER=%s" % nvcc,
                          "-DSGL_KERNEL_ENABLE_FA3=OFF")
    assert res.returncode == 0, res.stdout + res.stderr
    assert got == "FA3=ON"
    assert _cmake("--build", tmp_path / "b0").returncode != 0

    (src / "CMakeLists.txt").write_text(REAL_CUDA_CMAKELISTS)
    assert run_patch(src).returncode == 0
    res, got = _configure(src, tmp_path / "b", "-DCMAKE_CUDA_COMPILER=%s" % nvcc,
                          "-DSGL_KERNEL_ENABLE_FA3=OFF")
    assert res.returncode == 0, res.stdout + res.stderr
    assert got == "FA3=OFF"
    build = _cmake("--build", tmp_path / "b")
    assert build.returncode == 0, build.stdout + build.stderr


# --------------------------------------------------------------------------------------------
# properties

POLICY_NUMS = ["CMP%04d" % n for n in (54, 74, 77, 91, 135, 144, 148, 156, 167, 169, 177, 180)]
NOISE = st.sampled_from([
    "",
    "# CMake",
    "# cmake_policy(SET CMP0999 NEW)",
    "set(CMAKE_COLOR_DIAGNOSTICS ON)",
    "include(FetchContent)",
    'message(STATUS "policy: set")',
    "  # indented comment",
])


@st.composite
def policy_documents(draw):
    nums = draw(st.lists(st.sampled_from(POLICY_NUMS), unique=True, max_size=6))
    nums = draw(st.permutations(nums))
    items = []
    for num in nums:
        value = draw(st.sampled_from(["NEW", "OLD"]))
        kind = draw(st.sampled_from(["plain", "plain", "guarded", "in-if", "lower"]))
        indent = draw(st.sampled_from(["", "", "  ", "\t"]))
        stmt = "cmake_policy(SET %s %s)" % (num, value)
        if kind == "lower":
            stmt = "CMAKE_POLICY( SET %s %s )" % (num, value)
        if kind == "guarded":
            items += ["if(POLICY %s)" % num, "    " + stmt, "endif()"]
        elif kind == "in-if":
            items += ["if(UNIX)", indent + "  " + stmt, "endif()"]
        else:
            items.append(indent + stmt)
        items += draw(st.lists(NOISE, max_size=2))
    head = draw(st.lists(NOISE, max_size=3))
    nl = draw(st.sampled_from(["\n", "\r\n"]))
    final = draw(st.booleans())
    text = nl.join(["cmake_minimum_required(VERSION 3.26)"] + head + items)
    return (text + nl if final else text), len(nums)


def _skeleton(text):
    """The document without guard lines, whitespace-insensitive: what must never change."""
    out = []
    for line in text.replace("\r\n", "\n").split("\n"):
        s = line.strip()
        if re.match(r"^if\(POLICY CMP\d{4}\)$", s) or s == "endif()":
            continue
        out.append(s)
    while out and out[-1] == "":
        out.pop()
    return out


@settings(max_examples=300, deadline=None)
@given(policy_documents())
def test_policy_guards_twice_equals_once(doc):
    text, count = doc
    once, status = psk.patch_policy_guards(text)
    twice, status2 = psk.patch_policy_guards(once)
    assert twice == once
    assert status2 == ("Already applied" if count else "Not needed")
    # one guard per policy statement, each policy line directly inside its own guard
    lines = once.replace("\r\n", "\n").split("\n")
    policy_at = [i for i, l in enumerate(lines) if re.match(r"^\s*cmake_policy\s*\(", l, re.I)]
    assert len(policy_at) == count
    assert len(re.findall(r"^\s*if\(POLICY CMP\d{4}\)\s*$", once, re.M)) == count
    for i in policy_at:
        num = re.search(r"CMP\d{4}", lines[i]).group(0)
        assert lines[i - 1].strip() == "if(POLICY %s)" % num
        assert lines[i + 1].strip() == "endif()"
    # nothing else moved, and the newline convention is kept
    assert _skeleton(once) == _skeleton(text)
    if "\r\n" in text:
        assert once.count("\n") == once.count("\r\n")
    # the if/endif structure stays balanced
    assert len(re.findall(r"^\s*if\s*\(", once, re.M | re.I)) == len(
        re.findall(r"^\s*endif\s*\(", once, re.M | re.I))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    policies=st.lists(st.tuples(st.sampled_from(POLICY_NUMS), st.sampled_from(["NEW", "OLD"])),
                      unique_by=lambda p: p[0], max_size=4),
    fa3=st.sampled_from([fx.FA3_FORCED, fx.FA3_FORCED_SM90A, fx.FA3_FORCED_BELOW_13,
                         fx.FA3_UPSTREAM_GUARDED, fx.FA3_DEFAULT_ONLY, fx.FA3_NONE]),
    flash_import=st.sampled_from([fx.IMPORT_HARD_TRY, fx.IMPORT_HARD_TRY_ONELINE, fx.IMPORT_BARE,
                                  fx.IMPORT_SOFT]),
)
def test_whole_tree_plan_is_idempotent(tmp_path_factory, policies, fa3, flash_import):
    root = tmp_path_factory.mktemp("tree")
    kdir = fx.write_tree(root, policies=tuple(policies), fa3=fa3, flash_import=flash_import)
    statuses1, changes, errors = psk.plan(str(kdir))
    assert not errors
    assert [n for n, _ in statuses1] == list(NAMES)
    psk.write_all(changes)
    statuses2, changes2, errors2 = psk.plan(str(kdir))
    assert not errors2 and changes2 == {}
    for (name, s1), (_, s2) in zip(statuses1, statuses2):
        assert s2 == ("Already applied" if s1 == "Applied" else s1), name
    cm = (kdir / "CMakeLists.txt").read_text()
    assert guarded_policy_count(cm) == len(policies)


# --------------------------------------------------------------------------------------------
# constructs the patches do not know: refused with file, line and construct, nothing changed


def _refused(tmp_path, cmake_text, patch, construct):
    kdir = fx.write_tree(tmp_path)
    (kdir / "CMakeLists.txt").write_text(cmake_text)
    before = fx.tree_digest(tmp_path)
    res = run_patch(tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stdout == ""
    line = cmake_text.splitlines().index(construct) + 1
    assert "patch %s, file %s:%d: " % (patch, kdir / "CMakeLists.txt", line) in res.stderr, res.stderr
    assert res.stderr.splitlines()[0].endswith(": " + construct.strip()), res.stderr
    assert "nothing was changed" in res.stderr
    assert fx.tree_digest(tmp_path) == before
    return res.stderr


def test_fa3_module_under_an_unknown_switch_is_refused(tmp_path):
    text = fx.cmakelists().replace("if (SGL_KERNEL_ENABLE_FA3)\n", "if (WITH_HOPPER_ATTENTION)\n")
    err = _refused(tmp_path, text, "fa3-respect-option", "if (WITH_HOPPER_ATTENTION)")
    assert "switch this patch does not know" in err


def test_fa3_module_built_unconditionally_is_refused(tmp_path):
    text = fx.cmakelists(fa3=fx.FA3_NONE) + 'Python_add_library(flash_ops MODULE WITH_SOABI "csrc/flash_extension.cc")\n'
    _refused(tmp_path, text, "fa3-respect-option", 'Python_add_library(flash_ops MODULE WITH_SOABI "csrc/flash_extension.cc")')


def test_fa3_switch_set_to_a_computed_value_is_refused(tmp_path):
    text = fx.cmakelists(fa3=fx.FA3_FORCED).replace("    set(SGL_KERNEL_ENABLE_FA3 ON)\n",
                                                    "    set(SGL_KERNEL_ENABLE_FA3 ${HOPPER_FOUND})\n")
    err = _refused(tmp_path, text, "fa3-respect-option", "    set(SGL_KERNEL_ENABLE_FA3 ${HOPPER_FOUND})")
    assert "computed value" in err


def test_build_fa3_variable_is_overridden_by_an_explicit_define():
    text = ("project(x)\nset(BUILD_FA3, OFF)\nif (CUDA_VERSION VERSION_GREATER_EQUAL 12.4)\n    set(BUILD_FA3 ON)\n"
            "endif()\n\n# FA3\nif (BUILD_FA3)\n    Python_add_library(flash_ops MODULE f.cc)\nendif()\n")
    new, status = psk.patch_fa3_option(text)
    assert status == "Applied"
    block = ("if (DEFINED CACHE{SGL_KERNEL_ENABLE_FA3})\n    set(BUILD_FA3 \"$CACHE{SGL_KERNEL_ENABLE_FA3}\")\n"
             "endif()\n# FA3\nif (BUILD_FA3)\n")
    assert block in new
    assert new.index("set(BUILD_FA3 ON)") < new.index(block)  # the forcing runs first, the define last
    assert psk.patch_fa3_option(new) == (new, "Already applied")


def test_forcing_after_the_override_is_refused_not_reported_done():
    text = ("project(x)\nif (DEFINED CACHE{SGL_KERNEL_ENABLE_FA3})\n    set(BUILD_FA3 \"$CACHE{SGL_KERNEL_ENABLE_FA3}\")\n"
            "endif()\nset(BUILD_FA3 ON)\nif (BUILD_FA3)\n    Python_add_library(flash_ops MODULE f.cc)\nendif()\n")
    with pytest.raises(psk.AnchorMissing, match="FA3 would stay forced") as info:
        psk.patch_fa3_option(text)
    assert info.value.line == 5 and info.value.construct == "set(BUILD_FA3 ON)"


def test_multi_line_policy_setting_is_refused(tmp_path):
    text = fx.cmakelists().replace("cmake_policy(SET CMP0177 NEW)\n", "cmake_policy(SET CMP0177\n    NEW)\n")
    _refused(tmp_path, text, "cmake-policy-guards", "cmake_policy(SET CMP0177")


def test_threads_from_an_unknown_variable_is_refused(tmp_path):
    text = fx.cmakelists().replace('"--threads=32"', '"--threads=${MY_THREADS}"')
    _refused(tmp_path, text, "compile-threads-option", '    "--threads=${MY_THREADS}"')


def test_fixed_threads_become_a_cache_option_with_the_same_default():
    text = ('project(x)\nset(FLAGS\n    "-O3"\n    "--threads=16"  # nvcc\n)\n'
            'list(APPEND FLAGS "--threads=16")\n# "--threads=8" in a comment stays\n')
    new, status = psk.patch_compile_threads(text)
    assert status == "Applied"
    assert new.count("--threads=${SGL_KERNEL_COMPILE_THREADS}") == 2
    assert '# "--threads=8" in a comment stays' in new
    assert new.index('set(SGL_KERNEL_COMPILE_THREADS 16 CACHE STRING') < new.index("set(FLAGS")
    assert psk.patch_compile_threads(new) == (new, "Already applied")
    upstream = 'set(SGL_KERNEL_COMPILE_THREADS 32 CACHE STRING "x")\nset(F "--threads=${SGL_KERNEL_COMPILE_THREADS}")\n'
    assert psk.patch_compile_threads(upstream) == (upstream, "Not needed")


def test_cache_force_of_fa3_is_refused_and_a_cache_default_is_not_a_forcing(tmp_path):
    text = ('option(SGL_KERNEL_ENABLE_FA3 "FA3" OFF)\nif (CUDA_VERSION VERSION_GREATER_EQUAL 12.4)\n'
            '    set(SGL_KERNEL_ENABLE_FA3 ON CACHE BOOL "" FORCE)\nendif()\n'
            'if (SGL_KERNEL_ENABLE_FA3)\n    Python_add_library(flash_ops MODULE f.cc)\nendif()\n')
    with pytest.raises(psk.AnchorMissing, match="CACHE ... FORCE") as info:
        psk.patch_fa3_option(text)
    assert info.value.line == 3
    # a plain cache default is not a forcing: the command line wins over it (real cmake)
    default = text.replace(' FORCE)', ')')
    assert psk.patch_fa3_option(default) == (default, "Not needed")
    prober = Prober(tmp_path)
    src = prober.project(default)
    assert "FA3_MODULE" not in prober.configure(src, "off", "12.8", SGL_KERNEL_ENABLE_FA3="OFF")[1]
    assert prober.configure(src, "on", "12.0", SGL_KERNEL_ENABLE_FA3="ON")[1].get("FA3_MODULE") == "built"


# --- restrict-gencodes: the library sgl_kernel's loader never loads on the host is not built ---

REAL_LOADER = '''def _load_architecture_specific_ops():
    compute_capability = _get_compute_capability()
    if compute_capability == 90:
        ops_subdir = "sm90"
        variant_name = "SM90"
    elif compute_capability is not None:
        ops_subdir = "sm100"
    else:
        ops_subdir = "sm100"
'''
TWO_LIBS = '''cmake_minimum_required(VERSION 3.26)
project(k LANGUAGES CXX)
install(TARGETS common_ops_sm90_build LIBRARY DESTINATION sgl_kernel/sm90)  # fast math (the loader's)
install(TARGETS common_ops_sm100_build LIBRARY DESTINATION "sgl_kernel/sm100")
'''


def _loader_tree(tmp_path, loader):
    pkg = tmp_path / "python" / "sgl_kernel"
    pkg.mkdir(parents=True)
    if loader is not None:
        (pkg / "load_utils.py").write_text(loader)
    return tmp_path


def test_loader_rule_read_from_the_real_form(tmp_path):
    assert psk.loader_rule(str(_loader_tree(tmp_path, REAL_LOADER))) == {"sm90": [90], "sm100": []}


@pytest.mark.parametrize("loader", [
    None,  # no loader file: one library, or a tree before the split
    'ops_subdir = "sm100"\n',  # a folder, but no rule choosing it
    REAL_LOADER.replace("elif compute_capability is not None:", "elif compute_capability >= 100:")
    .replace('    else:\n        ops_subdir = "sm100"\n', ""),  # SMs the rule names no folder for
])
def test_a_loader_rule_not_in_the_known_form_builds_every_library(tmp_path, loader):
    rule = psk.loader_rule(str(_loader_tree(tmp_path, loader)))
    assert rule == {}
    assert psk.patch_skip_unloaded(TWO_LIBS, rule) == (TWO_LIBS, psk.NOT_NEEDED)


def test_each_loader_folder_gets_its_filter_and_an_optional_install():
    new, status = psk.patch_skip_unloaded(TWO_LIBS, {"sm90": [90], "sm100": []})
    assert status == psk.APPLIED
    lines = new.splitlines()
    at = lines.index("install(TARGETS common_ops_sm90_build LIBRARY DESTINATION sgl_kernel/sm90 OPTIONAL)"
                     "  # fast math (the loader's)")
    assert lines[at + 1] == 'fleetctl_skip_unloaded(common_ops_sm90_build "90" "")  # fleetctl: restrict-gencodes'
    at = lines.index('install(TARGETS common_ops_sm100_build LIBRARY DESTINATION "sgl_kernel/sm100" OPTIONAL)')
    assert lines[at + 1] == 'fleetctl_skip_unloaded(common_ops_sm100_build "" "90")  # fleetctl: restrict-gencodes'
    assert lines[1] == "# fleetctl: restrict-gencodes: a library sgl_kernel's loader loads on no SM of" \
                       " ${FLEETCTL_SGL_ARCHS} is not built"
    assert psk.patch_skip_unloaded(new, {"sm90": [90], "sm100": []}) == (new, psk.ALREADY)


def test_libraries_installed_through_a_loop_are_left_alone():
    loop = ("cmake_minimum_required(VERSION 3.26)\nforeach(lib sm90 sm100)\n"
            "  install(TARGETS common_ops_${lib} LIBRARY DESTINATION sgl_kernel/${lib})\nendforeach()\n")
    assert psk.patch_skip_unloaded(loop, {"sm90": [90], "sm100": []}) == (loop, psk.NOT_NEEDED)


def test_library_filter_with_real_cmake(tmp_path):
    """Real CMake: for 90a the sm100 library leaves the default build and its OPTIONAL install is
    skipped; for 100a the sm90 one; without FLEETCTL_SGL_ARCHS both build."""
    src = _loader_tree(tmp_path / "src", REAL_LOADER)
    (src / "a.c").write_text("int f(void) { return 1; }\n")
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(k LANGUAGES C)\n"
        "add_library(common_ops_sm90_build MODULE a.c)\nadd_library(common_ops_sm100_build MODULE a.c)\n"
        "install(TARGETS common_ops_sm90_build LIBRARY DESTINATION sgl_kernel/sm90)\n"
        "install(TARGETS common_ops_sm100_build LIBRARY DESTINATION sgl_kernel/sm100)\n")
    text = (src / "CMakeLists.txt").read_text()
    new, status = psk.patch_skip_unloaded(text, psk.loader_rule(str(src)))
    assert status == psk.APPLIED
    (src / "CMakeLists.txt").write_text(new)
    cmake = find_cmake()
    for archs, want in (("90a", ["sm90"]), ("100a", ["sm100"]), ("", ["sm100", "sm90"])):
        build, dest = tmp_path / ("b" + archs), tmp_path / ("i" + archs)
        subprocess.run([cmake, "-S", str(src), "-B", str(build), "-DFLEETCTL_SGL_ARCHS=" + archs],
                       check=True, capture_output=True, text=True)
        subprocess.run([cmake, "--build", str(build)], check=True, capture_output=True, text=True)
        subprocess.run([cmake, "--install", str(build), "--prefix", str(dest)], check=True, capture_output=True)
        # (install() makes the skipped library's folder, empty: a wheel holds no empty folder)
        assert sorted(p.parent.name for p in dest.rglob("*.so")) == want, archs
