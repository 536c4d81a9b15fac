"""Playbook runs (deploy, verify, rollback), the CLI's and the API's one path: check everything
first (:func:`prepare_play`, sync, raises :class:`~fleetctl.errors.InputError`), then run it
(:func:`run_play`, a coroutine: the record, the machine locks, the engine, the retry set, the end).

Modes: ``apply`` (a deploy), ``plan`` (each host's decisions, nothing changed), ``dry-run`` (the
play's probes run, the commands it would run are shown; nothing changed). All three run the same
planners (:mod:`fleetctl.engine.runner`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from .inputs import arg_name, want_bool, want_extra_vars, want_forks, want_path
from .lifecycle import finish_run, new_run
from ..util.didyoumean import close_matches
from .retry import NothingToRetry, retry_names
from .playchecks import (check_become_vars, check_extra_var_args, check_local_sources, check_unread_build_vars,
                         extra_var_warnings)

MODES = {"apply": "apply", "plan": "plan", "dry_run": "dry-run", "dry-run": "dry-run"}
_SPECIAL_TAGS = ("all", "always", "never", "tagged", "untagged")
#: The playbook each kind runs when none is given (relative: the current folder's, else fleetctl's).
DEFAULT_PLAYBOOKS = {"deploy": "playbooks/fp4-kernels.yaml", "verify": "playbooks/verify.yaml",
                     "rollback": "playbooks/rollback.yaml"}


def names(value: str | Iterable[str] | None) -> list[str]:
    """``"a, b"`` or ``["a", "b"]`` -> ``["a", "b"]`` (blank items dropped)."""
    items = value.split(",") if isinstance(value, str) else list(value or ())
    return [str(t).strip() for t in items if str(t).strip()]


def check_tags(playbook: Any, option: str, tags: list[str]) -> None:
    """A tag no task has is InputError with a did-you-mean (a misspelled tag must not run nothing)."""
    known = {t for task in (*playbook.tasks, *playbook.handlers) for t in task.tags} | set(_SPECIAL_TAGS)
    for tag in tags:
        if tag not in known:
            hint = close_matches(tag, sorted(known), n=1, cutoff=0.6)
            tail = f"; did you mean '{hint[0]}'?" if hint else ""
            raise InputError(f"{option}: no task has the tag '{tag}' (tags: {', '.join(sorted(known - set(_SPECIAL_TAGS))) or 'none'}){tail}",
                             file=str(playbook.path))


def phase_timeouts(items: Mapping[str, float] | Iterable[str] | None,
                   name: str = "phase_timeout") -> dict[str, float]:
    """Per-phase deadlines, seconds: ``{"build": 3600}``, ``["build=3600"]`` or ``"build=3600"``
    (``--phase-timeout``). ``name``: the argument as messages name it, the caller's (the API's
    ``phase_timeout``, the CLI's ``--phase-timeout``).

    Raises:
        InputError: an unknown phase (one of :data:`fleetctl.tasks.base.PHASES`), or seconds that
            are not a positive finite number; a mapping's value must be a number (int or float),
            as ``timeout`` must (:func:`fleetctl.api.inputs.want_seconds`): ``True`` is not 1 s and
            ``"10"`` is not 10 s (text is for the ``PHASE=SECONDS`` form).
    """
    from ..tasks.base import PHASES

    pairs: list[tuple[str, Any, str]] = []
    if isinstance(items, str):  # one PHASE=SECONDS, not its characters
        items = [items]
    elif items is not None and not isinstance(items, (Mapping, Iterable)):
        raise InputError(f"{name}: want a mapping of phase to seconds or PHASE=SECONDS strings, got {items!r}")
    if isinstance(items, Mapping):
        pairs = [(str(k), v, f"{k}={v}") for k, v in items.items()]
    else:
        for item in items or ():
            phase, sep, value = str(item).partition("=")
            pairs.append((phase if sep else "", value, str(item)))
    out: dict[str, float] = {}
    for phase, value, item in pairs:
        if phase not in PHASES:
            raise InputError(f"{name}: want PHASE=SECONDS with PHASE one of {', '.join(PHASES)}, got {item!r}")
        # a mapping's value is a number, never a bool or text (docs/api.md, as timeout's); the
        # PHASE=SECONDS form is text
        number = not isinstance(items, Mapping) or (isinstance(value, (int, float)) and not isinstance(value, bool))
        try:
            seconds = float(value) if number else float("nan")
        except (TypeError, ValueError):
            seconds = float("nan")
        if not math.isfinite(seconds) or seconds <= 0:
            raise InputError(f"{name} {phase}: want a positive number of seconds, got {value!r}")
        out[phase] = seconds
    return out


def serial_sizes(serial: str | int | Iterable[str | int] | None, name: str = "serial") -> list[str]:
    """Rolling batch sizes: ``"1,10%,100%"``, ``2`` or ``[1, "10%"]`` -> ``["1", "10%", "100%"]``.

    Every item must be a size, as in Ansible's ``serial`` list (each entry a host count or a
    percentage, playbooks_strategies "Setting the batch size with serial"): an empty one
    (``"1,,2"``, ``"1,"``, ``""``) is refused, never dropped, so the batches run are the ones typed.
    ``name``: the argument as messages name it (the API's ``serial``, the CLI's ``--serial``).

    Raises:
        InputError: a size that is not a positive count or a percentage up to 100%, or an empty one.
    """
    if serial is not None and not isinstance(serial, (str, int, list, tuple)) or isinstance(serial, bool) or (
            isinstance(serial, (list, tuple)) and not all(isinstance(s, (str, int)) and not isinstance(s, bool)
                                                          for s in serial)):
        raise InputError(f"{name}: want a host count, a percentage such as '10%', or a list of them; got {serial!r}")
    if serial is None:
        return []
    items = ([t.strip() for t in serial.split(",")] if isinstance(serial, str) else [str(serial)]
             if isinstance(serial, int) else [str(s).strip() for s in serial])
    for n, item in enumerate(items, 1):
        if not item:
            raise InputError(f"{name}: batch size {n} of {serial if isinstance(serial, str) else items!r} is empty: "
                             "want host counts or percentages up to 100%, like 1,10%,100%")
        m = re.fullmatch(r"([0-9]+)(%?)", item)
        if not (m and int(m[1]) > 0 and (not m[2] or int(m[1]) <= 100)):
            raise InputError(f"{name}: want host counts or percentages up to 100%, like 1,10%,100%; got {item!r}")
    return items


def rollback_to(to: str | int, name: str = "to") -> str:
    """``rollback``'s target: ``"previous"`` or a version number (``2``, ``"v2"``). ``name``: the
    argument as the message names it (the API's ``to``, the CLI's ``--to``).

    Raises:
        InputError: anything else (``0``, a negative number, a word).
    """
    text = str(to).strip()
    if not re.fullmatch(r"previous|v?[0-9]+", text):
        raise InputError(f"{name}: want 'previous' or a version number such as 2, got {text!r}")
    if text != "previous" and int(text.lstrip("v")) < 1:  # versions are numbered from 1 (docs/staged.md)
        raise InputError(f"{name}: versions are numbered from 1 (v1 the venv adopted at the first switch), got {text!r}")
    return text


@dataclass
class PreparedPlay:
    """A playbook run checked and ready (:func:`prepare_play`); nothing has connected yet.

    Attributes:
        kind: ``deploy``, ``verify`` or ``rollback``.
        mode: ``apply``, ``plan`` or ``dry-run``.
        playbook: the loaded :class:`~fleetctl.playbook.model.Playbook`.
        inventory, hosts: the inventory and the selected hosts (extra vars merged).
        pattern: the host pattern run on.
        opts: the engine's :class:`~fleetctl.engine.runner.PlayOptions` (``refused`` is filled
            by :func:`run_play` from the machine locks).
        key, play_inventory, play_file: the play's identity for its retry set.
    """

    kind: str
    mode: str
    playbook: Any
    inventory: Any
    hosts: list[Any]
    pattern: str
    opts: Any
    key: str
    play_inventory: list[str]
    play_file: str
    extra_vars: dict[str, Any] = field(default_factory=dict)


def prepare_play(fleet: Any, playbook: str | Path | None, *, kind: str = "deploy", pattern: str | None = None,
                 limit: str | None = None, mode: str = "apply", forks: int = 50,
                 tags: str | Iterable[str] | None = None, skip_tags: str | Iterable[str] | None = None,
                 force: bool = False, extra_vars: Mapping[str, Any] | None = None,
                 serial: str | int | Iterable[str | int] | None = None, max_fail_percentage: float | None = None,
                 retry_failed: str | None = None, build: str | None = None,
                 phase_timeout: Mapping[str, float] | Iterable[str] | None = None, staged: bool = False,
                 flags: Mapping[str, str] | None = None) -> PreparedPlay:
    """Check a playbook run before anything connects (the order of the checks is the CLI's).

    Args:
        fleet: the :class:`~fleetctl.api.fleet.Fleet`.
        playbook: the playbook file (None: :data:`DEFAULT_PLAYBOOKS` of ``kind``).
        kind: ``deploy``, ``verify`` or ``rollback``.
        pattern: the hosts (None: the playbook's ``hosts``; an empty or blank pattern is refused,
            never taken for None: :func:`fleetctl.inventory.patterns.given_pattern`).
        limit: a second pattern narrowing them (empty or blank: refused, as ``pattern``).
        mode: ``apply``, ``plan`` or ``dry_run`` (``dry-run``).
        forks: hosts worked on at once.
        tags, skip_tags: Ansible's ``--tags``/``--skip-tags`` (a list or a comma-separated string).
        force: rebuild and reinstall even when nothing changed.
        extra_vars: ``-e`` vars (over the fleet's).
        serial: rolling batches (``"1,10%"``, an int, or a list).
        max_fail_percentage: stop starting batches past this percentage of failed hosts (0-100).
        retry_failed: a run id, or ``"last"``: only the hosts that run of this play left failed.
        build: ``once`` (one build per arch class, the default) or ``each``.
        phase_timeout: per-phase deadlines, seconds (``{"build": 3600}``).
        staged: run in a new version of each host's venv, switched to when every task passed.
        flags: how messages name the arguments: argument -> name (the CLI passes its flags,
            :data:`fleetctl.api.inputs.CLI_FLAGS`: ``--serial``); an argument not in it is named
            as itself (``serial``), so a Python caller reads the argument it passed.

    Each extra var (the fleet's and ``extra_vars``) that the play does not read is one line to the
    fleet's ``on_warning`` once every check passed (:func:`extra_var_warnings`); it is kept.

    Returns:
        The :class:`PreparedPlay`.

    Raises:
        InputError: a bad argument, a missing or invalid playbook, a pattern matching nothing, an
            unknown tag, a var the playbook uses that no host defines, an extra var that makes a
            task argument invalid (:func:`check_extra_var_args`), a controller folder the run
            would write that cannot be written
            (:func:`fleetctl.util.ctlfolders.check_controller_folders`)...: the CLI's one line.
        NothingToRetry: ``retry_failed`` names a run that left no failed host.
    """
    from ..engine.deadlines import Deadlines
    from ..engine.runner import PlayOptions
    from ..inventory.patterns import given_pattern
    from ..playbook import load_playbook
    from ..reporting.history import play_key
    from ..util.ctlfolders import check_controller_folders
    from ..util.paths import resolve_default
    from .fleet import select_hosts

    def shown(arg: str) -> str:
        return arg_name(flags, arg)

    if mode not in MODES:
        raise InputError(f"mode: want one of apply, plan, dry_run; got {mode!r}")
    mode = MODES[mode]
    if build not in (None, "once", "each"):
        raise InputError(f"build: want 'once' or 'each', got {build!r}")
    for which, given in (("tags", tags), ("skip_tags", skip_tags)):
        if given is not None and not (isinstance(given, str) or (isinstance(given, (list, tuple))
                                                                and all(isinstance(t, str) for t in given))):
            raise InputError(f"{which}: want a tag name, a comma-separated string or a list of names; got {given!r}")
    force, staged = want_bool("force", force), want_bool("staged", staged)  # "no" is truthy: it would rebuild
    # An empty --hosts is given, not absent: it must not become the playbook's hosts (the fleet).
    pattern, limit = given_pattern(pattern), given_pattern(limit, "limit")
    extra_vars = want_extra_vars(extra_vars)  # as Fleet(extra_vars=...) checks them
    want_forks(forks)
    if max_fail_percentage is not None and (isinstance(max_fail_percentage, bool)
                                            or not isinstance(max_fail_percentage, (int, float))
                                            or not (0 <= max_fail_percentage <= 100)):
        raise InputError(f"max_fail_percentage: want 0 to 100, got {max_fail_percentage!r}")
    given = DEFAULT_PLAYBOOKS[kind] if playbook is None else want_path(shown("playbook"), playbook, "here")
    path = resolve_default(given)
    if not path.exists():
        raise InputError("playbook file not found", file=str(path))
    play = load_playbook(str(path))
    extra = dict(extra_vars or {})
    if staged:
        from ..playbook.staged import staged_playbook

        play = staged_playbook(play)
        extra["staged"] = "true"
    play_inventory, play_file = fleet.inventory_files(), str(path)
    key = play_key(play_inventory, play_file)
    if retry_failed is not None:
        # The failed run's hosts: within the pattern when given, else they are the selection (the
        # playbook's own `hosts` may not name them: that run may have had --hosts).
        failed = ",".join(retry_names(retry_failed, key, play_file, shown("retry_failed"),
                                      inventory_hosts=fleet.inventory.hosts, inventory_files=play_inventory,
                                      on_warning=fleet.on_warning))
        if pattern is not None:
            limit = failed if limit is None else f"{limit}:&{failed}"
        else:
            pattern = failed
    from_play = pattern is None
    pattern = play.hosts if from_play else pattern
    if not pattern:
        raise InputError("no hosts: give --hosts or set 'hosts' in the playbook", file=str(path))
    tag_list, skip_list = names(tags), names(skip_tags)
    check_tags(play, shown("tags"), tag_list)
    check_tags(play, shown("skip_tags"), skip_list)
    try:
        inv, hosts = select_hosts(fleet, pattern, limit, forks=forks, extra_vars=extra)
    except InputError as exc:
        if from_play and "matches no host" in exc.message:  # the user never typed this pattern: say where it is from
            raise InputError(f"{exc.message} (the playbook's hosts: {play.hosts!r} in {path}; give --hosts)",
                             file=exc.file, line=exc.line, key=exc.key) from None
        raise
    serial_items = serial_sizes(serial, shown("serial"))
    known = set.intersection(*(set(h.vars) for h in hosts)) if hosts else set()
    all_extra = {**fleet.extra_vars, **extra}
    play.check_undefined(known | set(all_extra))
    check_extra_var_args(play, [*play.select_tags(tag_list, skip_list), *play.handlers], all_extra)
    check_local_sources(play, play.select_tags(tag_list, skip_list))
    check_unread_build_vars(play, play.select_tags(tag_list, skip_list), all_extra)
    check_become_vars([*play.select_tags(tag_list, skip_list), *play.handlers], hosts)
    deadlines = Deadlines(overrides=phase_timeouts(phase_timeout, shown("phase_timeout")),
                          connect_s=fleet.connect_timeout)
    check_controller_folders()  # a cache that cannot be written must not fail a finished build
    for line in extra_var_warnings(play, {**fleet.extra_vars, **(extra_vars or {})}):
        fleet.on_warning(line)
    opts = PlayOptions(host_lock=mode == "apply", forks=forks, mode=mode, force=force, tags=tuple(tag_list),
                       skip_tags=tuple(skip_list), extra_vars=all_extra,
                       accept_new_host_keys=fleet.accept_new_host_keys, deadlines=deadlines, serial=serial_items,
                       ssh_options=fleet.ssh_options,
                       max_fail_percentage=max_fail_percentage, build_each=build == "each")
    return PreparedPlay(kind=kind, mode=mode, playbook=play, inventory=inv, hosts=hosts, pattern=pattern, opts=opts,
                        key=key, play_inventory=play_inventory, play_file=play_file, extra_vars=all_extra)


def take_locks(hosts: Sequence[Any], run: Any, observers: Any):
    """The controller-side lock of every host's machine (per user, :mod:`fleetctl.engine.machinelock`).
    A host whose machine another live run holds fails at once, naming that run (see
    ``PlayOptions.refused``); the others run. Each refusal and stale take-over is one warning line."""
    from ..engine.machinelock import HostLocks, machine_of

    locks = HostLocks({h.name: machine_of(h) for h in hosts}, run.run_id).acquire()
    for host, reason in locks.refused.items():
        _stderr_line(f"{host} {reason}; {host} fails, the other hosts run")
        observers.emit("lock.refused", host, path=str(locks.paths[host]), error=reason)
    for host, prev in locks.stale:
        _stderr_line(f"warning: {host}: taking over the stale lock of run {prev.get('run_id')} "
                   f"(pid {prev.get('pid')} is gone)")
        observers.emit("lock.stale_taken_over", host, previous=prev)
    return locks


def _stderr_line(message: str) -> None:
    import sys

    print(f"fleetctl: {message}", file=sys.stderr, flush=True)


async def run_play(prep: PreparedPlay, *, command: Sequence[str], observers: Iterable[Any] = (), verbose: int = 0,
                   on_start: Callable[[Any, Any], None] | None = None):
    """Run a prepared play and close its record.

    Args:
        prep: from :func:`prepare_play`.
        command: what started it, for the record (argv).
        observers: observers besides the record (None entries left out).
        verbose: the -v level.
        on_start: called with ``(run, record)`` once the record exists, before any host connects.

    Returns:
        ``(run, record)``: the finished :class:`~fleetctl.engine.model.RunModel` (``status`` ``ok``
        or ``failed``) and its :class:`~fleetctl.reporting.record.RunRecord`.

    Raises:
        asyncio.CancelledError / KeyboardInterrupt: the record is closed ``interrupted`` first (a
            deploy's unfinished hosts become the play's retry set).
    """
    from ..engine.runner import run_playbook
    from ..reporting.history import write_retry_set
    from ..util.redact import unwrap

    run, record, obs = new_run(prep.kind, command=command, observers=observers, verbose=verbose,
                               secrets=unwrap(prep.extra_vars)[1])  # the command line's -e, from the first line
    run.mode, run.pattern = prep.mode, prep.pattern
    run.inventory = {"path": str(prep.inventory.path), "hosts": {h.name: dict(h.vars) for h in prep.hosts}}
    locks = take_locks(prep.hosts, run, obs) if prep.mode == "apply" else None
    from dataclasses import replace

    opts = replace(prep.opts, refused=dict(locks.refused) if locks is not None else {})
    retry_args = {"key": prep.key, "inventory": prep.play_inventory, "playbook": prep.play_file}
    try:
        if on_start is not None:
            on_start(run, record)
        await run_playbook(prep.playbook, prep.hosts, run=run, observers=obs, opts=opts)
    except BaseException:
        run.failed_hosts = sorted(h for h, r in run.hosts.items() if r.status != "ok")
        if prep.mode == "apply":  # an interrupted deploy's unfinished hosts are what retry_failed takes
            interrupted = sorted(set(run.failed_hosts) | {h.name for h in prep.hosts if h.name not in run.hosts})
            write_retry_set(run.run_id, interrupted, **retry_args)
        finish_run(run, obs, "interrupted")
        raise
    finally:
        if locks is not None:
            locks.release()
    bad = run.failed_hosts
    if prep.mode == "apply":
        write_retry_set(run.run_id, bad, **retry_args)
    finish_run(run, obs, "failed" if bad else "ok")
    return run, record
