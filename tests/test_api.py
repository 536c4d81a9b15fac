"""The Python API (fleetctl.api) against the `local` host and real sshd test hosts: its documented
examples as written, sync and async giving the same results, observers, bad input as the CLI's
one line, and the sync form inside a running event loop."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import fleetctl
from fleetctl import Fleet, HostsFailed, InputError, RunResult
from tests.support.fake_gpu import H200, write_fake_nvidia_smi
from tests.support.fleet import REPO, fleetctl as cli, write_inventory
from tests.support.sshd import free_port


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A state folder of its own (the run records of this test only)."""
    monkeypatch.setenv("FLEETCTL_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(REPO)
    return tmp_path / "state"


def _runs(home: Path) -> list[str]:
    return sorted(p.name for p in (home / "runs").iterdir() if (p / "run.json").exists())


def test_the_readme_example_runs_as_written_on_the_local_host(tmp_path):
    example = REPO / "docs" / "_api_example.py"
    readme = (REPO / "README.md").read_text()
    assert "## From Python" in readme and f"```python\n{example.read_text()}```" in readme  # the same lines
    env = {**os.environ, "FLEETCTL_HOME": str(tmp_path / "state")}
    res = subprocess.run([sys.executable, str(example)], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert re.fullmatch(r"localhost ok 0 \S+", lines[0]), lines
    assert re.fullmatch(r"\d+ cores, \d+ MiB, CUDA \S+", lines[1]), lines
    run_id = lines[2].split()[0]
    assert lines[2].endswith("ok 1, failed 0, unreachable 0")
    listed = cli("runs", "--json", home=tmp_path / "state", timeout_s=120)  # API runs are CLI runs
    assert run_id in listed.stdout, listed.stdout + listed.stderr


@pytest.mark.sshd
def test_run_over_sshd_sync_and_async_give_the_same_results(sshd_farm, tmp_path, home):
    hosts = {}
    for name in ("a", "b"):
        h = sshd_farm.start(name)
        hosts[name] = h.inventory_vars(sshd_farm.known_hosts)
    hosts["dead"] = {"ansible_host": "127.0.0.1", "ansible_port": free_port(), "known_hosts": str(sshd_farm.known_hosts)}
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": hosts})
    fleet = Fleet.from_inventory(inv, connect_timeout=20)
    nodes = fleet.select("fleet")
    assert nodes.names == ["a", "b", "dead"]
    argv = ["sh", "-c", "echo out-line; echo err-line >&2; exit 3"]

    sync = nodes.run(argv, timeout=60)

    async def main() -> RunResult:
        return await fleet.aselect("fleet").run(argv, timeout=60)

    aio = asyncio.run(main())
    for res in (sync, aio):
        assert isinstance(res, RunResult) and list(res) == ["a", "b", "dead"]
        assert res.failed == ["a", "b"] and res.unreachable == ["dead"] and not res.ok and res.status == "failed"
        assert res["a"].rc == 3 and res["a"].stdout == "out-line\n" and res["a"].stderr == "err-line\n"
        assert res["dead"].rc is None and res["dead"].error and "dead" not in res.succeeded
        assert (res.record_dir / "run.json").exists()
    def shape(res):
        return {h: (r.status, r.rc, r.stdout, r.stderr, r.error) for h, r in res.items()}
    assert shape(sync) == shape(aio)
    assert sync.run_id != aio.run_id and {sync.run_id, aio.run_id} <= set(_runs(home))
    with pytest.raises(HostsFailed) as err:
        sync.raise_for_status()
    assert err.value.result is sync and "3 of 3 host(s) failed" in str(err.value) and "dead: unreachable" in str(err.value)
    assert repr(sync).endswith("failed: ok 0, failed 2, unreachable 1>")
    assert "<td>dead</td><td>unreachable</td>" in sync._repr_html_()

    class Printer:  # IPython's pretty printer, as far as _repr_pretty_ uses it
        def __init__(self):
            self.out = []

        def text(self, s):
            self.out.append(s)

    printer = Printer()
    sync._repr_pretty_(printer, False)
    shown = printer.out[0].splitlines()
    assert shown[0] == repr(sync) and shown[1] == "  a: failed rc=3: rc=3" and shown[3].startswith("  dead: unreachable: ")

    ok = nodes.run(["true"], timeout=60)  # the hosts that answer pass; the dead one stays unreachable
    assert ok.succeeded == ["a", "b"] and ok["a"].ok
    # the Hosts docstring's example: per host status and stdout
    echo = fleet.select("a,b").run(["echo", "hi"], timeout=30)
    assert {h: (r.status, r.stdout) for h, r in echo.items()} == {"a": ("ok", "hi\n"), "b": ("ok", "hi\n")}
    assert echo.raise_for_status() is echo


@pytest.mark.sshd
def test_facts_are_typed_with_the_raw_document_kept(sshd_farm, tmp_path, home):
    h = sshd_farm.start("gpu")
    write_fake_nvidia_smi(h.bin_dir, [H200, H200])
    inv = write_inventory(tmp_path / "inv.yaml", {"fleet": {"gpu": h.inventory_vars(sshd_farm.known_hosts)},
                                                  "local": {"localhost": {"ansible_connection": "local"}}})
    res = Fleet.from_inventory(inv).select("all").facts()
    assert res.ok and set(res.facts) == {"gpu", "localhost"}
    gpu = res.facts["gpu"]
    assert [g.compute_capability for g in gpu.gpus] == ["9.0", "9.0"] and gpu.compute_capabilities == ["9.0"]
    assert gpu.gpus[0].memory_mib and gpu.driver_version == gpu.raw["driver_version"]
    local = res.facts["localhost"]
    assert local.cores == local.raw["cpu_count"] >= 1 and local.memory_mib == local.raw["mem_total_mib"] > 0
    assert local.python == local.raw["python"]["executable"] and local.torch == local.raw["python"]["torch"]
    assert local.disk_free_mib == local.raw["disk_free_mib"]
    # what `fleetctl facts --json` prints is the raw document
    printed = json.loads(cli("-i", str(inv), "facts", "--hosts", "gpu", "--json", home=home, timeout_s=300).stdout)
    assert printed["gpu"]["gpus"] == gpu.raw["gpus"]


def test_observers_get_the_events_the_record_gets(home, caplog):
    got: list = []

    class Obj:
        def __init__(self):
            self.events, self.lines, self.closed = [], [], 0

        def event(self, run, event):
            self.events.append(event.name)

        def line(self, run, host, line, shown):
            self.lines.append((host, line.data))

        def close(self, run):
            self.closed += 1

    obj = Obj()
    nodes = Fleet.from_inventory("inventory.yaml").select("local")
    res = nodes.run(["echo", "hello"], timeout=30, observers=[got.append, obj])
    names = [e.name for e in got]
    assert names[0] == "run.started" and names[1] == "host.started" and names[-1] == "run.finished"
    line = next(e for e in got if e.name == "output.line")
    assert line.host == "localhost" and line.data == {"stream": "stdout", "text": "hello"}
    finished = next(e for e in got if e.name == "host.finished")
    assert finished.data["status"] == "ok" and finished.data["rc"] == 0
    recorded = [json.loads(ln)["event"] for ln in (res.record_dir / "events.jsonl").read_text().splitlines()]
    assert [n for n in names if n != "output.line"] == obj.events == recorded
    assert obj.lines == [("localhost", b"hello\n")] and obj.closed == 1

    plan_events: list = []
    plan = nodes.deploy("playbooks/verify.yaml", mode="plan", observers=[plan_events.append])
    assert plan.mode == "plan" and plan.plan["localhost"]["tasks"][0]["action"] == "verify"
    assert {"run.started", "batch.started", "host.finished", "run.finished"} <= {e.name for e in plan_events}
    with pytest.raises(InputError, match="observers: want callables"):
        nodes.run(["true"], observers=[42])

    def broken(event):
        raise RuntimeError("observer bug")

    caplog.clear()
    survived = nodes.run(["echo", "still"], timeout=30, observers=[broken])
    assert survived.ok and survived["localhost"].stdout == "still\n"  # a reporting bug never stops a run
    # one warning through logging (the engine never prints; stderr when nothing else is set up) ...
    warned = [r.getMessage() for r in caplog.records if r.name == "fleetctl.engine"]
    assert warned == ["fleetctl: warning: CallbackObserver stopped reporting: RuntimeError: observer bug"]
    # ... and the record keeps it
    recorded = [json.loads(ln) for ln in (survived.record_dir / "events.jsonl").read_text().splitlines()]
    assert [e.get("observer") for e in recorded if e["event"] == "run.observer_failed"] == ["CallbackObserver"]


def _cli_error(*args: str, home: Path) -> str:
    res = cli(*args, home=home, timeout_s=120)
    assert res.returncode == 2, res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("fleetctl: error: ")
    return line.removeprefix("fleetctl: error: ")


def test_bad_input_raises_input_error_with_the_line_the_cli_prints(tmp_path, home):
    bad_inv = tmp_path / "bad.yaml"
    bad_inv.write_text("all:\n  hosts:\n    h1:\n      ansible_port: nope\n")
    play = tmp_path / "play.yaml"
    play.write_text("name: p\nhosts: all\ntasks:\n  - name: t\n    command: {argv: [\"true\"]}\n    tags: [build]\n")
    fleet = Fleet.from_inventory("inventory.yaml")
    # (the call, the CLI's command line, the CLI's flag the API's message names as the argument instead)
    cases = [
        # one host's bad var refuses what selects that host (not the other hosts: test_inventory_one_host)
        (lambda: Fleet.from_inventory(bad_inv).select("all"), ("-i", str(bad_inv), "run", "--hosts", "all", "--", "true")),
        (lambda: fleet.select("nosuchgroup"), ("run", "--hosts", "nosuchgroup", "--", "true")),
        (lambda: fleet.select("local").deploy(str(tmp_path / "missing.yaml"), mode="plan"),
         ("deploy", "--hosts", "local", "--playbook", str(tmp_path / "missing.yaml"), "--plan")),
        (lambda: fleet.select("local").deploy(str(play), tags=["biuld"], mode="plan"),
         ("deploy", "--hosts", "local", "--playbook", str(play), "--tags", "biuld", "--plan"), ("--tags", "tags")),
        (lambda: fleet.select("local").deploy(str(play), serial="0", mode="plan"),
         ("deploy", "--hosts", "local", "--playbook", str(play), "--serial", "0", "--plan"), ("--serial", "serial")),
        (lambda: fleet.select("local").rollback(to="latest", mode="dry_run"),
         ("rollback", "--hosts", "local", "--to", "latest", "--dry-run"), ("--to", "to")),
        (lambda: fleet.select("local").deploy(str(play), phase_timeout={"buld": 3}, mode="plan"),
         ("deploy", "--hosts", "local", "--playbook", str(play), "--phase-timeout", "buld=3", "--plan"),
         ("--phase-timeout", "phase_timeout")),
    ]
    for api_call, argv, *named in cases:
        with pytest.raises(InputError) as err:
            api_call()
        line = _cli_error(*argv, home=home)
        if named:  # operator's trial: from Python the argument (serial: ...), from the CLI the flag (--serial: ...)
            flag, arg = named[0]
            assert f"{flag}: " in line or f"{flag} " in line, line
            assert flag not in str(err.value), str(err.value)
            line = line.replace(flag, arg, 1)
        assert str(err.value) == line, argv
    for call, message in [(lambda: fleet.select("local").run("uname -r"), "argv: want a non-empty list"),
                          (lambda: fleet.select("local").run(["true"], timeout=0), "timeout: want a positive"),
                          (lambda: fleet.select("local").run(["true"], forks=0), "forks: want a whole number"),
                          (lambda: fleet.select("local").deploy(mode="apply-ish"), "mode: want one of"),
                          # new-user trial: force="no" is truthy and rebuilt; a str percentage gave a TypeError
                          (lambda: fleet.select("local").deploy(mode="plan", force="no"), "force: want True or False"),
                          (lambda: fleet.select("local").deploy(mode="plan", staged=1), "staged: want True or False"),
                          (lambda: fleet.select("local").deploy(mode="plan", max_fail_percentage="10"),
                           "max_fail_percentage: want 0 to 100"),
                          (lambda: Fleet.from_inventory("inventory.yaml", extra_vars=["a=b"]), "extra_vars: want a mapping"),
                          (lambda: Fleet.from_inventory("inventory.yaml", extra_vars="archs=9.0a"), "extra_vars: want a"),
                          (lambda: Fleet.from_inventory("inventory.yaml", extra_vars={1: "x"}), "extra_vars: want a"),
                          (lambda: Fleet.from_inventory("inventory.yaml", verbose="yes"), "verbose: want a whole"),
                          (lambda: fleet.select("all", limit=5), "limit: want a host pattern"),
                          (lambda: fleet.select("local").deploy(mode="plan", tags=5), "tags: want a tag name"),
                          (lambda: fleet.select("local").deploy(mode="plan", serial=1.5), "serial: want a host count"),
                          (lambda: fleet.select("local").copy("inventory.yaml", 5), "dest: want a path")]:
        with pytest.raises(InputError, match=message):
            call()
    assert not (home / "runs").exists() or not _runs(home)  # bad input: nothing ran, nothing recorded


_VNEV = ("-e vnev: fleetctl {kind} reads only host settings (ansible_user, ansible_port, venv...), and no template; "
         "it is ignored; did you mean venv?")


def test_an_extra_var_no_host_setting_reads_is_warned_from_python_as_from_the_cli(home, tmp_path, capfd):
    """Operator's trial: ``Fleet.from_inventory(INV, extra_vars={"vnev": "/x"}).select(...).facts()``
    warned nothing where ``fleetctl facts -e vnev=/x`` says ``did you mean venv?``. The API's
    warnings go to the fleet's ``on_warning`` (default: the CLI's stderr line), from the CLI's code."""
    res = Fleet.from_inventory("inventory.yaml", extra_vars={"vnev": "/x"}).select("local").facts()
    assert res.ok and res.facts["localhost"].cores >= 1  # ignored: the run is the same
    api_err = capfd.readouterr().err.splitlines()
    assert api_err.count("fleetctl: warning: " + _VNEV.format(kind="facts")) == 1, api_err
    cli_res = cli("facts", "--hosts", "local", "-e", "vnev=/x", "--json", home=home, timeout_s=120)
    assert cli_res.returncode == 0, cli_res.stderr
    assert "fleetctl: warning: " + _VNEV.format(kind="facts") in cli_res.stderr.splitlines(), cli_res.stderr
    seen: list[str] = []
    nodes = Fleet.from_inventory("inventory.yaml", extra_vars={"vnev": "/x", "venv": sys.prefix},
                                 on_warning=seen.append).select("local")
    (tmp_path / "a.txt").write_text("a\n")
    assert nodes.run(["true"]).ok and nodes.copy(tmp_path / "a.txt", str(tmp_path / "b.txt")).ok
    assert nodes.fetch(str(tmp_path / "b.txt"), tmp_path / "out").ok
    assert seen == [_VNEV.format(kind=kind) for kind in ("run", "copy", "fetch")]  # venv is a setting: read
    assert capfd.readouterr().err.count("vnev") == 0  # on_warning given: nothing on stderr


def test_copy_follows_the_path_rule_its_docstring_and_help_state(home, tmp_path):
    """Operator's trial: ``Hosts.copy`` said DEST is taken "as ``cp``", but a folder copied to a
    DEST that did not exist lands at ``DEST/<folder>/`` (Ansible's copy: no trailing slash copies the
    folder itself, a trailing slash its contents). The docstring, the CLI help and the code agree."""
    from fleetctl.cli.transfer import copy as copy_command

    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f.txt").write_text("f\n")
    nodes = Fleet.from_inventory("inventory.yaml").select("local")
    assert nodes.copy(tmp_path / "d", str(tmp_path / "new1")).ok  # new1 did not exist
    assert (tmp_path / "new1" / "d" / "f.txt").read_text() == "f\n" and not (tmp_path / "new1" / "f.txt").exists()
    assert nodes.copy(f"{tmp_path / 'd'}/", str(tmp_path / "new2")).ok
    assert (tmp_path / "new2" / "f.txt").read_text() == "f\n"
    (tmp_path / "there").mkdir()
    assert nodes.copy(tmp_path / "d" / "f.txt", str(tmp_path / "there")).ok  # an existing folder: inside it
    assert (tmp_path / "there" / "f.txt").is_file()
    doc, helptext = " ".join(fleetctl.api.AsyncHosts.copy.__doc__.split()), " ".join(copy_command.help.split())
    for text in (doc, helptext):
        assert "Ansible's copy" in text and "as ``cp``" not in text and "(as cp)" not in text, text
    assert "writes ``/tmp/x/kernel_src/...``, whether ``/tmp/x`` existed or not" in doc
    assert "kernel_src -> DEST/kernel_src/, DEST made when missing" in helptext


def test_facts_take_the_phase_timeout_the_cli_takes(home):
    # new-user trial: `fleetctl facts --phase-timeout facts=S` existed, Fleet.facts() had no such argument
    nodes = Fleet.from_inventory("inventory.yaml").select("local")
    for value, argv in [(["facts=0"], ("--phase-timeout", "facts=0")),
                        (["facts=soon"], ("--phase-timeout", "facts=soon")),
                        ("fact=10", ("--phase-timeout", "fact=10"))]:
        with pytest.raises(InputError) as err:
            nodes.facts(phase_timeout=value)
        line = _cli_error("facts", "--hosts", "local", *argv, home=home)  # names the flag; the API the argument
        assert line.startswith("--phase-timeout") and str(err.value) == line.replace("--phase-timeout", "phase_timeout")
    with pytest.raises(InputError, match="^phase_timeout facts: want a positive number of seconds, got 0$"):
        nodes.facts(phase_timeout={"facts": 0})
    with pytest.raises(InputError, match="phase_timeout: want a mapping"):
        nodes.facts(phase_timeout=10)
    assert not (home / "runs").exists() or not _runs(home)  # bad input: nothing ran, nothing recorded
    res = nodes.facts(phase_timeout="facts=120")
    assert res.ok and res.facts["localhost"].cores >= 1
    res = nodes.facts(phase_timeout={"facts": 0.001})  # the deadline is the one given: no interpreter starts in 1 ms
    assert not res.ok and res.failed == ["localhost"] and "localhost" not in res.facts


def test_the_sync_form_inside_a_running_loop_and_from_a_thread(home):
    nodes = Fleet.from_inventory("inventory.yaml").select("local")

    async def in_loop():  # as in Jupyter: a loop is running in this thread
        sync = nodes.run(["echo", "x"], timeout=30)
        aio = await nodes.aio.run(["echo", "x"], timeout=30)
        return sync, aio

    sync, aio = asyncio.run(in_loop())
    assert sync["localhost"].stdout == aio["localhost"].stdout == "x\n" and sync.ok and aio.ok

    async def facts_in_loop():
        return nodes.facts(), await nodes.aio.facts()

    stable = ("status", "gpus", "driver_version", "cuda_version", "cuda_home", "python", "torch", "cores",
              "memory_mib", "arch_list")  # free memory and disk move between two runs
    f_sync, f_aio = asyncio.run(facts_in_loop())
    assert [getattr(f_sync.facts["localhost"], k) for k in stable] == [getattr(f_aio.facts["localhost"], k)
                                                                       for k in stable]
    assert set(f_sync.facts["localhost"].raw) == set(f_aio.facts["localhost"].raw)
    box: dict = {}
    t = threading.Thread(target=lambda: box.update(res=nodes.run(["echo", "y"], timeout=30)))
    t.start()
    t.join(120)
    assert box["res"]["localhost"].stdout == "y\n"


def test_the_public_surface_is_small_and_no_cli_or_api_module_imports_a_private_name():
    assert set(fleetctl.__all__) >= {"Fleet", "RunResult", "HostResult", "HostFacts", "InputError", "__version__"}
    for name in fleetctl.__all__:
        assert getattr(fleetctl, name) is not None
    import ast
    import inspect

    from fleetctl import AsyncHosts, Hosts

    for method in ("run", "facts", "deploy", "verify", "rollback"):  # one surface, sync and async
        assert inspect.signature(getattr(Hosts, method)) == inspect.signature(getattr(AsyncHosts, method)), method
        assert inspect.iscoroutinefunction(getattr(AsyncHosts, method))
    bad = []
    for folder in ("cli", "api"):
        for path in (REPO / "fleetctl" / folder).glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom):
                    bad += [f"{path.name}: {a.name}" for a in node.names
                            if a.name.startswith("_") and not a.name.startswith("__")]
    assert bad == []
