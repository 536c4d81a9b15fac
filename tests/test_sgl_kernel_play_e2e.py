"""The sgl-kernel and nightly playbooks over sshd: patch stage for real, build stage planned (--dry-run).

The build itself is the same ``build_wheel`` that compiles kernel_src in test_deploy_e2e.py; here
the sgl-kernel tree is a small fixture the test writes (no upstream code in the repository)."""

from __future__ import annotations

import json

import pytest

from tests.support.fake_gpu import H200, RTX_PRO_6000, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl, last_run, unwrap_modes, write_inventory
from tests.support.offline_ext import bare_repo
from tests.support.sgl_fixture import NEW_ROOT, OLD_ROOT, tree_digest, write_tree
from tests.support.tiny_ext import cmake4, link_into
from tests.test_deploy_e2e import make_host_venv
from tests.test_offline_deps_e2e import NO_NETWORK

pytestmark = pytest.mark.sshd


def able_to_build(h, tmp_path) -> dict:
    """What a host needs before sgl-kernel's build can start, as a user provides it: a CMake of
    at least the tree's 3.26 (CMake 4 first on the login PATH: the machine's is 3.25) and the
    fixture's FetchContent dependency (cutlass @ v3.9.2) from a fetch_mirror, the host being
    offline. Returns the host vars."""
    if not (h.bin_dir / "cmake").exists():
        link_into(h.bin_dir, cmake4())
    mirror = tmp_path / "mirror"
    if not (mirror / "NVIDIA" / "cutlass.git").exists():
        bare_repo(mirror, "NVIDIA/cutlass", {"README.md": "cutlass\n"}, tag="v3.9.2")
    return {"fetch_mirror": str(mirror)}


@pytest.mark.parametrize("layout", [OLD_ROOT, NEW_ROOT])
def test_sgl_kernel_play_patches_idempotently_and_plans_the_blackwell_build(sshd_farm, tmp_path, layout):
    h = sshd_farm.start("blackwell", env=NO_NETWORK)
    write_fake_nvidia_smi(h.bin_dir, [RTX_PRO_6000])
    kdir = write_tree(tmp_path / "sglang", layout=layout)
    entry = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work"),
             "venv": make_host_venv(tmp_path / "venv")}
    inv = write_inventory(tmp_path / "inv.yaml", {"gpu-nodes": {"bw": entry}})
    play = str(REPO / "playbooks" / "sgl-kernel.yaml")
    args = ("-i", str(inv), "deploy", "--hosts", "gpu-nodes", "--playbook", play, "-e", f"sgl_kernel_dir={kdir}")

    first = fleetctl(*args, "--tags", "patch", home=tmp_path)
    assert first.returncode == 0, first.stdout[-3000:]
    assert "Applied: cmake-policy-guards" in first.stdout
    assert "if(POLICY" in (kdir / "CMakeLists.txt").read_text()
    patched = tree_digest(kdir)
    again = fleetctl(*args, "--tags", "patch", home=tmp_path)
    assert again.returncode == 0
    assert "Already applied: cmake-policy-guards" in again.stdout and "Applied: " not in again.stdout.replace(
        "Already applied: ", "")
    assert tree_digest(kdir) == patched  # a second run changes no byte

    # the tree is already on the host and no fetch_mirror is set (new-user trial: "build", deps [],
    # then CMake's clone of cutlass failed): the plan reads the tree there, names what this offline
    # host cannot download and the var that fixes it, and that its cmake is too old
    plan = fleetctl(*args, "--tags", "build", "--plan", "--json", home=tmp_path)
    assert plan.returncode == 1, plan.stdout[-3000:]
    build = json.loads(plan.stdout)["bw"]["builds"][0]
    assert [(d["name"], d["repo"], d["host"]) for d in build["deps"]] == [
        ("repo-cutlass", "NVIDIA/cutlass", "downloaded by CMake (no fetch_mirror)")]
    assert "cmake 3.25.1 at /usr/bin/cmake is older than 3.26, which the tree requires" in json.dumps(build)
    link_into(h.bin_dir, cmake4())  # a newer cmake: the downloads are what stop the build now
    flat = " ".join(fleetctl(*args, "--tags", "build", "--plan", home=tmp_path, env={"COLUMNS": "400"}).stdout.split())
    assert ("cannot download repo-cutlass (NVIDIA/cutlass @ v3.9.2) from https://github.com/NVIDIA/cutlass: git ls-remote:"
            in flat and "set the host var fetch_mirror" in flat), flat

    write_inventory(tmp_path / "inv.yaml", {"gpu-nodes": {"bw": {**entry, **able_to_build(h, tmp_path)}}})
    plan = fleetctl(*args, "--tags", "build", "--dry-run", home=tmp_path)
    assert plan.returncode == 0, plan.stdout[-3000:]
    build_lines = [ln for ln in plan.stdout.splitlines() if "[Build sgl-kernel" in ln and '"argv"' in ln
                   and "--no-build-isolation" in ln]
    assert build_lines, plan.stdout[-3000:]
    planned = json.loads(build_lines[-1].split("] ", 1)[1])  # the build command itself
    argv = " ".join(planned["argv"])
    for define in ("SGL_KERNEL_ENABLE_FP4=ON", "SGL_KERNEL_ENABLE_FA3=OFF", "ENABLE_BELOW_SM90=OFF",
                   "CMAKE_CUDA_ARCHITECTURES=120a", "CMAKE_POLICY_VERSION_MINIMUM=3.5"):
        assert f"cmake.define.{define}" in argv, define
    assert "--no-build-isolation" in planned["argv"]
    env = planned["env"]
    assert env["TORCH_CUDA_ARCH_LIST"] == "12.0a" and env["CUDACXX"].endswith("/bin/nvcc")
    assert env["CMAKE_POLICY_VERSION_MINIMUM"] == "3.5"
    assert env["PATH"].split(":")[0].endswith("/bin") and env["VIRTUAL_ENV"]
    assert tree_digest(kdir) == patched  # --dry-run touched nothing


def test_nightly_play_plans_every_stage_in_order(sshd_farm, tmp_path):
    h = sshd_farm.start("nightly")
    write_fake_nvidia_smi(h.bin_dir, [RTX_PRO_6000])
    inv = write_inventory(tmp_path / "inv.yaml", {"gpu-nodes": {"n": {
        **h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work"),
        "venv": make_host_venv(tmp_path / "venv"), **able_to_build(h, tmp_path)}}})
    # the layout the nightly's sgl_kernel_dir names, in a git checkout (both checked, in a dry run too)
    write_tree(tmp_path / "sglang", layout=NEW_ROOT)
    (tmp_path / "sglang" / ".git").mkdir()
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "gpu-nodes", "--playbook", str(REPO / "playbooks" / "nightly.yaml"),
                   "--dry-run", "-e", f"sgl_repo={tmp_path / 'sglang'}", "-e", "wheel_folder=/srv/wheels",
                   "-e", "torch_spec=torch==2.12.0.dev20261128", "--tags", "nightly", home=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:]
    planned = [json.loads(ln.split("] ", 1)[1]) for ln in res.stdout.splitlines() if ln.startswith("  [")]
    argvs = [unwrap_modes(p["argv"]) for p in planned if "argv" in p]  # an install as pip gets it
    # staged (docs/staged.md): the next environment first, the torch upgrade in it, the switch last
    assert argvs[0][0] == "python3" and argvs[0][1].endswith("/venv_envs.py") and argvs[0][2] == "stage"
    # the dry run shows what the staged deploy runs: the staged venv's facts read again after the
    # stage (its interpreter), then the torch upgrade in the staged venv
    up = next(i for i, a in enumerate(argvs) if a[1:3] == ["-m", "pip"])
    assert up >= 1 and argvs[up][1:] == ["-m", "pip", "install", "--no-input", "--pre", "--upgrade", "--no-index",
                                         "--find-links", "/srv/wheels", "torch==2.12.0.dev20261128"]
    assert argvs[up][0].endswith("-versions/v2/bin/python3"), argvs[up][0]
    assert all(any("-versions/v2" in x for x in a) for a in argvs[1:up]), argvs[1:up]
    assert argvs.index(["git", "-C", str(tmp_path / "sglang"), "pull", "--ff-only"]) > up
    assert [a[2] for a in argvs if a[0] == "python3" and a[1].endswith("/venv_envs.py")] == ["stage", "switch"]


def _planned_builds(stdout: str) -> dict[str, dict]:
    """host -> the planned build command, from the dry run's "--- HOST: planned commands" blocks."""
    out, host = {}, None
    for ln in stdout.splitlines():
        if ln.startswith("--- ") and ln.endswith(": planned commands"):
            host = ln[4:-len(": planned commands")]
        elif host and ln.startswith("  [Build sgl-kernel") and '"argv"' in ln:
            out[host] = json.loads(ln.split("] ", 1)[1])
    return out


def test_dry_run_shows_each_hosts_recipe_sm90_and_sm120(sshd_farm, tmp_path):
    """One dry run over an H200 (SM90) and an RTX PRO 6000 (SM120) host: each gets its own recipe
    (arch list, FA3 on/off, jobs x threads from its memory) in the planned build, the recipe task's
    message and the run record; verify expects the FA3 fallback only where FA3 is off."""
    hosts = {}
    for name, gpu in (("h200", H200), ("rtx6000", RTX_PRO_6000)):
        h = sshd_farm.start(name)
        write_fake_nvidia_smi(h.bin_dir, [gpu])
        hosts[name] = {**h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "work" / name),
                       "venv": make_host_venv(tmp_path / f"venv-{name}"), **able_to_build(h, tmp_path),
                       "verify_device": "cpu"}  # its torch is the controller's CPU build (on the GPU: refused while planning)
    # the recipe's knobs are host vars: this host opts out of the SM filter and adds a define in its inventory
    hosts["rtx6000"].update(sgl_kernel_sms="all", sgl_kernel_cmake_defines={"FETCHCONTENT_SOURCE_DIR_REPO-TRITON": "/src/t"})
    kdir = write_tree(tmp_path / "sglang", layout=NEW_ROOT)
    inv = write_inventory(tmp_path / "inv.yaml", {"gpu-nodes": hosts})
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "gpu-nodes", "--playbook", str(REPO / "playbooks" / "sgl-kernel.yaml"),
                   "-e", f"sgl_kernel_dir={kdir}", "--dry-run", "--json", home=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    doc = json.loads(res.stdout)
    want = {"h200": ("9.0a", "90a", "ON", "no"), "rtx6000": ("12.0a", "120a", "OFF", "yes")}
    for host, (arch, cuda_arch, fa3, fallback) in want.items():
        tasks = {t["name"]: t for t in doc["hosts"][host]["tasks"]}
        recipe = tasks["sgl-kernel build recipe"]["msg"]
        assert f"TORCH_CUDA_ARCH_LIST={arch}" in recipe and f"SGL_KERNEL_ENABLE_FA3={fa3}" in recipe
        assert "SGL_KERNEL_ENABLE_FP4=ON" in recipe and "ENABLE_BELOW_SM90=OFF" in recipe
        build = [p for p in tasks[f"Build sgl-kernel for {arch}"]["planned"] if "--no-build-isolation" in p.get("argv", [])][0]
        argv = " ".join(build["argv"])
        for define in ("SGL_KERNEL_ENABLE_FP4=ON", f"SGL_KERNEL_ENABLE_FA3={fa3}", "ENABLE_BELOW_SM90=OFF",
                       f"CMAKE_CUDA_ARCHITECTURES={cuda_arch}", "CMAKE_POLICY_VERSION_MINIMUM=3.5"):
            assert f"cmake.define.{define}" in argv, (host, define)
        # the build runs under build_room's script (after the three paths it measures when the build fails)
        inner = build["argv"][build["argv"].index("fleetctl-build") + 4:]
        assert inner[0] == hosts[host]["venv"] + "/bin/python3" and "--no-build-isolation" in inner
        threads = int(argv.split("cmake.define.SGL_KERNEL_COMPILE_THREADS=")[1].split()[0])
        env = build["env"]
        assert env["TORCH_CUDA_ARCH_LIST"] == arch and env["CMAKE_POLICY_VERSION_MINIMUM"] == "3.5"
        assert env["MAX_JOBS"] == env["CMAKE_BUILD_PARALLEL_LEVEL"]
        assert f"MAX_JOBS={env['MAX_JOBS']}" in recipe and f"SGL_KERNEL_COMPILE_THREADS={threads}" in recipe
        verify = [p for p in tasks["Verify sgl-kernel (torch first, NVFP4 symbols, FA3 fallback where FA3 is off)"]["planned"]
                  if "--fa3-fallback" in p.get("argv", [])][0]
        assert verify["argv"][verify["argv"].index("--fa3-fallback") + 1] == fallback
        if host == "h200":
            assert "FLEETCTL_SGL_ARCHS=90a" in recipe and "cmake.define.FLEETCTL_SGL_ARCHS=90a" in argv
            assert "REPO-TRITON" not in argv
        else:  # its own sgl_kernel_sms: all and sgl_kernel_cmake_defines, not the play's
            assert "FLEETCTL_SGL_ARCHS=(all)" in recipe and "FLEETCTL_SGL_ARCHS" not in argv
            assert "cmake.define.FETCHCONTENT_SOURCE_DIR_REPO-TRITON=/src/t" in argv
        assert verify["argv"][verify["argv"].index("--symbols") + 1] == \
            "cutlass_scaled_fp4_mm,scaled_fp4_quant,scaled_fp4_grouped_quant"


def test_a_bad_recipe_knob_names_the_play_var_and_its_value(sshd_farm, tmp_path):
    """A bad -e for one of the recipe's knobs fails the host while planning with the play var and
    the knob named (not the first task's name and a Python exception class)."""
    h = sshd_farm.start("knob")
    write_fake_nvidia_smi(h.bin_dir, [H200])
    inv = write_inventory(tmp_path / "inv.yaml", {"gpu-nodes": {"knob": {
        **h.inventory_vars(sshd_farm.known_hosts), "workdir": str(tmp_path / "w"), "venv": make_host_venv(tmp_path / "v")}}})
    kdir = write_tree(tmp_path / "sglang", layout=NEW_ROOT)
    play = REPO / "playbooks" / "sgl-kernel.yaml"
    for extra, want in ((["-e", "sgl_kernel_sms=90a"],
                         f"{play}: vars.sgl_recipe: sms (the sgl_kernel_sms var) must be auto, host or all, got '90a'"),
                        (["-e", "sgl_kernel_max_jobs=0"], "vars.sgl_recipe: max_jobs (the sgl_kernel_max_jobs var) must be "
                                                         "auto or a whole number >= 1, got '0'")):
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "gpu-nodes", "--playbook", str(play), "-e",
                       f"sgl_kernel_dir={kdir}", *extra, "--plan", home=tmp_path, env={"COLUMNS": "400"})
        flat = " ".join(res.stdout.split())
        assert res.returncode == 1 and want in flat and "ValueError" not in flat, flat
