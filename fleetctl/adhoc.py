"""Ad-hoc commands and facts across hosts (``fleetctl run`` and ``fleetctl facts``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .connection import OutputLine, connection_for
from .errors import CommandTimeout, FleetError, HostUnreachable
from .fanout import for_each_host
from .inventory import Host
from .runrecord import RunRecord
from .session import open_session

LineSink = Callable[[str, OutputLine], None]

#: Bytes of each stream ``fleetctl run`` keeps per host for its summary and ``--json`` (the last
#: ones, whole lines); the host's log in the run record keeps every byte.
RUN_CAPTURE_BYTES = 1024 * 1024


async def run_on_hosts(
    hosts: Sequence[Host],
    argv: Sequence[str],
    *,
    record: RunRecord,
    on_line: LineSink | None = None,
    forks: int = 50,
    timeout_s: float = 600.0,
    connect_timeout_s: float = 30.0,
    accept_new_host_keys: bool = False,
) -> dict[str, dict[str, Any]]:
    """Run ``argv`` exactly as given on every host, concurrently.

    Returns per host ``{"rc": int|None, "stdout": str, "stderr": str}`` (plus ``"error"`` on a
    timeout; ``"output_truncated"`` when a stream printed more than :data:`RUN_CAPTURE_BYTES`
    and only its tail is kept; ``"connection"`` with handshake retries and the like) or
    ``{"unreachable": True, "error": str}``.
    """

    async def one(host: Host) -> dict[str, Any]:
        record.event("host.started", host=host.name)
        record.host_log(host.name)  # every host has a log, even a silent one
        conn = connection_for(host, accept_new_host_keys=accept_new_host_keys, connect_timeout_s=connect_timeout_s)

        def line(ln: OutputLine) -> None:
            record.line(host.name, ln)
            if on_line:
                on_line(host.name, ln)

        try:
            await conn.open()
            res = await conn.run(argv, timeout_s=timeout_s, on_line=line, capture_bytes=RUN_CAPTURE_BYTES)
            out = {"rc": res.rc, "stdout": res.stdout_text, "stderr": res.stderr_text}
            if res.signal:
                out["signal"] = res.signal
            if res.truncated:  # memory stays bounded: only the tail is kept; the log has every byte
                out["output_truncated"] = {**res.truncated, "kept": "the last bytes of each stream, whole lines",
                                           "log": str(record.dir / "logs" / f"{host.name}.log")}
        except HostUnreachable as exc:
            out = {"unreachable": True, "error": exc.cause}
        except CommandTimeout as exc:
            out = {"rc": None, "stdout": "", "stderr": "", "error": str(exc)}
        except FleetError as exc:
            out = {"rc": None, "stdout": "", "stderr": "", "error": str(exc)}
        finally:
            await conn.close()
        if conn.stats:  # handshake retries (MaxStartups drops), jump hosts, recorded host keys
            out["connection"] = dict(conn.stats)
        record.event("host.finished", host=host.name, rc=out.get("rc"), unreachable=out.get("unreachable", False),
                     error=out.get("error"), connection=out.get("connection"))
        record.data["hosts"][host.name] = {k: v for k, v in out.items() if k not in ("stdout", "stderr")}
        record.save()
        return out

    return await for_each_host(hosts, one, forks=forks)


async def facts_on_hosts(
    hosts: Sequence[Host],
    *,
    record: RunRecord,
    forks: int = 50,
    timeout_s: float = 180.0,
    connect_timeout_s: float = 30.0,
    accept_new_host_keys: bool = False,
) -> dict[str, dict[str, Any]]:
    """Gather facts on every host (one upload and one command each).

    Returns per host the facts (see DESIGN.md's facts contract) or
    ``{"reachable": False, "error": str}``.
    """
    from .session import gather_host_facts

    async def one(host: Host) -> dict[str, Any]:
        try:
            session = await open_session(host, record.run_id, accept_new_host_keys=accept_new_host_keys,
                                         connect_timeout_s=connect_timeout_s)
        except HostUnreachable as exc:
            out = {"reachable": False, "error": exc.cause}
            record.event("facts.failed", host=host.name, error=exc.cause, connection=exc.stats or None)
            record.data["hosts"][host.name] = out
            return out
        except FleetError as exc:
            out = {"reachable": False, "error": str(exc)}
            record.event("facts.failed", host=host.name, error=str(exc))
            record.data["hosts"][host.name] = out
            return out
        try:
            out = await gather_host_facts(session, timeout_s=timeout_s)
            record.event("facts.gathered", host=host.name, gpus=len(out.get("gpus") or []),
                         arch_list=(out.get("build") or {}).get("torch_cuda_arch_list"))
        except FleetError as exc:
            out = {"reachable": True, "error": str(exc)}
            record.event("facts.failed", host=host.name, error=str(exc))
        finally:
            await session.conn.close()
        record.data["hosts"][host.name] = {"facts": out}
        record.save()
        return out

    return await for_each_host(hosts, one, forks=forks)
