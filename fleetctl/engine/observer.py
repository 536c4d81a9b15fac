"""Observers: how a run is reported, as Ansible's callback plugins.

The engine never prints and never writes the record itself: it tells its observers. An observer
gets every :class:`~fleetctl.engine.model.Event` (``event``), every output line a host prints
(``line``; the hot path, kept out of the event objects), and the end of the run (``close``). The
run record, the live terminal, the folded terminal, the HTML report and the metrics are observers
(:mod:`fleetctl.reporting`).

An observer must not raise: :class:`Observers` contains a failing observer (it is reported once on
stderr and dropped) so that a reporting bug never stops a deploy.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, Protocol

from ..connection.base import OutputLine
from .model import Event, RunModel


class Observer(Protocol):
    """What the engine calls. Every method is optional in practice (see :class:`Observers`)."""

    def event(self, run: RunModel, event: Event) -> None: ...

    def line(self, run: RunModel, host: str, line: OutputLine, shown: bool) -> None: ...

    def close(self, run: RunModel) -> None: ...


class Observers:
    """Fans each call out to a list of observers, in order; a failing observer is dropped."""

    def __init__(self, run: RunModel, observers: Iterable[Any] = ()) -> None:
        self.run = run
        self._all = [o for o in observers if o is not None]

    def add(self, observer: Any) -> None:
        self._all.append(observer)

    def _call(self, method: str, *args: Any) -> None:
        for obs in list(self._all):
            fn = getattr(obs, method, None)
            if fn is None:
                continue
            try:
                fn(self.run, *args)
            except Exception as exc:  # noqa: BLE001 - a reporting bug must not stop the run
                self._all.remove(obs)
                print(f"fleetctl: warning: {type(obs).__name__} stopped reporting: {type(exc).__name__}: {exc}",
                      file=sys.stderr)

    def emit(self, name: str, host: str | None = None, **data: Any) -> None:
        """Tell every observer about an event (``noun.verb_past``)."""
        self._call("event", Event(name=name, host=host, data=data))

    def line(self, host: str, line: OutputLine, shown: bool = True) -> None:
        """Tell every observer about one output line of ``host``; ``shown=False`` for a probe's
        lines, which belong in the host's log but not on the terminal."""
        for obs in self._all:
            fn = getattr(obs, "line", None)
            if fn is not None:
                try:
                    fn(self.run, host, line, shown)
                except Exception:  # noqa: BLE001
                    self._all.remove(obs)
                    break

    def close(self) -> None:
        """The run is over (its status set): flush and close."""
        self._call("close")
