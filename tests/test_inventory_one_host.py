"""One host's bad vars refuse only the commands that select that host, through the real CLI.

Operator trial: ``ansible_port`` misspelt ``ansible_prot`` in node03's host vars stopped
``deploy --hosts 'node[01-02]'`` (exit 2), and the nightly's ``--metrics-file`` kept the last good
run's ``fleetctl_run_success 1``. Each command runs as ``python -m fleetctl`` in a subprocess with
its own HOME (nothing in the real ``~``); the hosts are local.
"""

from __future__ import annotations

import json

from prometheus_client.parser import text_string_to_metric_families

from test_inventory_cli import fleet, write

PLAY = "name: nightly\nhosts: all\ngather_facts: false\ntasks:\n  - name: ok\n    command: {argv: ['true']}\n"
HOSTS = ("all:\n  hosts:\n    node01: {ansible_connection: local}\n    node02: {ansible_connection: local}\n"
         "    node03:\n      ansible_connection: local\n")


def _samples(path):
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(path.read_text()) for s in f.samples}


def test_a_misspelt_var_of_one_host_refuses_only_the_commands_that_select_it(tmp_path):
    write(tmp_path, "inv_typo.yaml", HOSTS + "      ansible_prot: 2222\n")
    write(tmp_path, "nightly.yaml", PLAY)
    line = ("fleetctl: error: inv_typo.yaml:7: all.hosts.node03.ansible_prot: unknown Ansible variable "
            "'ansible_prot'; did you mean 'ansible_port'?\n")
    prom = tmp_path / "nightly.prom"
    inv = ("-i", "inv_typo.yaml")
    res = fleet(tmp_path, *inv, "deploy", "--playbook", "nightly.yaml", "--hosts", "node[01-02]", "--json",
                "--metrics-file", str(prom))
    assert res.returncode == 0, res.stderr
    good = _samples(prom)
    assert good[("fleetctl_run_success", (("file", "nightly.prom"), ("playbook", "nightly")))] == 1
    assert fleet(tmp_path, *inv, "hosts", "node[01-02]").stdout == "  hosts (2):\n    node01\n    node02\n"
    assert json.loads(fleet(tmp_path, *inv, "inventory", "--host", "node01").stdout) == {
        "ansible_connection": "local"}
    assert fleet(tmp_path, *inv, "inventory", "--list", "--limit", "node01").returncode == 0
    for argv in (("deploy", "--playbook", "nightly.yaml", "--hosts", "all", "--plan"), ("hosts", "all"),
                 ("hosts", "node03"), ("inventory", "--host", "node03"), ("inventory", "--list"),
                 ("inventory", "--graph"), ("run", "--hosts", "node0*", "--", "true")):
        res = fleet(tmp_path, *inv, *argv)
        assert (res.returncode, res.stdout, res.stderr) == (2, "", line), argv
    # the nightly refused: its metrics say so (not the last good run's success), the last success kept
    res = fleet(tmp_path, *inv, "deploy", "--playbook", "nightly.yaml", "--hosts", "all", "--json",
                "--metrics-file", str(prom))
    assert (res.returncode, res.stdout, res.stderr) == (2, "", line)
    refused = _samples(prom)
    assert refused[("fleetctl_run_success", (("file", "nightly.prom"), ("playbook", "nightly")))] == 0
    info = [labels for (name, labels), _ in refused.items() if name == "fleetctl_run_info"]
    assert [dict(labels)["status"] for labels in info] == ["input_error"]
    last = ("fleetctl_last_success_timestamp_seconds", (("file", "nightly.prom"), ("playbook", "nightly")))
    assert refused[last] == good[last] > 0
    for host in ("node01", "node02"):
        key = ("fleetctl_host_last_success_timestamp_seconds", (("file", "nightly.prom"), ("host", host),
                                                                ("playbook", "nightly")))
        assert refused[key] == good[key] > 0


def test_bad_values_in_a_host_vars_file_refuse_only_that_host_and_every_line_is_named(tmp_path):
    write(tmp_path, "inventory.yaml", HOSTS)
    write(tmp_path, "host_vars/node01.yml", "max_jobs: 0\nventv: /opt/venv\n")
    assert fleet(tmp_path, "run", "--hosts", "node02,node03", "--", "true").returncode == 0
    # a pattern that leaves node01 out selects as before
    assert fleet(tmp_path, "hosts", "all[1:2]").stdout == "  hosts (2):\n    node02\n    node03\n"
    res = fleet(tmp_path, "run", "--hosts", "all", "--", "true")
    assert (res.returncode, res.stdout, res.stderr) == (2, "", (
        "fleetctl: error: host_vars/node01.yml:1: max_jobs: must be an integer of at least 1, not 0 (a number)\n"
        "fleetctl: error: host_vars/node01.yml:2: ventv: unknown variable 'ventv' looks like fleetctl's 'venv'; "
        "did you mean 'venv'?\n"))


def test_a_bad_group_var_still_refuses_every_command(tmp_path):
    write(tmp_path, "inventory.yaml", HOSTS + "  children:\n    gpu:\n      vars: {ansible_prot: 22}\n"
                                              "      hosts: {node03: }\n")
    for argv in (("hosts", "node01"), ("run", "--hosts", "node01", "--", "true")):
        res = fleet(tmp_path, *argv)
        assert (res.returncode, res.stdout, res.stderr) == (2, "", (
            "fleetctl: error: inventory.yaml:9: all.children.gpu.vars.ansible_prot: unknown Ansible variable "
            "'ansible_prot'; did you mean 'ansible_port'?\n")), argv
