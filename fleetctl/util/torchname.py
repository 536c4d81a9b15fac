"""How a torch build is named in one line: ``torch 2.11.0 (CUDA 13.0)``, or ``torch 2.13.0+cpu (CPU)``
for a torch without CUDA (``torch.version.cuda`` is None: a fresh trial's report read ``(CUDA None)``).
Every message that names a torch and its CUDA says it through :func:`torch_label`. Pure."""

from __future__ import annotations

from typing import Any

__all__ = ["torch_label"]


def torch_label(version: Any, cuda: Any, note: str | None = None) -> str:
    """``torch VERSION (CUDA X)``, ``torch VERSION (CPU)`` when ``cuda`` is None, empty or the text
    ``None`` (how a CPU-only torch's ``torch.version.cuda`` reads once printed); ``note`` goes inside
    the brackets after it (``(CUDA 13.0, recorded inside the build)``)."""
    what = "CPU" if cuda is None or str(cuda).strip() in ("", "None") else f"CUDA {cuda}"
    return f"torch {version} ({what}{', ' + note if note else ''})"
