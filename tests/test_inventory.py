"""Inventory loading: Ansible's YAML format, precedence, implicit groups, ranges, typed settings,
validation.

Pure data tests: inventories under tests/data/inventories/ and files written to tmp_path. The
behaviour is checked against ansible-core itself in tests/test_inventory_ansible.py; other sources
(INI, folders, group_vars/, scripts) through the CLI in tests/test_inventory_cli.py.
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetctl.errors import InputError, InventoryError, PlaybookError
from fleetctl.connection.registry import HostRef
from fleetctl.inventory import Host, HostSettings, PatternError, load_inventory
from fleetctl.util.yamlload import LineDict, LineList, join_key, load_yaml, load_yaml_text, locate, where

DATA = Path(__file__).parent / "data" / "inventories"
ERRORS = DATA / "errors"


@pytest.fixture(autouse=True, scope="module")
def _no_ansible_delegation():
    """These tests read what fleetctl reads itself; handing sources to ansible-inventory is tested
    in tests/test_inventory_cli.py."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FLEETCTL_ANSIBLE_INVENTORY", "")
        yield


def write(tmp_path: Path, text: str, name: str = "inventory.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def names(hosts) -> list[str]:
    return [h.name for h in hosts]


# -- the example fleet: precedence, implicit groups, settings -----------------------------------


@pytest.fixture(scope="module")
def fleet():
    return load_inventory(DATA / "fleet.yaml")


def test_hosts_in_inventory_order_with_ranges_expanded(fleet):
    assert list(fleet.hosts) == ["bastion", "gpu01", "gpu02", "gpu03", "gpu04", "gpu05", "localhost"]


def test_precedence_all_parent_child_host(fleet):
    h = fleet.hosts
    assert h["bastion"].vars["color"] == "all"  # only all
    assert h["gpu01"].vars["color"] == "gpu-nodes"  # parent overrides all
    assert h["gpu03"].vars["color"] == "h200"  # child overrides parent
    assert h["gpu05"].vars["color"] == "host"  # host overrides every group
    assert h["gpu03"].cuda_home == "/usr/local/cuda-13.0"
    assert h["gpu01"].cuda_home is None


def test_sibling_groups_later_in_ascii_order_win_and_conflict_is_recorded(fleet):
    gpu02 = fleet.hosts["gpu02"]
    assert gpu02.vars["zone"] == "b"  # rack-a and rack-b are both depth 1: 'rack-b' sorts last
    assert gpu02.sources["zone"].group == "rack-b"
    [conflict] = [c for c in fleet.conflicts if c.host == "gpu02"]
    assert conflict.var == "zone"
    assert conflict.winner.value == "b" and [o.value for o in conflict.others] == ["a"]
    assert conflict.reason == "groups of the same depth merge in ASCII order of their names; the last one wins"
    assert str(conflict) == (
        f"{DATA / 'fleet.yaml'}:39: all.children.rack-b.vars.zone: host 'gpu02' is in groups 'rack-a' and "
        "'rack-b', neither inside the other, that set zone differently: zone = 'a' (line 33) and zone = 'b' "
        "(line 39); only Ansible's merge order would pick the group last in ASCII order; set zone in the "
        "host's own vars or give one group a higher ansible_group_priority"
    )
    # Parent/child overrides are structure, not conflicts; so is a host var overriding a group.
    assert {c.host for c in fleet.conflicts} == {"gpu02"}


def test_groups_of_a_host_in_merge_order(fleet):
    assert fleet.hosts["gpu03"].groups == ("all", "gpu-nodes", "h200")
    assert fleet.hosts["gpu02"].groups == ("all", "gpu-nodes", "rack-a", "rack-b")
    assert fleet.hosts["bastion"].groups == ("all", "ungrouped")


def test_implicit_groups(fleet):
    g = fleet.groups
    assert g["all"].hosts == tuple(fleet.hosts)
    assert g["ungrouped"].hosts == ("bastion",)
    assert g["ungrouped"].parents == ("all",)
    assert set(g["all"].children) == {"gpu-nodes", "rack-a", "rack-b", "local", "ungrouped"}
    assert g["gpu-nodes"].hosts == ("gpu01", "gpu02", "gpu03", "gpu04", "gpu05")
    assert g["gpu-nodes"].children == ("h200",)
    assert g["h200"].parents == ("gpu-nodes",)
    assert (g["all"].depth, g["gpu-nodes"].depth, g["h200"].depth) == (0, 1, 2)
    assert g["gpu-nodes"].line == 11


def test_connection_settings_are_typed_from_ansible_names(fleet):
    gpu05 = fleet.hosts["gpu05"]
    assert (gpu05.address, gpu05.port, gpu05.user) == ("10.0.0.5", 2222, "root")
    gpu01 = fleet.hosts["gpu01"]
    assert (gpu01.address, gpu01.port, gpu01.user) == ("gpu01", None, "ubuntu")
    assert gpu01.venv == "/opt/venv" and gpu01.workdir == "/srv/fleet"
    assert gpu01.connection == "ssh"
    assert gpu01.key_file == str(DATA / "keys" / "id_test")  # relative to the inventory's folder
    assert fleet.hosts["bastion"].key_file is None  # not said: ~/.ssh/config decides
    local = fleet.hosts["localhost"]
    assert local.connection == "local" and local.connection_settings is not None
    assert local.known_hosts == os.path.expanduser("~/.ssh/known_hosts")


def test_typed_models_and_host_ref(fleet):
    gpu05 = fleet.hosts["gpu05"]
    assert isinstance(gpu05.settings, HostSettings) and gpu05.settings.keepalive_interval_s == 15.0
    ref = gpu05.ref
    assert isinstance(ref, HostRef) and ref.name == "gpu05" and ref.settings is gpu05.connection_settings
    assert (ref.settings.address, ref.settings.port, ref.settings.user) == ("10.0.0.5", 2222, "root")
    assert fleet.hosts["gpu01"].connection_settings.private_key_file == str(DATA / "keys" / "id_test")


def test_host_var_replaces_group_var(fleet):
    # all says `ansible_user: ubuntu`, gpu05 says `ansible_user: root`: the host's wins.
    gpu05 = fleet.hosts["gpu05"]
    assert gpu05.vars["ansible_user"] == "root"
    assert gpu05.sources["ansible_user"].line == 21


def test_vars_are_read_only(fleet):
    with pytest.raises(TypeError):
        fleet.hosts["gpu01"].vars["color"] = "x"  # type: ignore[index]


def test_snapshot_is_json_ready(fleet):
    import json

    snap = json.loads(json.dumps(fleet.snapshot()))
    assert snap["hosts"]["gpu03"]["groups"] == ["all", "gpu-nodes", "h200"]
    assert snap["groups"]["h200"]["hosts"] == ["gpu03", "gpu04"]


def test_host_built_by_hand_resolves_settings():
    h = Host("n1", {"ansible_port": "2200", "key_file": "/k", "connection": "local", "user": "x"}, ("all",))
    # plain key_file, connection and user are ordinary variables, as in Ansible
    assert (h.address, h.port, h.key_file, h.connection, h.user) == ("n1", 2200, None, "ssh", None)
    assert hash(h) == hash(Host("n1"))
    local = Host("box", {"ansible_connection": "local", "venv": "/v", "max_jobs": "4"})
    assert local.connection == "local" and local.port is None and local.settings.max_jobs == 4
    assert local.ref.name == "box"


# -- other shapes Ansible accepts ---------------------------------------------------------------


def test_top_level_groups_without_all():
    inv = load_inventory(DATA / "toplevel.yaml")
    assert list(inv.hosts) == ["web1", "web2", "dba", "dbb", "dbc"]
    assert inv.groups["db"].parents == ("all",)
    assert inv.groups["web"].parents == ("db",)  # 'web' is under 'db', so not directly under 'all'
    assert inv.groups["web"].depth == 2
    assert inv.groups["db"].hosts == ("dba", "dbb", "dbc", "web1", "web2")  # own hosts first, then children's
    assert inv.hosts["web1"].port == 5022  # inherited from parent group db
    assert inv.groups["empty"].hosts == () and inv.groups["empty"].parents == ("all",)
    assert inv.groups["ungrouped"].hosts == ()


def test_group_priority_reorders_groups_of_one_depth():
    inv = load_inventory(DATA / "priority.yaml")
    assert inv.hosts["n1"].vars["role"] == "aaa"  # priority 10 beats ASCII order
    assert inv.hosts["n1"].groups == ("all", "zzz", "aaa")
    assert inv.groups["aaa"].priority == 10 and "ansible_group_priority" not in inv.groups["aaa"].vars
    [c] = inv.conflicts
    assert c.reason == "the group with the higher ansible_group_priority wins"


def test_ranges_in_host_keys():
    inv = load_inventory(DATA / "ranges.yaml")
    hosts = list(inv.hosts)
    assert hosts[:16] == [f"node{i:02d}" for i in range(1, 17)]
    assert hosts[16:22] == ["nodea", "nodeb", "nodec", "noded", "nodee", "nodef"]
    assert inv.hosts["noded"].user == "alpha"
    assert hosts[22:28] == ["even0", "even2", "even4", "even6", "even8", "even10"]
    assert hosts[28:32] == ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]
    assert inv.hosts["fe80::1"].port == 2200  # "[ipv6]:port", as Ansible's parse_address
    assert inv.hosts["ssh-alt"].port == 2222  # "name:port"


def test_host_listed_in_two_groups_merges_vars_later_wins(tmp_path):
    path = write(
        tmp_path,
        "all:\n"
        "  children:\n"
        "    a:\n"
        "      hosts:\n"
        "        n1: {x: 1, keep: yes, opts: {a: 1}}\n"
        "    b:\n"
        "      hosts:\n"
        "        n1: {x: 2, opts: {b: 2}}\n",
    )
    inv = load_inventory(path)
    n1 = inv.hosts["n1"]
    assert n1.vars["x"] == 2 and n1.vars["keep"] is True
    assert n1.vars["opts"] == {"b": 2}  # a mapping set twice is replaced (hash_behaviour=replace)
    assert n1.groups == ("all", "a", "b")
    x = [c for c in inv.conflicts if c.var == "x"]
    assert len(x) == 1 and x[0].host == "n1" and x[0].others[0].line == 5 and x[0].winner.line == 8


def test_group_declared_twice_adds_up(tmp_path):
    path = write(
        tmp_path,
        "all:\n"
        "  children:\n"
        "    gpu:\n"
        "      hosts: {n1: }\n"
        "    rack:\n"
        "      children:\n"
        "        gpu:\n"
        "          hosts: {n2: }\n"
        "          vars: {v: 1}\n",
    )
    inv = load_inventory(path)
    assert inv.groups["gpu"].hosts == ("n1", "n2")
    assert inv.groups["gpu"].parents == ("all", "rack")
    assert inv.groups["gpu"].depth == 2  # longest path from all
    assert inv.hosts["n1"].vars["v"] == 1


def test_string_sections_are_one_name_as_the_yaml_plugin_converts(tmp_path):
    inv = load_inventory(write(tmp_path, "all:\n  children:\n    gpu:\n      hosts: n1\n"))
    assert inv.groups["gpu"].hosts == ("n1",)


def test_null_setting_means_not_said_and_overrides_group(tmp_path):
    path = write(tmp_path, "all:\n  vars: {ansible_user: ubuntu}\n  hosts:\n    n1: {ansible_user: null}\n    n2:\n")
    inv = load_inventory(path)
    assert inv.hosts["n1"].user is None and inv.hosts["n2"].user == "ubuntu"


def test_plain_names_are_ordinary_variables(tmp_path):
    # An application's `port: 8080` must not become the SSH port (Ansible: ordinary variables).
    path = write(tmp_path, "all:\n  hosts:\n    n1: {port: 8080, user: app, host: db, connection: local, "
                           "key_file: /nope}\n")
    n1 = load_inventory(path).hosts["n1"]
    assert (n1.port, n1.user, n1.address, n1.connection, n1.key_file) == (None, None, "n1", "ssh", None)
    assert n1.vars["port"] == 8080 and n1.vars["user"] == "app"


def test_port_as_a_string_works(tmp_path):
    inv = load_inventory(write(tmp_path, "all:\n  hosts:\n    n1: {ansible_port: '2222'}\n"))
    assert inv.hosts["n1"].port == 2222 and inv.hosts["n1"].vars["ansible_port"] == "2222"


def test_legacy_ssh_names_win_wherever_set_and_differences_are_refused(tmp_path):
    # ansible-core: MAGIC_VARIABLE_MAPPING['remote_user'] = ('ansible_ssh_user', 'ansible_user')
    path = write(tmp_path, "all:\n  vars: {ansible_ssh_user: legacy}\n  hosts:\n    n1: {ansible_user: modern}\n"
                           "    n2: {ansible_user: legacy}\n")
    inv = load_inventory(path)
    assert inv.hosts["n1"].user == "legacy" and inv.hosts["n2"].user == "legacy"
    [c] = [c for c in inv.conflicts if c.decided_by == "alias"]
    assert c.host == "n1" and c.winner.name == "ansible_ssh_user"
    with pytest.raises(InventoryError) as info:
        inv.check_hosts(inv.select("n1"))
    assert str(info.value) == (
        f"{path}:2: all.vars.ansible_ssh_user: host 'n1' has ansible_user = 'modern' (line 4) and "
        "ansible_ssh_user = 'legacy' (line 2): Ansible uses ansible_ssh_user wherever it is set (the legacy "
        "name wins); keep one")
    inv.check_hosts(inv.select("n2"))  # same value under both names: nothing to decide


def test_unknown_connection_fails_only_the_hosts_that_use_it(tmp_path):
    path = write(tmp_path, "all:\n  hosts:\n    win1: {ansible_connection: winrm, ansible_winrm_transport: ntlm}\n"
                           "    box: {ansible_connection: local}\n")
    inv = load_inventory(path)
    inv.check_hosts(inv.select("box"))
    assert inv.hosts["win1"].connection == "winrm" and inv.hosts["win1"].connection_settings is None
    with pytest.raises(InventoryError) as info:
        inv.check_hosts(inv.select("win1"))
    assert str(info.value) == (
        f"{path}:3: all.hosts.win1.ansible_connection: connection 'winrm' is not one fleetctl has (local, slurm, ssh)")
    with pytest.raises(InventoryError):
        inv.hosts["win1"].ref


def test_smart_connection_is_ssh(tmp_path):
    inv = load_inventory(write(tmp_path, "all:\n  hosts:\n    n1: {ansible_connection: smart, ansible_port: 22}\n"))
    assert inv.hosts["n1"].connection == "ssh" and inv.hosts["n1"].port == 22


def test_yaml_merge_keys_may_be_overridden(tmp_path):
    path = write(
        tmp_path,
        "all:\n"
        "  vars:\n"
        "    defaults: &d {ansible_port: 22, ansible_user: a}\n"
        "  hosts:\n"
        "    n1:\n"
        "      <<: *d\n"
        "      ansible_port: 2222\n",
    )
    n1 = load_inventory(path).hosts["n1"]
    assert (n1.port, n1.user) == (2222, "a")


def test_name_both_host_and_group_is_refused(tmp_path):
    with pytest.raises(InventoryError, match=r"inventory.yaml:5: web: 'web' is both a host and a group; "):
        load_inventory(write(tmp_path, "all:\n  children:\n    web:\n      hosts:\n        web:\n"))


def test_unsafe_tag_is_a_plain_string(tmp_path):
    inv = load_inventory(write(tmp_path, "all:\n  hosts:\n    n1: {motd: !unsafe '{{ not templated }}'}\n"))
    assert inv.hosts["n1"].vars["motd"] == "{{ not templated }}"


# -- validation: each error is one exact line ---------------------------------------------------


def load_all(source):
    """:func:`load_inventory`, then what a command that selects every host refuses of their own vars
    (a host's bad var refuses only the commands that select it: :meth:`Inventory.check_refused`)."""
    inv = load_inventory(source)
    inv.check_refused(inv)
    return inv


def _expected_errors() -> list[tuple[str, str]]:
    rows = []
    for line in (ERRORS / "expected.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, message = line.partition("\t")
            rows.append((name, message))
    return rows


def test_every_error_file_has_an_expectation():
    listed = {name for name, _ in _expected_errors()}
    assert listed == {p.name for p in [*ERRORS.glob("*.yaml"), *ERRORS.glob("*.ini")]}


@pytest.mark.parametrize(("name", "expected"), _expected_errors(), ids=[n for n, _ in _expected_errors()])
def test_validation_error_message(name, expected):
    path = ERRORS / name
    with pytest.raises(InventoryError) as info:
        load_all(path)
    message = str(info.value)
    assert message == f"{path}:" + expected.replace("{dir}", str(ERRORS))
    assert "\n" not in message
    assert info.value.file == str(path) and info.value.line == int(expected.split(":")[0])


def test_error_names_the_file_as_the_user_typed_it(tmp_path, monkeypatch):
    write(tmp_path, "all:\n  hosts:\n    n1: {ansible_port: 0}\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InventoryError) as info:
        load_all("inventory.yaml")
    assert str(info.value) == (
        "inventory.yaml:3: all.hosts.n1.ansible_port: must be an integer from 1 to 65535, not 0 (a number)"
    )


def test_key_file_tilde_and_relative(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_fleet").write_text("")
    monkeypatch.setenv("HOME", str(home))
    (tmp_path / "inv").mkdir()
    (tmp_path / "inv" / "k").write_text("")
    path = write(
        tmp_path / "inv",
        "all:\n  hosts:\n    a: {ansible_private_key_file: ~/.ssh/id_fleet}\n    b: {ansible_ssh_private_key_file: k}\n"
        "    c: {known_hosts: kh}\n",
    )
    inv = load_inventory(path)
    assert inv.hosts["a"].key_file == str(home / ".ssh" / "id_fleet")
    assert inv.hosts["b"].key_file == str(tmp_path / "inv" / "k")
    assert inv.hosts["c"].known_hosts == str(tmp_path / "inv" / "kh")  # need not exist yet


def test_a_selected_hosts_missing_key_file_is_refused_naming_file_line_host_key_and_path(tmp_path, monkeypatch):
    # New-user trial: a key path that is not on this controller was reported "unreachable" (exit 1);
    # it is bad input, refused before anything connects. Loading and hosts not selected are unaffected.
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_fleet").write_text("")
    monkeypatch.setenv("HOME", str(home))
    (tmp_path / "keys").mkdir()
    path = write(tmp_path, "all:\n  hosts:\n    a: {ansible_ssh_private_key_file: keys/gone}\n"
                           "    b: {ansible_ssh_private_key_file: keys}\n    c:\n"
                           "    d: {ansible_private_key_file: ~/.ssh/id_fleet}\n"
                           "    e: {ansible_private_key_file: ~/.ssh/id_gone}\n"
                           "    f: {ansible_connection: local, ansible_ssh_private_key_file: keys/gone}\n")
    inv = load_inventory(path)
    assert inv.hosts["a"].key_file == str(tmp_path / "keys" / "gone")
    inv.check_hosts([inv.hosts["c"], inv.hosts["d"], inv.hosts["f"]])  # ~ expanded; local: no key used
    with pytest.raises(InventoryError) as info:
        inv.check_hosts(inv.select("all"))
    assert str(info.value) == (f"{path}:3: all.hosts.a.ansible_ssh_private_key_file: host 'a': private key file "
                               f"'keys/gone' ({tmp_path / 'keys' / 'gone'}) does not exist on this controller")
    with pytest.raises(InventoryError, match=r":4: all\.hosts\.b\.ansible_ssh_private_key_file: host 'b': private "
                                             r"key file 'keys' \(.*/keys\) is a folder, not a key file$"):
        inv.check_hosts([inv.hosts["b"]])
    with pytest.raises(InventoryError) as info:
        inv.check_hosts([inv.hosts["e"]])
    assert str(info.value).endswith(f":7: all.hosts.e.ansible_private_key_file: host 'e': private key file "
                                    f"'~/.ssh/id_gone' ({home / '.ssh' / 'id_gone'}) does not exist on this controller")


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(InventoryError, match=r"nope.yaml: inventory file not found \(the inventory sources given\)$"):
        load_inventory(tmp_path / "nope.yaml")
    with pytest.raises(InventoryError, match=r": the folder holds no inventory file$"):
        load_inventory(tmp_path)


def test_not_utf8(tmp_path):
    path = tmp_path / "inventory.yaml"
    path.write_bytes(b"all:\n  hosts:\n    n\xff1:\n")
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert str(info.value) == f"{path}:3: not valid UTF-8 text"


def test_tab_after_key_is_reported_on_its_line(tmp_path):
    path = write(tmp_path, "all:\n  hosts:\n    n1:\n      port:\t22\n")
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert str(info.value) == (
        f"{path}:4: YAML syntax error: tab character; YAML allows only spaces for indentation and "
        "separation (column 12)"
    )


# -- yamlload, reused by playbooks --------------------------------------------------------------


def test_load_yaml_positions(tmp_path):
    path = write(tmp_path, "a:\n  b: 1\n  c:\n    - x\n    - {d: 2}\n", "doc.yaml")
    data = load_yaml(path)
    assert isinstance(data, LineDict) and isinstance(data["a"]["c"], LineList)
    assert data == {"a": {"b": 1, "c": ["x", {"d": 2}]}}
    assert where(data, "a") == 1 and where(data["a"], "c") == 3
    assert where(data["a"]["c"], 1) == 5 and where(data["a"]["c"], -1) == 5
    assert where(data["a"]["c"], 9) is None and where({"plain": 1}, "plain") is None
    assert locate(data, ["a", "c", 1, "d"]) == 5
    assert locate(data, ["a", "missing", "deeper"]) == 1  # the deepest element that exists
    assert join_key(["tasks", 0, "name"]) == "tasks[0].name"


def test_load_yaml_error_class_parameter():
    with pytest.raises(PlaybookError) as info:
        load_yaml_text("tasks:\n  - name: a\n    name: b\n", "play.yaml", error_cls=PlaybookError)
    assert str(info.value) == "play.yaml:3: tasks[0].name: duplicate key 'name' in one mapping (first on line 2)"
    with pytest.raises(InputError) as info2:
        load_yaml_text("a: [1,\n", "x.yaml")
    assert type(info2.value) is InputError


def test_duplicate_key_identity_is_the_constructed_key():
    with pytest.raises(InputError, match=r"x.yaml:2: 0x1: duplicate key '0x1' in one mapping \(first on line 1\)"):
        load_yaml_text("1: a\n0x1: b\n", "x.yaml")
    assert load_yaml_text("1: a\n'1': b\n", "x.yaml") == {1: "a", "1": "b"}


def test_more_than_one_document():
    with pytest.raises(InputError) as info:
        load_yaml_text("a: 1\n---\nb: 2\n", "x.yaml")
    assert str(info.value) == (
        "x.yaml:2: YAML syntax error: expected a single document in the stream, but found another document (column 1)"
    )


# -- property: any mutation of a valid file loads or fails with one InventoryError line ----------

_VALID_TEXT = (DATA / "fleet.yaml").read_text()
_SCALARS = [
    "", "null", "~", "[]", "{}", "- x", "'x", '"', "1", "0", "-3", "70000", "true", "a:b", "node[1:0]",
    "node[", "n[01:2]", "n[0:99999999]", "*", "&x", "!x", "!vault x", "{{ x }}", "&a", "*a", "<<: *a",
    "[a, b]", "{a: 1}", "|", ">", "ansible_port", "hosts", "vars", "children", "all", "ungrouped", "#",
    "\t", ": :", "? x", "2001-01-01", "1.5", "0x10", "keys/id_test", "/nonexistent", "ssh", "local",
]


@st.composite
def mutated_inventory(draw) -> str:
    lines = _VALID_TEXT.splitlines()
    for _ in range(draw(st.integers(1, 4))):
        if not lines:
            lines = [""]
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["delete", "dup", "indent", "dedent", "tab", "scalar", "insert", "swap"]))
        line = lines[i]
        if op == "delete":
            del lines[i]
        elif op == "dup":
            lines.insert(i, line)
        elif op == "indent":
            lines[i] = " " * draw(st.integers(1, 4)) + line
        elif op == "dedent":
            lines[i] = line[draw(st.integers(1, 4)) :]
        elif op == "tab":
            lines[i] = "\t" + line.lstrip(" ")
        elif op == "scalar":
            # replace the key or the value part of the line
            key, sep, value = line.partition(":")
            new = draw(st.sampled_from(_SCALARS))
            if sep and draw(st.booleans()):
                lines[i] = f"{key}: {new}"
            else:
                indent = len(line) - len(line.lstrip(" "))
                lines[i] = " " * indent + new + (sep + value if sep else "")
        elif op == "insert":
            indent = " " * draw(st.integers(0, 8))
            lines.insert(i, indent + draw(st.sampled_from(_SCALARS)) + draw(st.sampled_from(["", ":", ": 1"])))
        else:
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines) + "\n"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_inventory())
def test_mutations_load_or_raise_one_inventory_error(text):
    with tempfile.TemporaryDirectory() as tmp:
        keys = Path(tmp) / "keys"
        keys.mkdir()
        (keys / "id_test").write_text("")
        path = Path(tmp) / "inventory.yaml"
        path.write_text(text)
        try:
            inv = load_inventory(path)
        except InventoryError as exc:
            message = str(exc)
            assert "\n" not in message and message.startswith(str(path))
            return
        # What loads is usable: every setting resolves, every pattern error is an InventoryError.
        for host in inv:
            (host.address, host.port, host.user, host.key_file, host.connection)
            (host.venv, host.cuda_home, host.workdir, host.known_hosts)
            assert host.groups[0] == "all"
            assert host.port is None or 1 <= host.port <= 65535
        inv.snapshot()
        try:
            inv.select("all")
        except PatternError as exc:
            assert "selects no hosts" in str(exc)


def test_mutation_strategy_reaches_both_outcomes():
    """Guard against a strategy that only ever produces errors (or never does)."""
    rng = random.Random(7)
    outcomes = set()
    lines = _VALID_TEXT.splitlines()
    for _ in range(60):
        mutated = list(lines)
        del mutated[rng.randrange(len(mutated))]
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "keys").mkdir()
            (Path(tmp) / "keys" / "id_test").write_text("")
            path = Path(tmp) / "inventory.yaml"
            path.write_text("\n".join(mutated) + "\n")
            try:
                load_inventory(path)
                outcomes.add("ok")
            except InventoryError:
                outcomes.add("error")
    assert outcomes == {"ok", "error"}


def test_fleet_yaml_is_plain_yaml_too():
    """The example inventory is valid for any YAML reader (no fleetctl-only syntax)."""
    assert yaml.safe_load(_VALID_TEXT)["all"]["children"]["gpu-nodes"]["hosts"]["gpu05"]["ansible_port"] == 2222


# -- the registry of fleetctl's own vars ----------------------------------------------------------


@pytest.mark.parametrize(("typo", "meant"), [
    ("ssh_confg", "ssh_config"), ("venv_version_dir", "venv_versions_dir"), ("slurm_partiton", "slurm_partition"),
    ("venv_kep", "venv_keep"), ("verify_devise", "verify_device"), ("Deploy_Lock", "deploy_lock"),
    # a unit suffix dropped, a letter of a short name doubled (found by a new user's trial)
    ("gpu_probe_timeout", "gpu_probe_timeout_s"), ("keepalive", "keepalive_interval"), ("venvv", "venv"),
    # one typo in a 4-letter name (new-user trial: ventv was kept as a var of one's own)
    ("ventv", "venv"), ("vnev", "venv"), ("vevn", "venv"),
])
def test_misspelt_own_var_is_refused_whatever_kind_the_hosts_use(tmp_path, typo, meant):
    """A local-only inventory still refuses a typo of an ssh, slurm or template var."""
    path = write(tmp_path, f"all:\n  hosts:\n    box:\n      ansible_connection: local\n      {typo}: x\n")
    with pytest.raises(InventoryError) as info:
        load_all(path)
    assert str(info.value) == (f"{path}:5: all.hosts.box.{typo}: unknown variable {typo!r} looks like fleetctl's "
                               f"{meant!r}; did you mean {meant!r}?")


@pytest.mark.parametrize(("typo", "meant"), [
    ("ansbile_user", "ansible_user"), ("Ansible_host", "ansible_host"), ("ansibel_port", "ansible_port"),
    ("ansble_ssh_private_key_file", "ansible_ssh_private_key_file"), ("ansilbe_usr", "ansible_user"),
    ("ansible-connection", "ansible_connection"),
])
def test_a_misspelt_ansible_prefix_gets_the_same_did_you_mean(tmp_path, typo, meant):
    """``ansbile_user`` (new-user trial) is refused as ``ansible_usr`` is: Ansible would take it
    for a var of one's own and connect as someone else."""
    path = write(tmp_path, f"all:\n  hosts:\n    box:\n      ansible_connection: local\n      {typo}: x\n")
    with pytest.raises(InventoryError) as info:
        load_all(path)
    assert str(info.value) == (f"{path}:5: all.hosts.box.{typo}: unknown variable {typo!r} looks like Ansible's "
                               f"{meant!r}; did you mean {meant!r}?")


@pytest.mark.parametrize("own", ["ansibility_score", "ansi_colors", "assemble_dir", "env", "deploy", "timeout", "cuda", "keep", "workdirs_root", "slurm", "arch", "users", "venvs"])
def test_vars_of_ones_own_that_merely_resemble_fleetctls_are_kept(tmp_path, own):
    """Near-miss rules stay narrow: a user's ``env`` or ``deploy`` is not fleetctl's ``venv`` or
    ``deploy_lock``."""
    path = write(tmp_path, f"all:\n  hosts:\n    box:\n      ansible_connection: local\n      {own}: x\n")
    assert load_inventory(path).hosts["box"].vars[own] == "x"


def test_every_var_fleetctl_reads_is_in_the_registry():
    """HostSettings, every connection kind's own (non-Ansible) vars, and every var the templates
    fleetctl ships read with a default: all in OWN_VARS, and nothing else is."""
    import re

    from fleetctl.connection.registry import KINDS, load_kind
    from fleetctl.inventory.own_vars import OWN_VARS
    from fleetctl.inventory.settings import aliases_of

    read = set(aliases_of(HostSettings))
    for kind in KINDS:
        read |= {v for v in aliases_of(load_kind(kind).settings_model) if not v.startswith("ansible_")}
    repo = Path(__file__).resolve().parents[1]
    template_var = re.compile(r"\{\{\s*([A-Za-z_]\w*)\s*\|\s*default\(")
    files = [*repo.joinpath("playbooks").rglob("*.y*ml"), *repo.joinpath("fleetctl").rglob("*.py")]
    templated = {m.group(1) for f in files for m in template_var.finditer(f.read_text())}
    assert {"venv_versions_dir", "venv_keep", "verify_device"} <= templated
    read |= templated
    assert read - set(OWN_VARS) == set(), "vars fleetctl reads but the registry lacks"
    assert set(OWN_VARS) - read == set(), "registry entries nothing reads"


# -- Ansible's connection and privilege vars: honoured, refused or ignored -----------------------


def test_unhonoured_connection_var_is_refused_for_selected_hosts_only(tmp_path):
    path = write(tmp_path, "all:\n  hosts:\n"
                           "    s1: {ansible_host: 10.0.0.1, ansible_ssh_extra_args: '-o ProxyJump=bastion'}\n"
                           "    s2: {ansible_host: 10.0.0.2}\n")
    inv = load_inventory(path)
    inv.check_hosts(inv.select("s2"))  # an inventory may hold hosts fleetctl is not asked about
    with pytest.raises(InventoryError) as info:
        inv.check_hosts(inv.select("all"))
    assert str(info.value).startswith(
        f"{path}:3: all.hosts.s1.ansible_ssh_extra_args: host 's1' sets ansible_ssh_extra_args = "
        "'-o ProxyJump=bastion', which fleetctl does not honour: ")
    assert "~/.ssh/config" in str(info.value) and "ssh_config" in str(info.value)


@pytest.mark.parametrize("var", ["ansible_password", "ansible_ssh_pass", "ansible_become_pass"])
def test_passwords_are_refused_or_ignored_without_being_shown(tmp_path, var):
    path = write(tmp_path, f"all:\n  hosts:\n    s1: {{{var}: hunter2}}\n")
    inv = load_inventory(path)
    if var == "ansible_become_pass":  # without ansible_become, Ansible does not use it either
        inv.check_hosts(inv.select("s1"))
        return
    with pytest.raises(InventoryError) as info:
        inv.check_hosts(inv.select("s1"))
    assert "hunter2" not in str(info.value) and "keys only" in str(info.value)


@pytest.mark.parametrize(("value", "refused"), [(True, True), ("yes", True), ("True", True), (1, True),
                                                 (False, False), ("no", False), ("false", False)])
def test_become_is_refused_when_on(tmp_path, value, refused):
    path = write(tmp_path, f"all:\n  vars:\n    ansible_become_user: svc\n  hosts:\n"
                           f"    s1: {{ansible_become: {value!r}}}\n".replace("'", '"'))
    inv = load_inventory(path)
    if not refused:
        inv.check_hosts(inv.select("s1"))
        return
    with pytest.raises(InventoryError, match=r"^.*:5: all\.hosts\.s1\.ansible_become: host 's1' sets "
                                             r"ansible_become \(to run as 'svc'\), which fleetctl does not honour"):
        inv.check_hosts(inv.select("s1"))


def test_harmless_ansible_vars_and_ssh_options_of_other_kinds_pass(tmp_path):
    """Common vars of real inventories do not break them; ssh options mean nothing to a local host
    (nor to Ansible's local connection)."""
    path = write(tmp_path, "all:\n  vars:\n    ansible_python_interpreter: /usr/bin/python3\n"
                           "    ansible_ssh_pipelining: true\n    ansible_shell_type: sh\n"
                           "    ansible_host_key_checking: false\n    ansible_ssh_common_args: ''\n"
                           "  hosts:\n    s1: {ansible_host: 10.0.0.1}\n"
                           "    box: {ansible_connection: local, ansible_ssh_common_args: '-o ProxyJump=b'}\n")
    inv = load_inventory(path)
    inv.check_hosts(inv.select("all"))


def test_every_ansible_connection_var_has_a_decision_and_the_docs_list_it():
    """Each of Ansible's connection and become vars is honoured (a kind's model reads it), refused
    or ignored; every refused or ignored name is one Ansible knows; docs/inventory.md names each."""
    from fleetctl.connection.registry import KINDS, load_kind
    from fleetctl.inventory.ansible_names import ANSIBLE_NAMES
    from fleetctl.inventory.ansible_support import BECOME_REFUSED, IGNORED
    from fleetctl.inventory.ansible_support import REFUSED as HOST_REFUSED
    from fleetctl.inventory.settings import aliases_of

    REFUSED = {**HOST_REFUSED, **BECOME_REFUSED}  # noqa: N806 - refused everywhere, or where a task becomes
    assert not (set(HOST_REFUSED) & set(BECOME_REFUSED))
    honoured = {"ansible_connection"}
    for kind in KINDS:
        honoured |= {v for v in aliases_of(load_kind(kind).settings_model) if v.startswith("ansible_")}
    assert not (set(REFUSED) & set(IGNORED)) and not (honoured & (set(REFUSED) | set(IGNORED)))
    assert (set(REFUSED) | set(IGNORED)) <= ANSIBLE_NAMES
    connection_vars = {n for n in ANSIBLE_NAMES if n.startswith(("ansible_ssh_", "ansible_become", "ansible_scp_",
                                                                 "ansible_sftp_", "ansible_shell_", "ansible_sudo_",
                                                                 "ansible_su_"))}
    connection_vars |= {"ansible_password", "ansible_host", "ansible_port", "ansible_user", "ansible_pipelining",
                        "ansible_private_key_file", "ansible_private_key", "ansible_python_interpreter",
                        "ansible_timeout", "ansible_remote_tmp", "ansible_host_key_checking"}
    undecided = connection_vars - honoured - set(REFUSED) - set(IGNORED)
    assert undecided == set()
    doc = (Path(__file__).resolve().parents[1] / "docs" / "inventory.md").read_text()
    assert [n for n in sorted(set(REFUSED) | set(IGNORED)) if f"`{n}`" not in doc] == []


def test_a_relative_venv_or_cuda_home_is_refused_naming_file_line_host_and_key(tmp_path, monkeypatch):
    # New-user trial: `venv: venv` loaded, and `fleetctl facts` said `python / torch: - / torch -`
    # with no warning (the host took it against whatever folder a command ran in); only
    # `deploy --plan` said it does not run. A workdir of ~/x and deploy_lock stay home-relative (a
    # bare relative workdir is refused as venv is: test_extra_vars_e2e.py).
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "all:\n  vars:\n    workdir: ~/fleet/work\n    deploy_lock: fleet.lock\n"
                    "  hosts:\n    n1:\n      venv: venv\n    n2:\n      cuda_home: cuda-12.8\n")
    with pytest.raises(InventoryError) as info:
        load_all("inventory.yaml")
    assert str(info.value) == (  # both hosts' bad values, a line each
        "inventory.yaml:7: all.hosts.n1.venv: 'venv' is a relative path, which the host would take against "
        "whatever folder a command runs in: write it absolute (e.g. /home/USER/venv)\n"
        "inventory.yaml:9: all.hosts.n2.cuda_home: 'cuda-12.8' is a relative path, which the host would take "
        "against whatever folder a command runs in: write it absolute (e.g. /home/USER/venv)")
    write(tmp_path, "all:\n  hosts:\n    n2:\n      cuda_home: cuda-12.8\n")
    with pytest.raises(InventoryError, match=r"^inventory.yaml:4: all.hosts.n2.cuda_home: 'cuda-12.8' is a relative"):
        load_all("inventory.yaml")
    write(tmp_path, "all:\n  vars:\n    workdir: ~/fleet/work\n    deploy_lock: fleet.lock\n"
                    "  hosts:\n    n1:\n      venv: /home/u/venv\n      cuda_home: /usr/local/cuda\n")
    host = load_inventory("inventory.yaml").hosts["n1"]
    assert (host.venv, host.settings.cuda_home, host.workdir) == ("/home/u/venv", "/usr/local/cuda", "~/fleet/work")
    write(tmp_path, "all:\n  hosts:\n    n1:\n      workdir: fleet/work\n")
    with pytest.raises(InventoryError) as info:
        load_all("inventory.yaml")
    assert str(info.value) == (
        "inventory.yaml:4: all.hosts.n1.workdir: 'fleet/work' is a relative path, which the host would take against "
        "whatever folder a command runs in: write it absolute (e.g. /home/USER/fleet/work), or ~/fleet/work for a folder "
        "in the login user's home")


def test_a_host_name_holding_a_line_break_is_named_on_one_line(tmp_path):
    """Found by the mutation test above: ``hosts: |`` (a YAML block scalar) under a group gave a host
    name holding newlines, and the error's key path printed them raw: a three-line error."""
    path = tmp_path / "inventory.yaml"
    path.write_text("all:\n  children:\n    rack:\n      hosts: |\n        gpu01:\n        gpu02:\n")
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    text = str(info.value)
    assert "\n" not in text and "contains whitespace" in text and str(path) in text, text


def test_a_host_refused_for_its_own_values_keeps_its_place_and_refuses_where_selected(tmp_path):
    inv = load_inventory(write(tmp_path, "all:\n  hosts:\n    a: {max_jobs: 0}\n    b:\n"))
    assert list(inv.hosts) == ["a", "b"]  # the run record's snapshot and selection keep the inventory's order
    inv.check_hosts(inv.select("b"))
    with pytest.raises(InventoryError, match=r":3: all.hosts.a.max_jobs: must be an integer of at least 1"):
        inv.check_hosts(inv.select("all"))


@pytest.mark.parametrize("var", ["ansible_user", "ansible_ssh_user"])
def test_a_local_host_naming_another_user_is_refused(tmp_path, var):
    """Operator trial: ``me: {ansible_connection: local, ansible_user: fltestok}`` run by root ran
    every command as root (``run -- id -un`` printed root) and a deploy left root-owned files in
    fltestok's venv. A local host runs as the controller's user: another user is refused, as
    ``ansible_become`` is (one line naming file, line, host and var); the controller's own name,
    and the same var on an ssh host, pass."""
    from fleetctl.inventory.ansible_support import controller_user

    me = controller_user()
    other = "fltestok" if me != "fltestok" else "fltestother"
    path = write(tmp_path, "all:\n  hosts:\n"
                           f"    me: {{ansible_connection: local, {var}: {other}, venv: /home/{other}/venv}}\n"
                           f"    self: {{ansible_connection: local, {var}: {me}}}\n"
                           f"    remote: {{ansible_host: 10.0.0.1, {var}: {other}}}\n")
    inv = load_inventory(path)
    inv.check_hosts(inv.select("self:remote"))
    with pytest.raises(InventoryError) as info:
        inv.check_hosts(inv.select("all"))
    line = str(info.value)
    assert line.startswith(f"{path}:3: all.hosts.me.{var}: host 'me' sets {var} = '{other}', which fleetctl does "
                           f"not honour: a local host (ansible_connection: local) runs every command on this "
                           f"controller as the user fleetctl runs as ({me}), never as another: "), line
    assert "\n" not in line
