"""fleetctl's inventories side by side with ansible-core and ClusterShell themselves.

The oracles are the real libraries (ansible-core and ClusterShell are test dependencies): for the
same files, fleetctl and ansible-core must agree on every host and group, the order hosts and groups
were created in, each group's hosts in ``Group.get_hosts()`` order, depths and priorities, each host's
groups in merge order, each host's merged vars, what every host pattern selects and in which order,
the connection address/port/user/key of every host (through a real ``ansible -m ping`` run whose ssh
is a stand-in that records its argv), and ``ansible-inventory --list/--graph/--host`` output byte for
byte. Node sets must expand and fold as ClusterShell's ``NodeSet`` does; Ansible host ranges as
ansible-core expands them.

Cases: the inventory guide's examples (tests/data/inventories/ansible_docs/, YAML and INI, folders,
group_vars/ and host_vars/) with the patterns guide's patterns, hand-made edge cases (order,
precedence, aliases, ranges, several sources), and hypothesis-generated inventories and patterns.

Where fleetctl differs on purpose, the difference is allowed only in the form docs/inventory.md
lists: it refuses (exit 2, with the reason) where Ansible silently selects nothing or only part
(:data:`REFUSALS`), reads a node set where Ansible selects nothing, and keeps one fixed order where
Ansible's ``get_hosts`` order depends on object ids (:attr:`Answer.ambiguous`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetctl.errors import InventoryError
from fleetctl.inventory import (
    PatternError,
    expand_host_key,
    expand_nodeset,
    fold_hosts,
    load_inventory,
    split_pattern,
)
from fleetctl.inventory import render
from fleetctl.inventory.ansible_names import is_ansible_name
from tests.support.ansible_oracle import oracle, plain

DOCS = Path(__file__).parent / "data" / "inventories" / "ansible_docs"
ANSIBLE_BIN = Path(sys.executable).parent

# fleetctl's refusals where Ansible selects something: each is listed in docs/inventory.md.
REFUSALS = (
    "matches no host or group",  # Ansible ignores a term that names nothing and selects the rest
    "is a group, so Ansible reads",  # GROUP[1-2]: the removed x-y subscript
    "before it starts",  # GROUP[2:0]: Ansible's end-0 quirk picks one host
    "is out of range",  # GROUP[5:] past the end: Ansible selects nothing for the term, fleetctl says so
    "no implicit localhost",  # Ansible makes up a local 'localhost' that no inventory lists
    "names hosts not in",  # a node set naming missing hosts: Ansible ignores the term, selects the rest
)

_STATS: dict[str, int] = {}


@pytest.fixture(autouse=True, scope="module")
def _plain_sources():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FLEETCTL_ANSIBLE_INVENTORY", "")
        yield
    if _STATS:
        print("\ndifferential cases:", json.dumps(_STATS, sort_keys=True))


def _count(kind: str) -> None:
    _STATS[kind] = _STATS.get(kind, 0) + 1


def compare_inventory(sources: list[str]):
    """Load ``sources`` with both; assert they agree; return (fleetctl inventory, Ansible's answer)."""
    inv = load_inventory(sources)
    ans = oracle().load(sources)
    assert list(inv.hosts) == ans.hosts
    assert list(inv.groups) == ans.groups
    for name, group in inv.groups.items():
        assert set(group.hosts) == set(ans.members[name]), name
        if name not in ans.ambiguous:
            assert list(group.hosts) == ans.members[name], name
        assert list(group.direct_hosts) == ans.direct[name], name
        assert list(group.children) == ans.children[name], name
        assert (group.depth, group.priority) == (ans.depth[name], ans.priority[name]), name
    for name, host in inv.hosts.items():
        assert list(host.groups) == ans.host_groups[name], name
        assert plain(dict(host.vars)) == ans.vars[name], name
    _count("inventories")
    _count("hosts")
    _STATS["hosts"] += len(inv.hosts) - 1
    return inv, ans


def _terms_matching_nothing(message: str) -> bool:
    m = re.match(r"(?:pattern|limit) '([^']*)' (?:matches no host or group|names hosts not in)", message)
    return m is not None and oracle().select(m.group(1)) == []


def _as_ansible_reads_it(inv, text: str | None) -> str | None:
    """``text`` with each node-set term (one Ansible reads as nothing, fleetctl as hosts) replaced by
    the hosts fleetctl reads, so that Ansible can be asked the same question; None when a node set
    sits in an intersection (no Ansible pattern says the same)."""
    if text is None:
        return None
    sep = "," if "," in text else ":"
    out = []
    for term in split_pattern(text):
        op, body = (term[0], term[1:]) if term[0] in "&!" else ("", term)
        if "[" in body and not any(c in body for c in "*?~") and oracle().select(body) == []:
            try:
                names = [h.name for h in inv.select(body)]
            except PatternError:
                names = None
            if names is not None:
                if op == "&":
                    raise LookupError(term)
                out.extend(op + n for n in names)
                continue
        out.append(term)
    return sep.join(out)


def compare_pattern(inv, ans, pattern: str, limit: str | None = None) -> str:
    """Select with both; assert they agree or differ only as documented; return how they compared."""
    if ans.ambiguous and re.search(r"\[-?[0-9]+(:[0-9]*)?\]", pattern + (limit or "")):
        # a position in a group whose order Ansible does not fix: no answer to compare with
        _count("patterns: subscript where Ansible's order is not fixed (not compared)")
        return "not compared"
    try:
        asked, asked_limit = _as_ansible_reads_it(inv, pattern), _as_ansible_reads_it(inv, limit)
    except LookupError:
        _count("patterns: node set in an intersection (not compared)")
        return "not compared"
    theirs = oracle().select(asked, asked_limit)
    try:
        ours: list[str] | PatternError = [h.name for h in inv.select(pattern, limit=limit)]
    except PatternError as exc:
        ours = exc
    ordered = not ans.ambiguous
    nodeset = (asked, asked_limit) != (pattern, limit)
    if isinstance(theirs, str):
        assert isinstance(ours, PatternError), (pattern, limit, theirs, ours)
        outcome = "both refuse"
    elif theirs:
        if isinstance(ours, PatternError):
            message = str(ours)
            assert any(r in message for r in REFUSALS), (pattern, limit, message, theirs)
            if "implicit localhost" not in message and ("matches no host" in message or "names hosts" in message):
                assert _terms_matching_nothing(message), (pattern, message)
            outcome = "refused on purpose"
        else:
            assert (ours == theirs) if ordered else (sorted(ours) == sorted(theirs)), (pattern, limit, ours, theirs)
            outcome = "same hosts, same order" if ordered else "same hosts"
    elif isinstance(ours, PatternError):
        outcome = "both select nothing"
    else:
        raise AssertionError((pattern, limit, ours, "Ansible selects nothing"))
    _count(f"patterns: {outcome}" + (" (node set terms as their hosts)" if nodeset else ""))
    return outcome


# -- the inventory guide's examples --------------------------------------------------------------

DOC_PATTERNS = [
    "all", "*", "ungrouped", "mail.example.com", "foo.example.com:bar.example.com",
    "foo.example.com,bar.example.com", "webservers", "webservers:dbservers", "webservers,dbservers",
    "webservers:!dbservers", "all:!webservers", "webservers:&dbservers", "dbservers:&east",
    "webservers:dbservers:&east:!three.example.com", "!webservers", "&east", "*.example.com",
    "*example.com:!one*", "one*", "~(web|db).*", "~.*\\.example\\.com", "192.0.2.*", "webservers[0]",
    "webservers[-1]", "webservers[0:1]", "webservers[1:]", "dbservers[0:2]", "dbservers[2:0]",
    "all[0]", "all[-1]", "prod", "test", "prod:test", "usa", "southeast", "atlanta:raleigh",
    "atlanta,&raleigh", "raleigh:!atlanta", "host[1:3]", "www[01:03].example.com", "db-[a:c].example.com",
    "www0[1-5].example.com", "webservers[1-2]", "evens[0:3]", "webservers[:3]", "jumper", "badwolf.example.com",
    "localhost", "weber", "cobweb:db1", "staging", "staging:&dbservers", "web*:!weber", "nosuchgroup",
    "webservers:nosuchgroup",
]


@pytest.mark.parametrize("name", sorted(p.name for p in DOCS.iterdir() if p.suffix in (".yaml", ".ini")) + ["folder"])
def test_docs_inventories_and_patterns(name):
    inv, ans = compare_inventory([str(DOCS / name)])
    for pattern in DOC_PATTERNS:
        compare_pattern(inv, ans, pattern)
    compare_pattern(inv, ans, "all", limit="webservers")
    compare_pattern(inv, ans, "all", limit="!dbservers")


def test_yaml_and_ini_of_one_example_agree():
    for stem in ("hosts", "nested", "ranges", "vars"):
        a = load_inventory(str(DOCS / f"{stem}.yaml"))
        b = load_inventory(str(DOCS / f"{stem}.ini"))
        assert {n: g.hosts for n, g in a.groups.items()} == {n: g.hosts for n, g in b.groups.items()}
        assert {n: dict(h.vars) for n, h in a.hosts.items()} == {n: dict(h.vars) for n, h in b.hosts.items()}


# -- hand-made edge cases -------------------------------------------------------------------------

EDGE_CASES = {
    # a group's own hosts come before its children's, in the order they joined
    "order.yaml": """\
all:
  children:
    parent:
      children:
        kid: {hosts: {k2: , k1: }}
      hosts: {p2: , p1: }
    other:
      hosts: {k1: , p2: , z: }
""",
    # deeper levels, two parents: Ansible's order is fixed only when one group of a level has children
    "levels.yaml": """\
all:
  children:
    top:
      hosts: {t1: }
      children:
        mid:
          hosts: {m1: }
          children:
            low: {hosts: {l1: , l2: }}
        side: {hosts: {s1: }}
""",
    # precedence: depth, priority, ASCII name, host, listed twice (replace, mappings too)
    "precedence.yaml": """\
all:
  vars: {x: all, opts: {a: 1}}
  children:
    b_group:
      vars: {x: b, y: b}
      hosts: {n1: {opts: {b: 2}, z: first}}
    a_group:
      vars: {x: a, y: a, ansible_group_priority: 5}
      hosts: {n1: {z: second}, n2: }
    deep:
      children:
        deeper:
          vars: {x: deeper}
          hosts: {n2: {opts: {c: 3}}}
""",
    # legacy and modern connection names, ports in keys and as strings
    "aliases.yaml": """\
all:
  vars: {ansible_ssh_user: legacy, ansible_port: '2200'}
  hosts:
    a: {ansible_user: modern}
    b:2222:
    c: {ansible_ssh_port: 2201, ansible_port: 2202, ansible_host: 10.0.0.3, ansible_ssh_host: 10.0.0.33}
    "[fe80::1]:2203":
    fe80::2:
    10.0.0.9:2204:
""",
    # ranges: padded, stepped, letters, several in one key, with a port
    "ranges.yaml": """\
all:
  hosts:
    node[01:03]:
    node[8:10]:
    even[0:8:4]:
    x[a:c]-[1:2]:
    r[1:2].dc:2222:
""",
    "ini_values.ini": """\
top ansible_port=2222 flag=True items="['a', 'b']" name='x y' num=010 text=hello#not-a-comment
[web]
w1 opts="{'a': 1}"
w2:2201
[web:vars]
ansible_user=deploy
retries=3 # a comment in a vars line is part of the value
empty=
[all:vars]
color=blue
[fleet:children]
web
""",
}


@pytest.fixture(scope="module")
def edge_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("edges")
    for name, text in EDGE_CASES.items():
        (root / name).write_text(text)
    return root


EDGE_PATTERNS = ["all", "parent", "parent[0]", "parent[-1]", "parent[1:3]", "other:parent", "parent:other",
                 "kid:&other", "top", "top[0:9]", "mid[1]", "all[2:]", "*_group", "a_group:b_group",
                 "b_group:a_group", "n*", "a:b", "fe80::2", "a,fe80::2", "10.0.0.9", "node0*", "node[01:02]",
                 "x*:!xa-1", "web[0]", "fleet", "~w[12]", "~[abc]$", "all:!~x.*"]


@pytest.mark.parametrize("name", sorted(EDGE_CASES))
def test_edge_cases(edge_dir, name):
    inv, ans = compare_inventory([str(edge_dir / name)])
    for pattern in EDGE_PATTERNS:
        compare_pattern(inv, ans, pattern)


@pytest.mark.parametrize("text, refused", [
    ("[web]\nw1\n[fleet:children]\nweb\nundeclared\n", "'undeclared'"),  # never declared anywhere
    ("[fleet:children]\nweb\n[web:vars]\nx=1\n", "'web'"),                 # only a :vars section
    ("[fleet:children]\nweb\n[web]\nw1\n", None),                           # declared after the parent
    ("[fleet:children]\nweb\n[web:children]\n", None),                       # an empty :children declares it
], ids=["undeclared", "vars-only", "declared-later", "empty-children"])
def test_ini_children_naming_an_undeclared_group_is_refused_as_ansible_core_refuses_it(tmp_path, capfd, text,
                                                                                        refused):
    """Brief of a new-user trial: "Ansible creates the group". ansible-core 2.19's INI plugin does
    not: ``Section [fleet:children] includes undefined group 'undeclared'`` (its parser error), and
    it accepts a group declared later in the file, or by an empty ``[web:children]``; fleetctl
    agrees on every case, so it is no difference from Ansible."""
    src = tmp_path / "hosts.ini"
    src.write_text(text)
    if refused is None:
        compare_inventory([str(src)])
        return
    with pytest.raises(oracle().AnsibleError, match="failed to parse inventory source"):
        oracle().load([str(src)])
    assert f"Section [fleet:children] includes undefined group {refused}" in capfd.readouterr().err
    with pytest.raises(InventoryError, match=f"names group {refused}, which is never declared"):
        load_inventory([str(src)])


def test_several_sources_add_up_later_vars_win(edge_dir, tmp_path):
    (tmp_path / "over.yaml").write_text("all:\n  vars: {x: over}\n  children:\n    parent:\n      hosts: {p1: {z: 9}, new: }\n")
    (tmp_path / "more.ini").write_text("[parent]\np1 z=10\n[extra]\nk1\n")
    inv, ans = compare_inventory([str(edge_dir / "order.yaml"), str(tmp_path / "over.yaml"), str(tmp_path / "more.ini")])
    assert inv.hosts["p1"].vars["z"] == 10 and "new" in inv.groups["parent"].direct_hosts
    for pattern in ("parent", "extra", "all[0]", "parent[-1]"):
        compare_pattern(inv, ans, pattern)


def test_group_vars_and_host_vars_precedence(tmp_path):
    (tmp_path / "inventory.yaml").write_text(
        "all:\n  vars: {level: all-inv}\n  children:\n    web:\n      vars: {level: web-inv, only_inv: 1}\n"
        "      hosts:\n        w1: {level: host-inv}\n        w2:\n    db:\n      hosts: {d1: }\n")
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("level: all-file\nfrom_all: yes\n")
    (tmp_path / "group_vars" / "db.yaml").write_text("level: db-file\n")
    (tmp_path / "group_vars" / "web").mkdir()
    (tmp_path / "group_vars" / "web" / "a.yml").write_text("list: [1]\n")
    (tmp_path / "group_vars" / "web" / "b.json").write_text('{"list": [2], "level2": "web-file"}')
    (tmp_path / "group_vars" / "web" / ".hidden.yml").write_text("ignored: true\n")
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "w1").write_text("level: host-file\n")
    inv, _ = compare_inventory([str(tmp_path / "inventory.yaml")])
    assert inv.hosts["w2"].vars["level"] == "all-file"  # group_vars/all beats the web group's inventory var
    assert inv.hosts["w1"].vars["level"] == "host-file"


# -- generated inventories and patterns ---------------------------------------------------------

_GROUP_NAMES = ["web", "db", "gpu", "rack-a", "rack_b", "zone1", "Zeta", "alpha", "all_x"]
_HOST_NAMES = ["n1", "n2", "n3", "n10", "gpu01", "gpu02", "web.example.com", "db1", "10.0.0.1", "Alpha"]
_VAR_VALUES = {
    "color": st.sampled_from(["red", "blue", 1, True, None]),
    "opts": st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 3), max_size=2),
    "items": st.lists(st.integers(0, 3), max_size=2),
    "ansible_port": st.sampled_from([22, 2222, "2200"]),
    "ansible_user": st.sampled_from(["root", "ubuntu"]),
    "ansible_ssh_user": st.sampled_from(["root", "admin"]),
    "ansible_host": st.sampled_from(["10.0.0.5", "gpu.lan"]),
    "venv": st.sampled_from(["/opt/venv", "/srv/v"]),
}
_INI_VALUES = {"color": st.sampled_from(["red", "blue", 1, True]), "ansible_port": st.sampled_from([22, 2222]),
               "ansible_user": st.sampled_from(["root", "ubuntu"]), "venv": st.sampled_from(["/opt/venv"])}


@st.composite
def _vars(draw, ini: bool):
    pool = _INI_VALUES if ini else _VAR_VALUES
    names = draw(st.lists(st.sampled_from(sorted(pool)), unique=True, max_size=3))
    return {n: draw(pool[n]) for n in names}


@st.composite
def generated(draw):
    """A random inventory: groups in a random DAG, hosts listed in random groups (maybe twice, with
    vars), group vars and priorities, as YAML or INI, maybe split over two sources, maybe with
    group_vars/ and host_vars/."""
    ini = draw(st.booleans())
    groups = draw(st.lists(st.sampled_from(_GROUP_NAMES), min_size=2, max_size=6, unique=True))
    hosts = draw(st.lists(st.sampled_from(_HOST_NAMES), min_size=3, max_size=9, unique=True))
    children = {g: draw(st.lists(st.sampled_from(groups[i + 1:]), unique=True)) if i + 1 < len(groups) else []
                for i, g in enumerate(groups)}
    listings = {g: draw(st.lists(st.tuples(st.sampled_from(hosts), _vars(ini)), min_size=1 + int(g == "all"),
                                 max_size=6, unique_by=lambda t: t[0])) for g in ["all", *groups]}
    gvars = {g: draw(_vars(ini)) for g in ["all", *groups]}
    for g in groups:
        if draw(st.integers(0, 4)) == 0:
            gvars[g]["ansible_group_priority"] = draw(st.integers(0, 3))
    order = draw(st.permutations(groups))
    files = {}
    if draw(st.booleans()):
        files["group_vars/" + draw(st.sampled_from(["all", *groups])) + ".yml"] = draw(_vars(False))
    if draw(st.booleans()):
        files["host_vars/" + draw(st.sampled_from(hosts)) + ".yml"] = draw(_vars(False))
    split = draw(st.booleans())
    return ini, list(order), children, listings, gvars, files, split


def _yaml_doc(groups, children, listings, gvars) -> str:
    import yaml

    doc = {}
    for g in ["all", *groups]:
        body = {}
        if gvars[g]:
            body["vars"] = gvars[g]
        if listings[g]:
            body["hosts"] = {h: (v or None) for h, v in listings[g]}
        if g != "all" and children.get(g):
            body["children"] = {c: None for c in children[g]}
        doc[g] = body or None
    return yaml.safe_dump(doc, sort_keys=False)


def _ini_value(value) -> str:
    return repr(value) if not isinstance(value, str) else value


def _ini_doc(groups, children, listings, gvars) -> str:
    lines = [f"{h} " + " ".join(f"{k}={_ini_value(v)}" for k, v in hv.items()) for h, hv in listings["all"]]
    for g in groups:
        lines.append(f"[{g}]")
        lines += [f"{h} " + " ".join(f"{k}={_ini_value(v)}" for k, v in hv.items()) for h, hv in listings[g]]
        if children.get(g):
            lines.append(f"[{g}:children]")
            lines += children[g]
    for g in ["all", *groups]:
        if gvars[g]:
            lines.append(f"[{g}:vars]")
            lines += [f"{k}={_ini_value(v)}" for k, v in gvars[g].items()]
    return "\n".join(lines) + "\n"


def _write_generated(root: Path, case) -> list[str]:
    import yaml

    ini, groups, children, listings, gvars, files, split = case
    render_doc = _ini_doc if ini else _yaml_doc
    parts = [groups[: len(groups) // 2], groups[len(groups) // 2:]] if split and len(groups) > 1 else [groups]
    sources = []
    for i, part in enumerate(parts):
        path = root / (f"inv{i}.ini" if ini else f"inv{i}.yaml")
        sub_listings = {g: listings[g] for g in ["all", *part]} if i == 0 else {**{g: listings[g] for g in part}, "all": []}
        sub_vars = {g: gvars[g] for g in ["all", *part]} if i == 0 else {**{g: gvars[g] for g in part}, "all": {}}
        if ini:
            # an INI [g:children] must name groups declared in the same file
            sub_children = {g: [c for c in children.get(g, []) if c in part] for g in part}
        else:
            sub_children = {g: children.get(g, []) for g in part}
        path.write_text(render_doc(part, sub_children, sub_listings, sub_vars))
        sources.append(str(path))
    for rel, values in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(values))
    return sources


@st.composite
def patterns(draw, groups: list[str], hosts: list[str]):
    term = st.one_of(
        st.sampled_from(["all", "ungrouped", *groups, *hosts]),
        st.sampled_from(["all", "nope", *groups, *hosts]),
        st.sampled_from(["n*", "*a*", "g*", "?1", "*.com", "10.*", "[nr]*"]),
        st.sampled_from(["~n[12]", "~(web|db).*", "~.*1$", "~[A-Z]"]),
        st.builds(lambda g, s: g + s, st.sampled_from(["all", *groups]),
                  st.sampled_from(["[0]", "[-1]", "[1]", "[0:1]", "[1:]", "[2:0]", "[0:2]", "[1-2]", "[9]"])),
        st.sampled_from(["n[1-3]", "n[1:3]", "gpu[01-02]", "n[1,10]", "gpu0[1-2]"]),
    )
    terms = draw(st.lists(st.tuples(st.sampled_from(["", "", "", "", "&", "!"]), term), min_size=1, max_size=4))
    if all(op for op, _ in terms) and draw(st.booleans()):
        terms.insert(0, ("", "all"))
    sep = draw(st.sampled_from([",", ":"]))
    if sep == ":" and any("," in t or ":" in t for _, t in terms):
        sep = ","
    return sep.join(op + t for op, t in terms)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_generated_inventories_and_patterns(data):
    case = data.draw(generated())
    with tempfile.TemporaryDirectory() as tmp:
        sources = _write_generated(Path(tmp), case)
        try:
            inv = load_inventory(sources)
        except InventoryError as exc:
            # fleetctl refuses only what docs/inventory.md lists: a name both host and group
            assert "is both a host and a group" in str(exc), str(exc)
            _count("inventories refused: host and group of one name")
            return
        inv, ans = compare_inventory(sources)
        for _ in range(6):
            pattern = data.draw(patterns(list(inv.groups), list(inv.hosts)))
            limit = data.draw(st.sampled_from([None, None, None, "all"]) | patterns(list(inv.groups), list(inv.hosts)))
            compare_pattern(inv, ans, pattern, limit)


# -- host ranges and node sets ---------------------------------------------------------------------

_ansible_key = st.builds(
    lambda head, lo, hi, step, tail: f"{head}[{lo}:{hi}{step}]{tail}",
    st.sampled_from(["n", "gpu-", "rack", ""]),
    st.sampled_from(["0", "1", "01", "001", "8", "a", "c", ""]),
    st.sampled_from(["3", "10", "12", "09", "099", "c", "f"]),
    st.sampled_from(["", ":2", ":3"]),
    st.sampled_from(["", ".dc1", "-ib[0:1]", "x[a:b]"]),
)


@settings(max_examples=300, deadline=None)
@given(_ansible_key)
def test_host_key_ranges_expand_as_ansible(key):
    theirs = oracle().expand_range(key)
    try:
        ours = expand_host_key(key)
    except ValueError as exc:
        ours = f"refused: {exc}"
    if isinstance(theirs, list) and theirs:
        assert ours == theirs, key
        _count("host ranges: same names, same order")
    elif isinstance(theirs, list):  # Ansible expands a reversed range to no host at all
        assert isinstance(ours, str) and "begins after it ends" in ours, (key, ours)
        _count("host ranges: reversed, refused on purpose")
    else:
        assert isinstance(ours, str), (key, ours, theirs)
        _count("host ranges: both refuse")


_cs_range = st.lists(st.one_of(
    st.builds(str, st.integers(0, 30)),
    st.builds(lambda a, b, pad: f"{min(a, b):0{pad}d}-{max(a, b):0{pad}d}", st.integers(0, 15), st.integers(0, 30),
              st.sampled_from([1, 2, 3])),
    st.builds(lambda a, b, s: f"{min(a, b)}-{max(a, b)}/{s}", st.integers(0, 10), st.integers(0, 30), st.integers(1, 4)),
), min_size=1, max_size=3).map(",".join)
_cs_bad_range = st.sampled_from(["01-1", "1-01", "5-1", "a", "", "1,,2", "009-10"])
_cs_range = st.integers(0, 15).flatmap(lambda i, good=_cs_range: _cs_bad_range if i == 0 else good)
_cs_name = st.builds(lambda pre, r, mid, r2, suf: f"{pre}[{r}]{mid}{'[' + r2 + ']' if r2 else ''}{suf}",
                     st.sampled_from(["n", "gpu", "rack-", "10.0.0."]), _cs_range,
                     st.sampled_from(["-ib", ".", "x"]), st.one_of(st.just(""), _cs_range),
                     st.sampled_from(["", ".dc1.example.com", "x"]))
_cs_nodeset = st.lists(st.tuples(st.sampled_from([",", ",", "!", "&", "^"]), _cs_name), min_size=1, max_size=3).map(
    lambda items: "".join((op if i else "") + name for i, (op, name) in enumerate(items)))


@settings(max_examples=400, deadline=None)
@given(_cs_nodeset)
def test_node_sets_expand_as_clustershell(text):
    from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetError

    try:
        theirs = list(NodeSet(text, resolver=RESOLVER_NOGROUP))
    except NodeSetError:
        theirs = None
    try:
        ours = expand_nodeset(text)
    except InventoryError:
        ours = None
    assert ours == theirs, text
    _count("node sets expanded: " + ("same names" if ours is not None else "both refuse"))


_fold_names = st.lists(st.one_of(
    st.from_regex(r"[a-c]{1,3}(-?[0-9]{1,3}){0,3}(\.[a-z]{1,3}[0-9]?)?", fullmatch=True),
    st.from_regex(r"gpu0?[0-9]{1,2}(\.dc[12])?", fullmatch=True),
    st.from_regex(r"n[0-9]{1,2}-ib[0-9]", fullmatch=True),
), max_size=25)


@settings(max_examples=400, deadline=None)
@given(_fold_names)
def test_folding_is_clustershells_and_expands_back(names):
    from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

    folded = fold_hosts(names)
    assert folded == (str(NodeSet.fromlist(names, resolver=RESOLVER_NOGROUP)) if names else "")
    assert set(expand_nodeset(folded)) == set(names)
    _count("node sets folded")


@pytest.mark.parametrize(("names", "folded"), [
    (["gpu01.dc1.example.com", "gpu02.dc1.example.com"], "gpu[01-02].dc1.example.com"),
    (["n1-ib0", "n1-ib1", "n2-ib0", "n2-ib1"], "n[1-2]-ib[0-1]"),
    (["node9", "node09", "node10"], "node[9,09-10]"),
    (["n8", "n9", "n10", "n11"], "n[8-11]"),
])
def test_folding_hand_made(names, folded):
    from ClusterShell.NodeSet import NodeSet

    assert fold_hosts(names) == folded == str(NodeSet.fromlist(names))


# -- connection settings: what a real `ansible -m ping` passes to ssh ------------------------------

_FAKE_SSH = """#!/bin/sh
printf '%s\\n' "$@" > "$FAKE_SSH_OUT/$$"
exit 255
"""


def _connection_inventory(root: Path) -> Path:
    import random

    rng = random.Random(11)
    names = ["ansible_host", "ansible_ssh_host", "ansible_port", "ansible_ssh_port", "ansible_user",
             "ansible_ssh_user", "ansible_private_key_file", "ansible_ssh_private_key_file"]
    values = {"ansible_host": ["10.1.0.1", "a.lan"], "ansible_ssh_host": ["10.2.0.2", "b.lan"],
              "ansible_port": [2201, "2202"], "ansible_ssh_port": [2301, "2302"], "ansible_user": ["u1", "u2"],
              "ansible_ssh_user": ["s1", "s2"], "ansible_private_key_file": ["keys/a", "keys/b"],
              "ansible_ssh_private_key_file": ["keys/c", "~/keys/d"]}

    def some() -> dict:
        return {n: rng.choice(values[n]) for n in rng.sample(names, rng.randint(0, 4))}

    doc = {"all": {"vars": {"ansible_ssh_executable": str(root / "fake-ssh"), **some()}, "children": {}}}
    for g in ("g1", "g2"):
        doc["all"]["children"][g] = {"vars": some(), "hosts": {}}
    for i in range(16):
        g = rng.choice(["g1", "g2"])
        doc["all"]["children"][g]["hosts"][f"h{i:02d}"] = {
            **some(), "ansible_ssh_extra_args": f"-o SetEnv=FLEETCTL_TEST_HOST=h{i:02d}"}
    import yaml

    path = root / "inventory.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_connection_settings_match_what_ansible_passes_to_ssh(tmp_path, monkeypatch):
    (tmp_path / "fake-ssh").write_text(_FAKE_SSH)
    (tmp_path / "fake-ssh").chmod(0o755)
    out = tmp_path / "argv"
    out.mkdir()
    inv_path = _connection_inventory(tmp_path)
    env = {**os.environ, "FAKE_SSH_OUT": str(out), "HOME": str(tmp_path), "ANSIBLE_HOME": str(tmp_path / ".ansible"),
           "ANSIBLE_HOST_KEY_CHECKING": "False", "ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp_path / "cp"),
           "ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    (tmp_path / "ansible.cfg").write_text("")
    subprocess.run([str(ANSIBLE_BIN / "ansible"), "all", "-i", str(inv_path), "-m", "ping", "-f", "16"],
                   env=env, capture_output=True, timeout=300, cwd=tmp_path)
    seen = {}
    for f in out.iterdir():
        argv = f.read_text().splitlines()
        opts = {}
        for i, a in enumerate(argv):
            if a == "-o" and i + 1 < len(argv) and "=" in argv[i + 1]:
                k, _, v = argv[i + 1].partition("=")
                opts[k] = v.strip('"')
        host = opts["SetEnv"].rpartition("=")[2]
        seen[host] = {"address": argv[-2], "port": opts.get("Port"), "user": opts.get("User"),
                      "key": opts.get("IdentityFile")}
    assert len(seen) == 16
    monkeypatch.setenv("HOME", str(tmp_path))  # '~' means the same home to both
    inv = load_inventory(str(inv_path))
    for name, theirs in seen.items():
        host = inv.hosts[name]
        assert host.address == theirs["address"], name
        assert (str(host.port) if host.port is not None else None) == theirs["port"], name
        assert host.user == theirs["user"], name
        key = theirs["key"]
        expected = os.path.normpath(os.path.join(str(tmp_path), os.path.expanduser(key))) if key else None
        assert host.key_file == expected, name  # fleetctl resolves a relative key against the inventory's folder
        _count("connection settings: same address, port, user and key")


# -- ansible-inventory's own output ----------------------------------------------------------------

def _ansible_inventory(*args: str) -> str:
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1"}
    res = subprocess.run([str(ANSIBLE_BIN / "ansible-inventory"), *args], capture_output=True, text=True, env=env,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout.rstrip("\n")


@pytest.mark.parametrize("name", ["nested.yaml", "vars.ini", "aliases.yaml", "folder"])
def test_list_graph_and_host_output_equal_ansible_inventory(name):
    source = str(DOCS / name)
    inv = load_inventory(source)
    assert render.dumps(render.list_json(inv)) == _ansible_inventory("-i", source, "--list")
    assert render.graph(inv) == _ansible_inventory("-i", source, "--graph")
    group = next((g for g in inv.groups if g not in ("all", "ungrouped")), "ungrouped")
    assert render.graph(inv, group, show_vars=True) == _ansible_inventory("-i", source, "--graph", "--vars", group)
    host = list(inv.hosts)[-1]
    assert render.dumps(render.host_vars(inv, host)) == _ansible_inventory("-i", source, "--host", host)
    _count("ansible-inventory outputs: byte for byte")


# -- the names Ansible knows -----------------------------------------------------------------------

def test_every_variable_name_ansible_core_declares_is_known():
    import ansible
    import yaml

    root = Path(ansible.__file__).parent
    declared = set()
    for f in [*root.glob("plugins/*/*.py"), *root.glob("plugins/doc_fragments/*.py")]:
        for m in re.finditer(r'DOCUMENTATION\s*=\s*r?("""|\'\'\')(.*?)\1', f.read_text(), re.S):
            try:
                doc = yaml.safe_load(m.group(2)) or {}
            except yaml.YAMLError:
                continue
            for opt in (doc.get("options") or {}).values():
                for v in (opt or {}).get("vars") or []:
                    if str(v.get("name", "")).startswith("ansible_"):
                        declared.add(v["name"])
    from ansible import constants as C

    declared |= {n for names in C.MAGIC_VARIABLE_MAPPING.values() for n in names}
    assert len(declared) > 100
    assert sorted(n for n in declared if not is_ansible_name(n)) == []
