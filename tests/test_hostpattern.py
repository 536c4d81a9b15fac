"""Host patterns (Ansible's selection and order, ClusterShell node sets where Ansible selects
nothing), node sets and folding. The same behaviour against ansible-core and ClusterShell
themselves: tests/test_inventory_ansible.py."""

from __future__ import annotations

import fnmatch
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetctl.errors import InventoryError
from fleetctl.inventory import (
    HostIndex,
    PatternError,
    expand_nodeset,
    fold_hosts,
    load_inventory,
    select_hosts,
    split_pattern,
)

DATA = Path(__file__).parent / "data" / "inventories"
FLEET = DATA / "fleet.yaml"


@pytest.fixture(scope="module")
def fleet():
    return load_inventory(FLEET)


def sel(inv, pattern, limit=None) -> list[str]:
    return [h.name for h in inv.select(pattern, limit=limit)]


# -- node sets ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodeset", "expected"),
    [
        ("node[01:03]", ["node01", "node02", "node03"]),  # Ansible, zero-padded
        ("node[8:10]", ["node8", "node9", "node10"]),
        ("node[:2]", ["node0", "node1", "node2"]),  # empty begin is 0
        ("node[0:10:4]", ["node0", "node4", "node8"]),  # step
        ("db-[a:c]-x", ["db-a-x", "db-b-x", "db-c-x"]),  # letters
        ("gpu[01-03,07]", ["gpu01", "gpu02", "gpu03", "gpu07"]),  # ClusterShell
        ("gpu[1-10/3]", ["gpu1", "gpu4", "gpu7", "gpu10"]),
        ("gpu[08-10]", ["gpu08", "gpu09", "gpu10"]),
        ("r[1-2]n[1:2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),  # several brackets, both syntaxes
        ("a,b[1-2],a", ["a", "b1", "b2"]),  # comma list, duplicates dropped
        ("gpu[01-02].dc1.example.com", ["gpu01.dc1.example.com", "gpu02.dc1.example.com"]),  # suffix
        ("n[1-2]-ib[0-1]", ["n1-ib0", "n1-ib1", "n2-ib0", "n2-ib1"]),  # several numbers
        ("n[9,09-10]", ["n9", "n09", "n10"]),  # mixed padding
        ("n[1-5]!n[2-3]", ["n1", "n4", "n5"]),  # ClusterShell's operators, left to right
        ("n[1-5]&n[3-9],x", ["n3", "n4", "n5", "x"]),
        ("n[1-3]^n[2-4]", ["n1", "n4"]),
        ("cpu[1:2],gpu1", ["cpu1", "cpu2", "gpu1"]),
        ("plain", ["plain"]),
    ],
)
def test_expand_nodeset(nodeset, expected):
    assert expand_nodeset(nodeset) == expected


@pytest.mark.parametrize(
    ("nodeset", "why"),
    [
        ("n[01:2]", "range [01:2] zero-pads its begin, so begin and end must have the same width"),
        ("n[1:]", "range [1:] has no end value"),
        ("n[1:2:0]", "range [1:2:0] step must be a positive integer"),
        ("n[c:a]", "range [c:a] begins after it ends"),
        ("n[1:a]", "range [1:a] must be numbers or single letters"),
        ("n[1:2:3:4]", "range [1:2:3:4] must be [begin:end] or [begin:end:step]"),
        ("n[5-1]", "range '5-1' begins after it ends"),
        ("node[01-1]", "range '01-1' has begin and end zero-padded to different widths (ClusterShell refuses this)"),
        ("n[1,,2]", "a range has an empty element"),
        ("n[a-c]", "range 'a-c' is not N, N-M or N-M/STEP"),
        ("n[]", "empty brackets []"),
        ("a!", "missing node set operand with '!' operator"),
        ("n[1", "'n[1' has '[' without ']'"),
        ("n1]", "'n1]' has ']' without '['"),
        ("n[0:200000]", "range [0:200000] expands to more than 100000 names"),
    ],
)
def test_expand_nodeset_errors(nodeset, why):
    with pytest.raises(InventoryError) as info:
        expand_nodeset(nodeset)
    assert str(info.value) == f"invalid node set {nodeset!r}: {why}"


@pytest.mark.parametrize(
    ("names", "folded"),
    [
        (["gpu01", "gpu02", "gpu03", "gpu07"], "gpu[01-03,07]"),
        (["node09", "node10", "node11"], "node[09-11]"),  # node10 fits the 2-digit padding
        (["n1", "n2", "n10"], "n[1-2,10]"),
        (["gpu07"], "gpu07"),
        (["b", "a", "x1"], "a,b,x1"),
        (["r1-n01", "r1-n02", "r2-n01"], "r1-n[01-02],r2-n01"),
        (["10.0.0.1", "10.0.0.2", "10.0.0.3"], "10.0.0.[1-3]"),
        (["n01", "n001", "n002"], "n[01,001-002]"),  # mixed padding in one range set
        (["n1-ib0", "n1-ib1", "n2-ib0", "n2-ib1"], "n[1-2]-ib[0-1]"),  # several numbers
        (["gpu01.dc1.example.com", "gpu02.dc1.example.com"], "gpu[01-02].dc1.example.com"),
        (["gpu01", "a[1]", "x,y"], "gpu01,a[1],x,y"),  # names no node set can hold: listed as they are
        ([], ""),
    ],
)
def test_fold_hosts(names, folded):
    assert fold_hosts(names) == folded


_host_names = st.from_regex(r"[a-c]{1,2}(-?[0-9]{1,3}){0,2}[a-b.]?", fullmatch=True)


@given(st.lists(_host_names, max_size=30))
def test_fold_then_expand_gives_the_same_set(names):
    folded = fold_hosts(names)
    assert set(expand_nodeset(folded)) == set(names)


# -- splitting ----------------------------------------------------------------------------------


def test_split_pattern_as_ansible_splits():
    assert split_pattern("a:b:&d:!e") == ["a", "b", "&d", "!e"]
    assert split_pattern("a:b,c:&d:!e") == ["a:b", "c:&d:!e"]  # a ',' makes ',' the only separator
    assert split_pattern("node[01:16]:!node[03-05]") == ["node[01:16]", "!node[03-05]"]
    assert split_pattern("node[01:16],!node[03-05,07]") == ["node[01:16]", "!node[03-05,07]"]  # brackets stay whole
    assert split_pattern(" a , ,b ") == ["a", "b"]
    assert split_pattern("a b") == ["a", "b"]
    assert split_pattern("fe80::1") == ["fe80::1"]  # one address: not split
    assert split_pattern("web01:2222") == ["web01:2222"]  # host:port, as Ansible reads it
    assert split_pattern("fe80::1,x") == ["fe80::1", "x"]
    assert split_pattern("~gpu0[1-3]:x") == ["~gpu0[1-3]", "x"]


# -- selection on the example fleet -------------------------------------------------------------
# all: bastion (ungrouped), gpu-nodes: gpu01-05, h200: gpu03-04, rack-a: gpu01-02, rack-b: gpu02,05,
# local: localhost


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("gpu-nodes", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu05"]),
        ("all", ["bastion", "gpu01", "gpu02", "gpu03", "gpu04", "gpu05", "localhost"]),
        ("ungrouped", ["bastion"]),
        ("gpu03", ["gpu03"]),
        # union, both separators; Ansible's order: each term's hosts in turn, each host once
        ("localhost:h200", ["localhost", "gpu03", "gpu04"]),
        ("localhost,h200", ["localhost", "gpu03", "gpu04"]),
        ("h200:gpu-nodes", ["gpu03", "gpu04", "gpu01", "gpu02", "gpu05"]),
        # intersection
        ("gpu-nodes:&rack-b", ["gpu02", "gpu05"]),
        ("rack-a,&rack-b", ["gpu02"]),
        # exclusion
        ("gpu-nodes:!h200", ["gpu01", "gpu02", "gpu05"]),
        ("all:!gpu-nodes:!local", ["bastion"]),
        # Ansible's order: unions, then intersections, then exclusions, wherever they are written
        ("!h200:gpu-nodes", ["gpu01", "gpu02", "gpu05"]),
        ("&rack-a:rack-b:h200", ["gpu02"]),
        ("rack-a:!gpu02:rack-b", ["gpu01", "gpu05"]),
        ("rack-b:rack-a", ["gpu02", "gpu05", "gpu01"]),
        ("rack-a:&gpu-nodes:!gpu01:rack-b", ["gpu02", "gpu05"]),
        # only & and ! terms start from all
        ("!gpu-nodes", ["bastion", "localhost"]),
        ("&rack-a", ["gpu01", "gpu02"]),
        # globs match groups (all their hosts, groups in creation order), then hosts
        ("gpu0*", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu05"]),
        ("rack-?", ["gpu01", "gpu02", "gpu05"]),
        ("*", ["bastion", "gpu01", "gpu02", "gpu03", "gpu04", "gpu05", "localhost"]),
        ("gpu*:!gpu0[1-3]", ["gpu04", "gpu05"]),
        ("*[0]", ["bastion"]),  # a subscript applies to what the glob matched
        # regex (re.match, like Ansible): groups first, then hosts
        ("~gpu0[15]", ["gpu01", "gpu05"]),
        ("~(bastion|local)", ["localhost", "bastion"]),
        # Ansible ranges and ClusterShell node sets of host names
        ("gpu[01:03]", ["gpu01", "gpu02", "gpu03"]),
        ("gpu[01-02,05]", ["gpu01", "gpu02", "gpu05"]),
        ("gpu[01:05]:!gpu[02-04]", ["gpu01", "gpu05"]),
        ("gpu[01-05]!gpu[02-04]", ["gpu01", "gpu05"]),  # ClusterShell's own difference
        # Ansible subscripts: by position, inclusive, in the group's order
        ("gpu-nodes[0]", ["gpu01"]),
        ("gpu-nodes[-1]", ["gpu05"]),
        ("gpu-nodes[1:2]", ["gpu02", "gpu03"]),
        ("gpu-nodes[3:]", ["gpu04", "gpu05"]),
        ("all[0]", ["bastion"]),
        # a list of patterns is a union
        (["h200", "bastion"], ["gpu03", "gpu04", "bastion"]),
    ],
)
def test_select(fleet, pattern, expected):
    assert sel(fleet, pattern) == expected


def test_limit_intersects(fleet):
    assert sel(fleet, "gpu-nodes", limit="h200") == ["gpu03", "gpu04"]
    assert sel(fleet, "gpu-nodes", limit="gpu[01-02]:gpu05") == ["gpu01", "gpu02", "gpu05"]
    assert sel(fleet, "all", limit="!gpu-nodes") == ["bastion", "localhost"]


def test_limit_from_file(fleet, tmp_path):
    retry = tmp_path / "retry"
    retry.write_text("gpu02\n# comment\n\ngpu04\n")
    assert sel(fleet, "gpu-nodes", limit=f"@{retry}") == ["gpu02", "gpu04"]
    with pytest.raises(PatternError, match=r"limit file '.*nope' cannot be read: No such file or directory"):
        fleet.select("all", limit=f"@{tmp_path / 'nope'}")


def test_host_objects_come_back(fleet):
    [host] = fleet.select("gpu05")
    assert host is fleet.hosts["gpu05"] and host.port == 2222


@pytest.mark.parametrize(
    ("pattern", "limit", "message"),
    [
        ("gpu-nodez", None, "pattern 'gpu-nodez' matches no host or group in {inv}; did you mean 'gpu-nodes'?"),
        ("gpu-nodes:!h20", None, "pattern 'h20' matches no host or group in {inv}; did you mean 'h200'?"),
        ("zzzzzz", None, "pattern 'zzzzzz' matches no host or group in {inv}"),
        # any short miss is 0.6-close to the implicit 'ungrouped': suggested only when nearly typed
        ("all", "nope", "limit 'nope' matches no host or group in {inv}"),
        ("ungroupd", None, "pattern 'ungroupd' matches no host or group in {inv}; did you mean 'ungrouped'?"),
        ("all", "lokal", "limit 'lokal' matches no host or group in {inv}; did you mean 'local'?"),
        ("gpu[01:09]", None, "pattern 'gpu[01:09]' names hosts not in {inv}: gpu[06-09]"),
        ("gpu[1:a]", None, "pattern 'gpu[1:a]' matches no host or group, and is not a valid node set: "
                           "range [1:a] must be numbers or single letters"),
        ("gpu-nodes[1-2]", None, "pattern 'gpu-nodes[1-2]': 'gpu-nodes' is a group, so Ansible reads [1-2] as "
                                 "positions in it (a removed form), not as host names; write gpu-nodes[1:2] for "
                                 "positions, or name the hosts"),
        ("gpu-nodes[3:1]", None, "pattern 'gpu-nodes[3:1]': the subscript ends (1) before it starts (3)"),
        ("h200:gpu01,bastion", None, "pattern 'h200:gpu01' matches no host or group in {inv}; a pattern with ',' "
                                     "is split at ',' only (Ansible's rule), so this ':' is part of a name: separate "
                                     "every term with ','"),
        ("gpu01:22", None, "pattern 'gpu01:22' matches no host or group in {inv}; Ansible reads 'gpu01:22' as one "
                           "host address (host:port or IPv6), not as terms: write 'gpu01,22' to select each"),
        ("127.0.0.1", None, "pattern '127.0.0.1' matches no host or group in {inv}; fleetctl has no implicit "
                            "localhost: list it in the inventory with ansible_connection: local"),
        ("gpu[01", None, "pattern 'gpu[01' has unbalanced brackets"),
        ("gpu-nodes[:2]", None, "pattern 'gpu-nodes[:2]' names hosts not in {inv}: gpu-nodes[0-2]; Ansible's patterns "
                                "guide shows gpu-nodes[:2], but ansible-core selects nothing for it: write gpu-nodes[0:2]"),
        ("h200:&local", None, "pattern 'h200:&local' selects no hosts in {inv}"),
        ("nomatch*", None, "pattern 'nomatch*' selects no hosts in {inv}"),
        ("h200", "local", "pattern 'h200' with limit 'local' selects no hosts in {inv}"),
        ("gpu-nodes[5]", None, "pattern 'gpu-nodes[5]': index 5 is out of range; 'gpu-nodes' has 5 hosts"),
        ("gpu-nodes[7:]", None, "pattern 'gpu-nodes[7:]': start 7 is out of range; 'gpu-nodes' has 5 hosts"),
        ("~gpu(", None, "pattern '~gpu(' is not a valid regular expression: missing ), unterminated subpattern at position 3"),
        ("", None, "pattern '' is empty"),
        ("h200:!", None, "pattern 'h200:!' has '&' or '!' with nothing after it"),
    ],
)
def test_pattern_errors(fleet, pattern, limit, message):
    with pytest.raises(PatternError) as info:
        fleet.select(pattern, limit=limit)
    assert isinstance(info.value, InventoryError)
    assert str(info.value) == message.format(inv=FLEET)
    assert info.value.source == str(FLEET)


def test_pattern_error_names_inventory_as_typed(tmp_path, monkeypatch):
    (tmp_path / "inventory.yaml").write_text("all:\n  children:\n    gpu-nodes:\n      hosts: {n1: }\n")
    monkeypatch.chdir(tmp_path)
    inv = load_inventory("inventory.yaml")
    with pytest.raises(InventoryError) as info:
        inv.select("gpu-nodez")
    assert str(info.value) == "pattern 'gpu-nodez' matches no host or group in inventory.yaml; did you mean 'gpu-nodes'?"


def test_ipv6_host_in_pattern(tmp_path):
    inv = load_inventory(DATA / "ranges.yaml")
    assert sel(inv, "fe80::1") == ["fe80::1"]
    assert sel(inv, "fe80::1,ssh-alt") == ["fe80::1", "ssh-alt"]


def test_limit_file_lines_are_terms(fleet, tmp_path):
    retry = tmp_path / "retry"
    retry.write_text("gpu05\nh200\n")
    assert sel(fleet, "all", limit=f"@{retry}") == ["gpu03", "gpu04", "gpu05"]  # the pattern's order kept


# -- property: patterns equal a set-algebra model ---------------------------------------------


@st.composite
def inventories(draw):
    n_hosts = draw(st.integers(1, 8))
    hosts = [f"n{i:02d}" for i in draw(st.permutations(range(1, n_hosts + 1)))]  # file order != name order
    n_groups = draw(st.integers(1, 5))
    groups = [f"g{i}" for i in range(n_groups)]
    direct = {g: draw(st.lists(st.sampled_from(hosts), unique=True, max_size=n_hosts)) for g in groups}
    # children only point to later groups: no loops
    children = {
        g: draw(st.lists(st.sampled_from(groups[i + 1 :]), unique=True)) if i + 1 < n_groups else []
        for i, g in enumerate(groups)
    }
    return hosts, groups, direct, children


def _write_inventory(path: Path, hosts, groups, direct, children) -> None:
    doc = {
        "all": {
            "hosts": {h: None for h in hosts},  # fixes inventory order = `hosts`
            "children": {
                g: {"hosts": {h: None for h in direct[g]} or None, "children": {c: None for c in children[g]} or None}
                for g in groups
            },
        }
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _members(groups, direct, children) -> dict[str, set[str]]:
    members: dict[str, set[str]] = {}
    for g in reversed(groups):  # children come later, so are computed first
        members[g] = set(direct[g]).union(*(members[c] for c in children[g]))
    return members


@st.composite
def pattern_terms(draw, hosts, groups):
    n = draw(st.integers(1, 5))
    terms = []
    for _ in range(n):
        op = draw(st.sampled_from(["", "", "&", "!"]))
        kind = draw(st.sampled_from(["host", "group", "all", "ungrouped", "glob", "nodeset"]))
        if kind == "host":
            name = draw(st.sampled_from(hosts))
        elif kind == "group":
            name = draw(st.sampled_from(groups))
        elif kind == "glob":
            name = draw(st.sampled_from(["n0*", "g*", "n?1", "*", "g[01]"]))
            if "[" in name:
                name = name + "*"  # brackets only act as fnmatch classes in a glob
        elif kind == "nodeset":
            chosen = draw(st.lists(st.sampled_from(hosts), min_size=1, unique=True))
            name = fold_hosts(chosen) if len(chosen) == 1 else "n[" + ",".join(h[1:] for h in chosen) + "]"
        else:
            name = kind
        terms.append((op, name))
    return terms


def _model(terms, hosts, groups, members) -> set[str]:
    every = set(hosts)
    ungrouped = every - set().union(*members.values())

    def match(name: str) -> set[str]:
        if name == "all":
            return every
        if name == "ungrouped":
            return ungrouped
        if name in members:
            return members[name]
        if name in every:
            return {name}
        if "*" in name or "?" in name:
            found = {h for h in every if fnmatch.fnmatchcase(h, name)}
            for g in groups:
                if fnmatch.fnmatchcase(g, name):
                    found |= members[g]
            return found
        return set(expand_nodeset(name))

    plain = [n for op, n in terms if op == ""]
    result = set().union(*(match(n) for n in plain)) if plain else set(every)
    for op, n in terms:
        if op == "&":
            result &= match(n)
    for op, n in terms:
        if op == "!":
            result -= match(n)
    return result


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_patterns_equal_set_algebra(data):
    hosts, groups, direct, children = data.draw(inventories())
    terms = data.draw(pattern_terms(hosts, groups))
    # one separator per pattern: Ansible splits a pattern holding a ',' at ',' only
    sep = "," if any("," in name for _, name in terms) else data.draw(st.sampled_from([":", ","]))
    pattern = sep.join(op + name for op, name in terms)
    members = _members(groups, direct, children)
    expected = sorted(_model(terms, hosts, groups, members))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "inventory.yaml"
        _write_inventory(path, hosts, groups, direct, children)
        inv = load_inventory(path)
    for g in groups:
        assert set(inv.groups[g].hosts) == members[g]
    if expected:
        got = [h.name for h in inv.select(pattern)]
        assert sorted(got) == expected and len(set(got)) == len(got)
    else:
        with pytest.raises(PatternError, match="selects no hosts"):
            inv.select(pattern)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_limit_is_an_intersection(data):
    hosts, groups, direct, children = data.draw(inventories())
    index = HostIndex(hosts=hosts, groups={"all": hosts, **{g: sorted(m) for g, m in _members(groups, direct, children).items()}})
    pattern = data.draw(st.sampled_from(["all", *groups, *hosts]))
    limit = data.draw(st.sampled_from(["all", *groups, *hosts]))

    def plain(p):
        try:
            return select_hosts(p, index)
        except PatternError:
            return []

    both = set(plain(pattern)) & set(plain(limit))
    if both:
        assert select_hosts(pattern, index, limit=limit) == [h for h in plain(pattern) if h in both]
    else:
        with pytest.raises(PatternError):
            select_hosts(pattern, index, limit=limit)
