"""The API's bad input as a notebook user types it: one InputError line, never a traceback chained
to asyncio internals or a TypeError from deep inside."""

from __future__ import annotations

import traceback

import pytest

from fleetctl import Fleet, InputError
from fleetctl.playbook import load_playbook
from tests.support.fleet import REPO

INV = str(REPO / "inventory.yaml")


def test_a_sync_calls_bad_input_is_not_chained_to_the_event_loop_lookup(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEETCTL_HOME", str(tmp_path / "state"))
    nodes = Fleet.from_inventory(INV).select("local")
    for call in (lambda: nodes.run("uname -r"), lambda: nodes.run(["true"], timeout=-1),
                 lambda: nodes.deploy(mode="planx"), lambda: nodes.copy(tmp_path / "nope", "/tmp/x/")):
        with pytest.raises(InputError) as err:
            call()
        shown = "".join(traceback.format_exception(err.value))
        assert "During handling of the above exception" not in shown and "no running event loop" not in shown


def test_sources_as_one_list_and_wrong_shapes_are_one_line(tmp_path):
    fleet = Fleet.from_inventory([INV])
    assert fleet.sources == (INV,) and repr(fleet) == f"<Fleet {INV}: {len(fleet.inventory.hosts)} host(s)>"
    with pytest.raises(InputError, match=r"inventory sources: want a path here \(a non-empty string without NUL "
                                         r"bytes\), got 3"):
        Fleet.from_inventory(3)
    assert Fleet(INV).sources == (INV,)  # one path, not its characters
    with pytest.raises(InputError, match=r"ssh_options: want a list of 'Name=value' strings, got \{'Port': 'abc'\}"):
        Fleet(INV, ssh_options={"Port": "abc"})


def test_an_extra_var_nothing_reads_goes_to_on_warning_before_anything_runs(tmp_path):
    """The API's extra vars are the CLI's -e: one that the play does not read is named, with the
    closest name it reads, through the fleet's ``on_warning`` (nothing connects to check it)."""
    from fleetctl.api.play import prepare_play

    seen: list[str] = []
    fleet = Fleet(INV, extra_vars={"verify_devce": "cpu"}, on_warning=seen.append)
    prep = prepare_play(fleet, REPO / "playbooks" / "fp4-kernels.yaml", pattern="local", mode="plan",
                        extra_vars={"arhcs": "9.0a", "archs": "9.0a", "workdir": str(tmp_path)})
    assert prep.extra_vars["arhcs"] == "9.0a"  # kept: Ansible's extra vars are free-form
    assert seen == [
        "-e verify_devce: no task or template of fp4-kernels.yaml reads it, nor does fleetctl; did you mean "
        "verify_device?",
        "-e arhcs: no task or template of fp4-kernels.yaml reads it, nor does fleetctl; did you mean archs?"]


def test_an_empty_pattern_or_limit_is_refused_never_taken_for_the_playbooks_hosts(tmp_path, monkeypatch):
    """``pattern=""`` (``--hosts "$UNSET"``) is given, not absent: it once became the playbook's
    ``hosts`` (``gpu-nodes``: the whole fleet) and an empty limit was dropped (new-user trial)."""
    from fleetctl.api.play import prepare_play

    monkeypatch.setenv("FLEETCTL_HOME", str(tmp_path / "state"))
    fleet = Fleet(INV)
    for kw, message in (({"pattern": ""}, "pattern '' is empty"), ({"pattern": " "}, "pattern ' ' is empty"),
                        ({"pattern": "local", "limit": ""}, "limit '' is empty")):
        with pytest.raises(InputError) as err:
            prepare_play(fleet, REPO / "playbooks" / "verify.yaml", kind="verify", mode="plan", **kw)
        assert str(err.value) == message
    assert not (tmp_path / "state").exists()


def test_an_extra_var_that_makes_a_task_argument_invalid_is_refused_before_anything_runs(tmp_path, monkeypatch):
    """An extra var is the same on every host: one that alone feeds a task argument (the main
    play's ``archs: "{{ archs | default(none) }}"``) is checked by that argument's validator before
    anything connects (new-user trial: ``-e archs=sm_90a`` failed on every host after facts). A
    task the run does not select (``--tags install``) is not checked."""
    from fleetctl.api.play import prepare_play

    monkeypatch.setenv("FLEETCTL_HOME", str(tmp_path / "state"))
    play = REPO / "playbooks" / "fp4-kernels.yaml"
    shape = "must look like '9.0a;12.0a' (compute capabilities with an optional a/f suffix, ';'-separated), got "
    for fleet, extra, message in (
            (Fleet(INV), {"archs": "sm_90a"}, f"-e archs: {shape}'sm_90a'; did you mean '9.0a'?"),
            (Fleet(INV, extra_vars={"archs": "garbage"}), {}, f"-e archs: {shape}'garbage'"),
            (Fleet(INV), {"archs": ""}, f"-e archs: {shape}''"),
            (Fleet(INV), {"archs": "8.0a"}, "-e archs: not an arch nvcc has: '8.0a': the 'a' (architecture-specific) "
                                            "suffix exists for 9.0 and newer only (sm_90a, sm_100a, ...); use 8.0")):
        with pytest.raises(InputError) as err:
            prepare_play(fleet, play, pattern="local", mode="plan", extra_vars=extra)
        assert str(err.value) == message
    assert not (tmp_path / "state" / "runs").exists()
    prep = prepare_play(Fleet(INV), play, pattern="local", mode="plan", tags="install", extra_vars={"archs": "sm_90a"})
    assert prep.extra_vars["archs"] == "sm_90a"
    prepare_play(Fleet(INV), play, pattern="local", mode="plan", extra_vars={"archs": "12.0a;9.0a"})



def test_an_extra_build_host_naming_no_host_is_refused_as_the_inventorys_is(tmp_path, monkeypatch):
    """``build_host`` given as an extra var, the fleet's or the call's, is refused in one line
    naming ``-e build_host`` when it names no inventory host, as the same value in the inventory
    is at load (operator trial: ``-e build_host=gpu0l`` was taken without a word); one that names
    a host passes."""
    from fleetctl.api.play import prepare_play

    monkeypatch.setenv("FLEETCTL_HOME", str(tmp_path / "state"))
    play = REPO / "playbooks" / "verify.yaml"
    refused = "-e build_host: build_host 'nosuch' is not a host in the inventory"
    for call in (lambda: Fleet(INV, extra_vars={"build_host": "nosuch"}).select("local"),
                 lambda: prepare_play(Fleet(INV), play, kind="verify", pattern="local", mode="plan",
                                      extra_vars={"build_host": "nosuch"})):
        with pytest.raises(InputError) as err:
            call()
        assert str(err.value) == refused
    assert not (tmp_path / "state" / "runs").exists()
    host = next(iter(Fleet(INV).inventory.hosts))
    assert Fleet(INV, extra_vars={"build_host": host}).select("local").names

# -- the new-user trial of docs/api.md: each wrong type one InputError line, before anything connects --

def _nodes():
    return Fleet.from_inventory(INV).select("local")


_PLAY = str(REPO / "playbooks" / "verify.yaml")

async def _async_observer(event):
    pass


class _AsyncEvents:
    async def event(self, run, event):
        pass


_ASYNC_REFUSED = ("observers: _async_observer is an async function, which observers are not (they are called, never "
                  "awaited); give a plain function (it may schedule a task: lambda e: loop.create_task(...))")

WRONG_TYPES = [
    # a flag is a bool ("no" is truthy: host keys would have been accepted); a bool is no number
    (lambda: Fleet.from_inventory(INV, accept_new_host_keys="no"), "accept_new_host_keys: want True or False, got 'no'"),
    (lambda: Fleet(INV, accept_new_host_keys=1), "accept_new_host_keys: want True or False, got 1"),
    (lambda: Fleet.from_inventory(INV, connect_timeout=True), "connect_timeout: want a positive number of seconds, got True"),
    (lambda: _nodes().run(["true"], timeout=True), "timeout: want a positive number of seconds, got True"),
    (lambda: _nodes().fetch("/etc/hostname", "out", flat="yes"), "flat: want True or False, got 'yes'"),
    # shapes that reached users as TypeError / ValueError from deep inside
    (lambda: Fleet(123).inventory, "inventory sources: want paths (or one list of them), got 123"),
    (lambda: Fleet.from_inventory(INV, ssh_options=[1]), "ssh_options: want a list of 'Name=value' strings, got [1]"),
    (lambda: _nodes().run(["true"], observers=1),
     "observers: want a callable, an observer object (event/line methods) or a list of them, got 1"),
    (lambda: _nodes().run(["echo", "a\0b"]),
     r"argv[1] 'a\x00b': holds a NUL byte, which no program can be given (execve ends an argument at NUL)"),
    (lambda: _nodes().deploy(_PLAY, mode="plan", extra_vars="a=1"),
     "extra_vars: want a mapping of variable names (strings) to values, got 'a=1'"),
    (lambda: _nodes().deploy(_PLAY, mode="plan", extra_vars={1: 2}),
     "extra_vars: want a mapping of variable names (strings) to values, got {1: 2}"),
    (lambda: _nodes().rollback(mode="plan", extra_vars=["a=1"]),
     "extra_vars: want a mapping of variable names (strings) to values, got ['a=1']"),
    (lambda: _nodes().copy(123, "/tmp/x"), "src: want a path here (a non-empty string without NUL bytes), got 123"),
    (lambda: _nodes().fetch(None, "out"), "src: want a path on the hosts (a non-empty string without NUL bytes), got None"),
    (lambda: _nodes().fetch("/etc/hostname", 123), "dest: want a path here (a non-empty string without NUL bytes), got 123"),
    (lambda: _nodes().copy(INV, "/tmp/a\0b"),
     r"dest: want a path on the hosts (a non-empty string without NUL bytes), got '/tmp/a\x00b'"),
    # operator's trial: every function taking a path makes the one check (fleetctl.util.paths.want_path),
    # load_playbook(5) was pathlib's TypeError
    (lambda: load_playbook(5), "path: want a path here (a non-empty string without NUL bytes), got 5"),
    (lambda: load_playbook(b"play.yaml"), "path: want a path here (a non-empty string without NUL bytes), got b'play.yaml'"),
    (lambda: load_playbook(""), "path: want a path here (a non-empty string without NUL bytes), got ''"),
    (lambda: _nodes().deploy(5, mode="plan"), "playbook: want a path here (a non-empty string without NUL bytes), got 5"),
    (lambda: _nodes().verify(b"v.yaml", mode="plan"),
     "playbook: want a path here (a non-empty string without NUL bytes), got b'v.yaml'"),
    (lambda: Fleet.from_inventory(INV, 5),
     "inventory sources: want a path here (a non-empty string without NUL bytes), got 5"),
    (lambda: Fleet.from_inventory(INV, "a\0b"),
     r"inventory sources: want a path here (a non-empty string without NUL bytes), got 'a\x00b'"),
    # extra vars are a mapping of variable names, Ansible's rule (ansible-core utils/vars.py isidentifier)
    (lambda: Fleet(INV, extra_vars={"": 1}), "extra_vars: '' is not a variable name (Ansible's rule: letters, digits "
                                             "and '_', not starting with a digit, not a Python keyword)"),
    (lambda: Fleet(INV, extra_vars={"a b": 1}), "extra_vars: 'a b' is not a variable name (Ansible's rule: letters, "
                                                "digits and '_', not starting with a digit, not a Python keyword)"),
    (lambda: _nodes().deploy(_PLAY, mode="plan", extra_vars={"class": 1}),
     "extra_vars: 'class' is not a variable name (Ansible's rule: letters, digits and '_', not starting with a digit, "
     "not a Python keyword)"),
    (lambda: _nodes().rollback(mode="plan", extra_vars={"9lives": 1}),
     "extra_vars: '9lives' is not a variable name (Ansible's rule: letters, digits and '_', not starting with a digit, "
     "not a Python keyword)"),
    # from Python a message names the argument passed, not the CLI's flag (the CLI's: tests/test_api.py)
    (lambda: _nodes().deploy(_PLAY, mode="plan", phase_timeout={"buld": 3}),
     "phase_timeout: want PHASE=SECONDS with PHASE one of connect, facts, upload, build, install, verify, command, "
     "got 'buld=3'"),
    (lambda: _nodes().verify(_PLAY, mode="plan", phase_timeout={"build": -1}),
     "phase_timeout build: want a positive number of seconds, got -1"),
    (lambda: _nodes().facts(phase_timeout="fact=10"),
     "phase_timeout: want PHASE=SECONDS with PHASE one of connect, facts, upload, build, install, verify, command, "
     "got 'fact=10'"),
    # a bool or text where phase_timeout wants seconds is refused, as timeout's are (docs/api.md)
    (lambda: _nodes().facts(phase_timeout={"facts": True}), "phase_timeout facts: want a positive number of seconds, "
                                                            "got True"),
    (lambda: _nodes().deploy(_PLAY, mode="plan", phase_timeout={"build": "10"}),
     "phase_timeout build: want a positive number of seconds, got '10'"),
    # an async def observer was called and never awaited: no callback, only a RuntimeWarning
    (lambda: _nodes().run(["true"], observers=_async_observer),
     _ASYNC_REFUSED),
    (lambda: _nodes().facts(observers=[print, _async_observer]), _ASYNC_REFUSED),
    (lambda: _nodes().deploy(_PLAY, mode="plan", observers=_async_observer), _ASYNC_REFUSED),
    (lambda: _nodes().fetch("/etc/hostname", "out", observers=_AsyncEvents()),
     _ASYNC_REFUSED.replace("_async_observer", "_AsyncEvents.event")),
    (lambda: _nodes().deploy(_PLAY, mode="plan", serial="0"),
     "serial: want host counts or percentages up to 100%, like 1,10%,100%; got '0'"),
    (lambda: _nodes().deploy(_PLAY, mode="plan", serial="1,"),
     "serial: batch size 2 of '1,' is empty: want host counts or percentages up to 100%, like 1,10%,100%"),
    (lambda: _nodes().rollback(to="yesterday", mode="plan"), "to: want 'previous' or a version number such as 2, "
                                                             "got 'yesterday'"),
]


@pytest.mark.parametrize("call, message", WRONG_TYPES, ids=[m.split(":")[0] + f"-{i}" for i, (_, m) in enumerate(WRONG_TYPES)])
def test_a_wrong_type_is_one_input_error_line_naming_the_argument(call, message, tmp_path, monkeypatch):
    monkeypatch.setenv("FLEETCTL_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as err:
        call()
    assert str(err.value) == message
    assert not (tmp_path / "state" / "runs").exists()  # refused before any run began


def test_an_iterator_argv_and_one_observer_alone_run_as_given(tmp_path, monkeypatch):
    """``run(x for x in [...])`` was checked by reading it, then ran nothing ("program name is
    empty ([])"); ``observers=print`` was a TypeError: one callable is a list of one."""
    monkeypatch.setenv("FLEETCTL_HOME", str(tmp_path / "state"))
    seen: list = []
    res = _nodes().run((a for a in ["echo", "from", "a generator"]), timeout=30, observers=seen.append)
    assert res.ok and res["localhost"].stdout == "from a generator\n"
    assert [e.data["text"] for e in seen if e.name == "output.line"] == ["from a generator"]
    assert Fleet(INV, accept_new_host_keys=True).accept_new_host_keys is True


def test_a_nul_byte_is_refused_by_every_connection_in_one_line(tmp_path, monkeypatch):
    """Where argv and env reach a connection (a playbook's rendered command), a NUL byte fails the
    host with the one line, never subprocess's "embedded null byte" as a planner crash; the SSH
    and Slurm command line (wrap_argv) and the local connection share the check."""
    import asyncio

    from fleetctl.connection.command import wrap_argv
    from fleetctl.connection.local import LocalConnection
    from fleetctl.errors import CommandRefused

    for call in (lambda: wrap_argv(["echo", "a\0b"]), lambda: wrap_argv(["true"], env={"X": "c\0d"}),
                 lambda: asyncio.run(LocalConnection().run(["echo", "a\0b"])),
                 lambda: asyncio.run(LocalConnection().run(["true"], env={"X": "c\0d"}))):
        with pytest.raises(CommandRefused, match="holds a NUL byte"):
            call()
    monkeypatch.setenv("FLEETCTL_HOME", str(tmp_path / "state"))
    play = tmp_path / "nul.yaml"
    play.write_text('name: p\nhosts: all\ntasks:\n  - name: t\n    command: {argv: ["echo", "{{ x }}"]}\n')
    from fleetctl.errors import InputError

    with pytest.raises(InputError, match=r"^-e x: 'a\\x00b' holds a NUL byte"):  # -e alone feeds it: before any host
        _nodes().deploy(str(play), extra_vars={"x": "a\0b"})
    play.write_text('name: p\nhosts: all\ntasks:\n  - name: t\n    command: {argv: ["echo", "{{ x }}{{ host }}"]}\n')
    res = _nodes().deploy(str(play), extra_vars={"x": "a\0b"})  # a host var too: rendered on the host's turn
    assert res.failed == ["localhost"]
    assert res["localhost"].error == r"t: argv[1] 'a\x00blocalhost': holds a NUL byte, which no program can be " \
                                     "given (execve ends an argument at NUL)", res["localhost"].error


def test_facts_json_gives_every_host_its_status(tmp_path):
    """``fleetctl facts --json`` named ``status`` only for failed hosts; every entry has it now,
    as the API's HostFacts.status."""
    import json

    from tests.support.fleet import fleetctl, write_inventory
    from tests.support.sshd import free_port

    inv = write_inventory(tmp_path / "inv.yaml", {"g": {
        "me": {"ansible_connection": "local", "workdir": str(tmp_path / "work")},
        "dead": {"ansible_host": "127.0.0.1", "ansible_port": free_port(), "known_hosts": str(tmp_path / "kh")}}})
    res = fleetctl("-i", str(inv), "facts", "--hosts", "g", "--json", "--connect-timeout", "5", home=tmp_path / "home",
                   timeout_s=300)
    assert res.returncode == 1, res.stderr
    facts = json.loads(res.stdout)
    assert {h: (f["status"], f["reachable"]) for h, f in facts.items()} == {"me": ("ok", True),
                                                                            "dead": ("unreachable", False)}
    assert facts["me"]["gpus"] is not None and "connection refused" in facts["dead"]["error"]
