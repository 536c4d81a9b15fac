"""Where a variable's value came from, and the values only Ansible's merge order decided.

fleetctl merges a host's vars exactly as Ansible does (see :mod:`fleetctl.inventory.merge`). Where
that order within one precedence level, rather than the inventory's structure, picks between
different values (never where a ``group_vars/``/``host_vars/`` file beats an inventory var: that is
Ansible's precedence, a higher level), the choice is recorded as a :class:`VarConflict`;
:meth:`fleetctl.inventory.Inventory.check_hosts` refuses the ones that decide a selected host's
value, unless ``ansible_group_priority`` (the user's explicit choice) decided.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetctl.errors import InventoryError

__all__ = ["VarSource", "VarConflict", "describe", "same", "shown"]


@dataclass(frozen=True)
class VarSource:
    """Where one variable's value was set.

    Attributes:
        name: the var name as written.
        value: the value as written.
        group: the group whose vars set it, or None for host vars.
        file: the file (inventory, ``group_vars/...`` file, script) that set it.
        line: 1-based line of the var, when the format has lines (None for JSON).
        key: dotted path of the var in the file (``all.children.gpu.vars.ansible_user``).
        base_dir: the folder relative paths in the value resolve against (the inventory's folder;
            for a vars file, the folder of its ``-i`` source, which tells two sources apart).
        level: ``"inventory"`` (an inventory file or script) or ``"vars_file"`` (``group_vars/``,
            ``host_vars/``): Ansible puts every vars file above every inventory var of its kind;
            ``"extra"``: ``-e`` (above everything, see :mod:`fleetctl.inventory.extra`).
    """

    name: str
    value: Any
    group: str | None
    file: str
    line: int | None
    key: str
    base_dir: str | None = field(default=None, compare=False)
    level: str = field(default="inventory", compare=False)

    def where(self, relative_to: str | None = None) -> str:
        """``(line 5)`` in the file ``relative_to``, else ``(group_vars/gpu.yml:5)``, for messages."""
        if self.file != relative_to:
            return f"({self.file}:{self.line})" if self.line else f"({self.file})"
        return f"(line {self.line})" if self.line else ""

    def origin(self) -> str:
        """Where a message says the value came from, so that the fix is made where the value is:
        ``-e cuda_home`` for an extra var (as :func:`fleetctl.inventory.settings.var_error` names
        it), else ``the inventory var 'cuda_home' (inventory.yaml:7)``."""
        if self.level == "extra":
            return f"-e {self.key}"
        return f"the inventory var '{self.name}' {self.where()}".rstrip()


@dataclass(frozen=True)
class VarConflict:
    """A variable whose value Ansible's load order within one precedence level, not the inventory's
    structure, decided. A ``group_vars/``/``host_vars/`` file over an inventory var is Ansible's
    precedence (a higher level), never a conflict.

    Recorded at load time (never raised there). ``str()`` is one line ``FILE:LINE: KEY: MESSAGE``
    pointing at the winning value.

    Attributes:
        var: the var name (for ``"alias"``: the name that wins).
        winner: the value that applies.
        others: the values it overrode.
        host: the host concerned, or None when ``group`` is.
        group: the group concerned when one group set different values in one file.
        reason: why the winner won, in words.
        decided_by: ``"order"`` (a host listed, or a group declared, twice in one file: the later
            value), ``"depth"`` (the deeper of two unrelated groups), ``"name"`` (groups of one
            depth, in ASCII order), ``"source"`` (a ``group_vars/`` file of a later ``-i`` source over
            an earlier source's file for a group other than the same one or one of its parents), ``"alias"`` (a legacy
            ``ansible_ssh_*`` name over the modern one) or ``"priority"`` (``ansible_group_priority``:
            the user's explicit choice, never refused).
    """

    var: str
    winner: VarSource
    others: tuple[VarSource, ...]
    host: str | None = None
    group: str | None = None
    reason: str = ""
    decided_by: str = "order"

    @property
    def message(self) -> str:
        """The refusal, as :meth:`Inventory.check_hosts` prints it."""
        here = self.winner.file
        values = " and ".join(f"{s.name} = {shown(s.value)} {s.where(here)}".rstrip() for s in (*self.others, self.winner))
        if self.decided_by == "order":
            if self.host is not None:
                return f"host {self.host!r} is listed more than once with different values: {values}; keep one"
            return f"group {self.group!r} is declared more than once with different values: {values}; keep one"
        if self.decided_by == "alias":
            return (f"host {self.host!r} has {values}: Ansible uses {self.winner.name} wherever it is set "
                    f"(the legacy name wins); keep one")
        if self.decided_by == "source":
            lost = ", ".join(s.file for s in self.others)
            return (f"host {self.host!r} gets {self.var} from {self.winner.file}, not from {lost}: {values}; "
                    f"Ansible merges the group_vars/ of each -i source after the earlier sources', whatever "
                    f"the groups' depth; set {self.var} in one source or in the host's vars")
        groups = ", ".join(repr(s.group) for s in self.others) + f" and {self.winner.group!r}"
        why = "the deeper group" if self.decided_by == "depth" else "the group last in ASCII order"
        return (f"host {self.host!r} is in groups {groups}, neither inside the other, that set {self.var} "
                f"differently: {values}; only Ansible's merge order would pick {why}; set {self.var} in the "
                f"host's own vars or give one group a higher ansible_group_priority")

    def __str__(self) -> str:
        return str(self.error())

    def error(self) -> InventoryError:
        """The refusal as an :class:`InventoryError` at the winning value."""
        return InventoryError(self.message, file=self.winner.file, line=self.winner.line, key=self.winner.key)


def describe(value: Any) -> str:
    """A value as an error message shows it, with its YAML type: ``'22' (a string)``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, str):
        return f"{value!r} (a string)"
    if isinstance(value, (int, float)):
        return f"{value!r} (a number)"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{str(value)!r} (a {type(value).__name__})"


def same(a: Any, b: Any) -> bool:
    """Equal values of the same type (``1`` and ``True`` differ, as they do to Ansible's templates)."""
    try:
        return type(a) is type(b) and a == b
    except RecursionError:  # pragma: no cover - loaders refuse recursive structures
        return a is b


def shown(value: Any, limit: int = 40) -> str:
    """``repr`` cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
