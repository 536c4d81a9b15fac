""":class:`fleetctl.connection.login_output.SkipLogin` on chunked streams: the login shell's output
before the marker is dropped wherever the reads split it, and nothing is dropped without a marker."""

from __future__ import annotations

import asyncio

import pytest

from fleetctl.connection.command import is_portable
from fleetctl.connection.login_output import MAX_LOGIN_BYTES, SkipLogin, marked_line, new_marker, stdin_taken_message
from fleetctl.connection.streams import OutputTail, pump_lines


class Chunks:
    """A byte stream that arrives in the given pieces, then EOF."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)

    async def read(self, n: int = -1) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""


def pump(*chunks: bytes, marker: str) -> tuple[bytes, list[bytes], SkipLogin]:
    reader, tail, lines = SkipLogin(Chunks(*chunks), marker), OutputTail(None), []
    asyncio.run(pump_lines(reader, "stdout", tail, lambda line: lines.append(line.data)))
    return tail.result()[0], lines, reader


@pytest.mark.parametrize("split", range(1, 60))
def test_the_banner_is_dropped_wherever_the_reads_split_it(split):
    m = new_marker()
    data = f"Welcome to gpu01\nno newline{m}\n".encode() + b"out 1\nout 2\n"
    out, lines, reader = pump(data[:split], data[split:], marker=m)
    assert out == b"out 1\nout 2\n" and lines == [b"out 1\n", b"out 2\n"]
    assert reader.found and reader.login_output == b"Welcome to gpu01\nno newline"


def test_a_stream_that_ends_without_its_marker_was_the_login_shells_and_a_long_one_is_passed_on():
    """A channel that ends before the marker never ran the command (nologin's "This account is
    currently not available."): what it held is the login shell's, kept, never the command's
    output (new-user trial: ``run -- true`` showed nologin's line as if ``true`` printed it)."""
    m = new_marker()
    out, lines, reader = pump(b"sh: 1: cannot start\n", b"x", marker=m)
    assert out == b"" and not lines and reader.ended_early and reader.login_output == b"sh: 1: cannot start\nx"
    big = b"y" * (MAX_LOGIN_BYTES + 10)  # more than a banner: passed on, never held without end
    out, _, reader = pump(big, f"{m}\nz\n".encode(), marker=m)
    assert out == big + f"{m}\nz\n".encode() and not reader.found


def test_a_second_marker_line_is_the_commands_own_output():
    m = new_marker()
    out, _, _ = pump(f"{m}\n{m}\n".encode(), marker=m)
    assert out == f"{m}\n".encode()


def test_the_marked_line_is_parsed_alike_by_every_login_shell():
    assert is_portable(marked_line("env -- A=1 true", new_marker()))


def test_the_parsers_take_the_line_of_their_form_not_a_banner_before_it():
    """Over a transport that does not skip login output the readers still find their answer."""
    from fleetctl.connection.base import CommandResult
    from fleetctl.tasks.base import first_error_line
    from fleetctl.tasks.build_keys import parse_stat

    assert parse_stat("Welcome to gpu01 (zshenv)\n1200 1700000000\n") == (1200, 1700000000)
    assert parse_stat("1200 1700000000\n") == (1200, 1700000000)
    missing = CommandResult(argv=["x"], rc=127, stdout=b"Welcome to gpu01 (bashrc)\n",
                            stderr=b"env: '/home/u/venv/bin/python3': No such file or directory\n")
    assert first_error_line(missing) == "env: '/home/u/venv/bin/python3': No such file or directory"
    assert first_error_line(CommandResult(argv=["x"], rc=1, stdout=b"half done\n")) == "half done"


@pytest.mark.parametrize(("shell", "files"), [
    ("/usr/bin/fish", "~/.config/fish/config.fish, ~/.config/fish/conf.d/, "),
    ("/bin/dash", ""),  # sh, dash and ksh read no rc file for a command: only sshd's own
    ("/bin/csh", "~/.cshrc, /etc/csh.cshrc, "),
])
def test_a_stall_names_the_files_that_shell_reads_before_a_command(shell, files):
    from fleetctl.connection.login_output import login_stall_message

    name = shell.rsplit("/", 1)[1]
    assert login_stall_message(shell, 2.96, "ssh -p 2222 u@10.0.0.5") == (
        f"the remote login shell ({name}) had not started the command after 3 s: a file it reads before every ssh "
        f"command is slow or waits (look at {files}~/.ssh/rc, /etc/ssh/sshrc; try: time ssh -p 2222 u@10.0.0.5 true)")


def test_a_stall_is_forgotten_once_the_login_shell_starts_a_command_again():
    """A command stopped before its marker is the cause of a later outer deadline only until a
    command's marker comes again (a slow rc file fixed, a mount back)."""
    from fleetctl.connection.login_output import LoginWatch

    async def go():
        watch = LoginWatch()
        stalled = SkipLogin(Chunks(), "m")
        stalled.started -= 5  # it waited 5 s for its marker (no sleep: the clock is the reader's)
        watch.watch(stalled, str, None)
        assert watch.stall_s() is not None and watch.stall_s() >= 5  # still waiting
        watch.done(stalled, stopped=True)
        first = watch.stall_s()
        ok = SkipLogin(Chunks(b"m\nhi\n"), "m")
        watch.watch(ok, str, None)
        assert await ok.read() == b"hi\n"
        watch.done(ok, stopped=False)
        return first, watch.stall_s()

    first, after = asyncio.run(go())
    assert first is not None and first >= 5 and after is None


def test_an_upload_whose_stdin_the_login_shell_read_names_its_rc_files_and_quotes_what_it_printed():
    said = stdin_taken_message("/bin/bash", printed_err=b"bashrc ate: FLEETCTL-PUT-HEAD-x\n")
    assert said.startswith("the remote login shell (bash) read the upload's stdin before it ran the command")
    assert "look at ~/.bashrc, /etc/bash.bashrc, ~/.ssh/rc, /etc/ssh/sshrc;" in said, said
    assert said.endswith("; it printed: bashrc ate: FLEETCTL-PUT-HEAD-x"), said
    # the shell not known yet (a connection's first transfer): every usual rc file; nothing printed: no quote
    unknown = stdin_taken_message("")
    assert unknown.startswith("the remote login shell read") and "~/.zshenv" in unknown and "printed" not in unknown
