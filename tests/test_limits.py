"""Pure tests of the open-file budget and phase deadlines."""

from __future__ import annotations

import subprocess
import sys


from fleetctl.engine.fdlimit import needed_fds
from fleetctl.engine.deadlines import Deadlines
from fleetctl.tasks import ACTIONS
from fleetctl.playbook import load_playbook


def test_fd_budget_raises_the_soft_limit_or_says_why():
    assert needed_fds(1000, 50) == 64 + 1000 + 200
    code = (
        "import resource\n"
        "from fleetctl.engine.fdlimit import ensure_fd_budget\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, 4096))\n"
        "print(ensure_fd_budget(2000, 50))\n"
        "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, 512))\n"
        "try:\n"
        "    ensure_fd_budget(2000, 50)\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == out[1] == str(needed_fds(2000, 50))
    assert out[2].startswith("InputError 2000 hosts with --forks 50 need about 2264 open files, but the limit is 256")


def test_phase_timeout_overrides_the_playbook(tmp_path):
    play = tmp_path / "p.yaml"
    play.write_text("name: p\nhosts: all\ntasks:\n  - name: b\n    build_wheel: {src: /s, out_dir: /o}\n"
                    "  - name: c\n    command: {argv: ['true']}\n    timeout: 7\n")
    pb = load_playbook(play)

    def deadline(task, d: Deadlines) -> float:
        return d.for_phase(ACTIONS[task.action].phase, task.timeout_s)

    assert deadline(pb.tasks[0], Deadlines()) == 7200
    assert deadline(pb.tasks[1], Deadlines()) == 7
    opts = Deadlines(overrides={"build": 60.0, "command": 3.0})
    assert deadline(pb.tasks[0], opts) == 60
    assert deadline(pb.tasks[1], opts) == 3
