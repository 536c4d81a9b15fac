"""The API's bad input as a notebook user types it: one InputError line, never a traceback chained
to asyncio internals or a TypeError from deep inside."""

from __future__ import annotations

import traceback

import pytest

from fleetctl import Fleet, InputError
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
    with pytest.raises(InputError, match=r"inventory sources: want paths \(or one list of them\), got 3"):
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
