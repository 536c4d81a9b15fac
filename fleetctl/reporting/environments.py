"""The host's Python environment as the report and the metrics show it (the run record's per-host
``environment``, filled by ``venv_stage``/``venv_upgrade``/``venv_switch``; docs/staged.md). Pure."""

from __future__ import annotations

from typing import Any

from ..util.torchname import torch_label


def _short(sha: str | None) -> str:
    return (sha or "")[:12]


def contents(env: dict[str, Any]) -> str:
    """``torch 2.11.0 (CUDA 13.0); fp4_kernels 0.1.0 (wheel 1a2b3c4d5e6f)`` (a CPU torch: ``(CPU)``)."""
    parts = []
    if env.get("torch"):
        parts.append(torch_label(env['torch'], env.get('torch_cuda')))
    for dist, k in sorted((env.get("kernels") or {}).items()):
        sha = k.get("wheel_sha256") or k.get("files_sha256")
        parts.append(f"{dist} {k.get('version')} ({'wheel' if k.get('wheel_sha256') else 'files'} {_short(sha)})")
    return "; ".join(parts)


def from_facts(facts: dict[str, Any] | None) -> dict[str, Any] | None:
    """The environment a host runs as its facts saw it (``facts["environments"]``: a venv that is a
    symlink to a staged version), for runs whose tasks did not stage or switch (verify, an
    in-place deploy); ``None`` for a venv that is not staged."""
    envs = (facts or {}).get("environments") or {}
    n = envs.get("live_version")
    if n is None:
        return None
    v = (envs.get("versions") or {}).get(str(n)) or {}
    return {"state": "live", "live": {"version": n, "live_since": v.get("live_since"), "torch": v.get("torch"),
                                      "torch_cuda": v.get("torch_cuda")},
            "disk": envs.get("disk"), "from_facts": True}


def environment_line(env: dict[str, Any] | None) -> str | None:
    """One line: which environment the host runs, since when, what it holds; and, after a failed
    stage, which stage failed (the live one untouched)."""
    if not env:
        return None
    live = env.get("live") or {}
    version = f"v{live['version']}" if live.get("version") is not None else "the live folder"
    since = f" since {live['live_since']}" if live.get("live_since") else ""
    text = f"{version}{since}"
    held = contents(live)
    if held:
        text += f": {held}"
    state = env.get("state")
    staged = env.get("staged") or {}
    if state == "not switched":
        text += (f" (unchanged: staged v{staged.get('version')} failed at {env.get('failed_stage')}, "
                 f"{env.get('failed_task')})")
    elif state == "staged":
        text += f" (staged v{staged.get('version')} not switched)"
    elif state == "live" and env.get("switched") and env.get("previous") is not None:
        text += f" (switched from v{env['previous']})"
    return text


def metric_labels(env: dict[str, Any]) -> dict[str, str]:
    """The labels of ``fleetctl_host_environment`` (Prometheus Info)."""
    live = env.get("live") or {}
    kernels = live.get("kernels") or {}
    return {"version": str(live.get("version") if live.get("version") is not None else ""),
            "state": str(env.get("state") or ""), "torch": str(live.get("torch") or ""),
            "torch_cuda": str(live.get("torch_cuda") or ""), "live_since": str(live.get("live_since") or ""),
            "kernels": ",".join(f"{d}={_short(k.get('wheel_sha256') or k.get('files_sha256'))}"
                                for d, k in sorted(kernels.items())),
            "failed_stage": str(env.get("failed_stage") or "")}
