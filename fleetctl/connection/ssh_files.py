"""Files over one SSH connection: the SFTP session within the host's ``MaxSessions``, and the exec
fallback once SFTP cannot be used (:mod:`fleetctl.connection.sftp_fallback`).

:class:`SFTPFiles` is the file half of :class:`fleetctl.connection.ssh.SSHConnection` (a mixin: it
uses the connection's ``host``, ``stats``, ``on_note``, ``connect_timeout_s``, ``_sessions``, ``_sftp``, ``_sftp_users``,
``_sftp_lock``, ``_no_sftp``, ``_require()``, ``_count()``, ``_saturated()``, ``_second()`` and
``run()``).

- Uploads go to a temporary ``.part`` name and are renamed into place; a failed upload removes it,
  and so does an interrupted one (Ctrl-C, SIGTERM), within :data:`PART_REMOVE_S` seconds a step (a
  host that stops answering must not hold up the exit); a part file it could not remove is named
  in the host's log (:data:`~fleetctl.connection.base.LEFT_ON_HOST`), and a later upload to the
  same path removes those of its own naming unchanged for :data:`STALE_PART_S` seconds.
- The SFTP session is opened when a transfer needs it and stays open while unused, until a command
  needs its session (``_close_idle_sftp``).
- A server that refuses the ``sftp`` subsystem (no ``Subsystem sftp`` in sshd_config) is learnt
  once per connection (:func:`~fleetctl.connection.ssh_errors.is_subsystem_refused`), noted once
  through ``on_note``, and from then on every put, get and realpath goes over an exec channel; so
  does one whose SFTP stream breaks (a login rc file that prints text).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import re
from pathlib import Path

import asyncssh

from ..errors import TransferError, TransferLost
from .base import LEFT_ON_HOST, folder_mode
from .download import local_download, lost_error, read_error
from .sftp_fallback import get_by_exec, part_name, put_by_exec, realpath_by_exec
from .ssh_errors import is_lost, is_subsystem_refused, sftp_refused_note
from .ssh_sessions import UseOverflow
from ..util.within import within

#: SFTP write requests in flight per upload.
UPLOAD_REQUESTS = 4

#: Seconds an interrupted upload waits for its part file's removal before it lets go (and says so).
PART_REMOVE_S = 5.0
#: Seconds a part file of the same destination must be unchanged before a later upload removes it.
STALE_PART_S = 300
_TAIL_BLOCK = 65536  # bytes a read past the size lstat saw asks for (sequential, to EOF)


class SFTPFiles:
    """Put, get and realpath for :class:`~fleetctl.connection.ssh.SSHConnection` (see the module
    docstring)."""

    async def _close_idle_sftp(self) -> bool:
        """Close the SFTP session when nobody uses it, freeing its session (called with the
        sessions condition held). True when a session was freed."""
        if self._sftp is None or self._sftp_users or self._sftp_lock.locked():
            return False
        sftp, self._sftp = self._sftp, None
        sftp.exit()
        with contextlib.suppress(OSError, asyncssh.Error, asyncio.TimeoutError):
            await within(sftp.wait_closed(), 5)
        self._sessions.in_use -= 1
        return True

    @contextlib.asynccontextmanager
    async def _sftp_session(self):
        """The SFTP session, opened (within the session limit) when needed; it stays open
        while unused, until a command needs its session."""
        self._sftp_users += 1
        sftp = None
        try:
            async with self._sftp_lock:
                if self._sftp is None:
                    if self._no_sftp:  # learnt while this request waited for the lock
                        raise _NoSFTP(self._no_sftp["why"])
                    self._sftp = await self._start_sftp()
                sftp = self._sftp
            yield sftp
        except BaseException as exc:
            # a session whose channel is gone (its sftp-server died) is dropped, so the next
            # transfer opens a new one instead of failing on it with "Channel not open"
            if sftp is not None and self._sftp is sftp and (isinstance(exc, TransferLost) or is_lost(exc)):
                self._sftp = None
                sftp.exit()
                self._sessions.in_use -= 1
            raise
        finally:
            self._sftp_users -= 1
            if not self._sftp_users:
                await self._sessions.wake()

    async def _start_sftp(self) -> asyncssh.SFTPClient:
        """Open the SFTP session, its server's first answer awaited at most ``connect_timeout_s``
        seconds: sshd starts sftp-server through the login shell (``$SHELL -c sftp-server``), and a
        login rc file that reads stdin takes SFTP's first packet (``read line`` in ``~/.bashrc``),
        so sftp-server never answers (one that waits holds it as long). Past it, or when SFTP
        breaks or is refused, SFTP is not used on this connection (:meth:`_learn_no_sftp`; the
        unanswered channel stays open until the connection closes).

        Raises:
            _NoSFTP: naming why.
        """
        conn = self._require()

        async def start() -> asyncssh.SFTPClient:
            return await within(conn.start_sftp_client(), self.connect_timeout_s)
        try:
            return await self._sessions.open_channel(start, overflow=self._saturated,
                                                     opened=is_subsystem_refused,
                                                     on_retry=lambda: self._count("channel_retries"))
        except asyncio.TimeoutError:
            why = (f"cannot start SFTP: sftp-server did not answer in {self.connect_timeout_s:g} s (a login rc file "
                   "that reads stdin, such as ~/.bashrc, takes SFTP's first packet, and one that waits holds it: make "
                   "it read and wait only in interactive shells)")
            self._learn_no_sftp(f"{self.host}: {why}", note=f"{why}; every file goes over an exec channel (cat) instead")
            raise _NoSFTP(self._no_sftp["why"]) from None
        except (OSError, asyncssh.Error) as exc:
            if is_subsystem_refused(exc):
                self._learn_no_sftp(f"{self.host}: {sftp_refused_note()}", note=sftp_refused_note())
            elif not isinstance(exc, asyncssh.ChannelOpenError):  # not a session limit: SFTP itself broke
                why = (f"cannot start SFTP: {exc} (a login rc file that prints text, such as ~/.bashrc, breaks "
                       f"SFTP: make it print only for interactive shells)")
                self._learn_no_sftp(f"{self.host}: {why}",
                                    note=f"{why}; every file goes over an exec channel (cat) instead")
            raise _NoSFTP(self._no_sftp.get("why") or f"{self.host}: cannot start SFTP: {exc}") from None

    def _learn_no_sftp(self, why: str, *, note: str | None = None) -> None:
        """SFTP cannot be used on this host (``why``, naming the host): remember it, and tell
        ``note`` once through ``on_note``."""
        if "why" in self._no_sftp:
            return
        self._no_sftp["why"] = why
        self.stats["sftp"] = "files over exec channels: " + why.split(": ", 1)[-1][:200]
        if note and self.on_note is not None:
            self.on_note(note)

    async def _realpath(self, path: str) -> str:
        if not self._no_sftp:
            try:
                async with self._sftp_session() as sftp:
                    try:
                        return await sftp.realpath(path)
                    except (OSError, asyncssh.Error) as exc:
                        raise TransferError(f"{self.host}: realpath {path}: {exc}") from None
            except _NoSFTP:
                pass
        return await realpath_by_exec(self, path)

    async def put(self, local_path: str, remote_path: str, *, mode: int | None = None, dir_mode: int | None = None,
                  explicit_dest: bool = False) -> None:
        """Upload over SFTP to a temporary name, then rename into place (no partial file is ever
        left under the final name; a failed upload removes its temporary file), then check that
        what is at ``remote_path`` is a regular file of the local file's size.

        Folders it creates get ``dir_mode`` (default 0700: fleetctl's own folders are private; with
        ``explicit_dest``, 0777 less the login's umask, as ``mkdir -p``: :meth:`Connection.put`).
        ``explicit_dest``: the operator chose the path (a full disk's advice never names ``workdir``).
        When SFTP cannot start (a login rc file that prints text corrupts the SFTP stream), the
        file goes through an exec channel's stdin instead (``cat``), which such output cannot
        corrupt; once SFTP was refused or broke on this connection, every file goes that way at once.

        Raises:
            TransferError: naming the host, the path and the cause (``Is a directory`` where a
                folder is at ``remote_path``, ``Permission denied`` with the folder refused).
        """
        kw = {"mode": mode, "dir_mode": dir_mode, "explicit_dest": explicit_dest}
        self._count("puts")  # for the run record: what a deploy sent (bytes of the local file)
        self.stats["put_bytes"] = self.stats.get("put_bytes", 0) + (os.path.getsize(local_path)
                                                                    if os.path.isfile(local_path) else 0)
        if self._no_sftp:
            return await put_by_exec(self, local_path, remote_path, mode, dir_mode=dir_mode,
                                     explicit_dest=explicit_dest)
        if self._saturated() and self._sftp is None:
            return await (await self._second()).put(local_path, remote_path, **kw)
        try:
            async with self._sftp_session() as sftp:
                await self._put_sftp(sftp, local_path, remote_path, mode, dir_mode, explicit_dest)
        except UseOverflow:
            await (await self._second()).put(local_path, remote_path, **kw)
        except (_NoSFTP, _SFTPWriteFailed) as exc:
            await put_by_exec(self, local_path, remote_path, mode, why=str(exc), dir_mode=dir_mode,
                              explicit_dest=explicit_dest)

    async def _makedirs(self, sftp, parent: str, dir_mode: int | None, local_path: str, target: str) -> None:
        """Create ``parent`` and its missing folders (mode ``dir_mode``; None: no mode sent, so
        sftp-server makes them 0777 less its umask, the login's, as ``mkdir -p``) for the upload of
        ``local_path`` to ``target``, naming the folder that refused: asyncssh's ``makedirs`` passes
        over a refused middle folder and then reports the next one as "No such file". One ``stat``
        when ``parent`` is there already.

        Raises:
            TransferError: ``upload SRC -> TARGET: FOLDER: Permission denied`` (or the server's
                reason; every upload error names its source and target alike).
        """
        with contextlib.suppress(OSError, asyncssh.Error):
            if (await sftp.stat(parent)).type == asyncssh.FILEXFER_TYPE_DIRECTORY:
                return
        where = f"{self.host}: upload {local_path} -> {target}"
        cur = "/" if parent.startswith("/") else ""
        for part in [p for p in parent.split("/") if p]:
            cur = posixpath.join(cur, part) if cur else part
            try:
                attrs = await sftp.stat(cur)
            except asyncssh.SFTPNoSuchFile:
                attrs = None
            except (OSError, asyncssh.Error) as exc:
                raise TransferError(f"{where}: {cur}: {getattr(exc, 'reason', None) or exc}") from None
            if attrs is not None:
                if attrs.type != asyncssh.FILEXFER_TYPE_DIRECTORY:
                    raise TransferError(f"{where}: {cur}: Not a directory (a file is there)")
                continue
            try:
                if dir_mode is None:
                    await sftp.mkdir(cur)
                else:
                    await sftp.mkdir(cur, asyncssh.SFTPAttrs(permissions=dir_mode))
                    await sftp.chmod(cur, dir_mode)  # mkdir's mode is less sftp-server's umask
            except (OSError, asyncssh.Error) as exc:
                with contextlib.suppress(OSError, asyncssh.Error):
                    if (await sftp.stat(cur)).type == asyncssh.FILEXFER_TYPE_DIRECTORY:
                        continue  # another host on the same shared disk made it meanwhile
                reason = getattr(exc, "reason", None) or str(exc)
                if getattr(exc, "code", None) == asyncssh.FX_FAILURE:  # the errno is lost: the shell names it
                    raise _SFTPWriteFailed(f"{where}: mkdir {cur}: SFTP: {reason}") from None
                raise TransferError(f"{where}: mkdir {cur}: {reason}") from None

    async def _put_sftp(self, sftp, local_path: str, remote_path: str, mode: int | None, dir_mode: int | None,
                        explicit_dest: bool) -> None:
        parent = posixpath.dirname(remote_path)
        tmp = posixpath.join(parent, part_name(remote_path))
        size = Path(local_path).stat().st_size
        if parent:
            await self._makedirs(sftp, parent, folder_mode(dir_mode, explicit_dest), local_path, remote_path)
        try:
            there = await sftp.lstat(remote_path)
        except (OSError, asyncssh.Error):
            there = None
        if there is not None and there.type == asyncssh.FILEXFER_TYPE_DIRECTORY:
            raise TransferError(f"{self.host}: upload {local_path} -> {remote_path}: Is a directory (a folder is "
                                "there)")
        try:
            # 4 requests in flight (asyncssh's default is 16 x 256 KiB per upload): what 20+
            # simultaneous uploads cost in controller memory, without a measurable loss of speed.
            await self._put_bounded(sftp, local_path, tmp)
            await sftp.chmod(tmp, mode if mode is not None else 0o644)
            await sftp.posix_rename(tmp, remote_path)
            after = await sftp.lstat(remote_path)
        except asyncio.CancelledError:  # interrupted (Ctrl-C, SIGTERM): never a part file for good
            await self._drop_part(sftp, tmp)
            raise
        except _HostSilent as exc:
            self._note_left(tmp, str(exc))
            raise asyncio.CancelledError() from None
        except (OSError, asyncssh.Error) as exc:
            try:
                await sftp.remove(tmp)
            except (OSError, asyncssh.Error):
                pass
            reason = getattr(exc, "reason", None) or str(exc)
            if getattr(exc, "code", None) == asyncssh.FX_FAILURE:
                # sftp-server says only "Failure" for EDQUOT, ENOSPC, EROFS, EIO (the errno is lost):
                # the upload is retried through the shell, whose cat names the real error
                raise _SFTPWriteFailed(f"{self.host}: upload {local_path} -> {remote_path}: SFTP: {reason}") from None
            from .storagefaults import name_write_error  # only for a failed write

            named = name_write_error(reason, remote_path, explicit_dest=explicit_dest)
            raise TransferError(f"{self.host}: upload {local_path} -> {remote_path}: {named or reason}"
                                + (" (the partial file was removed)" if named else "")) from None
        await self._drop_stale_parts(sftp, remote_path, after.mtime)
        if after.type != asyncssh.FILEXFER_TYPE_REGULAR or after.size != size:
            raise TransferError(f"{self.host}: upload {local_path} -> {remote_path}: what is at that path afterwards "
                                f"is not the file sent ({after.size} bytes, {size} bytes sent)")

    async def _put_bounded(self, sftp, local_path: str, tmp: str) -> None:
        """``sftp.put`` into ``tmp``; cancelled, it is given :data:`PART_REMOVE_S` seconds to end
        (asyncssh's put closes the remote file first, which a host that stopped answering never
        confirms: the interrupted run hung there) before the host is taken as gone.

        Raises:
            asyncio.CancelledError: cancelled, once the put ended.
            _HostSilent: cancelled, and the put did not end in time.
        """
        # sparse=False: holes go as zeros (asyncssh's sparse copy never extends a hole at the end:
        # an all-hole file arrived as 0 bytes)
        put = asyncio.ensure_future(sftp.put(local_path, tmp, max_requests=UPLOAD_REQUESTS, sparse=False))
        try:
            await asyncio.shield(put)
        except asyncio.CancelledError:
            put.cancel()
            done, _ = await asyncio.wait({put}, timeout=PART_REMOVE_S)
            if not done:
                raise _HostSilent(f"the host did not answer in {PART_REMOVE_S:g} s") from None
            raise

    def _note_left(self, tmp: str, why: str) -> None:
        """Name a part file left on the host in the host's log (``on_note``, :data:`LEFT_ON_HOST`)."""
        if self.on_note is not None:
            self.on_note(f"{LEFT_ON_HOST}{tmp} (an interrupted upload's part file; removing it failed: {why})")

    async def _drop_part(self, sftp, tmp: str) -> None:
        """Remove an interrupted upload's part file, waiting at most :data:`PART_REMOVE_S` seconds
        (a dead host must not hold up the exit); when it cannot be removed, the host's log names
        it (``on_note``: :data:`~fleetctl.connection.base.LEFT_ON_HOST`)."""
        try:
            await within(asyncio.shield(sftp.remove(tmp)), PART_REMOVE_S)
            return
        except asyncssh.SFTPNoSuchFile:
            return
        except (OSError, asyncssh.Error, asyncio.TimeoutError, asyncio.CancelledError) as exc:
            why = getattr(exc, "reason", None) or str(exc) or (
                f"no answer in {PART_REMOVE_S:g} s" if isinstance(exc, asyncio.TimeoutError) else "interrupted again")
        self._note_left(tmp, why)

    async def _drop_stale_parts(self, sftp, remote_path: str, now: int | None) -> None:
        """Remove part files an earlier upload to ``remote_path`` left (its own naming scheme,
        ``.NAME.<8 hex digits>.part``, regular files of this user) once they are unchanged for
        :data:`STALE_PART_S` seconds before ``now`` (the finished file's mtime: the host's clock),
        so an upload still writing one (another controller's) is never cut off. Best effort."""
        parent, name = posixpath.split(remote_path)
        pattern = re.compile(r"\." + re.escape(name) + r"\.[0-9a-f]{8}\.part")
        if now is None:
            return
        with contextlib.suppress(OSError, asyncssh.Error):
            for entry in await sftp.readdir(parent or "."):
                a = entry.attrs
                if (pattern.fullmatch(entry.filename) and a.type == asyncssh.FILEXFER_TYPE_REGULAR
                        and a.mtime is not None and now - a.mtime >= STALE_PART_S):
                    with contextlib.suppress(OSError, asyncssh.Error):
                        await sftp.remove(posixpath.join(parent, entry.filename))

    async def get(self, remote_path: str, local_path: str) -> None:
        """Download a regular file over SFTP (over an exec channel where SFTP cannot be used); a
        symlink or special file is refused. The local file is written as
        :func:`fleetctl.connection.download.local_download` writes it (a part file renamed when
        complete; a local write failure is a ``ControllerWriteError``)."""
        if self._no_sftp:
            return await get_by_exec(self, remote_path, local_path)
        if self._saturated() and self._sftp is None:
            return await (await self._second()).get(remote_path, local_path)
        try:
            await self._get(remote_path, local_path)
        except UseOverflow:
            await (await self._second()).get(remote_path, local_path)
        except _NoSFTP:
            await get_by_exec(self, remote_path, local_path)

    async def _get(self, remote_path: str, local_path: str) -> None:
        """Read the host's file (asyncssh's ``read_parallel``: the server's largest read requests, 16
        or more in flight, as its ``get`` does) into the part file: a failed read is the host's (its
        path named; a lost channel or connection a ``TransferLost``), a failed write the controller's."""
        async with self._sftp_session() as sftp:
            try:
                attrs = await sftp.lstat(remote_path)
                if attrs.type != asyncssh.FILEXFER_TYPE_REGULAR:
                    raise TransferError(f"{self.host}: get {remote_path}: not a regular file (symlinks are never "
                                        f"followed)")
                with local_download(self.host, remote_path, local_path) as part:
                    size = attrs.size or 0
                    async with await sftp.open(remote_path, "rb") as src:
                        got = 0  # blocks of the size lstat saw, requested in parallel, may come out of order
                        if size:
                            async for offset, chunk in await src.read_parallel(size, 0):
                                part.write(chunk, offset)
                                got += len(chunk)
                        if got < size:  # asyncssh's own get says "Unexpected EOF during file copy"
                            raise TransferError(f"{self.host}: get {remote_path}: the file shrank while it was "
                                                f"read ({got} of {size} bytes)")
                        # then on to EOF, as OpenSSH's sftp reads: a file that grew, or one the kernel
                        # sizes 0 (/proc/cpuinfo, /sys files) whose bytes exist only when read
                        while chunk := await src.read(_TAIL_BLOCK, got):
                            part.write(chunk, got)
                            got += len(chunk)
                    part.keep_mode((attrs.permissions or 0o644) & 0o777)
            except (OSError, asyncssh.Error) as exc:
                if is_lost(exc):
                    raise lost_error(self.host, remote_path, exc) from None
                if isinstance(exc, OSError):
                    raise read_error(self.host, remote_path, exc) from None
                reason = getattr(exc, "reason", None) or str(exc)
                raise TransferError(f"{self.host}: get {remote_path}: {reason}") from None


class _HostSilent(Exception):
    """An interrupted upload's host did not answer in time (see ``_put_bounded``)."""


class _NoSFTP(TransferError):
    """The SFTP session could not start (``put`` then goes through an exec channel)."""


class _SFTPWriteFailed(TransferError):
    """An SFTP upload failed with ``SSH_FX_FAILURE``, which hides the errno (``put`` then goes
    through an exec channel, whose error names it)."""
