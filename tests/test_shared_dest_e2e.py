"""Two inventory hosts that write one folder (one machine under two names, or NFS homes), each
without SFTP, so every file goes over the exec-channel fallback, uploading to the same paths at
the same time (no mocks: two real sshd test hosts on loopback, one user, one destination).

Operator trial: ``fleetctl copy payload /tmp/x/shdst/ --hosts gpu-n,gpu-z`` failed now and then
with ``cannot open .../a.txt.part: No such file; ... the upload was cut off`` and ``what is at
that path afterwards is not the file sent (65536 bytes, 3000000 bytes sent)``: the fallback wrote
a fixed ``DEST.part``, which the two uploads truncated and renamed under each other. Each upload
now has its own part file, made exclusively, and checks what it wrote.
"""

from __future__ import annotations

import pytest

from tests.support.fleet import fleetctl, write_inventory

pytestmark = pytest.mark.sshd

FILES = 4
SIZE_BYTES = 3_000_000


def test_two_hosts_without_sftp_copy_to_one_folder_at_once(sshd_farm, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    hosts = {n: sshd_farm.start(n, sftp=False, home=home) for n in ("gpu-n", "gpu-z")}
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {n: h.inventory_vars(sshd_farm.known_hosts)
                                                        for n, h in hosts.items()}})
    src, dest = tmp_path / "payload", tmp_path / "shdst"
    src.mkdir()
    for attempt in range(3):  # new content each time: both hosts upload every file again
        body = {f"f{i}.txt": bytes([65 + attempt + i]) * SIZE_BYTES for i in range(FILES)}
        for name, data in body.items():
            (src / name).write_bytes(data)
        res = fleetctl("-i", str(inv), "copy", "--hosts", "g", str(src), f"{dest}/", home=tmp_path, timeout_s=180)
        assert res.returncode == 0, f"attempt {attempt}: " + res.stdout[-3000:] + res.stderr[-3000:]
        landed = dest / "payload"  # DEST/ ends in a slash: the folder goes inside it
        assert sorted(p.name for p in landed.iterdir()) == sorted(body), list(landed.iterdir())  # no part file
        for name, data in body.items():
            assert (landed / name).read_bytes() == data, (attempt, name)
    assert all("subsystem request for sftp" in h.log for h in hosts.values())  # both went over exec
