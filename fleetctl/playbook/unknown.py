"""What a plan does not know: the result a command registers before it has run.

``--plan`` and ``--dry-run`` simulate every command (rc 0, no output: :mod:`fleetctl.tasks.steps`),
so what such a task registers (``rc``, ``stdout``, ``failed``...) is not known until the deploy
runs it. The engine registers :class:`Unknown` values there instead of the simulated ones
(:func:`fleetctl.engine.registered.registered_value`). Shown in a template while planning, an unknown
renders as ``(unknown until applied: NAME.FIELD)``; anything that needs its value (a ``when``, a
comparison, ``in``, a filter that reads it) raises :class:`NotKnown`, and the task is planned as
"unknown until applied: depends on NAME". Only a planning pass registers unknowns (a deploy's
registered results are its commands' real ones), so no command is ever run with a value nobody saw.
"""

from __future__ import annotations

from typing import Any

from ..errors import PlaybookError


class NotKnown(PlaybookError):
    """A template or ``when`` needed a value registered by a command that has not run.

    Attributes:
        name: the register name (``who``).
        field: the part of it that was read (``who.stdout``).
    """

    def __init__(self, field: str) -> None:
        self.field = field
        self.name = field.split(".", 1)[0]
        super().__init__(f"depends on {self.name} ({field}), registered by a command that has not run")


class Unknown:
    """A registered value nobody has seen (``field``: ``who.stdout``). Attribute and item access
    give deeper unknowns; using the value raises :class:`NotKnown`."""

    __slots__ = ("field",)

    def __init__(self, field: str) -> None:
        self.field = field

    def _need(self, *_: Any) -> Any:
        raise NotKnown(self.field)

    __bool__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _need
    __contains__ = __iter__ = __len__ = __int__ = __float__ = __call__ = _need
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __mod__ = __rmod__ = _need
    __hash__ = object.__hash__

    def __getattr__(self, attr: str) -> "Unknown":
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Unknown(f"{self.field}.{attr}")

    def __getitem__(self, key: Any) -> "Unknown":
        return Unknown(f"{self.field}.{key}")

    def __str__(self) -> str:
        return f"(unknown until applied: {self.field})"

    __repr__ = __str__

    def __format__(self, spec: str) -> str:
        return str(self)


#: The registered fields a command's run decides.
DECIDED: tuple[str, ...] = ("status", "rc", "msg", "stdout", "stderr", "changed", "failed")


def unknown_result(name: str, known: dict[str, Any]) -> dict[str, Any]:
    """``register: name`` of a task whose command was simulated: every field a command's run
    decides is :class:`Unknown`; ``data`` (what the planner itself computed, ``build.data.wheel``)
    and ``skipped`` stay as planned."""
    return {**known, **{k: Unknown(f"{name}.{k}") for k in DECIDED}}
