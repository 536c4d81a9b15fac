"""The engine against a test double of fleetctl's own Connection (tests/support/fake_connection.py).

What is checked here is the engine's own behaviour: passes, forks, arch classes, preflight stops,
tags, the probe cache, and that ``--plan``, ``--dry-run`` and a deploy agree. Transports are tested
against real sshd elsewhere.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path

import pytest

from fleetctl.connection import registry
from fleetctl.engine.model import RunModel
from fleetctl.engine.observer import Observers
from fleetctl.engine.runner import PlayOptions, run_playbook
from fleetctl.playbook import load_playbook
from tests.support import fake_connection as fake
from tests.support.fleet import unwrap_modes

TOY = """
name: toy
hosts: all
vars:
  src_dir: "{{ workdir }}/src/toy"
tasks:
  - name: upload
    copy: {src: toy, dest: "{{ src_dir }}"}
    tags: [build]
  - name: build
    build_wheel: {src: "{{ src_dir }}", out_dir: "{{ workdir }}/wheels", check_sass: false,
                  required_build_packages: [setuptools], tool: pip}
    register: build
    tags: [build]
  - name: install
    pip_install: {wheel: "{{ build.data.wheel }}"}
    tags: [install]
"""


@pytest.fixture
def fake_kind(monkeypatch, tmp_path):
    """The fake connection kind: one line in the registry, as a real kind."""
    monkeypatch.setitem(registry.KINDS, "fake", "tests.support.fake_connection:KIND")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    fake.HOSTS.clear()
    yield fake.HOSTS
    fake.HOSTS.clear()


def pip_installs(name: str) -> list[list[str]]:
    return [u for a in fake.HOSTS[name].commands() if (u := unwrap_modes(a))[1:4] == ["-m", "pip", "install"]]


def make_hosts(names, **vars_):
    """Real inventory hosts whose ``ansible_connection`` is the fake kind."""
    from fleetctl.inventory import Host

    out = []
    for name in names:
        fake.HOSTS[name] = fake.FakeHost(name, handlers=[fake.python_packaging])
        v = {"ansible_connection": "fake", "venv": "/venv", "workdir": f"/w/{name}", **vars_.get(name, {})}
        out.append(Host(name, v))
    return out


def playbook(tmp_path: Path, text: str = TOY):
    (tmp_path / "toy").mkdir(exist_ok=True)
    (tmp_path / "toy" / "pyproject.toml").write_text("[project]\nname = 'toy'\nversion = '0.1'\n")
    path = tmp_path / "play.yaml"
    path.write_text(textwrap.dedent(text))
    return load_playbook(str(path))


class Events:
    def __init__(self):
        self.events = []

    def event(self, run, ev):
        self.events.append(ev)


def run(pb, hosts, **opts):
    model = RunModel(kind="deploy", mode=opts.get("mode", "apply"))
    ev = Events()
    asyncio.run(run_playbook(pb, hosts, run=model, observers=Observers(model, [ev]), opts=PlayOptions(**opts)))
    return model, ev


def actions(model) -> dict[str, str]:
    """host -> the build task's decided action."""
    out = {}
    for h, o in model.hosts.items():
        b = [t for t in o.tasks if t.action == "build_wheel"]
        out[h] = (b[0].data.get("decision") or {}).get("action") if b else o.status
    return out


def test_a_class_builds_once_and_the_wheel_reaches_every_member(fake_kind, tmp_path):
    hosts = make_hosts(["n1", "n2", "n3"])
    model, _ = run(playbook(tmp_path), hosts)
    assert {h: o.status for h, o in model.hosts.items()} == {"n1": "ok", "n2": "ok", "n3": "ok"}
    builds = {h: len(fake.HOSTS[h].ran("--wheel-dir")) for h in fake.HOSTS}
    assert builds == {"n1": 1, "n2": 0, "n3": 0}
    assert actions(model) == {"n1": "build", "n2": "push", "n3": "push"}
    for h in ("n2", "n3"):
        assert any(p.endswith("toy-0.1-py3-none-any.whl") for k, p in fake.HOSTS[h].log if k == "put")
        assert fake.HOSTS[h].files.get("/venv-state/toy")


def test_build_host_var_picks_the_builder(fake_kind, tmp_path):
    hosts = make_hosts(["n1", "n2"], n1={"build_host": "n2"}, n2={"build_host": "n2"})
    model, _ = run(playbook(tmp_path), hosts)
    assert actions(model) == {"n1": "push", "n2": "build"}


def test_a_builder_lost_mid_build_hands_the_build_to_the_next_member(fake_kind, tmp_path):
    hosts = make_hosts(["n1", "n2", "n3"])
    fake.HOSTS["n1"].drop_after = "--wheel-dir"
    fake.HOSTS["n2"].delay_s = 0.05  # n3 waits first; n2 (next in inventory order) still takes over
    model, ev = run(playbook(tmp_path), hosts)
    assert model.hosts["n1"].status == "unreachable"
    # the host's line names the task it was lost in, not its command (fresh operator's trial:
    # "connection lost during /bin/sh", the build task named only by `fleetctl logs`)
    assert model.hosts["n1"].error == "connection lost during task 'build' (build_wheel)", model.hosts["n1"].error
    assert [(t.name, t.status) for t in model.hosts["n1"].tasks][-2:] == [("upload", "changed"),
                                                                        ("build", "unreachable")]
    assert model.hosts["n2"].status == model.hosts["n3"].status == "ok"
    assert [h for h in ("n2", "n3") if fake.HOSTS[h].ran("--wheel-dir")] == ["n2"]
    assert any(e.name == "class.builder_changed" and e.host == "n2" for e in ev.events)


def test_an_unreachable_host_never_stops_the_others(fake_kind, tmp_path):
    hosts = make_hosts(["n1", "n2"])
    fake.HOSTS["n1"].unreachable = "connection refused by n1:22"
    model, _ = run(playbook(tmp_path), hosts)
    assert model.hosts["n1"].status == "unreachable" and "refused" in model.hosts["n1"].error
    assert [(t.action, t.status) for t in model.hosts["n1"].tasks] == [("connect", "unreachable")]
    assert [p.phase for p in model.hosts["n1"].phases] == ["connect"]
    assert model.hosts["n2"].status == "ok"
    assert fake.HOSTS["n2"].ran("--wheel-dir")


def test_a_preflight_failure_stops_the_host_before_anything_is_uploaded(fake_kind, tmp_path):
    hosts = make_hosts(["bad", "good"], bad={"cuda_home": "/opt/cuda-12.9"})
    model, _ = run(playbook(tmp_path), hosts)
    bad = model.hosts["bad"]
    assert bad.status == "failed" and "cuda_home /opt/cuda-12.9 has no bin/nvcc" in bad.error
    assert not [p for k, p in fake.HOSTS["bad"].log if k == "put" and "/src/" in p]
    assert not fake.HOSTS["bad"].ran("--wheel-dir")
    assert model.hosts["good"].status == "ok"


def test_a_dry_run_changes_nothing_and_lists_every_step(fake_kind, tmp_path):
    hosts = make_hosts(["n1"])
    model, ev = run(playbook(tmp_path), hosts, mode="dry-run")
    log = fake.HOSTS["n1"].log
    assert not [p for k, p in log if k == "put" and "/src/" in p]
    assert not fake.HOSTS["n1"].ran("--wheel-dir") and not pip_installs("n1")
    planned = [s for t in model.hosts["n1"].tasks for s in t.planned]
    assert any("--wheel-dir" in s.get("argv", []) for s in planned)
    assert any(unwrap_modes(s.get("argv", []))[:4] == ["/venv/bin/python3", "-m", "pip", "install"] for s in planned)
    assert any(e.name == "step.planned" for e in ev.events)


def test_a_deploy_that_changes_nothing_asks_each_question_once(fake_kind, tmp_path):
    hosts = make_hosts(["n1"])
    pb = playbook(tmp_path)
    run(pb, hosts)
    fake.HOSTS["n1"].log.clear()
    model, _ = run(pb, hosts)
    assert [t.status for t in model.hosts["n1"].tasks] == ["ok", "ok", "ok", "ok"]
    cmds = [json.dumps(a) for a in fake.HOSTS["n1"].commands() if "facts.py" not in " ".join(a)
            and "fleetctl-mkdir" not in a]
    assert len(cmds) == len(set(cmds)), "a probe ran twice: the planning pass's answers were not reused"
    assert not fake.HOSTS["n1"].ran("--wheel-dir") and not pip_installs("n1")


def test_tasks_outside_tags_are_planned_so_install_finds_the_built_wheel(fake_kind, tmp_path):
    hosts = make_hosts(["n1"])
    pb = playbook(tmp_path)
    run(pb, hosts, tags=("build",))
    assert not fake.HOSTS["n1"].files.get("/venv-state/toy")
    fake.HOSTS["n1"].log.clear()
    model, _ = run(pb, hosts, tags=("install",))
    assert model.hosts["n1"].status == "ok", model.hosts["n1"].error
    tasks = {t.name: t for t in model.hosts["n1"].tasks}
    assert tasks["build"].status == "skipped" and not tasks["build"].selected
    assert tasks["install"].status == "changed"
    assert not fake.HOSTS["n1"].ran("--wheel-dir")
    assert fake.HOSTS["n1"].files.get("/venv-state/toy")


def test_plan_dry_run_and_deploy_agree_on_a_mixed_fleet(fake_kind, tmp_path):
    pb = playbook(tmp_path)
    hosts = make_hosts(["uptodate", "fresh", "oldsrc", "newtorch", "badcuda"],
                       badcuda={"cuda_home": "/nowhere"})
    by = {h.name: h for h in hosts}
    run(pb, [by["oldsrc"]])                      # oldsrc: built from the old sources
    (tmp_path / "toy" / "mod.py").write_text("x = 2\n")
    run(pb, [by["uptodate"]])                    # uptodate: built from the new ones
    fake.HOSTS["newtorch"].facts["python"]["torch"] = "2.12.0+cu130"
    plan, _ = run(pb, hosts, mode="plan")
    dry, _ = run(pb, hosts, mode="dry-run")
    real, _ = run(pb, hosts)
    expected = {"uptodate": "reuse", "fresh": "push", "oldsrc": "push", "newtorch": "build", "badcuda": "fail"}
    assert actions(plan) == actions(dry) == actions(real) == expected
    assert real.hosts["badcuda"].status == "failed"
    assert sorted(h for h in fake.HOSTS if fake.HOSTS[h].ran("--wheel-dir")) == ["newtorch", "oldsrc", "uptodate"]


def test_a_deploy_that_changes_nothing_is_one_command_per_host(fake_kind, tmp_path):
    """Facts, the deploy lock, the stamps and install state the planners ask: all in the host's first
    command (the probes asked last time are answered ahead, keyed as the planners ask them)."""
    hosts = make_hosts(["n1", "n2"])
    pb = playbook(tmp_path)
    first, _ = run(pb, hosts, host_lock=True)
    assert all(o.status == "ok" for o in first.hosts.values())
    for h in fake.HOSTS.values():
        h.execs.clear()
        h.log.clear()
    model, ev = run(pb, hosts, host_lock=True)
    for name, h in fake.HOSTS.items():
        assert [t.status for t in model.hosts[name].tasks] == ["ok", "ok", "ok", "ok"]
        assert len(h.execs) == 1 and h.execs[0][:3] == ["python3", "-S", "-c"], h.execs  # the first command only
        # ... and the probes it answered ran there, each once
        probes = [json.dumps(a) for k, a in h.log if k == "run" and a[:3] != ["python3", "-S", "-c"]]
        assert probes and len(probes) == len(set(probes))
        assert h.files[f"/w/{name}/deploy.lock"] == b""  # released at the end
    answered = [e for e in ev.events if e.name == "probes.answered_ahead"]
    assert sorted(e.host for e in answered) == ["n1", "n2"] and all(e.data["count"] >= 3 for e in answered)


def test_answers_ahead_are_read_in_this_run_so_a_package_removed_by_hand_is_reinstalled(fake_kind, tmp_path):
    hosts = make_hosts(["n1"])
    pb = playbook(tmp_path)
    run(pb, hosts)
    del fake.HOSTS["n1"].files["/venv-state/toy"]  # pip uninstall by hand
    model, _ = run(pb, hosts)
    tasks = {t.name: t for t in model.hosts["n1"].tasks}
    assert tasks["install"].status == "changed" and tasks["install"].data["decision"]["why"] == "nothing installed"
    assert fake.HOSTS["n1"].files.get("/venv-state/toy")
    again, _ = run(pb, hosts)  # and then it is in place again
    assert {t.name: t.status for t in again.hosts["n1"].tasks}["install"] == "ok"


def test_a_prediction_that_misses_only_costs_a_question(fake_kind, tmp_path):
    hosts = make_hosts(["n1"])
    pb = playbook(tmp_path)
    run(pb, hosts)
    (tmp_path / "toy" / "new.py").write_text("x = 1\n")  # the copy task now lists another file
    fake.HOSTS["n1"].execs.clear()
    model, _ = run(pb, hosts, mode="plan")
    tasks = {t.name: t for t in model.hosts["n1"].tasks}
    assert tasks["upload"].data["decision"] == {"action": "upload", "files": 1}
    execs = fake.HOSTS["n1"].execs
    assert [a[0] for a in execs[:2]] == ["python3", "/bin/sh"]  # the new listing: asked on its own
    assert "sha256sum" in execs[1][2]
    assert not [a for a in execs if "fleetctl-stamps" in a]  # the stamps were answered ahead all the same


def test_eight_hosts_of_two_arch_classes_build_exactly_twice(fake_kind, tmp_path):
    names = [f"g{i}" for i in range(1, 9)]
    hosts = make_hosts(names)
    for name in names[4:]:  # half the fleet is SM 12.0
        fake.HOSTS[name].facts["gpus"] = [{"index": 0, "name": "NVIDIA RTX PRO 6000 Blackwell", "compute_cap": "12.0",
                                           "memory_mib": 97887}]
    model, _ = run(playbook(tmp_path), hosts)
    assert all(o.status == "ok" for o in model.hosts.values()), {h: o.error for h, o in model.hosts.items()}
    builders = sorted(h for h in names if fake.HOSTS[h].ran("--wheel-dir"))
    assert builders == ["g1", "g5"]  # one build per class, by the first member
    assert actions(model) == {**{h: "push" for h in names}, "g1": "build", "g5": "build"}
    archs = {h: [t for t in o.tasks if t.action == "build_wheel"][0].data["archs"] for h, o in model.hosts.items()}
    assert {archs[h] for h in names[:4]} == {"9.0a"} and {archs[h] for h in names[4:]} == {"12.0a"}
    each, _ = run(playbook(tmp_path, TOY.replace("tool: pip}", "tool: pip, build: each}")), hosts, force=True)
    assert sum(len(fake.HOSTS[h].ran("--wheel-dir")) for h in names) == 2 + 8  # --build each: every host


def test_a_batch_larger_than_forks_builds_once_per_class_with_forks_hosts_connected_at_once(fake_kind, tmp_path):
    """Seven hosts of two classes, two forks: the batch is taken on two hosts at a time (each
    host's connection closed once it is done), its classes settled group by group; each class is
    still built once, by the host its build_host names (w7, last in inventory order: taken on
    first) or by its first member, and the rest get that wheel; --plan says the same before."""
    names = [f"w{i}" for i in range(1, 8)]
    hosts = make_hosts(names, **{h: {"build_host": "w7"} for h in names[4:]})
    for name in names[4:]:  # w5..w7 are SM 12.0, w1..w4 SM 9.0
        fake.HOSTS[name].facts["gpus"] = [{"index": 0, "name": "NVIDIA RTX PRO 6000 Blackwell", "compute_cap": "12.0",
                                           "memory_mib": 97887}]
    want = {**{h: "push" for h in names}, "w1": "build", "w7": "build"}
    planned, _ = run(playbook(tmp_path), hosts, mode="plan", forks=2)
    assert actions(planned) == want
    fake.OPEN.update(now=0, peak=0)
    model, _ = run(playbook(tmp_path), hosts, forks=2)
    assert all(o.status == "ok" for o in model.hosts.values()), {h: o.error for h, o in model.hosts.items()}
    assert fake.OPEN == {"now": 0, "peak": 2}
    assert sorted(h for h in names if fake.HOSTS[h].ran("--wheel-dir")) == ["w1", "w7"]
    assert actions(model) == want
    assert all(fake.HOSTS[h].files.get("/venv-state/toy") for h in names)


class _SlowConnects(Events):
    """Events, and connects that hang (an sshd that never sends its banner) until every host in
    ``first`` has finished: they end only then, or after a long safety wait (so a regression fails
    on the order below instead of hanging)."""

    def __init__(self, first: set[str]):
        super().__init__()
        self.first, self.done = set(first), set()
        self.release = asyncio.Event()

    def event(self, run, ev):
        super().event(run, ev)
        if ev.name == "host.finished" and ev.host in self.first:
            self.done.add(ev.host)
            if self.done == self.first:
                self.release.set()

    def hang(self, name: str, *, then_unreachable: str | None = None):
        async def wait():
            try:
                await asyncio.wait_for(self.release.wait(), 15)
            except asyncio.TimeoutError:
                pass
            self.events.append(type("Mark", (), {"name": "connect.ended", "host": name})())
            fake.HOSTS[name].unreachable = then_unreachable
        fake.HOSTS[name].connect_wait = wait


def _run_with(pb, hosts, ev, **opts):
    model = RunModel(kind="deploy", mode=opts.get("mode", "apply"))
    asyncio.run(run_playbook(pb, hosts, run=model, observers=Observers(model, [ev]), opts=PlayOptions(**opts)))
    return model


def test_hosts_still_connecting_delay_no_one_and_join_their_class_when_they_arrive(fake_kind, tmp_path):
    """n1 would build its class (first in inventory order) and n3 is alone in its class, but both
    hang in connect: n2 must not wait for them. n2 builds and finishes; then n1 arrives late and
    gets n2's wheel, and n3 builds its own class's wheel."""
    hosts = make_hosts(["n1", "n2", "n3"])
    fake.HOSTS["n3"].facts["gpus"] = [{"index": 0, "name": "NVIDIA RTX PRO 6000 Blackwell", "compute_cap": "12.0",
                                       "memory_mib": 97887}]
    ev = _SlowConnects({"n2"})
    ev.hang("n1")
    ev.hang("n3")
    model = _run_with(playbook(tmp_path), hosts, ev, host_lock=True)
    assert {h: o.status for h, o in model.hosts.items()} == {"n1": "ok", "n2": "ok", "n3": "ok"}
    order = [(e.name, e.host) for e in ev.events]
    n2_done = order.index(("host.finished", "n2"))
    assert ("task.finished", "n2") in order[:n2_done]  # n2 applied its tasks ...
    assert n2_done < order.index(("connect.ended", "n1")) < order.index(("task.started", "n1"))
    assert n2_done < order.index(("connect.ended", "n3"))  # ... before the slow connects ended
    assert actions(model) == {"n1": "push", "n2": "build", "n3": "build"}
    assert sorted(h for h in fake.HOSTS if fake.HOSTS[h].ran("--wheel-dir")) == ["n2", "n3"]
    assert fake.HOSTS["n1"].files.get("/venv-state/toy")


def test_a_host_hung_in_connect_is_reported_unreachable_and_plans_show_each_host_once(fake_kind, tmp_path):
    pb = playbook(tmp_path)
    hosts = make_hosts(["dead", "n2", "n3"])
    for mode in ("plan", "dry-run", "apply"):
        ev = _SlowConnects({"n2", "n3"})
        ev.hang("dead", then_unreachable="connection to dead:22 timed out")
        model = _run_with(pb, hosts, ev, mode=mode)
        assert {h: o.status for h, o in model.hosts.items()} == {"dead": "unreachable", "n2": "ok", "n3": "ok"}, mode
        assert model.hosts["dead"].error == "connection to dead:22 timed out"
        order = [(e.name, e.host) for e in ev.events]
        assert order.index(("host.finished", "n3")) < order.index(("connect.ended", "dead")), mode
        assert actions(model) == {"dead": "unreachable", "n2": "build", "n3": "push"}, mode
        if mode != "apply":  # each host's final plan, shown once
            shown = [(e.host, e.data["task"]) for e in ev.events if e.name == "task.finished"]
            assert sorted(shown) == sorted((h, t) for h in ("n2", "n3") for t in ("upload", "build", "install")), mode


def envs_script(host, argv, env, cwd):
    """The host side of the staged-environment actions (``venv_envs.py status|stage|switch``) on a
    fake host: versions are numbers in ``host.files['/envs.json']`` (live, last made)."""
    if len(argv) < 3 or not argv[1].endswith("venv_envs.py"):
        return None
    state = json.loads(host.files.get("/envs.json", b'{"live": 1, "last": 1}'))
    opt = {argv[i]: argv[i + 1] for i in range(3, len(argv) - 1) if argv[i].startswith("--")}
    vd = "/w/envs/serve"
    env_of = lambda v: {"version": v, "torch": host.facts["python"]["torch"], "kernels": {}}  # noqa: E731
    if argv[2] == "status":
        out = {"kind": "symlink", "live": "/venv", "live_kind": "symlink", "target": f"{vd}/v{state['live']}",
               "live_version": state["live"], "versions_dir": vd, "next": state["last"] + 1, "same_fs": True,
               "versions": {str(v): {} for v in range(1, state["last"] + 1)}, "staged_version": None,
               "environment": env_of(state["live"])}
    elif argv[2] == "stage":
        state["last"] += 1
        out = {"version": state["last"], "path": f"{vd}/v{state['last']}", "linked_files": 10, "packages": 3}
    elif argv[2] == "switch":
        new = int(opt["--venv"].rsplit("/v", 1)[1])
        out = {"changed": True, "from": state["live"], "to": new, "live": "/venv", "removed": [],
               "environment": env_of(new)}
        state["live"] = new
    else:
        return 1, "", f"unknown {argv[2]}\n"
    host.files["/envs.json"] = json.dumps(state).encode()
    host.links["/venv"] = f"{vd}/v{state['live']}"  # the live path is a symlink to the live version
    return 0, json.dumps({"ok": True, **out}) + "\n", ""


def staged_hosts(names):
    hosts = make_hosts(names)
    for name in names:
        fake.HOSTS[name].handlers.insert(0, envs_script)
    return hosts


def env_tasks(model, host="n1") -> dict[str, tuple[str, str, str]]:
    """venv_stage / venv_switch -> (status, decided action, msg) on ``host``."""
    return {t.action: (t.status, (t.data.get("decision") or {}).get("action"), t.msg)
            for t in model.hosts[host].tasks if t.action in ("venv_stage", "venv_switch")}


def test_a_staged_deploy_with_nothing_to_change_keeps_the_live_venv(fake_kind, tmp_path):
    """--staged over a host where nothing would change: no new version, no switch, in --plan,
    --dry-run and the deploy alike; once something changes, the deploy stages again."""
    from fleetctl.playbook.staged import staged_playbook

    pb = staged_playbook(playbook(tmp_path))
    hosts = staged_hosts(["n1"])
    first, _ = run(pb, hosts)
    assert first.hosts["n1"].status == "ok", first.hosts["n1"].error
    assert env_tasks(first)["venv_stage"][:2] == ("changed", "stage")
    assert json.loads(fake.HOSTS["n1"].files["/envs.json"]) == {"live": 2, "last": 2}

    keep = ("ok", "skip", "nothing to change: the live venv stays v2")
    plan, _ = run(pb, hosts, mode="plan")
    dry, _ = run(pb, hosts, mode="dry-run")
    fake.HOSTS["n1"].log.clear()
    again, _ = run(pb, hosts)
    for model in (plan, dry, again):
        assert model.hosts["n1"].status == "ok", model.hosts["n1"].error
        assert env_tasks(model) == {"venv_stage": keep, "venv_switch": keep}
        assert all(t.status == "ok" for t in model.hosts["n1"].tasks), [(t.name, t.status) for t in model.hosts["n1"].tasks]
    assert not [t.planned for t in dry.hosts["n1"].tasks if t.action.startswith("venv_") and t.planned]
    assert not fake.HOSTS["n1"].ran("stage") and not fake.HOSTS["n1"].ran("switch")
    assert json.loads(fake.HOSTS["n1"].files["/envs.json"]) == {"live": 2, "last": 2}
    env = again.hosts["n1"].environment
    assert env["state"] == "live" and env["switched"] is False and env["live"]["version"] == 2

    # the sources change: the build and install would change the venv, so it is staged again
    (tmp_path / "toy" / "mod.py").write_text("x = 3\n")
    plan, _ = run(pb, hosts, mode="plan")
    assert env_tasks(plan)["venv_stage"][:2] == ("changed", "stage")
    assert env_tasks(plan)["venv_switch"][:2] == ("changed", "switch")
    real, _ = run(pb, hosts)
    assert env_tasks(real)["venv_switch"][:2] == ("changed", "switch")
    assert json.loads(fake.HOSTS["n1"].files["/envs.json"]) == {"live": 3, "last": 3}


def test_a_play_that_always_changes_something_still_stages(fake_kind, tmp_path):
    pb = playbook(tmp_path, TOY.replace("tasks:\n", "tasks:\n  - name: stage\n    venv_stage: {}\n"
                                                   "  - name: upgrade\n    command: {argv: [echo, upgraded]}\n", 1)
                  + "  - name: switch\n    venv_switch: {to: staged}\n")
    hosts = staged_hosts(["n1"])
    run(pb, hosts)
    plan, _ = run(pb, hosts, mode="plan")
    real, _ = run(pb, hosts)
    for model in (plan, real):
        assert "venv_switch" in env_tasks(model), [(t.name, t.status, t.msg) for t in model.hosts["n1"].tasks]
        assert env_tasks(model)["venv_stage"][:2] == ("changed", "stage")
        assert env_tasks(model)["venv_switch"][:2] == ("changed", "switch")
    assert json.loads(fake.HOSTS["n1"].files["/envs.json"]) == {"live": 3, "last": 3}


def test_force_rebuilds_even_when_the_controller_cache_holds_the_class_wheel(fake_kind, tmp_path):
    """--force is for a wheel the operator suspects: the builder builds again (not the cache's wheel,
    not its own stamp's), the new wheel replaces the cached one and reaches every member."""
    from fleetctl.engine.classes import wheels_root
    from fleetctl.reporting.plan_table import plan_rows

    pb = playbook(tmp_path)
    hosts = make_hosts(["n1", "n2"])
    run(pb, hosts)
    assert {h: len(fake.HOSTS[h].ran("--wheel-dir")) for h in fake.HOSTS} == {"n1": 1, "n2": 0}
    # the cached wheel goes bad (its record still agrees with it)
    (record,) = wheels_root().glob("*/record.json")
    rec = json.loads(record.read_text())
    bad = record.parent / rec["name"]
    bad.write_bytes(b"a bad wheel")
    record.write_text(json.dumps({**rec, "size": bad.stat().st_size, "sha256": "0" * 64}))

    unforced, _ = run(pb, hosts, mode="plan")
    assert actions(unforced) == {"n1": "reuse", "n2": "reuse"}
    plan, _ = run(pb, hosts, mode="plan", force=True)
    dry, _ = run(pb, hosts, mode="dry-run", force=True)
    assert actions(plan) == actions(dry) == {"n1": "build", "n2": "push"}
    rows = plan_rows(plan.as_json()["hosts"])
    assert [b["action"] for b in rows["n1"]["builds"]] == ["build (forced)"]
    assert "(forced: --force" in [t.msg for t in dry.hosts["n1"].tasks if t.action == "build_wheel"][0]
    assert {h: len(fake.HOSTS[h].ran("--wheel-dir")) for h in fake.HOSTS} == {"n1": 1, "n2": 0}

    real, _ = run(pb, hosts, force=True)
    assert all(o.status == "ok" for o in real.hosts.values()), {h: o.error for h, o in real.hosts.items()}
    assert actions(real) == {"n1": "build", "n2": "push"}
    assert {h: len(fake.HOSTS[h].ran("--wheel-dir")) for h in fake.HOSTS} == {"n1": 2, "n2": 0}
    fresh = fake.HOSTS["n1"].files[[p for p in fake.HOSTS["n1"].files if p.endswith(".whl")][0]]
    assert bad.read_bytes() == fresh and json.loads(record.read_text())["sha256"] != "0" * 64
    n2_wheel = [p for p in fake.HOSTS["n2"].files if p.endswith(".whl")][0]
    assert fake.HOSTS["n2"].files[n2_wheel] == fresh
    assert len(pip_installs("n1")) == len(pip_installs("n2")) == 2  # reinstalled on both


def test_a_wheel_that_is_not_what_its_stamp_recorded_is_rebuilt_never_reused_or_installed(fake_kind, tmp_path):
    """A build stamp is trusted only for the wheel it describes: its size and mtime (stat, in the
    stamps probe) decide a no-change run without hashing; a size that differs (a truncated wheel)
    means a rebuild, with a line saying why, and the install takes the rebuilt wheel; a size that
    agrees with another mtime is settled by the wheel's sha256 (new-user trial: a truncated wheel
    was reused until --force)."""
    import hashlib
    import posixpath

    from tests.support.fake_connection import fake_mtime

    pb = playbook(tmp_path)
    hosts = make_hosts(["n1"])
    run(pb, hosts)
    files = fake.HOSTS["n1"].files
    (wheel,) = [p for p in files if p.endswith(".whl") and "/wheels/" in p]
    good, stamp_path = files[wheel], posixpath.join(posixpath.dirname(wheel), ".fleetctl-build.json")
    stamp = json.loads(files[stamp_path])
    assert (stamp["size_bytes"], stamp["mtime_s"]) == (len(good), fake_mtime(good))

    def hashed():
        return fake.HOSTS["n1"].commands().count(["sha256sum", wheel])

    def build_msg(model):
        return [t.msg for t in model.hosts["n1"].tasks if t.action == "build_wheel"][0]

    same, _ = run(pb, hosts)  # nothing changed: size and mtime agree, the wheel is not read
    assert actions(same) == {"n1": "reuse"} and hashed() == 0

    why = (f"toy-0.1-py3-none-any.whl is 5 bytes, its build stamp says {len(good)} (truncated or replaced since it "
           "was built)")
    # truncated, and the install removed by hand: the install needs a wheel. The controller's cache
    # holds the class's wheel, but n1 built it: a host is never pushed its own wheel, it rebuilds
    files[wheel] = good[:5]
    del files["/venv-state/toy"]
    for mode in ("plan", "dry-run"):
        model, ev = run(pb, hosts, mode=mode)
        assert actions(model) == {"n1": "build"}, (mode, build_msg(model))
        assert f"{why}: not reused (built again, or its arch class's wheel received)" in [
            e.data.get("message") for e in ev.events if e.name == "note.added"], mode
    real, _ = run(pb, hosts)
    assert real.hosts["n1"].status == "ok" and actions(real) == {"n1": "build"}
    assert build_msg(real).endswith(f"(rebuilt: {why})"), build_msg(real)
    assert files[wheel] == good and files["/venv-state/toy"] == hashlib.sha256(good).hexdigest().encode()
    # without it (another controller, a cleared cache), the host rebuilds too
    from fleetctl.engine.classes import wheels_root
    import shutil

    shutil.rmtree(wheels_root())
    files[wheel] = good[:5]
    del files["/venv-state/toy"]
    plan, _ = run(pb, hosts, mode="plan")
    assert actions(plan) == {"n1": "build"}
    real, _ = run(pb, hosts)
    assert real.hosts["n1"].status == "ok" and actions(real) == {"n1": "build"}
    assert build_msg(real).endswith(f"(rebuilt: {why})"), build_msg(real)
    assert files[wheel] == good and len(fake.HOSTS["n1"].ran("--wheel-dir")) == 3
    assert files["/venv-state/toy"] == hashlib.sha256(good).hexdigest().encode()  # the rebuilt wheel, not 5 bytes
    assert hashed() == 0  # the size said it: no hash

    stamp = json.loads(files[stamp_path])  # the wheel touched (another mtime, same bytes): hashed, reused
    files[stamp_path] = json.dumps({**stamp, "mtime_s": stamp["mtime_s"] - 60}).encode()
    touched, _ = run(pb, hosts)
    assert actions(touched) == {"n1": "reuse"} and hashed() == 1

    files[wheel] = bytes(reversed(good))  # other bytes of the same size: the sha256 says so
    flipped, ev = run(pb, hosts, mode="plan")
    assert actions(flipped) == {"n1": "build"}  # the cache holds the class's wheel again, n1's own
    notes = [e.data.get("message", "") for e in ev.events if e.name == "note.added"]
    assert any(n.startswith("toy-0.1-py3-none-any.whl's sha256 is ") and "its build stamp says "
               f"{stamp['sha256'][:12]}... (changed since it was built): not reused" in n for n in notes), notes

    forced, ev = run(pb, hosts, mode="plan", force=True)  # --force rebuilds without asking the wheel
    assert actions(forced) == {"n1": "build"}
    assert not [e for e in ev.events if e.name == "note.added" and "build stamp" in e.data.get("message", "")]
    assert len(fake.HOSTS["n1"].ran("--wheel-dir")) == 3  # plans build nothing

    # a single host whose class wheel is cached: --force builds there too (it used to push the cache's)
    solo = make_hosts(["n3"])
    plan, _ = run(pb, solo, mode="plan")
    assert actions(plan) == {"n3": "push"}
    plan, _ = run(pb, solo, mode="plan", force=True)
    assert actions(plan) == {"n3": "build"}


def test_install_alone_on_a_fresh_host_says_to_build_first(fake_kind, tmp_path):
    hosts = make_hosts(["n1"])
    pb = playbook(tmp_path)
    for mode in ("plan", "apply"):
        model, _ = run(pb, hosts, tags=("install",), mode=mode)
        o = model.hosts["n1"]
        assert o.status == "failed"
        assert [t.msg for t in o.tasks if t.name == "install"] == [
            "no wheel was built on this host yet: run with --tags build first, or without --tags"]
    assert not pip_installs("n1") and not fake.HOSTS["n1"].ran("--wheel-dir")


def test_a_planner_that_raises_fails_its_host_alone_never_the_run(fake_kind, tmp_path, monkeypatch):
    """A bug in a planner (any exception that is not a FleetError) is that task's failure on that
    host, named as fleetctl's fault, with the traceback in events.jsonl; the other hosts run on."""
    from fleetctl import tasks
    from fleetctl.status import Status
    from fleetctl.tasks.argtypes import ActionArgs
    from fleetctl.tasks.base import Action, TaskResult
    from fleetctl.tasks.steps import probe

    def plan(args, host):
        yield probe(["true"], "a question first")
        if host.name == "n1":
            raise KeyError("no such fact")
        return TaskResult(Status.OK, msg="fine")

    monkeypatch.setitem(tasks.ACTIONS, "boom", Action(name="boom", args=ActionArgs, phase="command",
                                                      timeout_s=60.0, plan=plan))
    pb = playbook(tmp_path, "name: boom\nhosts: all\ntasks:\n  - name: may raise\n    boom: {}\n")
    model, ev = run(pb, make_hosts(["n1", "n2"]))
    assert model.hosts["n2"].status == "ok"
    assert model.hosts["n1"].status == "failed"
    msg = model.hosts["n1"].tasks[-1].msg
    assert msg.startswith("fleetctl's boom planner failed: KeyError: 'no such fact' (a fault of fleetctl"), msg
    crashed = [e for e in ev.events if e.name == "task.crashed"]
    assert len(crashed) == 1 and crashed[0].host == "n1" and "KeyError" in crashed[0].data["traceback"]


def test_a_member_that_cannot_build_receives_its_class_wheel_from_one_that_can(fake_kind, tmp_path):
    """A host whose venv lacks a build requirement is not refused when a member of its arch class
    can build: it receives the wheel (a receiver needs no build tools); the builder is the first
    member that passed the build preflight, even when the one that did not comes first."""
    hosts = make_hosts(["n1", "n2", "n3"])
    fake.HOSTS["n1"].facts["missing_modules"] = ["setuptools"]
    model, _ = run(playbook(tmp_path), hosts)
    assert {h: o.status for h, o in model.hosts.items()} == {"n1": "ok", "n2": "ok", "n3": "ok"}
    assert actions(model) == {"n1": "push", "n2": "build", "n3": "push"}
    assert [h for h in fake.HOSTS if fake.HOSTS[h].ran("--wheel-dir")] == ["n2"]
    n1 = [t for t in model.hosts["n1"].tasks if t.action == "build_wheel"][0]
    assert "setuptools" in n1.data["decision"]["cannot_build"] and fake.HOSTS["n1"].files.get("/venv-state/toy")


def test_a_member_short_of_the_builds_disk_space_receives_its_class_wheel(fake_kind, tmp_path):
    """New-user trial: every member had to have the build's min_free_disk_mib (2048 MiB) free, though
    only the builder builds. n1 (first, so the builder it would be) has room for the wheel only: n2
    builds and n1 receives; n3 lacks room for the wheel too (512 MiB) and fails alone, nothing sent."""
    hosts = make_hosts(["n1", "n2", "n3"])
    fake.HOSTS["n1"].facts["disk_free_mib"] = 1000
    fake.HOSTS["n3"].facts["disk_free_mib"] = 300
    model, _ = run(playbook(tmp_path), hosts)
    assert {h: o.status for h, o in model.hosts.items()} == {"n1": "ok", "n2": "ok", "n3": "failed"}
    assert actions(model) == {"n1": "push", "n2": "build", "n3": "fail"}
    assert [h for h in fake.HOSTS if fake.HOSTS[h].ran("--wheel-dir")] == ["n2"]
    n1 = [t for t in model.hosts["n1"].tasks if t.action == "build_wheel"][0]
    assert "the build needs 2048 MiB" in n1.data["decision"]["cannot_build"] and pip_installs("n1")
    assert "only 300 MiB free" in model.hosts["n3"].error, model.hosts["n3"].error
    assert "receiving this arch class's wheel (not building it) needs 512 MiB" in model.hosts["n3"].error
    assert not pip_installs("n3") and not [f for f in fake.HOSTS["n3"].files if f.endswith(".whl")]


def test_a_class_none_of_whose_members_can_build_fails_every_member_with_the_preflights_line(fake_kind, tmp_path):
    hosts = make_hosts(["n1", "n2"])
    for h in ("n1", "n2"):
        fake.HOSTS[h].facts["missing_modules"] = ["setuptools"]
    model, _ = run(playbook(tmp_path), hosts)
    assert model.hosts["n1"].status == model.hosts["n2"].status == "failed"
    assert "preflight:" in model.hosts["n1"].error and "setuptools" in model.hosts["n1"].error
    # n1 (first in inventory order) was the builder; failed while planning, it hands the build to n2,
    # which cannot build either and says why in its own words
    assert "preflight:" in model.hosts["n2"].error and "setuptools" in model.hosts["n2"].error
    assert not any(fake.HOSTS[h].ran("--wheel-dir") for h in fake.HOSTS) and not pip_installs("n2")


def test_the_plan_of_a_class_no_member_can_build_says_so_for_every_member(fake_kind, tmp_path):
    """New-user trial: ``--plan`` said ``push`` for n2 and n3 (a wheel no member would build): each
    member of such a class is planned to fail, with its own reason."""
    hosts = make_hosts(["n0", "n1", "n2", "n3"])
    fake.HOSTS["n0"].facts["cuda"] = {**fake.HOSTS["n0"].facts["cuda"], "nvcc": None}  # no nvcc: in no class
    fake.HOSTS["n1"].facts["missing_modules"] = ["setuptools"]
    fake.HOSTS["n2"].facts["missing_modules"] = ["setuptools"]
    fake.HOSTS["n3"].facts["disk_free_mib"] = 1000  # short of the build's 2048 MiB
    for mode in ("plan", "dry-run", "apply"):
        model, ev = run(playbook(tmp_path), hosts, mode=mode)
        assert actions(model) == {"n0": "fail", "n1": "fail", "n2": "fail", "n3": "fail"}, mode
        errors = {h: o.error for h, o in model.hosts.items()}
        assert all(e.startswith("build: preflight: ") for e in errors.values()), errors
        told = {e.host for e in ev.events if e.name == "note.added" and e.data.get("message", "").startswith(
            "no host of this arch class (n1, n2, n3) can build its wheel: none receives it")}
        if mode != "apply":  # a deploy shows each host's own line (the note is told while planning)
            assert told == {"n1", "n2", "n3"}, mode
        assert "setuptools" in errors["n1"] + errors["n2"] and "the build needs 2048 MiB" in errors["n3"]
        assert "nvcc not found" in errors["n0"]
    assert not any(fake.HOSTS[h].ran("--wheel-dir") for h in fake.HOSTS)


def test_build_each_still_refuses_a_host_that_cannot_build(fake_kind, tmp_path):
    hosts = make_hosts(["n1", "n2"])
    fake.HOSTS["n1"].facts["missing_modules"] = ["setuptools"]
    model, _ = run(playbook(tmp_path, TOY.replace("tool: pip}", "tool: pip, build: each}")), hosts)
    assert model.hosts["n1"].status == "failed" and "setuptools" in model.hosts["n1"].error
    assert model.hosts["n2"].status == "ok" and fake.HOSTS["n2"].ran("--wheel-dir")


def test_a_lost_builder_hands_the_build_to_a_member_that_can_build(fake_kind, tmp_path):
    hosts = make_hosts(["n1", "n2", "n3"])
    fake.HOSTS["n1"].drop_after = "--wheel-dir"
    fake.HOSTS["n2"].facts["missing_modules"] = ["setuptools"]  # next in inventory order, but cannot build
    model, _ = run(playbook(tmp_path), hosts)
    assert model.hosts["n1"].status == "unreachable"
    assert model.hosts["n2"].status == model.hosts["n3"].status == "ok", model.hosts["n2"].error
    assert [h for h in ("n2", "n3") if fake.HOSTS[h].ran("--wheel-dir")] == ["n3"]
    assert fake.HOSTS["n2"].files.get("/venv-state/toy")


NANOBIND_GONE = ("CMake Error at /venv/lib/python3.12/site-packages/nanobind/cmake/nanobind-config.cmake:158 "
                 "(add_library):\n  Cannot find source file:\n\n    /venv/lib/python3.12/site-packages/nanobind/src/"
                 "nb_func.cpp\n\nCall Stack (most recent call first):\n  CMakeLists.txt:20 (nanobind_build_library)\n")


def _build_fails(host, argv, env, cwd):
    """This host's build fails as a venv whose nanobind lost a source file makes it fail."""
    return (1, "", NANOBIND_GONE) if "wheel" in argv and "--wheel-dir" in argv else None


def test_a_build_that_fails_on_its_builder_is_tried_once_by_the_next_member_that_can_build(fake_kind, tmp_path):
    """Fresh operator's trial: u1's venv had a broken nanobind; its build failed the whole class
    although u2 and u3 could build. The next member that can build tries once: the first builder
    fails with its own cause, the others get the retry's wheel."""
    hosts = make_hosts(["n1", "n2", "n3", "n4"])
    fake.HOSTS["n1"].handlers.insert(0, _build_fails)
    fake.HOSTS["n2"].facts["missing_modules"] = ["setuptools"]  # next in inventory order, but cannot build
    model, ev = run(playbook(tmp_path), hosts, force=True)
    assert model.hosts["n1"].status == "failed" and "Cannot find source file: /venv/lib/python3.12/site-packages/" \
        "nanobind/src/nb_func.cpp" in model.hosts["n1"].error, model.hosts["n1"].error
    assert {h: model.hosts[h].status for h in ("n2", "n3", "n4")} == {"n2": "ok", "n3": "ok", "n4": "ok"}, \
        {h: o.error for h, o in model.hosts.items()}
    assert [h for h in ("n2", "n3", "n4") if fake.HOSTS[h].ran("--wheel-dir")] == ["n3"]
    assert actions(model) == {"n1": "build", "n2": "push", "n3": "build", "n4": "push"}
    assert any(e.name == "class.builder_changed" and e.host == "n3" for e in ev.events)


def test_a_build_that_fails_again_on_the_retry_fails_the_class_with_both_causes_and_no_third_try(fake_kind, tmp_path):
    """A real source error fails everywhere: one retry per class, then every member fails naming it."""
    hosts = make_hosts(["n1", "n2", "n3"])
    for h in hosts:
        fake.HOSTS[h.name].handlers.insert(0, _build_fails)
    model, _ = run(playbook(tmp_path), hosts, force=True)
    assert {h: o.status for h, o in model.hosts.items()} == {"n1": "failed", "n2": "failed", "n3": "failed"}
    assert [h for h in fake.HOSTS if fake.HOSTS[h].ran("--wheel-dir")] == ["n1", "n2"]  # no third try
    assert "build failed (pip): CMake Error at" in model.hosts["n2"].error, model.hosts["n2"].error
    err = model.hosts["n3"].error
    assert "the build of this arch class failed on its builder: n2: build failed (pip): CMake Error at" in err, err
    assert "(tried again after the first builder failed: n1: build failed (pip): CMake Error at" in err, err


@pytest.mark.parametrize("mode", ["dry-run", "apply"])
def test_a_host_failed_while_planning_is_in_no_class_so_the_plan_names_the_real_builder(fake_kind, tmp_path, mode):
    """n1 comes first; its build plans, but a later task refuses it before any command (as a verify
    preflight does): the dry run shows n2 building and n3 receiving, as the deploy does, never n1
    as the class's builder."""
    hosts = make_hosts(["n1", "n2", "n3"])
    for h in ("n1", "n2", "n3"):  # one class: the same CPU-only torch and arch list; only n1 has a GPU
        fake.HOSTS[h].facts["python"] = {**fake.HOSTS[h].facts["python"], "torch": "2.11.0+cpu", "torch_cuda": None}
        if h != "n1":
            fake.HOSTS[h].facts["gpus"] = []
    play = TOY.replace("tool: pip}", 'tool: pip, archs: "9.0a"}') + """
  - name: verify
    verify: {package: toy, smoke: false, needs_torch: true}
"""
    model, _ = run(playbook(tmp_path, play), hosts, mode=mode)
    assert model.hosts["n1"].status == "failed" and "CPU-only build" in model.hosts["n1"].error
    assert {h: a for h, a in actions(model).items() if h != "n1"} == {"n2": "build", "n3": "push"}
    assert [h for h in fake.HOSTS if fake.HOSTS[h].ran("--wheel-dir")] == (["n2"] if mode == "apply" else [])


def test_a_host_whose_first_command_hangs_after_connect_delays_the_others_a_grace_period_only(fake_kind, tmp_path,
                                                                                              monkeypatch):
    """n2 connects, then its first command hangs (a login rc file on a dead mount): n1 is settled
    after the grace period and deploys; n2 is let go only once n1 finished, and then joins late."""
    import threading

    from fleetctl.engine import runner

    monkeypatch.setattr(runner, "SETTLE_GRACE_S", 0.2)
    hosts = make_hosts(["n1", "n2"])
    released, by = threading.Event(), []

    class Release(Events):
        def event(self, run_, ev):
            super().event(run_, ev)
            if ev.name == "host.finished" and ev.host == "n1" and not released.is_set():
                by.append("n1")
                released.set()

    async def hang() -> None:
        while not released.is_set():
            await asyncio.sleep(0.05)

    fake.HOSTS["n2"].first_wait = hang
    watchdog = threading.Timer(20, lambda: (by.append("watchdog"), released.set()))
    watchdog.start()
    try:
        model, seen = RunModel(kind="deploy", mode="apply"), Release()
        asyncio.run(run_playbook(playbook(tmp_path), hosts, run=model, observers=Observers(model, [seen]),
                                 opts=PlayOptions()))
    finally:
        watchdog.cancel()
    assert by == ["n1"]  # n1 finished while n2 still hung
    # n1 said for whom it waited, and that it went on without it
    assert [(e.host, e.data["waiting_for"]) for e in seen.events if e.name == "class.waiting"] == [("n1", ["n2"])]
    assert [e.host for e in seen.events if e.name == "note.added"
            and e.data["message"].startswith("waited 0.2 s for n2 ")] == ["n1"]
    assert model.hosts["n1"].status == model.hosts["n2"].status == "ok"
    assert actions(model) == {"n1": "build", "n2": "push"}


def test_the_build_title_names_the_archs_built_after_an_archs_override(fake_kind, tmp_path):
    """The main playbook's build title names what the task builds: ``-e archs`` (in the build's
    order) when given, else the host's facts (new-user trial: after ``-e archs=...`` the title
    still named the facts' 9.0a while 10.0a;12.0a was built)."""
    import yaml

    from tests.support.fleet import REPO

    main = yaml.safe_load((REPO / "playbooks" / "fp4-kernels.yaml").read_text())  # the shipped title and args
    build = next(t for t in main["tasks"] if "build_wheel" in t)
    text = TOY.replace("  - name: build\n", f"  - name: {json.dumps(build['name'])}\n").replace(
        "tool: pip}", "tool: pip,\n                  archs: " + json.dumps(build["build_wheel"]["archs"]) + "}")
    pb = playbook(tmp_path, text)
    for extra, built in (({"archs": "12.0a;10.0a"}, "10.0a;12.0a"), ({}, "9.0a")):
        model, ev = run(pb, make_hosts(["n1"]), mode="dry_run", extra_vars=extra)
        task = next(t for t in model.hosts["n1"].tasks if t.action == "build_wheel")
        assert (task.data.get("decision") or {}).get("archs") == built, (task.status, task.msg)
        assert task.name == f"Build the wheel for {built}"
        started = [e.data["task"] for e in ev.events if e.name == "task.started" and e.data["action"] == "build_wheel"]
        assert started == [task.name]  # the live line [task N/M] too
    # an archs that reaches a host bad (prepare_play refuses a bad -e first; the engine alone does
    # not) fails that host under the rendered title, not the raw {{ ... }} template
    model, _ = run(pb, make_hosts(["n1"]), mode="dry_run", extra_vars={"archs": "sm_90a"})
    task = next(t for t in model.hosts["n1"].tasks if t.action == "build_wheel")
    assert task.status == "failed" and "got 'sm_90a'; did you mean '9.0a'?" in task.msg
    assert task.name == "Build the wheel for sm_90a"
