"""sgl-kernel's build recipe for one host: facts -> CMake defines, environment, job counts, verify
arguments, each with the reason it was chosen. Pure (no I/O), so ``--dry-run`` and data tests need
no host.

The recipe is the one that built sgl-kernel on RTX PRO 6000 Blackwell (SM120, CUDA 13) by hand
(the failure stories of the design sketch), made per host:

* ``TORCH_CUDA_ARCH_LIST`` from the host's SMs (``12.0a`` for SM120, ``9.0a`` for H100/H200), the
  build plan of :func:`fleetctl.build.archs.build_plan`; sgl-kernel itself picks its ``-gencode`` list
  from the CUDA version, and the SASS check after the build holds it to the host's SM;
* ``SGL_KERNEL_ENABLE_FP4=ON``: the NVFP4 kernels are why the fleet builds sgl-kernel;
* ``ENABLE_BELOW_SM90=OFF`` when no GPU of the host is below SM90 (no sm_80/sm_89 code to build);
* ``SGL_KERNEL_ENABLE_FA3=OFF`` where FA3 cannot build: it is Hopper code (sm_90a); an arch list
  without 9.0a, or with a newer arch such as 12.0a, gets none (then verify expects
  ``flash_attn.flash_ops is None``, the patch script's soft fallback);
* ``CMAKE_POLICY_VERSION_MINIMUM=3.5`` in the environment and as a define (CMake 4 refuses fetched
  projects that declare ``cmake_minimum_required`` below 3.5);
* ``MAX_JOBS``/``CMAKE_BUILD_PARALLEL_LEVEL`` and ``SGL_KERNEL_COMPILE_THREADS`` chosen together:
  every job runs one nvcc whose ``--threads`` device passes run at once, so jobs x threads nvcc
  processes share the memory; upstream's default (32 threads, a job per core) is what exhausted it;
* the venv's python with ``--no-build-isolation`` (torch, scikit-build-core, nanobind come from the
  venv; an isolated build would bring another torch);
* verify: torch imported first, ``cutlass_scaled_fp4_mm``, ``scaled_fp4_quant`` and
  ``scaled_fp4_grouped_quant`` present, ``flash_attn.flash_ops is None`` when FA3 is off.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .archs import DEFAULT_MEM_PER_JOB_MIB, build_plan, derive_max_jobs, parse_arch_list

#: The NVFP4 entry points a deployed sgl-kernel must have (sgl_kernel's Python API).
FP4_SYMBOLS = ("cutlass_scaled_fp4_mm", "scaled_fp4_quant", "scaled_fp4_grouped_quant")

#: Device passes nvcc makes for one sgl-kernel source file: sgl-kernel's own ``-gencode`` list for
#: CUDA >= 12.8 is sm_90, sm_90a, sm_100a, sm_120a (more with ENABLE_BELOW_SM90). ``--threads``
#: runs these passes at once; more threads than passes only idle.
DEVICE_PASSES_PER_FILE = 4

#: MiB one nvcc device pass may take on sgl-kernel's CUTLASS-heavy sources.
DEFAULT_MEM_PER_PROCESS_MIB = DEFAULT_MEM_PER_JOB_MIB

#: The arch FA3 is written for; FA3 is built only when every target arch is at most this major.
FA3_ARCH = "9.0a"

_AUTO = {None, "", "auto"}
_TRUE = {"1", "true", "yes", "on", "y"}
_FALSE = {"0", "false", "no", "off", "n"}


def _flag(value: Any, name: str) -> bool | None:
    """``auto``/None -> None; booleans and their usual spellings -> bool."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if value is not None else None
    if text in _AUTO:
        return None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{name} must be auto, true or false, got {value!r}")


def _count(value: Any, name: str) -> int | None:
    """``auto``/None -> None; a positive integer (or its string) -> int."""
    if value is None or (isinstance(value, str) and value.strip().lower() in _AUTO):
        return None
    try:
        n = int(str(value).strip())
    except ValueError:
        raise ValueError(f"{name} must be auto or a whole number >= 1, got {value!r}") from None
    if n < 1 or isinstance(value, bool):
        raise ValueError(f"{name} must be auto or a whole number >= 1, got {value!r}")
    return n


def _major(arch: str) -> int:
    return int(arch.split(".")[0])


def _on(value: bool) -> str:
    return "ON" if value else "OFF"


def sgl_kernel_recipe(
    facts: Mapping[str, Any],
    *,
    fa3: Any = None,
    max_jobs: Any = None,
    compile_threads: Any = None,
    sms: Any = None,
    mem_per_process_mib: int = DEFAULT_MEM_PER_PROCESS_MIB,
) -> dict[str, Any]:
    """The sgl-kernel build recipe for one host.

    Args:
        facts: the host's facts (``playbooks/scripts/facts.py`` plus ``build`` from
            :func:`fleetctl.build.archs.build_plan`; derived here when absent): ``gpus``, ``cpu_count``,
            ``mem_available_mib``/``mem_total_mib``, ``python.executable``.
        fa3: ``auto`` (None) decides from the arch list; true/false overrides (the reason says so).
        max_jobs: parallel compile jobs; ``auto`` (None) chooses them with the threads.
        compile_threads: nvcc ``--threads`` (``SGL_KERNEL_COMPILE_THREADS``); ``auto`` (None)
            likewise.
        sms: ``auto``/``host`` (None): ``FLEETCTL_SGL_ARCHS`` = the arch list, so the patch
            script's ``restrict-gencodes`` filter compiles only code that runs on the host's SMs;
            ``all``: sgl-kernel's own ``-gencode`` lists (the per-host opt-out).
        mem_per_process_mib: MiB one nvcc device pass may use (4-8 GiB on CUTLASS sources).

    Returns:
        ``{"package": "sgl_kernel", "torch_cuda_arch_list": "12.0a", "cuda_architectures": "120a",
        "fa3": bool, "below_sm90": bool, "max_jobs": int, "compile_threads": int,
        "nvcc_processes": int, "process_budget": int, "python": str | None,
        "no_build_isolation": True, "defines": {NAME: "ON"|"OFF"|str}, "env": {NAME: str},
        "verify": {"symbols": [...], "fa3_fallback": bool}, "decisions": [{"setting", "value",
        "via", "reason"}], "summary": str}``. ``defines`` go to the build as CMake ``-D``
        (scikit-build-core config settings), ``env`` into its environment; ``max_jobs`` is the
        build task's own (it sets MAX_JOBS and CMAKE_BUILD_PARALLEL_LEVEL, and halves them once
        when a compiler is killed for memory).

    Raises:
        ValueError: an override is not ``auto``/a boolean/a positive whole number, or
            ``mem_per_process_mib`` < 1.
    """
    if mem_per_process_mib < 1:
        raise ValueError(f"mem_per_process_mib must be >= 1, got {mem_per_process_mib}")
    sms_text = "auto" if sms is None else str(sms).strip().lower()
    if sms_text not in ("auto", "", "host", "all"):
        raise ValueError(f"sms (the sgl_kernel_sms var) must be auto, host or all, got {sms!r}")
    restrict = sms_text != "all"
    fa3_choice = _flag(fa3, "fa3 (the sgl_kernel_fa3 var)")
    jobs_choice = _count(max_jobs, "max_jobs (the sgl_kernel_max_jobs var)")
    threads_choice = _count(compile_threads, "compile_threads (the sgl_kernel_compile_threads var)")
    plan = facts.get("build")
    if not (isinstance(plan, Mapping) and plan.get("archs")):
        plan = build_plan(facts)
    archs = parse_arch_list(plan["archs"])
    arch_list = ";".join(archs)
    decisions: list[dict[str, str]] = []

    def decide(setting: str, value: Any, via: str, reason: str) -> None:
        decisions.append({"setting": setting, "value": str(value), "via": via, "reason": reason})

    if plan.get("source") == "gpus":
        where = "the host's GPUs: " + ", ".join(
            f"SM {t['compute_cap']} ({', '.join(t.get('names') or []) or 'GPU'} #{','.join(str(i) for i in t['gpus'])})"
            for t in plan.get("targets", []))
    else:
        where = "no GPU reported a compute capability: the fallback_archs var"
    decide("TORCH_CUDA_ARCH_LIST", arch_list, "env", f"{where} -> {arch_list}")

    decide("SGL_KERNEL_ENABLE_FP4", "ON", "define",
           "the NVFP4 kernels (" + ", ".join(FP4_SYMBOLS) + ") are what the fleet deploys sgl-kernel for")

    if plan.get("source") == "gpus":
        low = sorted({c for c in plan.get("compute_caps", []) if int(c.split(".")[0]) < 9})
        below = bool(low)
        why = (f"GPU(s) below SM90 on this host (SM {', '.join(low)}) need sm_80/sm_89 code" if below
               else "no GPU of this host is below SM90: no sm_80/sm_89 code to build")
    else:
        low = [a for a in archs if _major(a) < 9]
        below = bool(low)
        why = (f"the arch list has {', '.join(low)}, below SM90" if below
               else f"the arch list {arch_list} has nothing below SM90")
    decide("ENABLE_BELOW_SM90", _on(below), "define", why)

    newer = [a for a in archs if _major(a) >= 10]
    if fa3_choice is not None:
        fa3_on = fa3_choice
        why = f"as configured (sgl_kernel_fa3={'true' if fa3_on else 'false'}); automatic would be " + (
            "ON" if FA3_ARCH in archs and not newer else "OFF")
    elif FA3_ARCH not in archs:
        fa3_on = False
        why = f"FA3 is Hopper code (sm_90a); the arch list {arch_list} has no {FA3_ARCH}"
    elif newer:
        fa3_on = False
        why = (f"FA3 does not build for {', '.join(newer)} (only Hopper, sm_90a); the arch list {arch_list} "
               f"needs it, so the host's SM90 GPUs go without FA3")
    else:
        fa3_on = True
        why = f"every target arch ({arch_list}) can build FA3"
    decide("SGL_KERNEL_ENABLE_FA3", _on(fa3_on), "define",
           why + ("" if fa3_on else "; verify expects flash_attn.flash_ops to be None"))

    cuda_archs = plan.get("cuda_architectures") or ";".join(a.replace(".", "") for a in archs)
    # restricted, a file gets one device pass per host SM (the filter keeps one SASS per SM)
    passes = len([a for a in cuda_archs.split(";") if a]) if restrict else DEVICE_PASSES_PER_FILE
    passes_why = (f"{passes} for the host's {cuda_archs} alone" if restrict
                  else f"{DEVICE_PASSES_PER_FILE} for sgl-kernel's whole list")
    budget, budget_reason = derive_max_jobs(facts, mem_per_process_mib)
    budget_reason = budget_reason.replace("max_jobs", "nvcc processes", 1).replace("per job", "per nvcc process")
    if threads_choice is None:
        threads = max(1, min(passes, budget if jobs_choice is None else budget // jobs_choice))
    else:
        threads = threads_choice
    jobs = jobs_choice if jobs_choice is not None else max(1, budget // threads)
    product = jobs * threads
    over = product > budget
    decide("SGL_KERNEL_COMPILE_THREADS", threads, "define",
           (f"as configured; " if threads_choice is not None else "")
           + f"nvcc --threads runs one file's device passes at once ({passes_why}), "
           f"{budget_reason}")
    decide("MAX_JOBS", jobs, "build task (sets MAX_JOBS and CMAKE_BUILD_PARALLEL_LEVEL)",
           (f"as configured; " if jobs_choice is not None else "")
           + f"{jobs} jobs x {threads} threads = {product} nvcc processes "
           + (f"OVER the budget of {budget}: expect memory pressure" if over else f"<= the budget of {budget}"))

    if restrict:
        decide("FLEETCTL_SGL_ARCHS", cuda_archs, "define",
               f"sgl-kernel hard-codes its -gencode list and ignores the arch list; the patch's restrict-gencodes "
               f"filter keeps only code that runs on {cuda_archs} (sgl_kernel_sms=all keeps them all)")
    else:
        decide("FLEETCTL_SGL_ARCHS", "(all)", "define",
               "as configured (sgl_kernel_sms=all): every SM sgl-kernel's -gencode lists name is compiled")

    decide("CMAKE_POLICY_VERSION_MINIMUM", "3.5", "env and define",
           "CMake 4 refuses fetched projects (dlpack...) declaring cmake_minimum_required below 3.5; "
           "the environment variable reaches every CMake the build starts")
    python = (facts.get("python") or {}).get("executable")
    decide("--no-build-isolation", "on", "build task",
           f"build with the venv's python ({python or 'the venv var'}): torch, scikit-build-core and nanobind "
           "come from the venv, an isolated build would bring another torch")
    decide("verify", "torch first; " + ", ".join(FP4_SYMBOLS) + ("" if fa3_on else "; flash_ops is None"),
           "verify task", "import torch before sgl_kernel (it links libtorch), then the NVFP4 entry points"
           + ("" if fa3_on else ", and FA3's soft fallback since it is not built"))

    defines = {
        "SGL_KERNEL_ENABLE_FP4": "ON",
        "SGL_KERNEL_ENABLE_FA3": _on(fa3_on),
        "ENABLE_BELOW_SM90": _on(below),
        "SGL_KERNEL_COMPILE_THREADS": str(threads),
        "CMAKE_POLICY_VERSION_MINIMUM": "3.5",
    }
    if restrict:
        defines["FLEETCTL_SGL_ARCHS"] = cuda_archs
    env = {"TORCH_CUDA_ARCH_LIST": arch_list, "CMAKE_POLICY_VERSION_MINIMUM": "3.5"}
    summary = "; ".join(f"{d['setting']}={d['value']}" for d in decisions[:-2])
    return {
        "package": "sgl_kernel",
        "torch_cuda_arch_list": arch_list,
        "cuda_architectures": plan.get("cuda_architectures", ""),
        "sms": cuda_archs if restrict else "all",
        "fa3": fa3_on,
        "below_sm90": below,
        "max_jobs": jobs,
        "compile_threads": threads,
        "nvcc_processes": product,
        "process_budget": budget,
        "python": python,
        "no_build_isolation": True,
        "defines": defines,
        "env": env,
        "verify": {"symbols": list(FP4_SYMBOLS), "fa3_fallback": not fa3_on},
        "decisions": decisions,
        "summary": summary,
    }


def recipe_lines(recipe: Mapping[str, Any]) -> list[str]:
    """The recipe for a person: one ``SETTING=VALUE  (via): reason`` line per decision."""
    return [f"{d['setting']}={d['value']}  ({d['via']}): {d['reason']}" for d in recipe["decisions"]]
