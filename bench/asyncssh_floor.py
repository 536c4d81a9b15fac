#!/usr/bin/env python3
"""The floor for a Python SSH fan-out tool: asyncssh, every host at once, one command, print.

    python bench/asyncssh_floor.py [OPTIONS] HOSTS.json -- uname -r

HOSTS.json is a list of ``{"name", "host", "port", "user", "key", "known_hosts"}`` objects
(fleet_bench.py writes it). Host keys are checked against ``known_hosts``. No run record, no
logging: connect, run, print ``name | line``, close. Exit 1 if any host failed.

The options add, one at a time, what ``fleetctl run`` does beyond the floor, so that
``fleet_bench.py --only overhead`` can tell where fleetctl's extra time goes:

``--sftp-realpath``    start an SFTP session and resolve ``.`` before the command (fleetctl's
                       ``SSHConnection.open`` does, to learn the home folder)
``--supervise``        wrap the command in fleetctl's remote supervisor script
                       (``fleetctl.connection.command.remote_command_line``)
``--import-fleetctl``  import the modules ``fleetctl run`` imports (click, rich, structlog, pydantic...)
``--known-hosts-once`` parse known_hosts once and share it (asyncssh re-reads the file per connection)
``--stdin FILE``       send FILE as the command's stdin (a facts floor: ``-- python3 - --workdir /tmp``)
``--parallel N``       at most N hosts at once (fleetctl's ``--forks``); default: every host at once
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys

import asyncssh


async def one(h: dict, command: str, known_hosts, opts) -> tuple[str, int | None, str]:
    try:
        async with asyncssh.connect(h["host"], port=h["port"], username=h["user"], client_keys=[h["key"]],
                                    known_hosts=known_hosts) as conn:
            if opts.sftp_realpath:
                sftp = await conn.start_sftp_client()
                await sftp.realpath(".")
            res = await conn.run(command, input=opts.stdin_data)
            if opts.sftp_realpath:
                sftp.exit()
            return h["name"], res.exit_status, str(res.stdout)
    except (OSError, asyncssh.Error) as exc:
        return h["name"], None, f"UNREACHABLE: {exc}\n"


async def main() -> int:
    argv = sys.argv[1:]
    if "--" not in argv:
        print(__doc__, file=sys.stderr)
        return 2
    cut = argv.index("--")
    ap = argparse.ArgumentParser()
    ap.add_argument("hosts")
    ap.add_argument("--sftp-realpath", action="store_true")
    ap.add_argument("--supervise", action="store_true")
    ap.add_argument("--import-fleetctl", action="store_true")
    ap.add_argument("--known-hosts-once", action="store_true")
    ap.add_argument("--stdin", default=None)
    ap.add_argument("--parallel", type=int, default=0)
    opts = ap.parse_args(argv[:cut])
    remote_argv = argv[cut + 1:]
    if opts.import_fleetctl:
        import fleetctl.cli, fleetctl.connection.ssh, fleetctl.engine.adhoc, fleetctl.reporting.record  # noqa: F401,E401
    if opts.supervise:
        from fleetctl.connection.command import remote_command_line
        command = remote_command_line(remote_argv)
    else:
        command = shlex.join(remote_argv)
    opts.stdin_data = open(opts.stdin).read() if opts.stdin else None
    hosts = json.load(open(opts.hosts))
    known_hosts = hosts[0]["known_hosts"]
    if opts.known_hosts_once:
        known_hosts = asyncssh.read_known_hosts(known_hosts)
    gate = asyncio.Semaphore(opts.parallel or len(hosts) or 1)

    async def gated(h: dict):
        async with gate:
            return await one(h, command, known_hosts, opts)

    results = await asyncio.gather(*(gated(h) for h in hosts))
    bad = 0
    for name, rc, out in results:
        for line in out.splitlines():
            print(f"{name} | {line}")
        bad += rc != 0
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
