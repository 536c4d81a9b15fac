"""``-o OPTION=VALUE`` as ``ssh -o`` reads it (fleetctl/connection/ssh_options.py): names
case-insensitive, ``Option=value`` or ``Option value``, the first value winning, applied over what
ssh_config and the inventory resolved (a real ssh_config file read by asyncssh's reader)."""

from __future__ import annotations

import pytest

from fleetctl.connection.ssh_options import SSHOptionError, accepts_new_keys, apply_options, parse_options
from fleetctl.connection.ssh_target import resolve_target


def test_spellings_normalise_and_refusals_name_the_option():
    assert parse_options(["port=2222", "USER ops", "IdentityFile = \"/k/id one\"", "stricthostkeychecking=accept-new"]) \
        == ("Port=2222", "User=ops", "IdentityFile=/k/id one", "StrictHostKeyChecking=accept-new")
    assert accepts_new_keys(parse_options(["StrictHostKeyChecking accept-new"]))
    assert not accepts_new_keys(parse_options(["StrictHostKeyChecking=yes"]))
    for bad, why in (("StrictHostKeyChecking=no", "a changed key is always refused"),
                     ("StrictHostKeyChecking=off", "a changed key is always refused"),
                     ("SendEnv=LANG", "-o SendEnv: fleetctl does not honour this ssh option"),
                     ("ConnectTimeout=5", "-o ConnectTimeout=5: fleetctl sets this itself: use --connect-timeout"),
                     ("Port=0", "not a TCP port"), ("HashKnownHosts=maybe", "expected yes or no"),
                     ("=x", "expected OPTION=VALUE")):
        with pytest.raises(SSHOptionError, match=why):
            parse_options([bad])


def test_options_win_over_ssh_config_and_the_inventory_for_the_destination(tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("Host gpu01\n  HostName 10.0.0.1\n  Port 2200\n  User cfg\n  ProxyJump bastion\n"
                      "  IdentityFile /cfg/key\n")
    base = resolve_target("gpu01", port=2300, key_file=str(tmp_path / "inv_key"), config_file=str(config))
    assert (base.host, base.port, base.user, base.proxy_jump) == ("10.0.0.1", 2300, "cfg", ("bastion",))
    t = apply_options(base, parse_options(["Port=2222", "port=9", "User=ops", "IdentityFile=/o/key",
                                           "ProxyJump=none", "HostName=%h.example", "HashKnownHosts=yes"]))
    assert (t.host, t.port, t.user, t.proxy_jump) == ("gpu01.example", 2222, "ops", ())  # first value wins
    assert t.identity_files == ("/o/key", str(tmp_path / "inv_key"), "/cfg/key") and t.identities_named
    assert t.hash_known_hosts is True
    assert apply_options(base, ()) == base
