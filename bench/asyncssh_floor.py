#!/usr/bin/env python3
"""The floor for a Python SSH fan-out tool: asyncssh, every host at once, one command, print.

    python bench/asyncssh_floor.py HOSTS.json -- uname -r

HOSTS.json is a list of ``{"name", "host", "port", "user", "key", "known_hosts"}`` objects
(fleet_bench.py writes it). Host keys are checked against ``known_hosts``. No run record, no
SFTP, no logging: connect, run, print ``name | line``, close. Exit 1 if any host failed.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys

import asyncssh


async def one(h: dict, command: str) -> tuple[str, int | None, str]:
    try:
        async with asyncssh.connect(h["host"], port=h["port"], username=h["user"], client_keys=[h["key"]],
                                    known_hosts=h["known_hosts"]) as conn:
            res = await conn.run(command)
            return h["name"], res.exit_status, str(res.stdout)
    except (OSError, asyncssh.Error) as exc:
        return h["name"], None, f"UNREACHABLE: {exc}\n"


async def main() -> int:
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    hosts = json.load(open(sys.argv[1]))
    command = shlex.join(sys.argv[3:])
    results = await asyncio.gather(*(one(h, command) for h in hosts))
    bad = 0
    for name, rc, out in results:
        for line in out.splitlines():
            print(f"{name} | {line}")
        bad += rc != 0
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
