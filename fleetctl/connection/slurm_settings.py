"""The host vars a Slurm host reads (:class:`SlurmSettings`), validated by pydantic; the Slurm
connection kind (:mod:`fleetctl.connection.slurm`) hands them to the registry as its ``SETTINGS``."""

from __future__ import annotations

from pydantic import AliasChoices, Field, field_validator

from .registry import ConnectionSettings
from .slurm_client import parse_launcher


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

    node: str | None = Field(default=None,
                             validation_alias=AliasChoices("slurm_node", "ansible_host", "ansible_ssh_host"))
    partition: str | None = Field(default=None, validation_alias=AliasChoices("slurm_partition"))
    account: str | None = Field(default=None, validation_alias=AliasChoices("slurm_account"))
    qos: str | None = Field(default=None, validation_alias=AliasChoices("slurm_qos"))
    time: str | None = Field(default=None, validation_alias=AliasChoices("slurm_time"))
    reservation: str | None = Field(default=None, validation_alias=AliasChoices("slurm_reservation"))
    exclusive: bool = Field(default=True, validation_alias=AliasChoices("slurm_exclusive"))
    launcher: tuple[str, ...] = Field(default=(), validation_alias=AliasChoices("slurm_launcher"))

    @field_validator("time", mode="before")
    @classmethod
    def _time_text(cls, value: object) -> object:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("launcher", mode="before")
    @classmethod
    def _launcher_words(cls, value: object) -> object:
        if value is None or isinstance(value, (str, list, tuple)):
            try:
                return parse_launcher(value)  # type: ignore[arg-type]
            except ValueError as exc:
                raise ValueError(f"cannot split the command prefix: {exc}") from None
        return value
