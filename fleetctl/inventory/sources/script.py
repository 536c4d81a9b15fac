"""Running dynamic inventory scripts: ``--list``, then ``--host HOST`` for each host when the
``--list`` JSON has no ``_meta.hostvars`` (Ansible's script inventory contract,
https://docs.ansible.com/ansible/latest/dev_guide/developing_inventory.html#inventory-script-conventions).

Ansible's script plugin waits as long as each call takes, one ``--host`` call after another, so a
500-host script whose CMDB answers slowly, or not at all, holds a run for hours. Here every script
call of one inventory load (``--list`` and every ``--host``, of every script source) shares one
budget, :class:`ScriptBudget`: ``FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S`` seconds (default 60) counted
from the first call. The ``--host`` calls run in parallel, at most :data:`HOST_CALLS_AT_ONCE` at a
time. A call still running when the budget is spent is stopped with its children, and the load
fails with one line naming the script and the call (``--host gpu07``); the first call to fail
stops the others.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fleetctl.errors import InputError, InventoryError

__all__ = ["HOST_CALLS_AT_ONCE", "SCRIPT_TIMEOUT_ENV", "SCRIPT_TIMEOUT_S", "ScriptBudget", "run_host_calls",
           "run_script", "script_timeout_s"]

SCRIPT_TIMEOUT_S = 60.0
"""The default budget of all inventory script calls of one inventory load, seconds. Ansible's
script plugin waits as long as it takes; fleetctl promises bad input is one clear line, and a hung
CMDB must not hang a deploy (new-user trial: ``#!/bin/sh`` ``sleep 1000`` as ``-i``)."""

SCRIPT_TIMEOUT_ENV = "FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S"
"""The controller's environment variable that sets the budget (seconds, > 0)."""

HOST_CALLS_AT_ONCE = 16
"""Most ``--host`` calls of one script running at once (each is a process on the controller)."""

_POLL_S = 0.2  # how often a running call looks whether another one failed (seconds)


def script_timeout_s(environ: Mapping[str, str] | None = None) -> float:
    """The inventory script budget, seconds: ``FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S``, else 60.

    Raises:
        InputError: the variable is not a positive finite number of seconds (exit 2, naming it).
    """
    raw = (os.environ if environ is None else environ).get(SCRIPT_TIMEOUT_ENV, "").strip()
    if not raw:
        return SCRIPT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{SCRIPT_TIMEOUT_ENV}: want a positive number of seconds, got {raw!r}")
    return value


class ScriptBudget:
    """The time all script calls of one inventory load may take together.

    Args:
        total_s: seconds (None: :func:`script_timeout_s`, read when the first call starts).
    """

    def __init__(self, total_s: float | None = None) -> None:
        self._total_s = total_s
        self._deadline: float | None = None
        self._lock = threading.Lock()

    @property
    def total_s(self) -> float:
        """The budget, seconds."""
        if self._total_s is None:
            self._total_s = script_timeout_s()
        return self._total_s

    def start(self) -> None:
        """Start the clock (the first call does; later calls keep it)."""
        total = self.total_s  # a bad FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S is refused before any script runs
        with self._lock:
            if self._deadline is None:
                self._deadline = time.monotonic() + total

    def remaining_s(self) -> float:
        """Seconds left (0 when spent); the clock starts here if no call started it."""
        self.start()
        assert self._deadline is not None
        return max(0.0, self._deadline - time.monotonic())


class _Stopped(Exception):
    """A call stopped because another call of the same script failed first."""


class _PastBudget(InventoryError):
    """A call was still running when the budget was spent."""


def _past_budget(path: str, what: str, budget: ScriptBudget, others: int = 0) -> InventoryError:
    more = f"; {others} more --host call{'s' if others != 1 else ''} unfinished" if others else ""
    return _PastBudget(f"inventory script ran past {budget.total_s:g} s (the budget of all its calls while the "
                          f"inventory loads) with {what} and was stopped{more} (set {SCRIPT_TIMEOUT_ENV} for a "
                          "longer limit)", file=path)


def run_script(path: str, *args: str, budget: ScriptBudget | None = None,
               stop: threading.Event | None = None) -> Any:
    """Run an inventory script with ``args`` (``--list`` or ``--host NAME``) and decode its JSON.

    The script runs as given (its own shebang), in the current folder, with the environment
    inherited, in a session of its own; its stderr is shown only when it fails. Empty output from
    ``--host`` means no vars. It may run for what is left of ``budget`` (None: a budget of its
    own); past it, or when ``stop`` is set, the script and every process it started (its process
    group) are killed, so a child holding its output open (``sleep`` under ``sh``) neither hangs
    fleetctl nor is left behind.

    Raises:
        InventoryError: the script cannot be run, exits non-zero, runs past the budget, or prints
            something that is not UTF-8 JSON (naming the script, the call and the cause).
        InputError: ``FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S`` is not a positive number.
    """
    budget = ScriptBudget() if budget is None else budget
    budget.start()
    argv = [os.path.abspath(path), *args]
    what = " ".join(args)
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    except OSError as exc:
        raise InventoryError(f"inventory script cannot be run: {exc.strerror or exc}", file=path) from None
    with proc:
        try:
            while True:
                left = budget.remaining_s()
                if left <= 0:
                    raise _past_budget(path, what, budget)
                if stop is not None and stop.is_set():
                    raise _Stopped()
                try:  # retrying communicate after its timeout loses no output (subprocess docs)
                    stdout, stderr_bytes = proc.communicate(timeout=min(left, _POLL_S) if stop is not None else left)
                    break
                except subprocess.TimeoutExpired:
                    continue
        except BaseException:  # past the budget, stopped, or Ctrl-C (its own session gets no SIGINT)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            raise
    stderr = stderr_bytes.decode("utf-8", "replace").strip().splitlines()
    last = f": {stderr[-1].strip()}" if stderr else ""
    if proc.returncode != 0:
        raise InventoryError(f"inventory script exited with status {proc.returncode} for {what}{last}", file=path)
    try:
        text = stdout.decode("utf-8")
    except UnicodeDecodeError:
        raise InventoryError(f"inventory script printed bytes that are not UTF-8 for {what}", file=path) from None
    if args[:1] == ("--host",) and not text.strip():
        return {}
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InventoryError(f"inventory script output for {what} is not JSON: {exc}", file=path) from None


def run_host_calls(path: str, names: Sequence[str], budget: ScriptBudget,
                   at_once: int = HOST_CALLS_AT_ONCE) -> dict[str, Any]:
    """``path --host NAME`` for each of ``names``, at most ``at_once`` at a time, within ``budget``.

    Returns:
        ``{name: decoded JSON}`` in the order of ``names``.

    Raises:
        InventoryError: a call failed (the first in ``names`` order of those that failed; the
            calls still running are stopped), or calls ran past the budget (naming the first such
            host and how many more were unfinished).
    """
    budget.start()
    stop = threading.Event()
    results: dict[str, Any] = {}
    errors: dict[int, BaseException] = {}

    def call(index: int, name: str) -> None:
        if stop.is_set():
            return
        try:
            results[name] = run_script(path, "--host", name, budget=budget, stop=stop)
        except _Stopped:
            pass
        except BaseException as exc:  # noqa: BLE001 - kept, raised below in the caller's thread
            errors[index] = exc
            stop.set()

    pool = ThreadPoolExecutor(max_workers=max(1, min(at_once, len(names))), thread_name_prefix="inventory-host")
    try:
        for future in [pool.submit(call, i, n) for i, n in enumerate(names)]:
            future.result()
    except BaseException:  # Ctrl-C: stop every call, leave no script behind
        stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    if errors:
        first = min(errors)
        exc = errors[first]
        if isinstance(exc, _PastBudget):  # name the first hung host, and count the others
            exc = _past_budget(path, f"--host {names[first]}", budget, len(names) - len(results) - 1)
        raise exc
    return {name: results[name] for name in names}
