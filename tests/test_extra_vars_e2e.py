"""``-e`` wins over the inventory for fleetctl's own host settings and for connection vars, as
Ansible's variable precedence has it (extra vars always win): real venvs, a real sshd test host,
the real CLI."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.sshd import free_port

QUICK = "name: quick\nhosts: all\ntasks:\n  - name: say\n    command: {argv: [echo, hello]}\n"


def test_e_venv_wins_over_the_host_var_in_plan_dry_run_and_deploy(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for v in (a, b):
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(v)], check=True)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"box": {"ansible_connection": "local", "venv": str(a),
                                                                "workdir": str(tmp_path / "work")}}})
    play = tmp_path / "quick.yaml"
    play.write_text(QUICK)
    for mode in ("--plan", "--dry-run", None):
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "-e", f"venv={b}",
                       *([mode] if mode else []), home=tmp_path)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
        record = json.loads((last_run(tmp_path) / "run.json").read_text())
        assert record["hosts"]["box"]["facts"]["python"]["venv"] == str(b), mode  # not the inventory's a
    # a venv that is not there is never ignored: the host fails on it (as any host whose venv is
    # gone: a failure of that host, not bad input), the inventory's good venv is not used instead
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--plan", "-e", "venv=/nonexistent/v", home=tmp_path)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    record = (last_run(tmp_path) / "run.json").read_text()
    assert "preflight: venv /nonexistent/v: /nonexistent/v/bin/python3: no such interpreter" in record, res.stdout


@pytest.mark.sshd
def test_e_connection_vars_win_over_the_inventory_in_deploy_and_run(sshd_farm, tmp_path):
    """deploy's -e and run's are one option and one parser: the SSH user and port the inventory
    gets wrong are overridden alike (new-user trial: `fleetctl run` had no -e)."""
    host = sshd_farm.start("extra")
    wrong = {**host.inventory_vars(sshd_farm.known_hosts), "ansible_port": free_port(), "ansible_user": "nobody"}
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h": wrong}})
    play = tmp_path / "quick.yaml"
    play.write_text(QUICK)
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "-e", f"ansible_port={host.port}",
                   "-e", f"ansible_user={host.user}", home=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "h | hello" in res.stdout.replace("h  |", "h |")
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "-e", "ansible_port=many",
                   home=tmp_path)
    assert res.returncode == 2 and res.stderr.startswith("fleetctl: error: -e ansible_port: "), res.stderr
    assert "Traceback" not in res.stderr
    run = fleetctl("-i", str(inv), "run", "--hosts", "g", "--json", "-e", f"ansible_port={host.port}",
                   "-e", f"ansible_user={host.user}", "--", "echo", "from run", home=tmp_path)
    assert run.returncode == 0 and json.loads(run.stdout)["h"]["stdout"] == "from run\n", run.stderr
    assert fleetctl("-i", str(inv), "run", "--hosts", "g", "--", "true", home=tmp_path).returncode == 1  # the inventory's
    bad = fleetctl("-i", str(inv), "run", "--hosts", "g", "-e", "ansible_port=many", "--", "true", home=tmp_path)
    assert bad.returncode == 2 and bad.stderr.startswith("fleetctl: error: -e ansible_port: "), bad.stderr


@pytest.mark.sshd
def test_e_wins_for_the_setting_whichever_of_its_legacy_and_modern_names_either_side_uses(sshd_farm, tmp_path):
    """Operator's trial: an -e given by the modern name lost to the inventory's legacy name (and two
    -e naming one setting by both names let the legacy one win silently). -e wins for the setting,
    by either name; two -e with different values for one setting are refused, naming both."""
    host = sshd_farm.start("extra_alias")
    wrong = {**host.inventory_vars(sshd_farm.known_hosts)}
    del wrong["ansible_port"], wrong["ansible_user"]
    wrong.update(ansible_ssh_port=free_port(), ansible_ssh_user="nobody")
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h": wrong}})
    run = fleetctl("-i", str(inv), "run", "--hosts", "g", "--json", "-e", f"ansible_port={host.port}",
                   "-e", f"ansible_user={host.user}", "--", "id", "-un", home=tmp_path)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert json.loads(run.stdout)["h"]["stdout"] == f"{host.user}\n"
    both = fleetctl("-i", str(inv), "run", "--hosts", "g", "-e", f"ansible_port={host.port}", "-e", "ansible_ssh_port=2299",
                    "--", "true", home=tmp_path)
    assert both.returncode == 2, both.stdout + both.stderr
    assert both.stderr == (f"fleetctl: error: -e ansible_port={host.port} and -e ansible_ssh_port=2299 name one setting "
                           f"by its two names with different values; keep one\n"), both.stderr
    same = fleetctl("-i", str(inv), "run", "--hosts", "g", "--json", "-e", f"ansible_port={host.port}",
                    "-e", f"ansible_ssh_port={host.port}", "-e", f"ansible_ssh_user={host.user}", "--", "true",
                    home=tmp_path)
    assert same.returncode == 0, same.stderr[-2000:]


@pytest.mark.sshd
def test_facts_copy_and_fetch_take_the_deploys_e_for_venv_and_connection_vars(sshd_farm, tmp_path):
    """An operator checks facts, and moves files, with the -e the deploy will use (operator's
    trial: ``-e is not an option of facts``): the same option and parser as run's, the SSH user,
    port and venv the inventory gets wrong overridden alike, a bad value refused (exit 2), a var
    none of them reads named once."""
    host = sshd_farm.start("extra3")
    v = tmp_path / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(v)], check=True)
    wrong = {**host.inventory_vars(sshd_farm.known_hosts), "ansible_port": free_port(), "ansible_user": "nobody",
             "venv": str(tmp_path / "not-this-venv")}
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h": wrong}})
    right = ["-e", f"ansible_port={host.port}", "-e", f"ansible_user={host.user}", "-e", f"venv={v}"]
    res = fleetctl("-i", str(inv), "facts", "--hosts", "g", "--json", *right, home=tmp_path)
    doc = json.loads(res.stdout)["h"]
    assert doc["reachable"] and doc["python"]["venv"] == str(v), res.stderr[-2000:]
    # before the command too, as run's and deploy's
    res = fleetctl("-i", str(inv), *right, "facts", "--hosts", "g", "--json", home=tmp_path)
    assert json.loads(res.stdout)["h"]["python"]["venv"] == str(v), res.stderr[-2000:]
    src = tmp_path / "payload.txt"
    src.write_text("payload\n")
    res = fleetctl("-i", str(inv), "copy", "--hosts", "g", *right, "-e", "zzqx=1", str(src),
                   str(tmp_path / "on-host") + "/", home=tmp_path)
    assert res.returncode == 0 and (tmp_path / "on-host" / "payload.txt").read_text() == "payload\n", res.stderr
    assert [ln for ln in res.stderr.splitlines() if "warning" in ln] == [
        "fleetctl: warning: -e zzqx: fleetctl copy reads only host settings (ansible_user, ansible_port, "
        "venv...), and no template; it is ignored"]
    res = fleetctl("-i", str(inv), "fetch", "--hosts", "g", *right, str(src), str(tmp_path / "back") + "/",
                   home=tmp_path)
    assert res.returncode == 0 and (tmp_path / "back" / "h" / str(src).lstrip("/")).read_text() == "payload\n", \
        res.stderr
    for command in ("facts", "copy", "fetch"):  # a bad value: one line naming -e and the var, before any host
        args = [] if command == "facts" else [str(src), str(tmp_path / "x") + "/"]
        bad = fleetctl("-i", str(inv), command, "--hosts", "g", "-e", "ansible_port=many", *args, home=tmp_path)
        assert bad.returncode == 2 and bad.stderr.startswith("fleetctl: error: -e ansible_port: "), bad.stderr
        assert len(bad.stderr.splitlines()) == 1, bad.stderr


def test_an_extra_var_nothing_reads_is_named_with_the_closest_name_it_may_mean(tmp_path):
    """Ansible's extra vars are free-form: a -e var no template of the play reads (and that is
    not a fleetctl or Ansible setting) is run with, but named in one warning line, with the
    closest name that is read (new-user trial: ``-e arhcs=sm_90a`` built for the host's own SM
    without a word). A var the play reads, even only as ``x | default(...)``, is not named."""
    v = tmp_path / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(v)], check=True)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"box": {"ansible_connection": "local", "venv": str(v),
                                                                "workdir": str(tmp_path / "work")}}})
    play = tmp_path / "quick.yaml"
    play.write_text("name: quick\nhosts: all\ntasks:\n  - name: say\n"
                    "    command: {argv: [echo, \"{{ archs | default('own SM') }}\"]}\n")
    vars_file = tmp_path / "extra.yaml"
    vars_file.write_text("verify_devce: cpu\n")

    def warnings(*extra: str) -> list[str]:
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "--plan", *extra,
                       home=tmp_path)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]  # warned, never refused
        return [ln for ln in res.stderr.splitlines() if "warning" in ln]

    assert warnings("-e", "arhcs=sm_90a") == [
        "fleetctl: warning: -e arhcs: no task or template of quick.yaml reads it, nor does fleetctl; did you mean archs?"]
    assert warnings("-e", "archs=9.0a", "-e", f"venv={v}", "-e", "ansible_user=root") == []
    assert warnings("-e", f"@{vars_file}", "-e", "ansible_usr=root", "-e", "zzqx=1") == [
        "fleetctl: warning: -e verify_devce: no task or template of quick.yaml reads it, nor does fleetctl; "
        "did you mean verify_device?",
        "fleetctl: warning: -e ansible_usr: no task or template of quick.yaml reads it, nor does fleetctl; "
        "did you mean ansible_user?",
        "fleetctl: warning: -e zzqx: no task or template of quick.yaml reads it, nor does fleetctl; it is ignored"]
    # `fleetctl run` reads host settings only: its warning gives deploy's suggestion too (fresh
    # operator's trial: `run -e ansible_usr=x` said only "it is ignored")
    # a transposition in the prefix is named too (operator's trial: `-e ansbile_user=x` got no suggestion)
    assert warnings("-e", "ansbile_user=root") == [
        "fleetctl: warning: -e ansbile_user: no task or template of quick.yaml reads it, nor does fleetctl; "
        "did you mean ansible_user?"]
    run = fleetctl("-i", str(inv), "run", "--hosts", "g", "-e", "ansible_usr=root", "-e", "ansbile_user=root",
                   "-e", "zzqx=1", "--", "true", home=tmp_path)
    assert run.returncode == 0, run.stderr
    assert [ln for ln in run.stderr.splitlines() if "warning" in ln] == [
        "fleetctl: warning: -e ansible_usr: fleetctl run reads only host settings (ansible_user, ansible_port, "
        "venv...), and no template; it is ignored; did you mean ansible_user?",
        "fleetctl: warning: -e ansbile_user: fleetctl run reads only host settings (ansible_user, ansible_port, "
        "venv...), and no template; it is ignored; did you mean ansible_user?",
        "fleetctl: warning: -e zzqx: fleetctl run reads only host settings (ansible_user, ansible_port, "
        "venv...), and no template; it is ignored"]
    # a did-you-mean never points at a name fleetctl refuses: `-e become=yes` was told "did you mean
    # ansible_become?", which `-e ansible_become=yes` then refuses; it says what fleetctl offers instead
    offer = ("fleetctl refuses Ansible's ansible_become: fleetctl has no host-wide privilege escalation and would "
             "run every command as the login user: log in as the user the commands must run as (ansible_user), or "
             "mark the playbook tasks that need root 'become: true' (sudo -n)")
    run = fleetctl("-i", str(inv), "run", "--hosts", "g", "-e", "become=yes", "--", "true", home=tmp_path)
    assert run.returncode == 0, run.stderr
    assert [ln for ln in run.stderr.splitlines() if "warning" in ln] == [
        "fleetctl: warning: -e become: fleetctl run reads only host settings (ansible_user, ansible_port, "
        f"venv...), and no template; it is ignored; {offer}"]
    assert warnings("-e", "become=yes") == [
        f"fleetctl: warning: -e become: no task or template of quick.yaml reads it, nor does fleetctl; it is ignored; "
        f"{offer}"]


def test_no_did_you_mean_names_a_var_fleetctl_refuses():
    """Every refused or ignored Ansible var, misspelt (a letter dropped, its prefix dropped), gets
    what fleetctl does instead, never ``did you mean`` it (the -e hint of run, facts, copy, fetch
    and deploy: ``-e become_user=x`` was told "did you mean ansible_become_user?", which fleetctl
    then ignored)."""
    from fleetctl.api.playchecks import did_you_mean
    from fleetctl.inventory.ansible_support import BECOME_REFUSED, IGNORED, REFUSED
    from fleetctl.inventory.own_vars import own_var_names

    advice = {**{n: a for n, (_k, a) in REFUSED.items()}, **{n: a for n, (_d, a) in BECOME_REFUSED.items()},
              **IGNORED}
    for name, why in advice.items():
        for typo in (name[:-1], name[len("ansible_"):]):
            hint = did_you_mean(typo, own_var_names()) or ""
            assert not hint.startswith("did you mean ansible_") or hint[len("did you mean "):-1] not in advice, typo
            if hint.startswith(f"fleetctl refuses Ansible's {name}") or hint.startswith(f"fleetctl ignores "
                                                                                          f"Ansible's {name}:"):
                assert hint.endswith(why), (typo, hint)


def test_become_user_and_method_are_refused_where_a_task_becomes_and_never_suggested(tmp_path):
    """Operator trial: ``-e become_user=svc`` warned "did you mean ansible_become_user?", and
    ``ansible_become_user: svc`` was ignored: a task with ``become: true`` ran as root, not svc.
    Ansible reads ansible_become_user/ansible_become_method only where become is on; fleetctl's
    become (a task's ``become: true``) is root through ``sudo -n``. So a play with such a task is
    refused (one line, exit 2, naming file:line or -e, host and task) for a host that sets either to
    anything but Ansible's default; a play without one runs; the -e hint says what fleetctl does."""
    v = tmp_path / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(v)], check=True)
    box = {"ansible_connection": "local", "venv": str(v), "workdir": str(tmp_path / "work")}
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"box": {**box, "ansible_become_user": "svc"}}})
    root_inv = write_inventory(tmp_path / "root.yaml", {"g": {"box": {**box, "ansible_become_user": "root"}}})
    quick, becomes = tmp_path / "quick.yaml", tmp_path / "becomes.yaml"
    quick.write_text(QUICK)
    becomes.write_text(QUICK + "  - name: as root\n    become: true\n    command: {argv: [id, -u]}\n")
    refusal = ("which fleetctl does not honour where a task becomes (task 'as root' has become: true): fleetctl's "
               "become (a task's 'become: true') runs ")

    def deploy(inventory, play, *extra: str):
        return fleetctl("-i", str(inventory), "deploy", "--hosts", "g", "--playbook", str(play), "--plan", *extra,
                        home=tmp_path)

    bad = deploy(inv, becomes)
    assert (bad.returncode, len(bad.stderr.splitlines())) == (2, 1), bad.stderr
    assert bad.stderr.startswith(f"fleetctl: error: {tmp_path / 'inv.yaml'}:"), bad.stderr
    assert (f"g.hosts.box.ansible_become_user: host 'box' sets ansible_become_user = 'svc', {refusal}the task as "
            f"root through sudo -n, never as another user: log in as the user the commands must run as "
            f"(ansible_user)") in bad.stderr, bad.stderr
    job = fleetctl("-i", str(inv), "schedule", "--playbook", str(becomes), "--hosts", "g", "--at", "02:30", "--print",
                   home=tmp_path)  # the unattended job's deploy would be refused: refused when it is made
    assert (job.returncode, job.stdout, job.stderr) == (2, "", bad.stderr), job.stdout + job.stderr
    bad = deploy(root_inv, becomes, "-e", "ansible_become_method=su")
    assert (bad.returncode, len(bad.stderr.splitlines())) == (2, 1), bad.stderr
    assert bad.stderr.startswith(f"fleetctl: error: -e ansible_become_method: host 'box' sets ansible_become_method "
                                 f"= 'su', {refusal}sudo -n only, never su"), bad.stderr
    bad = deploy(root_inv, becomes, "-e", "ansible_sudo_user=svc")  # ansible-core's sudo plugin: become_user
    assert (bad.returncode, len(bad.stderr.splitlines())) == (2, 1), bad.stderr
    assert bad.stderr.startswith(f"fleetctl: error: -e ansible_sudo_user: host 'box' sets ansible_sudo_user = 'svc', "
                                 f"{refusal}the task as root"), bad.stderr
    for inventory, play in ((root_inv, becomes), (inv, quick)):  # Ansible's default; a play that never becomes
        ok = deploy(inventory, play)
        assert ok.returncode == 0, (play, ok.stderr[-2000:])
    offer = ("fleetctl refuses Ansible's ansible_become_user where a task becomes: fleetctl's become (a task's "
             "'become: true') runs the task as root through sudo -n")
    warned = [ln for ln in deploy(root_inv, quick, "-e", "become_user=svc").stderr.splitlines() if "warning" in ln]
    assert len(warned) == 1 and warned[0].startswith("fleetctl: warning: -e become_user: ") and offer in warned[0], \
        warned
    run = fleetctl("-i", str(root_inv), "run", "--hosts", "g", "-e", "become_user=svc", "--", "true", home=tmp_path)
    assert run.returncode == 0 and offer in run.stderr and "did you mean" not in run.stderr, run.stderr


def test_e_takes_the_forms_of_ansibles_extra_vars_json_yaml_pairs_and_files(tmp_path):
    """ansible-playbook's --extra-vars: "key=value or YAML/JSON, if filename prepend with @"
    (new-user trial: ``-e '{"archs": "9.0a", "x": [1,2]}'`` was refused). A JSON/YAML value keeps
    its type, several pairs may share one item, later items win, and a JSON-given key gets the
    did-you-mean warning a NAME=VALUE one gets."""
    v = tmp_path / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(v)], check=True)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"box": {"ansible_connection": "local", "venv": str(v),
                                                                "workdir": str(tmp_path / "work")}}})
    play = tmp_path / "show.yaml"
    play.write_text("name: show\nhosts: all\ntasks:\n  - name: show\n    command:\n      argv: [echo, "
                    "\"archs={{ archs }} n={{ x | length }} first={{ x[0] + 1 }} msg={{ msg }} v={{ version }}\"]\n")
    vars_file = tmp_path / "extra.json"
    vars_file.write_text('{"msg": "from the file"}')
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play),
                   "-e", '{"archs": "9.0a", "x": [1, 2], "version": "old"}', "-e", "{msg: yaml form, zarchs: 1}",
                   "-e", f"@{vars_file}", "--extra-vars", "version=1.23.45 other='a b'", home=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "archs=9.0a n=2 first=2 msg=from the file v=1.23.45" in res.stdout
    warned = [ln for ln in res.stderr.splitlines() if "warning" in ln]
    assert warned == [
        "fleetctl: warning: -e zarchs: no task or template of show.yaml reads it, nor does fleetctl; "
        "did you mean archs?",
        "fleetctl: warning: -e other: no task or template of show.yaml reads it, nor does fleetctl; it is ignored"]
    # a value with spaces stays one value, as before (no word of it is NAME=VALUE)
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "-e", '{"x": [5]}',
                   "-e", "archs=9.0a;10.0a", "-e", "msg=hello world", "-e", "version=x=y", home=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "archs=9.0a;10.0a n=1 first=6 msg=hello world v=x=y" in res.stdout


def test_e_archs_to_a_play_that_does_not_read_it_is_named_and_refused_where_it_builds(tmp_path):
    """``archs`` is fleetctl's own var, but only fp4-kernels.yaml's templates read it (new-user
    trial: ``-e archs=...`` to verify, nightly.yaml and schedule was silently unused). A play that
    builds nothing gets one warning line and runs; a play that builds (nightly.yaml's sgl-kernel
    build_wheel takes the archs from the host's GPUs) is refused with one line, exit 2, before any
    host is reached: it would build and install a wheel for other archs than given."""
    v = tmp_path / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(v)], check=True)
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"box": {"ansible_connection": "local", "venv": str(v),
                                                                "workdir": str(tmp_path / "work")}}})
    play = tmp_path / "quick.yaml"
    play.write_text(QUICK)
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "--plan", "-e", "archs=9.0a",
                   home=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert [ln for ln in res.stderr.splitlines() if "warning" in ln] == [
        "fleetctl: warning: -e archs: quick.yaml does not read it (archs: the arch list fp4-kernels builds for "
        "instead of the host's GPUs (-e archs='9.0a;10.0a')); it is ignored"]
    for cmd in (["deploy", "--playbook", "playbooks/nightly.yaml"], ["deploy", "--playbook", "playbooks/sgl-kernel.yaml"],
                ["schedule", "--playbook", "playbooks/nightly.yaml", "--at", "02:30", "--print"]):
        res = fleetctl("-i", str(inv), *cmd, "--hosts", "g", "-e", "archs=9.0a", home=tmp_path)
        assert res.returncode == 2, (cmd, res.stderr)
        assert res.stderr.startswith(f"fleetctl: error: {cmd[2]}: -e archs: this playbook builds (task 'Build "
                                     "sgl-kernel for"), res.stderr
        assert "does not read archs" in res.stderr and len(res.stderr.splitlines()) == 1, res.stderr
    # the same play with its build skipped builds nothing: a warning, as for quick.yaml
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", "playbooks/nightly.yaml", "--plan",
                   "--skip-tags", "build", "-e", "archs=9.0a", home=tmp_path)
    assert res.returncode != 2, res.stderr
    assert "fleetctl: warning: -e archs: nightly.yaml does not read it" in res.stderr


def test_a_bad_e_value_is_named_as_the_e_var_with_a_readable_cause(tmp_path):
    """New-user trial: a bad ``-e`` value was named as the inventory's (``inventory.yaml:
    u1-bash.fallback_archs: not a torch arch``), a template in ``-e workdir`` read "not supported in
    inventory fleetctl's host settings", and ``-e 'venv=$HOME/venv'`` "is a relative path". Each is
    one line naming ``-e VAR`` (exit 2, before anything connects); the inventory's own bad value is
    still named at its file, line and key."""
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"box": {"ansible_connection": "local",
                                                                "workdir": str(tmp_path / "work")}}})
    play = tmp_path / "quick.yaml"
    play.write_text(QUICK)

    def refused(*extra: str) -> str:
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "--plan", *extra, home=tmp_path,
                       env={"HOME": str(tmp_path)})
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stdout + res.stderr
        return res.stderr.strip()

    assert refused("-e", "fallback_archs=sm_90a") == (
        "fleetctl: error: -e fallback_archs: not a torch arch (want MAJOR.MINOR[a|f] such as '9.0a'): 'sm_90a'; "
        "did you mean '9.0a'?")
    assert refused("-e", "workdir=/x/{{inventory_hostname}}") == (
        "fleetctl: error: -e workdir: templated values ('{{ ... }}') are not supported in fleetctl's host settings: "
        "they are read as written, before any template is rendered; write the value itself")
    said = refused("-e", "venv=$HOME/venv")
    assert said.startswith("fleetctl: error: -e venv: '$HOME/venv' holds $HOME, an unexpanded shell variable: "
                           "fleetctl does not expand shell variables"), said
    assert f"gives {tmp_path}/venv;" in said and "relative" not in said, said  # the shell's form ($HOME: tests' home)

    bad = write_inventory(tmp_path / "bad.yaml", {"g": {"box": {"ansible_connection": "local", "fallback_archs": "sm_90a"}}})
    res = fleetctl("-i", str(bad), "deploy", "--hosts", "g", "--playbook", str(play), "--plan", home=tmp_path)
    assert res.returncode == 2 and res.stderr.strip() == (
        f"fleetctl: error: {bad}:8: all.children.g.hosts.box.fallback_archs: not a torch arch (want MAJOR.MINOR[a|f] "
        "such as '9.0a'): 'sm_90a'; did you mean '9.0a'?"), res.stderr


@pytest.mark.sshd
def test_a_key_file_takes_a_set_braced_variable_as_ansibles_ssh_does(sshd_farm, tmp_path):
    """Ansible hands ``ansible_ssh_private_key_file`` to ssh as ``-o IdentityFile=...``, where ssh
    expands ``${NAME}`` from the controller's environment: such an inventory reaches the host here
    too; ``$NAME`` (no braces: ssh leaves it) and an unset ``${NAME}`` fall under the one rule."""
    host = sshd_farm.start("keyvar")
    keys = str(host.client_key.parent)
    for key, rc in ((f"${{KEYS_DIR}}/{host.client_key.name}", 0), (f"$KEYS_DIR/{host.client_key.name}", 2),
                    (f"${{NO_SUCH_DIR}}/{host.client_key.name}", 2)):
        inv = write_inventory(tmp_path / "inv.yaml", {"g": {"h": {**host.inventory_vars(sshd_farm.known_hosts),
                                                                  "ansible_ssh_private_key_file": key}}})
        res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--", "true", home=tmp_path, env={"KEYS_DIR": keys})
        assert res.returncode == rc, (key, res.stdout + res.stderr)
        if rc == 2:
            var = key.split("/", 1)[0]
            assert res.stderr.startswith(f"fleetctl: error: {inv}:") and f"ansible_ssh_private_key_file: {key!r} " \
                f"holds {var}, an unexpanded shell variable" in res.stderr, res.stderr


def test_a_shell_variable_in_any_path_var_is_refused_by_one_rule(tmp_path):
    """Operator trial: ``workdir: $HOME/fleetctl`` (inventory or ``-e``) was taken as a folder
    ``~/$HOME/fleetctl`` while ``venv``/``cuda_home`` were refused. Every path-valued var, on the
    host or on the controller, is refused alike: one line each naming file:line:key or ``-e KEY``,
    exit 2, before anything runs (no workdir is made)."""
    from fleetctl.inventory.own_vars import OWN_VARS
    from fleetctl.inventory.settings import CONTROLLER_PATH_VARS, HOST_PATH_VARS

    path_like = {n for n, what in OWN_VARS.items() if re.search(r"\b(path|folder|file)\b", what)}
    assert path_like - HOST_PATH_VARS - CONTROLLER_PATH_VARS == set()  # a new path var joins the rule
    home = tmp_path / "home"
    bad = {"ansible_connection": "local", "workdir": "$HOME/fleetctl", "deploy_lock": "${HOME}/d.lock",
           "known_hosts": "$KH_DIR/known_hosts", "venv_versions_dir": "$SCRATCH/venvs"}
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"box": bad}})
    play = tmp_path / "quick.yaml"
    play.write_text(QUICK)
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path,
                   env={"HOME": str(home)})
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and "Traceback" not in res.stderr and len(lines) == 4, res.stdout + res.stderr
    by_key = {re.search(r"box\.(\w+): ", ln).group(1): ln for ln in lines}
    assert by_key["workdir"] == (
        f"fleetctl: error: {inv}:8: all.children.g.hosts.box.workdir: '$HOME/fleetctl' holds $HOME, an unexpanded "
        "shell variable: fleetctl does not expand shell variables (the path is used as it is, on the host): write "
        "the path in full (e.g. /home/USER/fleetctl), or let your shell expand it (-e with double quotes, not "
        f"single: gives {home}/fleetctl; right only when the host's path is the same as here)")
    for key in ("deploy_lock", "known_hosts", "venv_versions_dir"):
        assert f"all.children.g.hosts.box.{key}: '{bad[key]}' holds $" in by_key[key], by_key
        assert "an unexpanded shell variable: fleetctl does not expand shell variables" in by_key[key]
    assert "on the controller" in by_key["known_hosts"] and "on the host" in by_key["deploy_lock"]
    assert not home.exists() and not (tmp_path / "$HOME").exists()
    # a host whose settings equal another's but for a path var no settings model reads: refused too
    # (the merge computes each distinct set of settings once)
    twins = write_inventory(tmp_path / "twins.yaml", {"g": {"a": {}, "b": {"venv_versions_dir": "$SCRATCH/venvs"}}},
                            all_vars={"ansible_connection": "local"})
    res = fleetctl("-i", str(twins), "deploy", "--hosts", "g", "--playbook", str(play), "--plan", home=tmp_path)
    assert res.returncode == 2 and res.stderr.startswith(
        f"fleetctl: error: {twins}:9: all.children.g.hosts.b.venv_versions_dir: '$SCRATCH/venvs' holds $SCRATCH, "
        "an unexpanded shell variable"), res.stdout + res.stderr
    # the same through -e, over a good inventory: named as typed
    inv = write_inventory(tmp_path / "ok.yaml", {"g": {"box": {"ansible_connection": "local",
                                                               "workdir": str(tmp_path / "work")}}})
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), "-e", "workdir=$HOME/fleetctl",
                   "-e", "ssh_config=$HOME/ssh_config", home=tmp_path, env={"HOME": str(home)})
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        "fleetctl: error: -e ssh_config: '$HOME/ssh_config' holds $HOME, an unexpanded shell variable: fleetctl "
        "does not expand shell variables (the path is used as it is, on the controller): write the path in full "
        f"(e.g. /home/USER/ssh_config), or let your shell expand it (-e with double quotes, not single: gives "
        f"{home}/ssh_config)",
        "fleetctl: error: -e workdir: '$HOME/fleetctl' holds $HOME, an unexpanded shell variable: fleetctl does not "
        "expand shell variables (the path is used as it is, on the host): write the path in full (e.g. "
        f"/home/USER/fleetctl), or let your shell expand it (-e with double quotes, not single: gives {home}/fleetctl; "
        "right only when the host's path is the same as here)"], res.stderr
    assert not (tmp_path / "work").exists() and not home.exists()


def test_a_relative_workdir_is_refused_as_venv_is_and_a_home_one_reaches_the_play_resolved(tmp_path):
    """Operator trial: ``-e workdir=fleetwd`` passed ``facts``; ``deploy --plan`` made ``~/fleetwd``
    on the host, then failed ``cannot write 2048 MiB in / (for fleetwd/wheels)``: the run folder
    took it under the home folder, the play's ``{{ workdir }}`` as written (against /). A relative
    workdir is refused at load as a relative venv is (inventory, host vars, -e; exit 2, nothing
    made); ``~/x`` (the home folder said) stays, and the play sees it resolved."""
    home = tmp_path / "home"
    home.mkdir()
    play = tmp_path / "quick.yaml"
    play.write_text(QUICK.replace("[echo, hello]", '[echo, "wd={{ workdir }}"]'))
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"box": {"ansible_connection": "local", "workdir": "fleetwd"}}})
    for cmd in (("facts", "--hosts", "g"), ("deploy", "--hosts", "g", "--playbook", str(play), "--plan")):
        res = fleetctl("-i", str(inv), *cmd, home=tmp_path, env={"HOME": str(home)})
        assert res.returncode == 2 and res.stderr.strip().splitlines() == [
            f"fleetctl: error: {inv}:8: all.children.g.hosts.box.workdir: 'fleetwd' is a relative path, which the "
            "host would take against whatever folder a command runs in: write it absolute (e.g. /home/USER/fleetwd), "
            "or ~/fleetwd for a folder in the login user's home"], res.stdout + res.stderr
    ok = write_inventory(tmp_path / "ok.yaml", {"g": {"box": {"ansible_connection": "local"}}})
    for cmd in (("facts", "--hosts", "g"), ("deploy", "--hosts", "g", "--playbook", str(play), "--plan")):
        res = fleetctl("-i", str(ok), *cmd, "-e", "workdir=fleetwd", home=tmp_path, env={"HOME": str(home)})
        assert res.returncode == 2 and res.stderr.strip() == (
            "fleetctl: error: -e workdir: 'fleetwd' is a relative path, which the host would take against whatever "
            "folder a command runs in: write it absolute (e.g. /home/USER/fleetwd), or ~/fleetwd for a folder in "
            "the login user's home"), res.stdout + res.stderr
    assert sorted(p.name for p in home.iterdir()) == []  # nothing made on the host
    res = fleetctl("-i", str(ok), "deploy", "--hosts", "g", "--playbook", str(play), "-e", "workdir=~/fleetwd",
                   home=tmp_path, env={"HOME": str(home)})
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"wd={home}/fleetwd" in res.stdout and (home / "fleetwd" / "runs").is_dir(), res.stdout
