"""Which case a host's GPU stack is, from its facts, and the refusal of a broken one.

The facts script (``playbooks/scripts/facts.py``, ``gpu_stack``) tells three cases apart:

- ``ok``: nvidia-smi (or NVML) listed the host's GPUs;
- ``none``: the host has no NVIDIA driver at all (no nvidia-smi, no ``/proc/driver/nvidia``, no
  ``/dev/nvidia*``): a build host. Only this case builds for the ``fallback_archs`` var;
- ``broken``: an NVIDIA stack is installed but does not answer (a driver/library version
  mismatch after a driver update without a reboot, the kernel module not loaded, no GPU seen, a
  hung or still-stuck nvidia-smi). Such a host fails at facts, naming what failed and the fix:
  it is a GPU host that cannot be built for or verified, never a GPU-less one.

Facts of an older facts script (no ``gpu_stack``) are classified from ``gpus`` and
``gpu_error`` the same way (:func:`stack_of`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import TaskFailed

__all__ = ["GpuStackBroken", "check_gpu_stack", "stack_of"]


class GpuStackBroken(TaskFailed):
    """The host's NVIDIA stack is installed but broken; ``facts`` are the facts gathered anyway
    (kept in the run record), ``reason`` and ``fix`` the facts script's words."""

    def __init__(self, host: str, reason: str, fix: str | None, facts: Mapping[str, Any]) -> None:
        self.reason, self.fix, self.facts = reason, fix, dict(facts)
        super().__init__(host, f"GPU stack broken: {reason}" + (f"; fix: {fix}" if fix else ""))


def stack_of(facts: Mapping[str, Any]) -> dict[str, Any]:
    """The host's ``gpu_stack`` (``{"status": "ok" | "none" | "broken", "reason", "fix"}``).

    Facts without the key (an older facts script): ``ok`` when GPUs are listed, ``broken`` when
    nvidia-smi ran and failed (``gpu_error`` holds an ``nvidia-smi: exit`` or a timeout), else
    ``none``.
    """
    stack = facts.get("gpu_stack")
    if isinstance(stack, Mapping) and stack.get("status") in ("ok", "none", "broken"):
        return dict(stack)
    if facts.get("gpus"):
        return {"status": "ok", "reason": None, "fix": None}
    err = str(facts.get("gpu_error") or "")
    if "nvidia-smi: exit" in err or "timed out" in err or "did not answer" in err:
        return {"status": "broken", "reason": err, "fix": "check the NVIDIA driver installation (nvidia-smi, dmesg)"}
    return {"status": "none", "reason": err or None, "fix": None}


def check_gpu_stack(host: str, facts: Mapping[str, Any]) -> None:
    """Refuse a host whose NVIDIA stack is broken.

    Raises:
        GpuStackBroken: ``stack_of(facts)["status"] == "broken"``; the message names what failed
            and the fix (``GPU stack broken: nvidia-smi: exit 18: Failed to initialize NVML:
            Driver/library version mismatch ...; fix: ... reboot the host, or reload the nvidia
            kernel modules ...``).
    """
    stack = stack_of(facts)
    if stack["status"] == "broken":
        raise GpuStackBroken(host, str(stack.get("reason") or "the NVIDIA stack does not answer"), stack.get("fix"),
                             facts)
