#!/usr/bin/env python3
"""Push one local file to every selected host through fleetctl's own connection layer.

    python bench/push_driver.py [OPTIONS] INVENTORY PATTERN LOCAL_FILE REMOTE_DIR

One :class:`fleetctl.connection.ssh.SSHConnection` per host (from the inventory, as ``fleetctl``
builds it), all opened concurrently; each uploads LOCAL_FILE to ``REMOTE_DIR/<host>/<name>`` with
``SSHConnection.put`` (SFTP to a temporary name, chmod, rename). Prints one line per host; exit 1
if any host failed.

Experiments (what fleetctl could change; ``fleet_bench.py --only pushmem``):

``--max-requests N``  SFTP requests in flight per upload (asyncssh picks 16 x 255 KiB against
                      OpenSSH's sftp-server, so about 4 MiB of file data per host in flight)
``--parallel K``      at most K uploads at once (connections are still all opened at once)

Either one uploads through the connection's SFTP client directly (same temporary name, chmod
and rename as ``put``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import posixpath
import secrets

from fleetctl.connection import connection_for
from fleetctl.errors import FleetError
from fleetctl.inventory import load_inventory


async def main() -> int:
    ap = argparse.ArgumentParser(description="push one file to every host with fleetctl's SSHConnection")
    ap.add_argument("inventory")
    ap.add_argument("pattern")
    ap.add_argument("local")
    ap.add_argument("remote_dir")
    ap.add_argument("--max-requests", type=int, default=0)
    ap.add_argument("--parallel", type=int, default=0)
    args = ap.parse_args()
    hosts = load_inventory(args.inventory).select(args.pattern)
    name = os.path.basename(args.local)
    gate = asyncio.Semaphore(args.parallel or len(hosts) or 1)

    async def upload(conn, dest: str) -> None:
        if not args.max_requests:
            await conn.put(args.local, dest, mode=0o644)
            return
        sftp = await conn._sftp_client()  # the experiment: what put() would do with fewer requests in flight
        tmp = posixpath.join(posixpath.dirname(dest), f".{name}.{secrets.token_hex(4)}.part")
        await sftp.makedirs(posixpath.dirname(dest), exist_ok=True)
        await sftp.put(args.local, tmp, max_requests=args.max_requests)
        await sftp.chmod(tmp, 0o644)
        await sftp.posix_rename(tmp, dest)

    async def one(host) -> str | None:
        conn = connection_for(host)
        try:
            await conn.open()
            async with gate:
                await upload(conn, posixpath.join(args.remote_dir, host.name, name))
            return None
        except Exception as exc:  # noqa: BLE001 - a bench: report any failure per host
            return f"{type(exc).__name__}: {exc}" if not isinstance(exc, FleetError) else str(exc)
        finally:
            await conn.close()

    errors = await asyncio.gather(*(one(h) for h in hosts))
    for host, err in zip(hosts, errors):
        print(f"{host.name} | {'ok' if err is None else 'FAILED: ' + err}")
    return 1 if any(errors) else 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
