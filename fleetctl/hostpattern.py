"""Host patterns and node sets, as Ansible and ClusterShell users type them.

Nothing here knows about files: patterns are evaluated against a :class:`HostIndex` (host names in
inventory order, and each group's hosts). :meth:`fleetctl.inventory.Inventory.select` builds one.

Node sets (host name ranges)
----------------------------
Two bracket syntaxes expand to many names; both may repeat in one name (``r[1:2]n[01:04]``):

- Ansible's, as in inventory host keys ("Adding ranges of hosts",
  https://docs.ansible.com/ansible/latest/inventory_guide/intro_inventory.html#adding-ranges-of-hosts):
  ``[BEGIN:END]`` or ``[BEGIN:END:STEP]``, inclusive, numeric or one letter each (``[a:f]``). A
  zero-padded BEGIN (``01``) pads every number to its width, and END must then have the same
  width, as Ansible requires. An empty BEGIN means 0.
- ClusterShell's node sets (``nodeset(1)``): ``[01-16,20,30-40/2]``, a comma list of numbers,
  ``A-B`` ranges and ``A-B/STEP`` ranges; a zero-padded A pads the range to its width.

:func:`expand_nodeset` expands either; :func:`fold_hosts` folds names back the ClusterShell way
(``gpu[01-03,07]``).

Patterns
--------
Following "Patterns: targeting hosts and groups"
(https://docs.ansible.com/ansible/latest/inventory_guide/intro_patterns.html):

- terms are separated by ``,`` or ``:`` (outside brackets, so ``node[01:16]`` and
  ``node[01-16,20]`` stay whole); a term prefixed ``&`` intersects, ``!`` excludes;
- evaluation order is Ansible's (``ansible.inventory.manager.order_patterns``): all plain terms are
  unioned first, then every ``&`` term intersects, then every ``!`` term is removed, wherever they
  appear in the pattern; a pattern with only ``&``/``!`` terms starts from ``all``;
- a term is, in this order: ``~REGEX`` (Python ``re.match`` against group and host names, as
  Ansible), a group name (its hosts, children's included), a host name, a glob with ``*`` or ``?``
  (``fnmatch``, case-sensitive, against group and host names), ``GROUP[I]`` / ``GROUP[I:J]`` /
  ``GROUP[I:]`` (Ansible's subscripts: hosts of GROUP by position, inclusive, ``[-1]`` the last),
  or a node set (``node[01:16]``, ``node[01-16,20]``) whose every name must be a host or group.
  Brackets after a *group* name are Ansible's subscript; after anything else, a node set; in a
  term with ``*`` or ``?`` they are fnmatch character classes;
- ``--limit`` (Ansible's ``--limit``/subset) is another pattern intersected with the result;
  ``@FILE`` in a limit reads one pattern per line from FILE, as Ansible's ``--limit @retry_file``.

Unlike Ansible, which warns and carries on, a term that names nothing (not a glob or regex) is an
error with a did-you-mean, and so is a pattern that selects no host at all: a typo must not turn
a deploy into a silent no-op. The result is always in inventory order.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from fleetctl.errors import InventoryError

__all__ = [
    "MAX_EXPANSION",
    "HostIndex",
    "PatternError",
    "NodesetError",
    "expand_nodeset",
    "expand_name",
    "fold_hosts",
    "split_pattern",
    "select_hosts",
]

MAX_EXPANSION = 100_000
"""The most names one node set may expand to (a typo like ``node[0:99999999]`` is refused)."""

_GLOB_CHARS = frozenset("*?")
_SUBSCRIPT = re.compile(r"^(?P<base>.+)\[(?:(?P<idx>-?\d+)|(?P<start>\d+):(?P<end>\d*))\]$")
_LAST_NUMBER = re.compile(r"^(?P<prefix>.*?)(?P<digits>\d+)(?P<suffix>\D*)$")


class NodesetError(ValueError):
    """A bracket range in a host name or pattern is malformed; ``str`` says why, in one line."""


class PatternError(InventoryError):
    """A host pattern (or ``--limit``) is malformed, names nothing, or selects no host.

    Attributes:
        pattern: the term or pattern at fault, as typed.
        source: the inventory it was matched against, as the user named it.
    """

    def __init__(self, message: str, *, pattern: str, source: str) -> None:
        self.pattern = pattern
        self.source = source
        super().__init__(message)


@dataclass(frozen=True)
class HostIndex:
    """What a pattern is matched against.

    Attributes:
        hosts: every host name, in inventory order.
        groups: group name -> its host names (children's included), each in inventory order.
        source: how to name the inventory in messages (its path as the user gave it).
    """

    hosts: Sequence[str]
    groups: Mapping[str, Sequence[str]]
    source: str = "the inventory"
    _order: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._order.update((name, i) for i, name in enumerate(self.hosts))

    def order(self, names: Iterable[str]) -> list[str]:
        """``names`` without duplicates, sorted into inventory order."""
        return sorted(set(names), key=self._order.__getitem__)


# -- node sets ----------------------------------------------------------------------------------


def _ansible_range(body: str) -> list[str]:
    """Values of one Ansible ``[BEGIN:END[:STEP]]`` range (ansible's ``expand_hostname_range``)."""
    bounds = body.split(":")
    if len(bounds) not in (2, 3):
        raise NodesetError(f"range [{body}] must be [begin:end] or [begin:end:step]")
    beg, end = bounds[0].strip(), bounds[1].strip()
    step_text = bounds[2].strip() if len(bounds) == 3 else "1"
    if not beg:
        beg = "0"
    if not end:
        raise NodesetError(f"range [{body}] has no end value")
    if not step_text.isdigit() or int(step_text) < 1:
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
            raise NodesetError(
                f"range [{body}] zero-pads its begin, so begin and end must have the same width"
            )
    i_beg, i_end = int(beg), int(end)
    if i_beg > i_end:
        raise NodesetError(f"range [{body}] begins after it ends")
    if (i_end - i_beg) // step + 1 > MAX_EXPANSION:
        raise NodesetError(f"range [{body}] expands to more than {MAX_EXPANSION} names")
    return [str(v).zfill(width) for v in range(i_beg, i_end + 1, step)]


def _clustershell_range(body: str) -> list[str]:
    """Values of one ClusterShell range set ``[01-16,20,30-40/2]``."""
    values: list[str] = []
    for item in body.split(","):
        item = item.strip()
        if not item:
            raise NodesetError(f"range [{body}] has an empty element")
        bounds, _, step_text = item.partition("/")
        lo, dash, hi = bounds.partition("-")
        if not (lo.isdigit() and lo.isascii()) or (dash and not (hi.isdigit() and hi.isascii())):
            raise NodesetError(f"range [{body}]: {item!r} is not N, N-M or N-M/STEP")
        if not dash:
            if step_text:
                raise NodesetError(f"range [{body}]: {item!r} has a step but no range")
            values.append(lo)
            continue
        if step_text and not (step_text.isdigit() and int(step_text) >= 1):
            raise NodesetError(f"range [{body}]: step in {item!r} must be a positive integer")
        step = int(step_text) if step_text else 1
        width = len(lo) if lo[0] == "0" and len(lo) > 1 else 0
        i_lo, i_hi = int(lo), int(hi)
        if i_lo > i_hi:
            raise NodesetError(f"range [{body}]: {item!r} begins after it ends")
        if len(values) + (i_hi - i_lo) // step + 1 > MAX_EXPANSION:
            raise NodesetError(f"range [{body}] expands to more than {MAX_EXPANSION} names")
        values.extend(str(v).zfill(width) for v in range(i_lo, i_hi + 1, step))
    return values


def _range_values(body: str) -> list[str]:
    if not body.strip():
        raise NodesetError("empty brackets []")
    if ":" in body:
        return _ansible_range(body)
    return _clustershell_range(body)


def expand_name(name: str) -> list[str]:
    """Expand the bracket ranges in one host name (no top-level commas).

    ``expand_name("node[01:03]")`` -> ``["node01", "node02", "node03"]``; a name without brackets
    expands to itself.

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
    values = _range_values(body)
    tails = expand_name(tail)
    if len(values) * len(tails) > MAX_EXPANSION:
        raise NodesetError(f"{name!r} expands to more than {MAX_EXPANSION} names")
    return [head + value + rest for value in values for rest in tails]


def _split_top(text: str, seps: str) -> list[str]:
    """Split at ``seps`` characters outside ``[]``, ``()`` and ``{}``."""
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch in "[({":
            depth += 1
        elif ch in "])}" and depth > 0:
            depth -= 1
        if ch in seps and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def expand_nodeset(nodeset: str) -> list[str]:
    """Expand a node set to host names, in the order written, without duplicates.

    Accepts ClusterShell node sets and Ansible ranges, several names separated by commas:
    ``expand_nodeset("gpu[01-03],cpu[1:2]")`` -> ``["gpu01", "gpu02", "gpu03", "cpu1", "cpu2"]``.

    Raises:
        InventoryError: the node set is malformed (one line naming it and the problem).
    """
    out: dict[str, None] = {}
    try:
        for part in _split_top(nodeset, ","):
            part = part.strip()
            if part:
                for name in expand_name(part):
                    out[name] = None
                    if len(out) > MAX_EXPANSION:
                        raise NodesetError(f"expands to more than {MAX_EXPANSION} names")
    except NodesetError as exc:
        raise InventoryError(f"invalid node set {nodeset!r}: {exc}") from None
    return list(out)


def fold_hosts(names: Iterable[str]) -> str:
    """Fold host names into a ClusterShell node set: ``gpu01 gpu02 gpu03 gpu07`` -> ``gpu[01-03,07]``.

    Names are grouped by what comes before and after their last run of digits; numbers keep their
    zero padding (``node09,node10`` -> ``node[09-10]``). Names without digits, or with characters
    that would be ambiguous in a node set (``[ ] ,``), are listed as they are. The result is
    sorted and :func:`expand_nodeset` gives back exactly the same set of names.
    """
    plain: set[str] = set()
    # (prefix, suffix) -> list of digit strings
    numbered: dict[tuple[str, str], set[str]] = {}
    for name in set(names):
        m = _LAST_NUMBER.match(name)
        if not m or any(c in name for c in "[],") or not m.group("digits").isascii():
            plain.add(name)
            continue
        numbered.setdefault((m.group("prefix"), m.group("suffix")), set()).add(m.group("digits"))

    pieces: list[tuple[tuple, str]] = [((name, "", -1), name) for name in plain]
    for (prefix, suffix), digit_strings in numbered.items():
        pads = sorted({len(d) for d in digit_strings if d[0] == "0" and len(d) > 1})
        by_pad: dict[int, list[int]] = {}
        for d in digit_strings:
            if d[0] == "0" and len(d) > 1:
                pad = len(d)
            else:  # no leading zero: fits any padding not wider than itself
                pad = max((p for p in pads if p <= len(d)), default=0)
            by_pad.setdefault(pad, []).append(int(d))
        for pad, values in by_pad.items():
            values.sort()
            if len(values) == 1:
                pieces.append(((prefix, suffix, pad), f"{prefix}{str(values[0]).zfill(pad)}{suffix}"))
                continue
            runs: list[str] = []
            lo = prev = values[0]
            for v in values[1:] + [None]:  # type: ignore[list-item]
                if v is not None and v == prev + 1:
                    prev = v
                    continue
                runs.append(
                    str(lo).zfill(pad) if lo == prev else f"{str(lo).zfill(pad)}-{str(prev).zfill(pad)}"
                )
                if v is not None:
                    lo = prev = v
            pieces.append(((prefix, suffix, pad), f"{prefix}[{','.join(runs)}]{suffix}"))
    pieces.sort(key=lambda p: p[0])
    return ",".join(text for _key, text in pieces)


# -- patterns -----------------------------------------------------------------------------------


def split_pattern(pattern: str, exact: Iterable[str] = ()) -> list[str]:
    """Split a pattern into terms, each keeping its ``&``/``!`` prefix.

    Separators are ``,`` and ``:`` outside brackets (Ansible's ``split_host_pattern``, made
    bracket-aware so ClusterShell's ``node[1-2,5]`` survives). A comma-separated piece that is one
    of the ``exact`` names (an IPv6 host such as ``fe80::1``) is not split at its colons.
    Empty terms are dropped.
    """
    exact_set = set(exact)
    terms: list[str] = []
    for piece in _split_top(pattern, ","):
        piece = piece.strip()
        if not piece:
            continue
        bare = piece[1:] if piece[0] in "&!" else piece
        if bare in exact_set or bare.startswith("~"):
            terms.append(piece)
            continue
        terms.extend(t.strip() for t in _split_top(piece, ":") if t.strip())
    return terms


def _suggest(word: str, index: HostIndex) -> str:
    candidates = list(dict.fromkeys([*index.groups, *index.hosts]))
    close = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _match_term(body: str, index: HostIndex, what: str) -> list[str]:
    """Host names one term (without its ``&``/``!``) stands for; see the module docstring."""
    host_set = set(index._order)
    if body.startswith("~"):
        try:
            regex = re.compile(body[1:])
        except re.error as exc:
            raise PatternError(
                f"{what} {body!r} is not a valid regular expression: {exc}",
                pattern=body,
                source=index.source,
            ) from None
        found = [h for g, hosts in index.groups.items() if regex.match(g) for h in hosts]
        found.extend(h for h in index.hosts if regex.match(h))
        return found
    if body in index.groups:
        return list(index.groups[body])
    if body in host_set:
        return [body]
    if any(c in _GLOB_CHARS for c in body):
        found = [h for g, hosts in index.groups.items() if fnmatch.fnmatchcase(g, body) for h in hosts]
        found.extend(h for h in index.hosts if fnmatch.fnmatchcase(h, body))
        return found
    if "[" in body or "]" in body:
        m = _SUBSCRIPT.match(body)
        if m and m.group("base") in index.groups:
            return _subscript(m, index, what, body)
        try:
            names = expand_name(body)
        except NodesetError as exc:
            raise PatternError(
                f"{what} {body!r} is not a valid host range: {exc}", pattern=body, source=index.source
            ) from None
        found: list[str] = []
        missing: list[str] = []
        for name in names:
            if name in index.groups:
                found.extend(index.groups[name])
            elif name in host_set:
                found.append(name)
            else:
                missing.append(name)
        if missing:
            raise PatternError(
                f"{what} {body!r} names hosts not in {index.source}: {fold_hosts(missing)}",
                pattern=body,
                source=index.source,
            )
        return found
    raise PatternError(
        f"{what} {body!r} matches no host or group in {index.source}{_suggest(body, index)}",
        pattern=body,
        source=index.source,
    )


def _subscript(m: re.Match[str], index: HostIndex, what: str, body: str) -> list[str]:
    """Ansible's ``GROUP[I]``, ``GROUP[I:J]`` (inclusive), ``GROUP[I:]``."""
    hosts = list(index.groups[m.group("base")])
    n = len(hosts)
    if m.group("idx") is not None:
        i = int(m.group("idx"))
        if not -n <= i < n:
            raise PatternError(
                f"{what} {body!r}: index {i} is out of range; group {m.group('base')!r} has {n} hosts",
                pattern=body,
                source=index.source,
            )
        return [hosts[i]]
    start = int(m.group("start"))
    end = int(m.group("end")) if m.group("end") else n - 1
    if start >= n:
        raise PatternError(
            f"{what} {body!r}: start {start} is out of range; group {m.group('base')!r} has {n} hosts",
            pattern=body,
            source=index.source,
        )
    return hosts[start : end + 1]


def _read_limit_file(term: str, index: HostIndex) -> list[str]:
    path = term[1:]
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        raise PatternError(f"limit file {path!r} cannot be read: {why}", pattern=term, source=index.source) from None
    return [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]


def _evaluate(pattern: str, index: HostIndex, what: str) -> list[str]:
    """Ansible's ``_evaluate_patterns`` after ``order_patterns``: unions, then ``&``, then ``!``."""
    terms = split_pattern(pattern, exact=index.hosts)
    if what == "limit":
        expanded: list[str] = []
        for term in terms:
            if term.startswith("@"):
                for line in _read_limit_file(term, index):
                    expanded.extend(split_pattern(line, exact=index.hosts))
            else:
                expanded.append(term)
        terms = expanded
    if not terms:
        raise PatternError(f"{what} {pattern!r} is empty", pattern=pattern, source=index.source)
    plain = [t for t in terms if t[0] not in "&!"]
    intersections = [t[1:].strip() for t in terms if t[0] == "&"]
    exclusions = [t[1:].strip() for t in terms if t[0] == "!"]
    for t in (*intersections, *exclusions):
        if not t:
            raise PatternError(
                f"{what} {pattern!r} has '&' or '!' with nothing after it",
                pattern=pattern,
                source=index.source,
            )
    selected: dict[str, None] = {}
    for term in plain or ["all"]:
        if term == "all" and "all" not in index.groups:
            selected.update(dict.fromkeys(index.hosts))
            continue
        selected.update(dict.fromkeys(_match_term(term, index, what)))
    for term in intersections:
        keep = set(_match_term(term, index, what))
        selected = {h: None for h in selected if h in keep}
    for term in exclusions:
        drop = set(_match_term(term, index, what))
        selected = {h: None for h in selected if h not in drop}
    return list(selected)


def select_hosts(pattern: str | Sequence[str], index: HostIndex, *, limit: str | None = None) -> list[str]:
    """Host names a pattern selects, in inventory order.

    Args:
        pattern: a pattern (``"gpu-nodes:!gpu03"``), or a list of them joined as a union.
        index: the hosts and groups to match against.
        limit: another pattern; the result is intersected with it (Ansible's ``--limit``).
            ``@FILE`` terms read patterns from FILE, one a line.

    Returns:
        At least one host name, each once, in inventory order.

    Raises:
        PatternError: a term names no host or group (with a did-you-mean), a range or regex is
            malformed, a subscript is out of range, or nothing is selected in the end.
    """
    text = pattern if isinstance(pattern, str) else ",".join(pattern)
    names = _evaluate(text, index, "pattern")
    if limit is not None:
        keep = set(_evaluate(limit, index, "limit"))
        names = [h for h in names if h in keep]
    if not names:
        with_limit = f" with limit {limit!r}" if limit is not None else ""
        raise PatternError(
            f"pattern {text!r}{with_limit} selects no hosts in {index.source}",
            pattern=text,
            source=index.source,
        )
    return index.order(names)
