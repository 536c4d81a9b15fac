"""Host-prefixed output lines without rich: what ``fleetctl run`` prints as hosts answer.

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
