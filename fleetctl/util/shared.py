"""One copy of each equal short string among what a run keeps of its hosts (issue 27: memory per
host).

Each host's facts arrive as its own JSON text, so 10,000 hosts hold 10,000 copies of every key
(``"compute_cap"``, ``"torch_cuda_arch_list"``) and of every value they share (``"NVIDIA H200"``,
``"/usr/local/cuda"``, ``"13.0"``). :func:`share` makes equal strings one object: a real host's
facts as the run keeps them went from 22.0 to 8.1 KiB (tracemalloc, 1,000 hosts' facts from
``playbooks/scripts/facts.py`` on the build machine; the Connection double's small facts 5.9 to 3.1;
bench/README.md, issue 27). Only the strings are shared: dicts and lists stay each host's own, so
nothing one host's data is changed through another's.

The table is bounded (:data:`MAX_ENTRIES`; cleared when full: sharing is an economy, never a
meaning), so a long-lived process (the Python API) does not keep the strings of runs long gone.
"""

from __future__ import annotations

from typing import Any

#: Strings longer than this are left alone (scripts, outputs: rarely equal, and their copies few).
MAX_CHARS = 256
#: Strings the table holds at most before it starts over (about 10 MiB of entries).
MAX_ENTRIES = 100_000

_table: dict[str, str] = {}


def share(obj: Any) -> Any:
    """``obj`` with each string of at most :data:`MAX_CHARS` characters in it (keys included)
    replaced by the one equal string the table holds. Dicts and lists (JSON-like data) are changed
    in place, keeping their order and identity; other objects are returned as they are. Returns
    ``obj`` (or, for a string, its shared copy)."""
    if isinstance(obj, str):
        if len(obj) > MAX_CHARS:
            return obj
        got = _table.get(obj)
        if got is None:
            if len(_table) >= MAX_ENTRIES:
                _table.clear()
            _table[obj] = got = obj
        return got
    if isinstance(obj, dict):
        items = [(share(k), share(v)) for k, v in obj.items()]
        obj.clear()
        obj.update(items)
        return obj
    if isinstance(obj, list):
        obj[:] = [share(v) for v in obj]
        return obj
    return obj
