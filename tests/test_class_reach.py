"""Only an arch class's builder asks whether it reaches what CMake would download (no
``fetch_mirror``: fleetctl/tasks/build_deps.py ``reach_deps``, up to 20 s a repository): a member
that receives the class's wheel downloads nothing and needs no route to GitHub. A builder that
cannot reach them receives the wheel instead, with a warning line: the members that may build are
then asked at once, and the first that reaches builds; only when none does, each fails with its
own cause (fleetctl/engine/classes.py ``cannot_reach``). The engine over a double of our own
Connection (tests/support/fake_connection.py), as tests/test_engine.py drives it."""

from __future__ import annotations

import asyncio
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


def notes(ev, host: str) -> list[str]:
    return [e.data.get("message", "") for e in ev.events if e.name == "note.added" and e.host == host]


def test_a_builder_without_a_route_receives_the_wheel_the_next_member_builds(fake_kind, tmp_path):
    pb, hosts = fleet(tmp_path, ["n1", "n2", "n3"], offline={"n1"})
    for mode in ("plan", "dry-run", "apply"):  # --plan and --dry-run tell the roles the deploy takes
        model, ev = run(pb, hosts, mode=mode)
        assert {h: o.status for h, o in model.hosts.items()} == dict.fromkeys(["n1", "n2", "n3"], "ok"), mode
        assert actions(model) == {"n1": "push", "n2": "build", "n3": "push"}, mode
        said = [m for m in notes(ev, "n1") if "cannot download repo-cutlass" in m]  # the warning line names it
        assert said and "this host receives its arch class's wheel" in said[0], mode
    assert fake.HOSTS["n2"].ran("--wheel-dir") and not fake.HOSTS["n1"].ran("--wheel-dir")
    # received, installed (the wheel kept in the venv's own records folder, venv_state.RECORD_LAYOUT)
    assert [a for a in fake.HOSTS["n1"].ran("/w/n1/installed/") if a[-1].endswith("/toy-0.1-py3-none-any.whl")]
    n2 = fake.HOSTS["n2"].commands()  # the member that builds instead was asked before it built
    first_ask = next(i for i, a in enumerate(n2) if REACH_PROGRAM in a)
    assert first_ask < next(i for i, a in enumerate(n2) if "--wheel-dir" in a)


class Round:
    """The reach probes as the hosts ask them: ``("ask", host)`` when a probe is sent, ``("answer",
    host)`` when it answers. While the members after the first builder (``together``) are asked,
    a probe answers only once each of them has been asked (a bound of 10 s instead, should they be
    asked one after another: the events then show it)."""

    def __init__(self, together: set[str]):
        self.events: list[tuple[str, str]] = []
        self.together, self.waiting = together, set(together)
        self.all_asked: asyncio.Event | None = None

    def wait_of(self, name: str):
        async def wait(argv):
            if not any(REACH_PROGRAM in a for a in argv):
                return
            self.events.append(("ask", name))
            if name in self.waiting:
                self.all_asked = self.all_asked or asyncio.Event()
                self.waiting.discard(name)
                if not self.waiting:
                    self.all_asked.set()
                try:
                    await asyncio.wait_for(self.all_asked.wait(), 10)
                except TimeoutError:
                    pass
            self.events.append(("answer", name))
        return wait


def test_a_class_no_member_of_which_reaches_asks_the_rest_at_once_and_each_fails(fake_kind, tmp_path):
    pb, hosts = fleet(tmp_path, ["n1", "n2", "n3"], offline={"n1", "n2", "n3"})
    probes = Round({"n2", "n3"})
    for name in ("n1", "n2", "n3"):
        fake.HOSTS[name].answer_wait = probes.wait_of(name)
    model, ev = run(pb, hosts)
    assert {h: o.status for h, o in model.hosts.items()} == dict.fromkeys(["n1", "n2", "n3"], "failed")
    for h in ("n1", "n2", "n3"):  # each with its own cause, and the class's line
        assert "cannot download repo-cutlass" in model.hosts[h].error, h
        assert any("no host of this arch class (n1, n2, n3) can build its wheel" in m for m in notes(ev, h)), h
        assert not fake.HOSTS[h].ran("--wheel-dir")
    # the builder first; once it could not reach, the two other members in one round, not in turn
    first = probes.events[:6]
    assert first[:2] == [("ask", "n1"), ("answer", "n1")]
    assert sorted(first[2:4]) == [("ask", "n2"), ("ask", "n3")] and sorted(first[4:]) == [("answer", "n2"),
                                                                                      ("answer", "n3")]
    plan, _ = run(pb, hosts, mode="plan")  # --plan tells the same: no member receives, each fails
    assert actions(plan) == dict.fromkeys(["n1", "n2", "n3"], "fail")
    assert all("cannot download repo-cutlass" in o.error for o in plan.hosts.values())


def test_a_one_host_class_whose_host_cannot_reach_fails_with_the_cause(fake_kind, tmp_path):
    pb, hosts = fleet(tmp_path, ["n1"], offline={"n1"})
    for mode in ("plan", "apply"):
        model, _ = run(pb, hosts, mode=mode)
        assert model.hosts["n1"].status == "failed" and "cannot download repo-cutlass" in model.hosts["n1"].error
        assert "set the host var fetch_mirror" in model.hosts["n1"].error, mode


def test_a_builder_without_a_route_in_a_group_of_forks_receives_the_wheel_its_group_builds(fake_kind, tmp_path):
    pb, hosts = fleet(tmp_path, ["n1", "n2", "n3"], offline={"n1", "n3"})
    for mode in ("plan", "apply"):  # groups of two (forks): n3 is planned after n1 and n2
        model, _ = run(pb, hosts, mode=mode, forks=2)
        assert {h: o.status for h, o in model.hosts.items()} == dict.fromkeys(["n1", "n2", "n3"], "ok"), mode
        assert actions(model) == {"n1": "push", "n2": "build", "n3": "push"}, mode
    assert asked("n3") == 0
