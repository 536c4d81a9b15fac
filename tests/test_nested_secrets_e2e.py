"""Secrets nested in dict vars, and secrets given with ``-e`` in any form, stay hidden everywhere
fleetctl writes or prints: stdout, the host log, events.jsonl, run.json (its ``command`` too) and the
HTML report; what is not secret is kept (operator trial: ``{{ registry.password }}`` printed in clear
though ``inventory --host`` masked it; ``run -e`` kept its secrets in run.json's command, and the
masking that existed dropped every argument after a secret pair)."""

from __future__ import annotations

import json
from pathlib import Path

from fleetctl.playbook.secret_values import derived_secret_names, secret_renderings
from fleetctl.util.redact import MASK, Redactor, secret_paths, unwrap
from tests.support.fleet import fleetctl, last_run, write_inventory

INV_PW, INV_TOK, LIST_TOK, GROUP_PW = "InvNestedPw_77", "InvNestedTok_88", "ListTok_55", "GroupDeepPw_31"
PLAY_PW, EXTRA_PW, FILE_PW, YAML_TOK = "Pw_nested_123", "ExtraPw_99", "FilePw_4242", "YamlTok_6161"
URL = "https://reg.example.com"


def written(home: Path, html: Path, *outputs: str) -> str:
    """Every byte the runs wrote under ``home/runs``, the HTML report and ``outputs``, as text."""
    files = b"".join(p.read_bytes() for p in (home / "runs").rglob("*") if p.is_file())
    return (files + html.read_bytes()).decode("utf-8", "replace") + "".join(outputs)


def report(home: Path, run: Path) -> tuple[Path, str]:
    html = home / f"{run.name}.html"
    res = fleetctl("report", run.name, "--html", str(html), home=home)
    assert res.returncode == 0, res.stderr[-2000:]
    return html, res.stdout + res.stderr


def test_nested_secrets_are_redacted_wherever_vars_come_from(tmp_path):
    """Inventory, group, play and ``-e`` (JSON, YAML, @file) vars holding a secret in a dict, a
    list of dicts or deeper: neither the value nor what a filter makes of it is printed or
    stored; a key beside it (``registry.url``, ``db.user``) stays visible."""
    inv = write_inventory(
        tmp_path / "inv.yaml",
        {"lab": {"box": {"ansible_connection": "local",
                         "deep": {"a": {"b": [{"c": {"passwd": GROUP_PW}}]}}}}},
        all_vars={"registry": {"url": URL, "password": INV_PW, "token": INV_TOK},
                  "mirrors": [{"name": "mirror-one", "auth_token": LIST_TOK}]})
    vars_file = tmp_path / "extra.yaml"
    vars_file.write_text(f"vault: {{nested: {{db_password: {FILE_PW}}}}}\n")
    play = tmp_path / "p.yaml"
    play.write_text(
        "name: nested secrets\ngather_facts: false\n"
        f"vars:\n  db: {{user: dbadmin, password: '{PLAY_PW}'}}\n"
        "tasks:\n"
        "  - name: login\n"
        "    shell: {cmd: 'echo logging in with {{ registry.password }} / {{ registry.token }}"
        " {{ registry[\"password\"] | upper }} at {{ registry.url }}; echo {{ mirrors[0].auth_token | lower }}"
        " {{ mirrors[0].name }}; echo {{ deep.a.b[0].c.passwd }} {{ db.password[2:] }} as {{ db.user }};"
        " echo {{ svc.password }} {{ vault.nested.db_password }} {{ ext.registry_token | reverse | join }}'}\n"
        "  - name: show\n"
        "    debug: {msg: '{{ db }}'}\n")
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "box", "--playbook", str(play),
                   "-e", json.dumps({"svc": {"password": EXTRA_PW}}), "-e", f"@{vars_file}",
                   "-e", f"{{ext: {{registry_token: {YAML_TOK}}}}}", home=tmp_path)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert f"at {URL}" in res.stdout and "mirror-one" in res.stdout and "as dbadmin" in res.stdout
    assert MASK in res.stdout
    html, shown = report(tmp_path, last_run(tmp_path))
    seen = written(tmp_path, html, res.stdout, res.stderr, shown)
    for value in (INV_PW, INV_TOK, INV_PW.upper(), LIST_TOK, LIST_TOK.lower(), GROUP_PW, PLAY_PW, PLAY_PW[2:],
                  EXTRA_PW, FILE_PW, YAML_TOK, YAML_TOK[::-1]):
        assert value not in seen, value
    assert URL in (last_run(tmp_path) / "logs" / "box.log").read_text()


def test_recorded_command_masks_exactly_the_secrets(tmp_path):
    """``run`` and ``deploy`` record their command line with every argument kept and the secret
    values of every ``-e`` form masked (pairs, several pairs in one item, JSON, YAML), in
    run.json, events.jsonl, the terminal and the HTML report."""
    inv = write_inventory(tmp_path / "inv.yaml", {"lab": {"box": {"ansible_connection": "local"}}})
    res = fleetctl("-i", str(inv), "run", "--hosts", "box", "-e", '{"hf_token": "hf_LEAK_A1"}',
                   "-e", "x=1 api_token=LEAK_B2", "-e", "wandb_key=C3xy keepme=2",
                   "-e", '{"registry": {"url": "u1", "password": "ExtraPw_99"}}', "--", "true", home=tmp_path)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    run = last_run(tmp_path)
    command = json.loads((run / "run.json").read_text())["command"]
    assert command[-2:] == ["--", "true"]
    assert "x=1 api_token=" + MASK in command and "wandb_key=" + MASK + " keepme=2" in command
    assert '{"hf_token": "' + MASK + '"}' in command
    assert '{"registry": {"url": "u1", "password": "' + MASK + '"}}' in command
    html, shown = report(tmp_path, run)
    seen = written(tmp_path, html, res.stdout, res.stderr, shown)
    for value in ("hf_LEAK_A1", "LEAK_B2", "C3xy", "ExtraPw_99"):
        assert value not in seen, value

    play = tmp_path / "p.yaml"
    play.write_text("name: noop\ngather_facts: false\ntasks:\n  - name: hi\n    debug: {msg: hi}\n")
    pairs = ("db_passwd=DbPw_0001 aws_secret_access_key=AwsKey_0002 region=eu-west-1 "
             "ansible_become_pass=BecomePw_03 mode=fast gh_token=GhTok_0004 level=3 sshPass=SshPw_0005")
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "box", "--playbook", str(play), "-e", pairs, home=tmp_path)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    run = last_run(tmp_path)
    command = json.loads((run / "run.json").read_text())["command"]
    assert (f"db_passwd={MASK} aws_secret_access_key={MASK} region=eu-west-1 ansible_become_pass={MASK} "
            f"mode=fast gh_token={MASK} level=3 sshPass={MASK}") in command
    html, shown = report(tmp_path, run)
    seen = written(tmp_path, html, res.stdout, res.stderr, shown)
    for value in ("DbPw_0001", "AwsKey_0002", "BecomePw_03", "GhTok_0004", "SshPw_0005"):
        assert value not in seen, value


def test_the_rule_for_nested_secrets():
    """Where nested secrets sit, which expressions read them, and a NAME=VALUE item masked word by word."""
    variables = {"registry": {"url": URL, "password": INV_PW}, "mirrors": [{"name": "m", "token": LIST_TOK}],
                 "blob": {"k": {"value": "MarkedDeep_1", "secret": True}}, "plain": {"a": 1, "enabled": True}}
    values, secrets = unwrap(variables)
    assert secrets == {INV_PW, LIST_TOK, "MarkedDeep_1"} and values["blob"] == {"k": "MarkedDeep_1"}
    paths = secret_paths(variables)
    assert {("registry", "password"), ("blob", "k")} <= paths and not any(p[0] == "plain" for p in paths)
    ctx = values
    assert secret_renderings("{{ registry.password | upper }} {{ registry.url }}", ctx, paths) == {INV_PW.upper()}
    assert secret_renderings("{{ mirrors[0].name }} {{ registry.get('url') }}", ctx, paths) == {URL}
    assert secret_renderings("{{ mirrors[0].name }} {{ plain.a }}", ctx, paths) == set()
    assert secret_renderings("{% for m in mirrors %}{{ m.token | lower }}{% endfor %}", ctx, paths) == {
        LIST_TOK.lower()}
    assert derived_secret_names({"hdr": "Bearer {{ registry.password }}", "u": "{{ registry.url }}",
                                 "h2": "{{ hdr }}"}, paths) - paths == {"hdr", "h2"}
    redact = Redactor()
    assert redact.obj("api_token=C3 x=1") == f"api_token={MASK} x=1"
    assert redact.obj("x=1 db_pass='a b' y=2") == f"x=1 db_pass={MASK} y=2"
    assert redact.obj("msg=hello world") == "msg=hello world"
    assert redact.obj("API_TOKEN=abc def") == f"API_TOKEN={MASK}"
