"""Read-only probe scripts that avoid an expensive import say exactly what the import would say.

The install-state probe (pip_install's STATE_SCRIPT) and the facts script's package versions find
distributions the way ``importlib.metadata`` does without importing it (its import is most of
their run time on every host of every deploy); here both are run on the controller's real venv
and compared with ``importlib.metadata`` itself.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from fleetctl.tasks.venv_state import STATE_SCRIPT

REPO = Path(__file__).resolve().parents[1]
DISTS = ["pip", "torch", "numpy", "fleetctl", "scikit-build-core", "scikit_build_core", "PyYAML", "no-such-dist"]

#: What STATE_SCRIPT said of a distribution when it used importlib.metadata (the reference).
REFERENCE = r'''
import hashlib, json, sys
import importlib.metadata as md
out = {}
for name in sys.argv[1:]:
    try:
        d = md.distribution(name)
        skip = ("INSTALLER", "REQUESTED", "direct_url.json", "RECORD")
        lines = sorted(l for l in (d.read_text("RECORD") or "").splitlines()
                       if l and not l.split(",")[0].endswith(skip) and "__pycache__" not in l)
        out[name] = {"version": d.version, "location": str(d.locate_file("")),
                     "record_sha256": hashlib.sha256("\n".join(lines).encode()).hexdigest()}
    except Exception:
        out[name] = None
print(json.dumps(out))
'''


def test_install_state_finds_each_distribution_as_importlib_metadata_does(tmp_path):
    # both run outside the checkout: from its root, sys.path[0] = '' finds the fleetctl.egg-info that
    # `pip install -e .` leaves there (a distribution outside the venv, which the state probe says)
    expected = json.loads(subprocess.run([sys.executable, "-c", REFERENCE, *DISTS], check=True, capture_output=True,
                                         text=True, cwd=tmp_path).stdout)
    assert expected["pip"] and expected["torch"] and expected["no-such-dist"] is None
    for name in DISTS:
        got = json.loads(subprocess.run([sys.executable, "-c", STATE_SCRIPT, name, str(tmp_path / "none.json")],
                                        check=True, capture_output=True, text=True, cwd=tmp_path).stdout.splitlines()[-1])
        where = ("in_venv", "user_site", "prefix", "venv_copy", "via")  # where it lies (read below), not importlib.metadata's
        # what stands in the way of replacing it (folders the login user cannot write, pip's stash): not importlib's
        # and its files less readable than their site-packages (an install under umask 077): not importlib's either
        blocks = ("locked", "n_locked", "locked_tops", "login_user", "stash", "unreadable", "n_unreadable", "site_mode")
        dist = got["dist"] and {k: v for k, v in got["dist"].items() if k not in ("damaged", "n_damaged", *where, *blocks)}
        assert dist == expected[name], name
        assert not (got["dist"] or {}).get("damaged"), got["dist"]  # this venv's installs are whole
        assert not (got["dist"] or {}).get("locked") and not (got["dist"] or {}).get("stash"), got["dist"]
        if got["dist"]:  # what the controller's venv holds is in it (sys.prefix), none in the user site
            assert (got["dist"]["in_venv"], got["dist"]["user_site"], got["dist"]["prefix"]) == (True, False, sys.prefix)
        assert got["record"] is None


def test_facts_package_versions_equal_importlib_metadata():
    spec = importlib.util.spec_from_file_location("facts_script", REPO / "playbooks" / "scripts" / "facts.py")
    facts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(facts)
    ns: dict = {}
    exec(facts.DIST_VERSIONS, ns)
    names = [*facts.PROBED_PACKAGES, *DISTS]
    code = ("import json, sys\nimport importlib.metadata as md\nout = {}\nfor n in sys.argv[1:]:\n"
            "    try:\n        out[n] = md.version(n)\n    except Exception:\n        out[n] = None\n"
            "print(json.dumps(out))\n")
    expected = json.loads(subprocess.run([sys.executable, "-c", code, *names], check=True, capture_output=True,
                                         text=True).stdout)
    assert ns["dist_versions"](names) == expected
    assert expected["torch"] and expected["pip"]


def test_a_probe_answered_ahead_unsets_what_its_step_unsets(tmp_path):
    """The run's first command runs remembered probes with the step's environment: a value of
    ``None`` unsets the variable (as :meth:`fleetctl.connection.base.Connection.run` does), as the
    build and install probes ask for PYTHONPATH, VIRTUAL_ENV and the conda variables. It once made
    every such probe go unanswered (a TypeError in the host script), costing a command each."""
    import base64
    import os

    from fleetctl.engine.session_start import BOOT, MARK, boot_stdin

    probe = {"argv": ["/bin/sh", "-c", 'echo "x=${FLT_X-unset} y=$FLT_Y"'], "env": {"FLT_X": None, "FLT_Y": "y"},
             "cwd": None, "timeout_s": 30}
    job = {"workdir": str(tmp_path / "w"), "run_id": "r1", "probes": [probe], "probe_limit_bytes": 1 << 20,
           "facts": False}
    res = subprocess.run([sys.executable, "-c", BOOT], input=boot_stdin(job), capture_output=True, check=True,
                         env={**os.environ, "FLT_X": "set"}, cwd=tmp_path)
    line = next(ln for ln in res.stdout.decode().splitlines() if ln.startswith(MARK))
    answer = json.loads(line[len(MARK):])["probes"][0]
    assert answer is not None and answer["rc"] == 0
    assert base64.b64decode(answer["out"]) == b"x=unset y=y\n"


def test_venv_probe_requirement_versions_equal_importlib_metadata_in_one_interpreter_or_two():
    """The build preflight's requirements question finds versions without importing
    importlib.metadata; with no requirement to read it runs in the probe's own interpreter."""
    from fleetctl.tasks.venv_probe import VENV_PROBE

    code = ("import json, sys\nimport importlib.metadata as md\nout = {}\nfor n in sys.argv[1:]:\n"
            "    try:\n        out[n] = md.version(n)\n    except Exception:\n        out[n] = None\n"
            "print(json.dumps(out))\n")
    expected = json.loads(subprocess.run([sys.executable, "-c", code, "setuptools", *DISTS], check=True,
                                         capture_output=True, text=True).stdout)
    for reqs in ([], DISTS):
        arg = json.dumps({"imports": [], "requirements": reqs, "tokens": None, "tmp": None})
        res = subprocess.run(["strace", "-f", "-qq", "-e", "trace=execve", "-o", "/dev/stderr", sys.executable, "-c",
                              VENV_PROBE, arg], capture_output=True, text=True, cwd="/", check=True)
        got = json.loads(res.stdout.strip().splitlines()[-1])
        assert got["probe_errors"] == {} and got["setuptools"] == expected["setuptools"]
        assert {r: v["installed"] for r, v in got["requirements"].items()} == {n: expected[n] for n in reqs}
        execs = [ln for ln in res.stderr.splitlines() if "execve(" in ln and "= 0" in ln]
        assert len(execs) == (1 if not reqs else 2), execs  # the probe itself, plus a child only to read requirements


#: What the install-state probe said of torch when it parsed every version.py with ast (the reference).
TORCH_REFERENCE = r'''
import ast, json, sys
out = {"torch": None, "cuda": None}
try:
    for node in ast.parse(open(sys.argv[1]).read()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        name = getattr(target, "id", None)
        if name in ("__version__", "cuda") and getattr(node, "value", None) is not None:
            out["torch" if name == "__version__" else "cuda"] = ast.literal_eval(node.value)
except (OSError, SyntaxError, ValueError):
    pass
print(json.dumps(out))
'''

VERSION_PY = {
    "the controller's own": None,  # filled in from the real torch
    "a CUDA build, as torch writes it": "from typing import Optional\n\n__all__ = ['__version__', 'debug', 'cuda', "
    "'git_version', 'hip', 'xpu']\n__version__ = '2.9.0+cu130'\ndebug = False\ncuda: Optional[str] = '13.0'\n"
    "git_version = '0fabc3ba44823f257e70ce397d989c8de5e362c1'\nhip: Optional[str] = None\nxpu: Optional[str] = None\n",
    "double quotes and a comment": '# generated\n__version__ = "2.4.1"\ncuda = "12.1"\n',
    "assigned twice: the last one counts": "__version__ = '1.0'\n__version__ = '2.0'\ncuda = None\n",
    "an escape in a string": "__version__ = '2.5\\x2e0'\ncuda = '12.4'\n",
    "an expression: not a literal": "import os\n__version__ = '2.5.0'\ncuda = os.environ.get('X')\n",
    "over two lines": "__version__ = (\n    '2.6.0'\n)\ncuda = '12.6'\n",
    "does not parse": "__version__ = '2.7.0\ncuda = '12.8'\n",
}


def test_install_state_reads_torchs_version_as_ast_does(tmp_path):
    """The install-state probe reads torch's version.py lines by a pattern where every line is a
    plain one (its ``import ast`` was a third of the probe's CPU on every host of every deploy),
    and by ast otherwise: the same answer either way."""
    import torch

    for i, (label, text) in enumerate(VERSION_PY.items()):
        root = tmp_path / f"site{i}"
        (root / "torch").mkdir(parents=True)
        (root / "torch" / "__init__.py").write_text("")
        if text is None:
            text = (Path(torch.__file__).parent / "version.py").read_text()
        (root / "torch" / "version.py").write_text(text)
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)}
        want = json.loads(subprocess.run([sys.executable, "-c", TORCH_REFERENCE, str(root / "torch" / "version.py")],
                                         check=True, capture_output=True, text=True, env=env).stdout)
        got = json.loads(subprocess.run([sys.executable, "-c", STATE_SCRIPT, "no-such-dist", str(tmp_path / "none")],
                                        check=True, capture_output=True, text=True, env=env, cwd="/").stdout
                         .splitlines()[-1])
        assert {"torch": got["torch"], "cuda": got["cuda"]} == want, label
    assert got["torch"] is None  # the case that does not parse: no answer, as before


def test_an_install_state_answer_kept_on_the_host_is_given_only_while_its_files_are_unchanged(tmp_path):
    """Under the deploy lock the run's first command keeps the answer of the install-state probe
    (which says what it read: FLEETCTL_PROBE_DEPS) in <workdir>/state/probe-answers.json and gives
    it again, without starting the venv's interpreter, only while every file and folder it was read
    from stats the same: a package pip-uninstalls, pip-installs again in another version, or the
    install record rewritten, is read anew. The engine's own run of the probe prints no deps."""
    import base64
    import os

    from fleetctl.engine.session_start import BOOT, MARK, boot_stdin
    from tests.support.tiny_ext import write_wheel
    from tests.test_facts_cache import pip_install
    from tests.test_facts_script import _make_venv

    venv = _make_venv(tmp_path / "venv", None)
    pip_install(venv, str(write_wheel(tmp_path / "wheels", "toyx", "1.0", {"toyx/__init__.py": ""})))
    import hashlib

    from fleetctl.tasks.venv_state import record_path

    # the venv's own record (venv_state.RECORD_LAYOUT): <installed>/<key of its real path>/toyx.json
    real = os.path.realpath(venv)
    base = tmp_path / "w" / "installed" / "toyx.json"
    record = base.parent / hashlib.sha256(real.encode()).hexdigest()[:16] / "toyx.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"sha256": "a", "venv": real}))
    probe = {"argv": [str(venv / "bin" / "python3"), "-c", STATE_SCRIPT, "toyx", str(base), ""],
             "env": {"PYTHONPATH": None}, "cwd": "/", "timeout_s": 60}

    def first_command() -> tuple[dict, dict]:
        job = {"workdir": str(tmp_path / "w"), "run_id": "r1", "probes": [probe], "probe_limit_bytes": 1 << 20,
               "facts": False, "lock": {"path": "", "record": "{}"}, "kept_min_age_s": 0}
        res = subprocess.run([sys.executable, "-S", "-c", BOOT], input=boot_stdin(job), capture_output=True,
                             check=True, cwd=tmp_path, timeout=120)
        out = json.loads(next(ln for ln in res.stdout.decode().splitlines() if ln.startswith(MARK))[len(MARK):])
        answer = out["probes"][0]
        assert answer["rc"] == 0 and b"@@FLEETCTL_DEPS@@" not in base64.b64decode(answer["err"])
        return json.loads(base64.b64decode(answer["out"]).decode().splitlines()[-1]), out

    state, out = first_command()
    assert state["dist"]["version"] == "1.0" and state["record"] == {"sha256": "a", "venv": real} and out["kept"] == 0
    assert state["venv"] == real and record_path(str(base.parent), "toyx", real) == str(record)
    again, out = first_command()
    assert again == state and out["kept"] == 1  # from the file: no interpreter started
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python3"), "uninstall", "-y", "-q",
                    "toyx"], check=True, capture_output=True)
    gone, out = first_command()
    assert gone["dist"] is None and "toyx" not in gone["dists"] and out["kept"] == 0
    pip_install(venv, str(write_wheel(tmp_path / "wheels", "toyx", "2.0", {"toyx/__init__.py": ""})))
    assert first_command()[0]["dist"]["version"] == "2.0"
    assert first_command()[1]["kept"] == 1
    record.write_text(json.dumps({"sha256": "b", "venv": real}))  # the same size, rewritten in place
    assert first_command()[0]["record"] == {"sha256": "b", "venv": real}
    record.write_text(json.dumps({"sha256": "c", "venv": real + "x"}))  # another venv's: counts for none
    assert first_command()[0]["record"] is None
    plain = subprocess.run(probe["argv"], capture_output=True, cwd="/", env={"PATH": os.environ["PATH"]})
    assert plain.returncode == 0 and b"@@FLEETCTL_DEPS@@" not in plain.stderr


def test_an_installed_file_truncated_or_deleted_is_named_and_its_kept_answer_dropped(tmp_path):
    """A file of the installed distribution whose size is not its RECORD's (truncated by a full
    disk or a crash mid-copy) or that is gone is named by the install-state probe, so pip_install
    installs again instead of saying "already installed (same sha256)"; the file is one of the
    answer's dependencies, so an answer kept on the host is not given again once it changes."""
    import base64

    from fleetctl.engine.session_start import BOOT, MARK, boot_stdin
    from tests.support.tiny_ext import write_wheel
    from tests.test_facts_cache import pip_install
    from tests.test_facts_script import _make_venv

    venv = _make_venv(tmp_path / "venv", None)
    pip_install(venv, str(write_wheel(tmp_path / "wheels", "toyz", "1.0",
                                      {"toyz/__init__.py": "", "toyz/data.bin": "x" * 4096})))
    probe = {"argv": [str(venv / "bin" / "python3"), "-c", STATE_SCRIPT, "toyz", str(tmp_path / "rec.json"), ""],
             "env": {"PYTHONPATH": None}, "cwd": "/", "timeout_s": 60}

    def first_command() -> tuple[dict, int]:
        job = {"workdir": str(tmp_path / "w"), "run_id": "r1", "probes": [probe], "probe_limit_bytes": 1 << 20,
               "facts": False, "lock": {"path": "", "record": "{}"}, "kept_min_age_s": 0}
        res = subprocess.run([sys.executable, "-S", "-c", BOOT], input=boot_stdin(job), capture_output=True,
                             check=True, cwd=tmp_path, timeout=120)
        out = json.loads(next(ln for ln in res.stdout.decode().splitlines() if ln.startswith(MARK))[len(MARK):])
        return json.loads(base64.b64decode(out["probes"][0]["out"]).decode().splitlines()[-1]), out["kept"]

    state, _ = first_command()
    assert state["dist"]["damaged"] == [] and state["dist"]["n_damaged"] == 0
    assert first_command()[1] == 1  # kept while nothing changed
    data = next(venv.glob("lib/python3*/site-packages/toyz/data.bin"))
    data.write_bytes(b"x" * 1000)
    state, kept = first_command()
    assert kept == 0 and state["dist"]["damaged"] == ["toyz/data.bin is 1000 bytes, RECORD says 4096"], state["dist"]
    data.unlink()
    state, kept = first_command()
    assert kept == 0 and state["dist"]["damaged"] == ["toyz/data.bin missing"]


def test_an_installed_file_changed_in_place_at_its_size_is_named_by_its_record_hash(tmp_path):
    """Operator trial: bytes of the installed ``.so`` overwritten in place (``dd conv=notrunc``), the
    size unchanged: the probe compared sizes only, so ``--plan`` said "nothing changed". With
    ``hash`` (pip_install's probe) the file's sha256 is compared with its RECORD's (PEP 376 / 627);
    the probe that passes no ``hash`` (venv_upgrade's, about torch) still only stats."""
    from tests.support.tiny_ext import write_wheel
    from tests.test_facts_cache import pip_install
    from tests.test_facts_script import _make_venv

    venv = _make_venv(tmp_path / "venv", None)
    pip_install(venv, str(write_wheel(tmp_path / "wheels", "toyh", "1.0",
                                      {"toyh/__init__.py": "", "toyh/_C.so": "x" * 4096})))

    def damaged(*extra: str) -> list:
        res = subprocess.run([str(venv / "bin" / "python3"), "-c", STATE_SCRIPT, "toyh", str(tmp_path / "rec.json"),
                              "", *extra], capture_output=True, check=True, cwd="/", timeout=60)
        return json.loads(res.stdout.decode().splitlines()[-1])["dist"]["damaged"]

    assert damaged("hash") == []
    so = next(venv.glob("lib/python3*/site-packages/toyh/_C.so"))
    with open(so, "r+b") as fh:
        fh.seek(1000)
        fh.write(b"CORRUPTCORRUPT!!")
    assert so.stat().st_size == 4096
    assert damaged("hash") == ["toyh/_C.so is 4096 bytes as RECORD says, but its sha256 is not RECORD's "
                               "(changed in place)"]
    assert damaged() == []
