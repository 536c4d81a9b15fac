"""Observers of API runs: an observer object (``event(run, event)``, ``line(run, host, line,
shown)``, ``close(run)``: :class:`fleetctl.engine.observer.Observer`, as the CLI's terminal, the
run record and the metrics are), or a plain callable, called with each
:class:`~fleetctl.engine.model.Event`.

A callable gets the same events the CLI's terminal gets (``event.name``, ``event.host``,
``event.data``; schema: ``docs/schema/events.schema.json``), among them:

- ``run.started`` (``kind``, ``mode``, ``hosts``, ``tasks``, ``batches``), ``batch.started``
  (``batch``, ``of``, ``hosts``), ``run.stopped`` (``reason``), ``run.finished`` (``status``);
- ``host.started``, ``facts.gathered`` (``gpus``, ``arch_list``), ``note.added`` (``message``),
  ``host.finished`` (``status``, ``error``, ``duration_s``; ``run``: ``rc``);
- ``task.started`` (``task``, ``action``), ``task.finished`` (``task``, ``status``, ``msg``,
  ``duration_s``...), ``step.planned`` (dry runs), ``lock.refused`` (``error``);
- ``output.line`` (``stream``: ``stdout``/``stderr``, ``text``: the line without its newline),
  for each line a host printed that the terminal shows (probes' lines go only to the log).

A callable that raises is dropped with one warning on stderr; the run goes on.

Observers are called synchronously, in the run's event loop, and must return quickly: an
``async def`` callback (or an observer whose ``event``/``line``/``close`` is one) is refused with
one InputError line when the run is asked for (calling it would only make a coroutine that
nothing awaits: Python's ``RuntimeWarning: coroutine ... was never awaited``, and no callback).
To do async work from an observer, schedule it: ``lambda e: loop.create_task(handle(e))``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any


class CallbackObserver:
    """A plain callable as an observer (see the module docstring for what it is called with)."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __repr__(self) -> str:
        return f"CallbackObserver({getattr(self.fn, '__qualname__', self.fn)!r})"

    def event(self, run: Any, event: Any) -> None:
        self.fn(event)

    def line(self, run: Any, host: str, line: Any, shown: bool) -> None:
        if shown:
            from ..engine.model import Event

            text = line.data.decode("utf-8", "replace").rstrip("\n")
            self.fn(Event(name="output.line", host=host, data={"stream": line.stream,
                                                                 "text": run.redactor.text(text)}))


def as_observers(observers: Iterable[Any] | Any | None) -> list[Any]:
    """Observer objects as given; a callable without ``event``/``line`` wrapped in a
    :class:`CallbackObserver`. One observer or callable alone (``observers=print``) is a list of
    one.

    Raises:
        InputError: neither a list of them nor one of them (``observers=1``), an item that is
            neither, or one that is a coroutine function (``async def``: see the module docstring).
    """
    from ..errors import InputError

    if observers is None:
        return []
    if hasattr(observers, "event") or hasattr(observers, "line") or callable(observers) or (
            hasattr(observers, "close") and not isinstance(observers, Iterable)):  # a generator has close()
        observers = [observers]
    elif isinstance(observers, (str, bytes, Mapping)) or not isinstance(observers, Iterable):
        raise InputError(f"observers: want a callable, an observer object (event/line methods) or a list of "
                         f"them, got {observers!r}")
    out = []
    for obs in observers:
        _refuse_async(obs)
        if hasattr(obs, "event") or hasattr(obs, "line") or hasattr(obs, "close"):
            out.append(obs)
        elif callable(obs):
            out.append(CallbackObserver(obs))
        else:
            raise InputError(f"observers: want callables or observer objects (event/line methods), got {obs!r}")
    return out


def _refuse_async(obs: Any) -> None:
    """InputError for an observer that is (or whose ``event``/``line``/``close`` or ``__call__`` is)
    an ``async def``: observers are called, never awaited (the module docstring)."""
    import inspect

    from ..errors import InputError

    for part in (obs, *(getattr(obs, n, None) for n in ("event", "line", "close", "__call__"))):
        if part is not None and (inspect.iscoroutinefunction(part) or inspect.isasyncgenfunction(part)):
            name = getattr(part, "__qualname__", repr(part))
            raise InputError(f"observers: {name} is an async function, which observers are not (they are called, "
                             f"never awaited); give a plain function (it may schedule a task: "
                             f"lambda e: loop.create_task(...))")
