"""Var names an inventory must not carry: a misspelt ``ansible_*`` name Ansible would silently
ignore, a misspelt ``ansible_`` prefix, and near-misses of fleetctl's own names (one typo, a dropped
unit suffix, a doubled letter), each refused with a did-you-mean (:func:`name_problem`). Used by
:mod:`fleetctl.inventory.merge` for every var of every host."""

from __future__ import annotations

from typing import Any

from .ansible_names import ANSIBLE_NAMES, is_ansible_name
from .vars import describe
from ..util.didyoumean import close_matches

__all__ = ["UNIT_SUFFIXES", "name_problem"]


def _damerau1(a: str, b: str) -> bool:
    """True when ``a`` and ``b`` differ by one insertion, deletion, substitution or swap."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]]
                                  and a[diff[1]] == b[diff[0]])
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    return any(long_[:i] + long_[i + 1:] == short for i in range(len(long_)))


def _normal(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


def name_problem(name: Any, own: frozenset[str], known_ansible: frozenset[str] = frozenset()) -> str | None:
    """Why a var name is refused, or None.

    - a name that is not a string;
    - an ``ansible_*`` name that neither Ansible (:mod:`~fleetctl.inventory.ansible_names`) nor a
      connection kind knows: Ansible would silently ignore the misspelt setting;
    - a name whose ``ansible_`` prefix is misspelt (``ansbile_user``, ``Ansible_host``): Ansible
      would take it for a var of one's own (:func:`_ansible_prefix_typo`);
    - a near-miss of one of fleetctl's own names (``own``): the same letters with other case or
      ``_``/``-``, or (both names of 4 characters or more) one typo away: one letter added, dropped,
      changed or two swapped (``cuda_hom``; ``ventv``, ``vnev`` for ``venv``: a new-user trial's
      ``ventv`` was taken for a var of their own and builds went to fleetctl's venv); under 6
      letters not a last letter added or dropped (``arch`` beside ``archs`` is a var of one's own).
      Shorter names (``cpu``, ``env``) are too close to everything to judge.
    """
    if not isinstance(name, str):
        return f"a variable name must be a string, not {describe(name)}"
    if name in own or name in known_ansible:
        return None
    if name.startswith("ansible_"):
        if is_ansible_name(name):
            return None
        known = sorted(ANSIBLE_NAMES | known_ansible)
        close = close_matches(name[8:], [k[8:] for k in known], n=1, cutoff=0.7)
        hint = f"did you mean 'ansible_{close[0]}'?" if close else "variables of your own must not start with 'ansible_'"
        return f"unknown Ansible variable {name!r}; {hint}"
    ansible = _ansible_prefix_typo(name, known_ansible)
    if ansible:
        return ansible
    for candidate in sorted(own):
        short = min(len(name), len(candidate))
        # a short name that is ours plus or less a last letter is a word of its own (arch: x86_64
        # beside fleetctl's archs; users, venvs): Ansible inventories carry such vars
        typo = short >= 4 and _damerau1(name, candidate) and not (
            short < 6 and (name.startswith(candidate) or candidate.startswith(name)))
        if (_normal(name) == _normal(candidate) or typo
                or _unit_dropped(name, candidate) or _letter_doubled(name, candidate)):
            return f"unknown variable {name!r} looks like fleetctl's {candidate!r}; did you mean {candidate!r}?"
    return None


def _ansible_prefix_typo(name: str, known_ansible: frozenset[str]) -> str | None:
    """Why ``ansbile_user`` (``ansible_`` with one typo, other case or ``-``: one letter added,
    dropped, changed or two swapped) is refused: Ansible would take it for a var of one's own and
    connect as someone else, silently. Names the Ansible variable meant when the rest is one (or
    close to one, :func:`close_matches`), else says the prefix looks misspelt."""
    head, sep, rest = name.replace("-", "_").partition("_")
    if not sep or not rest or name.startswith("ansible_") or not (
            head.lower() == "ansible" or (len(head) >= 6 and _damerau1(head.lower(), "ansible"))):
        return None
    known = sorted(ANSIBLE_NAMES | known_ansible)
    fix = f"ansible_{rest}"
    if not (is_ansible_name(fix) or fix in known_ansible):
        close = close_matches(rest, [k[8:] for k in known], n=1, cutoff=0.7)
        if not close:
            return f"unknown variable {name!r} looks like a misspelt Ansible variable ('ansible_...')"
        fix = f"ansible_{close[0]}"
    return f"unknown variable {name!r} looks like Ansible's {fix!r}; did you mean {fix!r}?"


#: Trailing parts of fleetctl's var names that say a unit or a kind (``gpu_probe_timeout_s``,
#: ``keepalive_interval``): the same name without one is taken for a near-miss.
UNIT_SUFFIXES = ("_s", "_mib", "_interval", "_dir", "_file")


def _unit_dropped(name: str, candidate: str) -> bool:
    """``gpu_probe_timeout`` for ``gpu_probe_timeout_s``, ``keepalive`` for ``keepalive_interval``."""
    return any(candidate == name + suffix for suffix in UNIT_SUFFIXES) and len(name) >= 6


def _letter_doubled(name: str, candidate: str) -> bool:
    """``venvv`` for ``venv``: one letter of a short name typed twice (a typo for names of any length,
    where one edit in general is too loose: ``env`` is not ``venv``)."""
    return len(name) == len(candidate) + 1 and any(
        name[i] == name[i - 1] and name[:i] + name[i + 1:] == candidate for i in range(1, len(name)))
