"""The job a name already holds, read back from what ``fleetctl schedule`` wrote: our crontab line
(``# fleetctl:NAME``) or ``NAME.service`` + ``NAME.timer``. Pure: text in, :class:`Installed` out.

Why: one name is one job (one crontab marker, one pair of units), and the default name comes from the
playbook alone (:func:`.job.default_name`), so scheduling ``nightly.yaml`` for a second group would
silently replace the first group's job. As cron and Ansible's ``cron`` module do (a job is found by
its name and then replaced), scheduling the *same* job again (same playbook, ``-i`` sources and host
pattern) replaces it; a name that holds a job for another playbook, inventory or pattern is refused
(:func:`check_replace`) unless ``--replace`` is given.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import InputError
from .crontab import marker
from .job import Job

__all__ = ["HEADER", "Installed", "check_metrics_shared", "check_replace", "crontab_names", "from_crontab",
           "from_units", "written_by_fleetctl"]


#: The first line of every unit file ``fleetctl schedule`` writes (:mod:`.systemd`).
HEADER = "# Written by `fleetctl schedule`"


def written_by_fleetctl(text: str | None) -> bool:
    """True when a unit file's text is one ``fleetctl schedule`` wrote (it starts with :data:`HEADER`):
    ``fleetctl schedule --remove`` removes only those, never a unit of the same name made otherwise."""
    return text is not None and text.startswith(HEADER)


@dataclass(frozen=True)
class Installed:
    """A job as installed. ``inventory``/``playbook``/``pattern`` are None when the command could not
    be read back (edited by hand): then it is not known to be the same job. ``at``: ``HH:MM`` or ``?``."""

    where: str  # "cron" or "systemd"
    at: str
    inventory: tuple[str, ...] | None = None
    playbook: str | None = None
    pattern: str | None = None
    extra_vars: tuple[str, ...] = ()  # the job's -e items (``@FILE`` for its vars files)
    metrics_file: str | None = None  # the job's --metrics-file, as written

    def same_job(self, job: Job) -> bool:
        return (self.inventory, self.playbook, self.pattern) == (tuple(job.inventory), job.playbook, job.pattern)

    def describe(self) -> str:
        if self.playbook is None:
            return f"a job fleetctl cannot read back ({self.where}, every day at {self.at})"
        inv = " ".join(f"-i {shlex.quote(s)}" for s in self.inventory or ())
        return (f"the job deploying {self.playbook} to {self.pattern!r} ({inv}) every day at {self.at} "
                f"({self.where})")


def _deploy_words(words: list[str]) -> tuple[tuple[str, ...], str, str, tuple[str, ...], str | None] | None:
    """``(inventory, playbook, pattern, extra_vars, metrics_file)`` from the words of :meth:`.job.Job.argv`
    anywhere in ``words``: ``... [-i INV | -o OPT]... deploy --hosts P --playbook PB [-e ITEM]...
    [--metrics-file PATH] ...``."""
    for k in range(len(words) - 3):
        if words[k:k + 2] == ["deploy", "--hosts"] and words[k + 3] == "--playbook" and k + 4 < len(words):
            inventory: list[str] = []
            j = k
            while j >= 2 and words[j - 2] in ("-i", "-o"):
                if words[j - 2] == "-i":
                    inventory.insert(0, words[j - 1])
                j -= 2
            extra = tuple(words[j + 1] for j in range(k + 5, len(words) - 1) if words[j] == "-e")
            metrics = next((words[j + 1] for j in range(k + 5, len(words) - 1) if words[j] == "--metrics-file"),
                           None)
            return (tuple(inventory), words[k + 4], words[k + 2], extra, metrics) if inventory else None
    return None


_MARKED = re.compile(r" # fleetctl:([A-Za-z0-9][A-Za-z0-9_.-]{0,99})$")


def crontab_names(current: str) -> list[str]:
    """The names of every job marked ``# fleetctl:NAME`` in a crontab, in order, each once."""
    found = (_MARKED.search(line.rstrip()) for line in current.splitlines())
    return list(dict.fromkeys(m.group(1) for m in found if m))


def from_crontab(current: str, name: str) -> Installed | None:
    """Our line for ``name`` in a crontab (the first one, as :func:`.crontab.merge_crontab` replaces),
    read back: crontab(5)'s ``\\%`` undone, the command split as /bin/sh would (shlex); None if absent."""
    tail = " " + marker(name)
    for line in current.splitlines():
        line = line.rstrip()
        if not line.endswith(tail):
            continue
        fields = line[:-len(tail)].split(None, 5)
        at = f"{int(fields[1]):02d}:{int(fields[0]):02d}" if len(fields) == 6 and all(
            f.isdigit() for f in fields[:2]) else "?"
        try:
            found = _deploy_words(shlex.split(fields[-1].replace("\\%", "%"))) if len(fields) == 6 else None
        except ValueError:
            found = None
        return Installed("cron", at, *(found or ()))
    return None


_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "s": " "}
_WORD = re.compile(r'"((?:[^"\\]|\\.)*)"|(\S+)')


def _unquote(value: str) -> list[str]:
    """The words of an ``ExecStart=`` value as :func:`.systemd.systemd_exec` writes them (systemd.syntax(7)
    quoting with C escapes; systemd.unit(5) ``%%``; systemd.service(5) ``$$``)."""
    def escape(m: re.Match) -> str:
        e = m.group(1)
        return chr(int(e[1:], 16)) if e.startswith("x") else _ESCAPES.get(e, e)

    words = []
    for m in _WORD.finditer(value):
        word = re.sub(r"\\(x[0-9a-fA-F]{2}|.)", escape, m.group(1)) if m.group(1) is not None else m.group(2)
        words.append(word.replace("$$", "$").replace("%%", "%"))
    return words


def from_units(service: str | None, timer: str | None) -> Installed | None:
    """The job of ``NAME.service`` (its ``ExecStart=``) and ``NAME.timer`` (its ``OnCalendar=``); None
    when neither file exists."""
    if service is None and timer is None:
        return None
    cal = re.search(r"^OnCalendar=\*-\*-\* (\d\d):(\d\d):00\s*$", timer or "", re.M)
    exe = re.search(r"^ExecStart=(.*)$", service or "", re.M)
    found = _deploy_words(_unquote(exe.group(1))) if exe else None
    return Installed("systemd", f"{cal.group(1)}:{cal.group(2)}" if cal else "?", *(found or ()))


def check_replace(installed: Installed | None, job: Job, *, replace: bool) -> None:
    """Refuse (InputError, exit 2) to overwrite a job for another playbook, inventory or pattern that
    ``job.name`` already holds, unless ``replace``: naming that job and the two ways out."""
    if installed is None or replace or installed.same_job(job):
        return
    raise InputError(f"schedule: the name {job.name} already holds {installed.describe()}; to keep it, give "
                     f"this job its own --name NAME (e.g. --name {job.name}-2); to replace it, add --replace")


def check_metrics_shared(installed: Iterable[tuple[str, Installed]], job: Job) -> None:
    """Refuse (InputError, exit 2) a ``--metrics-file`` that another installed job already writes
    (``installed``: ``(name, job)`` pairs; one named ``job.name`` is this job, to be replaced, so never
    counted). Why: each run rewrites the whole file (:mod:`fleetctl.reporting.metrics`), so two jobs sharing one file wipe each other's failures
    (operator trial: a job whose host was unreachable, then another's success: the file said
    ``fleetctl_run_success 1`` and held no series of the failed host); node_exporter's textfile
    collector convention is one file per job."""
    if not job.metrics_file:
        return
    for name, other in installed:
        if name != job.name and other.metrics_file == job.metrics_file:
            folder = job.metrics_file.rsplit("/", 1)[0]
            raise InputError(f"--metrics-file {job.metrics_file}: the job {name} ({other.where}) writes it already, "
                             f"and each run replaces the whole file; give this job its own file "
                             f"(e.g. {folder}/{job.name}.prom)")
