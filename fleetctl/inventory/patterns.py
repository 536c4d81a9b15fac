"""Host patterns: which hosts ``--hosts`` and ``--limit`` select, exactly as Ansible selects them.

Nothing here knows about files: a pattern is evaluated against a :class:`HostIndex` (host names in
the order they entered the inventory, each group's hosts in Ansible's order);
:meth:`fleetctl.inventory.Inventory.select` builds one. The rules are those of "Patterns: targeting
hosts and groups" (https://docs.ansible.com/ansible/latest/inventory_guide/intro_patterns.html) as
ansible-core's ``InventoryManager.get_hosts`` implements them:

- Splitting: a pattern holding a ``,`` is split at ``,`` only (a ``:`` inside a comma-separated
  term is part of it). Without a ``,``, a pattern that reads as one host address (``web01:2222``,
  ``fe80::1``, ``node[01:16]``) is one term; anything else is split at ``:`` and whitespace.
  Brackets stay whole either way (so ClusterShell's ``gpu[01-04,07]`` survives a comma split, where
  Ansible would cut it into pieces that match nothing).
- Evaluation order: the plain terms are unioned first, in the order written, then every ``&TERM``
  intersects, then every ``!TERM`` excludes; only ``&``/``!`` terms start from ``all``.
- A term is: an exact host name; else ``~REGEX`` (``re.match`` against group names, then host
  names); else an ``fnmatch`` glob against group names (a group contributes all its hosts) and,
  when no group matched or the term holds ``. ? * [``, against host names; optionally followed by
  a subscript ``[I]``, ``[I:J]`` (inclusive) or ``[I:]`` that picks from those hosts by position.
- Results come in Ansible's order: each term's hosts in the order it matched them (a group's hosts
  in its order, see :attr:`HostIndex.groups`), new hosts appended, each host once.
- ``--limit`` is another pattern whose hosts filter the result, keeping its order; ``@FILE`` in
  a limit reads one term per line (a retry file).

fleetctl adds, where Ansible selects nothing and only warns:

- a term that names nothing (not a glob or regex) is an error with a did-you-mean, and so is a
  pattern that selects no host at all: a typo must not turn a deploy into a silent no-op;
- a term with brackets that Ansible matches to nothing is read as a node set
  (:mod:`fleetctl.inventory.nodeset`: ``node[01-16]``, ``gpu[01:04]!gpu03``) whose every name
  must be a host or a group;

and refuses, with the reason, the forms where Ansible's rule is a trap: ``GROUP[1-2]`` (Ansible
reads the removed ``x-y`` subscript, a ClusterShell user means hosts), a subscript that ends before
it starts, and a term that names nothing because of Ansible's splitting rule (``a:b,c``,
``web:22``).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fleetctl.errors import InventoryError

from .address import is_single_address
from .nodeset import NodesetError, fold_hosts, parse_nodeset, split_top
from ..util.didyoumean import close_matches

__all__ = ["HostIndex", "PatternError", "given_pattern", "split_pattern", "select_hosts"]

_SUBSCRIPT = re.compile(r"^(?P<base>.+)\[(?:(?P<idx>-?[0-9]+)|(?P<start>[0-9]+)(?P<sep>[:-])(?P<end>[0-9]*))\]$")
_COLON_SPLIT = re.compile(r"(?:[^\s:\[\]]|\[[^\]]*\])+")
_HOST_SEARCH_CHARS = ".?*["
_LOCALHOST = ("localhost", "127.0.0.1", "::1")


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
        hosts: every host name, in the order the hosts entered the inventory (globs and regexes
            list matching hosts in this order, as Ansible's ``inventory.hosts``).
        groups: group name -> its hosts, children's included, in Ansible's ``Group.get_hosts``
            order; the mapping itself in the order the groups were created.
        source: how to name the inventory in messages (its path as the user gave it).
    """

    hosts: Sequence[str]
    groups: Mapping[str, Sequence[str]]
    source: str = "the inventory"
    _host_set: frozenset[str] = field(default=frozenset(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_host_set", frozenset(self.hosts))

    def fail(self, message: str, pattern: str) -> PatternError:
        return PatternError(message, pattern=pattern, source=self.source)


def split_pattern(pattern: str) -> list[str]:
    """Split a pattern into terms, each keeping its ``&``/``!`` prefix (Ansible's
    ``split_host_pattern``, bracket-aware). Empty terms are dropped."""
    if "," in pattern:
        pieces = split_top(pattern, ",")
    elif is_single_address(pattern.strip()):
        pieces = [pattern]
    else:
        pieces = _COLON_SPLIT.findall(pattern)
    return [p.strip() for p in pieces if p.strip()]


def given_pattern(value: str | None, what: str = "pattern") -> str | None:
    """``value`` (a ``--hosts`` or ``--limit`` as typed) when it names something, None when it
    was not given.

    An empty or blank value is given, not absent: ``--hosts "$GROUP"`` with ``GROUP`` unset must
    never fall back to the playbook's ``hosts`` (the whole fleet) or drop the limit. Every command
    that takes ``--hosts``/``--limit`` (and :func:`fleetctl.api.play.prepare_play`) checks here
    first, before the inventory is read.

    Raises:
        PatternError: ``value`` holds no term (``''``, ``' '``, ``','``), naming ``what``.
    """
    if value is not None and not split_pattern(value):
        raise PatternError(f"{what} {value!r} is empty", pattern=value, source="")
    return value


_IMPLICIT = ("all", "ungrouped")  # Ansible's implicit groups: every inventory has them


def _suggest(word: str, index: HostIndex) -> str:
    """A close host or group name (similarity >= 0.6); the implicit groups only when nearly the
    word itself (>= 0.8): any short miss is 0.6-close to 'ungrouped' ('nope' is), which is noise."""
    candidates = [n for n in dict.fromkeys([*index.groups, *index.hosts]) if n not in _IMPLICIT]
    close = close_matches(word, candidates, n=1, cutoff=0.6) or close_matches(word, _IMPLICIT, n=1, cutoff=0.8)
    return f"; did you mean {close[0]!r}?" if close else ""


def _compile(term: str, what: str, index: HostIndex) -> re.Pattern[str]:
    try:
        return re.compile(term[1:] if term.startswith("~") else fnmatch.translate(term))
    except re.error as exc:
        kind = "a valid regular expression" if term.startswith("~") else "a valid glob"
        raise index.fail(f"{what} {term!r} is not {kind}: {exc}", term) from None


def _enumerate(expr: str, what: str, index: HostIndex) -> tuple[list[str], bool]:
    """Ansible's ``_enumerate_matches``: hosts of matching groups, then matching hosts (a host may
    come twice). Returns the list and whether any group matched."""
    regex = _compile(expr, what, index)
    groups = [g for g in index.groups if regex.match(g)]
    found = [h for g in groups for h in index.groups[g]]
    if not groups or expr.startswith("~") or any(c in expr for c in _HOST_SEARCH_CHARS):
        found.extend(h for h in index.hosts if regex.match(h))
    return found, bool(groups)


def _subscript(m: re.Match[str], hosts: list[str], body: str, what: str, index: HostIndex) -> list[str]:
    """Ansible's ``_apply_subscript``: ``[I]``, ``[I:J]`` inclusive, ``[I:]`` to the end."""
    n = len(hosts)
    base = m.group("base")
    if m.group("idx") is not None:
        i = int(m.group("idx"))
        if not -n <= i < n:
            raise index.fail(f"{what} {body!r}: index {i} is out of range; {base!r} has {n} hosts", body)
        return [hosts[i]]
    start = int(m.group("start"))
    end = int(m.group("end")) if m.group("end") else n - 1
    if start >= n:
        raise index.fail(f"{what} {body!r}: start {start} is out of range; {base!r} has {n} hosts", body)
    if m.group("end") and end < start:
        raise index.fail(f"{what} {body!r}: the subscript ends ({end}) before it starts ({start})", body)
    return hosts[start : end + 1]


def _nodeset(body: str, what: str, index: HostIndex, hint: str) -> list[str]:
    """fleetctl's extension: a node set whose every name is a host or a group."""
    try:
        names = list(parse_nodeset(body))
    except NodesetError as exc:
        raise index.fail(f"{what} {body!r} matches no host or group, and is not a valid node set: {exc}{hint}",
                         body) from None
    found: list[str] = []
    missing: list[str] = []
    for name in names:
        if name in index.groups:
            found.extend(index.groups[name])
        elif name in index._host_set:
            found.append(name)
        else:
            missing.append(name)
    if missing:
        raise index.fail(f"{what} {body!r} names hosts not in {index.source}: {fold_hosts(missing)}{hint}", body)
    return found


def _match_term(body: str, what: str, index: HostIndex, comma_split: bool) -> list[str]:
    """Host names one term (without its ``&``/``!``) stands for."""
    if body in index._host_set:
        return [body]
    m = None if body.startswith("~") else _SUBSCRIPT.match(body)
    expr = m.group("base") if m else body
    found, group_matched = _enumerate(expr, what, index)
    if m and found:
        if m.group("sep") == "-" and group_matched:
            raise index.fail(
                f"{what} {body!r}: {expr!r} is a group, so Ansible reads [{m.group('start')}-{m.group('end')}] as "
                f"positions in it (a removed form), not as host names; write {expr}[{m.group('start')}:"
                f"{m.group('end')}] for positions, or name the hosts", body)
        return _subscript(m, found, body, what, index)
    if found or group_matched:
        return found  # an empty group selects nothing, which is no typo
    if body.startswith("~") or any(c in body for c in "*?"):
        return []  # a glob or regex may match nothing; the whole pattern must still select a host
    hint = ""
    colon = len(split_top(body, ":")) > 1
    if colon and comma_split:
        hint = ("; a pattern with ',' is split at ',' only (Ansible's rule), so this ':' is part of a name:"
                " separate every term with ','")
    elif colon:
        hint = (f"; Ansible reads {body!r} as one host address (host:port or IPv6), not as terms: write"
                f" {','.join(body.split(':'))!r} to select each")
    elif body in _LOCALHOST:
        hint = "; fleetctl has no implicit localhost: list it in the inventory with ansible_connection: local"
    elif (m := re.fullmatch(r"(?P<base>.+)\[:(?P<end>[0-9]+)\]", body)) and m.group("base") in index.groups:
        hint = (f"; Ansible's patterns guide shows {body}, but ansible-core selects nothing for it: write "
                f"{m.group('base')}[0:{m.group('end')}]")
    if "[" in body or "]" in body:
        return _nodeset(body, what, index, hint)
    raise index.fail(f"{what} {body!r} matches no host or group in {index.source}{hint or _suggest(body, index)}",
                     body)


def _read_limit_file(term: str, index: HostIndex) -> list[str]:
    path = term[1:]
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        raise index.fail(f"limit file {path!r} cannot be read: {why}", term) from None
    return [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]


def _evaluate(pattern: str, index: HostIndex, what: str) -> list[str]:
    """Ansible's ``_evaluate_patterns`` after ``order_patterns``: unions, then ``&``, then ``!``."""
    if pattern.count("[") != pattern.count("]"):
        raise index.fail(f"{what} {pattern!r} has unbalanced brackets", pattern)
    terms = split_pattern(pattern)
    comma_split = "," in pattern
    if what == "limit":
        expanded: list[str] = []
        for term in terms:
            expanded.extend(_read_limit_file(term, index) if term.startswith("@") else [term])
        terms = expanded
    if not terms:
        raise index.fail(f"{what} {pattern!r} is empty", pattern)
    plain = [t for t in terms if t[0] not in "&!"]
    intersections = [t[1:].strip() for t in terms if t[0] == "&"]
    exclusions = [t[1:].strip() for t in terms if t[0] == "!"]
    if any(not t for t in (*intersections, *exclusions)):
        raise index.fail(f"{what} {pattern!r} has '&' or '!' with nothing after it", pattern)
    selected: dict[str, None] = {}
    for term in plain or ["all"]:
        selected.update(dict.fromkeys(_match_term(term, what, index, comma_split)))
    for term in intersections:
        keep = set(_match_term(term, what, index, comma_split))
        selected = {h: None for h in selected if h in keep}
    for term in exclusions:
        drop = set(_match_term(term, what, index, comma_split))
        selected = {h: None for h in selected if h not in drop}
    return list(selected)


def select_hosts(pattern: str | Sequence[str], index: HostIndex, *, limit: str | None = None) -> list[str]:
    """Host names a pattern selects, in Ansible's order.

    Args:
        pattern: a pattern (``"gpu-nodes:!gpu03"``), or a list of them (joined with ``,``).
        index: the hosts and groups to match against.
        limit: another pattern whose hosts filter the result (Ansible's ``--limit``); ``@FILE``
            terms read one term per line from FILE.

    Returns:
        At least one host name, each once.

    Raises:
        PatternError: a term names no host or group (with a did-you-mean), a range, regex or
            subscript is malformed or out of range, or nothing is selected in the end.
    """
    text = pattern if isinstance(pattern, str) else ",".join(pattern)
    names = _evaluate(text, index, "pattern")
    if limit is not None:
        keep = set(_evaluate(limit, index, "limit"))
        names = [h for h in names if h in keep]
    if not names:
        with_limit = f" with limit {limit!r}" if limit is not None else ""
        raise index.fail(f"pattern {text!r}{with_limit} selects no hosts in {index.source}", text)
    return names
