"""Only an arch class's builder asks whether it reaches what CMake would download (no
``fetch_mirror``: fleetctl/tasks/build_deps.py ``reach_deps``, up to 20 s a repository): a member
that receives the class's wheel downloads nothing and needs no route to GitHub. When the builder
cannot reach them, the next member builds, and is asked then. The engine over a double of our own
Connection (tests/support/fake_connection.py), as tests/test_engine.py drives it."""

from __future__ import annotations

import json

from fleetctl.tasks.build_deps import REACH_PROGRAM
from tests.support import fake_connection as fake
from tests.test_engine import TOY, actions, fake_kind, make_hosts, playbook, run  # noqa: F401 - fake_kind: a fixture

DEP = "https://github.com/NVIDIA/cutlass.git"
CMAKELISTS = f"""\
cmake_minimum_required(VERSION 3.18)
project(toy LANGUAGES CXX)
include(FetchContent)
FetchContent_Declare(repo-cutlass GIT_REPOSITORY {DEP} GIT_TAG v3.9.2)
FetchContent_MakeAvailable(repo-cutlass)
"""


def reach(offline: set[str]):
    """A handler answering the reach probe: no route from the hosts in ``offline``."""

    def answer(host: fake.FakeHost, argv, env, cwd):
        if len(argv) > 3 and argv[1] == "-c" and argv[2] == REACH_PROGRAM:
            why = "git ls-remote: fatal: unable to access 'https://github.com/NVIDIA/cutlass.git/': Could not resolve host"
            return 0, json.dumps({url: why if host.name in offline else "" for _, url in json.loads(argv[3])}), ""
        return None

    return answer


def fleet(tmp_path, names, offline=frozenset(), **vars_):
    pb = playbook(tmp_path, TOY)
    (tmp_path / "toy" / "CMakeLists.txt").write_text(CMAKELISTS)
    hosts = make_hosts(names, **vars_)
    for name in names:
        fake.HOSTS[name].handlers.insert(0, reach(set(offline)))
    return pb, hosts


def asked(name: str) -> int:
    return len([a for a in fake.HOSTS[name].commands() if REACH_PROGRAM in a])


def test_only_the_builder_asks_whether_it_reaches_the_downloads(fake_kind, tmp_path):
    pb, hosts = fleet(tmp_path, ["n1", "n2", "n3", "n4"])
    model, _ = run(pb, hosts)
    assert {h: o.status for h, o in model.hosts.items()} == dict.fromkeys(["n1", "n2", "n3", "n4"], "ok")
    assert actions(model) == {"n1": "build", "n2": "push", "n3": "push", "n4": "push"}
    # the builder is asked (planning, and again after the upload changed its tree); the members never
    assert asked("n1") >= 1 and (asked("n2"), asked("n3"), asked("n4")) == (0, 0, 0)


def test_receivers_without_a_route_are_never_asked_nor_refused(fake_kind, tmp_path):
    pb, hosts = fleet(tmp_path, ["n1", "n2", "n3"], offline={"n2", "n3"})
    for mode in ("plan", "dry-run", "apply"):
        model, _ = run(pb, hosts, mode=mode)
        assert {h: o.status for h, o in model.hosts.items()} == dict.fromkeys(["n1", "n2", "n3"], "ok"), mode
        assert actions(model) == {"n1": "build", "n2": "push", "n3": "push"}, mode
        for h in ("n2", "n3"):
            build = [t for t in model.hosts[h].tasks if t.action == "build_wheel"][0]
            assert "cannot_build" not in build.data["decision"] and "unreachable" not in json.dumps(build.data), mode
    assert asked("n2") == asked("n3") == 0


def test_a_builder_without_a_route_hands_the_build_to_the_next_member_which_is_asked(fake_kind, tmp_path):
    pb, hosts = fleet(tmp_path, ["n1", "n2", "n3"], offline={"n1"})
    model, _ = run(pb, hosts)
    assert model.hosts["n1"].status == "failed" and "cannot download repo-cutlass" in model.hosts["n1"].error
    assert "set the host var fetch_mirror" in model.hosts["n1"].error
    assert model.hosts["n2"].status == model.hosts["n3"].status == "ok"
    assert actions(model)["n3"] == "push" and fake.HOSTS["n2"].ran("--wheel-dir") and not fake.HOSTS["n3"].ran("--wheel-dir")
    assert asked("n1") >= 1 and asked("n3") == 0
    n2 = fake.HOSTS["n2"].commands()  # the member that took over was asked before it built
    first_ask = next(i for i, a in enumerate(n2) if REACH_PROGRAM in a)
    assert first_ask < next(i for i, a in enumerate(n2) if "--wheel-dir" in a)
