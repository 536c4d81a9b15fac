#!/usr/bin/env python3
"""Push one local file to every selected host through fleetctl's own connection layer.

    python bench/push_driver.py INVENTORY PATTERN LOCAL_FILE REMOTE_DIR

One :class:`fleetctl.connection.ssh.SSHConnection` per host (from the inventory, as ``fleetctl``
builds it), all opened concurrently; each uploads LOCAL_FILE to ``REMOTE_DIR/<host>/<name>`` with
``SSHConnection.put`` (SFTP to a temporary name, chmod, rename). Prints one line per host; exit 1
if any host failed.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import sys

from fleetctl.connection import connection_for
from fleetctl.errors import FleetError
from fleetctl.inventory import load_inventory


async def main() -> int:
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    inv_path, pattern, local, remote_dir = sys.argv[1:]
    hosts = load_inventory(inv_path).select(pattern)
    name = os.path.basename(local)

    async def one(host) -> str | None:
        conn = connection_for(host)
        try:
            await conn.open()
            await conn.put(local, posixpath.join(remote_dir, host.name, name), mode=0o644)
            return None
        except FleetError as exc:
            return str(exc)
        finally:
            await conn.close()

    errors = await asyncio.gather(*(one(h) for h in hosts))
    for host, err in zip(hosts, errors):
        print(f"{host.name} | {'ok' if err is None else 'FAILED: ' + err}")
    return 1 if any(errors) else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
