"""``group_vars/`` and ``host_vars/`` folders beside an inventory, as Ansible's ``host_group_vars``
vars plugin reads them.

For a source ``inventory.yaml`` (or a folder ``inventory/``), the folder holding it (or the folder
itself) may have ``group_vars/NAME`` and ``host_vars/NAME`` for every group and host NAME: the
first of ``NAME``, ``NAME.yml``, ``NAME.yaml``, ``NAME.json`` that exists; when that is a folder,
every file in it, recursively, in sorted order, skipping hidden names, names ending in ``~``, and
files whose extension is not ``.yml``/``.yaml``/``.json`` (a file without one counts). Each file
is a YAML (or JSON) mapping of vars; an empty file adds nothing. Later files of one entity replace
earlier vars. Where they rank among other vars: :mod:`fleetctl.inventory.merge`.

A file that matches no group or host is ignored, as Ansible ignores it; it is reported as a warning
with a did-you-mean only when its name looks like a typo of a group or host of this inventory
(:func:`unused_file_hint`): several inventory files often share one ``host_vars/`` folder (Ansible's
"Organizing host and group variables"), so a name that is the same as one of this inventory's but
for its numbers (``g03`` beside ``g02``), or that a sibling inventory file in the folder names, is
another inventory's host, not a typo.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from fleetctl.errors import InventoryError
from fleetctl.util.yamlload import load_yaml, where

from ..data import VarsFiles
from ..vars import VarSource, describe
from ...util.didyoumean import close_matches

__all__ = ["find_vars_files", "read_vars_folder", "VARS_EXTENSIONS"]

VARS_EXTENSIONS = (".yml", ".yaml", ".json")
_SIBLING_MAX_BYTES = 1 << 20  # a sibling inventory file larger than 1 MiB is not searched for names


def _listing(folder: str, extensions: tuple[str, ...]) -> list[str]:
    found: list[str] = []
    for name in sorted(os.listdir(folder)):
        if name.startswith(".") or name.endswith("~"):
            continue
        path = os.path.join(folder, name)
        ext = os.path.splitext(name)[1]
        if os.path.isdir(path) and not ext:
            found.extend(_listing(path, extensions))
        elif os.path.isfile(path) and (not ext or ext in extensions):
            found.append(path)
    return found


def find_vars_files(folder: str, name: str) -> list[str]:
    """The files holding ``name``'s vars in ``folder`` (``group_vars/`` or ``host_vars/``), in order."""
    base = os.path.join(folder, name)
    for candidate in (base, *(base + ext for ext in VARS_EXTENSIONS)):
        if os.path.exists(candidate):
            return _listing(candidate, VARS_EXTENSIONS) if os.path.isdir(candidate) else [candidate]
    return []


def is_vaulted(path: str) -> bool:
    """True for an Ansible Vault encrypted file (``$ANSIBLE_VAULT;`` header)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(14) == b"$ANSIBLE_VAULT"
    except OSError:
        return False


def _read_file(path: str, entity: str, *, group: bool, base_dir: str) -> tuple[dict[str, Any], dict[str, VarSource]]:
    data = load_yaml(path, error_cls=InventoryError)
    if data is None:
        return {}, {}
    if not isinstance(data, Mapping):
        raise InventoryError(f"a vars file must be a mapping of variable names to values, not {describe(data)}",
                             file=path, line=where(data) or 1)
    values: dict[str, Any] = {}
    sources: dict[str, VarSource] = {}
    for var, value in data.items():
        if not isinstance(var, str):
            raise InventoryError(f"a variable name must be a string, not {describe(var)}", file=path,
                                 line=where(data, var), key=str(var))
        values.pop(var, None)
        values[var] = value
        sources[var] = VarSource(var, value, entity if group else None, path, where(data, var), var, base_dir,
                                 level="vars_file")
    return values, sources


def _numbered_alike(a: str, b: str) -> bool:
    """``g03`` and ``g02`` (or ``g3``): different names that are the same but for their numbers."""
    return a != b and re.sub(r"\d+", "0", a) == re.sub(r"\d+", "0", b)


def sibling_texts(folder: str, source: str | None) -> list[str]:
    """The text of the other inventory files in ``folder`` when ``source`` is a file in it (its
    sibling inventories, which share its ``group_vars/``/``host_vars/``): regular files up to 1 MiB,
    not hidden, not ending in ``~``; read only, never run. Empty when ``source`` is a folder."""
    if source is None or not os.path.isfile(source):
        return []
    here = os.path.abspath(source)
    if os.path.dirname(here) != os.path.abspath(folder or "."):
        return []
    texts: list[str] = []
    for name in sorted(os.listdir(folder or ".")):
        path = os.path.join(folder, name)
        if (name.startswith(".") or name.endswith("~") or os.path.abspath(path) == here
                or not os.path.isfile(path) or os.path.getsize(path) > _SIBLING_MAX_BYTES):
            continue
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                texts.append(fh.read())
        except OSError:
            continue
    return texts


def unused_file_hint(stem: str, names: Iterable[str], siblings: Iterable[str]) -> str | None:
    """The name of this inventory that ``stem`` (a vars file matching no group or host) is likely a
    typo of, or None: no close name (similarity ratio 0.6, difflib), a close name that differs only
    in its numbers (``g03`` is not a typo of ``g02``), or ``stem`` written as a whole word in a
    sibling inventory file (:func:`sibling_texts`)."""
    candidates = [n for n in names if not _numbered_alike(stem, n)]
    close = close_matches(stem, candidates, n=1, cutoff=0.6)
    if not close:
        return None
    word = re.compile(rf"(?<![\w.-]){re.escape(stem)}(?![\w.-])")
    if any(word.search(text) for text in siblings):
        return None
    return close[0]


def read_vars_folder(folder: str, groups: Iterable[str], hosts: Iterable[str],
                     source: str | None = None) -> tuple[VarsFiles, list[str], list[str]]:
    """Read ``folder/group_vars`` and ``folder/host_vars`` for the given group and host names.

    Args:
        source: the inventory file (or folder) given, whose sibling files may name the hosts of
            files this inventory does not use (:func:`unused_file_hint`).

    Returns:
        ``(vars_files, vaulted, warnings)``: the vars; the vault-encrypted files found (the source
        then goes to ``ansible-inventory``); one line per file that matches no group or host and
        looks like a typo of one.

    Raises:
        InventoryError: a file that is not YAML, or not a mapping (one line naming it).
    """
    result = VarsFiles(folder)
    base_dir = os.path.abspath(folder or ".")
    vaulted: list[str] = []
    warnings: list[str] = []
    siblings: list[str] | None = None
    for sub, names, target, is_group in (("group_vars", list(groups), result.groups, True),
                                         ("host_vars", list(hosts), result.hosts, False)):
        path = os.path.join(folder, sub)
        if not os.path.isdir(path):
            continue
        used: set[str] = set()
        for name in names:
            if name.startswith(os.sep):
                continue
            values: dict[str, Any] = {}
            sources: dict[str, VarSource] = {}
            for file in find_vars_files(path, name):
                used.add(os.path.abspath(file))
                if is_vaulted(file):
                    vaulted.append(file)
                    continue
                try:
                    more, more_sources = _read_file(file, name, group=is_group, base_dir=base_dir)
                except InventoryError as exc:
                    if not getattr(exc, "vault", False):
                        raise
                    vaulted.append(file)
                    continue
                for var in more:
                    values.pop(var, None)
                values.update(more)
                sources.update(more_sources)
            if values:
                target[name] = (values, sources)
        for file in _listing(path, VARS_EXTENSIONS):
            if os.path.abspath(file) in used:
                continue
            stem = os.path.splitext(os.path.relpath(file, path).split(os.sep)[0])[0]
            if siblings is None:
                siblings = sibling_texts(folder, source)
            close = unused_file_hint(stem, names, siblings)
            if close is not None:
                kind = "group" if is_group else "host"
                warnings.append(f"{file}: matches no {kind} in the inventory, so its vars are not used; "
                                f"did you mean {close!r}?")
    return result, vaulted, warnings
