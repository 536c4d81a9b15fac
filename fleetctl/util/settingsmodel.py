"""Typed settings read from host vars (:class:`Settings`), validated with pydantic's rules without
importing pydantic on the common path.

fleetctl's own host settings and every connection kind's (``fleetctl.inventory.settings``,
``fleetctl.connection.*``) are validated for every host of every command, ``fleetctl run``
included, whose whole start-up is about 0.5 CPU-s; pydantic's import and first model cost 0.1 of
it (bench/README.md, issue 27). So a settings class declares its fields with :func:`setting`
and values are checked in two steps:

- the values an inventory normally holds (a ``str`` for a string, an ``int`` or a string of
  ASCII digits for an integer, an ``int`` or a finite ``float`` for a number, a ``bool``, one of a
  ``Literal``'s strings) are taken here, bounds (``ge``, ``le``, ``gt``) checked;
- anything else (``"22.0"`` for a port, ``" 2_2 "``, ``"inf"``, ``b"x"``, ``"yes"`` for a bool...)
  goes to pydantic-core (pydantic's validator, imported then) with the field's schema in lax mode,
  which accepts or refuses it exactly as the pydantic models did.

``tests/test_settings_model.py`` checks both against the former pydantic models, value by value.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

__all__ = ["Settings", "SettingsError", "Setting", "setting"]

_MISS = object()


class SettingsError(ValueError):
    """A value a setting refuses. ``loc`` is the var name it was read from (an alias) or the
    field name; :meth:`errors` has pydantic's shape (``[{"loc": (name,), "msg": ..., "input": ...}]``)."""

    def __init__(self, loc: str, msg: str, value: Any) -> None:
        super().__init__(f"{loc}: {msg}")
        self.loc, self.msg, self.value = loc, msg, value
        self.others: list[SettingsError] = []  # the fields refused after this one (model_validate)

    def errors(self) -> list[dict[str, Any]]:
        """Every refused field, this one first, as pydantic's ``ValidationError.errors()`` lists
        all of a model's errors at once."""
        return [{"loc": (e.loc,), "msg": e.msg, "input": e.value} for e in (self, *self.others)]


class Setting:
    """One field of a :class:`Settings` class.

    Attributes:
        kind: ``str``, ``int``, ``float``, ``bool``, ``"literal"`` (one of ``choices``) or
            ``"words"`` (a tuple of strings).
        aliases: the var names read, first set wins (pydantic's ``AliasChoices``).
        default: the value when no alias is set.
        optional: ``None`` is a value (``int | None``).
        ge, le, gt: bounds (pydantic's ``Field(ge=...)``).
        allow_inf_nan: a float may be infinite (pydantic's default; NaN never passes a bound).
        choices: a ``"literal"``'s values.
        before: a function applied first (pydantic's ``field_validator(mode="before")``); its
            ValueError refuses the value.
        name: the field name (set by the class).
    """

    __slots__ = ("kind", "aliases", "default", "optional", "ge", "le", "gt", "allow_inf_nan", "choices", "before",
                 "name", "_core")

    def __init__(self, kind: Any, aliases: tuple[str, ...], default: Any, optional: bool, ge: float | None,
                 le: float | None, gt: float | None, allow_inf_nan: bool, choices: tuple[Any, ...],
                 before: Callable[[Any], Any] | None) -> None:
        self.kind, self.aliases, self.default, self.optional = kind, aliases, default, optional
        self.ge, self.le, self.gt, self.allow_inf_nan = ge, le, gt, allow_inf_nan
        self.choices, self.before, self.name, self._core = choices, before, "", None

    @property
    def bounds(self) -> dict[str, float]:
        """The bounds set, ``{"ge": 1, "le": 65535}``."""
        return {k: v for k, v in (("ge", self.ge), ("le", self.le), ("gt", self.gt)) if v is not None}

    def __repr__(self) -> str:
        return f"Setting({self.name!r}, {self.kind if isinstance(self.kind, str) else self.kind.__name__}, {self.aliases})"

    def validate(self, value: Any, loc: str) -> Any:
        """The value as the field holds it.

        Raises:
            SettingsError: the value is refused (``loc`` names where it was read).
        """
        if self.before is not None:
            try:
                value = self.before(value)
            except ValueError as exc:
                raise SettingsError(loc, f"Value error, {exc}", value) from None
        if value is None and self.optional:
            return None
        got = self._fast(value)
        if got is _MISS:
            return self._by_pydantic(value, loc)
        if not self._within(got):
            raise SettingsError(loc, "out of bounds", value)
        return got

    def _fast(self, value: Any) -> Any:
        t, kind = type(value), self.kind
        if kind is str:
            return value if t is str else _MISS
        if kind is int:
            if t is int:
                return value
            if t is str and 0 < len(value) < 19 and value.isascii() and value.isdigit():
                return int(value)
            return _MISS
        if kind is float:
            if t is int:
                return float(value)
            return value if t is float and math.isfinite(value) else _MISS
        if kind is bool:
            return value if t is bool else _MISS
        if kind == "literal":
            return value if t is str and value in self.choices else _MISS
        if kind == "words":
            return value if t is tuple and all(type(v) is str for v in value) else _MISS
        return _MISS

    def _within(self, v: Any) -> bool:
        return ((self.ge is None or v >= self.ge) and (self.le is None or v <= self.le)
                and (self.gt is None or v > self.gt))

    def _by_pydantic(self, value: Any, loc: str) -> Any:
        """pydantic-core's lax validation of the field's type (the rare values the fast path
        leaves: numbers in strings with dots or underscores, bytes, ``"yes"``...)."""
        if self._core is None:
            from pydantic_core import SchemaValidator

            self._core = SchemaValidator(self.core_schema())
        from pydantic_core import ValidationError

        try:
            return self._core.validate_python(value)
        except ValidationError as exc:
            raise SettingsError(loc, exc.errors()[0]["msg"], value) from None

    def core_schema(self) -> dict[str, Any]:
        """The field's type as a pydantic-core schema (what pydantic builds for it)."""
        bounds = self.bounds
        if self.kind is int:
            schema: dict[str, Any] = {"type": "int", **bounds}
        elif self.kind is float:
            schema = {"type": "float", **bounds, **({} if self.allow_inf_nan else {"allow_inf_nan": False})}
        elif self.kind is bool:
            schema = {"type": "bool"}
        elif self.kind == "literal":
            schema = {"type": "literal", "expected": list(self.choices)}
        elif self.kind == "words":
            schema = {"type": "tuple", "items_schema": [{"type": "str"}], "variadic_item_index": 0}
        else:
            schema = {"type": "str"}
        return {"type": "nullable", "schema": schema} if self.optional else schema


def setting(kind: Any, *aliases: str, default: Any = None, optional: bool = False, ge: float | None = None,
            le: float | None = None, gt: float | None = None, allow_inf_nan: bool = True,
            choices: tuple[Any, ...] = (), before: Callable[[Any], Any] | None = None) -> Any:
    """Declare a field of a :class:`Settings` class (see :class:`Setting` for the arguments)."""
    return Setting(kind, aliases, default, optional, ge, le, gt, allow_inf_nan, choices, before)


class Settings:
    """Base of typed, frozen settings. Subclasses declare fields with :func:`setting`, in the
    order they are validated (every refused one is reported, the first first, as pydantic's errors).

    Class attributes:
        model_fields: field name -> its :class:`Setting`, in order (inherited ones first).
        by_name: the field name is also read when no alias is set (pydantic's ``populate_by_name``).
    """

    model_fields: ClassVar[dict[str, Setting]] = {}
    by_name: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields = dict(cls.model_fields)
        for name, value in list(vars(cls).items()):
            if isinstance(value, Setting):
                value.name = name
                fields[name] = value
                setattr(cls, name, value.default)  # the default, as a plain class attribute
        cls.model_fields = fields

    def __init__(self, **values: Any) -> None:
        for name, spec in self.model_fields.items():
            object.__setattr__(self, name, values.get(name, spec.default))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.as_dict() == other.as_dict()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), tuple(self.as_dict().items())))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.as_dict().items())})"

    def as_dict(self) -> dict[str, Any]:
        """Field name -> value, in order."""
        return {name: getattr(self, name) for name in self.model_fields}

    @classmethod
    def model_validate(cls, data: Mapping[str, Any]) -> Any:
        """The settings from ``data`` (var name -> value; names no field reads are ignored).

        Raises:
            SettingsError: the first field (in order) whose value is refused; every later refused
                field is in its :meth:`~SettingsError.errors` too (pydantic reports all at once).
        """
        values = {}
        refused: list[SettingsError] = []
        for name, spec in cls.model_fields.items():
            read = next((alias for alias in spec.aliases if alias in data), None)
            if read is None and cls.by_name and name in data:
                read = name
            if read is None:
                continue
            try:
                values[name] = spec.validate(data[read], read)
            except SettingsError as exc:
                refused.append(exc)
        if refused:
            refused[0].others = refused[1:]
            raise refused[0]
        return cls(**values)
