#!/usr/bin/env python3
"""Uploads with and without an SFTP subsystem (issue 24): a deploy's files over SFTP against the
exec fallback a hardened sshd (no ``Subsystem sftp``) gets.

    .venv/bin/python bench/sftp_fallback_bench.py [--repeats 5] [--files 27] [--kib 64] [--parallel 4]
        [--json-out bench/results/sftp_fallback_bench.json]

Run by hand, not by CI. Two real OpenSSH sshd test hosts on 127.0.0.1 (tests/support/sshd.py), one
with SFTP and one without; one :class:`fleetctl.connection.ssh.SSHConnection` each (login not
timed), then ``--files`` files of ``--kib`` KiB each put with ``--parallel`` at once (as the copy
action does), in alternating order each round; medians over the rounds. The first round on the
host without SFTP includes learning that it is refused (one refused subsystem request).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fleetctl.connection.ssh import SSHConnection  # noqa: E402
from tests.support.sshd import ensure_client_key, start_sshd  # noqa: E402


async def upload(host, known_hosts: Path, files: list[Path], parallel: int, dest: str) -> float:
    conn = SSHConnection(host.name, address="127.0.0.1", port=host.port, user=host.user,
                         key_file=str(host.client_key), known_hosts=str(known_hosts))
    async with conn:
        gate = asyncio.Semaphore(parallel)

        async def one(path: Path) -> None:
            async with gate:
                await conn.put(str(path), f"{dest}/{path.name}")

        t0 = time.perf_counter()
        await asyncio.gather(*(one(p) for p in files))
        return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--files", type=int, default=27)
    ap.add_argument("--kib", type=int, default=64)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="fleetctl-sftp-bench-"))
    os.chmod(root, 0o755)
    key = ensure_client_key(root / "keys")
    with_sftp = start_sshd("with-sftp", root / "with", key)
    without = start_sshd("without-sftp", root / "without", key, sftp=False)
    known = root / "known_hosts"
    known.write_text(with_sftp.known_hosts_line + "\n" + without.known_hosts_line + "\n")
    src = root / "src"
    src.mkdir()
    files = []
    for i in range(args.files):
        path = src / f"f{i:02d}.bin"
        path.write_bytes(os.urandom(args.kib * 1024))
        files.append(path)
    times: dict[str, list[float]] = {"sftp": [], "exec (no SFTP subsystem)": []}
    try:
        for r in range(args.repeats):
            order = [("sftp", with_sftp), ("exec (no SFTP subsystem)", without)]
            for name, host in order if r % 2 == 0 else reversed(order):
                dest = str(host.home / f"round{r}")
                times[name].append(asyncio.run(upload(host, known, files, args.parallel, dest)))
    finally:
        with_sftp.stop()
        without.stop()
        shutil.rmtree(root, ignore_errors=True)
    result = {"files": args.files, "kib": args.kib, "parallel": args.parallel, "repeats": args.repeats,
              "median_s": {k: round(statistics.median(v), 3) for k, v in times.items()},
              "all_s": {k: [round(x, 3) for x in v] for k, v in times.items()}}
    print(json.dumps(result, indent=2))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
