"""Inventory sources and the look-before-you-run commands through the real CLI.

INI, inventory folders, ``group_vars/``/``host_vars/``, dynamic inventory scripts, several ``-i``,
``ansible-inventory`` for what only Ansible reads (a plugin configuration, Ansible Vault), and
``fleetctl inventory``/``fleetctl hosts`` -- each run as ``python -m fleetctl`` in a subprocess with
its own HOME (nothing in the real ``~``), local hosts really running commands where it matters.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetctl.inventory import SCHEMES, load_inventory

VENV_BIN = Path(sys.executable).parent


def fleet(tmp: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("FLEETCTL_", "ANSIBLE_"))}
    full.update(HOME=str(tmp), FLEETCTL_HOME=str(tmp / "fleetctl-home"), **(env or {}))
    return subprocess.run([sys.executable, "-m", "fleetctl", *args], cwd=tmp, env=full, capture_output=True,
                          text=True, timeout=300)


def write(tmp: Path, name: str, text: str, mode: int | None = None) -> Path:
    path = tmp / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mode is not None:
        path.chmod(mode)
    return path


INI = """\
# an INI inventory, as ansible-inventory reads it
box ansible_connection=local

[gpu]
gpu[01:03] ansible_user=root
gpu04:2222 max_jobs=4

[gpu:vars]
venv=/opt/venv
cuda_home=/usr/local/cuda-13.0

[fleet:children]
gpu
"""


def test_ini_inventory_hosts_and_list(tmp_path):
    write(tmp_path, "hosts.ini", INI)
    res = fleet(tmp_path, "-i", "hosts.ini", "hosts", "fleet[1:2]:box")
    assert res.returncode == 0, res.stderr
    assert res.stdout == "  hosts (3):\n    gpu02\n    gpu03\n    box\n"
    res = fleet(tmp_path, "-i", "hosts.ini", "inventory", "--list")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["gpu"]["hosts"] == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert data["fleet"] == {"children": ["gpu"]}
    assert data["_meta"]["hostvars"]["gpu04"] == {"ansible_port": 2222, "cuda_home": "/usr/local/cuda-13.0",
                                                  "max_jobs": 4, "venv": "/opt/venv"}
    res = fleet(tmp_path, "-i", "hosts.ini", "run", "--hosts", "box", "--json", "--", "echo", "from-ini")
    assert res.returncode == 0 and json.loads(res.stdout)["box"]["stdout"] == "from-ini\n", res.stderr


def test_group_vars_host_vars_and_graph(tmp_path):
    write(tmp_path, "inv/inventory.yaml", "all:\n  children:\n    gpu:\n      vars: {venv: /opt/inv}\n"
                                          "      hosts:\n        g1:\n        g2:\n")
    write(tmp_path, "inv/group_vars/all.yml", "workdir: /srv/fleet\n")
    write(tmp_path, "inv/group_vars/gpu/main.yml", "cuda_home: /usr/local/cuda-13.0\nmax_jobs: 8\n")
    write(tmp_path, "inv/host_vars/g2.yaml", "max_jobs: 2\n")
    write(tmp_path, "inv/group_vars/gpus.yml", "typo: true\n")  # no such group: a warning
    res = fleet(tmp_path, "-i", "inv/inventory.yaml", "inventory", "--host", "g2")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == {"cuda_home": "/usr/local/cuda-13.0", "max_jobs": 2, "venv": "/opt/inv",
                                      "workdir": "/srv/fleet"}
    assert res.stderr == ("fleetctl: warning: inv/group_vars/gpus.yml: matches no group in the inventory, so its "
                          "vars are not used; did you mean 'gpu'?\n")
    res = fleet(tmp_path, "-i", "inv/inventory.yaml", "inventory", "--graph", "gpu", "--vars")
    assert res.stdout.splitlines() == [
        "@gpu:", "  |--g1", "  |  |--{cuda_home = /usr/local/cuda-13.0}", "  |  |--{max_jobs = 8}",
        "  |  |--{venv = /opt/inv}", "  |  |--{workdir = /srv/fleet}", "  |--g2",
        "  |  |--{cuda_home = /usr/local/cuda-13.0}", "  |  |--{max_jobs = 2}", "  |  |--{venv = /opt/inv}",
        "  |  |--{workdir = /srv/fleet}", "  |--{cuda_home = /usr/local/cuda-13.0}", "  |--{max_jobs = 8}",
        "  |--{venv = /opt/inv}"]


def test_host_vars_shared_by_sibling_inventories_warn_only_typos(tmp_path):
    # Ansible users keep several inventory files beside one host_vars/ (Ansible's "Organizing host
    # and group variables"); a file for another inventory's host is not a typo, and Ansible is quiet.
    write(tmp_path, "inv/hosts1.yaml", "all:\n  hosts:\n    g01:\n    g02:\n    g03:\n    gpu-b:\n")
    write(tmp_path, "inv/hosts2.ini", "g01 ansible_connection=local\ng02 ansible_connection=local\n"
                                      "gpu-a ansible_connection=local\n")
    write(tmp_path, "inv/host_vars/g02.yml", "x: 2\n")
    write(tmp_path, "inv/host_vars/g03.yml", "x: 3\n")  # hosts1's; g03 -> g02 only renumbers
    write(tmp_path, "inv/host_vars/gpu-b.yml", "x: b\n")  # close to gpu-a, but hosts1.yaml names it
    write(tmp_path, "inv/host_vars/other.yml", "x: 0\n")  # like nothing here: another inventory's
    res = fleet(tmp_path, "-i", "inv/hosts2.ini", "inventory", "--host", "g02")
    assert res.returncode == 0 and json.loads(res.stdout)["x"] == 2, res.stderr
    assert res.stderr == ""
    write(tmp_path, "inv/host_vars/gpu-aa.yml", "x: typo\n")  # a typo of this inventory's gpu-a
    res = fleet(tmp_path, "-i", "inv/hosts2.ini", "inventory", "--host", "g02")
    assert res.returncode == 0, res.stderr
    assert res.stderr == ("fleetctl: warning: inv/host_vars/gpu-aa.yml: matches no host in the inventory, so its "
                          "vars are not used; did you mean 'gpu-a'?\n")


def test_inventory_folder_of_yaml_ini_and_script(tmp_path):
    write(tmp_path, "inv/10-base.yaml", "all:\n  children:\n    local:\n      hosts:\n"
                                        "        box: {ansible_connection: local}\n")
    write(tmp_path, "inv/20-more.ini", "[local:vars]\ngreeting=hello\n[extra]\nbox\n")
    write(tmp_path, "inv/30-script.py", "#!/usr/bin/env python3\nimport json, sys\n"
                                        "print(json.dumps({'scripted': ['box'], '_meta': {'hostvars': {'box': {'x': 1}}}}))\n",
          mode=0o755)
    write(tmp_path, "inv/README.md", "skipped, as Ansible skips it\n")
    res = fleet(tmp_path, "-i", "inv", "inventory", "--host", "box")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == {"ansible_connection": "local", "greeting": "hello", "x": 1}
    res = fleet(tmp_path, "-i", "inv", "hosts", "scripted:&extra", "--json")
    assert json.loads(res.stdout) == ["box"]


def test_dynamic_script_without_meta_is_asked_per_host(tmp_path):
    write(tmp_path, "dyn.py", """\
#!/usr/bin/env python3
import json, sys
if sys.argv[1] == "--list":
    print(json.dumps({"local": {"hosts": ["box"], "vars": {"ansible_connection": "local"}},
                      "gpu": ["g1", "g2"]}))
else:
    print(json.dumps({"box": {"tag": "from --host"}}.get(sys.argv[2], {})))
""", mode=0o755)
    res = fleet(tmp_path, "-i", "dyn.py", "inventory", "--list")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["gpu"] == {"hosts": ["g1", "g2"]} and data["_meta"]["hostvars"]["box"] == {
        "ansible_connection": "local", "tag": "from --host"}
    res = fleet(tmp_path, "-i", "dyn.py", "run", "--hosts", "local", "--json", "--", "echo", "scripted")
    assert res.returncode == 0 and json.loads(res.stdout)["box"]["stdout"] == "scripted\n", res.stderr


def test_several_sources_and_the_environment_variable(tmp_path):
    write(tmp_path, "base.yaml", "all:\n  vars: {color: base}\n  hosts:\n    box: {ansible_connection: local}\n")
    write(tmp_path, "over.ini", "[all:vars]\ncolor=over\n[extra]\nbox\nnew ansible_connection=local\n")
    res = fleet(tmp_path, "-i", "base.yaml", "-i", "over.ini", "inventory", "--host", "box")
    assert json.loads(res.stdout)["color"] == "over", res.stderr
    res = fleet(tmp_path, "hosts", "extra", env={"FLEETCTL_INVENTORY": "base.yaml,over.ini"})
    assert res.stdout == "  hosts (2):\n    box\n    new\n", res.stderr
    res = fleet(tmp_path, "-i", "over.ini", "-i", "base.yaml", "inventory", "--host", "box")
    assert json.loads(res.stdout)["color"] == "base"


def test_a_comma_in_i_is_a_host_list_and_files_named_there_get_the_hint(tmp_path):
    """``-i m1/hosts,m2/site.yaml`` is a host list of two hosts (Ansible's host_list rule), while
    ``FLEETCTL_INVENTORY=m1/hosts,m2/site.yaml`` reads two sources (operator's trial: the docs'
    "several comma-separated" read as both). A host list entry that is a file here fails to
    resolve with the hint to give each file its own -i; an entry that is no file has none."""
    write(tmp_path, "m1/hosts", "[g]\nbox ansible_connection=local\n")
    write(tmp_path, "m2/site.yaml", "all:\n  hosts:\n    other: {ansible_connection: local}\n")
    res = fleet(tmp_path, "hosts", "all", env={"FLEETCTL_INVENTORY": "m1/hosts,m2/site.yaml"})
    assert sorted(res.stdout.split()) == ["(2):", "box", "hosts", "other"], res.stdout + res.stderr
    res = fleet(tmp_path, "-i", "m1/hosts", "-i", "m2/site.yaml", "run", "--hosts", "all", "--", "true")
    assert res.returncode == 0, res.stderr
    hint = "(-i with a comma is a host list, as in Ansible; give each inventory file its own -i)"
    for command in (["run", "--hosts", "all", "--", "true"], ["facts", "--hosts", "all"]):
        res = fleet(tmp_path, "-i", "m1/hosts,m2/site.yaml,m3/none.yaml", "--connect-timeout", "5", *command)
        lines = [ln for ln in (res.stdout + res.stderr).splitlines() if "UNREACHABLE: cannot resolve" in ln]
        assert res.returncode == 1 and len(lines) == 3, res.stdout + res.stderr
        for name in ("m1/hosts", "m2/site.yaml"):
            assert any(ln.startswith(f"{name}: UNREACHABLE: cannot resolve {name}: ") and ln.endswith(hint)
                       for ln in lines), (name, lines)
        assert not any(hint in ln for ln in lines if ln.startswith("m3/none.yaml")), lines


def test_hosts_json_fold_limit_and_secrets(tmp_path):
    write(tmp_path, "inventory.yaml", "all:\n  vars:\n    api_token: abc123secret\n    db: {value: s3cr3tpass, secret: true}\n"
                                      "  hosts:\n    gpu[01:12].dc1:\n    other:\n")
    res = fleet(tmp_path, "hosts", "gpu*", "--fold")
    assert res.stdout == "gpu[01-12].dc1\n", res.stderr
    res = fleet(tmp_path, "hosts", "all", "--limit", "gpu0[1-3].dc1", "--json")
    assert json.loads(res.stdout) == ["gpu01.dc1", "gpu02.dc1", "gpu03.dc1"]
    res = fleet(tmp_path, "inventory", "--host", "other")
    assert "abc123secret" not in res.stdout and "s3cr3tpass" not in res.stdout
    assert json.loads(res.stdout) == {"api_token": "********", "db": "********"}


def test_a_missing_key_file_is_refused_for_the_commands_that_select_its_host(tmp_path):
    # New-user trial: it was "far: unreachable", exit 1. A path the inventory names that is not
    # there is bad input (exit 2, one line); a command that does not select the host runs.
    write(tmp_path, "inventory.yaml", "all:\n  hosts:\n    box: {ansible_connection: local}\n"
                                      "    far: {ansible_host: 127.0.0.1, ansible_port: 1, "
                                      "ansible_ssh_private_key_file: keys/gone}\n")
    line = (f"fleetctl: error: inventory.yaml:4: all.hosts.far.ansible_ssh_private_key_file: host 'far': private "
            f"key file 'keys/gone' ({tmp_path / 'keys' / 'gone'}) does not exist on this controller\n")
    for argv in (("run", "--hosts", "all", "--json", "--", "true"), ("facts", "--hosts", "far", "--json"),
                 ("verify", "--hosts", "all"), ("deploy", "--hosts", "far", "--plan")):
        res = fleet(tmp_path, *argv)
        assert (res.returncode, res.stdout, res.stderr) == (2, "", line), argv
    res = fleet(tmp_path, "run", "--hosts", "box", "--json", "--", "true")
    assert res.returncode == 0 and json.loads(res.stdout)["box"]["rc"] == 0, res.stderr


def test_hosts_of_other_connection_kinds_do_not_stop_the_others(tmp_path):
    write(tmp_path, "inventory.yaml", "all:\n  hosts:\n    box: {ansible_connection: local}\n"
                                      "    win1: {ansible_connection: winrm, ansible_winrm_transport: ntlm}\n")
    assert fleet(tmp_path, "run", "--hosts", "box", "--", "true").returncode == 0
    res = fleet(tmp_path, "run", "--hosts", "all", "--", "true")
    assert res.returncode == 2 and res.stderr == (
        "fleetctl: error: inventory.yaml:4: all.hosts.win1.ansible_connection: connection 'winrm' is not one "
        "fleetctl has (local, slurm, ssh)\n")


# -- what only Ansible reads ----------------------------------------------------------------------

ANSIBLE = {"FLEETCTL_ANSIBLE_INVENTORY": str(VENV_BIN / "ansible-inventory")}


def test_plugin_configuration_through_ansible_inventory(tmp_path):
    write(tmp_path, "gen.yml", "plugin: ansible.builtin.generator\nhosts:\n  name: \"{{ role }}-{{ env }}\"\n"
                               "  parents:\n    - name: \"{{ env }}\"\nlayers:\n  role: [web, db]\n  env: [dev, prod]\n")
    res = fleet(tmp_path, "-i", "gen.yml", "hosts", "prod", env=ANSIBLE)
    assert res.returncode == 0, res.stderr
    assert res.stdout == "  hosts (2):\n    web-prod\n    db-prod\n"  # as `ansible prod --list-hosts`
    res = fleet(tmp_path, "-i", "gen.yml", "hosts", "prod", env={"FLEETCTL_ANSIBLE_INVENTORY": ""})
    assert res.returncode == 2 and res.stderr == (
        "fleetctl: error: gen.yml:1: plugin: an inventory plugin configuration needs Ansible to read it, and "
        "ansible-core is not installed (pip install ansible-core)\n")


def test_vaulted_values_are_decrypted_and_kept_secret(tmp_path, monkeypatch):
    (tmp_path / "vault-pass").write_text("fleet-vault-pass\n")
    env = {**ANSIBLE, "ANSIBLE_VAULT_PASSWORD_FILE": str(tmp_path / "vault-pass")}
    enc = subprocess.run([str(VENV_BIN / "ansible-vault"), "encrypt_string", "--name", "db_password", "hunter2hunter2"],
                         capture_output=True, text=True, env={**os.environ, "HOME": str(tmp_path), **env}, timeout=120)
    assert enc.returncode == 0, enc.stderr
    body = "\n".join("    " + ln for ln in enc.stdout.strip().splitlines())
    write(tmp_path, "inventory.yaml", f"all:\n  vars:\n{body}\n  hosts:\n    box: {{ansible_connection: local}}\n")
    res = fleet(tmp_path, "inventory", "--host", "box", env=env)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == {"ansible_connection": "local", "db_password": "********"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert load_inventory(tmp_path / "inventory.yaml").hosts["box"].vars["db_password"] == {
        "value": "hunter2hunter2", "secret": True}
    res = fleet(tmp_path, "inventory", "--host", "box", env=ANSIBLE)  # no vault password
    assert res.returncode == 2 and "give Ansible the vault password" in res.stderr, res.stderr


# -- the scheme registry (-i slurm: will be one line in SCHEMES) ------------------------------------

def fake_partition(argument: str) -> dict:
    """A stand-in scheme source: ``--list`` JSON for the partition named."""
    return {argument: {"hosts": [f"{argument}-n1", f"{argument}-n2"], "vars": {"ansible_connection": "local"}},
            "_meta": {"hostvars": {f"{argument}-n1": {"slot": 1}}}}


def test_scheme_sources_enter_through_list_json(monkeypatch, tmp_path):
    monkeypatch.setitem(SCHEMES, "fake", f"{__name__}:fake_partition")
    write(tmp_path, "base.yaml", "all:\n  vars: {color: base}\n  children:\n    gpu:\n      vars: {color: gpu}\n")
    inv = load_inventory([str(tmp_path / "base.yaml"), "fake:gpu"])
    assert inv.groups["gpu"].hosts == ("gpu-n1", "gpu-n2")
    assert inv.hosts["gpu-n1"].vars == {"color": "gpu", "ansible_connection": "local", "slot": 1}
    assert inv.hosts["gpu-n1"].connection == "local"


@pytest.mark.parametrize("args", [["inventory", "--list", "--graph"], ["inventory", "--list", "gpu"]])
def test_inventory_command_usage(tmp_path, args):
    write(tmp_path, "inventory.yaml", "all:\n  hosts:\n    box:\n")
    res = fleet(tmp_path, *args)
    assert res.returncode == 2 and res.stderr.startswith("fleetctl: error: inventory: ") and \
        len(res.stderr.splitlines()) == 1, res.stderr


def test_a_hung_inventory_script_is_stopped_at_the_timeout_with_one_line(tmp_path):
    # New-user trial: `#!/bin/sh` `sleep 1000` as -i hung fleetctl (each call waited 600 s, and a
    # killed sh left its sleep behind). Now: FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S (default 60 s, for all calls),
    # one line naming the script and the limit, exit 2, and the script's children stopped too.
    write(tmp_path, "hang.sh", "#!/bin/sh\nsh -c 'echo $$ > child.pid; exec sleep 1000'\n", mode=0o755)
    res = fleet(tmp_path, "-i", "hang.sh", "inventory", "--list",
                env={"FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S": "0.5"})
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == ("fleetctl: error: hang.sh: inventory script ran past 0.5 s (the budget of all its calls "
                          "while the inventory loads) with --list and was stopped "
                          "(set FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S for a longer limit)\n")
    child = int((tmp_path / "child.pid").read_text())
    cmdline = Path(f"/proc/{child}/cmdline")
    assert not cmdline.exists() or b"sleep" not in cmdline.read_bytes()  # gone, not left running
    res = fleet(tmp_path, "-i", "hang.sh", "inventory", "--list", env={"FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S": "0"})
    assert (res.returncode, res.stderr) == (2, "fleetctl: error: FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S: want a "
                                               "positive number of seconds, got '0'\n")


def test_a_var_only_the_merge_order_decides_is_refused_alike_by_inventory_hosts_and_run(tmp_path):
    """New-user trial: g1 in groups a100 and h100 whose group_vars set max_jobs 3 and 5:
    ``inventory --host g1`` printed max_jobs 5 (Ansible's merge order: the group last in ASCII order)
    and ``hosts`` listed g1, while ``run`` refused it. One rule now (Inventory.check_conflicts): the
    same line, exit 2, from each; a host the conflict does not touch is shown as before."""
    write(tmp_path, "inv/inventory.yaml", "all:\n  vars: {ansible_connection: local}\n  children:\n    gpu:\n"
                                          "      children:\n        a100:\n          hosts:\n            g1:\n"
                                          "        h100:\n          hosts:\n            g1:\n            g2:\n")
    write(tmp_path, "inv/group_vars/a100.yaml", "max_jobs: 3\n")
    write(tmp_path, "inv/group_vars/h100.yaml", "max_jobs: 5\n")
    refused = fleet(tmp_path, "-i", "inv/inventory.yaml", "run", "--hosts", "gpu", "--", "true")
    assert refused.returncode == 2 and "host 'g1' is in groups 'a100' and 'h100'" in refused.stderr, refused.stderr
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    for args in (("inventory", "--host", "g1"), ("hosts", "gpu")):
        res = fleet(tmp_path, "-i", "inv/inventory.yaml", *args)
        assert (res.returncode, res.stdout, res.stderr) == (2, "", refused.stderr), args
    res = fleet(tmp_path, "-i", "inv/inventory.yaml", "inventory", "--host", "g2")
    assert res.returncode == 0 and json.loads(res.stdout) == {"ansible_connection": "local", "max_jobs": 5}, res.stderr
    res = fleet(tmp_path, "-i", "inv/inventory.yaml", "hosts", "h100:!a100")
    assert res.returncode == 0 and "g2" in res.stdout and "g1" not in res.stdout, res.stderr


def test_group_vars_and_host_vars_files_override_inventory_vars_as_ansible_does(tmp_path):
    """New-operator trial: ``bar: 1`` on host nbash in hosts.yaml and ``bar: 2`` in
    ``host_vars/nbash.yml`` was refused ("gets bar from inv/host_vars/nbash.yml ... set bar in one
    place", exit 2); so were ``group_vars/lab.yml`` over ``lab: vars:`` and ``group_vars/all.yml``
    over lab's inventory var, for ansible_user and venv too. Ansible's precedence ("Understanding
    variable precedence") puts inventory group vars (4) below ``group_vars/all`` (5) and
    ``group_vars/*`` (7), inventory host vars (9) below ``host_vars/*`` (10): the file's value wins,
    silently. ``inventory --host`` shows it, ``hosts`` selects, and ``facts`` runs in the venv the
    files name (a real one; the inventory's venvs do not exist, and a local host's missing venv is
    refused)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    write(tmp_path, "inv/hosts.yaml",
          "all:\n  vars: {ansible_connection: local}\n  children:\n    lab:\n"
          f"      vars: {{foo: 1, ansible_user: lab-inv, venv: {tmp_path}/lab-inv, cuda_home: /usr/local/cuda-12.8}}\n"
          f"      hosts:\n        nbash: {{ansible_user: tcbash, bar: 1, venv: {tmp_path}/host-inv}}\n"
          "        n2:\n")
    write(tmp_path, "inv/host_vars/nbash.yml", f"bar: 2\nansible_user: tcfile\nvenv: {venv}\n")
    write(tmp_path, "inv/group_vars/lab.yml", f"foo: 2\nansible_user: lab-file\nvenv: {venv}\n")
    write(tmp_path, "inv/group_vars/all.yml", "cuda_home: /usr/local/cuda-13.0\n")
    common = {"ansible_connection": "local", "cuda_home": "/usr/local/cuda-13.0", "foo": 2, "venv": str(venv)}
    for host, own in (("nbash", {"ansible_user": "tcfile", "bar": 2}), ("n2", {"ansible_user": "lab-file"})):
        res = fleet(tmp_path, "-i", "inv", "inventory", "--host", host)
        assert (res.returncode, res.stderr) == (0, ""), res.stderr
        assert json.loads(res.stdout) == {**common, **own}
    res = fleet(tmp_path, "-i", "inv", "hosts", "lab")
    assert (res.returncode, res.stdout, res.stderr) == (0, "  hosts (2):\n    nbash\n    n2\n", "")
    # a local host runs as the controller's user, and refuses an ansible_user naming another
    # (test_run_and_deploy_refuse_a_local_host_with_another_user): -e names this one for the facts
    from fleetctl.inventory.ansible_support import controller_user

    res = fleet(tmp_path, "-i", "inv", "facts", "--hosts", "lab", "--json", "-e", f"ansible_user={controller_user()}")
    facts = json.loads(res.stdout)
    # the test's venv has no torch: a deploy refuses both hosts, so their facts are failed (exit 1)
    assert res.returncode == 1 and all("torch does not import" in facts[h]["error"] for h in ("nbash", "n2")), \
        res.stdout[-2000:] + res.stderr
    assert {h: facts[h]["python"]["prefix"] for h in ("nbash", "n2")} == {"nbash": str(venv), "n2": str(venv)}


def test_every_bad_var_of_an_inventory_is_named_at_once_a_line_each(tmp_path):
    """New-user trial: a file with several bad vars named only the first, one fix per run. As
    ansible-core and pydantic do, every bad value and misspelt name is reported, one line each
    ``FILE:LINE: KEY: why``, in file order; a group var refused for each of its hosts is one line;
    a ``host_vars/`` file's bad var too; exit 2, no traceback."""
    write(tmp_path, "inv/hosts.yaml", "all:\n  vars:\n    ansible_port: yes\n  hosts:\n"
                                      "    n1:\n      ansible_user: ''\n      venv: relative/venv\n"
                                      "      max_jobs: -3\n      keepalive_intervl: 5\n"
                                      "    n2:\n      ansible_connection: local\n")
    write(tmp_path, "inv/host_vars/n2.yml", "gpu_probe_timeout_s: soon\n")
    res = fleet(tmp_path, "-i", "inv", "hosts", "all")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    inv, hv = "inv/hosts.yaml", "inv/host_vars/n2.yml"  # as given (-i inv, in tmp_path)
    assert res.stderr.splitlines() == [
        f"fleetctl: error: {hv}:1: gpu_probe_timeout_s: must be a number greater than 0, not 'soon' (a string)",
        f"fleetctl: error: {inv}:3: all.vars.ansible_port: must be an integer from 1 to 65535, not true (a boolean)",
        f"fleetctl: error: {inv}:6: all.hosts.n1.ansible_user: must not be empty",
        f"fleetctl: error: {inv}:7: all.hosts.n1.venv: 'relative/venv' is a relative path, which the host would "
        "take against whatever folder a command runs in: write it absolute (e.g. /home/USER/venv)",
        f"fleetctl: error: {inv}:8: all.hosts.n1.max_jobs: must be an integer of at least 1, not -3 (a number)",
        f"fleetctl: error: {inv}:9: all.hosts.n1.keepalive_intervl: unknown variable 'keepalive_intervl' looks like "
        "fleetctl's 'keepalive_interval'; did you mean 'keepalive_interval'?",
    ], res.stderr


def test_commands_that_start_no_run_refuse_an_empty_string_variable_as_a_run_does(tmp_path):
    """Operator trial: ``FLEETCTL_INVENTORY="" fleetctl hosts all`` listed ./inventory.yaml's hosts
    (a run refuses the empty variable), and ``hosts``, ``inventory`` and ``logs`` took every other
    empty string-valued FLEETCTL_* variable too. Each is one line naming the variable, exit 2."""
    write(tmp_path, "inventory.yaml", "all:\n  hosts:\n    box: {ansible_connection: local}\n")
    assert fleet(tmp_path, "hosts", "all").returncode == 0  # the inventory itself is fine
    for name in ("FLEETCTL_INVENTORY", "FLEETCTL_SLURM_LAUNCHER", "FLEETCTL_SCRIPTS_DIR"):
        for args in (("hosts", "all"), ("inventory", "--list"), ("inventory", "--host", "box"), ("logs",)):
            res = fleet(tmp_path, *args, env={name: ""})
            assert (res.returncode, res.stdout) == (2, ""), (name, args, res)
            assert res.stderr.startswith(f"fleetctl: error: {name}: set but empty: "), (name, args, res.stderr)
            assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr


def test_run_and_deploy_refuse_a_local_host_with_another_user(tmp_path):
    """Operator trial: ``me: {ansible_connection: local, ansible_user: fltestok}`` run by root:
    ``run --hosts me -- id -un`` printed root, and the deploy left root-owned files in fltestok's
    venv. Refused before anything runs, exit 2, one line naming the file, line, host and var."""
    from fleetctl.inventory.ansible_support import controller_user

    other = "fltestok" if controller_user() != "fltestok" else "fltestother"
    (tmp_path / "inventory.yaml").write_text(
        f"all:\n  hosts:\n    me: {{ansible_connection: local, ansible_user: {other}, venv: {tmp_path}/venv}}\n")
    for args in (("run", "--hosts", "me", "--", "id", "-un"), ("deploy", "--hosts", "me", "--plan"),
                 ("facts", "--hosts", "me")):
        res = fleet(tmp_path, "-i", str(tmp_path / "inventory.yaml"), *args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            f"fleetctl: error: {tmp_path / 'inventory.yaml'}:3: all.hosts.me.ansible_user: host 'me' sets ansible_user = "
            f"'{other}', which fleetctl does not honour: a local host"), (args, res.stderr)
        assert res.stdout == "", (args, res.stdout)
