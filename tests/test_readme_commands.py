"""README's two commands are what CI runs, verbatim and in order (issue 24): the set-up and main
job first, then the tests, so CI sees what a newcomer sees (the main job installs fp4_kernels into
``.venv`` before the tests run)."""

from __future__ import annotations

import re

from tests.support.fleet import REPO


def readme_commands() -> list[str]:
    """The indented command lines of README's "The two commands" section, in order."""
    text = (REPO / "README.md").read_text()
    section = text.split("## The two commands", 1)[1].split("\n## ", 1)[0]
    return [line.strip() for line in section.splitlines() if re.match(r"^ {4}\S", line)]


def test_ci_runs_readmes_two_commands_verbatim_and_in_order():
    commands = readme_commands()
    assert commands == ["bash scripts/setup.sh && .venv/bin/fleetctl deploy --hosts local",
                        ".venv/bin/python3 -m pytest -q"], commands
    lines = [ln.strip() for ln in (REPO / ".ci" / "run").read_text().splitlines()]
    run = [ln for ln in lines if ln and not ln.startswith("#")]
    where = [run.index(cmd) for cmd in commands]  # ValueError: CI does not run it as README prints it
    assert where == sorted(where) and where[-1] == len(run) - 1, run
