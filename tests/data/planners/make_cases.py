"""Writes every planner data case in this folder (run it after changing a planner on purpose, then
review the diff): ``python tests/data/planners/make_cases.py [OUT_DIR]`` (OUT_DIR: where the
``<action>/<case>.json`` files go, this folder by default). A case is changed here, never in its
JSON by hand: tests/test_planners.py runs this into a temporary folder and fails when what it
writes is not, byte for byte, the committed cases (one more, one fewer or one different)."""
import json
import sys
from pathlib import Path

D = Path(__file__).resolve().parent
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else D
sys.path.insert(0, str(D.parents[2]))
CUDA = {"home": "/usr/local/cuda", "nvcc": "/usr/local/cuda/bin/nvcc", "version": "13.0", "source": "/usr/local/cuda",
        "archs": ["compute_80", "compute_90", "compute_100", "compute_120"], "cuobjdump": "/usr/local/cuda/bin/cuobjdump"}
PY = {"executable": "/venv/bin/python3", "exists": True, "prefix": "/venv", "tag": "cp312", "version": "3.12.3",
      "torch": "2.11.0+cu130", "torch_cuda": "13.0"}
BUILD90 = {"torch_cuda_arch_list": "9.0a", "cuda_architectures": "90a", "max_jobs": 8, "mixed_sm": False}
FACTS90 = {"gpus": [{"index": 0, "name": "NVIDIA H200", "compute_cap": "9.0", "memory_mib": 143771}],
           "cuda": CUDA, "python": PY, "build": BUILD90, "cmake": {"version": "3.28.3", "path": "/usr/bin/cmake"},
           "disk_free_mib": 200000}
TREE = "t" * 64
BW = {"src": "/w/src/k", "out_dir": "/w/wheels"}
def key_for(facts, tree=TREE, archs="9.0a", defines=None):
    from fleetctl.build.env import cmake_defines
    from fleetctl.tasks.build_keys import build_inputs, build_key
    plan = dict(facts["build"])
    if archs != "9.0a":
        plan.update(torch_cuda_arch_list=archs, cuda_architectures=";".join(a.split("+")[0].replace(".", "") for a in archs.split(";")))
    d = cmake_defines({**facts, "build": plan}, defines or {})
    return build_key(build_inputs(tree, plan, d, facts, "h1"))
def inputs_for(facts, tree=TREE):
    from fleetctl.build.env import cmake_defines
    from fleetctl.tasks.build_keys import build_inputs
    plan = dict(facts["build"])
    return build_inputs(tree, plan, cmake_defines({**facts, "build": plan}, {}), facts, "h1")
K = key_for(FACTS90)
DEST = f"/w/wheels/{K[:16]}"
WHEEL = f"{DEST}/fp4_kernels-0.1.0-cp312-cp312-linux_x86_64.whl"
SHA = "a" * 64
STAMP = {"wheel": WHEEL, "sha256": SHA, "key": K, "inputs": inputs_for(FACTS90)}

WRITTEN = set()
def case(action, name, **c):
    if (action, name) in WRITTEN:  # the later one would silently replace the first
        raise SystemExit(f"make_cases.py: case {action}/{name} is written twice")
    WRITTEN.add((action, name))
    (OUT / action).mkdir(parents=True, exist_ok=True)
    (OUT / action / f"{name}.json").write_text(json.dumps({"action": action, **c}, indent=2) + "\n")

# command
case("command", "runs-the-argv-exactly", args={"argv": ["echo", "a b", "$HOME"]},
     steps=[{"expect": {"type": "Run", "argv": ["echo", "a b", "$HOME"], "mutating": True}, "answer": {"rc": 0}}],
     result={"status": "changed"})
case("command", "creates-exists-skips", args={"argv": ["make"], "creates": "/w/out"},
     steps=[{"expect": {"type": "Run", "argv": ["test", "-e", "/w/out"], "mutating": False}, "answer": {"rc": 0}}],
     result={"status": "skipped", "msg": "/w/out exists"})
case("command", "failure-names-the-first-error", args={"argv": ["make"]},
     steps=[{"expect": {"type": "Run", "argv": ["make"]},
             "answer": {"rc": 2, "stderr": "cuda_quant.cu(13): error: expected an expression\nmake: *** [all] Error 2\n"}}],
     result={"status": "failed", "msg": "rc=2: cuda_quant.cu(13): error: expected an expression"})
case("command", "a-cmake-error-is-named-with-its-message", args={"argv": ["cmake", "-S", ".", "-B", "b"]},
     steps=[{"expect": {"type": "Run"}, "answer": {"rc": 1, "stdout": "-- Configuring incomplete\n", "stderr":
             "CMake Error at deps/olddep/CMakeLists.txt:1 (cmake_minimum_required):\n  Compatibility with CMake < 3.5 has been removed from CMake.\n\n  Update the VERSION argument\n"}}],
     result={"status": "failed", "msg": "rc=1: CMake Error at deps/olddep/CMakeLists.txt:1 (cmake_minimum_required): "
                                        "Compatibility with CMake < 3.5 has been removed from CMake."})
case("shell", "runs-through-the-named-shell", args={"cmd": "echo $HOME | wc -c", "executable": "/bin/bash"},
     steps=[{"expect": {"type": "Run", "argv": ["/bin/bash", "-c", "echo $HOME | wc -c"]}, "answer": {"rc": 0}}],
     result={"status": "changed"})
case("script", "uploads-then-runs-with-the-venv-python", args={"src": "scripts/patch.py", "args": ["/w/src", 3]},
     steps=[{"expect": {"type": "Put", "local": "/p/scripts/patch.py", "remote": "/w/runs/r1/scripts/patch.py"}, "answer": None},
            {"expect": {"type": "Run", "argv": ["/venv/bin/python3", "/w/runs/r1/scripts/patch.py", "/w/src", "3"]}, "answer": {"rc": 0}}],
     result={"status": "changed"})
case("script", "upload-failure-fails-without-running", args={"src": "missing.py"},
     steps=[{"expect": {"type": "Put"}, "answer": {"error": "local file /p/missing.py does not exist"}}],
     result={"status": "failed", "msg": "does not exist"})
case("fail", "fails-with-the-message", args={"msg": "stop here"}, steps=[], result={"status": "failed", "msg": "stop here"})
# unless_exists: a read-only probe (a dry run answers it too), skipped when the path is there
case("fail", "unless-exists-missing-fails-with-the-message", args={"msg": "no checkout", "unless_exists": "/w/src/.git"},
     steps=[{"expect": {"type": "Run", "argv": ["test", "-e", "/w/src/.git"], "mutating": False}, "answer": {"rc": 1}}],
     result={"status": "failed", "msg": "no checkout"})
case("fail", "unless-exists-present-skips", args={"msg": "no checkout", "unless_exists": "/w/src/.git"},
     steps=[{"expect": {"type": "Run", "argv": ["test", "-e", "/w/src/.git"], "mutating": False}, "answer": {"rc": 0}}],
     result={"status": "skipped", "msg": "/w/src/.git exists"})
# copy
from fleetctl.tasks.copy import HASH_PRESENT  # noqa: E402
MAN = [["/p/k/a.py", "a.py", "1" * 64, False], ["/p/k/run.sh", "run.sh", "2" * 64, True]]
case("copy", "unchanged-files-upload-nothing", args={"src": "k", "dest": "/w/src/k"},
     steps=[{"expect": {"type": "Local"}, "answer": MAN},
            {"expect": {"type": "Run", "argv": ["/bin/sh", "-c", HASH_PRESENT, "fleetctl-hash", "/w/src/k/a.py", "/w/src/k/run.sh"], "mutating": False},
             "answer": {"rc": 0, "stdout": "1" * 64 + "  /w/src/k/a.py\n" + "2" * 64 + "  /w/src/k/run.sh\n"}}],
     result={"status": "ok", "decision": {"action": "unchanged"}})
case("copy", "uploads-only-what-differs", args={"src": "k", "dest": "/w/src/k"},
     steps=[{"expect": {"type": "Local"}, "answer": MAN},
            {"expect": {"type": "Run", "mutating": False},
             "answer": {"rc": 0, "stdout": "1" * 64 + "  /w/src/k/a.py\n"}},
            {"expect": {"type": "PutFiles"}, "answer": None}],
     result={"status": "changed", "msg": "uploaded 1 of 2 files", "decision": {"action": "upload", "files": 1}})
case("copy", "missing-local-source-fails", args={"src": "nope", "dest": "/w/x"},
     steps=[{"expect": {"type": "Local"}, "answer": {"error": "local source /p/nope does not exist"}}],
     result={"status": "failed", "msg": "does not exist"})
# build_wheel
H90 = {"facts": FACTS90, "trees": {"/w/src/k": TREE}}
SKB = {"pyproject.toml": '[build-system]\nrequires = ["scikit-build-core>=0.10", "nanobind>=2.0"]\nbuild-backend = "scikit_build_core.build"\n',
       "CMakeLists.txt": "cmake_minimum_required(VERSION 3.18)\nproject(k LANGUAGES CXX CUDA)\n"}
TEXT = {"pyproject.toml": '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"\n',
        "setup.py": "from torch.utils.cpp_extension import BuildExtension, CUDAExtension\n"}
def meta_out(files):
    """The one read of a tree on the host (build_deps.read_tree): its CMake files and top-level build files."""
    texts = {n: t for n, t in files.items() if n == "CMakeLists.txt"}
    return {"rc": 0, "stdout": json.dumps({"texts": texts, "top": {n: t for n, t in files.items() if n not in texts}})}
def venv_out(requirements=None, torch_archs=None, missing=(), tmp=None, setuptools="80.0"):
    reqs = {r: {"name": r.split(">")[0].split("=")[0], "installed": "1.0", "ok": True} for r in (requirements or [])}
    for r, v in (requirements or {}).items() if isinstance(requirements, dict) else ():
        reqs[r] = v
    return {"rc": 0, "stdout": json.dumps({"executable": "/venv/bin/python3", "prefix": "/venv", "missing": list(missing),
                                           "requirements": reqs, "setuptools": setuptools, "torch_archs": torch_archs,
                                           "torch_archs_error": None, "tmp": tmp}) + "\n"}
READ_TREE = "the tree's build and CMake files, read on the host in one probe (no copy task put it there)"
META_SKB = {"expect": {"type": "Run", "mutating": False}, "answer": meta_out(SKB), "note": READ_TREE}
META_TEXT = {"expect": {"type": "Run", "mutating": False}, "answer": meta_out(TEXT), "note": READ_TREE}
# the stamps probe (build_keys.stamps_probe) of a host that holds no wheel yet, asked before the venv probe
NO_STAMPS = {"expect": {"type": "Run", "mutating": False}, "answer": {"rc": 0, "stdout": ""}}
# the space allocation a builder is checked for (build_space): the build's TMPDIR in the workdir
SPACE_OK = {"expect": {"type": "Run", "mutating": False},
            "answer": {"rc": 0, "stdout": json.dumps({"/w/tmp": {"dir": "/w", "ok": True, "errno": None, "error": None,
                                                                "free_mib": 200000}}) + "\n"}}
def refused(msg, line, preflight=True, **more):
    """A build_wheel refusal: msg (a substring) of the line data["preflight"] holds; preflight: while planning."""
    return {"status": "failed", "msg": msg, **more, "preflight": preflight, "data": {"preflight": [line]}}
def build_failed(msg):
    """A build that ran and failed: not a preflight refusal."""
    return {"status": "failed", "msg": msg, "preflight": False, "data": {"preflight": None}}
PYINFO = venv_out(["scikit-build-core>=0.10", "nanobind>=2.0"])
# a host that cannot build asks its class's role (a member that can build may build for it); asked
# to build, no member can: it tells its class and fails with its preflight's line
NO_MEMBER_BUILDS = [{"expect": {"type": "ClassRole", "holds": False, "once": True}, "answer": "build"},
                    {"expect": {"type": "Fail"}, "answer": None}]
case("build_wheel", "preflight-wrong-cuda-home-fails-before-any-step", args=BW,
     host={**H90, "cuda_home": "/opt/cuda-12.9"}, steps=[],
     result=refused("cuda_home /opt/cuda-12.9 has no bin/nvcc", "cuda_home /opt/cuda-12.9 has no bin/nvcc (fix the host var "
                    "'cuda_home')", decision={"action": "fail"}))
case("build_wheel", "preflight-no-venv", args=BW, host={**H90, "venv": None, "python": "python3"}, steps=[],
     result=refused("no venv for this host", "no venv for this host: set the host var 'venv' (the build must not pick the "
                    "system Python)"))
case("build_wheel", "preflight-nvcc-rejects-an-arch-token", args={**BW, "archs": "7.0;9.0a"}, host=H90, steps=[META_SKB, NO_STAMPS, *NO_MEMBER_BUILDS],
     result=refused("nvcc 13.0 at /usr/local/cuda/bin/nvcc rejects compute_70 (arch list 7.0;9.0a",
                    "nvcc 13.0 at /usr/local/cuda/bin/nvcc rejects compute_70 (arch list 7.0;9.0a; its --list-gpu-arch: "
                    "compute_80 compute_90 compute_100 compute_120): use archs this nvcc knows, or a newer toolkit (host var cuda_home)"))
DRIVER_MSG = ("driver 535.104.05 is older than nvcc 13.0 at /usr/local/cuda/bin/nvcc needs (CUDA 13.x needs driver >= "
              "580.65.06): install driver >= 580")
case("build_wheel", "preflight-driver-older-than-the-toolkit", args=BW,
     host={**H90, "facts": {**FACTS90, "driver_version": "535.104.05"}}, steps=[],
     result=refused(DRIVER_MSG, DRIVER_MSG + " or build with an older toolkit (host var cuda_home)"))
case("build_wheel", "preflight-archs-that-run-on-no-gpu-of-the-host", args={**BW, "archs": "8.0"}, host=H90, steps=[],
     result=refused("arch list 8.0 runs on none of GPU 0 (NVIDIA H200, 9.0)",
                    "arch list 8.0 runs on none of GPU 0 (NVIDIA H200, 9.0) (SASS runs only on its own major version, "
                    "arch-specific 'a' SASS only on exactly its GPU): add the GPU's own arch, or an older arch with +PTX"))
case("build_wheel", "preflight-workdir-on-a-noexec-file-system", args=BW,
     host={**H90, "facts": {**FACTS90, "workdir_fs": {"path": "/mnt/work", "free_mib": 9000, "noexec": True, "readonly": False}}},
     steps=[META_SKB, NO_STAMPS, *NO_MEMBER_BUILDS], result=refused("the workdir's file system (/mnt/work) is mounted noexec",
                              "the workdir's file system (/mnt/work) is mounted noexec: builds run the programs they make "
                              "there (TMPDIR is put in the workdir); set the host var workdir to a folder on an exec, "
                              "writable file system"))
case("build_wheel", "preflight-memory-under-the-cgroup-limit", args=BW,
     host={**H90, "facts": {**FACTS90, "mem_available_mib": 20000, "mem_limit_mib": 512,
                            "cgroup": {"version": 1, "memory_used_mib": 12},
                            "mem_limit_source": "cgroup v1 /sys/fs/cgroup/memory/ci/memory.limit_in_bytes"}},
     steps=[META_SKB, NO_STAMPS, *NO_MEMBER_BUILDS], result=refused("only 500 MiB of memory for the build (cgroup v1 limit 512 MiB, 12 MiB used",
                              "only 500 MiB of memory for the build (cgroup v1 limit 512 MiB, 12 MiB used (cgroup v1 "
                              "/sys/fs/cgroup/memory/ci/memory.limit_in_bytes)); it needs 1024 MiB (min_free_mem_mib): raise "
                              "the memory limit, free memory, or let another member build (build_host)"))
H120 = {**H90, "facts": {**FACTS90, "gpus": [{"index": 0, "name": "NVIDIA RTX PRO 6000", "compute_cap": "12.0"}]}}
case("build_wheel", "preflight-torch-rejects-an-arch-token", args={**BW, "archs": "12.0f"}, host=H120,
     steps=[META_TEXT, NO_STAMPS,
            {"expect": {"type": "Run", "mutating": False, "cwd": "/"},
             "answer": venv_out(["setuptools>=64", "packaging", "ninja", "wheel"],
                                torch_archs={"12.0f": {"ok": False, "error": "Unknown CUDA arch (12.0f) or GPU not supported"}})},
            *NO_MEMBER_BUILDS],
     result=refused("arch 12.0f: torch 2.11.0+cu130's torch.utils.cpp_extension rejects it (Unknown CUDA arch (12.0f) or "
                    "GPU not supported)", "arch 12.0f: torch 2.11.0+cu130's torch.utils.cpp_extension rejects it (Unknown "
                    "CUDA arch (12.0f) or GPU not supported); use an arch name this torch knows (such as 12.0a for an "
                    "arch-specific build)", preflight=False))
case("build_wheel", "preflight-build-tools-of-a-torch-extension-are-checked", args=BW, host=H90,
     steps=[META_TEXT, NO_STAMPS,
            {"expect": {"type": "Run"}, "answer": venv_out({"setuptools>=64": {"name": "setuptools", "installed": "59.6.0", "ok": False},
                                                            "packaging": {"name": "packaging", "installed": "24.0", "ok": True},
                                                            "ninja": {"name": "ninja", "installed": None, "ok": False},
                                                            "wheel": {"name": "wheel", "installed": None, "ok": False}},
                                                           torch_archs={"9.0a": {"ok": True, "flags": []}}, setuptools="59.6.0")},
            *NO_MEMBER_BUILDS],
     result=refused("build requirements missing in /venv: setuptools>=64 (have 59.6.0), ninja, wheel (the package's own "
                    "[build-system] requires and the torch extension build tools); install them into the venv: "
                    "/venv/bin/python3 -m pip install",
                    "build requirements missing in /venv: setuptools>=64 (have 59.6.0), ninja, wheel (the package's own "
                    "[build-system] requires and the torch extension build tools); install them into the venv: "
                    "/venv/bin/python3 -m pip install 'setuptools>=64' ninja wheel (or have the build install them: "
                    "-e install_build_requirements=true with the shipped fp4-kernels playbook; "
                    "install_build_requirements: true in a build_wheel task of your own)", preflight=False))
case("build_wheel", "preflight-isolated-torch-extension-that-cannot-import-torch", args={**BW, "no_build_isolation": False},
     host=H90, steps=[META_TEXT, NO_STAMPS, {"expect": {"type": "Run"}, "answer": venv_out(torch_archs={"9.0a": {"ok": True}})},
                      *NO_MEMBER_BUILDS],
     result=refused("an isolated build cannot import torch (ModuleNotFoundError: No module named 'torch'): the package's "
                    "[build-system] requires lacks torch", "an isolated build cannot import torch (ModuleNotFoundError: No "
                    "module named 'torch'): the package's [build-system] requires lacks torch, and it builds against torch; "
                    "build in the venv with its own torch: no_build_isolation: true (the default)", preflight=False))
case("build_wheel", "preflight-requirements-are-the-packages-own", args=BW, host=H90,
     steps=[META_SKB, NO_STAMPS, {"expect": {"type": "Run"}, "answer": venv_out({"scikit-build-core>=0.10": {"name": "scikit-build-core", "installed": "0.9.0", "ok": False},
                                                                      "nanobind>=2.0": {"name": "nanobind", "installed": "2.1.0", "ok": True}})},
            *NO_MEMBER_BUILDS],
     result=refused("build requirements missing in /venv: scikit-build-core>=0.10 (have 0.9.0)",
                    "build requirements missing in /venv: scikit-build-core>=0.10 (have 0.9.0) (the package's own "
                    "[build-system] requires); install them into the venv: /venv/bin/python3 -m pip install "
                    "'scikit-build-core>=0.10' (or have the build install them: -e install_build_requirements=true with the "
                    "shipped fp4-kernels playbook; install_build_requirements: true in a build_wheel task of your own)",
                    preflight=False))
# the wheel's size (bytes) and mtime (s) as the stamps probe stats them, and as its stamp records them
SIZE, MTIME = 1234, 1700000000
def stamps_out(*stamps, installed=({"sha256": SHA, "venv": "/venv"},), seen=(SIZE, MTIME)):
    """The stamps probe's answer: ``STAMP <size> <mtime> <stamp>`` per stamp, ``VENV /venv``, ``INSTALLED <record>`` per record."""
    lines = ([f"STAMP {seen[0]} {seen[1]} {json.dumps(s)}" for s in stamps] + ["VENV /venv"]
             + [f"INSTALLED {json.dumps(i)}" for i in installed])
    return {"rc": 0, "stdout": "".join(line + "\n" for line in lines)}
STAMP_SIZED = {**STAMP, "size_bytes": SIZE, "mtime_s": MTIME}
STAMPS_OK = stamps_out(STAMP_SIZED)
# a host that holds the wheel of these inputs reuses or serves it: no venv probe, no space check
case("build_wheel", "same-inputs-reuse-the-wheel", args=BW, host=H90,
     steps=[META_SKB, {"expect": {"type": "Run", "mutating": False}, "answer": STAMPS_OK},
            {"expect": {"type": "ClassRole", "key": K, "holds": True, "once": True}, "answer": "reuse"}],
     result={"status": "ok", "decision": {"action": "reuse", "installed": True, "changed": []}})
case("build_wheel", "another-member-builds-this-host-receives", args=BW, host=H90,
     steps=[META_SKB, {"expect": {"type": "Run"}, "answer": {"rc": 0, "stdout": ""}}, {"expect": {"type": "Run"}, "answer": PYINFO},
            SPACE_OK, {"expect": {"type": "ClassRole", "holds": False}, "answer": "push"},
            {"expect": {"type": "Fetch", "key": K, "dest": DEST},
             "answer": {"name": "w.whl", "sha256": SHA, "builder": "h0", "remote": f"{DEST}/w.whl", "data": {"archs": "9.0a"}}},
            # the stamp records the received wheel's size and mtime (the next run's check)
            {"expect": {"type": "Run", "argv": ["stat", "-L", "-c", "%s %Y", f"{DEST}/w.whl"], "mutating": False},
             "answer": {"rc": 0, "stdout": f"{SIZE} {MTIME}\n"}},
            {"expect": {"type": "Put", "remote": f"{DEST}/.fleetctl-build.json"}, "answer": None}],
     result={"status": "changed", "msg": "built once for this arch class on h0",
             "decision": {"action": "push", "changed": ["nothing installed"]}, "data": {"size_bytes": SIZE, "mtime_s": MTIME}})
TMP = f"/w/tmp/{K[:16]}"
HOOKS = "/w/runs/r1/scripts/build_hook"
def left(dest=DEST, found=""):
    """The builder's question: did an interrupted build of these inputs leave its wheel (build_here.left_wheel)?"""
    return {"expect": {"type": "Run", "argv": ["/venv/bin/python3", "-c", LEFT_WHEEL, dest, ".fleetctl-build.json",
                                               ".fleetctl-refused"], "mutating": False},
            "answer": {"rc": 0, "stdout": found}}
def refused_wheel(dest=DEST):
    """What the build wrote failed its checks: marked, never kept as an interrupted build's wheel."""
    return {"expect": {"type": "Run", "argv": ["touch", f"{dest}/.fleetctl-refused"]}, "answer": {"rc": 0}}
def set_aside(dest=DEST):
    """The wheel and stamp a folder of the build key held, set aside until this build succeeds (build_here.SET_ASIDE)."""
    return {"expect": {"type": "Run", "argv": ["/bin/sh", "-c", SET_ASIDE, "fleetctl-set-aside", dest,
                                               f"/w/tmp/{dest.rsplit('/', 1)[-1]}.previous"]}, "answer": {"rc": 0}}
def put_back(dest=DEST):
    """A failed build puts back the wheel and stamp it was to replace (they describe what is installed)."""
    return {"expect": {"type": "Run", "argv": ["/bin/sh", "-c", PUT_BACK, "fleetctl-put-back", dest,
                                               f"/w/tmp/{dest.rsplit('/', 1)[-1]}.previous"]}, "answer": {"rc": 0}}
def drop_previous(dest=DEST):
    """A build that succeeded (its stamp written) removes the wheel and stamp it replaced."""
    return {"expect": {"type": "Run", "argv": ["rm", "-rf", f"/w/tmp/{dest.rsplit('/', 1)[-1]}.previous"]}, "answer": {"rc": 0}}
def build_steps(meta=META_SKB, info=PYINFO, dest=DEST, tmp=TMP):
    return [meta, {"expect": {"type": "Run"}, "answer": {"rc": 0, "stdout": ""}}, {"expect": {"type": "Run"}, "answer": info},
            SPACE_OK, {"expect": {"type": "ClassRole"}, "answer": "build"}, left(dest), set_aside(dest),
            {"expect": {"type": "Run", "argv": ["rm", "-rf", dest, tmp]}, "answer": {"rc": 0}},
            {"expect": {"type": "Run", "argv": ["mkdir", "-p", "-m", "0700", dest, tmp]}, "answer": {"rc": 0}},
            {"expect": {"type": "PutFiles"}, "answer": None},
            {"expect": {"type": "Run", "argv": ["/bin/sh", "-c", CLEAN, "fleetctl-clean", "/w/src/k"]}, "answer": {"rc": 0}},
            {"expect": {"type": "Emit", "name": "build.started"}, "answer": None}]
from fleetctl.tasks.build_here import CLEAN_LEFTOVERS as CLEAN, LEFT_WHEEL, PUT_BACK, SET_ASIDE
BUILD_STEPS = build_steps()
HOOK_DEFINES = [f"--config-settings=cmake.define.CMAKE_PROJECT_INCLUDE={HOOKS}/fleetctl_record.cmake",
                "--config-settings=cmake.define.FLEETCTL_EXPECT_CUDA_COMPILER=/usr/local/cuda/bin/nvcc"]
PIP_ARGV = ["/venv/bin/python3", "-m", "pip", "wheel", "--no-deps", "-v", "--wheel-dir", DEST, "--no-build-isolation",
              "--config-settings=cmake.define.CMAKE_POLICY_VERSION_MINIMUM=3.5",
              "--config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES=90a",
              "--config-settings=cmake.define.CMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc",
              "--config-settings=cmake.define.CUDAToolkit_ROOT=/usr/local/cuda", *HOOK_DEFINES, "/w/src/k"]
def in_room(argv, tmp=TMP):
    """The build under build_room's script: on failure it says how full the workdir, TMPDIR and venv are."""
    from fleetctl.tasks.build_room import wrap
    return list(wrap(argv, "/w", tmp, "/venv"))
BUILD_ARGV = in_room(PIP_ARGV)
ENV = {"PYTHONPATH": HOOKS, "PYTHONHOME": None, "VIRTUAL_ENV": "/venv", "CONDA_PREFIX": None, "CONDA_DEFAULT_ENV": None,
       "CUDA_HOME": "/usr/local/cuda", "CUDA_PATH": "/usr/local/cuda", "CUDACXX": "/usr/local/cuda/bin/nvcc",
       "PATH": "/venv/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
       "TORCH_CUDA_ARCH_LIST": "9.0a", "CMAKE_CUDA_ARCHITECTURES": "90a", "CUDAARCHS": "90a",
       "MAX_JOBS": "8", "CMAKE_BUILD_PARALLEL_LEVEL": "8", "NVCC_THREADS": "1", "CMAKE_POLICY_VERSION_MINIMUM": "3.5",
       "TMPDIR": TMP, "FLEETCTL_BUILD_RECORD": f"{DEST}/.fleetctl-build-record.jsonl"}
RECORD_OK = "\n".join(json.dumps(x) for x in [
    {"kind": "cmake", "path": "/usr/bin/cmake", "version": "4.1.2", "policy_version_minimum": "3.5"},
    {"kind": "cuda_compiler", "path": "/usr/local/cuda/bin/nvcc", "realpath": "/usr/local/cuda-13.0/bin/nvcc", "id": "NVIDIA", "version": "13.0.88"}])
def after_build(record=RECORD_OK):
    return [{"expect": {"type": "Run", "argv": ["/bin/sh", "-c", CLEAN, "fleetctl-clean", "/w/src/k"]}, "answer": {"rc": 0}},
            {"expect": {"type": "Run", "argv": ["rm", "-rf", TMP]}, "answer": {"rc": 0}},
            {"expect": {"type": "Run", "mutating": False}, "answer": {"rc": 0, "stdout": record}}]
# the built wheel's size, mtime and sha256, in one probe (the stamp records all three)
def after_wheel(stat=f"{SIZE} {MTIME} "):
    return [{"expect": {"type": "Run", "mutating": False}, "answer": {"rc": 0, "stdout": f"{stat}{SHA}  {WHEEL}\n"}},
            {"expect": {"type": "Put", "remote": "/w/runs/r1/scripts/wheel_sass.py"}, "answer": None}]
AFTER = after_wheel()
# a build that succeeds, from pip wheel to the wheel published to its arch class
BUILT = [{"expect": {"type": "Run", "argv": BUILD_ARGV, "env": ENV, "cwd": "/w/src/k"}, "answer": {"rc": 0}}] + after_build() + AFTER + [
    {"expect": {"type": "Run", "argv": ["/venv/bin/python3", "/w/runs/r1/scripts/wheel_sass.py", WHEEL, "/usr/local/cuda/bin/cuobjdump"]},
     "answer": {"rc": 0, "stdout": json.dumps({"archs": ["sm_90a"], "ptx": ["compute_90a"], "error": None})}},
    {"expect": {"type": "Put", "remote": f"{DEST}/.fleetctl-build.json"}, "answer": None}, drop_previous(),
    {"expect": {"type": "Publish", "key": K, "wheel": WHEEL}, "answer": None}]
case("build_wheel", "builds-for-exactly-the-host-sm", args=BW, host=H90, steps=BUILD_STEPS + BUILT,
     result={"status": "changed", "msg": "built fp4_kernels-0.1.0-cp312-cp312-linux_x86_64.whl for 9.0a",
             "decision": {"action": "build"}, "data": {"size_bytes": SIZE, "mtime_s": MTIME}})
# the connection dropped after the build, before its checks and stamp: the wheel is checked and kept, not built again
case("build_wheel", "a-wheel-an-interrupted-build-left-is-checked-and-kept-not-built-again", args=BW, host=H90,
     steps=BUILD_STEPS[:5] + [left(DEST, f"{WHEEL}\n")] + BUILT[1:],
     result={"status": "changed", "msg": "kept fp4_kernels-0.1.0-cp312-cp312-linux_x86_64.whl for 9.0a: an interrupted run built it",
             "decision": {"action": "build"}, "data": {"size_bytes": SIZE, "mtime_s": MTIME, "kept_after_interrupt": True}})
case("build_wheel", "sass-missing-fails-the-class", args=BW, host=H90,
     steps=BUILD_STEPS + [{"expect": {"type": "Run", "argv": BUILD_ARGV}, "answer": {"rc": 0}}] + after_build() + after_wheel("") + [
         {"expect": {"type": "Run"}, "answer": {"rc": 0, "stdout": json.dumps({"archs": ["sm_80"], "error": None})}},
         refused_wheel(), put_back(), {"expect": {"type": "Fail", "key": K}, "answer": None}],
     result=build_failed("lacks sm_90a (holds sm_80)"))
ENV4 = {**ENV, "MAX_JOBS": "4", "CMAKE_BUILD_PARALLEL_LEVEL": "4"}
case("build_wheel", "compiler-killed-for-memory-retries-with-half-the-jobs", args=BW, host=H90,
     steps=BUILD_STEPS + [
         {"expect": {"type": "Run", "env": ENV}, "answer": {"rc": 1, "stderr": "nvcc error   : 'cicc' died due to signal 9 (Kill signal)\nKilled\n"}},
         {"expect": {"type": "Emit", "name": "build.oom_retry"}, "answer": None},
         {"expect": {"type": "Emit", "name": "build.started"}, "answer": None},
         {"expect": {"type": "Run", "env": ENV4}, "answer": {"rc": 137, "stderr": "Killed\n"}}] + after_build("") + [
         refused_wheel(), put_back(), {"expect": {"type": "Fail"}, "answer": None}],
     result=build_failed("compiler killed (likely out of memory) with MAX_JOBS=4 (full log: fleetctl logs r1 h1)"))
case("build_wheel", "compile-error-is-the-summary", args=BW, host=H90,
     steps=BUILD_STEPS + [
         {"expect": {"type": "Run", "argv": BUILD_ARGV},
          "answer": {"rc": 1, "stdout": "[1/4] Building CUDA object\n/w/src/k/csrc/cuda_quant.cu(13): error: expected an expression\n1 error detected\nninja: build stopped\n",
                     "stderr": "ERROR: Failed to build installable wheels for some pyproject.toml based projects (fp4_kernels)\n"}}]
     + after_build() + [refused_wheel(), put_back(), {"expect": {"type": "Fail"}, "answer": None}],
     result=build_failed("build failed (pip): /w/src/k/csrc/cuda_quant.cu(13): error: expected an expression "
                         "(full log: fleetctl logs r1 h1)"))
# nvcc's write failed and it printed nothing (operator trial): the room the build's script measured names the full disk
ROOM_FULL = ("fleetctl: room after the failed build: workdir bytes: tmpfs 2355200 2355200 0 100% /mnt/ws\n"
             "fleetctl: room after the failed build: workdir inodes: tmpfs 4000 120 3880 3% /mnt/ws\n"
             "fleetctl: room after the failed build: TMPDIR bytes: tmpfs 2355200 2355200 0 100% /mnt/ws\n"
             "fleetctl: room after the failed build: TMPDIR inodes: tmpfs 4000 120 3880 3% /mnt/ws\n"
             "fleetctl: room after the failed build: venv bytes: /dev/vda 264212084 28853676 77537236 28% /\n"
             "fleetctl: room after the failed build: venv inodes: /dev/vda 16777216 612539 16164677 4% /\n")
NINJA_SILENT = ("[1/3] Building CUDA object CMakeFiles/fp4_cuda.dir/csrc/cuda_pk.cu.o\n"
                "FAILED: CMakeFiles/fp4_cuda.dir/csrc/cuda_pk.cu.o\n/usr/local/cuda/bin/nvcc -c x.cu -o x.o\n"
                "ninja: build stopped: subcommand failed.\n")
case("build_wheel", "a-disk-that-filled-while-the-compiler-said-nothing-is-named", args=BW, host=H90,
     steps=BUILD_STEPS + [
         {"expect": {"type": "Run", "argv": BUILD_ARGV},
          "answer": {"rc": 1, "stdout": NINJA_SILENT, "stderr": "ERROR: Failed to build fp4_kernels\n" + ROOM_FULL}}]
     + after_build() + [refused_wheel(), put_back(), {"expect": {"type": "Fail"}, "answer": None}],
     result=build_failed(f"build failed (pip): no space left on /mnt/ws (0 bytes free of 2.2 GiB; the build's workdir /w, "
                         f"TMPDIR {TMP}) while building CMakeFiles/fp4_cuda.dir/csrc/cuda_pk.cu.o (ENOSPC, measured after "
                         "the build failed; the compiler's own message was empty): the file system is full"))
# a disk with room after the failure: the compiler's line stays the cause
case("build_wheel", "a-compile-error-on-a-disk-with-room-stays-the-summary", args=BW, host=H90,
     steps=BUILD_STEPS + [
         {"expect": {"type": "Run", "argv": BUILD_ARGV},
          "answer": {"rc": 1, "stdout": "/w/src/k/csrc/cuda_quant.cu(13): error: expected an expression\n",
                     "stderr": ROOM_FULL.replace(" 2355200 0 100%", " 355200 2000000 15%")}}]
     + after_build() + [refused_wheel(), put_back(), {"expect": {"type": "Fail"}, "answer": None}],
     result=build_failed("build failed (pip): /w/src/k/csrc/cuda_quant.cu(13): error: expected an expression "
                         "(full log: fleetctl logs r1 h1)"))
case("build_wheel", "the-cuda-compiler-cmake-used-is-not-the-one-asked-for", args=BW, host=H90,
     steps=BUILD_STEPS + [
         {"expect": {"type": "Run", "argv": BUILD_ARGV},
          "answer": {"rc": 1, "stdout": "-- The CUDA compiler identification is NVIDIA 12.0.140\nCMake Error at /w/runs/r1/scripts/build_hook/fleetctl_record.cmake:34 (message):\n  fleetctl: CMake uses the CUDA compiler /usr/bin/nvcc\n"}}]
     + after_build(json.dumps({"kind": "cuda_compiler", "path": "/usr/bin/nvcc", "realpath": "/usr/bin/nvcc", "version": "12.0.140"}))
     + [refused_wheel(), put_back(), {"expect": {"type": "Fail"}, "answer": None}],
     result=build_failed("build failed (pip): the build used the CUDA compiler /usr/bin/nvcc (12.0.140), not "
                         "/usr/local/cuda/bin/nvcc (13.0) that fleetctl asked for"))
case("build_wheel", "torch-drift-read-inside-the-build-fails-naming-both", args=BW, host=H90,
     steps=BUILD_STEPS + [{"expect": {"type": "Run", "argv": BUILD_ARGV}, "answer": {"rc": 0}}]
     + after_build(RECORD_OK + "\n" + json.dumps({"kind": "torch", "torch": "2.12.0+cu130", "torch_cuda": "13.0",
                                                  "torch_file": "/tmp/pip-build-env-x/lib/python3.12/site-packages/torch/__init__.py"}))
     + [refused_wheel(), put_back(), {"expect": {"type": "Fail"}, "answer": None}],
     result=build_failed("torch drift: the build compiled against torch 2.12.0+cu130 (CUDA 13.0) from "
                         "/tmp/pip-build-env-x/lib/python3.12/site-packages/torch/__init__.py, but the venv "
                         "runs torch 2.11.0+cu130 (CUDA 13.0)"))
def ptx_case(name, archs, sass_answer, result):
    k = key_for(FACTS90, archs=archs)
    dest, tmp = f"/w/wheels/{k[:16]}", f"/w/tmp/{k[:16]}"
    cuda_archs = ";".join(a.split("+")[0].replace(".", "") for a in archs.split(";"))
    env = {**ENV, "TORCH_CUDA_ARCH_LIST": archs, "CMAKE_CUDA_ARCHITECTURES": cuda_archs, "CUDAARCHS": cuda_archs,
           "TMPDIR": tmp, "FLEETCTL_BUILD_RECORD": f"{dest}/.fleetctl-build-record.jsonl"}
    tail = [{"expect": {"type": "Put", "remote": f"{dest}/.fleetctl-build.json"}, "answer": None}, drop_previous(dest),
            {"expect": {"type": "Publish"}, "answer": None}] if result["status"] == "changed" else [
            refused_wheel(dest), put_back(dest), {"expect": {"type": "Fail"}, "answer": None}]
    case("build_wheel", name, args={**BW, "archs": archs}, host=H90,
         steps=build_steps(dest=dest, tmp=tmp) + [
             {"expect": {"type": "Run", "env": env}, "answer": {"rc": 0}},
             {"expect": {"type": "Run"}, "answer": {"rc": 0}}, {"expect": {"type": "Run"}, "answer": {"rc": 0}},
             {"expect": {"type": "Run"}, "answer": {"rc": 0, "stdout": RECORD_OK}},
             {"expect": {"type": "Run"}, "answer": {"rc": 0, "stdout": f"{SHA}  {dest}/k.whl\n"}},
             {"expect": {"type": "Put"}, "answer": None},
             {"expect": {"type": "Run"}, "answer": {"rc": 0, "stdout": json.dumps(sass_answer)}}] + tail,
         result=result)
ptx_case("ptx-covers-a-gpu-its-sass-does-not-run-on", "8.0+PTX",
         {"archs": ["sm_80"], "ptx": ["compute_80"], "error": None}, {"status": "changed", "msg": "for 8.0+PTX"})
ptx_case("ptx-dropped-by-the-build-fails-loudly", "8.0+PTX;9.0a", {"archs": ["sm_80", "sm_90a"], "ptx": [], "error": None},
         build_failed("lacks the compute_80 PTX that +PTX asked for (holds no PTX): the build dropped it"))
CUDA124 = {**CUDA, "version": "12.4", "archs": ["compute_80", "compute_90"], "nvcc_realpath": "/usr/local/cuda-12.4/bin/nvcc",
           "toolkits": [{"home": "/usr/local/cuda", "nvcc": "/usr/local/cuda/bin/nvcc", "version": "12.4", "archs": ["compute_80", "compute_90"], "source": "/usr/local/cuda"},
                        {"home": "/usr/local/cuda-12.9", "nvcc": "/usr/local/cuda-12.9/bin/nvcc", "version": "12.9", "archs": ["compute_90", "compute_120"], "source": "/usr/local/cuda-*"},
                        {"home": "/usr/local/cuda-13.0", "nvcc": "/usr/local/cuda-13.0/bin/nvcc", "version": "13.0", "archs": ["compute_90", "compute_120"], "source": "/usr/local/cuda-*"}]}
FACTS120 = {**FACTS90, "gpus": [{"index": 0, "name": "NVIDIA RTX PRO 6000", "compute_cap": "12.0"}], "cuda": CUDA124,
            "build": {**BUILD90, "torch_cuda_arch_list": "12.0a", "cuda_architectures": "120a"}}
def _switched():
    from fleetctl.build.cudacompat import parse_tokens, with_toolkit_for
    return with_toolkit_for(FACTS120, parse_tokens("12.0a"))[0]
K120 = key_for(_switched())
ENV120 = {**ENV, "CUDA_HOME": "/usr/local/cuda-13.0", "CUDA_PATH": "/usr/local/cuda-13.0", "CUDACXX": "/usr/local/cuda-13.0/bin/nvcc",
          "PATH": "/venv/bin:/usr/local/cuda-13.0/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
          "TORCH_CUDA_ARCH_LIST": "12.0a", "CMAKE_CUDA_ARCHITECTURES": "120a", "CUDAARCHS": "120a",
          "TMPDIR": f"/w/tmp/{K120[:16]}", "FLEETCTL_BUILD_RECORD": f"/w/wheels/{K120[:16]}/.fleetctl-build-record.jsonl"}
case("build_wheel", "the-newest-toolkit-that-builds-the-arch-is-used", args=BW, host={"facts": FACTS120, "trees": {"/w/src/k": TREE}},
     steps=build_steps(dest=f"/w/wheels/{K120[:16]}", tmp=f"/w/tmp/{K120[:16]}")
     + [{"expect": {"type": "Run", "env": ENV120}, "answer": {"rc": 1, "stdout": "k.cu(1): error: boom\n"}},
        {"expect": {"type": "Run"}, "answer": {"rc": 0}}, {"expect": {"type": "Run"}, "answer": {"rc": 0}},
        {"expect": {"type": "Run"}, "answer": {"rc": 0, "stdout": ""}}, refused_wheel(f"/w/wheels/{K120[:16]}"), put_back(f"/w/wheels/{K120[:16]}"),
        {"expect": {"type": "Fail"}, "answer": None}],
     result=build_failed("k.cu(1): error: boom"))
# pip_install
DISTS = {"torch": "2.11.0+cu130", "numpy": "2.1.0", "fp4-kernels": "0.1.0"}
# the venv's own install records (venv_state.RECORD_LAYOUT): /venv's folder under /w/installed
VKEY = __import__("hashlib").sha256(b"/venv").hexdigest()[:16]
RECORD = f"/w/installed/{VKEY}/fp4_kernels.json"
def STATE(rec, dist, torch="2.11.0+cu130", dists=None, stamp=None, end=""):
    """The install-state probe's answer (pip_install.STATE_SCRIPT); end: what follows the JSON."""
    return {"rc": 0, "stdout": json.dumps({"record": rec, "dist": dist, "torch": torch, "cuda": "13.0",
                                           "dists": dists or {**DISTS, "torch": torch}, "stamp": stamp,
                                           "venv": "/venv"}) + end}
REC = {"sha256": SHA, "venv": "/venv", "kept": "/w/installed/w.whl", "record_sha256": "r" * 64}
PI = {"wheel": WHEEL}
HP = {"facts": FACTS90, "files": {WHEEL: SHA}}
STATE_ARGV = ["/venv/bin/python3", "-c", __import__("fleetctl.tasks.pip_install", fromlist=["_"]).STATE_SCRIPT,
              "fp4_kernels", "/w/installed/fp4_kernels.json", f"{DEST}/.fleetctl-build.json", "hash"]
CLEAN_ENV = {"PYTHONPATH": None, "PYTHONHOME": None, "VIRTUAL_ENV": None, "CONDA_PREFIX": None, "CONDA_DEFAULT_ENV": None}
PIP_ENV = {**CLEAN_ENV, "PIP_USER": "0"}  # a pip.conf's install.user = true must not send the install to ~/.local
case("pip_install", "same-wheel-installed-is-skipped", args=PI, host=HP,
     steps=[{"expect": {"type": "Run", "mutating": False, "argv": STATE_ARGV, "env": CLEAN_ENV, "cwd": "/"},
             "answer": STATE(REC, {"version": "0.1.0", "record_sha256": "r" * 64})}],
     result={"status": "ok", "decision": {"action": "skip"}})
# a venv on a read-only file system (facts' site_packages_fs): holding this wheel needs no write,
# so it is skipped; one that needs the install is refused while planning (install_room.unwritable_venv)
RO_FS = {"path": "/venv/lib/python3.12/site-packages", "free_mib": 5000, "readonly": True, "writable": False}
HP_RO = {**HP, "facts": {**FACTS90, "python": {**PY, "site_packages_fs": RO_FS}}}
case("pip_install", "a-read-only-venv-holding-this-wheel-is-skipped", args=PI, host=HP_RO,
     steps=[{"expect": {"type": "Run", "mutating": False, "argv": STATE_ARGV},
             "answer": STATE(REC, {"version": "0.1.0", "record_sha256": "r" * 64})}],
     result={"status": "ok", "msg": "already installed (same sha256)", "decision": {"action": "skip"}})
case("pip_install", "a-read-only-venv-needing-the-install-is-refused-while-planning", args=PI, host=HP_RO,
     steps=[{"expect": {"type": "Run", "mutating": False, "argv": STATE_ARGV}, "answer": STATE(REC, None)}],
     result={"status": "failed", "preflight": True, "decision": {"action": "fail", "why": "nothing installed"},
             "msg": "preflight: venv's site-packages /venv/lib/python3.12/site-packages is on a read-only file system: "
                    "pip cannot install there; fix: point the host var 'venv' at a venv on a writable file system"})
from fleetctl.tasks.venv_modes import VENV_MODES_SCRIPT  # noqa: E402 (installs run under site-packages' umask)
MODES = ["/venv/bin/python3", "-I", "-c", VENV_MODES_SCRIPT]
INSTALL_ARGV = [*MODES, "/venv/bin/python3", "-m", "pip", "install", "--no-input", "--force-reinstall", "--no-deps", WHEEL]
CHECK = {"expect": {"type": "Run", "argv": ["/venv/bin/python3", "-m", "pip", "check"], "mutating": False},
         "answer": {"rc": 0, "stdout": "No broken requirements found.\n"}}
from fleetctl.tasks.pip_rollback import KEEP_SCRIPT  # noqa: E402 (the kept wheel's folder is by content)

# the same wheel's files in this venv, but the record is another venv's (or names none: an older
# fleetctl's, one per host): never "already installed" on it; installed once, this venv's record written
case("pip_install", "a-record-of-another-venv-is-no-install-into-this-one", args=PI, host=HP,
     steps=[{"expect": {"type": "Run", "mutating": False},
             "answer": STATE({**REC, "venv": "/other"}, {"version": "0.1.0", "record_sha256": "r" * 64})}, CHECK,
            {"expect": {"type": "Run", "argv": INSTALL_ARGV}, "answer": {"rc": 0}},
            {"expect": {"type": "Run", "mutating": False}, "answer": STATE(None, {"record_sha256": "r" * 64})}, CHECK,
            {"expect": {"type": "Run", "argv": ["mkdir", "-p", "-m", "0700", "/w/installed", f"/w/installed/{VKEY}"]}, "answer": {"rc": 0}},
            {"expect": {"type": "Run", "argv": ["/bin/sh", "-c", KEEP_SCRIPT, "fleetctl-keep",
                                                f"/w/installed/{VKEY}/fp4_kernels.wheels", "a" * 16, "", WHEEL]},
             "answer": {"rc": 0}},
            {"expect": {"type": "Put", "remote": RECORD}, "answer": None}],
     result={"status": "changed", "decision": {"action": "install", "why": "no install record of fleetctl's for this venv"}})
case("pip_install", "uninstalled-by-hand-is-installed-again", args=PI, host=HP,
     steps=[{"expect": {"type": "Run", "mutating": False}, "answer": STATE(REC, None)}, CHECK,
            {"expect": {"type": "Run", "argv": INSTALL_ARGV, "env": {**PIP_ENV, "TMPDIR": "/w/runs/r1"}, "cwd": "/"}, "answer": {"rc": 0}},
            {"expect": {"type": "Run", "mutating": False}, "answer": STATE(REC, {"record_sha256": "s" * 64})}, CHECK,
            {"expect": {"type": "Run", "argv": ["mkdir", "-p", "-m", "0700", "/w/installed", f"/w/installed/{VKEY}"]}, "answer": {"rc": 0}},
            {"expect": {"type": "Run"}, "answer": {"rc": 0}},
            {"expect": {"type": "Put", "remote": RECORD}, "answer": None}],
     result={"status": "changed", "msg": "torch 2.11.0+cu130 unchanged", "decision": {"action": "install", "why": "nothing installed"}})
USER_SITE = "/home/u/.local/lib/python3.12/site-packages"
case("pip_install", "an-install-pip-put-in-the-user-site-fails-naming-the-cause", args=PI, host=HP,
     steps=[{"expect": {"type": "Run", "mutating": False}, "answer": STATE(REC, None)}, CHECK,
            {"expect": {"type": "Run", "argv": INSTALL_ARGV, "cwd": "/"}, "answer": {"rc": 0}},
            {"expect": {"type": "Run", "mutating": False},
             "answer": STATE(REC, {"record_sha256": "s" * 64, "location": USER_SITE, "in_venv": False, "user_site": True,
                                   "prefix": "/venv"})}],
     result={"status": "failed", "msg": f"pip put fp4_kernels into the user site {USER_SITE}, not the venv /venv: the login "
                                        "user's pip configuration asks for user installs (install.user = true"})
case("pip_install", "a-copy-outside-the-venv-is-not-taken-for-the-install", args=PI, host=HP,
     steps=[{"expect": {"type": "Run", "mutating": False},
             "answer": STATE(REC, {"version": "0.1.0", "record_sha256": "r" * 64, "location": USER_SITE, "in_venv": False,
                                   "user_site": True, "prefix": "/venv"})}, CHECK,
            {"expect": {"type": "Run", "argv": INSTALL_ARGV, "env": {**PIP_ENV, "TMPDIR": "/w/runs/r1"}, "cwd": "/"}, "answer": {"rc": 0}},
            {"expect": {"type": "Run", "mutating": False}, "answer": STATE(REC, {"record_sha256": "s" * 64, "in_venv": True})}, CHECK,
            {"expect": {"type": "Run", "argv": ["mkdir", "-p", "-m", "0700", "/w/installed", f"/w/installed/{VKEY}"]}, "answer": {"rc": 0}},
            {"expect": {"type": "Run"}, "answer": {"rc": 0}},
            {"expect": {"type": "Put", "remote": RECORD}, "answer": None},
            {"expect": {"type": "Note"}, "answer": None}],
     result={"status": "changed", "msg": f"a copy of fp4_kernels outside the venv remains in {USER_SITE}",
             "decision": {"action": "install", "why": f"installed outside the venv ({USER_SITE})"}})
DAMAGED = ["fp4_kernels/_C.cpython-312-x86_64-linux-gnu.so is 1000 bytes, RECORD says 2234805"]
case("pip_install", "a-damaged-install-is-installed-again", args=PI, host=HP,
     steps=[{"expect": {"type": "Run", "mutating": False},
             "answer": STATE(REC, {"version": "0.1.0", "record_sha256": "r" * 64, "damaged": DAMAGED, "n_damaged": 1}, end="\n")},
            CHECK,
            {"expect": {"type": "Run", "argv": INSTALL_ARGV, "env": {**PIP_ENV, "TMPDIR": "/w/runs/r1"}, "cwd": "/"}, "answer": {"rc": 0}},
            {"expect": {"type": "Run", "mutating": False}, "answer": STATE(REC, {"record_sha256": "s" * 64})}, CHECK,
            {"expect": {"type": "Run", "argv": ["mkdir", "-p", "-m", "0700", "/w/installed", f"/w/installed/{VKEY}"]}, "answer": {"rc": 0}},
            {"expect": {"type": "Run"}, "answer": {"rc": 0}},
            {"expect": {"type": "Put", "remote": RECORD}, "answer": None}],
     result={"status": "changed", "decision": {"action": "install", "why": f"installed files differ from their RECORD ({DAMAGED[0]})"}})
# an install made under a login's umask 077 (an older fleetctl): the same wheel, installed again
# (venv_modes), --plan and the deploy saying why
UNREADABLE = {"unreadable": ["fp4_kernels/ 0700", "fp4_kernels-0.1.0.dist-info/ 0700", "fp4_kernels/__init__.py 0600"],
              "n_unreadable": 9, "site_mode": "0755"}
case("pip_install", "an-install-less-readable-than-its-site-packages-is-installed-again", args=PI, host=HP,
     steps=[{"expect": {"type": "Run", "mutating": False},
             "answer": STATE(REC, {"version": "0.1.0", "record_sha256": "r" * 64, **UNREADABLE})}, CHECK,
            {"expect": {"type": "Run", "argv": INSTALL_ARGV, "env": {**PIP_ENV, "TMPDIR": "/w/runs/r1"}, "cwd": "/"}, "answer": {"rc": 0}},
            {"expect": {"type": "Run", "mutating": False}, "answer": STATE(REC, {"record_sha256": "r" * 64})}, CHECK,
            {"expect": {"type": "Run", "argv": ["mkdir", "-p", "-m", "0700", "/w/installed", f"/w/installed/{VKEY}"]}, "answer": {"rc": 0}},
            {"expect": {"type": "Run"}, "answer": {"rc": 0}},
            {"expect": {"type": "Put", "remote": RECORD}, "answer": None}],
     result={"status": "changed", "decision": {"action": "install", "why": (
         "installed files of fp4_kernels are less readable than their site-packages (0755): fp4_kernels/ 0700, "
         "fp4_kernels-0.1.0.dist-info/ 0700, fp4_kernels/__init__.py 0600 and 6 more; other users of the venv cannot "
         "import it")}})
case("pip_install", "other-packages-the-install-changed-and-pip-check-problems-are-reported", args={**PI, "keep_previous": False},
     host=HP,
     steps=[{"expect": {"type": "Run"}, "answer": STATE(None, None)}, CHECK,
            {"expect": {"type": "Run", "argv": INSTALL_ARGV}, "answer": {"rc": 0}},
            {"expect": {"type": "Run"}, "answer": STATE(None, {"record_sha256": "x"}, dists={**DISTS, "numpy": "1.26.4", "einops": "0.8.0"})},
            {"expect": {"type": "Run", "mutating": False},
             "answer": {"rc": 1, "stdout": "fp4-kernels 0.1.0 requires einops<0.8, but you have einops 0.8.0.\n"}},
            {"expect": {"type": "Note"}, "answer": None}, {"expect": {"type": "Note"}, "answer": None}],
     result={"status": "changed", "msg": "the install also changed other packages: added einops 0.8.0, numpy 2.1.0 -> 1.26.4; pip check: "
                                         "fp4-kernels 0.1.0 requires einops<0.8, but you have einops 0.8.0."})
case("pip_install", "an-install-that-moves-torch-fails-and-rolls-back", args=PI, host=HP,
     steps=[{"expect": {"type": "Run"}, "answer": STATE(REC, {"record_sha256": "q" * 64, "version": "0.0.9"})}, CHECK,
            {"expect": {"type": "Run", "argv": INSTALL_ARGV}, "answer": {"rc": 0}},
            {"expect": {"type": "Run"}, "answer": STATE(REC, {"record_sha256": "x"}, torch="2.12.0+cu130")}, CHECK,
            {"expect": {"type": "Run", "argv": [*MODES, "/venv/bin/python3", "-m", "pip", "install", "--no-input", "--force-reinstall",
                                                "--no-deps", "/w/installed/w.whl"]}, "answer": {"rc": 0}},
            {"expect": {"type": "Run", "argv": [*MODES, "/venv/bin/python3", "-m", "pip", "install", "--no-input", "--force-reinstall",
                                                "--no-deps", "torch==2.11.0+cu130"]},
             "answer": {"rc": 1, "stderr": "ERROR: Could not find a version that satisfies the requirement torch==2.11.0+cu130\n"}}],
     result={"status": "failed", "msg": "the install changed torch: 2.11.0+cu130 (cu 13.0) -> 2.12.0+cu130 (cu 13.0); rolled "
                                        "back: reinstalled w.whl; torch 2.11.0+cu130 could not be reinstalled"})
case("pip_install", "dependencies-allowed-torch-is-pinned", args={**PI, "no_deps": False, "keep_previous": False}, host=HP,
     steps=[{"expect": {"type": "Run"}, "answer": STATE(None, None)}, CHECK,
            {"expect": {"type": "Put", "remote": "/w/runs/r1/install-constraints.txt"}, "answer": None},
            {"expect": {"type": "Run", "argv": [*MODES, "/venv/bin/python3", "-m", "pip", "install", "--no-input", "--force-reinstall",
                                                "--constraint", "/w/runs/r1/install-constraints.txt", WHEEL]},
             "answer": {"rc": 1, "stderr": "ERROR: Cannot install fp4_kernels because these package versions have conflicting dependencies.\n"
                                           "The conflict is caused by: The user requested (constraint) torch==2.11.0+cu130\n"}},
            # pip failed: the wheel is hashed, in case its bytes changed since its build (they did not)
            {"expect": {"type": "Run", "argv": ["sha256sum", WHEEL], "mutating": False}, "answer": {"rc": 0, "stdout": f"{SHA}  {WHEEL}\n"}}],
     result={"status": "failed", "msg": "fleetctl never lets an install move torch"})
STAMP_OLD_TORCH = {"build_record": {"torch": [{"torch": "2.10.0+cu130", "torch_cuda": "13.0", "torch_file": "/venv/x"}]}}
case("pip_install", "a-wheel-built-against-another-torch-is-refused-before-installing", args=PI, host=HP,
     steps=[{"expect": {"type": "Run"}, "answer": STATE(None, None, stamp=STAMP_OLD_TORCH)}],
     result={"status": "failed", "msg": "torch drift: fp4_kernels-0.1.0-cp312-cp312-linux_x86_64.whl was built against torch "
                                        "2.10.0+cu130 (CUDA 13.0, recorded inside the build), but /venv runs torch 2.11.0+cu130"})
case("pip_install", "unknown-wheel-is-hashed-on-the-host", args=PI, host={"facts": FACTS90},
     steps=[{"expect": {"type": "Run", "argv": ["sha256sum", WHEEL]}, "answer": {"rc": 1, "stderr": f"sha256sum: {WHEEL}: No such file or directory"}}],
     result={"status": "failed", "msg": "No such file or directory"})
# verify
VERIFY_ARGV = ["/venv/bin/python3", "-I", "-X", "faulthandler", "/w/runs/r1/verify/verify_package.py", "--package", "fp4_kernels", "--device", "cuda",
               "--gpus", '[{"index":0,"name":"NVIDIA H200","uuid":null,"pci_bus_id":null,"mig_mode":null}]',
               "--venv", "/venv", "--symbols", "a", "--sm", "9.0", "--smoke"]
GPUS2 = [{"index": 0, "name": "NVIDIA H200", "compute_cap": "9.0", "memory_mib": 143771, "uuid": "GPU-a", "pci_bus_id": "00000000:18:00.0"},
         {"index": 1, "name": "NVIDIA RTX PRO 6000", "compute_cap": "12.0", "memory_mib": 97887, "uuid": "GPU-b", "pci_bus_id": "00000000:2A:00.0"}]
case("verify", "every-gpu-of-the-host-is-verified-and-a-failing-one-named", args={"package": "fp4_kernels"},
     host={"facts": {**FACTS90, "gpus": GPUS2}},
     steps=[{"expect": {"type": "Put"}, "answer": None},
            {"expect": {"type": "Run", "argv": ["/venv/bin/python3", "-I", "-X", "faulthandler", "/w/runs/r1/verify/verify_package.py", "--package", "fp4_kernels",
                                                "--device", "cuda", "--gpus",
                                                '[{"index":0,"name":"NVIDIA H200","uuid":"GPU-a","pci_bus_id":"00000000:18:00.0","mig_mode":null},'
                                                '{"index":1,"name":"NVIDIA RTX PRO 6000","uuid":"GPU-b","pci_bus_id":"00000000:2A:00.0","mig_mode":null}]',
                                                "--venv", "/venv", "--sm", "12.0,9.0", "--smoke"]},
             "answer": {"rc": 1, "stdout": json.dumps({"ok": False, "device": "cuda", "checks": [
                 {"name": "gpu 0", "ok": True, "detail": "GPU 0 (NVIDIA H200, GPU-a, bus 00000000:18:00.0) as cuda:0: 40 checks"},
                 {"name": "gpu 1", "ok": False, "detail": "GPU 1 (NVIDIA RTX PRO 6000, GPU-b, bus 00000000:2A:00.0) as cuda:1: CUDA error: an illegal memory access"}]})}}],
     result={"status": "failed", "msg": "gpu 1: GPU 1 (NVIDIA RTX PRO 6000, GPU-b, bus 00000000:2A:00.0) as cuda:1: CUDA error"})
case("verify", "a-gpu-hidden-by-cuda-visible-devices-is-a-warning", args={"package": "fp4_kernels"},
     host={"facts": {**FACTS90, "gpus": GPUS2}},
     steps=[{"expect": {"type": "Put"}, "answer": None},
            {"expect": {"type": "Run"},
             "answer": {"rc": 0, "stdout": json.dumps({"ok": True, "device": "cuda", "checks": [{"name": "gpu 0", "ok": True, "detail": "ok"}],
                                                       "warnings": ["CUDA_VISIBLE_DEVICES=0 in the login environment: torch sees 1 of the 2 GPUs nvidia-smi lists; not verified: GPU 1 (NVIDIA RTX PRO 6000, GPU-b, bus 00000000:2A:00.0)"]})}}],
     result={"status": "ok", "msg": "warning: CUDA_VISIBLE_DEVICES=0 in the login environment: torch sees 1 of the 2 GPUs"})
case("verify", "all-checks-pass-isolated-from-the-login-environment-on-the-gpu", args={"package": "fp4_kernels", "symbols": ["a"]},
     host={"facts": FACTS90},
     steps=[{"expect": {"type": "Put", "remote": "/w/runs/r1/verify/verify_package.py"}, "answer": None},
            {"expect": {"type": "Run", "cwd": "/", "mutating": False, "argv": VERIFY_ARGV, "env": CLEAN_ENV},
             "answer": {"rc": 0, "stdout": "PASS torch: ok\n" + json.dumps({"ok": True, "device": "cuda", "checks": [{"name": "torch", "ok": True, "detail": "ok"}], "selfcheck": {"device": "cuda"}})}}],
     result={"status": "ok", "msg": "smoke on cuda"})
case("verify", "a-host-without-gpus-verifies-on-the-cpu", args={"package": "tiny"}, host={"facts": {**FACTS90, "gpus": []}},
     steps=[{"expect": {"type": "Put"}, "answer": None},
            {"expect": {"type": "Run", "argv": ["/venv/bin/python3", "-I", "-X", "faulthandler", "/w/runs/r1/verify/verify_package.py", "--package", "tiny",
                                                "--device", "cpu", "--venv", "/venv", "--smoke"]},
             "answer": {"rc": 0, "stdout": json.dumps({"ok": True, "device": "cpu", "checks": []})}}],
     result={"status": "ok", "msg": "on cpu"})
case("verify", "a-cpu-torch-on-a-gpu-host-fails", args={"package": "fp4_kernels"}, host={"facts": FACTS90},
     steps=[{"expect": {"type": "Put"}, "answer": None},
            {"expect": {"type": "Run"}, "answer": {"rc": 1, "stdout": json.dumps({"ok": False, "checks": [
                {"name": "cuda", "ok": False, "detail": "torch 2.13.0+cpu (CPU-only build) cannot see the host's GPUs"}]})}}],
     result={"status": "failed", "msg": "cuda: torch 2.13.0+cpu (CPU-only build) cannot see the host's GPUs"})
case("verify", "a-cpu-only-torch-on-a-gpu-host-is-refused-while-planning", args={"package": "fp4_kernels"},
     host={"facts": {**FACTS90, "python": {**PY, "torch": "2.13.0+cpu", "torch_cuda": None}}}, steps=[],
     result={"status": "failed", "msg": "preflight: torch 2.13.0+cpu in /venv is a CPU-only build (its version.py says "
                                        "cuda = None) and the host has 1 GPU(s) nvidia-smi lists"})
case("verify", "a-cpu-only-torch-verifies-on-the-cpu-where-the-host-says-so", args={"package": "fp4_kernels"},
     host={"facts": {**FACTS90, "python": {**PY, "torch": "2.13.0+cpu", "torch_cuda": None}}, "verify_device": "cpu"},
     steps=[{"expect": {"type": "Put"}, "answer": None},
            {"expect": {"type": "Run", "argv": ["/venv/bin/python3", "-I", "-X", "faulthandler", "/w/runs/r1/verify/verify_package.py",
                                                "--package", "fp4_kernels", "--device", "cpu", "--venv", "/venv",
                                                "--sm", "9.0", "--smoke"]},
             "answer": {"rc": 0, "stdout": json.dumps({"ok": True, "checks": [{"name": "smoke", "ok": True, "detail": "6 checks"}],
                                                       "selfcheck": {"device": "cpu"}, "device": "cpu"})}}],
     result={"status": "ok"})
case("verify", "a-verify-killed-by-sigbus-says-so-and-why", args={"package": "fp4_kernels"}, host={"facts": FACTS90},
     steps=[{"expect": {"type": "Put"}, "answer": None},
            {"expect": {"type": "Run"}, "answer": {"rc": None, "signal": "BUS",
                                                   "stdout": "PASS torch: torch 2.11.0+cu130\nPASS cuda: torch sees 1 GPU(s)\n"}}],
     result={"status": "failed", "msg": "verify fp4_kernels: the verify interpreter died of SIGBUS (signal 7) after cuda: an "
                                        "installed file of fp4_kernels (or of torch), typically its extension's .so, is probably truncated"})
case("verify", "a-verify-killed-by-sigbus-under-a-shell-says-so-and-names-the-file", args={"package": "fp4_kernels"},
     host={"facts": FACTS90},
     steps=[{"expect": {"type": "Put"}, "answer": None},
            {"expect": {"type": "Run"}, "answer": {"rc": 135, "stdout": "PASS torch: torch 2.11.0+cu130\n",
                                                   "stderr": "Fatal Python error: Bus error\n  File \"/venv/lib/python3.12/"
                                                             "site-packages/fp4_kernels/_C.cpython-312-x86_64-linux-gnu.so\"\n"
                                                             "Bus error\n"}}],
     result={"status": "failed", "msg": "verify fp4_kernels: the verify interpreter died of SIGBUS (exit status 135) after torch: "
                                        "/venv/lib/python3.12/site-packages/fp4_kernels/_C.cpython-312-x86_64-linux-gnu.so "
                                        "(an installed file of fp4_kernels or of torch) is probably truncated"})
LIMIT_WORDS = ("this login's address-space limit (ulimit -v, RLIMIT_AS) is 732 MiB, and under it the dynamic loader's "
               "mmap of torch's libraries and the allocations of its runtime fail (ENOMEM): torch itself may be fine; it is "
               "usually set in the login's rc files (e.g. ~/.bashrc or ~/.profile: ulimit -v, in KiB) or in "
               "/etc/security/limits.conf (an 'as' line, pam_limits); fix: raise or remove it for this login")
case("verify", "a-verify-killed-by-sigabrt-under-the-logins-ulimit-v-names-the-limit", args={"package": "fp4_kernels"},
     host={"facts": {**FACTS90, "rlimit_as_mib": 732}},  # ulimit -v 750000 in ~/.bashrc (operator trial)
     steps=[{"expect": {"type": "Put"}, "answer": None},
            {"expect": {"type": "Run"}, "answer": {"rc": None, "signal": "ABRT", "stdout": (
                "PASS torch: torch 2.11.0+cu130\nPASS cuda: torch sees 1 GPU(s)\nPASS import: x\n"
                "PASS import-order: imports with or without torch first\nPASS location: x\nPASS symbols: 2 present\n")}}],
     result={"status": "failed", "msg": "verify fp4_kernels: the verify interpreter died of SIGABRT (signal 6) after "
                                        "symbols: " + LIMIT_WORDS})
case("verify", "a-smoke-check-out-of-memory-under-the-logins-ulimit-v-names-the-limit", args={"package": "fp4_kernels"},
     host={"facts": {**FACTS90, "rlimit_as_mib": 732}},
     steps=[{"expect": {"type": "Put"}, "answer": None},
            {"expect": {"type": "Run"}, "answer": {"rc": 1, "stdout": json.dumps({"ok": False, "checks": [
                {"name": "smoke", "ok": False, "detail": "cpu: 40 checks; failed: fused mm 19x300x384 (RuntimeError: "
                 "DefaultCPUAllocator: can't allocate memory: you tried to allocate 921600 bytes. Error code 12 "
                 "(Cannot allocate memory))"}]})}}],
     result={"status": "failed", "msg": "Error code 12 (Cannot allocate memory)); " + LIMIT_WORDS})
case("verify", "a-failed-check-is-named", args={"package": "sgl_kernel"}, host={"facts": FACTS90},
     steps=[{"expect": {"type": "Put"}, "answer": None},
            {"expect": {"type": "Run"}, "answer": {"rc": 1, "stdout": json.dumps({"ok": False, "checks": [{"name": "import-order", "ok": False, "detail": "sgl_kernel imports only after torch (libc10.so: cannot open)"}]})}}],
     result={"status": "failed", "msg": "import-order: sgl_kernel imports only after torch"})
case("verify", "a-login-pythonpath-is-handed-to-the-script-and-a-copy-it-shadows-fails",
     args={"package": "fp4_kernels"},
     host={"facts": {**FACTS90, "gpus": [], "login_env": {"PYTHONPATH": "/home/u/junk", "VIRTUAL_ENV": "/old",
                                                            "TMPDIR": "/scratch"}}},
     steps=[{"expect": {"type": "Put"}, "answer": None},
            {"expect": {"type": "Run", "env": {"PYTHONPATH": None, "PYTHONHOME": None, "VIRTUAL_ENV": None,
                                               "CONDA_PREFIX": None, "CONDA_DEFAULT_ENV": None},
                        "argv": ["/venv/bin/python3", "-I", "-X", "faulthandler", "/w/runs/r1/verify/verify_package.py", "--package",
                                 "fp4_kernels", "--device", "cpu", "--venv", "/venv", "--smoke",
                                 "--login-env", '{"PYTHONPATH":"/home/u/junk"}']},
             "answer": {"rc": 1, "stdout": json.dumps({"ok": False, "checks": [{"name": "login-import", "ok": False, "detail": (
                 "as the host's users import it (the venv's python with PYTHONPATH=/home/u/junk), `import fp4_kernels` "
                 "fails: ImportError: stale")}]})}}],
     result={"status": "failed", "msg": "verify fp4_kernels: login-import: as the host's users import it (the venv's "
                                        "python with PYTHONPATH=/home/u/junk)"})

# venv_stage / venv_upgrade / venv_switch (staged environments, docs/staged.md)
from fleetctl.tasks.envs import versions_dir as _vdir
VD = _vdir("/venv")
SCRIPT = "/w/runs/r1/scripts/venv_envs.py"
FACTS_UV = {**FACTS90, "uv": {"path": "/usr/local/bin/uv"}}
def ENVS(**d):
    return {"rc": 0, "stdout": json.dumps({"ok": True, **d}) + "\n"}
STATUS_DIR = ENVS(kind="dir", live="/venv", live_kind="dir", target="/venv", versions_dir=VD, versions={}, next=2,
                  adopt_as=1, same_fs=True, others_reach_live=True, others_reach_versions=True, staged_version=None,
                  environment={"torch": "2.11.0+cu130", "torch_cuda": "13.0", "kernels": {}, "version": None})
UPLOAD = {"expect": {"type": "Put", "remote": SCRIPT, "mutating": False}, "answer": None}
STATUS_RUN = {"expect": {"type": "Run", "mutating": False, "argv": ["python3", SCRIPT, "status", "--venv", "/venv", "--versions", VD,
                                                                   "--installed", "/w/installed"], "cwd": "/"}}
PY_V2 = {**PY, "executable": f"{VD}/v2/bin/python3", "prefix": f"{VD}/v2"}
FACTS_RUN = [{"expect": {"type": "Put", "remote": "/w/runs/r1/scripts/facts.py"}, "answer": None},
             {"expect": {"type": "Run", "mutating": False}, "answer": {"rc": 0, "stdout": json.dumps({"python": PY_V2, "cmake": {"version": "3.28.3"}}) + "\n"}}]
case("venv_stage", "stages-the-next-version-beside-a-real-venv-with-uv", host={"facts": FACTS_UV},
     steps=[UPLOAD, {**STATUS_RUN, "answer": STATUS_DIR},
            {"expect": {"type": "Run", "mutating": True, "argv": ["python3", SCRIPT, "stage", "--venv", "/venv", "--versions", VD,
                                                                 "--run-id", "r1", "--installed", "/w/installed",
                                                                 "--uv", "/usr/local/bin/uv"]},
             "answer": ENVS(version=2, path=f"{VD}/v2", made_with="uv venv", linked_files=812, copied_files=0, packages=41, seconds=1.2)},
            {"expect": {"type": "Note"}, "answer": None}, *FACTS_RUN],
     result={"status": "changed", "msg": "staged v2 at", "decision": {"action": "stage", "version": 2, "tool": "uv venv"}})
case("venv_stage", "another-file-system-fails-before-anything-changes", host={"facts": FACTS90},
     steps=[UPLOAD, {**STATUS_RUN, "answer": ENVS(**{**json.loads(STATUS_DIR["stdout"]), "same_fs": False})}],
     result={"status": "failed", "msg": "on another file system", "decision": {"action": "fail"}})
case("venv_stage", "a-versions-folder-other-users-cannot-reach-is-refused", host={"facts": FACTS90},
     steps=[UPLOAD, {**STATUS_RUN, "answer": ENVS(**{**json.loads(STATUS_DIR["stdout"]), "others_reach_versions": False})}],
     result={"status": "failed", "msg": "other users can run /venv now but could not reach the versions folder",
             "decision": {"action": "fail"}})
# operator trial: a venv the login owns in a root-owned 0755 folder; --plan approved the stage and the
# deploy failed in it with a raw PermissionError on .venv-versions
case("venv_stage", "a-venv-parent-the-login-cannot-write-is-refused", host={"facts": FACTS90},
     steps=[UPLOAD, {**STATUS_RUN, "answer": ENVS(**{**json.loads(STATUS_DIR["stdout"]), "user": "u", "parent": "/",
                                                    "parent_writable": False, "versions_probe": "/", "versions_writable": False})}],
     result={"status": "failed", "msg": "preflight: the venv's parent / is not writable by u: --staged makes .venv-versions "
                                        "beside the venv and renames a symlink over it; fix: ", "decision": {"action": "fail"}})
case("venv_stage", "a-versions-folder-the-login-cannot-write-is-refused", host={"facts": FACTS90},
     steps=[UPLOAD, {**STATUS_RUN, "answer": ENVS(**{**json.loads(STATUS_DIR["stdout"]), "user": "u", "parent": "/",
                                                    "parent_writable": True, "versions_probe": VD, "versions_writable": False})}],
     result={"status": "failed", "msg": f"preflight: the versions folder {VD} is not writable by u: the stage makes each "
                                        "version there; fix: ", "decision": {"action": "fail"}})
case("venv_stage", "a-symlink-fleetctl-did-not-make-is-refused", host={"facts": FACTS90},
     steps=[UPLOAD, {**STATUS_RUN, "answer": ENVS(kind="symlink", live="/venv", target="/opt/other", unmanaged_link=True,
                                                  versions_dir=None, next=None, staged_version=None)}],
     result={"status": "failed", "msg": "a symlink to /opt/other that fleetctl did not make"})
case("venv_stage", "the-stage-script-refusal-is-the-message", host={"facts": FACTS90},
     steps=[UPLOAD, {**STATUS_RUN, "answer": STATUS_DIR},
            {"expect": {"type": "Run", "mutating": True},
             "answer": {"rc": 1, "stdout": json.dumps({"ok": False, "error": "the staged venv /w/envs/v2 does not reproduce the live one's pip freeze: numpy 2.1.0 -> None"}) + "\n"}}],
     result={"status": "failed", "msg": "stage: the staged venv /w/envs/v2 does not reproduce the live one's pip freeze"})
STATUS_LINK = ENVS(kind="symlink", live="/venv", live_kind="symlink", target=f"{VD}/v2", live_version=2, versions_dir=VD,
                   versions={"1": {"state": "was-live"}, "2": {"state": "live"}}, next=3, adopt_as=None, same_fs=True,
                   others_reach_live=True, others_reach_versions=True, staged_version=None,
                   environment={"torch": "2.11.0+cu130", "torch_cuda": "13.0", "kernels": {}, "version": 2})
case("venv_stage", "nothing-to-change-keeps-the-live-venv", host={"facts": FACTS90, "keep_live": True},
     steps=[UPLOAD, {**STATUS_RUN, "answer": STATUS_LINK}],
     result={"status": "ok", "msg": "nothing to change: the live venv stays v2",
             "decision": {"action": "skip", "why": "nothing to change", "version": 2}})
case("venv_stage", "no-venv-fails", host={"venv": None, "python": "python3"}, steps=[],
     result={"status": "failed", "msg": "no venv for this host"})

STAGED = {"version": 3, "path": f"{VD}/v3", "live": "/venv", "live_version": 2, "versions_dir": VD}
SWITCHED = ENVS(changed=True, **{"from": 2}, to=3, live="/venv", path=f"{VD}/v3", removed=[1], how="symlink replaced",
                environment={"version": 3, "torch": "2.12.0+cu130", "torch_cuda": "13.0", "live_since": "2026-12-01T02:41:00+00:00",
                             "kernels": {"sgl_kernel": {"version": "0.3.9", "files_sha256": "f" * 64, "wheel_sha256": "a" * 64}}})
case("venv_switch", "switches-to-the-version-this-run-staged", host={"facts": {**FACTS90, "staged_env": STAGED}, "venv": f"{VD}/v3"},
     steps=[UPLOAD,
            {"expect": {"type": "Run", "mutating": True, "argv": ["python3", SCRIPT, "switch", "--venv", f"{VD}/v3", "--to", "staged",
                                                                 "--keep", "3", "--why", "deploy", "--run-id", "r1", "--installed", "/w/installed"]},
             "answer": SWITCHED}],
     result={"status": "changed", "msg": "/venv: v2 -> v3 (torch 2.12.0+cu130); removed v1", "decision": {"action": "switch", "from": 2, "to": 3}})
case("venv_switch", "a-kept-live-venv-is-not-switched",
     host={"facts": {**FACTS90, "staged_env": {"kept": True, "live": "/venv", "live_version": 2,
                                               "msg": "nothing to change: the live venv stays v2"}}},
     steps=[], result={"status": "ok", "msg": "nothing to change: the live venv stays v2", "decision": {"action": "skip"}})
case("venv_switch", "nothing-staged-fails-without-a-step", host={"facts": FACTS90}, steps=[],
     result={"status": "failed", "msg": "nothing staged"})
def STATUS_TO(to):
    return {"expect": {**STATUS_RUN["expect"], "argv": [*STATUS_RUN["expect"]["argv"], "--to", to]}}
case("venv_switch", "rollback-to-the-previous-environment", args={"to": "previous", "why": "rollback"}, host={"facts": FACTS90},
     steps=[UPLOAD, {**STATUS_TO("previous"), "answer": ENVS(kind="symlink", live="/venv", live_version=3, versions_dir=VD,
                                                             versions={"2": {"state": "was-live"}, "3": {"state": "live"}},
                                                             staged_version=None, to_version=2, to_error=None)},
            {"expect": {"type": "Run", "mutating": True, "argv": ["python3", SCRIPT, "switch", "--venv", "/venv", "--to", "previous",
                                                                 "--keep", "3", "--why", "rollback", "--run-id", "r1", "--installed", "/w/installed"]},
             "answer": ENVS(changed=True, **{"from": 3}, to=2, live="/venv", removed=[], environment={"version": 2, "torch": "2.11.0+cu130"})}],
     result={"status": "changed", "msg": "/venv: v3 -> v2 (torch 2.11.0+cu130)", "decision": {"action": "switch", "from": 3, "to": 2}})
case("venv_switch", "previous-is-named-by-its-version-before-the-switch", args={"to": "previous", "why": "rollback"},
     host={"facts": FACTS90},
     steps=[UPLOAD, {**STATUS_TO("previous"), "answer": ENVS(kind="symlink", live="/venv", live_version=3, versions_dir=VD, staged_version=None,
                                                             versions={"1": {"state": "was-live"}, "2": {"state": "was-live"}, "3": {"state": "live"}},
                                                             history=[{"from": 2, "to": 1, "why": "rollback"}, {"from": 1, "to": 3, "why": "deploy"}],
                                                             to_version=1, to_error=None)},
            # what a dry run answers: the switch script did not run, so the version is the planner's
            {"expect": {"type": "Run", "mutating": True}, "answer": ENVS(changed=True, **{"from": 3}, live="/venv", removed=[], environment={})}],
     result={"status": "changed", "msg": "/venv: v3 -> v1", "decision": {"action": "switch", "from": 3, "to": 1}})
# the host script's own check of the target (status --to): refused while planning, no switch step,
# so --plan and --dry-run refuse what the rollback would (operator trial: they said "v7 -> v1")
case("venv_switch", "a-pruned-version-is-refused-naming-what-is-kept", args={"to": "1", "why": "rollback"}, host={"facts": FACTS90},
     steps=[UPLOAD, {**STATUS_TO("1"), "answer": ENVS(kind="symlink", live="/venv", live_version=3, versions_dir=VD,
                                                      versions={"2": {}, "3": {}}, staged_version=None, to_version=1,
                                                      to_error="no environment v1 in /w/envs (there: v2 (was-live), v3 (live))")}],
     result={"status": "failed", "msg": "switch: no environment v1 in /w/envs (there: v2 (was-live), v3 (live))",
             "decision": {"action": "fail", "from": 3, "to": 1}})
case("venv_switch", "a-live-version-whose-folder-is-gone-is-switched-away-from-saying-so", args={"to": "1", "why": "rollback"},
     host={"facts": FACTS90},
     steps=[UPLOAD, {**STATUS_TO("1"), "answer": ENVS(kind="symlink", live="/venv", live_kind="symlink", live_version=3, live_missing=3,
                                                      versions_dir=VD, versions={"1": {"state": "was-live"}, "3": {"state": "live"}},
                                                      staged_version=None, to_version=1, to_error=None)},
            {"expect": {"type": "Run", "mutating": True},
             "answer": ENVS(changed=True, **{"from": 3}, to=1, live="/venv", removed=[], live_missing=3, environment={"version": 1})}],
     result={"status": "changed", "msg": "/venv: v3 -> v1; the live version v3 is missing (its folder is gone)",
             "decision": {"action": "switch", "from": 3, "to": 1}})
case("venv_stage", "a-live-version-whose-folder-is-gone-is-refused", host={"facts": FACTS90},
     steps=[UPLOAD, {**STATUS_RUN, "answer": ENVS(kind="symlink", live="/venv", live_kind="symlink", target=f"{VD}/v3", live_version=3,
                                                  live_missing=3, versions_dir=VD, versions={"3": {"state": "live"}}, next=4,
                                                  staged_version=None)}],
     result={"status": "failed", "msg": f"preflight: the live version v3 of /venv is missing ({VD}/v3 is gone)",
             "decision": {"action": "fail"}})

UP = {"packages": ["torch==2.12.0.dev20261128"], "pre": True, "pip_args": ["--no-index", "--find-links", "/wheels"]}
def UPSTATE(torch, dists):
    return {"rc": 0, "stdout": json.dumps({"record": None, "dist": None, "torch": torch, "cuda": "13.0", "dists": dists, "stamp": None}) + "\n"}
UP_STATE_ARGV = ["/venv/bin/python3", "-c", STATE_ARGV[2], "torch", "/nonexistent", ""]
case("venv_upgrade", "upgrades-torch-and-rereads-the-venv-facts", args=UP, host={"facts": FACTS_UV},
     steps=[{"expect": {"type": "Run", "mutating": False, "argv": UP_STATE_ARGV}, "answer": UPSTATE("2.11.0+cu130", {"pip": "25.2", "torch": "2.11.0+cu130"})},
            {"expect": {"type": "Run", "mutating": True, "argv": [*MODES, "/venv/bin/python3", "-m", "pip", "install", "--no-input", "--pre", "--upgrade",
                                                                 "--no-index", "--find-links", "/wheels", "torch==2.12.0.dev20261128"]},
             "answer": {"rc": 0}},
            {"expect": {"type": "Run", "mutating": False}, "answer": UPSTATE("2.12.0.dev20261128", {"pip": "25.2", "torch": "2.12.0.dev20261128", "triton": "3.6.0"})},
            *FACTS_RUN],
     result={"status": "changed", "msg": "torch 2.11.0+cu130 (CUDA 13.0) -> 2.12.0.dev20261128 (CUDA 13.0); added triton 3.6.0 (pip)",
             "decision": {"action": "upgrade", "packages": ["torch"]}})
case("venv_upgrade", "uv-where-the-venv-has-no-pip", args={**UP, "no_deps": True}, host={"facts": FACTS_UV},
     steps=[{"expect": {"type": "Run", "mutating": False}, "answer": UPSTATE("2.11.0+cu130", {"torch": "2.11.0+cu130"})},
            {"expect": {"type": "Run", "argv": [*MODES, "/usr/local/bin/uv", "pip", "install", "--python", "/venv/bin/python3", "--prerelease", "allow",
                                                "--upgrade", "--no-deps", "--no-index", "--find-links", "/wheels", "torch==2.12.0.dev20261128"]},
             "answer": {"rc": 0}},
            {"expect": {"type": "Run", "mutating": False}, "answer": UPSTATE("2.11.0+cu130", {"torch": "2.11.0+cu130"})}, *FACTS_RUN],
     result={"status": "ok", "msg": "torch: already the newest allowed in /venv"})
case("venv_upgrade", "an-index-without-the-nightly-names-pip-s-error", args=UP, host={"facts": FACTS90},
     steps=[{"expect": {"type": "Run", "mutating": False}, "answer": UPSTATE("2.11.0+cu130", {"pip": "25.2", "torch": "2.11.0+cu130"})},
            {"expect": {"type": "Run", "mutating": True},
             "answer": {"rc": 1, "stderr": "ERROR: Could not find a version that satisfies the requirement torch==2.12.0.dev20261128 (from versions: 2.11.0)\nERROR: No matching distribution found for torch==2.12.0.dev20261128\n"}}],
     result={"status": "failed", "msg": "pip install torch==2.12.0.dev20261128: ERROR: Could not find a version"})

# -- Python environments as they come (issue 23): a venv without pip, fleetctl's own probe failing
PY_NO_PIP = {**PY, "packages": {"pip": None, "setuptools": None, "torch": "2.11.0+cu130"}}
FACTS_NO_PIP = {**FACTS90, "python": PY_NO_PIP, "uv": {"path": None}}
NO_PIP_MSG = ("the venv /venv has no pip and this host has no uv, so nothing can build or install into it: add pip to it "
              "(/venv/bin/python3 -m ensurepip --upgrade), or install uv on the host")
case("build_wheel", "a-venv-without-pip-on-a-host-without-uv-fails-while-planning", args=BW,
     host={**H90, "facts": FACTS_NO_PIP}, steps=[],
     result=refused(NO_PIP_MSG, NO_PIP_MSG + " (https://docs.astral.sh/uv/getting-started/installation/)", decision={"action": "fail"}))
case("build_wheel", "tool-uv-on-a-host-without-uv-fails-while-planning", args={**BW, "tool": "uv"},
     host={**H90, "facts": {**FACTS90, "uv": {"path": None}}}, steps=[],
     result=refused("tool: uv, but this host has no uv (looked on PATH, ~/.local/bin, ~/.cargo/bin)",
                    "tool: uv, but this host has no uv (looked on PATH, ~/.local/bin, ~/.cargo/bin): install uv on the host "
                    "(https://docs.astral.sh/uv/getting-started/installation/), or use tool: pip (the venv has pip)"))
case("pip_install", "a-venv-without-pip-on-a-host-without-uv-fails-before-any-step", args=PI,
     host={"facts": FACTS_NO_PIP, "files": {WHEEL: SHA}}, steps=[], result={"status": "failed", "msg": NO_PIP_MSG})
case("pip_install", "a-venv-without-pip-installs-with-the-hosts-uv",
     args={**PI, "keep_previous": False}, host={"facts": {**FACTS_NO_PIP, "uv": {"path": "/usr/local/bin/uv"}}, "files": {WHEEL: SHA}},
     steps=[{"expect": {"type": "Run", "mutating": False, "argv": STATE_ARGV}, "answer": STATE(None, None)},
            {"expect": {"type": "Run", "argv": ["/usr/local/bin/uv", "pip", "check", "--python", "/venv/bin/python3"]}, "answer": {"rc": 0}},
            {"expect": {"type": "Run", "mutating": True, "argv": [*MODES, "/usr/local/bin/uv", "pip", "install", "--python", "/venv/bin/python3",
                                                                 "--no-cache", "--link-mode", "copy", "--force-reinstall", "--no-deps", WHEEL]}, "answer": {"rc": 0}},
            {"expect": {"type": "Run", "mutating": False}, "answer": STATE(None, {"version": "0.1.0", "record_sha256": "r"})},
            {"expect": {"type": "Run", "mutating": False}, "answer": {"rc": 0}}],
     result={"status": "changed", "msg": "(uv)"})
VENV_STARTED = "@@FLEETCTL_PROBE_STARTED@@\n"
# a fault of fleetctl's probe is reported with the host's log
REPORT_IT = "(please report it with the host's log: fleetctl logs RUN_ID HOST)"
TORCH_ARCHS_FAULT = ("fleetctl's probe torch_archs (which arch names torch.utils.cpp_extension accepts) failed on this host: "
                     "killed by signal 11: no answer")
def crashed_probe(question, error):
    out = json.loads(venv_out(["setuptools>=64", "packaging", "ninja", "wheel"])["stdout"])
    return {"rc": 0, "stdout": VENV_STARTED + json.dumps({**out, "probe_errors": {question: error}}) + "\n"}
case("build_wheel", "a-crashed-probe-question-is-fleetctls-fault-not-the-hosts", args=BW, host=H90,
     steps=[META_TEXT, NO_STAMPS, {"expect": {"type": "Run", "mutating": False, "cwd": "/"},
                        "answer": crashed_probe("torch_archs", "killed by signal 11: no answer")}],
     result=refused(f"{TORCH_ARCHS_FAULT}; this is a fault of fleetctl, not of the host",
                    f"{TORCH_ARCHS_FAULT}; this is a fault of fleetctl, not of the host {REPORT_IT}", preflight=False))
case("build_wheel", "a-probe-that-started-and-printed-no-answer-is-fleetctls-fault", args=BW, host=H90,
     steps=[META_TEXT, NO_STAMPS, {"expect": {"type": "Run", "mutating": False, "cwd": "/"},
                        "answer": {"rc": 1, "stdout": VENV_STARTED, "stderr": "Traceback (most recent call last):\nOSError: [Errno 5] Input/output error\n"}}],
     result=refused("fleetctl's probe venv (the probe of the venv's python) failed on this host: rc=1: OSError: [Errno 5]",
                    "fleetctl's probe venv (the probe of the venv's python) failed on this host: rc=1: OSError: [Errno 5] "
                    f"Input/output error; this is a fault of fleetctl, not of the host {REPORT_IT}", preflight=False))
case("build_wheel", "a-venv-python-that-does-not-start-is-the-hosts-fault", args=BW, host=H90,
     steps=[META_TEXT, NO_STAMPS, {"expect": {"type": "Run", "mutating": False, "cwd": "/"},
                        "answer": {"rc": 127, "stderr": "/bin/sh: 1: /venv/bin/python3: not found\n"}}],
     result=refused("preflight: venv python /venv/bin/python3 does not run: /bin/sh: 1: /venv/bin/python3: not found",
                    "venv python /venv/bin/python3 does not run: /bin/sh: 1: /venv/bin/python3: not found", preflight=False))
case("build_wheel", "torch-facts-that-fleetctls-reader-could-not-read-are-not-called-a-broken-torch", args=BW,
     host={**H90, "facts": {**FACTS90, "python": {**PY, "torch": None, "torch_cuda": None,
                                                  "torch_probe_error": "fleetctl's probe read_torch failed: IndexError: list index out of range"}}},
     steps=[META_TEXT, NO_STAMPS, {"expect": {"type": "Run", "mutating": False, "cwd": "/"}, "answer": venv_out(["setuptools>=64", "packaging", "ninja", "wheel"])},
            *NO_MEMBER_BUILDS],
     result=refused("fleetctl's probe read_torch failed: IndexError: list index out of range: fleetctl could not read the "
                    "venv's torch, a fault of fleetctl, not of the host",
                    "fleetctl's probe read_torch failed: IndexError: list index out of range: fleetctl could not read the "
                    "venv's torch, a fault of fleetctl, not of the host (its torch may be fine); please report it with the "
                    "host's log (fleetctl logs RUN_ID HOST)", preflight=False))
case("pip_install", "a-crashed-install-state-probe-is-fleetctls-fault-and-installs-nothing", args=PI, host=HP,
     steps=[{"expect": {"type": "Run", "mutating": False, "argv": STATE_ARGV},
             "answer": {"rc": 1, "stdout": "@@FLEETCTL_PROBE_STARTED@@\n", "stderr": "Traceback (most recent call last):\nKeyError: 'x'\n"}}],
     result={"status": "failed", "msg": "fleetctl's probe install-state (before the install) failed on this host: KeyError: 'x'; "
                                        "this is a fault of fleetctl, not of the host"})
case("pip_install", "a-venv-python-that-does-not-start-is-named-and-nothing-is-installed", args=PI, host=HP,
     steps=[{"expect": {"type": "Run", "mutating": False, "argv": STATE_ARGV},
             "answer": {"rc": 127, "stderr": "sh: 1: /venv/bin/python3: not found\n"}}],
     result={"status": "failed", "msg": "venv python /venv/bin/python3 does not run (before the install): sh: 1: /venv/bin/python3: not found; nothing was installed"})
case("pip_install", "no-answer-after-the-install-is-not-a-torch-change-and-rolls-nothing-back", args={**PI, "keep_previous": False}, host=HP,
     steps=[{"expect": {"type": "Run", "mutating": False, "argv": STATE_ARGV}, "answer": STATE(None, None)},
            {"expect": {"type": "Run", "mutating": False}, "answer": {"rc": 0}},
            {"expect": {"type": "Run", "mutating": True}, "answer": {"rc": 0}},
            {"expect": {"type": "Run", "mutating": False, "argv": STATE_ARGV},
             "answer": {"rc": -9, "stdout": "@@FLEETCTL_PROBE_STARTED@@\n", "stderr": ""}}],
     result={"status": "failed", "msg": "but whether torch moved is unknown: fleetctl's probe install-state (after the install) failed"})

# -- arch classes: a member that cannot build receives its class's wheel (build_space, receiver_space)
VENV_SKB_OK = venv_out({"scikit-build-core>=0.10": {"name": "scikit-build-core", "installed": "0.10.7", "ok": True},
                        "nanobind>=2.0": {"name": "nanobind", "installed": "2.1.0", "ok": True}})
VENV_SKB_OLD = venv_out({"scikit-build-core>=0.10": {"name": "scikit-build-core", "installed": "0.9.0", "ok": False},
                         "nanobind>=2.0": {"name": "nanobind", "installed": "2.1.0", "ok": True}})
SKB_MISSING = ("build requirements missing in /venv: scikit-build-core>=0.10 (have 0.9.0) (the package's own [build-system] "
               "requires); install them into the venv: /venv/bin/python3 -m pip install 'scikit-build-core>=0.10' (or have "
               "the build install them: -e install_build_requirements=true with the shipped fp4-kernels playbook; "
               "install_build_requirements: true in a build_wheel task of your own)")
H_SHORT = {**H90, "facts": {**FACTS90, "disk_free_mib": 1000, "disk_free_path": "/w"}}
SHORT_FOR_THE_BUILD = ("only 1000 MiB free at /w; the build needs 2048 MiB (the build_wheel task's min_free_disk_mib argument in "
                       "the playbook, not a host var): free space there, or set the host var workdir to a larger file system")
def receiver_space(free_mib):
    """The receiver's space check's answer: where the wheel lands and where pip unpacks it."""
    return {"rc": 0, "stdout": json.dumps({p: {"dir": "/w", "ok": True, "checked": True, "errno": None, "error": None,
                                               "free_mib": free_mib} for p in ("/w/wheels", "/w/runs/r1")}) + "\n"}
RECEIVED = [{"expect": {"type": "Fetch"}, "answer": {"name": "w.whl", "sha256": SHA, "builder": "h0", "remote": "/w/wheels/k/w.whl",
                                                     "data": {}}},
            {"expect": {"type": "Run", "argv": ["stat", "-L", "-c", "%s %Y", "/w/wheels/k/w.whl"], "mutating": False},
             "answer": {"rc": 0, "stdout": f"{SIZE} {MTIME}\n"}},
            {"expect": {"type": "Put"}, "answer": None}]
PUSHED_TO_ONE_THAT_CANNOT_BUILD = {"expect": {"type": "ClassRole", "holds": False, "once": True}, "answer": "push"}
case("build_wheel", "a-builder-short-of-the-builds-disk-space-fails-with-the-builds-number",
     about="the member that builds keeps the build's check: min_free_disk_mib (2048 MiB)", args=BW, host=H_SHORT,
     steps=[META_SKB, NO_STAMPS, {"expect": {"type": "Run"}, "answer": VENV_SKB_OK}, *NO_MEMBER_BUILDS],
     result=refused(f"preflight: {SHORT_FOR_THE_BUILD}", SHORT_FOR_THE_BUILD, preflight=False))
case("build_wheel", "a-host-short-of-the-builds-disk-space-receives-its-class-wheel",
     about="new-user trial: a member with room for the wheel but not for the build (min_free_disk_mib, 2048) was refused; "
           "it receives the wheel once its room for the wheel and its install is checked (512 MiB)", args=BW, host=H_SHORT,
     steps=[META_SKB, NO_STAMPS, {"expect": {"type": "Run"}, "answer": VENV_SKB_OK}, PUSHED_TO_ONE_THAT_CANNOT_BUILD,
            {"expect": {"type": "Run", "mutating": False}, "answer": receiver_space(1000)}, *RECEIVED],
     result={"status": "changed", "msg": "built once for this arch class on h0",
             "decision": {"action": "push", "cannot_build": f"preflight: {SHORT_FOR_THE_BUILD}"}})
case("build_wheel", "a-host-that-cannot-build-receives-its-class-wheel", args=BW, host=H90,
     steps=[META_SKB, NO_STAMPS, {"expect": {"type": "Run"}, "answer": VENV_SKB_OLD}, PUSHED_TO_ONE_THAT_CANNOT_BUILD,
            {"expect": {"type": "Run", "mutating": False}, "answer": receiver_space(200000)}, *RECEIVED],
     result={"status": "changed", "msg": "built once for this arch class on h0",
             "decision": {"action": "push", "cannot_build": f"preflight: {SKB_MISSING}"}})
case("build_wheel", "a-member-whose-builder-was-lost-and-cannot-build-says-both", args=BW, host=H90,
     steps=[META_SKB, NO_STAMPS, {"expect": {"type": "Run"}, "answer": VENV_SKB_OLD}, PUSHED_TO_ONE_THAT_CANNOT_BUILD,
            {"expect": {"type": "Run", "mutating": False}, "answer": receiver_space(200000)},
            {"expect": {"type": "Fetch"}, "answer": "build"},  # the builder was lost: this host is next to build
            {"expect": {"type": "Fail"}, "answer": None}],
     result=refused("the arch class's builder was lost during the run and this host was next to build, but preflight: "
                    "build requirements missing", SKB_MISSING, preflight=False))
SHORT_TO_RECEIVE = ("only 511 MiB free at /w; receiving this arch class's wheel (not building it) needs 512 MiB (the build_wheel "
                    "task's receiver_min_free_disk_mib argument in the playbook, not a host var)")
case("build_wheel", "a-receiver-short-of-room-for-the-wheel-fails-before-the-transfer",
     about="a receiver below receiver_min_free_disk_mib (default 512 MiB) fails while planning, nothing is sent", args=BW,
     host={**H90, "facts": {**FACTS90, "disk_free_mib": 511, "disk_free_path": "/w"}},
     steps=[META_SKB, NO_STAMPS, {"expect": {"type": "Run"}, "answer": VENV_SKB_OK}, PUSHED_TO_ONE_THAT_CANNOT_BUILD],
     result=refused(f"preflight: {SHORT_TO_RECEIVE}", f"{SHORT_TO_RECEIVE}: free space there, or set the host var workdir to "
                    "a larger file system", preflight=False, decision={"action": "fail"}))
QUOTA = {"dir": "/w", "ok": False, "checked": True, "errno": 122, "error": "Disk quota exceeded", "free_mib": 200000}
QUOTA_MSG = ("Disk quota exceeded (EDQUOT) writing 2048 MiB in /w (for /w/tmp, /w/wheels; statvfs shows 200000 MiB free there; "
             "min_free_disk_mib)")
case("build_wheel", "preflight-a-quota-statvfs-does-not-show", args=BW, host=H90,
     steps=[META_SKB, NO_STAMPS, {"expect": {"type": "Run"}, "answer": PYINFO},
            {"expect": {"type": "Run", "mutating": False},
             "answer": {"rc": 0, "stdout": json.dumps({"/w/tmp": QUOTA, "/w/wheels": QUOTA}) + "\n"}},
            *NO_MEMBER_BUILDS],
     result=refused(f"preflight: {QUOTA_MSG}", f"{QUOTA_MSG}: a disk quota (user, group or project quota, or a btrfs qgroup) "
                    "on that file system is used up, though df may show space free; free space under the quota (quota -s "
                    "shows it) or ask for a larger one, or set the host var workdir to a folder on another file system",
                    preflight=False))

# -- what only a compile needs (memory, nvcc, the workdir's exec, the host compiler, cmake) refuses
# only a host that compiles (fresh operator's trial: nodea, its wheel installed and current, was
# refused for build memory in deploy and in --plan, with its class's wheel in the controller's cache)
LOW_MEM = {**FACTS90, "mem_available_mib": 20000, "mem_limit_mib": 500, "cgroup": {"version": 1, "memory_used_mib": 72},
           "mem_limit_source": "cgroup v1 /sys/fs/cgroup/memory/user/memory.limit_in_bytes"}
LOW_MEM_LINE = ("only 428 MiB of memory for the build (cgroup v1 limit 500 MiB, 72 MiB used (cgroup v1 "
                "/sys/fs/cgroup/memory/user/memory.limit_in_bytes)); it needs 1024 MiB (min_free_mem_mib): raise the memory "
                "limit, free memory, or let another member build (build_host)")
case("build_wheel", "a-host-short-of-build-memory-that-holds-its-wheel-reuses-it", args=BW, host={**H90, "facts": LOW_MEM},
     steps=[META_SKB, {"expect": {"type": "Run", "mutating": False}, "answer": STAMPS_OK},
            {"expect": {"type": "ClassRole", "key": K, "holds": True, "once": True}, "answer": "reuse"}],
     result={"status": "ok", "decision": {"action": "reuse", "installed": True, "changed": []}})
case("build_wheel", "a-host-short-of-build-memory-receives-its-class-wheel", args=BW, host={**H90, "facts": LOW_MEM},
     about="no venv probe: it cannot compile, so what a build needs is not asked; the receiver's room is",
     steps=[META_SKB, NO_STAMPS, PUSHED_TO_ONE_THAT_CANNOT_BUILD,
            {"expect": {"type": "Run", "mutating": False}, "answer": receiver_space(200000)}, *RECEIVED],
     result={"status": "changed", "msg": "built once for this arch class on h0",
             "decision": {"action": "push", "cannot_build": f"preflight: {LOW_MEM_LINE}"}})
NO_NVCC = {**FACTS90, "cuda": {"home": None, "nvcc": None, "version": None}}
case("build_wheel", "a-host-without-nvcc-receives-its-class-wheel", args=BW, host={**H90, "facts": NO_NVCC},
     steps=[META_SKB, NO_STAMPS, PUSHED_TO_ONE_THAT_CANNOT_BUILD,
            {"expect": {"type": "Run", "mutating": False}, "answer": receiver_space(200000)}, *RECEIVED],
     result={"status": "changed", "decision": {"action": "push"}})
case("build_wheel", "a-host-short-of-build-memory-that-builds-each-fails", args={**BW, "build": "each"},
     host={**H90, "facts": LOW_MEM},
     steps=[META_SKB, NO_STAMPS, {"expect": {"type": "ClassRole", "holds": False, "once": False}, "answer": "build"}],
     result=refused(f"preflight: {LOW_MEM_LINE}", LOW_MEM_LINE))
# the build's cmake is checked against one minimum, the tree's own (fresh operator's trial: cmake
# 3.16.3 was "older than 3.18", the task's old default, for a tree that requires 3.25)
TREE325 = {**SKB, "CMakeLists.txt": "cmake_minimum_required(VERSION 3.25...3.31)\nproject(k LANGUAGES CXX CUDA)\n"}
CMAKE_OLD = ("cmake 3.16.3 at /opt/cm/bin/cmake is older than 3.25, which the tree requires (CMakeLists.txt "
             "cmake_minimum_required): install a newer cmake into the venv (/venv/bin/python3 -m pip install "
             "'cmake>=3.25') or put one first on the host's login PATH")
case("build_wheel", "an-old-cmake-is-refused-with-the-trees-minimum", args=BW,
     host={**H90, "facts": {**FACTS90, "cmake": {"version": "3.16.3", "path": "/opt/cm/bin/cmake"}}},
     steps=[{**META_SKB, "answer": meta_out(TREE325)}, NO_STAMPS, {"expect": {"type": "Run"}, "answer": PYINFO},
            *NO_MEMBER_BUILDS],
     result=refused(f"preflight: {CMAKE_OLD}", CMAKE_OLD, preflight=False))
case("build_wheel", "min-cmake-above-the-trees-minimum-is-the-one-named", args={**BW, "min_cmake": "3.28"},
     host={**H90, "facts": {**FACTS90, "cmake": {"version": "3.26.0", "path": "/opt/cm/bin/cmake"}}},
     steps=[{**META_SKB, "answer": meta_out(TREE325)}, NO_STAMPS, {"expect": {"type": "Run"}, "answer": PYINFO},
            *NO_MEMBER_BUILDS],
     result={"status": "failed", "msg": "cmake 3.26.0 at /opt/cm/bin/cmake is older than 3.28, which the task requires "
                                        "(build_wheel min_cmake)"})

# -- the host compiler nvcc compiles host code with (build_toolchain, build.hostcompiler)
from fleetctl.tasks.build_toolchain import host_compiler_preflight  # noqa: E402
CUDA_MAX15 = {**CUDA, "host_compiler_max": {"gnu": 15, "clang": 20, "source": "/usr/local/cuda/include/crt/host_config.h"}}
GCC16 = {"path": "/usr/bin/gcc", "realpath": "/usr/bin/gcc-16", "name": "gcc", "kind": "gnu", "major": 16, "minor": 1,
         "version": "16.1", "banner": "gcc (GCC) 16.1.0", "error": None}
GXX14 = {"path": "/usr/bin/g++-14", "realpath": "/usr/bin/g++-14", "name": "g++-14", "kind": "gnu", "major": 14, "minor": 2,
         "version": "14.2", "banner": "g++-14 (GCC) 14.2.0", "error": None}
FACTS_GXX14 = {**FACTS90, "cuda": CUDA_MAX15, "host_compilers": {"default": GCC16, "candidates": [GXX14]}}
K_GXX14 = key_for(host_compiler_preflight(FACTS_GXX14, BW)[0])  # the chosen compiler is part of the class key
DEST_GXX14 = f"/w/wheels/{K_GXX14[:16]}"
case("build_wheel", "a-refused-default-host-compiler-is-replaced-by-an-accepted-one", args=BW,
     host={**H90, "facts": FACTS_GXX14},
     steps=[META_SKB, {"expect": {"type": "Run"}, "answer": {"rc": 0, "stdout": ""}}, {"expect": {"type": "Run"}, "answer": PYINFO},
            SPACE_OK, {"expect": {"type": "ClassRole"}, "answer": "build"}, left(DEST_GXX14), set_aside(DEST_GXX14),
            {"expect": {"type": "Run"}, "answer": {"rc": 0}}, {"expect": {"type": "Run"}, "answer": {"rc": 0}},
            {"expect": {"type": "PutFiles"}, "answer": None}, {"expect": {"type": "Run"}, "answer": {"rc": 0}},
            {"expect": {"type": "Emit", "name": "build.started"}, "answer": None},
            {"expect": {"type": "Run", "cwd": "/w/src/k",
                        "argv": in_room([*PIP_ARGV[:7], DEST_GXX14, *PIP_ARGV[8:13],
                                         "--config-settings=cmake.define.CMAKE_CUDA_HOST_COMPILER=/usr/bin/g++-14",
                                         *PIP_ARGV[13:]], f"/w/tmp/{K_GXX14[:16]}"),
                        "env": {**ENV, "TMPDIR": f"/w/tmp/{K_GXX14[:16]}", "FLEETCTL_BUILD_RECORD": f"{DEST_GXX14}/.fleetctl-build-record.jsonl",
                                "CUDAHOSTCXX": "/usr/bin/g++-14", "NVCC_CCBIN": "/usr/bin/g++-14"}},
             "answer": {"rc": 0}},
            {"expect": {"type": "Run"}, "answer": {"rc": 0}}, {"expect": {"type": "Run"}, "answer": {"rc": 0}},
            {"expect": {"type": "Run", "mutating": False}, "answer": {"rc": 0, "stdout": RECORD_OK}},
            {"expect": {"type": "Run", "mutating": False},
             "answer": {"rc": 0, "stdout": f"{SHA}  {DEST_GXX14}/fp4_kernels-0.1.0-cp312-cp312-linux_x86_64.whl\n"}},
            {"expect": {"type": "Put"}, "answer": None},
            {"expect": {"type": "Run"}, "answer": {"rc": 0, "stdout": json.dumps({"archs": ["sm_90a"], "ptx": ["compute_90a"], "error": None})}},
            {"expect": {"type": "Put"}, "answer": None}, drop_previous(DEST_GXX14), {"expect": {"type": "Publish"}, "answer": None}],
     result={"status": "changed", "msg": "built fp4_kernels-0.1.0-cp312-cp312-linux_x86_64.whl for 9.0a",
             "decision": {"host_compiler": "host compiler: nvcc's default gcc 16.1 (/usr/bin/gcc) is refused by nvcc 13.0 at "
                                           "/usr/local/cuda/bin/nvcc (gcc 16.1 is newer than 15; it accepts clang <= 20 and gcc "
                                           "<= 15, /usr/local/cuda/include/crt/host_config.h): using gcc 14.2 (/usr/bin/g++-14) "
                                           "(CUDAHOSTCXX, NVCC_CCBIN, CMAKE_CUDA_HOST_COMPILER)"}})
NO_CXX = ("nvcc 13.0 at /usr/local/cuda/bin/nvcc refuses the host compiler gcc 16.1 (/usr/bin/gcc) (gcc 16.1 is newer than 15; "
          "it accepts clang <= 20 and gcc <= 15, /usr/local/cuda/include/crt/host_config.h) and no accepted one is installed "
          "(others found: none): install g++-15 or older")
case("build_wheel", "preflight-no-host-compiler-nvcc-accepts", args=BW,
     host={**H90, "facts": {**FACTS90, "cuda": CUDA_MAX15, "host_compilers": {"default": GCC16, "candidates": []}}}, steps=[META_SKB, NO_STAMPS, *NO_MEMBER_BUILDS],
     result=refused(f"preflight: {NO_CXX}", f"{NO_CXX} (e.g. apt-get install g++-15, dnf install gcc-toolset-15) or a newer "
                    "CUDA toolkit (host var cuda_home); fleetctl then uses it"))

# -- build stamps: a stamp is trusted for the wheel it describes only (build_keys.stale_stamp)
case("build_wheel", "a-stamp-without-size-and-mtime-is-trusted-once-its-wheel-hashes-to-its-sha256", args=BW, host=H90,
     steps=[META_SKB, {"expect": {"type": "Run", "mutating": False}, "answer": stamps_out(STAMP)},
            {"expect": {"type": "Run", "argv": ["sha256sum", WHEEL], "mutating": False}, "answer": {"rc": 0, "stdout": f"{SHA}  {WHEEL}\n"}},
            # the stamp is rewritten with the size and mtime the wheel has now: hashed once, not every run
            {"expect": {"type": "Put", "remote": f"{DEST}/.fleetctl-build.json", "mutating": True}, "answer": None},
            {"expect": {"type": "ClassRole", "key": K, "holds": True, "once": True}, "answer": "reuse"}],
     result={"status": "ok", "decision": {"action": "reuse", "installed": True, "changed": []}})
def rebuilt(why):
    """A stale stamp's wheel built again, with the line saying why (note, summary, --plan's cause column)."""
    return {"status": "changed", "msg": f"built fp4_kernels-0.1.0-cp312-cp312-linux_x86_64.whl for 9.0a (rebuilt: {why})",
            "decision": {"action": "build", "stale_wheel": why, "installed": False}}
STALE_BUILD = [{"expect": {"type": "Note"}, "answer": None}, {"expect": {"type": "Run"}, "answer": PYINFO}, SPACE_OK,
               {"expect": {"type": "ClassRole", "holds": False}, "answer": "build"}, *BUILD_STEPS[5:], *BUILT]
case("build_wheel", "a-truncated-wheel-is-rebuilt-not-reused-its-size-says-so-without-hashing", args=BW, host=H90,
     steps=[META_SKB, {"expect": {"type": "Run"}, "answer": stamps_out(STAMP_SIZED, seen=(5, MTIME))}, *STALE_BUILD],
     result=rebuilt("fp4_kernels-0.1.0-cp312-cp312-linux_x86_64.whl is 5 bytes, its build stamp says 1234 (truncated or "
                    "replaced since it was built)"))
case("build_wheel", "a-wheel-of-the-stamps-size-whose-sha256-differs-is-rebuilt", args=BW, host=H90,
     steps=[META_SKB, {"expect": {"type": "Run"}, "answer": stamps_out(STAMP_SIZED, seen=(SIZE, MTIME + 7))},
            {"expect": {"type": "Run", "argv": ["sha256sum", WHEEL], "mutating": False}, "answer": {"rc": 0, "stdout": f"{'b' * 64}  {WHEEL}\n"}},
            *STALE_BUILD],
     result=rebuilt("fp4_kernels-0.1.0-cp312-cp312-linux_x86_64.whl's sha256 is bbbbbbbbbbbb..., its build stamp says "
                    "aaaaaaaaaaaa... (changed since it was built)"))
case("build_wheel", "a-wheel-pushed-earlier-is-reused-not-pushed-again", args=BW, host=H90,
     steps=[META_SKB, {"expect": {"type": "Run", "mutating": False},
                       "answer": stamps_out({**STAMP, "pushed_from": "n1", "reused": False, "size_bytes": SIZE, "mtime_s": MTIME})},
            {"expect": {"type": "ClassRole", "key": K, "holds": True, "once": True}, "answer": "reuse"}],
     result={"status": "ok", "decision": {"action": "reuse", "installed": True, "changed": []},
             "data": {"reused": True, "pushed_from": None, "wheel_from": "n1"}},
     about="a wheel pushed to this host in an earlier run is reused now: this run's data says reused, not pushed from its "
           "builder (the summary says '(reused)' over SSH and Slurm alike)")
AARCH64 = {"machine": "aarch64", "sysconfig": "linux-aarch64", "libc": "glibc", "libc_version": "2.39",
           "interp": "/lib/ld-linux-aarch64.so.1", "bits": 64}
FACTS_ARM = {**FACTS90, "python": {**PY, "platform": AARCH64}}
K_ARM = key_for(FACTS_ARM)
case("build_wheel", "the-platform-is-part-of-the-class-key", args=BW, host={**H90, "facts": FACTS_ARM},
     steps=[META_SKB, {"expect": {"type": "Run"}, "answer": {"rc": 0, "stdout": ""}}, {"expect": {"type": "Run"}, "answer": PYINFO},
            SPACE_OK, {"expect": {"type": "ClassRole", "holds": False}, "answer": "push"},
            {"expect": {"type": "Fetch", "key": K_ARM, "dest": f"/w/wheels/{K_ARM[:16]}"},
             "answer": {"name": "w.whl", "sha256": SHA, "builder": "h0", "remote": f"/w/wheels/{K_ARM[:16]}/w.whl", "data": {"archs": "9.0a"}}},
            {"expect": {"type": "Run", "argv": ["stat", "-L", "-c", "%s %Y", f"/w/wheels/{K_ARM[:16]}/w.whl"], "mutating": False},
             "answer": {"rc": 0, "stdout": f"{SIZE} {MTIME}\n"}},
            {"expect": {"type": "Put", "remote": f"/w/wheels/{K_ARM[:16]}/.fleetctl-build.json"}, "answer": None}],
     result={"status": "changed", "msg": "built once for this arch class on h0",
             "decision": {"action": "push", "changed": ["nothing installed"], "platform": "linux_aarch64 glibc 2.39"}})

# -- shared folders: who else builds or installs there (TargetClaim, the folder's .fleetctl-id)
case("build_wheel", "a-workdir-another-host-shares-is-refused-before-anything", args=BW,
     host={**H90, "facts": {**FACTS90, "targets": {"venv": {"path": "/venv", "id": "a" * 32, "error": None},
                                                   "workdir": {"path": "/nfs/fleet", "id": "b" * 32, "error": None}}}},
     steps=[{"expect": {"type": "TargetClaim", "mutating": False}, "answer": [["workdir", "/nfs/fleet", ["h0", "h1"], "9.0a"]]}],
     result=refused("h0 and h1 share the workdir /nfs/fleet (one /nfs/fleet/.fleetctl-id): their builds would overwrite each "
                    "other's files", "h0 and h1 share the workdir /nfs/fleet (one /nfs/fleet/.fleetctl-id): their builds would "
                    "overwrite each other's files: give each host its own workdir (the host var workdir, set per host in "
                    "host_vars/, e.g. h0: /nfs/fleet/h0, h1: /nfs/fleet/h1)", decision={"action": "fail"}))
SHARED_VENV = {"path": "/nfs/rack1/venv", "id": "f" * 32, "error": None}
case("pip_install", "a-venv-another-host-shares-is-refused", args=PI,
     host={**HP, "facts": {**FACTS90, "targets": {"venv": SHARED_VENV}}},
     steps=[{"expect": {"type": "TargetClaim", "mutating": False}, "answer": [["venv", "/nfs/rack1/venv", ["h1", "h2"], "9.0a;12.0a"]]}],
     result={"status": "failed", "msg": "h1 and h2 share the venv /nfs/rack1/venv (one /nfs/rack1/venv/.fleetctl-id): one venv "
                                        "holds one wheel, so each host's install would replace the others' SM: give each host "
                                        "its own venv, or deploy once to one of them for all their GPUs (--hosts h1 -e "
                                        "archs='9.0a;12.0a')"})
UNREADABLE_ID = ("/nfs/rack1/venv/.fleetctl-id exists but user bob cannot read it (Permission denied): is /nfs/rack1/venv "
                 "shared with another user or host? fleetctl cannot tell which hosts share it, so nothing is built or installed "
                 "there: make the file readable (chmod 0644 /nfs/rack1/venv/.fleetctl-id), or give each host its own folder")
case("pip_install", "a-venv-whose-id-file-this-user-cannot-read-is-refused-before-any-step", args=PI,
     host={**HP, "facts": {**FACTS90, "targets": {"venv": {"path": "/nfs/rack1/venv", "id": None, "error": UNREADABLE_ID,
                                                           "unreadable": True}}}},
     steps=[], result={"status": "failed", "msg": f"the venv's id: {UNREADABLE_ID}"})
GPU01 = {**SHARED_VENV, "installed": {"host": "gpu01", "archs": "9.0a;10.0a", "wheel": "fp4_kernels-0.1.0-cp312-cp312-linux_x86_64.whl"}}
TAKES_SM_AWAY = {"status": "failed", "msg": "/venv holds gpu01's install for 9.0a;10.0a (fp4_kernels-0.1.0-cp312-cp312-linux_x86_64.whl): "
                                            "this wheel for 12.0a would take 9.0a;10.0a away from gpu01, which shares the venv; "
                                            "deploy once for all their GPUs (--hosts h1 -e archs='9.0a;10.0a;12.0a'), or give "
                                            "each host its own venv; nothing was installed", "preflight": True}
case("pip_install", "an-install-that-would-take-another-runs-host-sm-away-is-refused", args=PI,
     host={**HP, "facts": {**FACTS90, "targets": {"venv": GPU01}}},
     steps=[{"expect": {"type": "TargetClaim", "mutating": False}, "answer": []},
            {"expect": {"type": "Run"}, "answer": STATE(None, None, dists={"torch": "2.11.0+cu130"}, stamp={"inputs": {"archs": "12.0a"}})}],
     result=TAKES_SM_AWAY)
PENDING = f"{DEST}/<built wheel>"  # a dry run's wheel: the build that writes it has not run
case("pip_install", "the-shared-venv-refusal-does-not-wait-for-the-wheel-a-pending-build-stamp-says-its-archs",
     args={"wheel": PENDING},
     host={**HP, "facts": {**FACTS90, "targets": {"venv": GPU01}}, "files": {PENDING: None},
           "stamps": {PENDING: {"wheel": PENDING, "sha256": None, "archs": "12.0a", "inputs": {"archs": "12.0a"}}}},
     steps=[{"expect": {"type": "TargetClaim", "mutating": False}, "answer": []},
            {"expect": {"type": "Run"}, "answer": STATE(None, None, dists={"torch": "2.11.0+cu130"})}],
     result=TAKES_SM_AWAY)

# -- pip_install: the wheel fits the host (wheeltags) and is the one its build wrote
ARM_WHEEL = f"{DEST}/fp4_kernels-0.1.0-cp312-cp312-linux_aarch64.whl"
case("pip_install", "a-wheel-built-on-a-newer-glibc-is-refused-before-installing", args={"wheel": ARM_WHEEL},
     host={**HP, "facts": FACTS_ARM, "files": {ARM_WHEEL: SHA}},
     steps=[{"expect": {"type": "Run"}, "answer": STATE(None, None, dists={"torch": "2.11.0+cu130"},
                                                        stamp={"inputs": {"platform": "linux_aarch64", "libc": "glibc 2.41"}})}],
     result={"status": "failed", "msg": "h1: refusing fp4_kernels-0.1.0-cp312-cp312-linux_aarch64.whl: its platform tag "
                                        "linux_aarch64 was built against glibc 2.41, which does not fit the host's platform "
                                        "linux_aarch64 glibc 2.39"})
case("pip_install", "a-wheel-for-another-platform-is-refused-before-installing", args=PI, host={**HP, "facts": FACTS_ARM},
     steps=[{"expect": {"type": "Run"}, "answer": STATE(None, None, dists={"torch": "2.11.0+cu130"})}],
     result={"status": "failed", "msg": "h1: refusing fp4_kernels-0.1.0-cp312-cp312-linux_x86_64.whl: its platform tag "
                                        "linux_x86_64 does not fit the host's platform linux_aarch64 glibc 2.39; nothing was "
                                        "installed", "decision": {"action": "fail"}})
case("pip_install", "a-wheel-changed-in-place-since-its-build-fails-naming-both-sha256s-and-forgets-its-stamp",
     args={"wheel": WHEEL, "no_deps": True, "keep_previous": False}, host=HP,
     steps=[{"expect": {"type": "Run"}, "answer": STATE(None, None)}, CHECK,
            {"expect": {"type": "Run"}, "answer": {"rc": 1, "stderr": "zlib.error: Error -3 while decompressing data: invalid block type\n"}},
            {"expect": {"type": "Run", "argv": ["sha256sum", WHEEL], "mutating": False}, "answer": {"rc": 0, "stdout": f"{'b' * 64}  {WHEEL}\n"}},
            {"expect": {"type": "Run", "argv": ["rm", "-f", "--", f"{DEST}/.fleetctl-build.json"], "mutating": True}, "answer": {"rc": 0}}],
     result={"status": "failed", "msg": "changed since it was built: sha256 bbbbbbbbbbbb..., its build recorded aaaaaaaaaaaa... "
                                        "(damaged or copied over in place, size and mtime kept); nothing was installed; its "
                                        "build stamp was removed, so the next run rebuilds it"})
print("ok", len(WRITTEN), "cases, class key", K[:16])
