"""``--plan``'s last line tells what a deploy would do: "nothing changed" only when no task would
change anything (a play of commands has no wheel to skip, and its commands would still run)."""

from __future__ import annotations

from tests.support.fleet import fleetctl


def _play(tmp_path, tasks: str):
    p = tmp_path / "play.yaml"
    p.write_text(f"- name: p\n  hosts: local\n  tasks:\n{tasks}")
    return p


def test_plan_says_nothing_changed_only_when_no_task_would_change(tmp_path):
    home = tmp_path / "home"
    cmd = _play(tmp_path, "    - name: say\n      command: {argv: [echo, hi]}\n")
    res = fleetctl("deploy", "--playbook", str(cmd), "--hosts", "local", "--plan", home=home)
    assert res.returncode == 0, res.stderr
    assert "nothing changed" not in res.stdout and "say" in res.stdout and "run" in res.stdout

    quiet = _play(tmp_path, "    - name: note\n      debug: {msg: hello}\n")
    res = fleetctl("deploy", "--playbook", str(quiet), "--hosts", "local", "--plan", home=home)
    assert res.returncode == 0, res.stderr
    assert "nothing changed: a deploy would rebuild and reinstall nothing" in " ".join(res.stdout.split())


def test_a_pattern_from_the_playbooks_hosts_that_matches_nothing_says_where_it_came_from(tmp_path):
    home = tmp_path / "home"
    play = tmp_path / "play.yaml"
    play.write_text("- name: p\n  hosts: gpu-nodes\n  tasks:\n    - name: note\n      debug: {msg: hi}\n")
    inv = tmp_path / "inv.yaml"
    inv.write_text("all:\n  hosts:\n    a: {ansible_connection: local}\n")
    res = fleetctl("-i", str(inv), "deploy", "--playbook", str(play), "--plan", home=home)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert f"(the playbook's hosts: 'gpu-nodes' in {play}; give --hosts)" in res.stderr
    typed = fleetctl("-i", str(inv), "deploy", "--playbook", str(play), "--hosts", "nowhere", "--plan", home=home)
    assert typed.returncode == 2 and "playbook's hosts" not in typed.stderr  # a typed pattern needs no origin


def test_verify_and_rollback_take_plan_and_it_says_no_deploy_words(tmp_path):
    home = tmp_path / "home"
    res = fleetctl("verify", "--hosts", "local", "--plan", home=home)
    assert res.returncode == 0, res.stderr
    assert "verify" in res.stdout and "rebuild and reinstall" not in " ".join(res.stdout.split())
    help_ = fleetctl("rollback", "--help", home=home)
    assert "--plan" in help_.stdout
