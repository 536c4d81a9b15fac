"""Moving files to and from the nodes of an allocation: ``sbcast`` out, job-step stdout back.

Uploads (:func:`upload`): ``sbcast`` copies a file to the node-local disks of the nodes of a job
step, forwarding it from slurmd to slurmd along Slurm's message tree, so the controller sends a
file once per allocation, not once per node. sbcast neither creates folders nor renames atomically,
so a helper step (one task per node, :data:`UPLOAD_HELPER`) runs around it: it creates the
destination's folder, names its step for sbcast (``--jobid=JOB.STEP``: sbcast then reaches exactly
the helper's nodes), waits for "commit" on stdin (srun sends stdin to every task), checks the file's
size, sets its mode and renames it into place. A node where any of it fails says why; the others
are not affected.

Downloads (:func:`download`): a step writes the file to its stdout. srun's I/O forwarding moves
about 15 MiB/s per step here (bench/results/slurm_bench.json), so a file above
:data:`STRIPE_BYTES` comes back in up to :data:`MAX_STRIPES` byte ranges at once (``dd`` with
``skip_bytes,count_bytes``, GNU coreutils), each written at its offset; where that ``dd`` is
missing, one stream.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import secrets
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..errors import HostUnreachable, TransferError
from .base import OWN_DIR_MODE, CommandResult
from .slurm_client import SlurmClient, SlurmError, last_line, stop_process
from .slurm_nodes import hostlist
from .slurm_step import LAUNCH_FAILED, run_step, step_argv, step_name

#: A download larger than this (bytes) is fetched in stripes.
STRIPE_BYTES = 8 * 1024 * 1024
#: Most byte ranges of one download in flight (each is one job step and one srun process).
MAX_STRIPES = 4
_STRIPE_EXIT = 10

#: Fixed script of the upload helper step (one task per node). Arguments: DEST TMP MODE SIZE UMASK
#: (the umask the missing folders are made under; empty: the step's own, as ``mkdir -p``).
UPLOAD_HELPER = r'''set -f
n=$SLURMD_NODENAME
if ! err=$( { [ -z "$5" ] || umask "$5"; } && mkdir -p -- "$(dirname -- "$1")" 2>&1); then printf 'fail %s %s\n' "$n" "$(echo $err)"; exit 1; fi
printf 'ready %s %s.%s\n' "$n" "$SLURM_JOB_ID" "$SLURM_STEP_ID"
IFS= read -r cmd
if [ "$cmd" != commit ]; then rm -f -- "$2"; printf 'aborted %s\n' "$n"; exit 1; fi
size=$(wc -c < "$2" 2>/dev/null) || size=no
size=$(echo $size)
if [ "$size" != "$4" ]; then rm -f -- "$2"; printf 'fail %s sbcast left %s bytes, expected %s\n' "$n" "$size" "$4"; exit 1; fi
if [ -d "$1" ]; then rm -f -- "$2"; printf 'fail %s %s: Is a directory (a folder is there)\n' "$n" "$1"; exit 1; fi
if err=$(chmod "$3" "$2" 2>&1 && mv -f -- "$2" "$1" 2>&1) && [ -f "$1" ]; then printf 'done %s\n' "$n"; exit 0; fi
rm -f -- "$2"; printf 'fail %s %s\n' "$n" "$(echo $err)"; exit 1
'''

#: Fixed script of a download's first step. Arguments: PATH STRIPE_BYTES. A symlink or special file
#: is refused; a file up to STRIPE_BYTES comes whole; a larger one only says its size (exit 10).
DOWNLOAD = (f'if [ -L "$1" ] || [ ! -f "$1" ]; then '
            f'echo "$1: not a regular file (symlinks are never followed)" >&2; exit 3; fi; '
            f'size=$(wc -c < "$1") || exit 4; size=$(echo $size); '
            f'if [ "$size" -gt "$2" ]; then echo "fleetctl-size $size" >&2; exit {_STRIPE_EXIT}; fi; '
            f'exec cat -- "$1"')
#: One byte range of a file. Arguments: PATH OFFSET LENGTH.
DOWNLOAD_RANGE = 'exec dd if="$1" bs=1M skip="$2" count="$3" iflag=skip_bytes,count_bytes status=none'


async def upload(client: SlurmClient, job_id: str, nodes: Sequence[str], local_path: str, dest: str, *,
                 size: int, mode: int | None = None, dir_mode: int | None = OWN_DIR_MODE,
                 ) -> tuple[dict[str, str | None], set[str]]:
    """Put ``local_path`` at ``dest`` on every node of ``nodes`` (all in job ``job_id``) with one
    sbcast (see the module docstring). Missing folders on the way get ``dir_mode`` (None: 0777
    less the step's umask, as ``mkdir -p``: :func:`fleetctl.connection.base.folder_mode`). No deadline of its own: cancel the task to stop it (the
    helper then removes its temporary files).

    Returns:
        ``(status, own)``: node -> ``None`` when the file is in place there, else why not (one
        line); ``own`` holds the nodes whose answer is their own (the file is in place, the
        node's helper failed by itself: its folder, size check, mode or rename, or srun named it
        as the node where the step could not start). A node not in ``own`` failed with the group
        (srun starts a step on all of its nodes or on none; sbcast failed): alone, it may well
        succeed.

    Raises:
        SlurmError: the helper step could not be started.
    """
    nodes = sorted(set(nodes))
    tmp = posixpath.join(posixpath.dirname(dest), f".{posixpath.basename(dest)}.{secrets.token_hex(4)}.part")
    helper = step_argv(job_id, hostlist(nodes), ["/bin/sh", "-c", UPLOAD_HELPER, "fleetctl-put", dest, tmp,
                                                 f"{0o644 if mode is None else mode:o}", str(size),
                                                 "" if dir_mode is None else f"{0o777 & ~dir_mode:03o}"],
                       tasks=len(nodes), node_count=len(nodes), name=step_name())
    proc = await client.spawn(helper, stdin=True)
    assert proc.stdout is not None and proc.stdin is not None
    status: dict[str, str | None] = {}
    ready: set[str] = set()
    step = ""
    try:
        while len(ready) + len(status) < len(nodes):
            word, node, detail = _words(await proc.stdout.readline())
            if not word:
                break
            if word == "ready":
                ready.add(node)
                step = detail
            elif word == "fail":
                status[node] = detail
        sbcast_error = None
        if ready and step:
            sbcast_error = await _sbcast(client, step, local_path, tmp)
        try:
            proc.stdin.write(b"commit\n" if ready else b"abort\n")
            await proc.stdin.drain()
            proc.stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            pass  # srun already ended (the step did not start everywhere): its stderr says why
        rest, err = await proc.communicate()
    except BaseException:
        try:
            proc.stdin.close()  # the helper removes its temporary file at EOF
        except OSError:
            pass
        await asyncio.shield(stop_process(proc, grace_s=3.0))
        raise
    own = set(status)  # failed before sbcast: the folder could not be made
    for line in rest.splitlines():
        word, node, detail = _words(line)
        if word == "done":
            status[node] = None
            own.add(node)
        elif word == "fail":
            status[node] = detail + (f" ({sbcast_error})" if sbcast_error else "")
            if not sbcast_error:
                own.add(node)
    text = err.decode("utf-8", "replace")
    cause = last_line(text)
    for m in LAUNCH_FAILED.finditer(text):  # this node's own fault: no step starts there
        if m.group(1) in nodes and m.group(1) not in status:
            status[m.group(1)] = f"no job step starts on node {m.group(1)}: {m.group(2).strip()}"
            own.add(m.group(1))
    for n in nodes:
        status.setdefault(n, sbcast_error or f"upload step did not run: {cause or 'no answer'}")
    return status, own & set(nodes)


#: Copies stdin to a new private file on the launcher's side and prints its path.
_STAGE = 'umask 077; t=$(mktemp "${TMPDIR:-/tmp}/fleetctl-sbcast.XXXXXX") && cat > "$t" && printf "%s\\n" "$t"'


async def _sbcast(client: SlurmClient, step: str, local_path: str, tmp: str) -> str | None:
    """Run sbcast for the file; ``None`` when it succeeded, else why not.

    sbcast reads its SOURCE where it runs. Behind a remote-shell launcher (``ssh login01``) that is
    another machine, so the file is first streamed there once (a private temporary file, removed
    afterwards) and sbcast sends that: one copy over SSH to the login node, not one per node.
    """
    source = local_path
    staged = None
    try:
        if client.remote_shell:
            with open(local_path, "rb") as fh:
                res = await client.call(["/bin/sh", "-c", _STAGE], stdin_file=fh, timeout_s=None, check=False)
            staged = res.stdout_text.strip().splitlines()[-1] if res.rc == 0 and res.stdout.strip() else None
            if staged is None:
                return f"cannot stage the file for sbcast ({client.describe()}): {last_line(res.stderr_text)}"
            source = staged
        res = await client.call(["sbcast", "--force", f"--jobid={step}", source, tmp], timeout_s=None, check=False)
        if res.rc != 0:
            return f"sbcast failed: {last_line(res.stderr_text) or f'exit {res.rc}'}"
        return None
    finally:
        if staged:
            await asyncio.shield(client.call(["rm", "-f", "--", staged], timeout_s=60, check=False))


def _words(line: bytes) -> tuple[str, str, str]:
    word, _, rest = line.decode("utf-8", "replace").strip().partition(" ")
    node, _, detail = rest.partition(" ")
    return word, node, detail


class _RangeWriter:
    """A file-like sink writing at a moving offset of one shared file descriptor (``os.pwrite``)."""

    def __init__(self, fd: int, offset: int) -> None:
        self.fd = fd
        self.offset = offset
        self.written = 0

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        while view:
            n = os.pwrite(self.fd, view, self.offset + self.written)
            self.written += n
            view = view[n:]
        return len(data)


async def download(client: SlurmClient, host: str, job_id: str, node: str, remote_path: str, local_path: str, *,
                   chdir: str = "/") -> None:
    """Fetch the regular file ``remote_path`` of ``node`` to ``local_path`` (a temporary file beside
    it, renamed into place; parents created).

    Raises:
        TransferError: naming the host, the path and the cause (not a regular file, a symlink,
            missing, the step could not run, a short read).
    """
    dest = Path(local_path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    try:
        sink = _RangeWriter(fd, 0)
        res = await _step(client, host, job_id, node, ["/bin/sh", "-c", DOWNLOAD, "fleetctl-get", remote_path,
                                                       str(STRIPE_BYTES)], chdir, sink)
        if res.rc == _STRIPE_EXIT and res.stderr_text.startswith("fleetctl-size "):
            size = int(res.stderr_text.split()[1])
            await _striped(client, host, job_id, node, remote_path, fd, size, chdir)
        elif res.rc != 0:
            raise TransferError(f"{host}: get {remote_path}: {last_line(res.stderr_text) or f'exit {res.rc}'}")
        os.close(fd)
        fd = -1
        os.replace(tmp, dest)
    finally:
        if fd >= 0:
            os.close(fd)
        Path(tmp).unlink(missing_ok=True)


async def _step(client: SlurmClient, host: str, job_id: str, node: str, argv: list[str], chdir: str,
                sink: _RangeWriter) -> CommandResult:
    try:
        return await run_step(client, host, job_id, node, argv, chdir=chdir, stdout_file=sink,  # type: ignore[arg-type]
                              unbuffered=True)
    except HostUnreachable as exc:
        raise TransferError(f"{host}: get {argv[4]}: {exc.cause}") from None


async def _striped(client: SlurmClient, host: str, job_id: str, node: str, remote_path: str, fd: int, size: int,
                   chdir: str) -> None:
    stripes = min(MAX_STRIPES, -(-size // STRIPE_BYTES))
    part = -(-size // stripes)

    async def one(i: int) -> None:
        offset, length = i * part, min(part, size - i * part)
        sink = _RangeWriter(fd, offset)
        res = await _step(client, host, job_id, node, ["/bin/sh", "-c", DOWNLOAD_RANGE, "fleetctl-get", remote_path,
                                                       str(offset), str(length)], chdir, sink)
        if res.rc != 0 or sink.written != length:
            raise _NoRange(last_line(res.stderr_text) or f"{sink.written} of {length} bytes at {offset}")

    tasks = [asyncio.ensure_future(one(i)) for i in range(stripes)]
    try:
        await asyncio.gather(*tasks)
    except BaseException as exc:
        for t in tasks:  # no range may write after this
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if not isinstance(exc, _NoRange):
            raise
        # no GNU dd there: one stream
        os.ftruncate(fd, 0)
        sink = _RangeWriter(fd, 0)
        res = await _step(client, host, job_id, node, ["/bin/sh", "-c", DOWNLOAD, "fleetctl-get", remote_path,
                                                       str(1 << 62)], chdir, sink)
        if res.rc != 0:
            raise TransferError(f"{host}: get {remote_path}: {last_line(res.stderr_text) or f'exit {res.rc}'}") \
                from None
        return
    os.ftruncate(fd, size)


class _NoRange(Exception):
    """A byte-range step failed."""


__all__ = ["upload", "download", "SlurmError", "STRIPE_BYTES", "MAX_STRIPES"]
