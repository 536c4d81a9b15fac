"""fleetctl.build.sgl_recipe: facts -> sgl-kernel's build recipe, with a reason per decision. Data tests.

Each host below is facts as the facts script reports them (GPU rows recorded from real GPUs in
tests/support/fake_gpu.py); the expected recipe is written out in full.
"""

from __future__ import annotations

import pytest

from fleetctl.build.archs import build_plan
from fleetctl.build.sgl_recipe import FP4_SYMBOLS, recipe_lines, sgl_kernel_recipe
from tests.support.fake_gpu import H200, L40S, RTX_PRO_6000

GIB = 1024


def facts(gpus, cpus, mem_gib, python="/opt/venv/bin/python3"):
    f = {
        "gpus": [{"index": i, "name": name, "compute_cap": cap, "memory_mib": mem} for i, (cap, name, mem) in enumerate(gpus)],
        "cpu_count": cpus,
        "mem_total_mib": mem_gib * GIB,
        "mem_available_mib": mem_gib * GIB,
        "cuda": {"home": "/usr/local/cuda", "nvcc": "/usr/local/cuda/bin/nvcc", "version": "13.0"},
        "python": {"executable": python},
    }
    f["build"] = build_plan(f)
    return f


HOSTS = {
    # one H200 (SM90), 16 cores, 128 GiB: memory allows 21 nvcc processes, the cores 16; a file has one
    # device pass (sm_90a alone), so 16 jobs of one thread
    "sm90": (facts([H200], 16, 128), {
        "torch_cuda_arch_list": "9.0a", "fa3": True, "below_sm90": False,
        "defines": {"SGL_KERNEL_ENABLE_FP4": "ON", "SGL_KERNEL_ENABLE_FA3": "ON", "ENABLE_BELOW_SM90": "OFF",
                    "SGL_KERNEL_COMPILE_THREADS": "1", "CMAKE_POLICY_VERSION_MINIMUM": "3.5",
                    "FLEETCTL_SGL_ARCHS": "90a"},
        "env": {"TORCH_CUDA_ARCH_LIST": "9.0a", "CMAKE_POLICY_VERSION_MINIMUM": "3.5"},
        "max_jobs": 16, "compile_threads": 1, "nvcc_processes": 16, "process_budget": 16,
        "verify": {"symbols": list(FP4_SYMBOLS), "fa3_fallback": False},
    }),
    # the failure-story host: RTX PRO 6000 Blackwell (SM120), 128 cores, 192 GiB: memory decides (30, after
    # the 5 % kept free)
    "sm120": (facts([RTX_PRO_6000], 128, 192), {
        "torch_cuda_arch_list": "12.0a", "fa3": False, "below_sm90": False,
        "defines": {"SGL_KERNEL_ENABLE_FP4": "ON", "SGL_KERNEL_ENABLE_FA3": "OFF", "ENABLE_BELOW_SM90": "OFF",
                    "SGL_KERNEL_COMPILE_THREADS": "1", "CMAKE_POLICY_VERSION_MINIMUM": "3.5",
                    "FLEETCTL_SGL_ARCHS": "120a"},
        "env": {"TORCH_CUDA_ARCH_LIST": "12.0a", "CMAKE_POLICY_VERSION_MINIMUM": "3.5"},
        "max_jobs": 30, "compile_threads": 1, "nvcc_processes": 30, "process_budget": 30,
        "verify": {"symbols": list(FP4_SYMBOLS), "fa3_fallback": True},
    }),
    # an H200 and an RTX PRO 6000 in one host: both archs, and FA3 (Hopper only) cannot build
    "mixed-sm90-sm120": (facts([H200, RTX_PRO_6000], 32, 64), {
        "torch_cuda_arch_list": "9.0a;12.0a", "fa3": False, "below_sm90": False,
        "defines": {"SGL_KERNEL_ENABLE_FP4": "ON", "SGL_KERNEL_ENABLE_FA3": "OFF", "ENABLE_BELOW_SM90": "OFF",
                    "SGL_KERNEL_COMPILE_THREADS": "2", "CMAKE_POLICY_VERSION_MINIMUM": "3.5",
                    "FLEETCTL_SGL_ARCHS": "90a;120a"},
        "env": {"TORCH_CUDA_ARCH_LIST": "9.0a;12.0a", "CMAKE_POLICY_VERSION_MINIMUM": "3.5"},
        "max_jobs": 5, "compile_threads": 2, "nvcc_processes": 10, "process_budget": 10,
        "verify": {"symbols": list(FP4_SYMBOLS), "fa3_fallback": True},
    }),
    # an L40S (SM89) beside an H100: sm_89 code is needed, FA3 builds (8.9 and 9.0a only); 24 GiB less
    # the 1 GiB kept free hold 3 nvcc processes; one file has 2 device passes (sm_89, sm_90a)
    "mixed-below-sm90": (facts([L40S, H200], 8, 24), {
        "torch_cuda_arch_list": "8.9;9.0a", "fa3": True, "below_sm90": True,
        "defines": {"SGL_KERNEL_ENABLE_FP4": "ON", "SGL_KERNEL_ENABLE_FA3": "ON", "ENABLE_BELOW_SM90": "ON",
                    "SGL_KERNEL_COMPILE_THREADS": "2", "CMAKE_POLICY_VERSION_MINIMUM": "3.5",
                    "FLEETCTL_SGL_ARCHS": "89;90a"},
        "env": {"TORCH_CUDA_ARCH_LIST": "8.9;9.0a", "CMAKE_POLICY_VERSION_MINIMUM": "3.5"},
        "max_jobs": 1, "compile_threads": 2, "nvcc_processes": 2, "process_budget": 3,
        "verify": {"symbols": list(FP4_SYMBOLS), "fa3_fallback": False},
    }),
    # a build host without GPUs: fallback_archs 9.0a;12.0a, so no FA3; 2 cores decide
    "no-gpu": (facts([], 2, 16), {
        "torch_cuda_arch_list": "9.0a;12.0a", "fa3": False, "below_sm90": False,
        "defines": {"SGL_KERNEL_ENABLE_FP4": "ON", "SGL_KERNEL_ENABLE_FA3": "OFF", "ENABLE_BELOW_SM90": "OFF",
                    "SGL_KERNEL_COMPILE_THREADS": "2", "CMAKE_POLICY_VERSION_MINIMUM": "3.5",
                    "FLEETCTL_SGL_ARCHS": "90a;120a"},
        "env": {"TORCH_CUDA_ARCH_LIST": "9.0a;12.0a", "CMAKE_POLICY_VERSION_MINIMUM": "3.5"},
        "max_jobs": 1, "compile_threads": 2, "nvcc_processes": 2, "process_budget": 2,
        "verify": {"symbols": list(FP4_SYMBOLS), "fa3_fallback": True},
    }),
}


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_recipe_per_host(host):
    host_facts, want = HOSTS[host]
    got = sgl_kernel_recipe(host_facts)
    assert {k: got[k] for k in want} == want
    assert got["nvcc_processes"] == got["max_jobs"] * got["compile_threads"] <= got["process_budget"]
    assert got["no_build_isolation"] is True and got["python"] == "/opt/venv/bin/python3"
    settings = [d["setting"] for d in got["decisions"]]
    for name in ("TORCH_CUDA_ARCH_LIST", "SGL_KERNEL_ENABLE_FP4", "ENABLE_BELOW_SM90", "SGL_KERNEL_ENABLE_FA3",
                 "SGL_KERNEL_COMPILE_THREADS", "MAX_JOBS", "CMAKE_POLICY_VERSION_MINIMUM", "--no-build-isolation"):
        assert name in settings
    assert all(d["reason"] for d in got["decisions"])
    assert len(recipe_lines(got)) == len(got["decisions"])


def test_reasons_name_the_facts_they_come_from():
    sm120 = {d["setting"]: d for d in sgl_kernel_recipe(HOSTS["sm120"][0])["decisions"]}
    assert "SM 12.0 (NVIDIA RTX PRO 6000 Blackwell Workstation Edition #0)" in sm120["TORCH_CUDA_ARCH_LIST"]["reason"]
    assert "no 9.0a" in sm120["SGL_KERNEL_ENABLE_FA3"]["reason"]
    assert "flash_ops to be None" in sm120["SGL_KERNEL_ENABLE_FA3"]["reason"]
    assert "186777 MiB usable of 196608 MiB available // 6144 MiB per nvcc process" in sm120["SGL_KERNEL_COMPILE_THREADS"]["reason"]
    assert "30 jobs x 1 threads = 30 nvcc processes" in sm120["MAX_JOBS"]["reason"]
    assert "1 for the host's 120a alone" in sm120["SGL_KERNEL_COMPILE_THREADS"]["reason"]
    mixed = {d["setting"]: d for d in sgl_kernel_recipe(HOSTS["mixed-sm90-sm120"][0])["decisions"]}
    assert "does not build for 12.0a" in mixed["SGL_KERNEL_ENABLE_FA3"]["reason"]
    assert "SM90 GPUs go without FA3" in mixed["SGL_KERNEL_ENABLE_FA3"]["reason"]
    low = {d["setting"]: d for d in sgl_kernel_recipe(HOSTS["mixed-below-sm90"][0])["decisions"]}
    assert "SM 8.9" in low["ENABLE_BELOW_SM90"]["reason"]
    nogpu = {d["setting"]: d for d in sgl_kernel_recipe(HOSTS["no-gpu"][0])["decisions"]}
    assert "fallback_archs" in nogpu["TORCH_CUDA_ARCH_LIST"]["reason"]


def test_overrides_are_applied_and_said():
    r = sgl_kernel_recipe(HOSTS["sm90"][0], fa3="false", max_jobs="2", compile_threads=8)
    assert r["defines"]["SGL_KERNEL_ENABLE_FA3"] == "OFF" and r["verify"]["fa3_fallback"] is True
    assert (r["max_jobs"], r["compile_threads"]) == (2, 8)
    by = {d["setting"]: d["reason"] for d in r["decisions"]}
    assert by["SGL_KERNEL_ENABLE_FA3"].startswith("as configured (sgl_kernel_fa3=false); automatic would be ON")
    assert by["MAX_JOBS"].startswith("as configured; 2 jobs x 8 threads = 16 nvcc processes <= the budget of 16")
    # only the job count given: the threads fill the rest of the budget (at most one per device pass)
    r = sgl_kernel_recipe(HOSTS["sm90"][0], max_jobs=8)
    assert (r["max_jobs"], r["compile_threads"]) == (8, 1)
    r = sgl_kernel_recipe(HOSTS["sm90"][0], max_jobs=8, sms="all")  # 4 device passes a file
    assert (r["max_jobs"], r["compile_threads"]) == (8, 2)
    r = sgl_kernel_recipe(HOSTS["sm90"][0], max_jobs=32)
    assert (r["max_jobs"], r["compile_threads"], r["nvcc_processes"]) == (32, 1, 32)
    assert "OVER the budget of 16" in {d["setting"]: d["reason"] for d in r["decisions"]}["MAX_JOBS"]
    assert sgl_kernel_recipe(HOSTS["sm90"][0], fa3="auto", max_jobs="auto")["fa3"] is True


@pytest.mark.parametrize("kwargs", [{"fa3": "maybe"}, {"max_jobs": 0}, {"max_jobs": "x"}, {"compile_threads": -1},
                                    {"compile_threads": True}, {"mem_per_process_mib": 0}])
def test_bad_overrides_raise(kwargs):
    with pytest.raises(ValueError):
        sgl_kernel_recipe(HOSTS["sm90"][0], **kwargs)


def test_facts_without_a_build_plan_get_one():
    f = dict(HOSTS["sm120"][0])
    del f["build"]
    assert sgl_kernel_recipe(f)["torch_cuda_arch_list"] == "12.0a"


def test_low_memory_host_never_oversubscribes():
    """The failure story: 128 cores but 32 GiB: 5 nvcc processes, not 128 x 32."""
    r = sgl_kernel_recipe(facts([RTX_PRO_6000], 128, 32))
    assert r["process_budget"] == 5 and r["nvcc_processes"] <= 5
    assert (r["max_jobs"], r["compile_threads"]) == (5, 1)
    r = sgl_kernel_recipe(facts([RTX_PRO_6000], 128, 32), sms="all")
    assert r["nvcc_processes"] <= 5 and (r["max_jobs"], r["compile_threads"]) == (1, 4)


def test_hosts_differing_only_in_memory_share_one_arch_class():
    """nvcc's thread count changes how fast the wheel builds, not its bytes: two SM120 hosts with
    different memory get different threads but one build key, so one builds and the other gets
    the wheel pushed."""
    from fleetctl.build.env import cmake_defines
    from fleetctl.tasks.build_wheel import build_inputs, build_key

    keys, threads = set(), set()
    for mem in (16, 192):
        f = facts([RTX_PRO_6000], 64, mem)
        r = sgl_kernel_recipe(f, sms="all")  # sgl-kernel's whole list: 4 device passes, threads by memory
        threads.add(r["defines"]["SGL_KERNEL_COMPILE_THREADS"])
        defines = cmake_defines(f, r["defines"])
        keys.add(build_key(build_inputs("tree", f["build"], defines, f, "host")))
    assert len(threads) == 2 and len(keys) == 1
    # FA3 on or off is a different wheel
    f = facts([RTX_PRO_6000], 64, 64)
    on = cmake_defines(f, sgl_kernel_recipe(f, fa3=True)["defines"])
    assert build_key(build_inputs("tree", f["build"], on, f, "host")) not in keys


def test_the_host_sms_only_unless_the_host_opts_out() -> None:
    facts = {"gpus": [{"index": 0, "name": H200[1], "compute_cap": H200[0]}], "cpu_count": 16,
             "mem_available_mib": 128 * 1024}
    r = sgl_kernel_recipe(facts)
    assert r["defines"]["FLEETCTL_SGL_ARCHS"] == "90a" and r["sms"] == "90a"
    why = next(d for d in r["decisions"] if d["setting"] == "FLEETCTL_SGL_ARCHS")["reason"]
    assert "only code that runs on 90a" in why
    every = sgl_kernel_recipe(facts, sms="all")
    assert "FLEETCTL_SGL_ARCHS" not in every["defines"] and every["sms"] == "all"
    with pytest.raises(ValueError, match="sgl_kernel_sms var"):
        sgl_kernel_recipe(facts, sms="some")
