"""fleetctl.build.archs: facts -> arch list, job count, build environment, CMake defines. Pure data tests."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetctl.build.archs import (
    DEFAULT_PATH,
    arch_for_compute_cap,
    build_plan,
    cuda_arch,
    derive_max_jobs,
    parse_arch_list,
    unsupported_archs,
)
from fleetctl.build.arch_notes import told_notes
from fleetctl.build.env import build_environment, cmake_defines, config_settings_args
from fleetctl.errors import FleetError

SCRIPT = Path(__file__).resolve().parent.parent / "playbooks" / "scripts" / "facts.py"
_spec = importlib.util.spec_from_file_location("fleetctl_facts_script_bp", SCRIPT)
fs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fs)

# nvcc --list-gpu-arch, recorded
NVCC_13_0_ARCHS = ["compute_75", "compute_80", "compute_86", "compute_87", "compute_88", "compute_89",
                   "compute_90", "compute_100", "compute_110", "compute_103", "compute_120", "compute_121"]
NVCC_12_8_ARCHS = ["compute_50", "compute_52", "compute_53", "compute_60", "compute_61", "compute_62",
                   "compute_70", "compute_72", "compute_75", "compute_80", "compute_86", "compute_87",
                   "compute_89", "compute_90", "compute_100", "compute_101", "compute_120"]
NVCC_12_4_ARCHS = ["compute_50", "compute_52", "compute_53", "compute_60", "compute_61", "compute_62",
                   "compute_70", "compute_72", "compute_75", "compute_80", "compute_86", "compute_87",
                   "compute_89", "compute_90"]

# nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version --format=csv,noheader,nounits
SMI = {
    "h200": "0, NVIDIA H200, 9.0, 143771, 580.82.07\n",
    "b200": "".join(f"{i}, NVIDIA B200, 10.0, 183359, 580.82.07\n" for i in range(8)),
    "rtx-pro-6000": "0, NVIDIA RTX PRO 6000 Blackwell Workstation Edition, 12.0, 97887, 580.95.05\n",
    "mixed": ("0, NVIDIA H200, 9.0, 143771, 580.82.07\n"
              "1, NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 97887, 580.82.07\n"
              "2, NVIDIA H200, 9.0, 143771, 580.82.07\n"),
    "na": "0, NVIDIA Graphics Device, [N/A], [N/A], 580.82.07\n",
    "l40s": "0, NVIDIA L40S, 8.9, 46068, 550.54.15\n",
    "none": "",
}


def facts_from(smi: str, *, cpu_count=16, mem_total_mib=128 * 1024, mem_available_mib=120 * 1024,
               nvcc_archs=NVCC_13_0_ARCHS, nvcc_version="13.0", **extra):
    gpus, driver = fs.parse_nvidia_smi_csv(smi)
    facts = {
        "gpus": gpus, "driver_version": driver, "gpu_source": "nvidia-smi", "gpu_error": None,
        "cuda": {"home": "/usr/local/cuda", "nvcc": "/usr/local/cuda/bin/nvcc", "version": nvcc_version,
                 "archs": nvcc_archs},
        "cpu_count": cpu_count, "mem_total_mib": mem_total_mib, "mem_available_mib": mem_available_mib,
        "uv": {"path": "/home/u/.local/bin/uv"},
    }
    facts.update(extra)
    return facts


@pytest.mark.parametrize("cap, arch, carch", [
    ("9.0", "9.0a", "90a"), ("10.0", "10.0a", "100a"), ("10.3", "10.3a", "103a"), ("11.0", "11.0a", "110a"),
    ("12.0", "12.0a", "120a"), ("12.1", "12.1a", "121a"), ("8.9", "8.9", "89"), ("8.0", "8.0", "80"),
    ("7.5", "7.5", "75"),
])
def test_arch_for_compute_cap(cap, arch, carch):
    assert arch_for_compute_cap(cap) == arch
    assert cuda_arch(arch) == carch


@pytest.mark.parametrize("bad", ["9", "sm_90", "9.0a", "", "[N/A]", "nine.zero"])
def test_arch_for_compute_cap_rejects(bad):
    with pytest.raises(ValueError, match="not a compute capability"):
        arch_for_compute_cap(bad)


@pytest.mark.parametrize("bad", ["90a", "sm_90a", "9.0b", ""])
def test_cuda_arch_rejects(bad):
    with pytest.raises(ValueError, match="not a torch arch"):
        cuda_arch(bad)


def test_an_arch_in_nvcc_spelling_gets_the_torch_spelling_as_a_hint():
    for nvcc, torch_form in (("sm_90a", "9.0a"), ("compute_120a", "12.0a"), ("100f", "10.0f"), ("sm_89", "8.9")):
        with pytest.raises(ValueError, match=re.escape(f"did you mean '{torch_form}'?")):
            cuda_arch(nvcc)
    with pytest.raises(ValueError) as info:
        cuda_arch("9.0b")
    assert "did you mean" not in str(info.value)


def test_cuda_arch_family_suffix():
    assert cuda_arch("10.0f") == "100f"


def test_parse_arch_list():
    assert parse_arch_list("12.0a;9.0a") == ["9.0a", "12.0a"]
    assert parse_arch_list("12.0a, 9.0a 12.0a;10.0a") == ["9.0a", "10.0a", "12.0a"]
    assert parse_arch_list(["8.9", "8.0", "10.0a"]) == ["8.0", "8.9", "10.0a"]
    assert parse_arch_list("") == []
    with pytest.raises(ValueError):
        parse_arch_list("9.0a;sm_120")


@pytest.mark.parametrize("name, arch_list, cuda_archs, caps, mixed", [
    ("h200", "9.0a", "90a", ["9.0"], False),
    ("b200", "10.0a", "100a", ["10.0"], False),
    ("rtx-pro-6000", "12.0a", "120a", ["12.0"], False),
    ("mixed", "9.0a;12.0a", "90a;120a", ["9.0", "12.0"], True),
    ("l40s", "8.9", "89", ["8.9"], False),
])
def test_build_plan_from_recorded_gpus(name, arch_list, cuda_archs, caps, mixed):
    plan = build_plan(facts_from(SMI[name]))
    assert plan["torch_cuda_arch_list"] == arch_list
    assert plan["cuda_architectures"] == cuda_archs
    assert plan["compute_caps"] == caps
    assert plan["mixed_sm"] is mixed
    assert plan["source"] == "gpus"
    assert plan["unsupported"] == []
    assert plan["archs_checked"] is True


def test_mixed_host_keeps_every_gpu_and_says_so():
    plan = build_plan(facts_from(SMI["mixed"]))
    assert plan["targets"] == [
        {"compute_cap": "9.0", "arch": "9.0a", "cuda_arch": "90a", "sass": "sm_90a", "gpus": [0, 2],
         "names": ["NVIDIA H200"]},
        {"compute_cap": "12.0", "arch": "12.0a", "cuda_arch": "120a", "sass": "sm_120a", "gpus": [1],
         "names": ["NVIDIA RTX PRO 6000 Blackwell Server Edition"]},
    ]
    assert plan["sass"] == ["sm_90a", "sm_120a"]
    assert "GPUs of different SMs (9.0 on GPU 0,2, 12.0 on GPU 1): building for all of 9.0a;12.0a" in plan["notes"]


def test_no_gpu_builds_fallback_archs():
    plan = build_plan(facts_from(SMI["none"]))
    assert plan["source"] == "fallback"
    assert plan["torch_cuda_arch_list"] == "9.0a;12.0a"
    assert plan["cuda_architectures"] == "90a;120a"
    assert plan["mixed_sm"] is False
    assert plan["compute_caps"] == [] and plan["targets"] == []
    assert plan["notes"][0] == "no GPU found: building for fallback_archs 9.0a;12.0a"


def test_no_gpu_with_probe_error_and_custom_fallback():
    facts = facts_from(SMI["none"], gpu_error="nvidia-smi: not found on PATH; nvml: libnvidia-ml.so.1: cannot open")
    plan = build_plan(facts, fallback_archs="12.0a,10.0a")
    assert plan["torch_cuda_arch_list"] == "10.0a;12.0a"
    assert plan["notes"][0] == ("no GPU found (nvidia-smi: not found on PATH; nvml: libnvidia-ml.so.1: cannot open): "
                                "building for fallback_archs 10.0a;12.0a")


def test_e_archs_replaces_the_note_of_the_archs_facts_chose():
    """Fresh operator's trial: ``-e archs=9.0a`` on a host with no GPU noted "building for
    fallback_archs 9.0a;12.0a", then built only sm_90a: the note says what is built and why."""
    plan = build_plan(facts_from(SMI["none"]))
    assert told_notes(plan, None) == plan["notes"]
    assert told_notes(plan, "9.0a")[0] == "no GPU found: building for 9.0a (-e archs=9.0a), not fallback_archs 9.0a;12.0a"
    mixed = build_plan(facts_from(SMI["mixed"]))
    said = [n for n in told_notes(mixed, "12.0a") if n.startswith("GPUs of different SMs")]
    assert said == ["GPUs of different SMs (9.0 on GPU 0,2, 12.0 on GPU 1): building for 12.0a (-e archs=12.0a), "
                    "not all of 9.0a;12.0a"], said


def test_a_note_of_a_phase_the_play_lacks_is_not_told():
    """A venv note that only verify refuses for (a CPU-only torch) is told by a play that verifies,
    not by one that builds and installs only; every note without ``phases`` (``fleetctl facts``)."""
    plan = {**build_plan(facts_from(SMI["none"])), "phase_notes": {"verify": ["warning: torch is CPU-only"],
                                                                   "install": ["warning: venv full"]}}
    plan["notes"] = [*plan["notes"], "warning: venv full", "warning: torch is CPU-only"]
    assert told_notes(plan, None) == plan["notes"]
    assert told_notes(plan, None, {"build", "install", "verify"}) == plan["notes"]
    assert told_notes(plan, None, {"build", "install"}) == plan["notes"][:-1]
    assert told_notes(plan, None, {"build"}) == plan["notes"][:-2]


def test_unknown_compute_cap_is_not_a_target():
    plan = build_plan(facts_from(SMI["na"]))
    assert plan["source"] == "fallback"
    assert plan["notes"][0] == "GPU 0 (NVIDIA Graphics Device): compute capability unknown (None); not a target"
    assert plan["notes"][1].startswith("no GPU reported a compute capability: building for fallback_archs 9.0a;12.0a")


def test_bad_fallback_archs():
    with pytest.raises(ValueError, match="not a torch arch"):
        build_plan(facts_from(SMI["none"]), fallback_archs="sm_90")
    with pytest.raises(ValueError, match="fallback_archs is empty"):
        build_plan(facts_from(SMI["none"]), fallback_archs="")


def test_missing_keys_are_tolerated():
    plan = build_plan({})
    assert plan["source"] == "fallback"
    assert plan["max_jobs"] == 1
    assert plan["archs_checked"] is False
    assert "nvcc did not list its archs (missing or failed): target archs not checked" in plan["notes"]


# --- unsupported archs -------------------------------------------------------------------------


def test_old_nvcc_lacks_blackwell():
    plan = build_plan(facts_from(SMI["mixed"], nvcc_archs=NVCC_12_4_ARCHS, nvcc_version="12.4"))
    assert plan["unsupported"] == ["compute_120a"]
    assert "nvcc 12.4 at /usr/local/cuda/bin/nvcc lacks compute_120a" in plan["notes"]


def test_nvcc_12_8_knows_120a_but_not_121a():
    assert unsupported_archs(["9.0a", "10.0a", "12.0a", "12.1a", "10.3a"], NVCC_12_8_ARCHS, "12.8") == [
        "compute_121a", "compute_103a"]


def test_nvcc_13_lists_base_archs_only_and_knows_every_a_variant():
    assert unsupported_archs(["9.0a", "10.0a", "10.3a", "11.0a", "12.0a", "12.1a", "8.9"], NVCC_13_0_ARCHS,
                             "13.0") == []
    # 10.1 was renamed 11.0 in CUDA 13; 8.0a does not exist
    assert unsupported_archs(["10.1a", "7.0"], NVCC_13_0_ARCHS, "13.0") == ["compute_101a", "compute_70"]


def test_a_variant_needs_new_enough_nvcc():
    # CUDA 11.8 lists compute_90 but has no 90a
    assert unsupported_archs(["9.0a", "9.0"], ["compute_80", "compute_90"], "11.8") == ["compute_90a"]
    assert unsupported_archs(["9.0a"], ["compute_90a"], "11.8") == []  # listed verbatim wins
    assert unsupported_archs(["9.0a"], ["compute_90"], None) == []  # release unknown: trust the list
    assert unsupported_archs(["9.0a"], None, "13.0") == []


# --- max_jobs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("facts, jobs", [
    ({"cpu_count": 128, "mem_available_mib": 64 * 1024}, 10),           # memory-bound, 5 % kept free
    ({"cpu_count": 2, "mem_available_mib": 23671}, 2),                   # CPU-bound
    ({"cpu_count": 64, "mem_available_mib": 4000}, 1),                   # at least 1
    ({"cpu_count": 64, "mem_total_mib": 2 * 1024 * 1024}, 64),           # total when available unknown
    ({"cpu_count": 64, "cpu_quota": 3.5, "mem_available_mib": 10 ** 6}, 4),   # cgroup CPU quota, rounded up
    ({"cpu_count": 64, "mem_available_mib": 10 ** 6, "mem_limit_mib": 16384}, 2),  # cgroup memory limit
    ({"cpu_count": 64, "mem_available_mib": 10 ** 6, "mem_limit_mib": 16384,       # what the cgroup's
      "cgroup": {"version": 1, "memory_used_mib": 8192}}, 1),                     # processes already use
    ({"cpu_count": 64, "mem_available_mib": 7000}, 1),                   # 1024 MiB kept free at least
    ({"mem_available_mib": 30000}, 4),                                   # CPUs unknown
    ({"cpu_count": 8}, 8),                                               # memory unknown
    ({}, 1),
])
def test_max_jobs(facts, jobs):
    assert derive_max_jobs(facts)[0] == jobs
    assert build_plan(facts)["max_jobs"] == jobs


def test_max_jobs_reason_and_override():
    jobs, reason = derive_max_jobs({"cpu_count": 128, "mem_available_mib": 65536})
    assert reason == "max_jobs 10 = min(cpus 128, 62259 MiB usable of 65536 MiB available // 6144 MiB per job), at least 1"
    _, reason = derive_max_jobs({"cpu_count": 8, "mem_available_mib": 65536, "mem_limit_mib": 4096,
                                 "cgroup": {"version": 2, "memory_used_mib": 96},
                                 "mem_limit_source": "cgroup v2 /sys/fs/cgroup/a/memory.max"})
    assert "of 4000 MiB cgroup v2 limit 4096 MiB, 96 MiB used (cgroup v2 /sys/fs/cgroup/a/memory.max)" in reason
    plan = build_plan({"cpu_count": 128, "mem_available_mib": 65536}, max_jobs=3)
    assert plan["max_jobs"] == 3 and "max_jobs 3 as configured" in plan["notes"]
    assert build_plan({"cpu_count": 128, "mem_available_mib": 65536}, mem_per_job_mib=4096)["max_jobs"] == 15
    with pytest.raises(ValueError):
        build_plan({}, max_jobs=0)
    with pytest.raises(ValueError):
        derive_max_jobs({}, mem_per_job_mib=0)


# --- properties ----------------------------------------------------------------------------------

caps = st.sampled_from(["7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1"])


@settings(max_examples=200, deadline=None)
@given(st.lists(caps, min_size=1, max_size=8), st.integers(1, 256), st.integers(0, 4 * 1024 * 1024))
def test_plan_properties(gpu_caps, cpus, mem):
    facts = {"gpus": [{"index": i, "name": "G", "compute_cap": c, "memory_mib": 1} for i, c in enumerate(gpu_caps)],
             "cpu_count": cpus, "mem_available_mib": mem, "cuda": {"archs": NVCC_13_0_ARCHS, "version": "13.0"}}
    plan = build_plan(facts)
    archs = plan["torch_cuda_arch_list"].split(";")
    # every GPU's arch is built, nothing else, each once, sorted numerically
    assert set(archs) == {arch_for_compute_cap(c) for c in gpu_caps}
    assert len(archs) == len(set(archs))
    keys = [tuple(int(x) for x in a.rstrip("a").split(".")) for a in archs]
    assert keys == sorted(keys)
    assert plan["cuda_architectures"].split(";") == [cuda_arch(a) for a in archs]
    assert plan["mixed_sm"] is (len(set(gpu_caps)) > 1)
    assert 1 <= plan["max_jobs"] <= cpus
    assert plan["max_jobs"] == max(1, min(cpus, int(max(0, mem - max(1024, mem * 0.05)) // 6144)))
    assert sorted(i for t in plan["targets"] for i in t["gpus"]) == list(range(len(gpu_caps)))
    assert plan["unsupported"] == []  # nvcc 13 knows every one of these


# --- environment ---------------------------------------------------------------------------------


def test_build_environment_from_facts():
    facts = facts_from(SMI["mixed"], cpu_count=2, mem_available_mib=23671)
    facts["build"] = build_plan(facts)
    env = build_environment(facts, venv="/opt/torch/.venv/")
    assert env == {
        "VIRTUAL_ENV": "/opt/torch/.venv",
        "CUDA_HOME": "/usr/local/cuda",
        "CUDA_PATH": "/usr/local/cuda",
        "CUDACXX": "/usr/local/cuda/bin/nvcc",
        "PATH": "/opt/torch/.venv/bin:/usr/local/cuda/bin:" + DEFAULT_PATH + ":/home/u/.local/bin",
        "TORCH_CUDA_ARCH_LIST": "9.0a;12.0a",
        "CMAKE_CUDA_ARCHITECTURES": "90a;120a",
        "CUDAARCHS": "90a;120a",
        "MAX_JOBS": "2",
        "CMAKE_BUILD_PARALLEL_LEVEL": "2",
        "NVCC_THREADS": "1",
        "CMAKE_POLICY_VERSION_MINIMUM": "3.5",
    }


def test_build_environment_uses_the_stored_plan():
    facts = facts_from(SMI["h200"])
    facts["build"] = build_plan(facts, max_jobs=7)
    env = build_environment(facts, venv=None)
    assert env["MAX_JOBS"] == "7" and env["TORCH_CUDA_ARCH_LIST"] == "9.0a"
    assert "VIRTUAL_ENV" not in env
    assert env["PATH"].startswith("/usr/local/cuda/bin:")


def test_build_environment_overrides_win_and_none_removes():
    facts = facts_from(SMI["h200"])
    env = build_environment(facts, venv="/v", overrides={"MAX_JOBS": "1", "NVCC_THREADS": None, "EXTRA": 3})
    assert env["MAX_JOBS"] == "1" and env["EXTRA"] == "3" and "NVCC_THREADS" not in env


def test_build_environment_without_cuda():
    facts = facts_from(SMI["none"])
    facts["cuda"] = {"home": None, "nvcc": None, "version": None, "archs": None}
    facts["uv"] = {"path": "/usr/bin/uv"}
    env = build_environment(facts, venv="/v")
    assert not {"CUDA_HOME", "CUDACXX", "CUDA_PATH"} & set(env)
    assert env["PATH"] == "/v/bin:" + DEFAULT_PATH
    assert env["TORCH_CUDA_ARCH_LIST"] == "9.0a;12.0a"


def test_cmake_defines():
    facts = facts_from(SMI["rtx-pro-6000"])
    assert cmake_defines(facts) == {
        "CMAKE_POLICY_VERSION_MINIMUM": "3.5",
        "CMAKE_CUDA_ARCHITECTURES": "120a",
        "CMAKE_CUDA_COMPILER": "/usr/local/cuda/bin/nvcc",
        "CUDAToolkit_ROOT": "/usr/local/cuda",
    }
    defines = cmake_defines(facts, {"SGL_KERNEL_ENABLE_FA3": False, "ENABLE_X": True, "CUDAToolkit_ROOT": None,
                                    "CMAKE_CUDA_ARCHITECTURES": "120a;121a"})
    assert defines["SGL_KERNEL_ENABLE_FA3"] == "OFF" and defines["ENABLE_X"] == "ON"
    assert "CUDAToolkit_ROOT" not in defines
    assert defines["CMAKE_CUDA_ARCHITECTURES"] == "120a;121a"


def test_cmake_defines_without_nvcc():
    facts = {"cuda": {"home": None, "nvcc": None}}
    assert cmake_defines(facts) == {"CMAKE_POLICY_VERSION_MINIMUM": "3.5", "CMAKE_CUDA_ARCHITECTURES": "90a;120a"}


def test_config_settings_args():
    defines = {"CMAKE_POLICY_VERSION_MINIMUM": "3.5", "CMAKE_CUDA_ARCHITECTURES": "90a;120a", "FA3": False}
    assert config_settings_args(defines) == [
        "--config-settings=cmake.define.CMAKE_POLICY_VERSION_MINIMUM=3.5",
        "--config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES=90a;120a",
        "--config-settings=cmake.define.FA3=OFF",
    ]
    assert config_settings_args(defines, frontend="uv")[1] == "--config-setting=cmake.define.CMAKE_CUDA_ARCHITECTURES=90a;120a"
    assert config_settings_args(defines, frontend="build")[0].startswith("--config-setting=cmake.define.")
    assert config_settings_args({}) == []
    with pytest.raises(FleetError, match="unknown build front end 'poetry'"):
        config_settings_args(defines, frontend="poetry")
    for bad in ("", "A=B", "A B"):
        with pytest.raises(FleetError, match="invalid CMake define name"):
            config_settings_args({bad: "1"})


# Recorded on the GPU test host (one H200, Ubuntu 24.04, nvcc 13.0, torch 2.11 venv), trimmed.
GPU_HOST_FACTS = {
    "gpus": [{"compute_cap": "9.0", "index": 0, "memory_mib": 143771, "name": "NVIDIA H200"}],
    "gpu_source": "nvidia-smi", "gpu_error": None, "driver_version": "580.159.04",
    "cuda": {"archs": NVCC_13_0_ARCHS, "home": "/usr/local/cuda", "nvcc": "/usr/local/cuda/bin/nvcc",
             "source": "CUDA_HOME env", "version": "13.0", "cuobjdump": "/usr/local/cuda/bin/cuobjdump",
             "error": None},
    "python": {"executable": "/opt/torch/.venv/bin/python3", "version": "3.12.3", "tag": "cp312",
               "torch": "2.11.0+cu130", "torch_cuda": "13.0", "torch_error": None},
    "cmake": {"path": "/opt/torch/.venv/bin/cmake", "version": "4.4.3", "error": None},
    "uv": {"path": "/usr/local/bin/uv"},
    "cpu_count": 16, "cpu_quota": None, "mem_total_mib": 128887, "mem_available_mib": 128276,
    "mem_limit_mib": None, "disk_free_mib": 65518, "os": "Ubuntu 24.04.3 LTS",
}


def test_recorded_gpu_host():
    plan = build_plan(GPU_HOST_FACTS)
    assert (plan["torch_cuda_arch_list"], plan["cuda_architectures"], plan["sass"]) == ("9.0a", "90a", ["sm_90a"])
    assert plan["max_jobs"] == 16 and plan["mixed_sm"] is False and plan["unsupported"] == []
    env = build_environment({**GPU_HOST_FACTS, "build": plan}, venv="/opt/torch/.venv")
    assert env["PATH"] == "/opt/torch/.venv/bin:/usr/local/cuda/bin:" + DEFAULT_PATH
    assert env["CUDACXX"] == "/usr/local/cuda/bin/nvcc"
    assert env["TORCH_CUDA_ARCH_LIST"] == "9.0a" and env["MAX_JOBS"] == "16"


@pytest.mark.parametrize("text, why", [("8.0a", "'a' (architecture-specific) suffix exists for 9.0 and newer"),
                                       ("9.0f", "'f' (family-specific) suffix exists for 10.0 and newer")])
def test_an_arch_suffix_the_sm_lacks_is_refused_before_any_build(text, why):
    """nvcc has no sm_80a or sm_90f (NVIDIA: 'a' from SM 9.0, 'f' from SM 10.0): refused while
    parsing, so ``-e archs=8.0a`` fails while planning instead of in CMake after the upload."""
    from fleetctl.build.cudacompat import parse_tokens
    from fleetctl.tasks.build_wheel import BuildWheelArgs

    with pytest.raises(ValueError, match=re.escape(why)):
        parse_tokens(text)
    with pytest.raises(ValueError, match=re.escape(why)):
        BuildWheelArgs(src="/s", out_dir="/o", archs=text)
    assert [t.sass for t in parse_tokens("9.0a;10.0f;12.0a;8.0")] == ["sm_90a", "sm_100f", "sm_120a", "sm_80"]
