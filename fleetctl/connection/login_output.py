"""Keeping what the login shell prints out of a command's output.

OpenSSH runs every command as ``$SHELL -c COMMAND`` (session.c do_child), and the shell reads its
rc files first: bash's ``~/.bashrc`` (bash(1) INVOCATION: read when sshd starts it), zsh's
``~/.zshenv`` (zsh(1) STARTUP/SHUTDOWN FILES: every zsh), tcsh's ``~/.tcshrc`` and fish's
``config.fish`` (every shell). What they print (``echo "Welcome to gpu01"``) arrives on the
command's stdout before the command's own first byte.

So the SSH connection's command line starts with ``echo MARKER;`` (:func:`marked_line`: a plain
word and ``;``, parsed alike by sh, bash, zsh, fish, csh and tcsh, see
:func:`~fleetctl.connection.command.is_portable`) and reads stdout through :class:`SkipLogin`,
which drops everything up to and including the marker line, as it streams, and keeps the dropped
text (:attr:`SkipLogin.login_output`) for the connection to report once. When the marker never
comes (the shell did not start, or printed more than :data:`MAX_LOGIN_BYTES` first) nothing is
dropped: every byte goes on as the command's stdout.

What the rc files print on stderr (``echo "Welcome" >&2``) arrives before the command's own stderr
in the same way, but nothing orders it against stdout's marker: so a command's line also prints
the marker on stderr before the command (:func:`marked_both`), and its stderr is read through a
:class:`SkipLogin` of its own. The redirection is sh's, in single quotes (``/bin/sh -c 'echo
MARKER >&2'``): csh and tcsh read an unquoted ``>&`` as "stdout and stderr both", and every login
shell passes a single-quoted word on as it is.

The marker also tells when the login shell has not started a command yet: an rc file that sleeps
or waits (``sleep 100`` in ``~/.zshenv``, a dead NFS mount in ``~/.bashrc``) holds every ssh
command before its first byte. :class:`LoginWatch` keeps a connection's commands still waiting for
their marker, so a timeout says so (:func:`login_stall_message`) instead of a bare "timed out", and
a wait longer than the connect timeout is told while it lasts.

And the marker tells a command that never ran: a channel that ends (exit status, signal, EOF)
before its marker came was ended by the login shell before it ran the command, whatever its exit
status says (``[ -z "$PS1" ] && exit 0`` in ``~/.bashrc``, ``exec true`` in ``~/.zshenv``, a
``nologin`` shell). ``false`` run there reports rc 0; so :attr:`SkipLogin.ended_early` makes the
connection raise :class:`~fleetctl.errors.CommandNotStarted` (:func:`not_started_message`)
instead of returning a result.

And a file it reads may read stdin (``read line`` in ``~/.bashrc``, a program that reads its
input): it takes the first bytes meant for the command, before the command runs. An upload through
the shell (:func:`fleetctl.connection.sftp_fallback.put_by_exec`) sends a line of its own first and
checks it, and says so (:func:`stdin_taken_message`) instead of a cut-off file.
"""

from __future__ import annotations

import asyncio
import posixpath
import secrets
import time
from collections.abc import Callable

from ..errors import CommandNotStarted
from .streams import ByteReader

#: Most bytes held back while waiting for the marker (a login banner is a few lines): 256 KiB.
MAX_LOGIN_BYTES = 256 * 1024

#: What each login shell reads before it runs an ssh command (``$SHELL -c``, non-interactive):
#: bash(1) INVOCATION (run by sshd: ``~/.bashrc``; Debian's bash also ``/etc/bash.bashrc``),
#: zsh(1) STARTUP/SHUTDOWN FILES (every zsh: ``zshenv``), tcsh(1) "Startup and shutdown"
#: (``~/.tcshrc``, else ``~/.cshrc``), csh(1), fish's "Configuration files" (every fish). sh, dash
#: and ksh read none for a command.
RC_FILES = {
    "bash": ("~/.bashrc", "/etc/bash.bashrc"),
    "zsh": ("~/.zshenv", "/etc/zsh/zshenv"),
    "tcsh": ("~/.tcshrc", "~/.cshrc", "/etc/csh.cshrc"),
    "csh": ("~/.cshrc", "/etc/csh.cshrc"),
    "fish": ("~/.config/fish/config.fish", "~/.config/fish/conf.d/"),
}
#: The usual ones when the login shell is not known yet (a connection's first command).
ANY_SHELL_RC_FILES = ("~/.bashrc", "~/.zshenv", "~/.tcshrc", "~/.cshrc", "~/.config/fish/config.fish")
#: What sshd itself runs before the command, whatever the shell (sshd(8) SSHRC).
SSHD_RC_FILES = ("~/.ssh/rc", "/etc/ssh/sshrc")
#: Seconds without its marker before a command is said to wait for its login shell when a
#: deadline larger than its own passes (a login shell starts a command in milliseconds).
STALL_MIN_S = 1.0
#: How the note about a login shell's own output starts (a detail note: the run record and ``-v``).
LOGIN_OUTPUT_NOTE = "login output (printed by the login shell before every command; not command output): "
#: Login shells that run no commands: ``nologin`` (util-linux and shadow: it prints
#: :data:`NOLOGIN_SAYS`, or ``/etc/nologin.txt``, and exits 1) and ``false``.
NO_COMMAND_SHELLS = ("nologin", "false")
#: What ``nologin`` prints (util-linux login-utils/nologin.c, shadow src/nologin.c).
NOLOGIN_SAYS = b"This account is currently not available."
#: What sshd prints when the login user's home folder is missing (OpenSSH session.c do_child).
NO_HOME = b"Could not chdir to home directory"


def new_marker() -> str:
    """A word no login banner prints: ``fleetctl-start-`` and 16 random hex digits (letters,
    digits and ``-`` only, so every shell passes it through as it is)."""
    return f"fleetctl-start-{secrets.token_hex(8)}"


def marked_both(line: str, marker: str) -> str:
    """:func:`marked_line` with the marker printed on stderr too, by ``/bin/sh`` after the rc files
    and before the command (see the module docstring): ``echo MARKER; /bin/sh -c 'echo MARKER >&2';
    LINE``. The marker is letters, digits and ``-``: nothing in the quotes needs escaping."""
    return marked_line(f"/bin/sh -c 'echo {marker} >&2'; {line}", marker)


def marked_line(line: str, marker: str) -> str:
    """``line`` preceded by ``echo MARKER;``: the marker is the first thing the command itself
    prints, after whatever the login shell's rc files printed."""
    return f"echo {marker}; {line}"


def login_stall_message(shell: str, waited_s: float, ssh: str) -> str:
    """Why a command never started: ``the remote login shell (zsh) had not started the command
    after 3 s: ...``, naming the files to look at (:data:`RC_FILES` for ``shell``, the path or
    name of the login shell, "" when not known; then :data:`SSHD_RC_FILES`) and what to try:
    ``time SSH true``, ``ssh`` the command that reaches the host by hand (``ssh -p 2222
    user@10.0.0.5``: the real address, not the inventory's alias)."""
    name = posixpath.basename(shell)
    files = RC_FILES.get(name, ()) if name else ANY_SHELL_RC_FILES
    who = f"the remote login shell ({name})" if name else "the remote login shell"
    return (f"{who} had not started the command after {round(waited_s, 1):g} s: a file it reads before every ssh "
            f"command is slow or waits (look at {', '.join((*files, *SSHD_RC_FILES))}; try: time {ssh} true)")


def not_started_message(shell: str, ssh: str, *, rc: int | None, signal: str | None, printed: bytes = b"",
                        printed_err: bytes = b"") -> str:
    """Why a command whose channel ended before its marker never ran: ``the remote login shell
    (bash) exited with status 0 before running the command: ...``, naming the files that can end
    it (:data:`RC_FILES` for ``shell``, the path or name of the login shell, "" when not known:
    then :data:`ANY_SHELL_RC_FILES`) and the first line of what it ``printed`` (stdout then
    stderr bytes; a ``nologin`` shell says why). ``rc``/``signal``: how the channel ended (both
    ``None``: it closed with neither, as sshd(8) does when the shell could not be started).
    ``ssh``: the command that reaches the host by hand (``ssh -p 2222 user@10.0.0.5``), for the
    hint ``try: SSH echo ok``.

    A login shell that runs no commands at all (``nologin``, ``false``: known as ``shell``, or
    ``nologin``'s own words, :data:`NOLOGIN_SAYS`, in what it printed) is named as the cause:
    ``the login shell of the account is nologin: it runs no commands ...``."""
    name = posixpath.basename(shell)
    said = quote_printed(printed, printed_err)
    if name in NO_COMMAND_SHELLS or NOLOGIN_SAYS in printed + printed_err:
        which = name if name in NO_COMMAND_SHELLS else "nologin"
        return (f"the login shell of the account is {which}: it runs no commands, so none ran (the account cannot "
                "be deployed to); give the account a login shell (as root: chsh -s /bin/bash USER) or log in as "
                f"another account (ansible_user); try: {ssh} echo ok" + (f"; it printed{said}" if said else ""))
    files = RC_FILES.get(name, ()) if name else ANY_SHELL_RC_FILES
    who = f"the remote login shell ({name})" if name else "the remote login shell"
    how = (f"exited with status {rc}" if rc is not None else f"was killed by signal {signal}" if signal
           else "ended without an exit status")
    return (f"{who} {how} before running the command: a file it reads before every ssh command ends it "
            f"(an `exit`, `exec` or `logout` there; look at {', '.join(files)}), or the login shell does not run "
            f"commands (nologin); try: {ssh} echo ok" + (f"; it printed{said}" if said else ""))


def stdin_taken_message(shell: str, *, printed: bytes = b"", printed_err: bytes = b"",
                        what: str = "the upload's stdin", lost: str = "the file's first bytes never reached it") -> str:
    """Why an upload through the shell got short bytes: ``the remote login shell (bash) read the
    upload's stdin before it ran the command: ...``, naming the files that can read it
    (:data:`RC_FILES` for ``shell``, the path or name of the login shell, "" when not known: then
    :data:`ANY_SHELL_RC_FILES`; then :data:`SSHD_RC_FILES`: sshd(8) runs ``~/.ssh/rc`` with the
    session's stdin too), the fix, and what the login shell ``printed`` before the command
    (stdout, ``printed_err`` stderr: :func:`quote_printed`, stderr first; an rc file's own words
    often name it). The same file takes the first bytes of SFTP's session, which then never starts.
    ``what`` and ``lost`` name the stdin and what it lost (the run's first command: its host script's
    first line, :data:`fleetctl.engine.session_start.STDIN_MARK`)."""
    name = posixpath.basename(shell)
    files = RC_FILES.get(name, ()) if name else ANY_SHELL_RC_FILES
    who = f"the remote login shell ({name})" if name else "the remote login shell"
    said = quote_printed(printed, printed_err)
    return (f"{who} read {what} before it ran the command, so {lost}: a file it reads before every ssh command reads stdin (look at {', '.join((*files, *SSHD_RC_FILES))}"
            "; make it read only in interactive shells: case $- in *i*) ... ;; esac)"
            + (f"; it printed{said}" if said else ""))


def quote_printed(out: bytes, err: bytes, limit: int = 200) -> str:
    """What a login shell printed before it ended, for :func:`not_started_message`: each stream's
    non-blank lines joined by `` | `` (at most ``limit`` characters a stream), ``": TEXT"`` when
    one stream holds any, ``" on stderr: ERR; on stdout: OUT"`` when both do (stderr first: the
    cause is written there); "" when neither does."""
    def lines(data: bytes) -> str:
        return " | ".join(ln.strip() for ln in data.decode("utf-8", "replace").splitlines() if ln.strip())[:limit]

    said_out, said_err = lines(out), lines(err)
    if said_out and said_err:
        return f" on stderr: {said_err}; on stdout: {said_out}"
    return f": {said_err or said_out}" if said_err or said_out else ""


def login_output_note(text: bytes) -> str | None:
    """The one note that reports what the login shell printed before a command (its lines joined
    by `` | ``, at most 300 characters after :data:`LOGIN_OUTPUT_NOTE`); ``None`` when it printed
    nothing but blanks."""
    if not text.strip():
        return None
    shown = " | ".join(ln.strip() for ln in text.decode("utf-8", "replace").splitlines() if ln.strip())
    return f"{LOGIN_OUTPUT_NOTE}{shown[:300]}"


def parse_login_answer(stdout: bytes, stderr: bytes, marker: str, *, host: str, ssh: str, shell: str,
                       rc: int | None, signal: str | None) -> tuple[str, str]:
    """``(login shell, home folder)`` from the output of ``echo "$SHELL"; echo "$HOME"`` sent
    after :func:`marked_line` (``""`` for what it did not print); what came before the marker was
    the login shell's own output.

    Raises:
        CommandNotStarted: no marker came: the login shell ended before it ran the command (see
            :func:`not_started_message`; ``shell``, ``rc`` and ``signal`` as there).
    """
    before, marked, after = stdout.partition(marker.encode("ascii") + b"\n")
    if not marked:  # the login shell ended before it ran this one either
        raise CommandNotStarted(host, ["echo"], not_started_message(shell, ssh, rc=rc, signal=signal,
                                                                    printed=before, printed_err=stderr),
                                printed=(before, stderr))
    lines = after.decode("utf-8", "replace").strip().splitlines()
    if len(lines) < 2:
        return (lines[-1].strip() if lines else ""), ""
    return lines[-2].strip(), lines[-1].strip()


def check_started(reader: "SkipLogin", host: str, argv: list[str], shell: str, *, rc: int | None,
                  signal: str | None, ssh: str, printed: bytes = b"", printed_err: bytes = b"") -> None:
    """Raise :class:`~fleetctl.errors.CommandNotStarted` when ``reader``'s channel ended before
    its marker came (see :func:`not_started_message`; ``printed``/``printed_err``: all the login
    shell printed on stdout/stderr, kept in the error's ``printed`` for the host's log); the
    command's exit status means nothing then."""
    if reader.ended_early:
        raise CommandNotStarted(host, argv, not_started_message(shell, ssh, rc=rc, signal=signal, printed=printed,
                                                                printed_err=printed_err),
                                printed=(printed, printed_err))


class SkipLogin:
    """A :class:`~fleetctl.connection.streams.ByteReader` over ``reader`` that skips the bytes
    before and including the first ``MARKER\\n``.

    Attributes:
        login_output: what was skipped before the marker (the login shell's output), once found;
            or all the stream held when it ended before the marker (``ended_early``).
        found: the marker was seen.
        ended_early: the stream ended (EOF) before the marker came: the command never ran (a
            reader that gave up after :data:`MAX_LOGIN_BYTES` does not count: it cannot tell), so
            what it held was the login shell's (``nologin``'s "This account is currently not
            available."), kept in ``login_output`` and never passed on as the command's.
        on_found: called with ``login_output`` the moment the marker is seen (None: not called), so
            a command that lives for the whole run (the first command, which holds the deploy
            lock) has its login output told while its host's run is still being recorded.
    """

    def __init__(self, reader: ByteReader, marker: str) -> None:
        self._reader = reader
        self._marker = marker.encode("ascii") + b"\n"
        self._held = bytearray()
        self._done = False
        self.found = False
        self.login_output = b""
        self.ended_early = False
        self.started = time.monotonic()
        self.on_found: Callable[[bytes], None] | None = None

    @property
    def waiting(self) -> bool:
        """The marker has not come yet (and the reader has not given up on it)."""
        return not self._done

    async def read(self, n: int = -1) -> bytes:
        while not self._done:
            chunk = await self._reader.read(n)
            if not chunk:  # EOF and no marker: the command never ran, all of it was the login shell's
                self._done = self.ended_early = True
                self.login_output, self._held = bytes(self._held), bytearray()
                return b""
            self._held += chunk
            at = self._held.find(self._marker)
            if at >= 0:
                self._done = self.found = True
                self.login_output = bytes(self._held[:at])
                if self.on_found is not None:
                    self.on_found(self.login_output)
                rest = bytes(self._held[at + len(self._marker):])
                self._held = bytearray()
                if rest:
                    return rest
                break
            if len(self._held) > MAX_LOGIN_BYTES:
                self._done = True
                held, self._held = bytes(self._held), bytearray()
                return held
        return await self._reader.read(n)


class LoginWatch:
    """The commands of one connection whose login shell has not started them yet.

    Args:
        notify_after_s: seconds a command may wait for its marker before ``notify`` is called
            (once per connection) with :func:`login_stall_message`; ``None``: never.
        notify: called with that message (the connection's ``on_note``); read when it fires.

    Attributes:
        stalled_s: how long the last command stopped before its marker (a timeout, a cancelled
            run) had waited, seconds; ``None`` when none was.
    """

    def __init__(self, notify_after_s: float | None = None) -> None:
        self.notify_after_s = notify_after_s
        self._waiting: dict[int, tuple[SkipLogin, asyncio.TimerHandle | None]] = {}
        self._told = False
        self.stalled_s: float | None = None

    def watch(self, reader: SkipLogin, describe: Callable[[float], str], notify: Callable[[str], None] | None) -> None:
        """Follow ``reader`` until :meth:`done`; ``describe(waited_s)`` words a late note."""
        timer = None
        if self.notify_after_s is not None and notify is not None and not self._told:
            def late() -> None:
                if reader.waiting and not self._told:
                    self._told = True
                    notify(f"waiting: {describe(after_s)}")
            after_s = self.notify_after_s
            timer = asyncio.get_running_loop().call_later(after_s, late)
        self._waiting[id(reader)] = (reader, timer)

    def done(self, reader: SkipLogin, *, stopped: bool) -> None:
        """``reader``'s command ended; ``stopped`` (timed out or cancelled) before its marker
        sets :attr:`stalled_s`, and one whose marker came clears it (the shell starts commands)."""
        _, timer = self._waiting.pop(id(reader), (reader, None))
        if timer is not None:
            timer.cancel()
        if stopped and reader.waiting:
            self.stalled_s = time.monotonic() - reader.started
        elif reader.found:
            self.stalled_s = None

    def stall_s(self, min_s: float = STALL_MIN_S) -> float | None:
        """Seconds the longest waiting command (or the last one stopped waiting) has waited for
        its login shell, when at least ``min_s``; else ``None``."""
        now = time.monotonic()
        waits = [now - r.started for r, _ in self._waiting.values() if r.waiting]
        if self.stalled_s is not None:
            waits.append(self.stalled_s)
        longest = max(waits, default=0.0)
        return longest if waits and longest >= min_s else None
