"""The controller's wheel cache: each arch class's wheel, kept between runs to be pushed to members.

``<cache_dir>/wheels/<key16>/`` holds the wheel and ``record.json``: the class ``key``, the wheel's
``name``, its ``sha256`` (computed on the controller when the wheel entered the cache: fetched from
its builder and checked against the builder's sha256), ``size_bytes`` and ``mtime_s`` (bytes, whole
seconds, as written into the cache), ``unpacked_bytes`` (what it unpacks to: the install's room
check, :func:`fleetctl.facts.venv.install_need_mib`), the ``builder`` and the build's record ``data``. ``size`` repeats
``size_bytes`` for older fleetctl versions reading the same cache.

A cached wheel is trusted only while it is the wheel its record describes, checked as a host's
build stamp is (:mod:`fleetctl.tasks.build_keys`), so the two agree:

- every run stats it (:func:`check_cached`): another size means it was cut short or replaced: it
  is not pushed, and the run says so in one line naming the wheel and both sizes; the class is
  built again (or served by a member that holds it), and the new wheel replaces it;
- the same size with another mtime (touched, copied, a record written before mtimes were kept) is
  settled by its sha256, computed once; a match rewrites the record with the mtime it has now, so
  it is hashed once, not on every run;
- before it is pushed to a host, its sha256 is checked once per run (:func:`sha256_problem`):
  pushing reads and sends the whole wheel anyway, so reading it once more on the controller costs
  little next to the transfer, and it catches bytes changed in place with size and mtime kept (bit
  rot, ``cp -p``), which the cheap check cannot.

Nothing here deletes a cached wheel: ``--plan`` and ``--dry-run`` change no cache, and a wheel that
fails a check is replaced when its class's new wheel is stored (:func:`store_wheel`).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping
from typing import Any

from ..errors import FleetError
from ..tasks.copy import sha256_of
from ..util.paths import cache_dir
from ..util.sizes import human_bytes

_WHEEL_NAME = re.compile(r"^[A-Za-z0-9_.+-]+\.whl$")
RECORD = "record.json"


@dataclass(frozen=True)
class BuiltWheel:
    """A class's wheel in the controller cache: ``local`` path, file ``name``, ``sha256``, the
    ``builder`` host, and the builder's build record ``data`` (archs, SASS, inputs)."""

    local: Path
    name: str
    sha256: str
    builder: str
    data: dict = field(default_factory=dict)
    #: the sum of its zip members' sizes, bytes (what pip unpacks into site-packages), or None
    unpacked_bytes: int | None = None


def unpacked_size(path: Path) -> int | None:
    """The bytes a wheel unpacks to (the sum of its zip members' uncompressed sizes, read from its
    central directory: no member is decompressed), or None when it cannot be read as a zip."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as zf:
            return sum(info.file_size for info in zf.infolist())
    except (OSError, zipfile.BadZipFile, ValueError):
        return None


def wheels_root() -> Path:
    """``<cache_dir>/wheels``."""
    return cache_dir() / "wheels"


_SCRATCH: list[Path] = []


def run_scratch() -> Path:
    """A private folder of this controller process for class wheels the cache cannot hold (its
    folder is a file, read-only, full): made in the system's temporary folder on first use and
    removed when the process exits (a cache write that fails never loses a built wheel)."""
    if not _SCRATCH:
        import atexit
        import tempfile

        _SCRATCH.append(Path(tempfile.mkdtemp(prefix="fleetctl-wheels-")))
        atexit.register(shutil.rmtree, _SCRATCH[0], True)
    return _SCRATCH[0]


def cache_unwritable(folder: Path, cause: str) -> str:
    """One line for an operator when the wheel cache's ``folder`` cannot be written: the folder,
    ``cause`` (``No space left on device``), the free space of the file system that holds it (its
    nearest existing parent's ``statvfs``, :func:`shutil.disk_usage`) and where the cache's place
    comes from (``XDG_CACHE_HOME``, :func:`fleetctl.util.paths.cache_dir`)."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = f"{human_bytes(shutil.disk_usage(probe).free)} free there"
    except OSError:
        free = "its free space unknown"
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    origin = f"XDG_CACHE_HOME={xdg}" if os.path.isabs(xdg) else "XDG_CACHE_HOME not set: ~/.cache"
    return (f"the controller's wheel cache {folder} cannot be written ({cause}; {free}; {origin}: point "
            "XDG_CACHE_HOME at a folder with room)")


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, int(st.st_mtime)


def check_cached(key: str) -> tuple[BuiltWheel | None, str | None]:
    """``(the cache's wheel for key, None)`` while it is the wheel its record describes (see the
    module docstring); ``(None, why)`` when the record names a wheel that is not (one line naming
    the wheel: its size or sha256 now and the record's); ``(None, None)`` when nothing is cached
    (no record, or one this fleetctl cannot read). May hash the wheel (its size agrees and its
    mtime does not): call it from a worker thread."""
    folder = wheels_root() / key[:16]
    try:
        rec = json.loads((folder / RECORD).read_text())
        name, sha256 = rec["name"], rec["sha256"]
        if rec.get("key") != key or not isinstance(name, str) or not _WHEEL_NAME.match(name):
            return None, None
    except (OSError, ValueError, KeyError, TypeError):
        return None, None
    local = folder / name
    want = rec.get("size_bytes", rec.get("size"))
    seen = _stat(local)
    where = f"{name} in the controller's wheel cache ({folder})"
    if seen is None:
        return None, f"{where} is gone, its record is left (removed since it was cached)"
    if seen[0] != want:
        return None, f"{where} is {seen[0]} bytes, its record says {want} (truncated or replaced since it was cached)"
    if seen[1] != rec.get("mtime_s"):
        digest = sha256_of(local)
        if digest != sha256:
            return None, (f"{where}: its sha256 is {digest[:12]}..., its record says {str(sha256)[:12]}... "
                          "(changed since it was cached)")
        _write_record(folder, {**rec, "mtime_s": seen[1]})  # hashed once: the next run's stat settles it
    unpacked = rec.get("unpacked_bytes")
    if not isinstance(unpacked, int):  # a record of an older fleetctl: read from the wheel's zip directory
        unpacked = unpacked_size(local)
    wheel = BuiltWheel(local=local, name=name, sha256=sha256, builder=rec.get("builder", "?"), data=rec.get("data") or {},
                       unpacked_bytes=unpacked)
    return wheel, None


def sha256_problem(wheel: BuiltWheel) -> str | None:
    """Why ``wheel`` must not be pushed: its bytes' sha256 is not the one recorded when it entered
    the cache (one line), or it cannot be read; ``None`` when it is the wheel. Reads the whole
    wheel: call it from a worker thread, once per class and run."""
    try:
        digest = sha256_of(wheel.local)
    except OSError as exc:
        return f"{wheel.name} in the controller's wheel cache cannot be read: {exc.strerror or exc}"
    if digest == wheel.sha256:
        return None
    return (f"{wheel.name} in the controller's wheel cache ({wheel.local.parent}): its sha256 is {digest[:12]}..., "
            f"its record says {wheel.sha256[:12]}... (changed since it was cached)")


def _write_record(folder: Path, rec: dict[str, Any]) -> None:
    part = folder / f"{RECORD}.{os.getpid()}.{secrets.token_hex(4)}.part"
    try:
        part.write_text(json.dumps(rec, indent=2) + "\n")
        os.replace(part, folder / RECORD)
    except OSError:  # a cache: the next run hashes it again
        part.unlink(missing_ok=True)


def store_wheel(key: str, tmp: Path, name: str, sha256: str, builder: str, data: dict) -> BuiltWheel:
    """Move a fetched (and checked: ``sha256`` is its bytes') wheel into the cache and write its
    record (its size and mtime as it lies there now), atomically."""
    if not _WHEEL_NAME.match(name):
        raise FleetError(f"refusing to cache {name!r}: not a wheel file name")
    folder = wheels_root() / key[:16]
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    local = folder / name
    os.replace(tmp, local)
    keep = {k: v for k, v in data.items() if k in ("archs", "sass", "key", "inputs", "max_jobs", "tool")}
    size, mtime = _stat(local) or (None, None)
    unpacked = unpacked_size(local)
    rec = {"key": key, "name": name, "sha256": sha256, "size_bytes": size, "size": size, "mtime_s": mtime,
           "unpacked_bytes": unpacked, "builder": builder, "data": keep}
    part = folder / f"{RECORD}.{os.getpid()}.{secrets.token_hex(4)}.part"  # never another run's part file
    part.write_text(json.dumps(rec, indent=2) + "\n")
    os.replace(part, folder / RECORD)
    return BuiltWheel(local=local, name=name, sha256=sha256, builder=builder, data=keep, unpacked_bytes=unpacked)


def copy_into_cache(src: Path, key: str, name: str, sha256: str, builder: str, data: dict[str, Any]) -> BuiltWheel:
    """Cache a wheel that is already on the controller (a local host built it)."""
    folder = wheels_root() / key[:16]
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = folder / f".{name}.{os.getpid()}.{secrets.token_hex(4)}.part"
    shutil.copyfile(src, tmp)
    return store_wheel(key, tmp, name, sha256, builder, data)


#: Build inputs a class wheel is matched by for ``fleetctl facts``, which know no playbook: all but
#: the source tree's hash and the playbook's CMake defines.
_NOT_FROM_FACTS = ("tree", "defines")


def class_wheel_like(host: str, facts: Mapping[str, Any]) -> tuple[str, int] | None:
    """``(file name, unpacked bytes)`` of the newest cached wheel built from the inputs ``facts``
    give the host (:func:`fleetctl.tasks.build_keys.build_inputs` but the tree and the defines:
    its arch list, CUDA, torch, Python, host compiler, platform), or None: what ``fleetctl facts``
    counts as the wheel a deploy would install (:func:`fleetctl.facts.gather.complete_facts`'s
    ``class_wheel``), as ``--plan`` counts its class key's cached wheel. Reads the records only."""
    from ..build.hostcompiler import choose, with_choice
    from ..tasks.build_keys import build_inputs

    chosen = with_choice(facts, choose(facts))  # the compiler nvcc will run: the build task's choice
    want = {k: v for k, v in build_inputs("", facts.get("build") or {}, {}, chosen, host).items()
            if k not in _NOT_FROM_FACTS}
    best: tuple[float, str, int] | None = None
    try:
        folders = list(wheels_root().iterdir())
    except OSError:
        return None
    for folder in folders:
        try:
            path = folder / RECORD
            rec = json.loads(path.read_text())
            inputs = (rec.get("data") or {}).get("inputs") or {}
            when = path.stat().st_mtime
        except (OSError, ValueError, AttributeError):
            continue
        unpacked, name = rec.get("unpacked_bytes"), rec.get("name")
        if not isinstance(unpacked, int) or not isinstance(name, str) or not isinstance(inputs, dict):
            continue
        if {k: v for k, v in inputs.items() if k not in _NOT_FROM_FACTS} == want and (best is None or when > best[0]):
            best = (when, name, unpacked)
    return (best[1], best[2]) if best else None
