"""Host-prefixed output lines without rich: what ``fleetctl run`` prints as hosts answer, and
``fleetctl facts``' line per host as each host's facts come in (:class:`FactsLines`).

``gpu01 | line`` (ClusterShell style), host names padded to the widest; on a terminal the prefix
is bold cyan and stderr lines dim (ANSI SGR; ``NO_COLOR`` turns colour off), elsewhere plain
text. The characters rich drops from printed text (bell, backspace, vertical tab, form feed,
carriage return) are dropped here too, so a host cannot move the cursor over other hosts' lines.

``fleetctl run`` needs nothing else of rich, whose import is a sixth of its start-up; the
playbook commands keep :mod:`fleetctl.reporting.terminal`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from typing import Any, TextIO

from ..connection.base import OutputLine

_DROP = str.maketrans("", "", "\a\b\v\f\r")
_BOLD_CYAN, _DIM, _RESET = "\x1b[1;36m", "\x1b[2m", "\x1b[0m"


class HostLines:
    """An observer printing every shown output line as ``host | text`` to ``stream``.

    Args:
        hosts: every host of the run (the prefix is padded to the longest name).
        stream: where to print (default stdout).
    """

    def __init__(self, hosts: list[str], stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.width = max((len(h) for h in hosts), default=0)
        isatty = getattr(self.stream, "isatty", lambda: False)
        self.color = bool(isatty()) and not os.environ.get("NO_COLOR")

    def __call__(self, host: str, line: OutputLine) -> None:
        text = line.text.translate(_DROP)
        prefix = f"{host:<{self.width}} | "
        if self.color:
            style = _DIM if line.stream == "stderr" else ""
            out = f"{_BOLD_CYAN}{prefix}{_RESET}{style}{text}{_RESET if style else ''}\n"
        else:
            out = f"{prefix}{text}\n"
        self.stream.write(out)
        self.stream.flush()

    def line(self, run: Any, host: str, line: OutputLine, shown: bool = True) -> None:
        if shown:
            self(host, OutputLine(line.stream, run.redactor.bytes(line.data)))


#: The columns of ``fleetctl facts``' table, in order (:func:`facts_row`).
FACTS_COLUMNS = ("host", "gpus", "arch list", "cuda", "cmake", "python / torch", "cores", "mem GiB",
                 "workdir free GiB", "venv free", "max jobs")


def _venv_free(f: dict[str, Any]) -> str:
    """The free space of the venv's file system (``python.site_packages_fs``): where an install
    writes, often not the workdir's (operator trial: facts showed the workdir's 72 GiB for a venv
    on a tmpfs with 25 MiB free). MiB under 10 GiB, else GiB; ``-`` when not measured."""
    free = ((f.get("python") or {}).get("site_packages_fs") or {}).get("free_mib")
    if not isinstance(free, int) or isinstance(free, bool):
        return "-"
    return f"{free} MiB" if free < 10240 else f"{free / 1024:.0f} GiB"


def facts_failed(f: dict[str, Any]) -> bool:
    """Whether a ``fleetctl facts --json`` entry is a host that could not be reached or read."""
    return not f.get("reachable", True) or "error" in f and ("gpus" not in f or f.get("status") == "failed")


def _cmake(f: dict[str, Any]) -> str:
    """The build's cmake (facts ``cmake``: the venv's ``bin/cmake``, else the login PATH's first):
    ``3.28.3 /usr/bin/cmake``, ``- (cmake: not found)`` when there is none."""
    cmake = f.get("cmake") or {}
    if not cmake.get("path"):
        return f"- ({cmake['error']})" if cmake.get("error") else "-"
    return f"{cmake.get('version') or '?'} {cmake['path']}"


def facts_row(host: str, f: dict[str, Any]) -> list[str]:
    """One reachable host's cells, :data:`FACTS_COLUMNS` in order (memory and the workdir's free disk
    in GiB = 2**30 bytes; the venv's free disk in MiB or GiB; cmake as :func:`_cmake`)."""
    gpus = f.get("gpus") or []
    build, cuda, py = f.get("build") or {}, f.get("cuda") or {}, f.get("python") or {}
    return [host, ", ".join(f"{g.get('name')} ({g.get('compute_cap')})" for g in gpus) or "none",
            str(build.get("torch_cuda_arch_list", "")), f"{cuda.get('version') or '-'} {cuda.get('home') or ''}".strip(),
            _cmake(f),
            f"{py.get('version') or '-'} / torch {py.get('torch') or '-'} (cu {py.get('torch_cuda') or '-'})",
            str(f.get("cpu_count", "")), f"{(f.get('mem_total_mib') or 0) / 1024:.0f}",
            f"{(f.get('disk_free_mib') or 0) / 1024:.0f}", _venv_free(f), str(build.get("max_jobs", ""))]


class FactsLines:
    """An observer printing one line per host as soon as that host's facts are in (as Ansible
    prints each host's result as it comes), so a host that hangs delays nobody else's:
    ``gpu01: ok: gpus NVIDIA H200 (9.0); arch list 9.0a; ...`` (the table's columns),
    ``gpu03: WARNING (below): ...`` when a ``warning:`` note says what an operator must see that
    leaves the host ``ok`` (a builder-only problem: the notes at the end), or ``gpu02: FAILED`` /
    ``UNREACHABLE`` with the cause left to the end of the output (a host a deploy refuses, such as
    a missing venv or a read-only workdir, is ``failed``: :mod:`fleetctl.facts.refusals`; one
    whose facts were gathered keeps its cells: ``gpu04: FAILED (the cause below): gpus ...``).

    Args:
        entry: ``(run, host) -> dict``, the host's ``fleetctl facts --json`` entry.
        stream: where to print (default stdout).
        brief: a line is the host and its state alone (``m007: ok``): above the fold threshold,
            where the table at the end folds identical hosts into one row, 120 lines repeating
            the same columns would bury it.
    """

    def __init__(self, entry: Any, stream: TextIO | None = None, brief: bool = False) -> None:
        self.entry = entry
        self.stream = stream or sys.stdout
        self.brief = brief

    def event(self, run: Any, event: Any) -> None:
        if event.name == "host.refused" and event.host is not None:  # after its line (a venv a later host shares)
            text = f"{event.host}: FAILED (found after its line above; the cause below)"
            self.stream.write(run.redactor.text(text.translate(_DROP)) + "\n")
            self.stream.flush()
            return
        if event.name != "host.finished" or event.host is None:
            return
        f = self.entry(run, event.host)
        if facts_failed(f) and (not f.get("reachable", True) or "gpus" not in f or self.brief):
            text = f"{event.host}: {'UNREACHABLE' if not f.get('reachable', True) else 'FAILED'} (the cause below)"
        elif facts_failed(f):  # gathered, then refused: its cells still say what was found (venv free 0 MiB)
            text = f"{event.host}: FAILED (the cause below): " + "; ".join(
                f"{k} {v}" for k, v in zip(FACTS_COLUMNS[1:], facts_row(event.host, f)[1:]))
        else:
            cells = facts_row(event.host, f)
            warned = any(str(n).startswith("warning: ") for n in (f.get("build") or {}).get("notes") or [])
            # ok, but a warning an operator must see never reads as a healthy "ok"
            text = f"{event.host}: {'WARNING (below)' if warned else 'ok'}" + ("" if self.brief else ": " + "; ".join(
                f"{k} {v}" for k, v in zip(FACTS_COLUMNS[1:], cells[1:])))
        self.stream.write(run.redactor.text(text.translate(_DROP)) + "\n")
        self.stream.flush()


def print_json(doc: Any) -> None:
    """Exactly one JSON document on stdout, written as it is encoded (1,000 hosts' facts are
    megabytes: never one string in memory)."""
    json.dump(doc, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")
    sys.stdout.flush()


def print_json_hosts(head: dict[str, Any], parts: Iterable[str]) -> None:
    """:func:`print_json` of ``{**head, "hosts": {...}}``, the same text, the hosts given as their
    parts already encoded (``    "name": {...}``, indented for that depth: what
    :meth:`fleetctl.reporting.record.RunRecord.host_parts` yields for run.json, made once for
    both), each written when its turn comes: the document of 10,000 hosts is never whole in
    memory, neither as text nor as objects."""
    mark = "\x00fleetctl-hosts"
    before, _, after = json.dumps({**head, "hosts": mark}, indent=2, default=str).partition(json.dumps(mark))
    out = sys.stdout
    out.write(before)
    sep = "{"
    for text in parts:
        out.write(f"{sep}\n{text}")
        sep = ","
    out.write("{}" if sep == "{" else "\n  }")
    out.write(after + "\n")
    out.flush()
