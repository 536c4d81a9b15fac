"""Writes the planner data cases in this folder (run it after changing a planner on purpose, then
review the diff): ``python tests/data/planners/make_cases.py``."""
import json
import sys
from pathlib import Path

D = Path(__file__).resolve().parent
sys.path.insert(0, str(D.parents[2]))
CUDA = {"home": "/usr/local/cuda", "nvcc": "/usr/local/cuda/bin/nvcc", "version": "13.0", "source": "/usr/local/cuda",
        "archs": ["compute_80", "compute_90", "compute_100", "compute_120"], "cuobjdump": "/usr/local/cuda/bin/cuobjdump"}
PY = {"executable": "/venv/bin/python3", "exists": True, "prefix": "/venv", "tag": "cp312", "version": "3.12.3",
      "torch": "2.11.0+cu130", "torch_cuda": "13.0"}
BUILD90 = {"torch_cuda_arch_list": "9.0a", "cuda_architectures": "90a", "max_jobs": 8, "mixed_sm": False}
FACTS90 = {"gpus": [{"index": 0, "name": "NVIDIA H200", "compute_cap": "9.0", "memory_mib": 143771}],
           "cuda": CUDA, "python": PY, "build": BUILD90, "cmake": {"version": "3.28.3", "path": "/usr/bin/cmake"},
           "disk_free_mib": 200000}
PYINFO = {"rc": 0, "stdout": json.dumps({"executable": "/venv/bin/python3", "prefix": "/venv", "missing": []}) + "\n"}
TREE = "t" * 64
BW = {"src": "/w/src/k", "out_dir": "/w/wheels"}
def key_for(facts, tree=TREE, archs="9.0a", defines=None):
    from fleetctl.build import cmake_defines
    from fleetctl.tasks.build_keys import build_inputs, build_key
    plan = dict(facts["build"])
    d = cmake_defines({**facts, "build": plan}, defines or {})
    return build_key(build_inputs(tree, plan, d, facts, "h1"))
def inputs_for(facts, tree=TREE):
    from fleetctl.build import cmake_defines
    from fleetctl.tasks.build_keys import build_inputs
    plan = dict(facts["build"])
    return build_inputs(tree, plan, cmake_defines({**facts, "build": plan}, {}), facts, "h1")
K = key_for(FACTS90)
DEST = f"/w/wheels/{K[:16]}"
WHEEL = f"{DEST}/fp4_kernels-0.1.0-cp312-cp312-linux_x86_64.whl"
SHA = "a" * 64
STAMP = {"wheel": WHEEL, "sha256": SHA, "key": K, "inputs": inputs_for(FACTS90)}

def case(action, name, **c):
    (D / action).mkdir(parents=True, exist_ok=True)
    (D / action / f"{name}.json").write_text(json.dumps({"action": action, **c}, indent=2) + "\n")

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
# copy
MAN = [["/p/k/a.py", "a.py", "1" * 64, False], ["/p/k/run.sh", "run.sh", "2" * 64, True]]
case("copy", "unchanged-files-upload-nothing", args={"src": "k", "dest": "/w/src/k"},
     steps=[{"expect": {"type": "Local"}, "answer": MAN},
            {"expect": {"type": "Run", "argv": ["sha256sum", "--", "/w/src/k/a.py", "/w/src/k/run.sh"], "mutating": False},
             "answer": {"rc": 0, "stdout": "1" * 64 + "  /w/src/k/a.py\n" + "2" * 64 + "  /w/src/k/run.sh\n"}}],
     result={"status": "ok", "decision": {"action": "unchanged"}})
case("copy", "uploads-only-what-differs", args={"src": "k", "dest": "/w/src/k"},
     steps=[{"expect": {"type": "Local"}, "answer": MAN},
            {"expect": {"type": "Run", "mutating": False},
             "answer": {"rc": 1, "stdout": "1" * 64 + "  /w/src/k/a.py\n", "stderr": "sha256sum: /w/src/k/run.sh: No such file or directory\n"}},
            {"expect": {"type": "PutFiles"}, "answer": None}],
     result={"status": "changed", "msg": "uploaded 1 of 2 files", "decision": {"action": "upload", "files": 1}})
case("copy", "missing-local-source-fails", args={"src": "nope", "dest": "/w/x"},
     steps=[{"expect": {"type": "Local"}, "answer": {"error": "local source /p/nope does not exist"}}],
     result={"status": "failed", "msg": "does not exist"})
# build_wheel
H90 = {"facts": FACTS90, "trees": {"/w/src/k": TREE}}
case("build_wheel", "preflight-wrong-cuda-home-fails-before-any-step", args=BW,
     host={**H90, "cuda_home": "/opt/cuda-12.9"}, steps=[],
     result={"status": "failed", "msg": "cuda_home /opt/cuda-12.9 has no bin/nvcc", "decision": {"action": "fail"}})
case("build_wheel", "preflight-no-venv", args=BW, host={**H90, "venv": None, "python": "python3"}, steps=[],
     result={"status": "failed", "msg": "no venv for this host"})
case("build_wheel", "preflight-nvcc-lacks-the-arch", args={**BW, "archs": "11.0a"}, host=H90, steps=[],
     result={"status": "failed", "msg": "does not support compute_110a"})
case("build_wheel", "preflight-missing-build-requirements", args=BW, host=H90,
     steps=[{"expect": {"type": "Run", "mutating": False},
             "answer": {"rc": 0, "stdout": json.dumps({"executable": "/venv/bin/python3", "prefix": "/venv", "missing": ["nanobind"]})}}],
     result={"status": "failed", "msg": "build requirements missing in /venv: nanobind"})
STAMPS_OK = {"rc": 0, "stdout": json.dumps(STAMP) + "\nINSTALLED " + json.dumps({"sha256": SHA}) + "\n"}
case("build_wheel", "same-inputs-reuse-the-wheel", args=BW, host=H90,
     steps=[{"expect": {"type": "Run", "mutating": False}, "answer": PYINFO},
            {"expect": {"type": "Run", "mutating": False}, "answer": STAMPS_OK},
            {"expect": {"type": "ClassRole", "key": K, "holds": True, "once": True}, "answer": "reuse"}],
     result={"status": "ok", "decision": {"action": "reuse", "installed": True, "changed": []}})
case("build_wheel", "another-member-builds-this-host-receives", args=BW, host=H90,
     steps=[{"expect": {"type": "Run"}, "answer": PYINFO},
            {"expect": {"type": "Run"}, "answer": {"rc": 0, "stdout": ""}},
            {"expect": {"type": "ClassRole", "holds": False}, "answer": "push"},
            {"expect": {"type": "Fetch", "key": K, "dest": DEST},
             "answer": {"name": "w.whl", "sha256": SHA, "builder": "h0", "remote": f"{DEST}/w.whl", "data": {"archs": "9.0a"}}},
            {"expect": {"type": "Put", "remote": f"{DEST}/.fleetctl-build.json"}, "answer": None}],
     result={"status": "changed", "msg": "built once for this arch class on h0",
             "decision": {"action": "push", "changed": ["nothing installed"]}})
BUILD_STEPS = [{"expect": {"type": "Run"}, "answer": PYINFO},
               {"expect": {"type": "Run"}, "answer": {"rc": 0, "stdout": ""}},
               {"expect": {"type": "ClassRole"}, "answer": "build"},
               {"expect": {"type": "Run", "argv": ["rm", "-rf", DEST]}, "answer": {"rc": 0}},
               {"expect": {"type": "Run", "argv": ["mkdir", "-p", "-m", "0700", DEST]}, "answer": {"rc": 0}},
               {"expect": {"type": "Emit", "name": "build.started"}, "answer": None}]
BUILD_ARGV = ["/venv/bin/python3", "-m", "pip", "wheel", "--no-deps", "-v", "--wheel-dir", DEST, "--no-build-isolation",
              "--config-settings=cmake.define.CMAKE_POLICY_VERSION_MINIMUM=3.5",
              "--config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES=90a",
              "--config-settings=cmake.define.CMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc",
              "--config-settings=cmake.define.CUDAToolkit_ROOT=/usr/local/cuda", "/w/src/k"]
ENV = {"VIRTUAL_ENV": "/venv", "CUDA_HOME": "/usr/local/cuda", "CUDA_PATH": "/usr/local/cuda",
       "CUDACXX": "/usr/local/cuda/bin/nvcc",
       "PATH": "/venv/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
       "TORCH_CUDA_ARCH_LIST": "9.0a", "CMAKE_CUDA_ARCHITECTURES": "90a", "CUDAARCHS": "90a",
       "MAX_JOBS": "8", "CMAKE_BUILD_PARALLEL_LEVEL": "8", "NVCC_THREADS": "1"}
AFTER = [{"expect": {"type": "Run", "mutating": False}, "answer": {"rc": 0, "stdout": f"{SHA}  {WHEEL}\n"}},
         {"expect": {"type": "Put", "remote": "/w/runs/r1/scripts/wheel_sass.py"}, "answer": None}]
case("build_wheel", "builds-for-exactly-the-host-sm", args=BW, host=H90,
     steps=BUILD_STEPS + [{"expect": {"type": "Run", "argv": BUILD_ARGV, "env": ENV, "cwd": "/w/src/k"}, "answer": {"rc": 0}}] + AFTER + [
         {"expect": {"type": "Run", "argv": ["/venv/bin/python3", "/w/runs/r1/scripts/wheel_sass.py", WHEEL, "/usr/local/cuda/bin/cuobjdump"]},
          "answer": {"rc": 0, "stdout": json.dumps({"archs": ["sm_90a"], "error": None})}},
         {"expect": {"type": "Put", "remote": f"{DEST}/.fleetctl-build.json"}, "answer": None},
         {"expect": {"type": "Publish", "key": K, "wheel": WHEEL}, "answer": None}],
     result={"status": "changed", "msg": "built fp4_kernels-0.1.0-cp312-cp312-linux_x86_64.whl for 9.0a",
             "decision": {"action": "build"}})
case("build_wheel", "sass-missing-fails-the-class", args=BW, host=H90,
     steps=BUILD_STEPS + [{"expect": {"type": "Run", "argv": BUILD_ARGV}, "answer": {"rc": 0}}] + AFTER + [
         {"expect": {"type": "Run"}, "answer": {"rc": 0, "stdout": json.dumps({"archs": ["sm_80"], "error": None})}},
         {"expect": {"type": "Fail", "key": K}, "answer": None}],
     result={"status": "failed", "msg": "lacks sm_90a (holds sm_80)"})
ENV4 = {**ENV, "MAX_JOBS": "4", "CMAKE_BUILD_PARALLEL_LEVEL": "4"}
case("build_wheel", "compiler-killed-for-memory-retries-with-half-the-jobs", args=BW, host=H90,
     steps=BUILD_STEPS + [
         {"expect": {"type": "Run", "env": ENV}, "answer": {"rc": 1, "stderr": "nvcc error   : 'cicc' died due to signal 9 (Kill signal)\nKilled\n"}},
         {"expect": {"type": "Emit", "name": "build.oom_retry"}, "answer": None},
         {"expect": {"type": "Emit", "name": "build.started"}, "answer": None},
         {"expect": {"type": "Run", "env": ENV4}, "answer": {"rc": 137, "stderr": "Killed\n"}},
         {"expect": {"type": "Fail"}, "answer": None}],
     result={"status": "failed", "msg": "compiler killed (likely out of memory) with MAX_JOBS=4"})
case("build_wheel", "compile-error-is-the-summary", args=BW, host=H90,
     steps=BUILD_STEPS + [
         {"expect": {"type": "Run", "argv": BUILD_ARGV},
          "answer": {"rc": 1, "stdout": "[1/4] Building CUDA object\n/w/src/k/csrc/cuda_quant.cu(13): error: expected an expression\n1 error detected\nninja: build stopped\n",
                     "stderr": "ERROR: Failed to build installable wheels for some pyproject.toml based projects (fp4_kernels)\n"}},
         {"expect": {"type": "Fail"}, "answer": None}],
     result={"status": "failed", "msg": "cuda_quant.cu(13): error: expected an expression"})
# pip_install
STATE = lambda rec, dist, torch="2.11.0+cu130": {"rc": 0, "stdout": json.dumps({"record": rec, "dist": dist, "torch": torch, "cuda": "13.0"})}
REC = {"sha256": SHA, "kept": "/w/installed/w.whl", "record_sha256": "r" * 64}
PI = {"wheel": WHEEL}
HP = {"facts": FACTS90, "files": {WHEEL: SHA}}
case("pip_install", "same-wheel-installed-is-skipped", args=PI, host=HP,
     steps=[{"expect": {"type": "Run", "mutating": False}, "answer": STATE(REC, {"version": "0.1.0", "record_sha256": "r" * 64})}],
     result={"status": "ok", "decision": {"action": "skip"}})
INSTALL_ARGV = ["/venv/bin/python3", "-m", "pip", "install", "--no-input", "--force-reinstall", "--no-deps", WHEEL]
case("pip_install", "uninstalled-by-hand-is-installed-again", args=PI, host=HP,
     steps=[{"expect": {"type": "Run", "mutating": False}, "answer": STATE(REC, None)},
            {"expect": {"type": "Run", "argv": INSTALL_ARGV}, "answer": {"rc": 0}},
            {"expect": {"type": "Run", "mutating": False}, "answer": STATE(REC, {"record_sha256": "s" * 64})},
            {"expect": {"type": "Run", "argv": ["mkdir", "-p", "-m", "0700", "/w/installed"]}, "answer": {"rc": 0}},
            {"expect": {"type": "Run"}, "answer": {"rc": 0}},
            {"expect": {"type": "Put", "remote": "/w/installed/fp4_kernels.json"}, "answer": None}],
     result={"status": "changed", "decision": {"action": "install", "why": "nothing installed"}})
case("pip_install", "an-install-that-moves-torch-fails", args={**PI, "keep_previous": False}, host=HP,
     steps=[{"expect": {"type": "Run"}, "answer": STATE(None, None)},
            {"expect": {"type": "Run", "argv": INSTALL_ARGV}, "answer": {"rc": 0}},
            {"expect": {"type": "Run"}, "answer": STATE(None, {"record_sha256": "x"}, torch="2.12.0+cu130")}],
     result={"status": "failed", "msg": "the install changed torch: 2.11.0+cu130 (cu 13.0) -> 2.12.0+cu130"})
case("pip_install", "unknown-wheel-is-hashed-on-the-host", args=PI, host={"facts": FACTS90},
     steps=[{"expect": {"type": "Run", "argv": ["sha256sum", WHEEL]}, "answer": {"rc": 1, "stderr": f"sha256sum: {WHEEL}: No such file or directory"}}],
     result={"status": "failed", "msg": "No such file or directory"})
# verify
case("verify", "all-checks-pass", args={"package": "fp4_kernels", "symbols": ["a"]}, host={"facts": FACTS90},
     steps=[{"expect": {"type": "Put", "remote": "/w/runs/r1/verify/verify_package.py"}, "answer": None},
            {"expect": {"type": "Run", "cwd": "/w/runs/r1/verify", "mutating": False,
                        "argv": ["/venv/bin/python3", "/w/runs/r1/verify/verify_package.py", "--package", "fp4_kernels",
                                 "--venv", "/venv", "--symbols", "a", "--sm", "9.0", "--smoke"]},
             "answer": {"rc": 0, "stdout": "PASS torch: ok\n" + json.dumps({"ok": True, "checks": [{"name": "torch", "ok": True, "detail": "ok"}], "selfcheck": {"device": "cuda"}})}}],
     result={"status": "ok", "msg": "smoke on cuda"})
case("verify", "a-failed-check-is-named", args={"package": "sgl_kernel"}, host={"facts": FACTS90},
     steps=[{"expect": {"type": "Put"}, "answer": None},
            {"expect": {"type": "Run"}, "answer": {"rc": 1, "stdout": json.dumps({"ok": False, "checks": [{"name": "import", "ok": False, "detail": "libtorch.so: cannot open"}]})}}],
     result={"status": "failed", "msg": "import: libtorch.so: cannot open"})
print("ok", K[:16])
