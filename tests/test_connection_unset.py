"""Unsetting variables for one command (an env value of ``None``): the login environment's
``VIRTUAL_ENV``/``CONDA_PREFIX`` never reach it, over real SSH (login shells bash and zsh) and locally."""

from __future__ import annotations

import asyncio

import pytest

from fleetctl.connection.command import wrap_argv
from fleetctl.connection.local import LocalConnection
from fleetctl.connection.ssh import SSHConnection


def test_none_values_become_env_u_and_set_values_follow():
    assert wrap_argv(["python3", "-V"], env={"VIRTUAL_ENV": None, "A": "1", "CONDA_PREFIX": None}) == [
        "/usr/bin/env", "-u", "VIRTUAL_ENV", "-u", "CONDA_PREFIX", "--", "A=1", "python3", "-V"]
    with pytest.raises(ValueError, match="invalid environment variable name"):
        wrap_argv(["true"], env={"A B": None})


def _env_of(stdout: bytes) -> dict[str, str]:
    return dict(item.decode().split("=", 1) for item in stdout.split(b"\0") if b"=" in item)


def test_local_connection_unsets(monkeypatch):
    monkeypatch.setenv("VIRTUAL_ENV", "/stray/venv")
    monkeypatch.setenv("CONDA_PREFIX", "/opt/conda")

    async def go():
        return await LocalConnection().run(["/usr/bin/env", "-0"], env={"VIRTUAL_ENV": None, "CONDA_PREFIX": None,
                                                                        "KEPT": "yes"})
    got = _env_of(asyncio.run(go()).stdout)
    assert "VIRTUAL_ENV" not in got and "CONDA_PREFIX" not in got and got["KEPT"] == "yes"


@pytest.mark.sshd
@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_ssh_connection_unsets_what_the_login_environment_sets(sshd_farm, shell):
    host = sshd_farm.start(f"unset-{shell}", shell=shell,
                           env={"VIRTUAL_ENV": "/stray/venv", "CONDA_PREFIX": "/opt/conda"})

    async def go():
        async with SSHConnection(host.name, address="127.0.0.1", port=host.port, user=host.user,
                                 key_file=str(host.client_key), known_hosts=str(sshd_farm.known_hosts)) as conn:
            before = await conn.run(["/usr/bin/env", "-0"])
            after = await conn.run(["/usr/bin/env", "-0"], env={"VIRTUAL_ENV": None, "CONDA_PREFIX": None, "K": "v"})
            return _env_of(before.stdout), _env_of(after.stdout)

    before, after = asyncio.run(go())
    assert before["VIRTUAL_ENV"] == "/stray/venv" and before["CONDA_PREFIX"] == "/opt/conda"
    assert "VIRTUAL_ENV" not in after and "CONDA_PREFIX" not in after and after["K"] == "v"


def test_a_first_word_never_reaches_a_wrappers_option_parser():
    # never the line `$SHELL -c` reads as options
    assert wrap_argv(["--version"]) == ["/usr/bin/env", "--", "--version"]
    assert wrap_argv(["ls", "-l"]) == ["ls", "-l"]
    assert wrap_argv(["A=1", "x"], env={"B": "2"}) == ["/usr/bin/env", "--", "B=2", "/bin/sh", "-c", '"$@"',
                                                       "fleetctl-run", "A=1", "x"]  # a program named A=1
    assert wrap_argv(["-n"], become=True) == ["sudo", "-n", "--", "/usr/bin/env", "--", "-n"]
    assert wrap_argv(["-n"], cwd="/w")[-3:] == ["/usr/bin/env", "--", "-n"]  # not `exec -n` in the cd script
    assert '"$s" -- "$@"' in wrap_argv(["-n"], supervise=True)[2]  # $s: setsid, by its full path
