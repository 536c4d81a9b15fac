"""The package's structure stays as docs/architecture.md draws it (rules: tests/support/structure_rules.py):
modules small, no private names taken from another module, nothing below reporting prints, imports
point down the layers, asyncssh only in connection/ssh*. Each rule is also shown failing on a
planted violation in a temporary tree, so none of them can pass by checking nothing."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fleetctl.connection.base import OutputLine
from fleetctl.engine.model import RunModel
from fleetctl.engine.observer import Observers
from tests.support.structure_rules import LAYERS, MAX_LINES, Violation, check

PACKAGE = Path(__file__).resolve().parent.parent / "fleetctl"

@pytest.fixture(scope="module")
def found() -> list[Violation]:
    return check(PACKAGE)


def _of(violations: list[Violation], rule: str) -> list[str]:
    return [str(v) for v in violations if v.rule == rule]


def test_no_module_of_the_package_is_over_450_lines(found):
    assert MAX_LINES == 450
    assert not _of(found, "size"), "\n".join(_of(found, "size"))


def test_no_module_imports_another_modules_private_name(found):
    assert not _of(found, "private-import"), "\n".join(_of(found, "private-import"))


def test_nothing_below_reporting_and_cli_prints(found):
    assert not _of(found, "no-print"), "\n".join(_of(found, "no-print"))


def test_imports_point_down_the_layers(found):
    assert not _of(found, "layers"), "\n".join(_of(found, "layers"))


def test_only_connection_ssh_modules_import_asyncssh(found):
    assert not _of(found, "asyncssh"), "\n".join(_of(found, "asyncssh"))


def test_every_subpackage_has_its_place_in_the_layers():
    subpackages = {d.name for d in PACKAGE.iterdir() if (d / "__init__.py").is_file()}
    assert subpackages <= set(LAYERS), f"not in LAYERS: {sorted(subpackages - set(LAYERS))}"


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    pkg = tmp_path / "fleetctl"
    for rel, text in {"__init__.py": "", "errors.py": "", "status.py": "", **files}.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(pkg).parents:
            (pkg / parent / "__init__.py").touch()
        path.write_text(textwrap.dedent(text))
    return pkg


PLANTED = {
    "size": ({"engine/big.py": "x = 1\n" * 451}, "fleetctl/engine/big.py:451: [size] 451 lines, over 450"),
    "private-import": ({"engine/hostlock.py": "def _parse(t):\n    return t\n",
                        "engine/session_start.py": "import os\nfrom .hostlock import _parse\n"},
                       "fleetctl/engine/session_start.py:2: [private-import] imports _parse from "
                       "fleetctl.engine.hostlock"),
    "private-import (absolute)": ({"cli/play.py": "from fleetctl.cli.adhoc import finish, _record\n",
                                   "cli/adhoc.py": ""},
                                  "fleetctl/cli/play.py:1: [private-import] imports _record from fleetctl.cli.adhoc"),
    "no-print": ({"engine/observer.py": "import sys\n\ndef warn(m):\n    print(m, file=sys.stderr)\n"},
                 "fleetctl/engine/observer.py:4: [no-print] prints"),
    "no-print (sys.stderr.write)": ({"connection/ssh.py": "import sys\nsys.stderr.write('x')\n"},
                                    "fleetctl/connection/ssh.py:2: [no-print] prints"),
    "no-print (sys.stdout.buffer)": ({"tasks/copy.py": "import sys\n\n\ndef f():\n    sys.stdout.buffer.write(b'x')\n"},
                                     "fleetctl/tasks/copy.py:5: [no-print] prints"),
    "no-print (traceback, fd 2)": ({"build/env.py": "import os, traceback\n\ntraceback.print_exc()\nos.write(2, b'x')\n"},
                                   "fleetctl/build/env.py:3: [no-print] prints"),
    "no-print (os.write to fd 2)": ({"facts/gather.py": "import os\nos.write(2, b'x')\n"},
                                    "fleetctl/facts/gather.py:2: [no-print] prints"),
    "layers": ({"engine/host.py": "def f():\n    from ..reporting.terminal import Live\n",
                "reporting/terminal.py": ""},
               "fleetctl/engine/host.py:2: [layers] engine imports fleetctl.reporting.terminal (reporting): "
               "reporting is above engine"),
    "layers (connection -> tasks)": ({"connection/base.py": "from fleetctl.tasks import ACTIONS\n",
                                      "tasks/__init__.py": ""},
                                     "fleetctl/connection/base.py:1: [layers] connection imports fleetctl.tasks"),
    "layers (an unplaced package)": ({"plugins/x.py": "from ..errors import FleetError\n"},
                                     "fleetctl/plugins/x.py:1: [layers] layer plugins is not in LAYERS"),
    "asyncssh": ({"engine/session.py": "import asyncssh\n"},
                 "fleetctl/engine/session.py:1: [asyncssh] imports asyncssh: only connection/ssh*.py may"),
}


@pytest.mark.parametrize("rule", sorted(PLANTED))
def test_each_rule_fails_on_a_planted_violation_naming_file_line_and_rule(tmp_path, rule):
    files, expected = PLANTED[rule]
    lines = [str(v) for v in check(_tree(tmp_path, files))]
    assert any(line.startswith(expected) for line in lines), f"{expected!r} not in {lines}"


def test_the_rules_pass_what_they_allow(tmp_path):
    """Downward imports, public names, a print inside a remote script's text, the CLI printing,
    ``as _alias`` of a public name, asyncssh in connection/ssh_x.py, a module's own
    ``if __name__ == "__main__":`` entry point printing its answer: no violation."""
    pkg = _tree(tmp_path, {
        "cli/app.py": "from ..engine.runner import run\nprint('ok')\n",
        "engine/runner.py": "from ..tasks import ACTIONS as _ACTIONS\nfrom .. import __version__\n\ndef run():\n"
                            "    return _ACTIONS\n",
        "tasks/__init__.py": "from ..connection.base import Result\nSCRIPT = 'print(1)'\nACTIONS = ()\n",
        "connection/base.py": "from ..errors import FleetError\nResult = object\n",
        "connection/ssh_x.py": "import asyncssh, os\n\ndef save(fd):\n    os.write(fd, b'key')\n",
        "playbook/model.py": "from ..tasks import ACTIONS\n",
        "engine/host.py": "from ..playbook.model import ACTIONS\n",
        "util/reader.py": "import json\n\ndef read():\n    return {}\n\nif __name__ == '__main__':\n"
                          "    print(json.dumps(read()))\n",
    })
    assert check(pkg) == []
    # the same print outside the entry point is one
    (pkg / "util" / "reader.py").write_text("import json\n\ndef read():\n    print(json.dumps({}))\n")
    assert [(v.path, v.rule) for v in check(pkg)] == [(f"{pkg.name}/util/reader.py", "no-print")]


class _Broken:
    def event(self, run, event):
        raise RuntimeError("reporter bug")


class _Lines:
    def __init__(self, fail_on_line: bool = False) -> None:
        self.events, self.lines, self.fail_on_line = [], [], fail_on_line

    def event(self, run, event):
        self.events.append(event)

    def line(self, run, host, line, shown):
        if self.fail_on_line:
            raise ValueError("line bug")
        self.lines.append((host, line.text))


def test_a_failing_observer_is_dropped_with_an_event_and_a_logged_warning_never_a_print(caplog, capsys):
    run = RunModel(kind="run")
    keeper, line_breaker = _Lines(), _Lines(fail_on_line=True)
    observers = Observers(run, [_Broken(), line_breaker, keeper])
    with caplog.at_level(logging.WARNING, logger="fleetctl.engine"):
        observers.emit("host.started", "gpu01")
        observers.line("gpu01", OutputLine(stream="stdout", data=b"hello\n"))
        observers.line("gpu01", OutputLine(stream="stdout", data=b"again\n"))
        observers.emit("host.finished", "gpu01", status="ok")
    names = [e.name for e in keeper.events]
    assert names == ["host.started", "run.observer_failed", "run.observer_failed", "host.finished"]
    failed = [e.data for e in keeper.events if e.name == "run.observer_failed"]
    assert failed == [{"observer": "_Broken", "error": "RuntimeError: reporter bug"},
                      {"observer": "_Lines", "error": "ValueError: line bug"}]
    # the line a failing observer raised on still reaches the observers after it: nothing logged is lost
    assert keeper.lines == [("gpu01", "hello"), ("gpu01", "again")]
    warnings = [r.getMessage() for r in caplog.records if r.name == "fleetctl.engine"]
    assert warnings == ["fleetctl: warning: _Broken stopped reporting: RuntimeError: reporter bug",
                        "fleetctl: warning: _Lines stopped reporting: ValueError: line bug"]
    assert capsys.readouterr() == ("", "")


def test_with_no_logging_set_up_the_warning_reaches_stderr_once_and_stdout_stays_clean():
    """What an operator (or a script using the API) sees when nothing configured ``logging``:
    Python's last-resort handler writes the one warning line to stderr."""
    code = ("from fleetctl.engine.model import RunModel\n"
            "from fleetctl.engine.observer import Observers\n"
            "class Broken:\n"
            "    def event(self, run, event):\n"
            "        raise RuntimeError('bug')\n"
            "obs = Observers(RunModel(kind='run'), [Broken()])\n"
            "obs.emit('host.started', 'h1')\n"
            "obs.emit('host.finished', 'h1', status='ok')\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stdout == ""
    assert res.stderr == "fleetctl: warning: Broken stopped reporting: RuntimeError: bug\n"


def test_no_plain_asyncio_wait_for_outside_within():
    """``asyncio.wait_for`` before Python 3.12 drops a cancellation (Ctrl-C, SIGTERM) that comes in
    the loop iteration where the awaited work completes (CPython gh-86296): every deadline in the
    package goes through :func:`fleetctl.util.within.within`, which never loses one."""
    root = Path(__file__).resolve().parents[1] / "fleetctl"
    offenders = [
        f"{path.relative_to(root)}:{n}"
        for path in sorted(root.rglob("*.py"))
        if path.name != "within.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "wait_for(" in line and not line.lstrip().startswith("#")
    ]
    assert offenders == []
