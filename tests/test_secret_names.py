"""Which variable names are secret (:func:`fleetctl.util.redact.is_secret_name`), and that every output
path asks that one rule: run.json's argv and inventory, the HTML report, ``inventory --host``.

Operator trial: ``-e registry_pass=...`` reached run.json and the HTML report in clear, and
``inventory --host`` printed ``ssh_pass``, ``vault_pass``, ``passphrase``, ``key_passphrase`` and
``wandb_key`` values: the name rule knew ``password``/``passwd`` but not Ansible's own ``*_pass``
(``ansible_ssh_pass``, ``ansible_become_pass``), ``passphrase`` or ``*_key``.
"""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetctl.util.redact import MASK, Redactor, is_secret_name
from tests.support.fleet import fleetctl, last_run

SECRET = [
    "registry_pass", "ssh_pass", "vault_pass", "passphrase", "key_passphrase", "wandb_key", "ssh_key",
    "ansible_pass", "ansible_ssh_pass", "ansible_become_pass", "ansible_password", "ansible_become_password",
    "db_passwd", "smtp_passwrd", "PASS", "dbPass", "pass-word", "hf_token", "HF_TOKEN", "WANDB_API_KEY",
    "api-key", "apikey", "client_secret", "registry_credential", "docker_creds", "ansible_ssh_private_key",
    "auth", "Passphrase",
    # operator trial: a personal access token, a webhook's URL (its token is in it)
    "github_pat", "GITLAB_PAT", "slack_webhook_url", "teams_webhook", "SLACK_WEBHOOK_URL",
]
VISIBLE = [
    # where a secret lives, not the secret: operators need these
    "ansible_ssh_private_key_file", "ansible_private_key_file", "ssh_key_file", "wandb_key_file",
    "vault_password_file", "hf_token_path", "token_dir", "registry_url", "auth_url", "model_path",
    # pass/key only inside another word, or a public key
    "bypass", "passenger_count", "compass", "ssh_public_key", "host_pub_key", "key", "sort_keys",
    "path", "patch_dir", "pattern", "patches", "spatial", "slack_webhook_url_file", "github_pat_path",
    # fleetctl's and Ansible's ordinary connection vars
    "ansible_host", "ansible_user", "ansible_port", "venv", "cuda_home", "workdir", "known_hosts",
]


@pytest.mark.parametrize("name", SECRET)
def test_secret_looking_names_are_secret(name):
    assert is_secret_name(name)
    assert Redactor().obj({name: "v4lue"}) == {name: MASK}
    if "-" not in name:  # an environment variable's NAME=VALUE
        assert Redactor().obj([f"{name}=v4lue"]) == [f"{name}={MASK}"]


@pytest.mark.parametrize("name", VISIBLE)
def test_locations_and_ordinary_names_stay_visible(name):
    assert not is_secret_name(name)
    assert Redactor().obj({name: "/keys/id"}) == {name: "/keys/id"}


word = st.from_regex(r"[a-z][a-z0-9]{0,7}", fullmatch=True)


@settings(max_examples=60, deadline=None)
@given(prefix=st.lists(word, max_size=3), secret=st.sampled_from(["pass", "password", "passwd", "passphrase",
                                                                   "token", "secret", "credential"]),
       suffix=st.lists(word.filter(lambda w: w not in ("file", "path", "dir", "url")), max_size=2),
       sep=st.sampled_from(["_", "-"]), upper=st.booleans())
def test_a_secret_word_part_anywhere_makes_a_name_secret_unless_it_names_a_location(prefix, secret, suffix, sep,
                                                                                   upper):
    name = sep.join([*prefix, secret, *suffix])
    name = name.upper() if upper else name
    assert is_secret_name(name)
    for where in ("file", "path", "dir", "url"):
        assert not is_secret_name(f"{name}{sep}{where.upper() if upper else where}")


@settings(max_examples=30, deadline=None)
@given(prefix=st.lists(word, min_size=1, max_size=3).filter(lambda ws: ws[-1] not in ("public", "pub")))
def test_a_name_ending_in_key_is_secret_and_its_file_is_not(prefix):
    assert is_secret_name("_".join([*prefix, "key"]))
    assert not is_secret_name("_".join([*prefix, "key", "file"]))


def test_pass_and_key_names_are_masked_in_run_json_report_and_inventory(tmp_path):
    """The trial's commands, end to end: a --plan deploy with ``-e`` secrets, its HTML report, and
    ``inventory --host`` of a host whose vars are secrets; only paths stay visible."""
    host_secrets = {"ssh_pass": "SSHPASS42", "vault_pass": "VAULTPASS42", "passphrase": "PHRASE42",
                    "key_passphrase": "KPHRASE42", "wandb_key": "WANDB42"}
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"ok1": {
        "ansible_connection": "local", "ansible_ssh_private_key_file": "/keys/id_ed25519", **host_secrets}}}}))
    play = tmp_path / "play.yaml"
    play.write_text("name: p\nhosts: all\ngather_facts: false\ntasks:\n  - name: hi\n    command: {argv: ['true']}\n")
    res = fleetctl("-i", str(inv), "deploy", "--plan", "--hosts", "ok1", "--playbook", str(play),
                   "-e", "registry_pass=LEAKME42", "-e", "hf_token=HIDDEN42", home=tmp_path, timeout_s=120)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    run = last_run(tmp_path)
    record = (run / "run.json").read_text()
    doc = json.loads(record)
    assert f"registry_pass={MASK}" in doc["command"] and f"hf_token={MASK}" in doc["command"], doc["command"]
    html = tmp_path / "leak.html"
    res = fleetctl("report", run.name, "--html", str(html), home=tmp_path, timeout_s=120)
    assert res.returncode == 0, res.stderr[-2000:]
    res_inv = fleetctl("-i", str(inv), "inventory", "--host", "ok1", home=tmp_path, timeout_s=120)
    assert res_inv.returncode == 0, res_inv.stderr[-2000:]
    shown = json.loads(res_inv.stdout)
    assert shown["ansible_ssh_private_key_file"] == "/keys/id_ed25519"
    assert {k: shown[k] for k in host_secrets} == {k: MASK for k in host_secrets}
    everything = record + html.read_text() + res_inv.stdout + "".join(
        p.read_text(errors="replace") for p in run.rglob("*") if p.is_file())
    for value in ["LEAKME42", "HIDDEN42", *host_secrets.values()]:
        assert value not in everything, value
    assert "/keys/id_ed25519" in record


def test_masking_a_line_with_an_unclosed_quote_ends_at_once():
    """Every event string holding ``=`` is read as ``NAME=VALUE`` words; the word rule let a run of
    plain characters split among its repetitions in many ways, so a line that is not all words (an
    unclosed quote: ``login's``) tried every split, exponential in its words: ``fleetctl run`` of a
    command missing from the login's PATH spun at 100% CPU on its own error line, ``rc=127: id
    could not start on the host: not found on the login's PATH (...)``. Run apart, so a return of
    the blow-up fails here instead of hanging the suite."""
    import subprocess
    import sys

    line = ("rc=127: id could not start on the host: not found on the login's PATH "
            "(/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/a/b/c/d and some more words)")
    code = ("import sys; from fleetctl.util.redact import Redactor; r = Redactor(['SECRETVAL']); "
            "print(r.obj(sys.argv[1]) == sys.argv[1], r.obj('x=1 api_token=SECRETVAL y=2'))")
    res = subprocess.run([sys.executable, "-c", code, line], capture_output=True, text=True, timeout=120)
    assert res.stdout.split() == ["True", "x=1", "api_token=********", "y=2"], res.stdout + res.stderr
