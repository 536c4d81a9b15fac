"""The systemd timer and service units of a :class:`~.job.Job`, and systemd's own quoting.

systemd (systemd.service(5), systemd.timer(5), systemd.exec(5), systemd.syntax(7), systemd.time(7)):

- ``NAME.service``: ``Type=oneshot`` (the timer's next elapse waits for the run to end),
  ``TimeoutStartSec=`` (a hung run is stopped: SIGTERM, which fleetctl turns into an interrupted run
  record and exit 143), ``OnFailure=`` (systemd.unit(5)) starts the given units when the run fails:
  the hook for alerting (``--on-failure notify@%n.service``; ``%n`` is this service's name).
- ``NAME.timer``: ``OnCalendar=*-*-* HH:MM:00`` (local time), ``Persistent=true`` (a run missed while the
  machine was off starts at the next boot), ``RandomizedDelaySec=`` (spreads many schedulers).

Unit file quoting differs from the shell's, so :func:`systemd_quote` implements systemd's own rules:

- systemd.syntax(7) "Quoting": a whole item may be wrapped in double quotes; inside, C-style escapes
  (``\\\\``, ``\\"``, ``\\n``, ``\\t``, ``\\xNN``...) are decoded; a line ending in a backslash continues on
  the next line (so a value never ends in a lone backslash here).
- systemd.unit(5) "Specifiers": ``%`` starts a specifier in most settings, before unquoting; a literal
  ``%`` is ``%%``.
- systemd.service(5) "Command lines": ``$FOO`` and ``${FOO}`` are environment substitutions in the
  arguments (not in the executable path), so a literal ``$`` in an argument is ``$$``; a lone ``;``
  separates commands (quoted, it is an argument); the executable path may hold spaces, no control
  characters (nor, systemd 252 shows, quotes or backslashes).
- systemd.exec(5) ``Environment=``: assignments are unquoted like the above, with specifiers, without
  ``$`` substitution. ``WorkingDirectory=`` is not unquoted at all: only ``%`` is escaped.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from ..errors import InputError
from .installed import HEADER
from .job import Job, check_utf8, parse_timespan

__all__ = ["on_calendar", "render_service", "render_timer", "systemd_exec", "systemd_path", "systemd_quote"]


# --------------------------------------------------------------------------------------------------
# systemd quoting


_CEscapes = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r", "\a": "\\a", "\b": "\\b",
             "\f": "\\f", "\v": "\\v"}
_PLAIN_WORD = re.compile(r"[^\s\"'\\\x00-\x1f\x7f]+")


def systemd_quote(word: str, *, dollar: bool = True, what: str = "argument") -> str:
    """One item of a unit-file setting that systemd unquotes (systemd.syntax(7) "Quoting"): ``%`` ->
    ``%%`` (systemd.unit(5) specifiers), ``$`` -> ``$$`` when ``dollar`` (ExecStart= arguments:
    systemd.service(5) "Command lines"); then, unless the word is plain (non-empty, no whitespace,
    quote, backslash or control character, not a lone ``;``), wrapped in double quotes with C-style
    escapes for backslash, double quote and control characters.

    >>> systemd_quote('/opt/my fleet/100% "x"')
    '"/opt/my fleet/100%% \\\\"x\\\\""'
    """
    check_utf8(word, what)
    w = word.replace("%", "%%")
    if dollar:
        w = w.replace("$", "$$")
    if _PLAIN_WORD.fullmatch(w) and w != ";":
        return w
    out = []
    for c in w:
        if c in _CEscapes:
            out.append(_CEscapes[c])
        elif ord(c) < 0x20 or c == "\x7f":
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def systemd_exec(argv: list[str]) -> str:
    """The value of ``ExecStart=``: every argument through :func:`systemd_quote`; argv[0] an absolute path
    that systemd accepts as an executable: no control characters, quotes or backslashes (systemd
    refuses them: "Executable name contains special characters"), no ``$`` (the executable path is
    not ``$``-substituted, but argv[0] as the program sees it is)."""
    exe = argv[0]
    if not exe.startswith("/") or re.search(r"[\x00-\x1f\x7f$\"'\\]", exe):
        raise InputError(f"the fleetctl executable {exe!r} must be an absolute path without control "
                         "characters, quotes, backslashes or '$' for systemd to run it (systemd.service(5)); "
                         "install fleetctl elsewhere or use --cron")
    return " ".join([systemd_quote(exe, dollar=False, what="executable")]
                    + [systemd_quote(a) for a in argv[1:]])


def systemd_path(path: str, what: str) -> str:
    """A setting that systemd does not unquote (``WorkingDirectory=``): ``%`` -> ``%%`` only; refused if
    it could not survive the line parser (control characters, edge whitespace, a trailing backslash)."""
    check_utf8(path, what)
    if re.search(r"[\x00-\x1f\x7f]", path) or path != path.strip() or path.endswith("\\"):
        raise InputError(f"{what}: {path!r} cannot be written in a unit file (control characters, "
                         "leading or trailing whitespace, or a trailing backslash)")
    return path.replace("%", "%%")


def _text(text: str) -> str:
    """Free text (``Description=``): printable, one line, ``%`` escaped, no line-continuing backslash."""
    flat = "".join(c if c.isprintable() else "?" for c in text).strip().rstrip("\\").strip()
    return flat.replace("%", "%%")


# --------------------------------------------------------------------------------------------------
# The units


def on_calendar(hour: int, minute: int) -> str:
    """systemd.time(7) calendar event for every day at HH:MM:00, local time: ``*-*-* 02:30:00``."""
    return f"*-*-* {hour:02d}:{minute:02d}:00"


def render_service(job: Job) -> str:
    """``NAME.service`` (systemd.service(5)): a oneshot that runs the deploy once and exits with its
    status; OnFailure= (systemd.unit(5)) is the alerting hook."""
    timeout_us = parse_timespan(job.timeout, "--timeout")
    lines = [
        f"{HEADER}; run it again to change this unit, do not edit it by hand.",
        "# The exit status is the deploy's: 0 every host ok, 1 a host failed, 2 bad input. Its JSON summary",
        f"# goes to the journal, its run record to {_text(job.home)}/runs/<run_id>/run.json.",
        "# Alerting: OnFailure= starts the given units when this run fails (fleetctl schedule --on-failure UNIT).",
        "[Unit]",
        f"Description={_text(f'{job.name}: fleetctl deploy of {PurePosixPath(job.playbook).name} to {job.pattern}')}",
        "Documentation=man:systemd.service(5) man:systemd.timer(5)",
    ]
    if job.on_failure:
        lines.append("OnFailure=" + " ".join(job.on_failure))
    if job.system:
        lines += ["Wants=network-online.target", "After=network-online.target"]
    lines += [
        "",
        "[Service]",
        "Type=oneshot",
    ]
    if job.system and job.user:
        lines.append(f"User={job.user}")
    lines += [
        f"WorkingDirectory={systemd_path(job.workdir, 'working directory')}",
        *("Environment=" + systemd_quote(f"{k}={v}", dollar=False, what=k) for k, v in job.env),
        "ExecStart=" + systemd_exec(job.argv()),
        f"TimeoutStartSec={'infinity' if not timeout_us else job.timeout.strip()}",
    ]
    if job.nice is not None:
        lines.append(f"Nice={job.nice}")
    if job.idle_io:
        lines.append("IOSchedulingClass=idle")
    return "\n".join(lines) + "\n"


def render_timer(job: Job) -> str:
    """``NAME.timer`` (systemd.timer(5)): every day at HH:MM local time; Persistent=true catches up a
    run missed while the machine was off; enabled through timers.target."""
    if parse_timespan(job.randomized_delay, "--randomized-delay") is None:
        raise InputError("--randomized-delay: infinity makes no sense for a daily run")
    return "\n".join([
        f"{HEADER}; run it again to change this unit, do not edit it by hand.",
        "[Unit]",
        f"Description={_text(f'{job.name}: fleetctl deploy every day at {job.at}')}",
        "Documentation=man:systemd.timer(5)",
        "",
        "[Timer]",
        f"OnCalendar={on_calendar(job.hour, job.minute)}",
        "Persistent=true",
        f"RandomizedDelaySec={job.randomized_delay.strip()}",
        f"Unit={job.name}.service",
        "",
        "[Install]",
        "WantedBy=timers.target",
    ]) + "\n"
