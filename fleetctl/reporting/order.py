"""The order run records were made in on this controller, which no clock can change.

A run id begins with the controller's clock (:func:`fleetctl.engine.model.new_run_id`), so ids
sort by what the clock said: a clock a year ahead (a bad RTC before NTP syncs) made its run the
"newest" for a year, and a clock 400 days behind made the run just made the oldest (operator
trial). So each record gets a sequence number as it is made, ``<record>/.seq``: one more than the
last one issued on this controller (``<runs>/.seq``, read and written under an exclusive
``flock``, so two runs started at once get two numbers). This is a logical clock in Lamport's
sense ("Time, Clocks, and the Ordering of Events in a Distributed System", CACM 1978): the order
of events of one process group told by a counter, not by physical time. "The newest run"
(``fleetctl logs``, ``logs --follow``, ``report``, ``runs``) and the retention's "newest N"
(:mod:`fleetctl.util.retention`) read this order. A record without a number (made by an older
fleetctl, or where ``.seq`` could not be written) comes before every numbered one, and among
those without, by id.

A run that ends takes one more number from the same counter, ``<record>/.ended``
(:func:`stamp_end`): the order runs ended in, which the retention's "newest N" reads (a run that
ran for an hour beside 50 quick ones ended after them, so it is the newest, not the oldest). A
record without one (made by an older fleetctl, or a run whose controller was killed) ended,
as far as anyone knows, when it was made: its ``.seq`` stands for both.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable
from pathlib import Path

#: The number's file, in the runs folder (the last one issued) and in each record (its own).
SEQ = ".seq"
#: The file, in each record, of the number the run took when it ended (:func:`stamp_end`).
ENDED = ".ended"


def seq_of(folder: Path, name: str = SEQ) -> int | None:
    """The record's sequence number (``<folder>/.seq``; ``name=ENDED``: the one it took when it
    ended), or None when it has none or no readable one."""
    try:
        text = (folder / name).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def _highest(root: Path) -> int:
    return max((n for p in root.iterdir() if p.is_dir() for name in (SEQ, ENDED)
                if (n := seq_of(p, name)) is not None), default=0)


def stamp(record_dir: Path, root: Path, name: str = SEQ) -> int | None:
    """Give the new record ``record_dir`` (in the runs folder ``root``) the next number and return
    it; None when it cannot be written (the record is then ordered by its id; never raises). A
    lost or damaged ``<root>/.seq`` is rebuilt from the highest number among the records.
    ``name``: the record's file the number goes in (:data:`SEQ`, or :data:`ENDED` by :func:`stamp_end`)."""
    try:
        fd = os.open(root / SEQ, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return None
    with os.fdopen(fd, "r+", encoding="ascii") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX)
            text = fh.read().strip()
            n = (int(text) if text.isdigit() else _highest(root)) + 1
            tmp = record_dir / f"{name}.tmp"
            tmp.write_text(f"{n}\n", encoding="ascii")
            os.replace(tmp, record_dir / name)
            fh.seek(0)
            fh.truncate()
            fh.write(f"{n}\n")
            fh.flush()
        except (OSError, UnicodeDecodeError):
            return None
    return n


def stamp_end(record_dir: Path) -> int | None:
    """Give the record ``record_dir`` of a run that just ended the next number (``.ended``, from
    the counter of its runs folder, :func:`stamp`): the order runs ended in. None when it cannot be
    written (never raises)."""
    return stamp(record_dir, record_dir.parent, ENDED)


def creation_key(folder: Path, seq: int | None = None) -> tuple[int, int, str]:
    """Sort key of a record folder in the order records were made (``seq``: its number when
    already read, else read from ``.seq``)."""
    n = seq if seq is not None else seq_of(folder)
    return (0, 0, folder.name) if n is None else (1, n, folder.name)


def newest_first(folders: Iterable[Path]) -> list[Path]:
    """``folders`` (run records), the one made last first."""
    return sorted(folders, key=creation_key, reverse=True)
