"""The host vars a Slurm host reads (:class:`SlurmSettings`), validated with pydantic's rules
(:mod:`fleetctl.util.settingsmodel`); the Slurm connection kind (:mod:`fleetctl.connection.slurm`)
hands them to the registry as its ``SETTINGS``."""

from __future__ import annotations

from ..util.settingsmodel import setting
from .registry import ConnectionSettings
from .slurm_client import parse_launcher


def _time_text(value: object) -> object:
    """``slurm_time: 30`` (YAML's int) is Slurm's ``"30"`` minutes."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


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
            ``"2:00:00"``, ``"1-0"``); ``None``: the partition's default.
        reservation: ``slurm_reservation`` (a maintenance reservation holding drained-for-work nodes).
        exclusive: ``slurm_exclusive``, whole nodes (default true).
        launcher: ``slurm_launcher``, a command prefix for the client tools, as a string (split as
            POSIX sh words) or a list; ``()``: the tools are on this machine.
    """

    node: str | None = setting(str, "slurm_node", "ansible_host", "ansible_ssh_host", optional=True)
    partition: str | None = setting(str, "slurm_partition", optional=True)
    account: str | None = setting(str, "slurm_account", optional=True)
    qos: str | None = setting(str, "slurm_qos", optional=True)
    time: str | None = setting(str, "slurm_time", optional=True, before=_time_text)
    reservation: str | None = setting(str, "slurm_reservation", optional=True)
    exclusive: bool = setting(bool, "slurm_exclusive", default=True)
    launcher: tuple[str, ...] = setting("words", "slurm_launcher", default=(), before=_launcher_words)
