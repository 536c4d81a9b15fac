"""The scheduled job: the options of ``fleetctl schedule`` validated (each error names its option),
systemd.time(7) time spans, and :class:`Job`, one scheduled deploy, from which :mod:`.systemd` and
:mod:`.crontab` render.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from ..errors import InputError

__all__ = ["DEFAULT_TIMEOUT", "KILL_AFTER_S", "NAME_RE", "ON_FAILURE_RE", "UNIT_TYPES", "Job",
           "check_name", "check_on_failure", "check_utf8", "default_name", "parse_at", "parse_timespan"]

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
    """``fleetctl-<playbook stem>``: ``playbooks/nightly.yaml`` -> ``fleetctl-nightly``.

    Not derived from the host pattern, on purpose: a pattern (``gpu:&rack2:!gpu07``, ``gpu[0:3]``) is
    not a unit name and would be mangled into look-alikes; a job whose pattern is edited (a group
    added) would become a second job deploying the same playbook to the same hosts at the same time
    instead of replacing the first; and jobs scheduled before keep their names. A second job for the
    same playbook is instead refused until it gets its own ``--name`` (:mod:`.installed`)."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", PurePosixPath(playbook).stem).strip("-._") or "playbook"
    return ("fleetctl-" + stem)[:100]


def check_on_failure(unit: str) -> str:
    """``--on-failure UNIT``: a unit name (systemd.unit(5)), specifiers allowed (``notify@%n.service``)."""
    if not ON_FAILURE_RE.fullmatch(unit) or re.search(r"%(?![A-Za-z])", unit.replace("%%", "")):
        raise InputError(f"--on-failure: {unit!r} is not a unit name like notify-failure@%n.service "
                         f"(ends in .{', .'.join(UNIT_TYPES[:3])}...)")
    return unit


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


def check_utf8(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"{what}: {text!r} is not valid UTF-8, which unit files must be") from None
    if "\x00" in text:
        raise InputError(f"{what}: {text!r} contains a NUL character")


# --------------------------------------------------------------------------------------------------
# The job


@dataclass(frozen=True)
class Job:
    """One scheduled deploy.

    Attributes:
        name: unit name stem and crontab marker (:func:`check_name`).
        hour, minute: local time of day.
        fleetctl: how to run fleetctl: ``[/abs/bin/fleetctl]`` or ``[/abs/python3, -m, fleetctl]``.
        inventory: every ``-i`` source, in order: a path (file or folder) absolute, a source that
            is not a path (``slurm:``, a host list) as given.
        playbook: absolute path.
        pattern: the ``--hosts`` pattern.
        workdir: absolute folder the job runs in (WorkingDirectory=, ``cd``).
        home: the absolute state folder the job's runs will use (:func:`fleetctl.util.paths.state_dir`):
            run records in ``home/runs``, cron's log ``home/cron.log``.
        env: the environment the job carries from the shell that scheduled it, decided per
            variable (:func:`fleetctl.cli.schedule_env.job_env`): the state folder's variable
            (``FLEETCTL_HOME`` only when the user set it), ``XDG_CACHE_HOME``, retention and
            inventory settings, Slurm's client settings; empty when the user set none of them.
        extra_vars: items passed as ``-e`` (``fleetctl schedule`` gives only ``@FILE`` items: values
            stay out of unit files and crontab lines, see :mod:`.varsfile`).
        metrics_file: absolute path passed as ``--metrics-file`` (Prometheus textfile), or None.
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
    inventory: tuple[str, ...]
    playbook: str
    pattern: str
    workdir: str
    home: str
    env: tuple[tuple[str, str], ...] = ()
    extra_vars: tuple[str, ...] = ()
    timeout: str = DEFAULT_TIMEOUT
    randomized_delay: str = "0"
    on_failure: tuple[str, ...] = ()
    nice: int | None = None
    idle_io: bool = False
    system: bool = False
    user: str | None = None
    metrics_file: str | None = None
    ssh_options: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.inventory, str) or not self.inventory:
            raise TypeError("Job.inventory: a non-empty tuple of sources, not one string")

    def argv(self) -> list[str]:
        """The deploy command, unattended: ``fleetctl -i INV [-i INV ...] [-o OPT ...] deploy --hosts P --playbook PB
        [-e ...] [--metrics-file PATH] --json``."""
        extra = [a for item in self.extra_vars for a in ("-e", item)]
        metrics = ["--metrics-file", self.metrics_file] if self.metrics_file else []
        ssh = [a for item in self.ssh_options for a in ("-o", item)]
        inventory = [a for source in self.inventory for a in ("-i", source)]
        return [*self.fleetctl, *inventory, *ssh, "deploy", "--hosts", self.pattern,
                "--playbook", self.playbook, *extra, *metrics, "--json"]

    @property
    def at(self) -> str:
        return f"{self.hour:02d}:{self.minute:02d}"
