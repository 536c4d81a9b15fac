#!/usr/bin/env python3
"""The asyncssh floor for the transport benchmark: every host at once, one command, nothing else.

    python bench/transport_floor.py HOSTS.json --timeout S [--out FILE] -- ARGV...

HOSTS.json is a list of ``{"name", "host", "port", "user", "key", "known_hosts"}``. Each host gets
``asyncssh.connect(..., connect_timeout=S)`` at once (no gate, no retry), then the command; with
``--out`` its stdout is streamed, chunk by chunk, into FILE (the floor for "keep every byte,
memory flat"). Prints one JSON object: ``{name: {"ok": bool, "done_s": seconds since start,
"done_at": UNIX time}}`` (``done_at`` lets the benchmark count from the process's spawn, imports
included, as it does for the other tools).
Host keys are checked against ``known_hosts``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
import time

import asyncssh


async def one(h: dict, command: str, timeout_s: float, out_path: str | None, t0: float) -> tuple[str, dict]:
    try:
        async with asyncssh.connect(h["host"], port=h["port"], username=h["user"], client_keys=[h["key"]],
                                    known_hosts=h["known_hosts"], connect_timeout=timeout_s, agent_path=None,
                                    config=None) as conn:
            async with conn.create_process(command, encoding=None) as proc:
                sink = open(out_path, "wb") if out_path else None
                try:
                    while True:
                        chunk = await proc.stdout.read(65536)
                        if not chunk:
                            break
                        if sink:
                            sink.write(chunk)
                finally:
                    if sink:
                        sink.close()
                await proc.wait()
                ok = proc.exit_status == 0
    except (OSError, asyncssh.Error, asyncio.TimeoutError):
        ok = False
    return h["name"], {"ok": ok, "done_s": round(time.monotonic() - t0, 3), "done_at": time.time()}


async def main() -> int:
    argv = sys.argv[1:]
    cut = argv.index("--")
    ap = argparse.ArgumentParser()
    ap.add_argument("hosts")
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--out", default=None)
    opts = ap.parse_args(argv[:cut])
    command = shlex.join(argv[cut + 1:])
    hosts = json.load(open(opts.hosts))
    t0 = time.monotonic()
    results = dict(await asyncio.gather(*(one(h, command, opts.timeout, opts.out, t0) for h in hosts)))
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
