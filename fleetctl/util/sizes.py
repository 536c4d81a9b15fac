"""Byte counts as operators read them (powers of 1024), for every message that names a size."""

from __future__ import annotations


def human_bytes(n: int) -> str:
    """``"0 bytes"``, ``"512 KiB"``, ``"12 MiB"``, ``"2.2 GiB"`` (powers of 1024)."""
    if n < 1024:
        return f"{n} bytes"
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
        if n >= size:
            value = n / size
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{n // 1024} KiB"
