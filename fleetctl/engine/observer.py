"""Observers: how a run is reported, as Ansible's callback plugins.

The engine never prints and never writes the record itself: it tells its observers. An observer
gets every :class:`~fleetctl.engine.model.Event` (``event``), every output line a host prints
(``line``; the hot path, kept out of the event objects), and the end of the run (``close``). The
run record, the live terminal, the folded terminal, the HTML report and the metrics are observers
(:mod:`fleetctl.reporting`).

An observer must not raise: :class:`Observers` contains a failing observer so that a reporting bug
never stops a deploy. It is dropped, the others get a ``run.observer_failed`` event (the record keeps
it), and one warning goes to the ``fleetctl.engine`` logger (:mod:`logging`; with no handler set up,
Python's last-resort handler writes it to stderr): the engine itself never prints.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Protocol

from ..connection.base import OutputLine
from .model import Event, RunModel

log = logging.getLogger("fleetctl.engine")


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
        #: (host, stream) -> the end of a line's piece held back, and whether it is shown (:meth:`_rejoined`)
        self._held: dict[tuple[str, str], tuple[bytes, bool]] = {}

    def add(self, observer: Any) -> None:
        self._all.append(observer)

    def _call(self, method: str, *args: Any) -> None:
        failed: list[tuple[Any, Exception]] = []
        for obs in list(self._all):
            fn = getattr(obs, method, None)
            if fn is None:
                continue
            try:
                fn(self.run, *args)
            except Exception as exc:  # noqa: BLE001 - a reporting bug must not stop the run
                failed.append((obs, exc))
        for obs, exc in failed:  # after the others got this call: the order of events is kept
            self._drop(obs, exc)

    def _drop(self, obs: Any, exc: Exception) -> None:
        """Drop a failing observer: one warning on the ``fleetctl.engine`` logger, and a
        ``run.observer_failed`` event (``observer``: its class name, ``error``: ``Type: message``)
        to the observers left."""
        if obs not in self._all:
            return
        self._all.remove(obs)
        name, error = type(obs).__name__, f"{type(exc).__name__}: {exc}"
        log.warning("fleetctl: warning: %s stopped reporting: %s", name, error)
        self._call("event", Event(name="run.observer_failed", data={"observer": name, "error": error}))

    def emit(self, name: str, host: str | None = None, **data: Any) -> None:
        """Tell every observer about an event (``noun.verb_past``)."""
        self._call("event", Event(name=name, host=host, data=data))

    def _rejoined(self, host: str, line: OutputLine, shown: bool) -> OutputLine | None:
        """``line`` with the bytes held back from the previous piece of its stream in front, and,
        when it is a piece of a longer line (``partial``), its own end held back where a secret may
        go on in the next piece (:meth:`~fleetctl.util.redact.Redactor.cut_point`): every observer
        redacts what it gets, and a secret cut in two by the 1 MiB split was redacted in neither
        half (operator trial: ``out| xxx...PLA`` then ``out+ YPWSECRET42``). None when nothing is
        left to pass on yet."""
        if not line.partial and not self._held:  # the hot path: a whole line, nothing held
            return line
        key = (host, line.stream)
        held = self._held.pop(key, (b"",))[0]
        if not held and not line.partial:
            return line
        data = held + line.data
        if line.partial:
            cut = self.run.redactor.cut_point(data)
            if cut < len(data):
                self._held[key] = (data[cut:], shown)
            data = data[:cut]
            if not data:
                return None
        return OutputLine(line.stream, data, line.partial, line.login)

    def line(self, host: str, line: OutputLine, shown: bool = True) -> None:
        """Tell every observer about one output line of ``host``; ``shown=False`` for a probe's
        lines, which belong in the host's log but not on the terminal. A piece of a line over 1 MiB
        may pass on shorter, its end in front of the next piece (:meth:`_rejoined`)."""
        joined = self._rejoined(host, line, shown)
        if joined is None:
            return
        line = joined
        failed: list[tuple[Any, Exception]] = []
        for obs in self._all:
            fn = getattr(obs, "line", None)
            if fn is not None:
                try:
                    fn(self.run, host, line, shown)
                except Exception as exc:  # noqa: BLE001 - the others still get the line
                    failed.append((obs, exc))
        for obs, exc in failed:
            self._drop(obs, exc)

    def close(self) -> None:
        """The run is over (its status set): pass on what is held back of a line that never went
        on (its stream ended on a piece's end), then flush and close."""
        held, self._held = self._held, {}
        for (host, stream), (data, shown) in held.items():
            self.line(host, OutputLine(stream, data), shown)  # type: ignore[arg-type]
        self._call("close")
