"""A host's inventory name made one path part wherever fleetctl puts it in a path (new-user trial:
a host named ``..`` made ``fetch`` write ``DEST/../etc/hostname`` and ``copy '/tmp/Y/sub/{host}/'``
write ``/tmp/Y/hello.yaml``, both reported ok), against a real sshd host."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fleetctl.util.paths import host_folder, safe_name
from tests.support.fleet import fleetctl, write_inventory


def test_a_host_name_is_always_one_path_part() -> None:
    for name in (".", "..", "a/../../b", "", "../x", "a/b"):
        for part in (safe_name(name), host_folder(name)):
            assert part and "/" not in part and part not in (".", ".."), (name, part)
    assert (safe_name(".."), safe_name("."), safe_name("..."), safe_name("a/../../b")) == (
        "%2E%2E", "%2E", "...", "a%2F..%2F..%2Fb")
    assert (host_folder("gpu01"), host_folder("node:7"), host_folder("..")) == ("gpu01", "node:7", "%2E%2E")


@pytest.mark.sshd
def test_a_host_named_dot_dot_never_leads_fetch_or_copy_outside_dest(sshd_farm, tmp_path: Path) -> None:
    h = sshd_farm.start("dots")
    inv = write_inventory(tmp_path / "weird.yaml", {"g": {"..": h.inventory_vars(sshd_farm.known_hosts),
                                                          "a/../../b": h.inventory_vars(sshd_farm.known_hosts)}})
    x = tmp_path / "X"
    (x / "etc").mkdir(parents=True)
    res = fleetctl("-i", str(inv), "fetch", "/etc/hostname", str(x / "out"), "--hosts", "..", home=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert not (x / "etc" / "hostname").exists()
    assert (x / "out" / "%2E%2E" / "etc" / "hostname").read_bytes() == Path("/etc/hostname").read_bytes()
    assert [p.name for p in (x / "out").iterdir()] == ["%2E%2E"]

    src = tmp_path / "hello.yaml"
    src.write_text("hello: 1\n")
    y = h.root.parent / "Y"  # where the login user (maybe a dedicated test user) may write
    y.mkdir(mode=0o777)
    y.chmod(0o777)
    try:
        res = fleetctl("-i", str(inv), "copy", str(src), f"{y}/sub/{{host}}/", "--hosts", "g",
                       home=tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        assert not (y / "hello.yaml").exists() and not (y / "sub" / "hello.yaml").exists()
        assert (y / "sub" / "%2E%2E" / "hello.yaml").read_text() == "hello: 1\n"
        assert (y / "sub" / "a%2F..%2F..%2Fb" / "hello.yaml").read_text() == "hello: 1\n"
    finally:
        shutil.rmtree(y, ignore_errors=True)
