"""Node sets: many host names in one string, as Ansible and ClusterShell users write them.

Two bracket syntaxes expand a name into many; both may repeat in one name (``r[1:2]n[01-04]``):

- Ansible's host ranges ("Adding ranges of hosts",
  https://docs.ansible.com/ansible/latest/inventory_guide/intro_inventory.html#adding-ranges-of-hosts):
  ``[BEGIN:END]`` or ``[BEGIN:END:STEP]``, inclusive, numbers or single letters (``[a:f]``). A
  zero-padded BEGIN (``01``) pads every number to its width and END must have that width; an empty
  BEGIN means 0. Values come in Ansible's order (ascending, the leftmost range varying slowest).
  fleetctl refuses what Ansible silently turns into no host at all: a range that ends before it
  begins.
- ClusterShell's node sets (``nodeset(1)``, https://clustershell.readthedocs.io/en/latest/tools/nodeset.html),
  read by ClusterShell's own :class:`~ClusterShell.NodeSet.NodeSet`: ``[01-16,20,30-40/2]``, several
  ranges in one name (``n[1-2]-ib[0-1]``), suffixes (``gpu[01-02].dc1.example.com``), mixed
  padding (``n[9,09-11]``), and the operators ``,`` (union), ``!`` (difference), ``&``
  (intersection) and ``^`` (symmetric difference), applied left to right. A padding mismatch
  (``node[01-1]``) is refused, as ClusterShell refuses it. ClusterShell's ``@group`` syntax is not
  read (fleetctl's groups are the inventory's).

:func:`expand_host_key` expands an inventory host key (order matters there: it is the order the
hosts join their group); :func:`expand_nodeset` expands a node set in ClusterShell's order;
:func:`fold_hosts` folds names back into the shortest node set ClusterShell writes.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable
from typing import TYPE_CHECKING

from fleetctl.errors import InventoryError

if TYPE_CHECKING:  # ClusterShell itself is imported where a range or node set is read (7 ms a start)
    from ClusterShell.NodeSet import NodeSet

__all__ = ["MAX_EXPANSION", "NodesetError", "expand_host_key", "expand_nodeset", "fold_hosts", "split_top"]

MAX_EXPANSION = 100_000
"""The most names one node set may expand to (a typo like ``node[0:99999999]`` is refused)."""

_OPERATORS = ",!&^"
_UNFOLDABLE = re.compile(r"[\[\],!&^\s]")


class NodesetError(ValueError):
    """A bracket range in a host name or node set is malformed; ``str`` says why, in one line."""


def split_top(text: str, seps: str) -> list[str]:
    """Split ``text`` at ``seps`` characters outside ``[]`` (ranges stay whole)."""
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]" and depth > 0:
            depth -= 1
        if ch in seps and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


_CLUSTERSHELL_REASONS = {
    "invalid values in range": "begins after it ends",
    "padding length mismatch": "has begin and end zero-padded to different widths (ClusterShell refuses this)",
    "cannot convert string to integer": "is not N, N-M or N-M/STEP",
    "empty range": "has an empty element",
}


def _clustershell_reason(exc: Exception) -> str:
    """ClusterShell's parse error in words: ``range '5-1' begins after it ends``."""
    text = str(exc)
    if text.startswith('bad range: "') and text.endswith('"'):
        text = text[len('bad range: "'):-1]
    reason, _, part = text.partition(' : "')
    reason = reason.strip()
    if reason in _CLUSTERSHELL_REASONS:
        part = part.rstrip('"')
        return f"range {part!r} {_CLUSTERSHELL_REASONS[reason]}" if part else f"a range {_CLUSTERSHELL_REASONS[reason]}"
    return text


def _ansible_range(body: str) -> list[str]:
    """Values of one Ansible ``[BEGIN:END[:STEP]]`` range, in Ansible's order."""
    bounds = body.split(":")
    if len(bounds) not in (2, 3):
        raise NodesetError(f"range [{body}] must be [begin:end] or [begin:end:step]")
    beg, end = bounds[0].strip(), bounds[1].strip()
    step_text = bounds[2].strip() if len(bounds) == 3 else "1"
    beg = beg or "0"
    if not end:
        raise NodesetError(f"range [{body}] has no end value")
    if not (step_text.isascii() and step_text.isdigit()) or int(step_text) < 1:
        raise NodesetError(f"range [{body}] step must be a positive integer")
    step = int(step_text)
    if len(beg) == 1 and len(end) == 1 and beg in string.ascii_letters and end in string.ascii_letters:
        i_beg, i_end = string.ascii_letters.index(beg), string.ascii_letters.index(end)
        if i_beg > i_end:
            raise NodesetError(f"range [{body}] begins after it ends")
        return list(string.ascii_letters[i_beg : i_end + 1 : step])
    if not (beg.isdigit() and end.isdigit() and beg.isascii() and end.isascii()):
        raise NodesetError(f"range [{body}] must be numbers or single letters")
    width = 0
    if beg[0] == "0" and len(beg) > 1:
        width = len(beg)
        if len(end) != width:
            raise NodesetError(f"range [{body}] zero-pads its begin, so begin and end must have the same width")
    i_beg, i_end = int(beg), int(end)
    if i_beg > i_end:
        raise NodesetError(f"range [{body}] begins after it ends")
    if (i_end - i_beg) // step + 1 > MAX_EXPANSION:
        raise NodesetError(f"range [{body}] expands to more than {MAX_EXPANSION} names")
    return [str(v).zfill(width) for v in range(i_beg, i_end + 1, step)]


def _clustershell_range(body: str) -> list[str]:
    """Values of one ClusterShell range set ``[01-16,20,30-40/2]`` (ClusterShell's RangeSet)."""
    from ClusterShell.RangeSet import RangeSet, RangeSetParseError

    if not body.strip():
        raise NodesetError("empty brackets []")
    try:
        values = RangeSet(body)
    except RangeSetParseError as exc:
        raise NodesetError(_clustershell_reason(exc)) from None
    if len(values) > MAX_EXPANSION:
        raise NodesetError(f"range [{body}] expands to more than {MAX_EXPANSION} names")
    return list(values)


def expand_host_key(name: str) -> list[str]:
    """Expand the bracket ranges in one inventory host key (no top-level commas).

    ``expand_host_key("node[01:03]")`` -> ``["node01", "node02", "node03"]``; a name without
    brackets expands to itself. Brackets holding ``:`` are Ansible's ranges, other brackets
    ClusterShell's; the leftmost range varies slowest, as in Ansible's ``expand_hostname_range``.

    Raises:
        NodesetError: unbalanced brackets, a malformed range, or more than :data:`MAX_EXPANSION`
            names.
    """
    start = name.find("[")
    if start < 0:
        if "]" in name:
            raise NodesetError(f"{name!r} has ']' without '['")
        return [name]
    stop = name.find("]", start)
    if stop < 0:
        raise NodesetError(f"{name!r} has '[' without ']'")
    head, body, tail = name[:start], name[start + 1 : stop], name[stop + 1 :]
    if "[" in body or "]" in head:
        raise NodesetError(f"{name!r} has unbalanced brackets")
    if not body.strip():
        raise NodesetError("empty brackets []")
    values = _ansible_range(body) if ":" in body else _clustershell_range(body)
    tails = expand_host_key(tail)
    if len(values) * len(tails) > MAX_EXPANSION:
        raise NodesetError(f"{name!r} expands to more than {MAX_EXPANSION} names")
    return [head + value + rest for value in values for rest in tails]


def _operand(text: str) -> NodeSet:
    """One node set operand (no operators); Ansible ranges are expanded first."""
    from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetParseError

    if re.search(r"\[\s*\]", text):
        raise NodesetError("empty brackets []")
    if re.search(r"\[[^\]]*:[^\]]*\]", text):
        return NodeSet.fromlist(expand_host_key(text), resolver=RESOLVER_NOGROUP)
    try:
        return NodeSet(text, resolver=RESOLVER_NOGROUP)
    except NodeSetParseError as exc:
        reason = _clustershell_reason(exc)
        if "missing bracket" in reason:
            reason = f"{text!r} has '[' without ']'"
        elif "illegal closing bracket" in reason:
            reason = f"{text!r} has ']' without '['"
        raise NodesetError(reason) from None


def parse_nodeset(text: str) -> NodeSet:
    """A ClusterShell :class:`NodeSet` for ``text``; Ansible ``[a:b]`` ranges are accepted too.

    Raises:
        NodesetError: malformed (a missing operand, a bad range, a padding mismatch), or more than
            :data:`MAX_EXPANSION` names.
    """
    from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetError

    if not text.strip():
        return NodeSet(resolver=RESOLVER_NOGROUP)
    result: NodeSet | None = None
    pos = 0
    op = ","
    for piece in split_top(text, _OPERATORS):
        operand = piece.strip()
        if not operand:
            raise NodesetError(f"missing node set operand with {op!r} operator" if result is not None or op != ","
                               else f"{text!r} starts with an operator")
        try:
            ns = _operand(operand)
        except NodeSetError as exc:  # pragma: no cover - ClusterShell errors are translated in _operand
            raise NodesetError(_clustershell_reason(exc)) from None
        if result is None:
            result = ns
        elif op == ",":
            result.update(ns)
        elif op == "!":
            result.difference_update(ns)
        elif op == "&":
            result.intersection_update(ns)
        else:
            result.symmetric_difference_update(ns)
        if len(result) > MAX_EXPANSION:
            raise NodesetError(f"expands to more than {MAX_EXPANSION} names")
        pos += len(piece)
        op = text[pos] if pos < len(text) else ","
        pos += 1
    assert result is not None
    return result


def expand_nodeset(nodeset: str) -> list[str]:
    """Expand a node set to host names, in ClusterShell's order, each once.

    ``expand_nodeset("gpu[01-03],cpu[1:2]")`` -> ``["cpu1", "cpu2", "gpu01", "gpu02", "gpu03"]``;
    ``expand_nodeset("n[1-5]!n[2-3]")`` -> ``["n1", "n4", "n5"]``.

    Raises:
        InventoryError: the node set is malformed (one line naming it and the problem).
    """
    try:
        return list(parse_nodeset(nodeset))
    except NodesetError as exc:
        raise InventoryError(f"invalid node set {nodeset!r}: {exc}") from None


def fold_hosts(names: Iterable[str]) -> str:
    """Fold host names into a ClusterShell node set: ``gpu01 gpu02 gpu03 gpu07`` -> ``gpu[01-03,07]``.

    ClusterShell's own folding: across several numbers in a name (``n[1-2]-ib[0-1]``), with
    suffixes (``gpu[01-02].dc1.example.com``), keeping each number's padding (``n[9,09-11]``).
    :func:`expand_nodeset` of the result gives back exactly the same set of names. A name that a
    node set cannot hold (one containing ``[ ] , ! & ^`` or whitespace; inventories refuse such
    host names) is listed as it is, after the folded ones.
    """
    plain: list[str] = []
    foldable: list[str] = []
    for name in dict.fromkeys(names):
        (plain if not name or _UNFOLDABLE.search(name) else foldable).append(name)
    folded = ""
    if foldable:
        from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

        folded = str(NodeSet.fromlist(foldable, resolver=RESOLVER_NOGROUP))
    return ",".join([p for p in [folded] if p] + sorted(plain))
