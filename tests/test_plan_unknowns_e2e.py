"""A plan never states results it did not see (operator trial): a ``when`` or a template that reads
what a command registered is unknown to ``--plan`` and ``--dry-run`` (the command never ran), so
they say so instead of a made-up rc 0 and empty stdout; the deploy then decides for real. A task
skipped by its ``when`` registers what Ansible's does (``skipped: true``, no ``stdout``)."""

from __future__ import annotations

import json

import pytest

from tests.support.fleet import fleetctl, last_run, write_inventory

pytestmark = pytest.mark.sshd

PLAY = """\
- name: p
  hosts: gpu
  tasks:
    - name: who am i
      command: [id, -un]
      register: who
    - name: only where who said {{ login }}
      when: "login in who.stdout"
      debug: {msg: "who={{ who.stdout | trim }}"}
    - name: a failing command
      command: [sh, -c, "echo no >&2; exit 1"]
      register: b
      ignore_errors: true
    - name: report b
      debug: {msg: "b rc={{ b.rc }} failed={{ b.failed }}"}
    - name: never here
      when: false
      command: [id]
      register: skipped
    - name: report skipped
      debug: {msg: "skipped={{ skipped.stdout | default('none') }} {{ skipped.skipped }}"}
"""


def _tasks(res) -> dict:
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return {t["task"]: t for t in json.loads(res.stdout)["gpu01"]["tasks"]}


def test_a_plan_says_unknown_where_a_when_or_template_reads_an_unrun_commands_result(sshd_farm, tmp_path):
    import getpass

    h = sshd_farm.start("gpu01")
    inv = write_inventory(tmp_path / "inv.yaml", {"gpu": {"gpu01": h.inventory_vars(sshd_farm.known_hosts)}})
    play = tmp_path / "play.yaml"
    play.write_text(PLAY)
    login = getpass.getuser()
    base = ("-i", str(inv), "deploy", "--hosts", "gpu01", "--playbook", str(play), "-e", f"login={login}")
    only = f"only where who said {login}"

    b_unknown = "b rc=(unknown until applied: b.rc) failed=(unknown until applied: b.failed)"
    planned = _tasks(fleetctl(*base, "--plan", "--json", home=tmp_path, timeout_s=300))
    assert planned[only]["status"] == "would change", planned[only]
    assert planned[only]["msg"] == "would run if its condition holds, unknown until applied: depends on who", \
        planned[only]
    assert planned["report b"]["msg"] == b_unknown, planned["report b"]
    assert planned["report skipped"]["msg"] == "skipped=none True", planned["report skipped"]

    dry = fleetctl(*base, "--dry-run", home=tmp_path, timeout_s=300)
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    lines = dry.stdout.splitlines()
    assert f"gpu01 | WOULD CHANGE {only}: would run if its condition holds, unknown until applied: " \
           "depends on who" in lines, dry.stdout
    assert f"gpu01 | OK          report b: {b_unknown}" in lines, dry.stdout
    assert "condition false" not in dry.stdout.split("[task 3/6]")[0] and "rc=0" not in dry.stdout, dry.stdout

    done = fleetctl(*base, home=tmp_path, timeout_s=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    tasks = {t["name"]: t for t in json.loads((last_run(tmp_path) / "run.json").read_text())["hosts"]["gpu01"]["tasks"]}
    assert tasks[only]["status"] == "ok" and tasks[only]["msg"] == f"who={login}", tasks[only]
    assert tasks["report b"]["msg"] == "b rc=1 failed=True", tasks["report b"]
    assert tasks["report skipped"]["msg"] == "skipped=none True", tasks["report skipped"]
