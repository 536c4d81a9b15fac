"""A run record whose folder stopped taking bytes (a full disk, a quota, an I/O error): what it
lost, said where it was lost.

The project's rule for run records: nothing logged is lost, and a run whose record lost
something is never "ok". A full file system cannot be helped, but it must never pass unseen
(operator trial: ``FLEETCTL_HOME`` on a 3 MiB tmpfs, a host printing 5.4 MB: the record observer
was dropped with a one-line warning, the logs ended at ~1.9 MB without a word, run.json stayed
``running`` with no hosts, ``fleetctl logs`` exited 0 and the run ``ok``, rc 0).

So each record keeps :data:`RESERVE_BYTES` of its file system in a file of its own
(``<run>/.reserve``) while the run goes. From the first write that fails, the record writes no
more output (it counts what it did not keep, per host); when it closes, it frees the reserve and
writes, in that room, a marker line where each cut log ends (:data:`CUT_MARK`, with the cause and
what was not kept) and run.json (``record_cut``; status ``failed``, as each cut log's host, with
``log_cut``), and the command ends non-zero naming the folder and its free space
(:meth:`RecordCut.message`). ``fleetctl logs`` (``--follow`` too) never presents a cut log as whole
(:func:`log_cut`).

The cut is written into the run model itself when the record closes (:meth:`RecordCut.settle`),
the one place a reporter writes into the model: the record alone knows what it lost, and every
view of the run (run.json, the summary line ``ok 0, failed 2, unreachable 0; run record
incomplete: 2 host logs cut``, ``--json``, the API's result, the metrics file, which closes after
the record) reads the model, so none of them can call a run ``ok`` that run.json calls ``failed``.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

from ..util.sizes import human_bytes

#: Bytes kept free for the record's last words (markers, the last event, run.json): 128 KiB, about
#: 1,000 hosts' markers or run.json of a hundred hosts.
RESERVE_BYTES = 128 * 1024
#: The start of the line that ends a cut log (after what was written before the cut).
CUT_MARK = b"==> log cut here: "


def free_bytes(folder: Path) -> int | None:
    """Bytes an unprivileged user may still write in ``folder``'s file system (``statvfs``
    ``f_bavail``), or None when it cannot be asked."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _size(n: int | None) -> str:
    return "free space unknown" if n is None else f"{human_bytes(n)} free"


class RecordCut:
    """One run record's reserve and what it lost. Thread-safe.

    Args:
        folder: the run's record folder (``<runs>/<run_id>``); the reserve is ``.reserve`` in it.

    Raises:
        OSError: the reserve cannot be written (the folder's file system is already full): the
            record is refused before the run (:class:`~fleetctl.reporting.record.RunRecord`).
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.reserve = folder / ".reserve"
        self.error: str | None = None  # the first failed write's cause (``No space left on device``)
        self.hosts: dict[str, list[int]] = {}  # host -> [lines, bytes] not kept (a failed buffer: 0, 0)
        self.events = 0  # events not kept
        self.free: int | None = None  # the file system's free bytes when the cut was found
        self._lock = threading.Lock()
        with open(self.reserve, "wb") as fh:  # random bytes: a compressing file system keeps their room
            fh.write(os.urandom(RESERVE_BYTES))

    def cut(self, exc: OSError) -> None:
        """A write failed: from now on nothing more is written until :meth:`close_out`."""
        with self._lock:
            if self.error is None:
                self.error = exc.strerror or os.strerror(exc.errno or errno.EIO)
                self.free = free_bytes(self.folder)

    def lost(self, host: str | None, nbytes: int = 0) -> None:
        """``host``'s line of ``nbytes`` (or, host None, an event) was not kept."""
        with self._lock:
            if host is None:
                self.events += 1
                return
            n = self.hosts.setdefault(host, [0, 0])
            n[0], n[1] = n[0] + (1 if nbytes else 0), n[1] + nbytes

    def release(self) -> None:
        """Give the reserve back (the run is closing: its last words go into that room)."""
        try:
            os.unlink(self.reserve)
        except OSError:
            pass

    def settle(self, run) -> None:
        """Write the cut into ``run`` (the :class:`~fleetctl.engine.model.RunModel`), so that
        every view of the run says it: run.json, the summary line, ``--json``, the API's result,
        the metrics file. Nothing when nothing was lost. Called once, when the record closes (the
        cut is final then): ``record_cut`` is :meth:`message`; each cut log's host gets
        ``log_cut`` (the marker's text); an ``ok``/``changed`` one becomes ``failed``, its
        ``error`` saying why, and joins ``failed_hosts``; an ``ok`` run becomes ``failed``."""
        if self.error is None:
            return
        run.record_cut = self.message(self.folder.parent)
        for host, (lines, nbytes) in self.hosts.items():
            out = run.hosts.get(host)
            if out is None:
                continue
            out.log_cut = self.what(lines, nbytes)
            if out.status in ("ok", "changed"):
                out.status = "failed"
                out.error = out.error or f"log cut: {out.log_cut}"
            if out.status != "ok" and host not in run.failed_hosts:
                run.failed_hosts = [*run.failed_hosts, host]
        if run.status == "ok":
            run.status = "failed"

    def mark_logs(self, log_path) -> None:
        """Append :data:`CUT_MARK` lines: to each cut host's log (``log_path(host)``), on a line
        of its own after the last byte that was written. Errors are left to :meth:`message`."""
        for host, (lines, nbytes) in sorted(self.hosts.items()):
            path = log_path(host)
            try:
                with open(path, "a+b") as fh:
                    fh.seek(0, os.SEEK_END)
                    lead = b""
                    if fh.tell():
                        fh.seek(-1, os.SEEK_END)
                        lead = b"" if fh.read(1) == b"\n" else b"\n"
                    fh.write(lead + CUT_MARK + self.what(lines, nbytes).encode() + b"\n")
            except OSError:
                continue

    def what(self, lines: int, nbytes: int) -> str:
        """The cut marker's text after :data:`CUT_MARK`."""
        kept = (f"at least {lines} more line(s) ({nbytes} bytes) the host printed were not kept" if lines
                else "lines the host printed just before this point may be missing")
        return f"the run record could not be written ({self.error}; {_size(self.free)}): {kept}"

    def message(self, runs: Path) -> str | None:
        """The command's error line, or None when nothing was lost: what could not be written,
        the folder, its free space, and which logs are cut."""
        if self.error is None:
            return None
        cut = ", ".join(sorted(self.hosts)) or "none"
        return (f"the run record could not be written: {self.error} in {runs} ({_size(self.free)}); "
                f"host logs cut: {cut} (each ends with a '==> log cut here' line); free space there "
                f"or set FLEETCTL_HOME to a folder with room")


def log_cut(data: bytes) -> str | None:
    """The cut marker's text when a host log (its bytes) is cut, else None."""
    at = data.rfind(b"\n" + CUT_MARK)
    if at < 0 and not data.startswith(CUT_MARK):
        return None
    line = data[at + 1:] if at >= 0 else data
    return line[len(CUT_MARK):].split(b"\n", 1)[0].decode("utf-8", "replace")


def cut_logs(run_dir: Path) -> dict[str, str]:
    """The run's cut host logs: log file name stem -> the cut marker's text (:func:`log_cut`;
    the marker is a log's last line, so only each log's last 64 KiB is read)."""
    found = {}
    for path in sorted((run_dir / "logs").glob("*.log")):
        try:
            with open(path, "rb") as fh:
                fh.seek(max(0, path.stat().st_size - 65536))
                what = log_cut(fh.read())
        except OSError:
            continue
        if what is not None:
            found[path.stem] = what
    return found
