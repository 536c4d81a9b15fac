"""The crontab line of a :class:`~.job.Job`, and merging it into a user's crontab.

cron (crontab(5)): ``M H * * * COMMAND``. cron hands COMMAND to ``/bin/sh`` (unless the crontab sets
SHELL), so every word is quoted with :func:`shlex.quote`; then crontab(5)'s own rule applies: an
unescaped ``%`` ends the command (the rest becomes its stdin), so each ``%`` is written ``\\%`` (cron drops
the backslash). crontab(5) also says a comment cannot share a line with a command: our marker
``# fleetctl:NAME`` is therefore part of the command, where /bin/sh reads it as a comment, and it lets
:func:`merge_crontab` find and replace our line among the user's others.
"""

from __future__ import annotations

import math
import re
import shlex

from ..errors import InputError
from .job import KILL_AFTER_S, Job, check_utf8, parse_timespan

__all__ = ["CRON_LOG_KEEP_BYTES", "cron_line", "marker", "merge_crontab", "remove_from_crontab"]

#: ``STATE/cron.log`` is moved to ``cron.log.1`` (replacing the one before) when a run starts and finds it
#: larger than this: the log stays within about twice this plus one run's output (a ``--json`` run
#: prints every host's facts: ~16 KB a host), as journald bounds the systemd job's output.
CRON_LOG_KEEP_BYTES = 10 * 1024 * 1024


def marker(name: str) -> str:
    """The comment that ends our crontab line: ``# fleetctl:NAME``."""
    return f"# fleetctl:{name}"


def cron_line(job: Job) -> str:
    """One crontab(5) line: ``M H * * * log=STATE/cron.log; ROTATE; { cd DIR && [NAME=VALUE ...]
    [timeout ...] [nice ...] FLEETCTL -i ... deploy ... --json; } >> "$log" 2>&1 # fleetctl:NAME`` (the variables of
    ``Job.env``, e.g. ``FLEETCTL_HOME`` only when the user set it); words quoted for /bin/sh with
    shlex.quote, then each ``%`` escaped as ``\\%`` for cron. The timeout, randomized delay, nice and
    idle-I/O options become ``timeout``, ``sleep``, ``nice`` and ``ionice`` (coreutils, util-linux).

    The braces put the whole command's output in cron.log, a ``cd`` into a folder since removed
    included (operator trial: only fleetctl's was, so ``can't cd`` went to cron's mail, usually
    nowhere). ROTATE moves cron.log to cron.log.1 when it is over :data:`CRON_LOG_KEEP_BYTES`
    (``find -size +Nc``, POSIX), before the redirection opens it (operator trial: cron.log grew by
    every night's JSON document, ~16 MB for 1,000 hosts, and nothing pruned it)."""
    if job.on_failure:
        raise InputError("--on-failure: names a systemd unit; cron has none to start (alert on the exit "
                         "status in cron.log or on the run record instead)")
    words = [*job.argv()]
    for w in [job.workdir, job.home, *(v for _, v in job.env), *words]:
        check_utf8(w, "cron line")
        if re.search(r"[\n\r]", w):
            raise InputError(f"--cron: {w!r} holds a line break, which a crontab line cannot")
    q = shlex.quote
    wrap: list[str] = []
    if job.idle_io:
        wrap += ["ionice", "-c", "3"]
    if job.nice is not None:
        wrap += ["nice", "-n", str(job.nice)]
    timeout_us = parse_timespan(job.timeout, "--timeout")
    if timeout_us:
        wrap = ["timeout", f"--kill-after={KILL_AFTER_S}s", f"{math.ceil(timeout_us / 10**6)}s", *wrap]
    delay_us = parse_timespan(job.randomized_delay, "--randomized-delay")
    if delay_us is None:
        raise InputError("--randomized-delay: infinity makes no sense for a daily run")
    sleep = f'sleep "$(shuf -i 0-{delay_us // 10**6} -n 1)" && ' if delay_us >= 10**6 else ""
    env = "".join(f"{k}={q(v)} " for k, v in job.env)
    # the log's path once (a shell variable): Debian's cron cuts a command at 1000 bytes
    rotate = (f"log={q(job.home.rstrip('/') + '/cron.log')}; "
              f'[ -z "$(find "$log" -size +{CRON_LOG_KEEP_BYTES}c 2>/dev/null)" ] || mv -f "$log" "$log.1"; ')
    command = (f"{rotate}{{ cd {q(job.workdir)} && {sleep}{env}"
               + " ".join(q(w) for w in wrap + words)
               + f'; }} >> "$log" 2>&1 {marker(job.name)}')
    return f"{job.minute} {job.hour} * * * " + command.replace("%", "\\%")


def merge_crontab(current: str, line: str, name: str) -> tuple[str, str]:
    """The crontab with ``line`` in place of our line for ``name`` (the first line ending in
    ``# fleetctl:NAME``; further ones are dropped), or appended. Every other line is kept as it was.

    Returns:
        (new crontab text, ending in a newline as crontab(5) needs; what happened: ``added``,
        ``replaced`` or ``unchanged``).
    """
    tail = " " + marker(name)
    out: list[str] = []
    action = "added"
    for old in current.splitlines():
        if old.rstrip().endswith(tail):
            if action == "added":
                action = "unchanged" if old == line else "replaced"
                out.append(line)
            continue
        out.append(old)
    if action == "added":
        out.append(line)
    text = "\n".join(out) + "\n"
    if action == "unchanged" and text != (current if current.endswith("\n") else current + "\n"):
        action = "replaced"  # a duplicate of our line was dropped
    return text, action


def remove_from_crontab(current: str, name: str) -> tuple[str, list[str]]:
    """The crontab without our lines for ``name`` (every line ending in ``# fleetctl:NAME``, as
    :func:`merge_crontab` finds them); every other line is kept as it was.

    Returns:
        (new crontab text, ending in a newline unless empty; the lines removed, in order).
    """
    tail = " " + marker(name)
    kept: list[str] = []
    removed: list[str] = []
    for old in current.splitlines():
        (removed if old.rstrip().endswith(tail) else kept).append(old)
    return ("\n".join(kept) + "\n" if kept else ""), removed
