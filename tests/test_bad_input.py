"""Bad input end to end: exit status 2, one line naming the file, the line or key and what is wrong.

Two halves:

- The corpus ``tests/data/bad/<case>/``: each folder holds broken inventories, playbooks or a
  broken command line, and ``case.json`` with the ``argv`` to run and the one stderr line expected
  (``stderr`` exact, or ``stderr_re`` a regular expression; ``{dir}`` is the case folder,
  ``{home}`` is FLEETCTL_HOME; ``chmod`` sets modes git cannot keep; ``env`` adds environment
  variables). Every case runs through the
  real CLI (``python -m fleetctl`` in a subprocess, in a copy of the folder) and must exit 2 with
  exactly that one line on stderr, nothing on stdout, no traceback, no run record and nothing
  written in the (local) hosts' home: bad input is refused before any host is touched.
- A property test: random text mutations of a valid inventory and of a valid playbook, fed to the
  CLI in-process (click's CliRunner). Whatever the mutation, the exit status is 0, 1 or 2, no
  exception escapes, no traceback is printed, and an exit 2 prints exactly one line. Mutations that
  stay valid really run on a local host (facts, or deploy --dry-run of harmless tasks).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetctl.cli import main

REPO = Path(__file__).resolve().parents[1]
BAD = Path(__file__).parent / "data" / "bad"
CASES = sorted(p for p in BAD.iterdir() if (p / "case.json").is_file())


def _env(home: Path, user_home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    env.update(FLEETCTL_HOME=str(home), HOME=str(user_home), PYTHONDONTWRITEBYTECODE="1")
    return env


def _run_case(case: Path, root: Path) -> dict:
    """Copy the case into ``root`` and run its argv there; the outcome as a dict."""
    work = root / "case"
    shutil.copytree(case, work)
    meta = json.loads((work / "case.json").read_text())
    for name, mode in meta.get("chmod", {}).items():
        os.chmod(work / name, int(mode, 8))
    home, user_home = root / "fleetctl-home", root / "user-home"
    user_home.mkdir()
    res = subprocess.run([sys.executable, "-m", "fleetctl", *meta["argv"]], cwd=work,
                         env={**_env(home, user_home), **meta.get("env", {})},
                         capture_output=True, text=True, timeout=120)
    return {
        "meta": meta, "rc": res.returncode, "stdout": res.stdout, "stderr": res.stderr,
        "dir": str(work), "home": str(home),
        "runs": sorted(p.name for p in (home / "runs").iterdir()) if (home / "runs").is_dir() else [],
        "touched": sorted(str(p.relative_to(user_home)) for p in user_home.rglob("*")),
    }


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, dict]:
    """Every case, run concurrently (each is a separate process spending most of its time importing)."""
    root = tmp_path_factory.mktemp("bad")
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {c.name: pool.submit(_run_case, c, root / c.name) for c in CASES}
        return {name: f.result() for name, f in futures.items()}


def test_corpus_is_broad():
    names = [c.name for c in CASES]
    assert len(names) >= 40
    for prefix, at_least in (("inv_", 20), ("pb_", 15), ("cli_", 10), ("pattern_", 4)):
        assert sum(n.startswith(prefix) for n in names) >= at_least, prefix
    for case in CASES:
        meta = json.loads((case / "case.json").read_text())
        assert meta["about"] and meta["argv"] and ("stderr" in meta) != ("stderr_re" in meta), case.name


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_one_line_at_exit_2(case, outcomes):
    out = outcomes[case.name]
    meta, stderr = out["meta"], out["stderr"]
    assert "Traceback" not in stderr + out["stdout"], stderr
    assert out["rc"] == 2, (out["rc"], stderr)
    lines = stderr.splitlines()
    assert len(lines) == 1 and stderr.endswith("\n"), stderr
    line = lines[0]
    if "stderr" in meta:
        assert line == meta["stderr"].replace("{dir}", out["dir"]).replace("{home}", out["home"])
    else:
        assert re.search(meta["stderr_re"], line), (meta["stderr_re"], line)
    assert out["stdout"] == ""
    assert out["runs"] == [], "a run record was written: the input was not refused up front"
    assert out["touched"] == [], f"something was written in the host's home: {out['touched']}"


# -- property: mutations of valid files never give a traceback -----------------------------------

_VALID_INVENTORY = """\
all:
  vars:
    venv: {venv}
    known_hosts: {known_hosts}
    fallback_archs: "9.0a"
  children:
    local:
      hosts:
        box:
          ansible_connection: local
          ansible_host: 127.0.0.1
          ansible_port: 1
    rack:
      vars:
        workdir: {work}/rack
      hosts:
        box:
        twin[1:2]:
          ansible_host: 127.0.0.1
          ansible_port: 1
"""

_VALID_PLAYBOOK = """\
name: harmless
hosts: all
gather_facts: false
vars:
  greeting: hello
  out_dir: "{{ workdir | default('/tmp') }}/out"
tasks:
  - name: say {{ greeting }}
    command:
      argv: ["true", "{{ greeting }}"]
    register: said
    tags: [a]
  - name: only on box
    command: {argv: ["true"]}
    when: host == 'box'
    notify: done
  - debug:
      msg: "{{ out_dir }}"
    tags: b
handlers:
  - name: done
    command: {argv: ["true"]}
"""

_SCALARS = [
    "", "null", "~", "[]", "{}", "- x", "'x", '"', "1", "0", "-3", "70000", "true", "false", "yes", "a:b",
    "box[1:0]", "box[", "*", "&x", "!x", "!vault x", "{{ x }}", "{{", "{% if %}", "*a", "<<: *a", "[a, b]",
    "{a: 1}", "|", ">", "%", "@", "`", "#", "\t", ": :", "? x", "1.5", "0x10", "/nonexistent", "ssh", "local",
    "all", "box", "hosts", "vars", "children", "tasks", "handlers", "command", "argv", "debug", "when",
    "register", "notify", "include_tasks", "ansible_port", "venv", "key_file", "é", "\u2028",
]
_OPS = ["delete", "dup", "swap", "indent", "dedent", "tab", "scalar", "insert", "bytes"]


@st.composite
def mutated(draw, text: str) -> bytes:
    """``text`` after 1-4 random edits (mostly one, so that some results stay valid): delete/duplicate/swap lines, indent changes, a tab, a scalar
    replaced (key or value), a line inserted, random bytes inserted."""
    lines = text.splitlines()
    raw_inserts: list[tuple[int, bytes]] = []
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 2, 3, 4]))):
        if not lines:
            lines = [""]
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(_OPS))
        line = lines[i]
        if op == "delete":
            del lines[i]
        elif op == "dup":
            lines.insert(i, line)
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "indent":
            lines[i] = " " * draw(st.integers(1, 4)) + line
        elif op == "dedent":
            lines[i] = line[draw(st.integers(1, 4)):]
        elif op == "tab":
            at = draw(st.integers(0, len(line)))
            lines[i] = line[:at] + "\t" + line[at:]
        elif op == "scalar":
            key, sep, value = line.partition(":")
            new = draw(st.sampled_from(_SCALARS))
            if sep and draw(st.booleans()):
                lines[i] = f"{key}: {new}"
            else:
                indent = len(line) - len(line.lstrip(" "))
                lines[i] = " " * indent + new + (sep + value if sep else "")
        elif op == "insert":
            indent = " " * draw(st.integers(0, 8))
            lines.insert(i, indent + draw(st.sampled_from(_SCALARS)) + draw(st.sampled_from(["", ":", ": 1"])))
        else:
            raw_inserts.append((i, draw(st.binary(min_size=1, max_size=6))))
    data = [ln.encode() for ln in lines]
    for i, blob in raw_inserts:
        if i < len(data):
            at = min(len(data[i]), len(blob))
            data[i] = data[i][:at] + blob + data[i][at:]
    return b"\n".join(data) + b"\n"


@pytest.fixture(scope="module")
def sandbox():
    """A folder with a fake venv (no torch: facts stay fast), an empty known_hosts and homes."""
    root = Path(tempfile.mkdtemp(prefix="fleetctl-bad-"))
    (root / "venv" / "bin").mkdir(parents=True)
    os.symlink(shutil.which("python3") or sys.executable, root / "venv" / "bin" / "python3")
    (root / "known_hosts").write_text("")
    (root / "user-home").mkdir()
    fields = {"venv": root / "venv", "known_hosts": root / "known_hosts", "work": root / "work"}
    (root / "good-inventory.yaml").write_text(_VALID_INVENTORY.format(**fields))
    (root / "vars-playbook.yaml").write_text(_VARS_PLAYBOOK)
    yield root, fields
    shutil.rmtree(root, ignore_errors=True)


def _invoke(root: Path, args: list[str]):
    runner = CliRunner()
    env = {"FLEETCTL_HOME": str(root / "fleetctl-home"), "HOME": str(root / "user-home"), "FLEETCTL_INVENTORY": None}
    result = runner.invoke(main, args, env=env, catch_exceptions=True)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    output = result.output + result.stderr
    assert "Traceback" not in output, output
    assert result.exit_code in (0, 1, 2), (result.exit_code, output)
    if result.exit_code == 2:
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("fleetctl: error: "), result.stderr
    return result


_PROPERTY = settings(max_examples=60, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


# A mutated inventory runs a dry run of harmless tasks that template its vars: `facts` would be
# the obvious command, but a mutation that deletes the `venv` line makes the local host use
# fleetctl's own venv, and importing torch there takes seconds per example.
_INVENTORY_ARGS = ["deploy", "--playbook", "{root}/vars-playbook.yaml", "--hosts", "all", "--dry-run", "--json",
                   "--connect-timeout", "2"]
_VARS_PLAYBOOK = """\
name: show vars
gather_facts: false
tasks:
  - command:
      argv: ["true", "{{ venv }}", "{{ workdir }}", "{{ host }}"]
"""
# A mutated playbook runs on the local group only (the twins are unreachable ssh hosts).
_PLAYBOOK_ARGS = ["deploy", "--playbook", "{root}/playbook.yaml", "--hosts", "local", "--dry-run", "--json",
                  "--connect-timeout", "2"]


def _args(root: Path, inventory: Path, args: list[str]) -> list[str]:
    return ["-i", str(inventory), *(a.replace("{root}", str(root)) for a in args)]


@_PROPERTY
@given(data=st.data())
def test_mutated_inventory_never_gives_a_traceback(sandbox, data):
    root, _ = sandbox
    path = root / "inventory.yaml"
    path.write_bytes(data.draw(mutated((root / "good-inventory.yaml").read_text())))
    _invoke(root, _args(root, path, _INVENTORY_ARGS))


@_PROPERTY
@given(data=st.data())
def test_mutated_playbook_never_gives_a_traceback(sandbox, data):
    root, _ = sandbox
    (root / "playbook.yaml").write_bytes(data.draw(mutated(_VALID_PLAYBOOK)))
    _invoke(root, _args(root, root / "good-inventory.yaml", _PLAYBOOK_ARGS))


def test_unmutated_files_run(sandbox):
    """The property tests start from files that work; facts works on the same inventory."""
    root, _ = sandbox
    inv = root / "good-inventory.yaml"
    res = _invoke(root, _args(root, inv, _INVENTORY_ARGS))
    assert res.exit_code == 1, res.output  # the twins are ssh hosts on a closed port: unreachable
    hosts = json.loads(res.stdout)["hosts"]
    assert hosts["box"]["status"] == "ok" and hosts["twin1"]["status"] == "unreachable", hosts
    (root / "playbook.yaml").write_text(_VALID_PLAYBOOK)
    res = _invoke(root, _args(root, inv, _PLAYBOOK_ARGS))
    assert res.exit_code == 0, res.output
    res = _invoke(root, _args(root, inv, ["facts", "--hosts", "all", "--json", "--connect-timeout", "2"]))
    assert res.exit_code == 1, res.output
    facts = json.loads(res.stdout)
    assert facts["box"]["python"]["executable"].startswith(str(root / "venv"))
    assert facts["twin1"]["reachable"] is False and facts["twin2"]["reachable"] is False


# -- what the checks of selected hosts let through -----------------------------------------------

_DECIDED = """\
all:
  children:
    gpu:
      vars: {{cuda_home: /usr/local/cuda-12.8, workdir: {work}/a}}
      hosts:
        box: {{ansible_connection: local, cuda_home: /usr/local/cuda}}  # the host decides cuda_home
        other: {{ansible_connection: local}}
    rack1:
      vars: {{ansible_group_priority: 5, workdir: {work}/b}}         # priority decides workdir
      hosts:
        box:
    rack2:
      vars: {{cuda_home: /opt/cuda}}                                  # conflicts for 'other' only
      hosts:
        other:
    ssh:
      hosts:
        far: {{ansible_host: 127.0.0.1, ansible_port: 1, ansible_ssh_private_key_file: {key}, known_hosts: {known_hosts}}}
"""


def test_conflicts_the_user_decided_and_protected_keys_pass(sandbox):
    root, fields = sandbox
    key = root / "id_fleet"
    key.write_text("not a key: only the mode is checked before connecting\n")
    key.chmod(0o600)
    inv = root / "decided.yaml"
    inv.write_text(_DECIDED.format(key=key, **fields))
    res = _invoke(root, ["-i", str(inv), "run", "--hosts", "box", "--json", "--", "true"])
    assert res.exit_code == 0, res.output  # 'other' conflicts on cuda_home but is not selected
    res = _invoke(root, ["-i", str(inv), "run", "--hosts", "other", "--", "true"])
    assert res.exit_code == 2 and "host 'other' is in groups 'gpu' and 'rack2'" in res.stderr, res.stderr
    res = _invoke(root, ["-i", str(inv), "run", "--hosts", "far", "--connect-timeout", "2", "--json", "--", "true"])
    assert res.exit_code == 1 and json.loads(res.stdout)["far"]["unreachable"], res.output  # checked, then tried
    key.chmod(0o604)  # a loose key fails only its host, as a missing one does (tests/test_operator_paths.py)
    res = _invoke(root, ["-i", str(inv), "run", "--hosts", "far", "--connect-timeout", "2", "--json", "--", "true"])
    assert res.exit_code == 1, res.output
