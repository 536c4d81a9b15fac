"""The host vars a Slurm host reads (:class:`SlurmSettings`), validated with pydantic's rules
(:mod:`fleetctl.util.settingsmodel`); the Slurm connection kind (:mod:`fleetctl.connection.slurm`)
hands them to the registry as its ``SETTINGS``."""

from __future__ import annotations

import re
from collections.abc import Callable

from ..util.settingsmodel import setting
from .registry import ConnectionSettings
from .slurm_client import parse_launcher


#: Slurm's ``--time`` forms (sbatch(1), salloc(1)): ``minutes``, ``minutes:seconds``,
#: ``hours:minutes:seconds``, ``days-hours``, ``days-hours:minutes``, ``days-hours:minutes:seconds``.
_CLOCK = re.compile(r"^(\d+)(?::(\d+))?(?::(\d+))?$")
_DAYS = re.compile(r"^(\d+)-(\d+)(?::(\d+))?(?::(\d+))?$")
#: No limit: ``UNLIMITED``, ``INFINITE`` (any case), and ``-1`` (Slurm's own spelling of it).
NO_LIMIT = ("UNLIMITED", "INFINITE", "-1")
TIME_FORMS = ('"minutes", "minutes:seconds", "hours:minutes:seconds", "days-hours", "days-hours:minutes", '
              '"days-hours:minutes:seconds" or UNLIMITED')


def time_limit_s(value: object) -> float | None:
    """Seconds of a Slurm time limit (``slurm_time``; a YAML int is minutes), ``None`` for no
    limit (:data:`NO_LIMIT`; ``0`` is Slurm's "no limit" too).

    Raises:
        ValueError: not one of Slurm's ``--time`` forms (sbatch(1)), naming them.
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"not a Slurm time limit: {value!r} (Slurm's --time forms: {TIME_FORMS})")
    text = str(value).strip()
    if text.upper() in NO_LIMIT:
        return None
    m = _DAYS.match(text)
    if m:
        d, h, mi, sec = (int(x) if x else 0 for x in m.groups())
        return float(((d * 24 + h) * 60 + mi) * 60 + sec) or None
    m = _CLOCK.match(text)
    if not m:
        raise ValueError(f"not a Slurm time limit: {text!r} (Slurm's --time forms: {TIME_FORMS})")
    nums = [int(x) for x in m.groups() if x is not None]
    total = (nums[0] * 60.0 if len(nums) == 1 else nums[0] * 60.0 + nums[1] if len(nums) == 2
             else nums[0] * 3600.0 + nums[1] * 60.0 + nums[2])
    return total or None


def time_text(value: object) -> object:
    """``slurm_time: 30`` (YAML's int) is Slurm's ``"30"`` minutes; a value that is not one of
    Slurm's ``--time`` forms is refused (:func:`time_limit_s`), so a typo is bad input when the
    inventory is read, not an allocation slurmctld refuses. ``None`` and ``""`` are unset.

    Raises:
        ValueError: not a Slurm time limit."""
    if value is None or value == "":
        return value
    time_limit_s(value)
    return str(value).strip()


def name_check(what: str, *, many: bool) -> Callable[[object], object]:
    """A validator of a Slurm name (partition, account, QOS, reservation, node): no blanks and no
    commas (``many``: a comma-separated list of such names, as ``--partition`` takes); its
    ValueError names ``what`` and the form."""
    one = r"[^\s,]+"
    form = re.compile(rf"^{one}(?:,{one})*$" if many else rf"^{one}$")

    def check(value: object) -> object:
        if isinstance(value, str) and value and not form.match(value):
            raise ValueError(f"not a Slurm {what}: {value!r} ({'names separated by commas, ' if many else 'one name, '}"
                             f"no blanks{'' if many else ' or commas'})")
        return value
    return check


def _launcher_words(value: object) -> object:
    """A launcher string split as POSIX sh words, a list as it is (:func:`parse_launcher`)."""
    if value is None or isinstance(value, (str, list, tuple)):
        try:
            return parse_launcher(value)  # type: ignore[arg-type]
        except ValueError as exc:
            raise ValueError(f"cannot split the command prefix: {exc}") from None
    return value


class SlurmSettings(ConnectionSettings):
    """The host vars a Slurm host reads.

    Attributes:
        node: the Slurm node name (``slurm_node``, else ``ansible_host``: set ``slurm_node`` when
            ``ansible_host`` holds an address for SSH); ``None``: the inventory name.
        partition, account, qos: ``slurm_partition``, ``slurm_account``, ``slurm_qos``.
        time: ``slurm_time``, the allocation's time limit in Slurm's formats (``30``: minutes,
            ``"2:00:00"``, ``"1-0"``, ``UNLIMITED``: :func:`time_limit_s`); ``None``: the
            partition's default. Any other form is refused when the inventory is read.
        partition, reservation: one name or several separated by commas; account, qos, node: one
            name; none holds blanks.
        reservation: ``slurm_reservation`` (a maintenance reservation holding drained-for-work nodes).
        exclusive: ``slurm_exclusive``, whole nodes (default true).
        launcher: ``slurm_launcher``, a command prefix for the client tools, as a string (split as
            POSIX sh words) or a list; ``()``: the tools are on this machine.
    """

    node: str | None = setting(str, "slurm_node", "ansible_host", "ansible_ssh_host", optional=True,
                                   before=name_check("node name", many=False))
    partition: str | None = setting(str, "slurm_partition", optional=True, before=name_check("partition", many=True))
    account: str | None = setting(str, "slurm_account", optional=True, before=name_check("account", many=False))
    qos: str | None = setting(str, "slurm_qos", optional=True, before=name_check("QOS", many=False))
    time: str | None = setting(str, "slurm_time", optional=True, before=time_text)
    reservation: str | None = setting(str, "slurm_reservation", optional=True,
                                      before=name_check("reservation", many=True))
    exclusive: bool = setting(bool, "slurm_exclusive", default=True)
    launcher: tuple[str, ...] = setting("words", "slurm_launcher", default=(), before=_launcher_words)
