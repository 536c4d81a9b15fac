"""The settings models (fleetctl.util.settingsmodel) accept, coerce and refuse exactly what the
pydantic models they replaced did: the former models are kept here as the oracle, and every
field is fed the same values (hypothesis, plus the values people mistype in inventories)."""

from __future__ import annotations

import datetime as dt
import math
import subprocess
import sys
from typing import Literal

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator

from fleetctl.connection.slurm_client import parse_launcher
from fleetctl.connection.slurm_settings import SlurmSettings, name_check, time_text
from fleetctl.connection.ssh_kind import SSHSettings
from fleetctl.inventory.settings import HostSettings
from fleetctl.util.settingsmodel import SettingsError


# -- the former pydantic models, verbatim (the oracle) ------------------------------------------

class OldConnectionSettings(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class OldSSHSettings(OldConnectionSettings):
    address: str | None = Field(default=None, validation_alias=AliasChoices("ansible_ssh_host", "ansible_host"))
    port: int | None = Field(default=None, ge=1, le=65535,
                             validation_alias=AliasChoices("ansible_ssh_port", "ansible_port"))
    user: str | None = Field(default=None, validation_alias=AliasChoices("ansible_ssh_user", "ansible_user"))
    private_key_file: str | None = Field(
        default=None, validation_alias=AliasChoices("ansible_ssh_private_key_file", "ansible_private_key_file"))
    known_hosts: str | None = Field(default=None, validation_alias=AliasChoices("known_hosts"))
    keepalive_interval_s: float = Field(default=15.0, gt=0, validation_alias=AliasChoices("keepalive_interval"))
    ssh_config: str | None = Field(default=None, validation_alias=AliasChoices("ssh_config"))


class OldSlurmSettings(OldConnectionSettings):
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
        return time_text(value)  # Slurm's --time forms (the rule itself is tested in test_slurm_units)

    @field_validator("node", mode="before")
    @classmethod
    def _node(cls, value: object) -> object:
        return name_check("node name", many=False)(value)

    @field_validator("partition", "reservation", mode="before")
    @classmethod
    def _many(cls, value: object, info) -> object:
        return name_check(info.field_name, many=True)(value)

    @field_validator("account", "qos", mode="before")
    @classmethod
    def _one(cls, value: object, info) -> object:
        return name_check(info.field_name, many=False)(value)

    @field_validator("launcher", mode="before")
    @classmethod
    def _launcher_words(cls, value: object) -> object:
        if value is None or isinstance(value, (str, list, tuple)):
            try:
                return parse_launcher(value)  # type: ignore[arg-type]
            except ValueError as exc:
                raise ValueError(f"cannot split the command prefix: {exc}") from None
        return value


class OldHostSettings(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    venv: str | None = Field(default=None, validation_alias="venv")
    cuda_home: str | None = Field(default=None, validation_alias="cuda_home")
    workdir: str | None = Field(default=None, validation_alias="workdir")
    known_hosts: str | None = Field(default=None, validation_alias="known_hosts")
    fallback_archs: str = Field(default="9.0a;12.0a", validation_alias="fallback_archs")
    build_host: str | None = Field(default=None, validation_alias="build_host")
    max_jobs: int | None = Field(default=None, ge=1, validation_alias="max_jobs")
    keepalive_interval_s: float = Field(default=15.0, gt=0, validation_alias="keepalive_interval")
    deploy_lock: str | None = Field(default=None, validation_alias="deploy_lock")
    verify_device: Literal["auto", "cuda", "cpu"] = Field(default="auto", validation_alias="verify_device")
    gpu_probe_timeout_s: float = Field(default=30.0, gt=0, le=3600, validation_alias="gpu_probe_timeout_s")
    keep_runs: int | None = Field(default=None, ge=1, validation_alias="keep_runs")
    keep_days: float | None = Field(default=None, gt=0, allow_inf_nan=False, validation_alias="keep_days")

    @field_validator("venv", "cuda_home", mode="before")
    @classmethod
    def _no_tilde(cls, value):  # fleetctl refuses a host path written with ~ (no shell expands it)
        if isinstance(value, str) and value.startswith("~"):
            raise ValueError("starts with ~")
        if isinstance(value, str) and value and not value.startswith("/"):
            raise ValueError("relative")  # nor a relative one (no folder to take it against)
        return value

    @field_validator("workdir", mode="before")
    @classmethod
    def _workdir_not_relative(cls, value):  # operator trial 11: a bare relative workdir is refused too;
        if isinstance(value, str) and value and not value.startswith("/") \
                and value != "~" and not value.startswith("~/"):  # ~ and ~/x name the home folder: kept
            raise ValueError("relative")
        return value


PAIRS = [(SSHSettings, OldSSHSettings), (SlurmSettings, OldSlurmSettings), (HostSettings, OldHostSettings)]


def _outcome(model, data):
    try:
        return ("ok", model.model_validate(data))
    except (ValidationError, SettingsError):
        return ("refused", None)


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def check_value(value) -> None:
    for new, old in PAIRS:
        for fname, spec in new.model_fields.items():
            for name in (*spec.aliases, fname):
                data = {name: value}
                got, want = _outcome(new, data), _outcome(old, data)
                assert got[0] == want[0], f"{new.__name__}.{fname} from {name}={value!r}: {got} vs {want}"
                if got[0] == "ok":
                    for f in new.model_fields:
                        assert _same(getattr(got[1], f), getattr(want[1], f)), (
                            f"{new.__name__}.{f} from {name}={value!r}: {getattr(got[1], f)!r} vs "
                            f"{getattr(want[1], f)!r}")


MISTYPED = [None, True, False, 0, 1, 2, -1, 22, 65535, 65536, 2**70, 0.0, 1.0, 22.0, 22.5, -3.0, float("inf"),
            float("-inf"), float("nan"), "", " ", "22", " 22 ", "+22", "-22", "2_2", "22.0", "22.", "022", "0x16",
            "1e3", "1_000", "１２", "٣", "inf", "-inf", "Infinity", "nan", " 1.5 ", "1_000.5", "3600", "3600.5",
            "yes", "no", "on", "off", "Y", "n", "TRUE", "False", " true", "0", "1", "t", "f", "auto", "cuda", "cpu",
            "AUTO", "ssh login01", "ssh 'unbalanced", "a\x1cb", "\x1c22\x1c", "\u200922\u2009", "\xa022",
            b"22", b"x", bytearray(b"22"), [], ["a", "b"], ["a", 1], ("a", "b"), {"a"}, {"a": 1},
            dt.date(2020, 1, 1), dt.datetime(2020, 1, 1, 12, 0)]


@pytest.mark.parametrize("value", MISTYPED, ids=repr)
def test_settings_accept_coerce_and_refuse_what_pydantic_did(value):
    check_value(value)


_numberish = st.text(alphabet="0123456789+-._ eEinfatyo\t\u3000x", max_size=8)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                 _numberish, st.text(max_size=6), st.binary(max_size=4),
                 st.lists(st.one_of(st.text(max_size=3), st.integers()), max_size=3)))
@example("~")  # venv / cuda_home refuse a leading ~ (found by this test at random once: kept)
@example("~/venv")
@example("venv")  # a relative venv / cuda_home is refused too
@example("/venv")
def test_settings_agree_with_pydantic_on_any_value(value):
    check_value(value)


def test_a_refused_value_is_named_by_the_var_it_came_from():
    with pytest.raises(SettingsError) as info:
        SSHSettings.model_validate({"ansible_port": "x", "ansible_ssh_user": 3})
    assert info.value.errors()[0]["loc"] == ("ansible_port",)  # the first field in order, as pydantic
    with pytest.raises(SettingsError, match="cannot split the command prefix"):
        SlurmSettings.model_validate({"slurm_launcher": "ssh 'unbalanced"})
    s = SSHSettings.model_validate({"ansible_port": "2222", "port": 1, "address": "a"})
    assert (s.port, s.address) == (2222, "a")  # connection settings also read their field names
    assert HostSettings.model_validate({"keepalive_interval_s": 1.0}).keepalive_interval_s == 15.0
    with pytest.raises(AttributeError):
        s.port = 3  # type: ignore[misc]


def test_fleetctl_run_imports_no_pydantic(tmp_path):
    """`fleetctl run`'s path (inventory, SSH settings, the run model, the record) needs no pydantic."""
    inv = tmp_path / "inv.yaml"
    inv.write_text("all:\n  hosts:\n    n1:\n      ansible_host: 127.0.0.1\n      ansible_port: '2222'\n"
                   "      keepalive_interval: 5\n")
    code = ("import sys\n"
            "from fleetctl.api.fleet import Fleet, select_hosts\n"
            "from fleetctl.api.lifecycle import new_run\n"
            "import fleetctl.engine.adhoc, fleetctl.connection.ssh_kind\n"
            f"_, hosts = select_hosts(Fleet([{str(inv)!r}]), 'all')\n"
            "assert hosts[0].port == 2222 and hosts[0].connection_settings.keepalive_interval_s == 5.0\n"
            "run, record, obs = new_run('run', command=['x'])\n"
            "record.close(run)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"FLEETCTL_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
