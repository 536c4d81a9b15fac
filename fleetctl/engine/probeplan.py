"""Which read-only commands (probes) each host's planners asked last time, to answer them ahead.

A deploy's planners ask a few read-only questions per host (the wheel stamps, what the venv holds,
the remote files' sha256...). Asked one by one, each is a round trip and a process start on the
host. The engine remembers, per playbook and inventory host, the probes asked before the host was
first changed; the next run's first command (:mod:`fleetctl.engine.session_start`) runs them on
the host beside the facts, and the planners' questions are answered from there. The memory only
predicts *which* questions: every answer is read on the host in this run, and a question nobody
predicted is asked as always, so a wrong prediction costs time, never correctness.

Kept in ``<cache_dir>/probes/<playbook key>.json`` (a cache: deleting it only slows the next run
down). Paths under the host's workdir are stored relative to it, so hosts laid out alike share
one entry; commands naming this run's id (its run folder) are not kept.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..util.paths import cache_dir

#: Stands for the host's workdir in a remembered probe (NUL never occurs in an argv).
WORKDIR = "\x00W"
#: Probes remembered per host at most.
MAX_PROBES = 64


def memory_path(playbook_path: str | Path) -> Path:
    """``<cache_dir>/probes/<sha256 of the playbook's absolute path, 16 digits>.json``."""
    key = hashlib.sha256(str(Path(playbook_path).resolve()).encode()).hexdigest()[:16]
    return cache_dir() / "probes" / f"{key}.json"


def _sub(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return value.replace(old, new) if old else value
    if isinstance(value, (list, tuple)):
        return [_sub(v, old, new) for v in value]
    return value


def template(key: tuple, timeout_s: float | None, workdir: str) -> list | None:
    """A probe key (see :func:`fleetctl.engine.executor.probe_key`) as remembered: the workdir
    replaced by :data:`WORKDIR`; ``None`` for a key not worth remembering (``become``)."""
    argv, env, cwd, become = key
    if become:
        return None
    prefix = workdir.rstrip("/") if workdir not in ("", "/") else ""
    return [_sub(list(argv), prefix, WORKDIR), [[k, _sub(v, prefix, WORKDIR)] for k, v in env],
            _sub(cwd, prefix, WORKDIR), timeout_s]


def concrete(entry: list, workdir: str) -> tuple[tuple, float | None]:
    """``(probe key, deadline in seconds)`` of a remembered entry for a host with ``workdir``."""
    argv, env, cwd, timeout_s = entry
    prefix = workdir.rstrip("/")
    key = (tuple(_sub(argv, WORKDIR, prefix)), tuple((k, _sub(v, WORKDIR, prefix)) for k, v in env),
           _sub(cwd, WORKDIR, prefix), False)
    return key, timeout_s


class ProbeMemory:
    """The remembered probes of one playbook, for every host it ran on (see the module docstring).

    Args:
        playbook_path: the playbook file (its absolute path names the memory).
    """

    def __init__(self, playbook_path: str | Path) -> None:
        self.path = memory_path(playbook_path)
        self._keys: list[list] = []
        self._hosts: dict[str, list[int]] = {}
        self._noted: dict[str, list[str]] = {}  # host -> its entries' JSON texts (see note)
        self._texts: dict[str, str] = {}  # each entry's text once, shared by the hosts asking it
        try:
            doc = json.loads(self.path.read_text())
            if doc.get("version") == 1:
                self._keys, self._hosts = list(doc["keys"]), dict(doc["hosts"])
        except (OSError, ValueError, KeyError, TypeError):
            pass

    def entries(self, host: str) -> list[list]:
        """The remembered (templated) probes of ``host``, in the order they were asked."""
        return [self._keys[i] for i in self._hosts.get(host, []) if 0 <= i < len(self._keys)]

    def note(self, host: str, workdir: str, run_id: str, probes: Mapping[tuple, float | None]) -> None:
        """Keep what ``host`` asked this run (``{probe key: deadline}``, its ``workdir`` and the
        run's id), to be written by :meth:`save`. Hosts laid out alike share each entry's text, so
        a host done with its run costs this memory a list of references, not its probe keys."""
        picked = []
        for key, timeout_s in list(probes.items())[:MAX_PROBES]:
            entry = template(key, timeout_s, workdir)
            if entry is None:
                continue
            text = json.dumps(entry, sort_keys=False)
            if run_id not in text:
                picked.append(self._texts.setdefault(text, text))
        self._noted[host] = picked

    def save(self) -> None:
        """Replace what is remembered for the hosts noted (:meth:`note`) and write the file
        atomically (never raising: it is a cache)."""
        index: dict[str, int] = {}
        keys: list[list] = []

        def slot(text: str) -> int:
            if text not in index:
                index[text] = len(keys)
                keys.append(json.loads(text))
            return index[text]

        hosts: dict[str, list[int]] = {}
        for host, old in self._hosts.items():
            if host not in self._noted:
                hosts[host] = [slot(json.dumps(self._keys[i], sort_keys=False)) for i in old if 0 <= i < len(self._keys)]
        for host, texts in self._noted.items():
            hosts[host] = [slot(t) for t in texts]
        self._keys, self._hosts = keys, hosts
        self._noted.clear()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = self.path.with_suffix(f".{os.getpid()}.part")
            tmp.write_text(json.dumps({"version": 1, "keys": keys, "hosts": hosts}))
            os.replace(tmp, self.path)
        except OSError:
            pass

    def remember(self, asked: Mapping[str, tuple[str, str, Mapping[tuple, float | None]]]) -> None:
        """:meth:`note` for each host in ``asked`` (host -> ``(workdir, run id, {probe key:
        deadline})``), then :meth:`save`."""
        for host, (workdir, run_id, probes) in asked.items():
            self.note(host, workdir, run_id, probes)
        self.save()


def wanted(entries: Iterable[list]) -> list[dict[str, Any]]:
    """Remembered entries as the first command's job lists them (still templated)."""
    return [{"argv": e[0], "env": dict(e[1]), "cwd": e[2], "timeout_s": e[3]} for e in entries]
