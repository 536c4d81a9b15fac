"""The engine over the fake connection (tests/support/fake_connection.py) for issue 23: the platform
is part of the build class, a wheel whose tag does not fit is never pushed or installed, and hosts
sharing one venv or workdir are refused alike in --plan, --dry-run and a deploy."""

from __future__ import annotations

from tests.support import fake_connection as fake
from tests.test_engine import TOY, actions, fake_kind, make_hosts, pip_installs, playbook, run  # noqa: F401


X86 = {"machine": "x86_64", "sysconfig": "linux-x86_64", "libc": "glibc", "libc_version": "2.36", "bits": 64}
ARM = {"machine": "aarch64", "sysconfig": "linux-aarch64", "libc": "glibc", "libc_version": "2.36", "bits": 64}


def platform_hosts(**plats):
    hosts = make_hosts(list(plats))
    for name, plat in plats.items():
        fake.HOSTS[name].facts["python"]["platform"] = dict(plat)
    return hosts


def wheels_put(name):
    return [p for k, p in fake.HOSTS[name].log if k == "put" and p.endswith(".whl")]


def test_hosts_of_another_platform_build_their_own_class_and_plan_says_so(fake_kind, tmp_path):
    from fleetctl.reporting.plan_table import plan_classes, plan_rows

    pb = playbook(tmp_path)
    hosts = platform_hosts(x1=X86, a1=ARM, x2=X86, a2=ARM)
    plan, _ = run(pb, hosts, mode="plan")
    dry, _ = run(pb, hosts, mode="dry-run")
    real, _ = run(pb, hosts)
    expected = {"x1": "build", "a1": "build", "x2": "push", "a2": "push"}
    assert actions(plan) == actions(dry) == actions(real) == expected
    assert all(o.status == "ok" for o in real.hosts.values())
    assert sorted(h for h in fake.HOSTS if fake.HOSTS[h].ran("--wheel-dir")) == ["a1", "x1"]
    assert all(p.endswith("linux_aarch64.whl") for p in wheels_put("a2")) and wheels_put("a2")
    assert all(p.endswith("linux_x86_64.whl") for p in wheels_put("x2")) and wheels_put("x2")
    lines = plan_classes(plan_rows({h: o.model_dump() for h, o in plan.hosts.items()}))
    assert len(lines) == 2
    assert any("x[1-2]" in line and "linux_x86_64 glibc 2.36 (build on x1)" in line for line in lines), lines
    assert any("a[1-2]" in line and "linux_aarch64 glibc 2.36 (build on a1)" in line for line in lines), lines


def test_another_libc_is_another_class(fake_kind, tmp_path):
    pb = playbook(tmp_path)
    hosts = platform_hosts(g1=X86, g2={**X86, "libc_version": "2.31"}, m1={**X86, "libc": "musl", "libc_version": "1.2.4"})
    real, _ = run(pb, hosts)
    assert actions(real) == {"g1": "build", "g2": "build", "m1": "build"}


def test_a_wheel_whose_tag_does_not_fit_is_never_pushed_even_when_the_keys_are_equal(fake_kind, tmp_path, monkeypatch):
    from fleetctl.tasks import build_keys

    monkeypatch.setattr(build_keys, "platform_inputs", lambda facts: {})  # something made the keys equal
    pb = playbook(tmp_path)
    hosts = platform_hosts(x1=X86, a1=ARM)
    real, _ = run(pb, hosts)
    assert actions(real) == {"x1": "build", "a1": "fail"}
    assert real.hosts["x1"].status == "ok" and real.hosts["a1"].status == "failed"
    assert real.hosts["a1"].error == ("build: a1: refusing toy-0.1-cp312-cp312-linux_x86_64.whl: its platform tag "
                                      "linux_x86_64 does not fit the host's platform linux_aarch64 glibc 2.36")
    assert not wheels_put("a1") and not pip_installs("a1")


def test_pip_install_refuses_a_wheel_the_host_cannot_load(fake_kind, tmp_path):
    text = TOY.replace('pip_install: {wheel: "{{ build.data.wheel }}"}', 'pip_install: {wheel: "/w/x86/toy-0.1-cp312-cp312-linux_x86_64.whl"}')
    pb = playbook(tmp_path, text)
    hosts = platform_hosts(a1=ARM)
    fake.HOSTS["a1"].files["/w/x86/toy-0.1-cp312-cp312-linux_x86_64.whl"] = b"x86 toy"
    real, _ = run(pb, hosts)
    install = [t for t in real.hosts["a1"].tasks if t.action == "pip_install"][0]
    assert install.status == "failed"
    assert install.msg.startswith("a1: refusing toy-0.1-cp312-cp312-linux_x86_64.whl: its platform tag linux_x86_64 "
                                  "does not fit the host's platform linux_aarch64 glibc 2.36")
    assert not pip_installs("a1")


def shared_hosts(names, shared, kind="venv", path="/nfs/rack1/venv"):
    hosts = make_hosts(names)
    for name in names:
        ident = "f" * 32 if name in shared else name * 8
        where = path if name in shared else f"/{name}/{kind}"
        fake.HOSTS[name].facts["targets"] = {kind: {"path": where, "id": ident, "error": None}}
    return hosts


def test_hosts_sharing_one_venv_are_refused_naming_both_in_plan_dry_run_and_deploy(fake_kind, tmp_path):
    pb = playbook(tmp_path)
    hosts = shared_hosts(["n1", "n2", "n3"], shared={"n1", "n3"})
    plan, _ = run(pb, hosts, mode="plan")
    dry, _ = run(pb, hosts, mode="dry-run")
    real, _ = run(pb, hosts)
    assert actions(plan) == actions(dry) == actions(real) == {"n1": "fail", "n2": "build", "n3": "fail"}
    for name in ("n1", "n3"):
        err = real.hosts[name].error
        assert real.hosts[name].status == "failed"
        assert "n1 and n3 share the venv /nfs/rack1/venv (one /nfs/rack1/venv/.fleetctl-id)" in err, err
        assert "give each host its own venv" in err and "found while planning" not in err.split(":")[0]
        assert not fake.HOSTS[name].ran("--wheel-dir") and not pip_installs(name)
        assert not [p for k, p in fake.HOSTS[name].log if k == "put" and "/src/" in p]  # nothing uploaded
    assert real.hosts["n2"].status == "ok" and pip_installs("n2")


def test_a_shared_workdir_is_refused_too(fake_kind, tmp_path):
    pb = playbook(tmp_path)
    hosts = shared_hosts(["n1", "n2"], shared={"n1", "n2"}, kind="workdir", path="/nfs/fleet")
    real, _ = run(pb, hosts)
    assert all(o.status == "failed" for o in real.hosts.values())
    assert "n1 and n2 share the workdir /nfs/fleet" in real.hosts["n2"].error
    assert "give each host its own workdir" in real.hosts["n2"].error


def test_a_later_batch_sharing_an_earlier_hosts_venv_is_refused_and_the_earlier_install_kept(fake_kind, tmp_path):
    pb = playbook(tmp_path)
    hosts = shared_hosts(["n1", "n2"], shared={"n1", "n2"})
    real, _ = run(pb, hosts, serial=[1])
    assert real.hosts["n1"].status == "ok" and pip_installs("n1")
    assert real.hosts["n2"].status == "failed" and not pip_installs("n2")
    assert "n1 and n2 share the venv /nfs/rack1/venv" in real.hosts["n2"].error


def test_builds_that_only_read_one_venv_are_not_refused(fake_kind, tmp_path):
    build_only = TOY.split("  - name: install")[0]
    pb = playbook(tmp_path, build_only)
    hosts = shared_hosts(["n1", "n2"], shared={"n1", "n2"})
    real, _ = run(pb, hosts)
    assert all(o.status == "ok" for o in real.hosts.values()), {h: o.error for h, o in real.hosts.items()}
    assert actions(real) == {"n1": "build", "n2": "push"}


def test_a_one_to_many_send_leaves_out_a_member_the_wheel_does_not_fit(tmp_path):
    import asyncio

    from fleetctl.engine.class_fanout import broadcast_once
    from fleetctl.engine.classes import BuiltWheel, ClassCoordinator

    class Scope:  # a run scope of a kind that sends one file to many hosts (Slurm's sbcast)
        can_broadcast = True

        def __init__(self):
            self.sent = []

        async def broadcast(self, local, remote, members):
            self.sent.append(list(members))
            return {m: None for m in members}

    key = "k" * 64
    coord, scope = ClassCoordinator(["x1", "x2", "a1"]), Scope()
    for h in ("x2", "a1"):
        coord.assigned[h] = (key, "push")
        coord.scope_of[h] = scope
    coord.platforms.update(x2=X86, a1=ARM)
    wheel = BuiltWheel(local=tmp_path / "w.whl", name="toy-0.1-cp312-cp312-linux_x86_64.whl", sha256="0",
                       builder="x1", data={})
    assert asyncio.run(broadcast_once(coord, "x2", key, wheel)) is not None
    assert scope.sent == [["x2"]]


def test_another_runs_host_sharing_the_venv_may_not_take_its_sm_away(fake_kind, tmp_path):
    import json

    pb = playbook(tmp_path)
    (n1,) = shared_hosts(["n1"], shared={"n1"})
    first, _ = run(pb, [n1])
    assert first.hosts["n1"].status == "ok"
    mark = json.loads(fake.HOSTS["n1"].files["/nfs/rack1/venv/.fleetctl-install.json"])
    assert {k: mark[k] for k in ("host", "archs", "wheel", "dist")} == {
        "host": "n1", "archs": "9.0a", "wheel": "toy-0.1-py3-none-any.whl", "dist": "toy"}
    assert mark["sha256"] and "record_sha256" in mark  # what is installed, for hosts with no record of theirs
    # another run, another host of the rack: its facts read the record from the shared folder
    (n2,) = shared_hosts(["n2"], shared={"n2"})
    fake.HOSTS["n2"].facts["targets"]["venv"]["installed"] = mark
    fake.HOSTS["n2"].facts["gpus"][0]["compute_cap"] = "10.0"
    fake.HOSTS["n2"].facts["cuda"]["archs"].append("compute_100")
    second, _ = run(pb, [n2])
    assert second.hosts["n2"].status == "failed" and not pip_installs("n2")
    assert ("/venv holds n1's install for 9.0a (toy-0.1-py3-none-any.whl): this wheel for 10.0a would take 9.0a away "
            "from n1, which shares the venv; deploy once for all their GPUs (--hosts n2 -e archs='9.0a;10.0a')"
            in second.hosts["n2"].error), second.hosts["n2"].error
    # a wheel that keeps n1's SM is fine
    fake.HOSTS["n2"].facts["targets"]["venv"]["installed"] = {**mark, "archs": "10.0a"}
    third, _ = run(pb, [n2])
    assert third.hosts["n2"].status == "ok" and pip_installs("n2")


def test_another_runs_install_in_the_shared_venv_is_refused_before_the_wheel_is_built(fake_kind, tmp_path):
    """The refusal above does not wait for the wheel: its archs are the build's (planned) stamp, so
    --plan and --dry-run show it while the build is still pending, and the deploy refuses the host
    while planning, before building a wheel that could never be installed (new-user trial: --plan
    exited 0 until the wheel existed)."""
    import json

    pb = playbook(tmp_path, TOY.replace("tool: pip}", 'tool: pip, archs: "{{ archs | default(none) }}"}'))
    (n1,) = shared_hosts(["n1"], shared={"n1"})
    assert run(pb, [n1])[0].hosts["n1"].status == "ok"
    mark = json.loads(fake.HOSTS["n1"].files["/nfs/rack1/venv/.fleetctl-install.json"])
    (n2,) = shared_hosts(["n2"], shared={"n2"})
    fake.HOSTS["n2"].facts["targets"]["venv"]["installed"] = mark
    fake.HOSTS["n2"].facts["gpus"][0]["compute_cap"] = "10.0"
    fake.HOSTS["n2"].facts["cuda"]["archs"].append("compute_100")
    line = ("/venv holds n1's install for 9.0a (toy-0.1-py3-none-any.whl): this wheel for 10.0a would take 9.0a away "
            "from n1, which shares the venv; deploy once for all their GPUs (--hosts n2 -e archs='9.0a;10.0a')")
    errors = {}
    for mode in ("plan", "dry-run", "apply"):
        model, _ = run(pb, [n2], mode=mode)
        out = model.hosts["n2"]
        assert out.status == "failed" and line in out.error, (mode, out.status, out.error)
        install = [t for t in out.tasks if t.action == "pip_install"]
        assert install and install[0].status == "failed", (mode, [(t.action, t.status) for t in out.tasks])
        errors[mode] = (out.error, install[0].msg)
    assert "found while planning: nothing was uploaded or run" in errors["apply"][1], errors["apply"]
    assert not fake.HOSTS["n2"].ran("--wheel-dir") and not pip_installs("n2")  # no build its install would waste
    # once the wheel exists (built alone, --tags build), --plan refuses with the same line
    built, _ = run(pb, [n2], tags=["build"])
    assert built.hosts["n2"].status == "ok" and fake.HOSTS["n2"].ran("--wheel-dir") and not pip_installs("n2")
    again, _ = run(pb, [n2], mode="plan")
    assert again.hosts["n2"].status == "failed" and again.hosts["n2"].error == errors["plan"][0], again.hosts["n2"].error
    # a wheel for the union of their SMs keeps n1's: planned as an install, before it is built too
    union, _ = run(pb, [n2], mode="plan", extra_vars={"archs": "9.0a;10.0a"})
    assert union.hosts["n2"].status == "ok", union.hosts["n2"].error
    assert actions(union) == {"n2": "build"}


def test_a_member_receiving_its_class_wheel_is_refused_alike_before_the_push(fake_kind, tmp_path):
    """A host whose class's wheel comes from the controller's cache (built by another host) is
    planned as a push: the refusal for another run's install in its venv holds for it too, in
    --plan and --dry-run, and the deploy pushes nothing to it. The dry run records the refusing
    install alone, as the deploy does: one that showed the push as a change disagreed with it
    (fresh operator trial, tests/test_mode_agreement_e2e.py); --plan shows the plan."""
    pb = playbook(tmp_path)
    hosts = make_hosts(["n2", "n3"])
    for name, ident in (("n2", "f" * 32), ("n3", "e" * 32)):
        facts = fake.HOSTS[name].facts
        facts["targets"] = {"venv": {"path": f"/nfs/{name}/venv", "id": ident, "error": None}}
        facts["gpus"][0]["compute_cap"] = "10.0"
        facts["cuda"]["archs"].append("compute_100")
    fake.HOSTS["n3"].facts["targets"]["venv"]["installed"] = {"host": "n1", "archs": "9.0a",
                                                              "wheel": "toy-0.1-py3-none-any.whl"}
    first, _ = run(pb, hosts[:1])  # n2 builds the class's wheel: the controller's cache holds it
    assert first.hosts["n2"].status == "ok" and actions(first) == {"n2": "build"}
    line = "this wheel for 10.0a would take 9.0a away from n1, which shares the venv"
    for mode in ("plan", "dry-run", "apply"):
        model, _ = run(pb, hosts[1:], mode=mode)
        out = model.hosts["n3"]
        assert out.status == "failed" and line in out.error, (mode, out.status, out.error)
        if mode == "plan":  # the plan, refusal and all
            assert actions(model) == {"n3": "push"}, (mode, actions(model))
        else:
            assert [(t.action, t.status) for t in out.tasks if t.action != "facts"] == [("pip_install", "failed")], \
                (mode, [(t.action, t.status) for t in out.tasks])
    assert not wheels_put("n3") and not pip_installs("n3")


def test_an_id_file_copied_into_another_folder_of_one_machine_does_not_make_them_one():
    """Two folders of one kernel (one boot id) with two inodes are two folders whatever their
    ``.fleetctl-id`` says: an older fleetctl's id file (the id alone, which the facts script cannot
    tell from a copy) copied with ``cp -a ~/venv ~/venv-copy`` (operator trial: ``a and a2 share the
    venv``). The same id on two boots (two NFS clients) or one inode is still one folder."""
    from fleetctl.engine.targets import InstallTargets

    def verdict(local_a: str, local_b: str) -> tuple:
        targets = InstallTargets({"a": 0, "a2": 1})
        targets.claim("a", {"venv": (f"9f1c local:{local_a}", "/home/t/venv")}, "9.0a", ("venv",))
        return targets.claim("a2", {"venv": (f"9f1c local:{local_b}", "/home/t/venv-copy")}, "9.0a", ("venv",))

    assert verdict("b00t:64769:1234", "b00t:64769:5678") == ()  # a copy on one machine
    assert verdict("b00t:64769:1234", "b00t:51:1234")  # one folder, remounted (another device number)
    assert verdict("b00t:64769:1234", "other:52:777")  # one NFS folder from two machines: the id tells
