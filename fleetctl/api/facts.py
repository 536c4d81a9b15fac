"""Typed facts of one host (the facts contract of ``playbooks/scripts/facts.py``; sizes in MiB =
2**20 bytes), with the whole gathered document kept as :attr:`HostFacts.raw`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Facts(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Gpu(_Facts):
    """One GPU as ``nvidia-smi --query-gpu`` (or NVML) lists it.

    Attributes:
        index: the GPU's index on its host.
        name: ``"NVIDIA H200"``.
        compute_capability: ``"9.0"`` (NVIDIA's compute capability, ``compute_cap``), or None
            when the driver does not say.
        memory_mib: total memory, MiB.
        uuid: ``"GPU-..."``, if known.
    """

    index: int
    name: str = ""
    compute_capability: str | None = Field(default=None, alias="compute_cap")
    memory_mib: int | None = None
    uuid: str | None = None


class HostFacts(_Facts):
    """What fleetctl gathered about one host.

    Attributes:
        host: the inventory name.
        status: ``ok``; ``failed`` (gathered, then refused: a broken GPU stack, or a problem a
            deploy refuses the host for, such as a venv that is not there or has no torch:
            :func:`fleetctl.facts.refusals.refused_by_deploy`) or ``unreachable``. ``ok`` means
            a deploy would not refuse the host for what its facts show.
        error: for a failed or unreachable host, one line (for a refused one, its first
            refusal: :func:`fleetctl.facts.refusals.refusal_error`).
        warnings: every ``warning:`` line facts gave for the host (``fleetctl facts --json``'s
            ``warnings``), those a deploy refuses the host for and benign ones alike (a
            builder-only problem: the host may still receive its class's wheel); each also went
            to the fleet's ``on_warning`` as ``HOST: LINE``.
        gpus: every GPU (empty on a host without an NVIDIA driver).
        driver_version: the NVIDIA driver's version (``"580.82.07"``), or None.
        cuda_version: the CUDA toolkit's (nvcc's) version (``"13.0"``), or None.
        cuda_home: the toolkit's folder, or None.
        python: the host venv's interpreter, or None.
        python_version: ``"3.12.3"``, or None.
        venv: the venv fleetctl works in (``venv`` host var), or None.
        torch: torch's version in that venv (``"2.9.0+cu130"``), or None.
        torch_cuda: the CUDA version torch was built for, or None.
        cores: CPUs fleetctl may run on there (``os.sched_getaffinity``).
        memory_mib: total memory, MiB (``/proc/meminfo``).
        memory_available_mib: available memory, MiB.
        disk_free_mib: free space at the host's workdir, MiB.
        arch_list: the ``TORCH_CUDA_ARCH_LIST`` fleetctl builds for there (``"9.0a"``).
        raw: the whole facts document (every key of the facts contract).
    """

    host: str
    status: str = "ok"
    error: str | None = None
    warnings: tuple[str, ...] = ()
    gpus: tuple[Gpu, ...] = ()
    driver_version: str | None = None
    cuda_version: str | None = None
    cuda_home: str | None = None
    python: str | None = None
    python_version: str | None = None
    venv: str | None = None
    torch: str | None = None
    torch_cuda: str | None = None
    cores: int | None = None
    memory_mib: int | None = None
    memory_available_mib: int | None = None
    disk_free_mib: int | None = None
    arch_list: str | None = None
    raw: dict[str, Any] = Field(default_factory=dict, repr=False)

    @classmethod
    def from_outcome(cls, host: str, outcome: Any) -> "HostFacts":
        """From a facts run's :class:`~fleetctl.engine.model.HostOutcome`."""
        raw = dict(outcome.facts or {})
        cuda, python, build = raw.get("cuda") or {}, raw.get("python") or {}, raw.get("build") or {}
        from .adhoc import facts_status

        status = facts_status(outcome)
        return cls(host=host, status=status, error=outcome.error, warnings=tuple(outcome.warnings or ()),
                   gpus=tuple(Gpu.model_validate(g) for g in raw.get("gpus") or () if isinstance(g, dict)),
                   driver_version=raw.get("driver_version"), cuda_version=cuda.get("version"),
                   cuda_home=cuda.get("home"), python=python.get("executable"), python_version=python.get("version"),
                   venv=python.get("venv") or python.get("prefix"), torch=python.get("torch"),
                   torch_cuda=python.get("torch_cuda"), cores=raw.get("cpu_count"),
                   memory_mib=raw.get("mem_total_mib"), memory_available_mib=raw.get("mem_available_mib"),
                   disk_free_mib=raw.get("disk_free_mib"), arch_list=build.get("torch_cuda_arch_list"), raw=raw)

    @property
    def compute_capabilities(self) -> list[str]:
        """The distinct compute capabilities of the GPUs, sorted (``["9.0"]``)."""
        return sorted({g.compute_capability for g in self.gpus if g.compute_capability})
