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
    # piped (a file, cron, CI): the line is whole, never cut at rich's 80 columns ("(--force \noverrides)")
    assert "nothing changed: a deploy would rebuild and reinstall nothing (--force overrides)" in \
        res.stdout.splitlines(), res.stdout


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


def test_plan_at_80_columns_is_one_readable_block_per_host(tmp_path):
    """New-user trial: at 80 columns ``--plan``'s six columns were squeezed until a task name stood
    a word a line and the header read ``change`` / ``d``. Below the width a readable table needs,
    each host is one block: its name once, then a line per task (``task: action``) with its cause
    under it, whole words; with room, the table, a row a line."""
    home = tmp_path / "home"
    names = ["Show the kernel version of every host in the fleet", "Say hello to the operator of this fleet"]
    cmd = _play(tmp_path, f"    - name: {names[0]}\n      command: {{argv: [uname, -a]}}\n"
                          f"    - name: {names[1]}\n      debug: {{msg: 'hello operator, a long debug message it is'}}\n")
    narrow = fleetctl("deploy", "--playbook", str(cmd), "--hosts", "local", "--plan", home=home,
                      env={"COLUMNS": "80"})
    assert narrow.returncode == 0, narrow.stderr
    lines = narrow.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), narrow.stdout
    assert f"  {names[0]}: run" in lines and f"  {names[1]}: ok" in lines, narrow.stdout
    assert "    changed inputs / cause: hello operator, a long debug message it is" in lines, narrow.stdout
    assert lines.count("localhost") == 1, narrow.stdout  # the host's name heads its block, once
    wide = fleetctl("deploy", "--playbook", str(cmd), "--hosts", "local", "--plan", home=home,
                    env={"COLUMNS": "200"})
    rows = [line for line in wide.stdout.splitlines() if line.startswith("│ localhost")]
    assert len(rows) == 2 and names[0] in rows[0] and "hello operator, a long debug message it is" in rows[1], \
        wide.stdout


def test_a_plan_with_a_failed_host_keeps_its_cause_on_one_line_when_piped(tmp_path):
    """Operator trial: piped (a file, ``grep``), a plan whose host failed became a boxed table whose
    cause wrapped at ~35 columns, where the ok plan was blocks: piped, the table only when each row
    fits on a line; else blocks, each cause whole on its line."""
    inv = tmp_path / "inv.yaml"
    missing = tmp_path / "no-such-venv"
    inv.write_text("all:\n  hosts:\n    good: {ansible_connection: local}\n"
                   f"    bad: {{ansible_connection: local, venv: {missing}}}\n")
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "all", "--plan", home=tmp_path / "home")  # the main playbook
    assert res.returncode == 1, res.stdout + res.stderr
    assert "│" not in res.stdout, res.stdout
    cause = next((ln for ln in res.stdout.splitlines() if f"{missing}/bin/python3: no such interpreter" in ln), "")
    assert cause.endswith("create it, or fix the var"), res.stdout
