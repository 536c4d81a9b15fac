"""``fleetctl schedule``, the pure part: render a systemd timer + service, or a crontab line, that run
``fleetctl deploy`` unattended (the nightly rebuild of DESIGN.md). Nothing here touches a file or runs
a program; :mod:`fleetctl.cli_schedule` writes and enables what this renders.

What the scheduled job is: ``FLEETCTL -i INVENTORY deploy --hosts PATTERN --playbook PLAYBOOK --json``
(every path absolute) in the folder ``fleetctl schedule`` ran in, with ``FLEETCTL_HOME`` set, so that
the run record (``$FLEETCTL_HOME/runs/<run_id>/run.json``), the JSON summary on stdout and the exit
status (0 ok, 1 a host failed, 2 bad input) are what an alert reads.

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
from dataclasses import dataclass
from pathlib import PurePosixPath

from ..errors import InputError

DEFAULT_TIMEOUT = "6h"
KILL_AFTER_S = 90  # systemd's default TimeoutStopSec: SIGKILL this long after the SIGTERM of a timeout

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
# systemd.unit(5): unit names are letters, digits, ":", "-", "_", ".", "\"; "@" marks a template
# instance; we also let "%" through for specifiers such as notify@%n.service.
UNIT_TYPES = ("service", "target", "socket", "timer", "path", "mount", "scope", "slice", "swap", "device",
              "automount")
ON_FAILURE_RE = re.compile(r"[A-Za-z0-9:_.\\@%-]+\.(" + "|".join(UNIT_TYPES) + r")")


# --------------------------------------------------------------------------------------------------
# Validation of the options


def parse_at(text: str) -> tuple[int, int]:
    """``--at HH:MM`` (24-hour clock, local time) -> (hour, minute); InputError names the option."""
    m = re.fullmatch(r"([0-9]{1,2}):([0-9]{2})", text.strip())
    if not m or int(m[1]) > 23 or int(m[2]) > 59:
        raise InputError(f"--at: want HH:MM on a 24-hour clock (00:00 to 23:59), got {text!r}")
    return int(m[1]), int(m[2])


def check_name(name: str) -> str:
    """``--name``: the unit name stem (NAME.service, NAME.timer) and the crontab marker."""
    if not NAME_RE.fullmatch(name):
        raise InputError(f"--name: {name!r} is not a usable unit name: letters, digits, '-', '_' and '.', "
                         "starting with a letter or digit, at most 100 characters")
    return name


def default_name(playbook: str) -> str:
    """``fleetctl-<playbook stem>``: ``playbooks/nightly.yaml`` -> ``fleetctl-nightly``."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", PurePosixPath(playbook).stem).strip("-._") or "playbook"
    return ("fleetctl-" + stem)[:100]


def check_on_failure(unit: str) -> str:
    """``--on-failure UNIT``: a unit name (systemd.unit(5)), specifiers allowed (``notify@%n.service``)."""
    if not ON_FAILURE_RE.fullmatch(unit) or re.search(r"%(?![A-Za-z])", unit.replace("%%", "")):
        raise InputError(f"--on-failure: {unit!r} is not a unit name like notify-failure@%n.service "
                         f"(ends in .{', .'.join(UNIT_TYPES[:3])}...)")
    return unit


def check_extra_var(item: str) -> str:
    """``-e NAME=VALUE``, the same rule as ``fleetctl deploy -e``."""
    name, sep, _ = item.partition("=")
    if not sep or not name.isidentifier():
        raise InputError(f"-e/--extra-var wants NAME=VALUE, got {item!r}")
    return item


_UNITS: list[tuple[str, int]] = [  # systemd.time(7) "Parsing time spans"; order as systemd matches them
    ("seconds", 10**6), ("second", 10**6), ("sec", 10**6), ("s", 10**6),
    ("minutes", 60 * 10**6), ("minute", 60 * 10**6), ("min", 60 * 10**6),
    ("months", 2629800 * 10**6), ("month", 2629800 * 10**6), ("M", 2629800 * 10**6),
    ("msec", 10**3), ("ms", 10**3), ("m", 60 * 10**6),
    ("hours", 3600 * 10**6), ("hour", 3600 * 10**6), ("hr", 3600 * 10**6), ("h", 3600 * 10**6),
    ("days", 86400 * 10**6), ("day", 86400 * 10**6), ("d", 86400 * 10**6),
    ("weeks", 604800 * 10**6), ("week", 604800 * 10**6), ("w", 604800 * 10**6),
    ("years", 31557600 * 10**6), ("year", 31557600 * 10**6), ("y", 31557600 * 10**6),
    ("usec", 1), ("us", 1), ("\u03bcs", 1), ("\u00b5s", 1),
]
_SPAN_PART = re.compile(r"\s*([0-9]*)(?:\.([0-9]+))?(?:\s*(" + "|".join(re.escape(u) for u, _ in _UNITS) + r"))?")


def parse_timespan(text: str, option: str) -> int | None:
    """A systemd.time(7) time span (``6h``, ``90min``, ``1h 30min``, ``3600``, ``infinity``) -> microseconds,
    ``None`` for infinity. A plain number is seconds. Stricter than systemd where systemd is lax (no
    sign), never looser: tests compare with ``systemd-analyze timespan``."""
    s = text.strip()
    if s == "infinity":
        return None
    table = dict(_UNITS)
    total, pos, parts = 0, 0, 0
    while pos < len(s):
        m = _SPAN_PART.match(s, pos)
        if not m or m.end() == pos or not (m[1] or m[2]):
            break
        if not m[3] and m.end() < len(s) and not s[m.end()].isspace():
            break  # a number without a unit ends the text or is followed by a space ("1.5.2h" is refused)
        whole, frac, unit = m[1] or "0", m[2] or "", m[3] or "s"
        mult = table[unit]
        total += int(whole) * mult + (int(frac) * mult // 10 ** len(frac) if frac else 0)
        pos, parts = m.end(), parts + 1
    if not s or pos != len(s) or not parts:
        raise InputError(f"{option}: want a time span such as 6h, 90min, '1h 30min', 3600 (seconds) or "
                         f"infinity (systemd.time(7)), got {text!r}")
    return total


# --------------------------------------------------------------------------------------------------
# systemd quoting


_CEscapes = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r", "\a": "\\a", "\b": "\\b",
             "\f": "\\f", "\v": "\\v"}
_PLAIN_WORD = re.compile(r"[^\s\"'\\\x00-\x1f\x7f]+")


def _utf8(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"{what}: {text!r} is not valid UTF-8, which unit files must be") from None
    if "\x00" in text:
        raise InputError(f"{what}: {text!r} contains a NUL character")


def systemd_quote(word: str, *, dollar: bool = True, what: str = "argument") -> str:
    """One item of a unit-file setting that systemd unquotes (systemd.syntax(7) "Quoting"): ``%`` ->
    ``%%`` (systemd.unit(5) specifiers), ``$`` -> ``$$`` when ``dollar`` (ExecStart= arguments:
    systemd.service(5) "Command lines"); then, unless the word is plain (non-empty, no whitespace,
    quote, backslash or control character, not a lone ``;``), wrapped in double quotes with C-style
    escapes for backslash, double quote and control characters.

    >>> systemd_quote('/opt/my fleet/100% "x"')
    '"/opt/my fleet/100%% \\\\"x\\\\""'
    """
    _utf8(word, what)
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
    _utf8(path, what)
    if re.search(r"[\x00-\x1f\x7f]", path) or path != path.strip() or path.endswith("\\"):
        raise InputError(f"{what}: {path!r} cannot be written in a unit file (control characters, "
                         "leading or trailing whitespace, or a trailing backslash)")
    return path.replace("%", "%%")


def _text(text: str) -> str:
    """Free text (``Description=``): printable, one line, ``%`` escaped, no line-continuing backslash."""
    flat = "".join(c if c.isprintable() else "?" for c in text).strip().rstrip("\\").strip()
    return flat.replace("%", "%%")


# --------------------------------------------------------------------------------------------------
# The job and its renderings


@dataclass(frozen=True)
class Job:
    """One scheduled deploy.

    Attributes:
        name: unit name stem and crontab marker (:func:`check_name`).
        hour, minute: local time of day.
        fleetctl: how to run fleetctl: ``[/abs/bin/fleetctl]`` or ``[/abs/python3, -m, fleetctl]``.
        inventory, playbook: absolute paths.
        pattern: the ``--hosts`` pattern.
        workdir: absolute folder the job runs in (WorkingDirectory=, ``cd``).
        home: absolute FLEETCTL_HOME: the runs folder is ``home/runs``, cron's log ``home/cron.log``.
        extra_vars: ``NAME=VALUE`` items passed as ``-e``.
        timeout: time span text (systemd.time(7)), validated; ``infinity`` or ``0``: none.
        randomized_delay: time span text for RandomizedDelaySec= (``0``: none).
        on_failure: units for OnFailure=.
        nice: Nice= (-20..19) or None.
        idle_io: IOSchedulingClass=idle.
        system: system units (User= set to ``user``) rather than user units.
        user: the account a system service runs as.
    """

    name: str
    hour: int
    minute: int
    fleetctl: tuple[str, ...]
    inventory: str
    playbook: str
    pattern: str
    workdir: str
    home: str
    extra_vars: tuple[str, ...] = ()
    timeout: str = DEFAULT_TIMEOUT
    randomized_delay: str = "0"
    on_failure: tuple[str, ...] = ()
    nice: int | None = None
    idle_io: bool = False
    system: bool = False
    user: str | None = None

    def argv(self) -> list[str]:
        """The deploy command, unattended: ``fleetctl -i INV deploy --hosts P --playbook PB [-e ...] --json``."""
        extra = [a for item in self.extra_vars for a in ("-e", item)]
        return [*self.fleetctl, "-i", self.inventory, "deploy", "--hosts", self.pattern,
                "--playbook", self.playbook, *extra, "--json"]

    @property
    def at(self) -> str:
        return f"{self.hour:02d}:{self.minute:02d}"


def on_calendar(hour: int, minute: int) -> str:
    """systemd.time(7) calendar event for every day at HH:MM:00, local time: ``*-*-* 02:30:00``."""
    return f"*-*-* {hour:02d}:{minute:02d}:00"


def render_service(job: Job) -> str:
    """``NAME.service`` (systemd.service(5)): a oneshot that runs the deploy once and exits with its
    status; OnFailure= (systemd.unit(5)) is the alerting hook."""
    timeout_us = parse_timespan(job.timeout, "--timeout")
    lines = [
        "# Written by `fleetctl schedule`; run it again to change this unit, do not edit it by hand.",
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
        "Environment=" + systemd_quote(f"FLEETCTL_HOME={job.home}", dollar=False, what="FLEETCTL_HOME"),
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
        "# Written by `fleetctl schedule`; run it again to change this unit, do not edit it by hand.",
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


def marker(name: str) -> str:
    """The comment that ends our crontab line: ``# fleetctl:NAME``."""
    return f"# fleetctl:{name}"


def cron_line(job: Job) -> str:
    """One crontab(5) line: ``M H * * * cd DIR && FLEETCTL_HOME=HOME [timeout ...] [nice ...] FLEETCTL
    -i ... deploy ... --json >> HOME/cron.log 2>&1 # fleetctl:NAME``; words quoted for /bin/sh with
    shlex.quote, then each ``%`` escaped as ``\\%`` for cron. The timeout, randomized delay, nice and
    idle-I/O options become ``timeout``, ``sleep``, ``nice`` and ``ionice`` (coreutils, util-linux)."""
    if job.on_failure:
        raise InputError("--on-failure: names a systemd unit; cron has none to start (alert on the exit "
                         "status in cron.log or on the run record instead)")
    words = [*job.argv()]
    for w in [job.workdir, job.home, *words]:
        _utf8(w, "cron line")
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
    command = (f"cd {q(job.workdir)} && {sleep}FLEETCTL_HOME={q(job.home)} "
               + " ".join(q(w) for w in wrap + words)
               + f" >> {q(job.home.rstrip('/') + '/cron.log')} 2>&1 {marker(job.name)}")
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


__all__ = ["Job", "check_extra_var", "check_name", "check_on_failure", "cron_line", "default_name",
           "marker", "merge_crontab", "on_calendar", "parse_at", "parse_timespan", "render_service",
           "render_timer", "systemd_exec", "systemd_path", "systemd_quote"]
