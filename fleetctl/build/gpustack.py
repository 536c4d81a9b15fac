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

``none`` is a build host only when nothing says the host has GPUs. Slurm's GRES for the node
(``gpu:h200:2`` in the facts' ``slurm`` view, from sinfo's ``%G``) or the host var
``verify_device: cuda`` do (:func:`gpu_claim`): such a host whose facts find no driver (nvidia-smi
missing, no ``/proc/driver/nvidia``, no ``/dev/nvidia*``) is broken too, and fails at facts rather
than build for ``fallback_archs`` and verify on the CPU. ``verify_device: cpu`` is the explicit
opt-in to that (GPUs that are not for this venv): then the host runs, but a GRES that gives it GPUs
facts did not find is a warning on the host (:func:`unmet_gres_warning`): an operator must see that
a node's driver vanished.

Slurm's labels against the GPUs found (:func:`slurm_label_warnings`): a GRES type
(``gpu:rtx5090:1``) or a compute-capability feature (``sm_120``) that no GPU facts found fits is a
**warning** on the host, told by facts and by every play (verify, deploy), never a failure. Why a
warning: nvidia-smi reads the hardware, while GRES types and features are words an administrator
typed into slurm.conf/gres.conf, so fleetctl's own work on the node (a build for the SM facts
found, a verify on that GPU) is right; failing the node would stop a working GPU from being built
for because of a label. What is wrong is the cluster's routing (a job asking ``-C sm_120`` or
``--gres=gpu:rtx5090`` lands on another GPU, the ``slurm:`` source groups the node by the label),
which only the operator can fix, so the line names the label, what facts found and where to fix it.
A GPU GRES count that is not the number of GPUs found (``Gres=gpu:h100:8`` on a node where
nvidia-smi lists 4) is the same kind of warning (:func:`gres_count_warning`), in ``scontrol show
node``'s words.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..errors import TaskFailed

__all__ = ["GpuStackBroken", "check_gpu_stack", "gpu_claim", "gres_count_warning", "gres_gpu_count", "gres_gpu_type",
           "slurm_label_warnings", "sm_feature_cap", "stack_of", "unmet_gres_warning"]


class GpuStackBroken(TaskFailed):
    """The host's NVIDIA stack is installed but broken; ``facts`` are the facts gathered anyway
    (kept in the run record), ``reason`` and ``fix`` the facts script's words."""

    def __init__(self, host: str, reason: str, fix: str | None, facts: Mapping[str, Any],
                 title: str | None = "GPU stack broken") -> None:
        self.reason, self.fix, self.facts = reason, fix, dict(facts)
        head = f"{title}: {reason}" if title else reason
        super().__init__(host, head + (f"; fix: {fix}" if fix else ""))


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
    if "nvidia-smi: exit" in err or "nvidia-smi: killed by" in err or "timed out" in err or "did not answer" in err:
        return {"status": "broken", "reason": err, "fix": "check the NVIDIA driver installation (nvidia-smi, dmesg)"}
    return {"status": "none", "reason": err or None, "fix": None}


_GRES = re.compile(r"^(?P<name>[^:(]+)(?::(?P<type>[^:(]*))?(?::(?P<count>\d+))?(?:\(.*\))?$")


def gres_gpu_count(gres: str) -> int:
    """The GPUs one Slurm GRES item gives a node (pure): ``"gpu:h200:8"`` and ``"gpu:h200:8(S:0-1)"``
    -> 8, ``"gpu:2"`` -> 2, ``"gpu:h200"`` or ``"gpu"`` -> 1 (Slurm's count defaults to 1, gres.conf(5)),
    ``"gpu:h200:0"`` and other GRES (``"mps:100"``, ``"(null)"``) -> 0."""
    m = _GRES.match(gres.strip())
    if not m or m.group("name") != "gpu":
        return 0
    count = m.group("count")
    if count is None and m.group("type") and m.group("type").isdigit():  # "gpu:2": the count, no type
        count = m.group("type")
    return int(count) if count is not None else 1


def gpu_claim(facts: Mapping[str, Any], verify_device: str = "auto") -> str | None:
    """What says the host has GPUs, in words, or None (pure): Slurm's GRES for the node (the facts'
    ``slurm`` view: ``"Slurm GRES gpu:h200:2 for node n1"``), else the host var ``verify_device``
    when it is ``cuda`` (``"the host var verify_device: cuda"``)."""
    view = facts.get("slurm")
    if isinstance(view, Mapping):
        gres = [str(g) for g in view.get("gres") or [] if gres_gpu_count(str(g)) > 0]
        if gres:
            return f"Slurm GRES {','.join(gres)} for node {view.get('node') or '?'}"
    if verify_device == "cuda":
        return "the host var verify_device: cuda"
    return None


def check_gpu_stack(host: str, facts: Mapping[str, Any], *, verify_device: str = "auto") -> None:
    """Refuse a host whose NVIDIA stack is broken, or that has GPUs (:func:`gpu_claim`) but no
    usable driver.

    Args:
        verify_device: the host var (``auto``, ``cuda`` or ``cpu``); ``cpu`` is the explicit
            opt-in to verify on the CPU, so a GPU claim is not checked then.

    Raises:
        GpuStackBroken: ``stack_of(facts)["status"] == "broken"``; the message names what failed
            (``driver too old (compute_cap needs R510+; NVIDIA nvidia-smi docs): ...`` for a
            driver whose nvidia-smi lacks ``compute_cap``, ``too_old`` in ``gpu_stack``)
            and the fix (``GPU stack broken: nvidia-smi: exit 18: Failed to initialize NVML:
            Driver/library version mismatch ...; fix: ... reboot the host, or reload the nvidia
            kernel modules ...``). Or the status is ``none`` (no driver found) while Slurm's GRES
            or the inventory say the host has GPUs (``GPU stack broken: Slurm GRES gpu:h200:1 for
            node n1, but nvidia-smi: not found on PATH ...; fix: ...``).
    """
    stack = stack_of(facts)
    if stack["status"] == "broken":  # a driver before R510 (no compute_cap): its reason says "driver too old"
        raise GpuStackBroken(host, str(stack.get("reason") or "the NVIDIA stack does not answer"), stack.get("fix"),
                             facts, title=None if stack.get("too_old") else "GPU stack broken")
    claim = gpu_claim(facts, verify_device) if stack["status"] == "none" and verify_device != "cpu" else None
    if claim:
        errors = facts.get("gpu_probe_errors") or [facts.get("gpu_error") or "no GPU source answered"]
        found = str(errors[0])  # nvidia-smi's (NVML's error follows in gpu_error)
        raise GpuStackBroken(
            host, f"{claim}, but {found}, and no NVIDIA driver is loaded there (no /proc/driver/nvidia, /dev/nvidia*)",
            "install the NVIDIA driver and its nvidia-smi on the host's non-interactive PATH (or drain the node); "
            "to build for fallback_archs and verify on the CPU there all the same, set the host var verify_device: cpu",
            facts)


def unmet_gres_warning(facts: Mapping[str, Any], verify_device: str = "auto") -> str | None:
    """The warning for a node Slurm's GRES gives GPUs where facts found no driver, run all the same
    because ``verify_device: cpu`` opts in (pure), or None.

    Without the opt-in such a node fails at facts (:func:`check_gpu_stack`); with it the node is a
    build host (``fallback_archs``, verify on the CPU), which must not read as a plain "no GPU
    found": the line names the GRES and its GPU count (:func:`gres_gpu_count`, gres.conf(5)) against
    what facts found, e.g. ``Slurm GRES gpu:h200:1 for node n1 gives it 1 GPU, but facts found none
    (nvidia-smi: not found on PATH; no /proc/driver/nvidia, /dev/nvidia*): ...``.
    """
    if verify_device != "cpu" or stack_of(facts)["status"] != "none":
        return None
    view = facts.get("slurm")
    if not isinstance(view, Mapping):
        return None
    gres = [str(g) for g in view.get("gres") or [] if gres_gpu_count(str(g)) > 0]
    count = sum(gres_gpu_count(g) for g in gres)
    if not count:
        return None
    errors = facts.get("gpu_probe_errors") or [facts.get("gpu_error") or "no GPU source answered"]
    node = view.get("node") or "?"
    return (f"Slurm GRES {','.join(gres)} for node {node} gives it {count} GPU{'s' if count > 1 else ''}, but facts "
            f"found none ({errors[0]}; no /proc/driver/nvidia, /dev/nvidia*): run as a host without GPUs "
            f"(fallback_archs, verify on the CPU) because the host var verify_device: cpu says so; if {node} "
            f"should have its GPUs, its NVIDIA driver is gone (reinstall it, or drain the node)")


def gres_gpu_type(gres: str) -> str | None:
    """The type of one GPU GRES item (pure): ``"gpu:rtx5090:1"`` and ``"gpu:h200:8(S:0-1)"`` ->
    ``"rtx5090"``, ``"h200"``; ``None`` for an untyped one (``"gpu:2"``, ``"gpu"``) or another GRES."""
    m = _GRES.match(gres.strip())
    if not m or m.group("name") != "gpu" or not m.group("type") or m.group("type").isdigit():
        return None
    return m.group("type")


_SM_FEATURE = re.compile(r"^sm_?(?P<major>\d+?)(?P<minor>\d)[af]?$", re.IGNORECASE)


def sm_feature_cap(feature: str) -> str | None:
    """The compute capability a node feature names, as nvidia-smi prints it (pure): ``"sm_90"`` ->
    ``"9.0"``, ``"sm_120"`` -> ``"12.0"``, ``"sm_86"`` -> ``"8.6"``, ``"sm_100a"`` -> ``"10.0"``
    (NVIDIA's ``sm_XY`` arch names, CUDA C++ Programming Guide "Compute Capabilities"); ``None`` for
    any other feature (``"h200"``, ``"ib"``)."""
    m = _SM_FEATURE.match(feature.strip())
    return f"{int(m.group('major'))}.{m.group('minor')}" if m else None


def _squash(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _type_fits(gres_type: str, gpu_name: str) -> bool:
    """Slurm's own rule for a gres.conf ``Type`` with AutoDetect: it matches, or is a substring of,
    the device's name, case-insensitive, ``_`` for spaces (gres.conf(5) ``Type``); also when equal
    after dropping every character but letters and digits (``rtx5090`` in ``NVIDIA GeForce RTX 5090``)."""
    t, name = gres_type.lower(), gpu_name.lower().replace(" ", "_")
    return t in name or (bool(_squash(t)) and _squash(t) in _squash(gpu_name))


def slurm_label_warnings(facts: Mapping[str, Any]) -> list[str]:
    """Warnings for Slurm labels of the node that the GPUs facts found contradict (pure; see the
    module docstring for why they warn and do not fail): a GPU GRES type no GPU's name fits
    (:func:`_type_fits`), a feature ``sm_XY`` (:func:`sm_feature_cap`) no GPU's compute capability
    is. Empty without Slurm's view or without GPUs found (no GPUs: :func:`check_gpu_stack`).

    Example: ``Slurm GRES gpu:rtx5090:1 of node n3 says rtx5090, but facts found NVIDIA H200
    (compute capability 9.0): ...``.
    """
    view = facts.get("slurm")
    gpus = [g for g in facts.get("gpus") or [] if isinstance(g, Mapping)]
    if not isinstance(view, Mapping) or not gpus:
        return []
    node = view.get("node") or "?"
    names = sorted({str(g.get("name") or "") for g in gpus} - {""})
    caps = sorted({str(g.get("compute_cap")) for g in gpus if g.get("compute_cap")})
    found = ", ".join(names) or "unnamed GPUs"
    found += f" (compute capability {', '.join(caps)})" if caps else ""
    built = ", ".join(caps) or "?"

    def tail(label: str) -> str:
        return (f"fleetctl builds and verifies for the GPU found (compute capability {built}), but jobs that ask "
                f"Slurm for {label} land on it: fix node {node} in slurm.conf/gres.conf (or its GPU)")

    out = []
    for gres in view.get("gres") or []:
        kind = gres_gpu_type(str(gres))
        if kind and names and not any(_type_fits(kind, n) for n in names):
            out.append(f"Slurm GRES {gres} of node {node} says {kind}, but facts found {found}: {tail(kind)}")
    for feature in view.get("features") or []:
        cap = sm_feature_cap(str(feature))
        if cap and caps and cap not in caps:
            out.append(f"Slurm feature {feature} of node {node} says compute capability {cap}, but facts found "
                       f"{found}: {tail(feature)}")
    count_line = gres_count_warning(view, gpus, found)
    return out + ([count_line] if count_line else [])


def gres_count_warning(view: Mapping[str, Any], gpus: list[Mapping[str, Any]], found: str) -> str | None:
    """The warning for a node whose GPU GRES count (:func:`gres_gpu_count`, summed over its GPU
    GRES) is not the number of GPUs facts found, or None (pure). Named as ``scontrol show node``
    prints it (``Gres=gpu:h100:4``). Facts run as a step of a job that asked for the node's whole
    GRES list, so the step sees every GPU the GRES gives (Slurm's cgroup device constraint hides
    only GPUs a job did not ask for, cgroup.conf(5) ``ConstrainDevices``): fewer GPUs found means
    jobs asking ``--gres=gpu:N`` land on a node that has fewer (their steps fail or see fewer
    devices); more means GPUs Slurm never hands out. A warning, as for the labels above."""
    gres = [str(g) for g in view.get("gres") or [] if gres_gpu_count(str(g)) > 0]
    want = sum(gres_gpu_count(g) for g in gres)
    have = len(gpus)
    if not gres or want == have:
        return None
    node = view.get("node") or "?"
    head = (f"Slurm's Gres={','.join(gres)} of node {node} (scontrol show node {node}) gives it {want} "
            f"GPU{'s' if want != 1 else ''}, but facts found {have}: {found}")
    if have < want:
        why = (f"jobs that ask Slurm for --gres=gpu:{want} land on it and find {have}; fleetctl builds and "
               f"verifies for the GPU{'s' if have != 1 else ''} found")
    else:
        why = f"Slurm hands out {want} of its {have} GPUs, the others stay idle"
    return f"{head}: {why}: fix node {node}'s Gres in slurm.conf/gres.conf (or its GPUs)"
