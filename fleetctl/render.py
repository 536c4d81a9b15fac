"""Terminal rendering (rich): the only place besides the CLI that prints.

Live output lines are prefixed with the host name, ClusterShell style (``gpu01 | line``); stdout
lines as they are, stderr lines dimmed when the stream is a terminal.
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .connection import OutputLine


class LinePrinter:
    """Prints host-prefixed lines to ``stream`` as they arrive (width-aligned host names)."""

    def __init__(self, hosts: list[str], stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.width = max((len(h) for h in hosts), default=0)
        self.console = Console(file=self.stream, highlight=False, soft_wrap=True)

    def prefix(self, host: str) -> Text:
        """``host | `` padded to the widest host name."""
        return Text(f"{host:<{self.width}} | ", style="bold cyan")

    def __call__(self, host: str, line: OutputLine) -> None:
        text = self.prefix(host)
        text.append(line.text, style="dim" if line.stream == "stderr" else "")
        self.console.print(text, markup=False)


def print_json(doc: Any) -> None:
    """Exactly one JSON document on stdout."""
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def facts_table(facts: dict[str, dict[str, Any]]) -> Table:
    """One row per host: GPUs and SMs, arch list, CUDA, Python/torch, cores, memory, disk."""
    table = Table(title="facts", show_lines=False)
    for col in ("host", "gpus", "arch list", "cuda", "python / torch", "cores", "mem GiB", "disk free GiB", "max jobs"):
        table.add_column(col)
    for host, f in facts.items():
        if not f.get("reachable", True) or "error" in f and "gpus" not in f:
            table.add_row(host, Text(f"UNREACHABLE: {f.get('error')}", style="red"), "", "", "", "", "", "", "")
            continue
        gpus = f.get("gpus") or []
        gpu_s = ", ".join(f"{g.get('name')} ({g.get('compute_cap')})" for g in gpus) or "none"
        build = f.get("build") or {}
        cuda = f.get("cuda") or {}
        py = f.get("python") or {}
        table.add_row(
            host, gpu_s, str(build.get("torch_cuda_arch_list", "")),
            f"{cuda.get('version') or '-'} {cuda.get('home') or ''}",
            f"{py.get('version') or '-'} / torch {py.get('torch') or '-'} (cu {py.get('torch_cuda') or '-'})",
            str(f.get("cpu_count", "")), f"{(f.get('mem_total_mib') or 0) / 1024:.0f}",
            f"{(f.get('disk_free_mib') or 0) / 1024:.0f}", str(build.get("max_jobs", "")),
        )
    return table
