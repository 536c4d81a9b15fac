"""Run records of many hosts, made from a real one by the engine's own model.

:func:`alias_record` takes a run record (``run.json``, ``events.jsonl``, ``logs/``) written by a real
run over a few hosts and writes one of ``n`` hosts: host ``i`` is a copy of real host ``i % k``
under a new name (``gpu001``...), its outcome validated through :class:`fleetctl.engine.model.
RunModel` and written with ``RunModel.as_json`` exactly as the record observer does, its log and
events copied with the name replaced. The report and the benchmark read it as any record.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable

from fleetctl.engine.model import RunModel
from fleetctl.util.paths import safe_name


def _renamer(old: str, new: str) -> Callable[[str], str]:
    rx = re.compile(rf"(?<![\w-]){re.escape(old)}(?![\w-])")
    return lambda text: rx.sub(new, text)


def alias_record(src: Path, dest: Path, n: int, *, name: str = "gpu{:03d}", vary_logs: bool = False) -> Path:
    """Write a record of ``n`` hosts into ``dest`` (made) from the real record ``src``.

    Args:
        vary_logs: append a line that differs per host to every log (no two tails alike: the
            report's worst case for size).
    """
    doc = json.loads((src / "run.json").read_text())
    run = RunModel.model_validate(doc)
    real = list(run.hosts)
    names = [name.format(i + 1) for i in range(n)]
    origin = {new: real[i % len(real)] for i, new in enumerate(names)}
    hosts = {}
    inventory_hosts = {}
    for new, old in origin.items():
        rename = _renamer(old, new)
        copied = json.loads(rename(json.dumps(run.hosts[old].model_dump(mode="json"))))
        hosts[new] = copied
        inventory_hosts[new] = json.loads(rename(json.dumps((doc.get("inventory") or {}).get("hosts", {}).get(old, {}))))
    doc["hosts"] = hosts
    doc["inventory"] = {**(doc.get("inventory") or {}), "hosts": inventory_hosts}
    doc["batches"] = [names]
    doc["failed_hosts"] = [h for h, o in hosts.items() if o.get("status") != "ok"]
    out = RunModel.model_validate(doc)
    (dest / "logs").mkdir(parents=True, exist_ok=True)
    (dest / "run.json").write_text(json.dumps(out.as_json(), indent=2) + "\n")
    events = [json.loads(line) for line in (src / "events.jsonl").read_text().splitlines() if line.strip()]
    with open(dest / "events.jsonl", "w") as fh:
        for ev in events:
            if ev.get("host") in real:
                for new, old in origin.items():
                    if old == ev["host"]:
                        fh.write(_renamer(old, new)(json.dumps(ev)) + "\n")
            else:
                fh.write(json.dumps(ev) + "\n")
    for i, (new, old) in enumerate(origin.items()):
        log = src / "logs" / f"{safe_name(old)}.log"
        data = log.read_bytes() if log.exists() else b""
        data = _renamer(old, new)(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
        if vary_logs:
            data += f"out| finished in {i * 7919 % 1000}.{i % 97:02d} s (host {i})\n".encode()
        (dest / "logs" / f"{safe_name(new)}.log").write_bytes(data)
    return dest
