"""Dynamic inventory scripts without ``_meta.hostvars``: the ``--host`` calls run in parallel, at most
:data:`~fleetctl.inventory.sources.script.HOST_CALLS_AT_ONCE` at a time, and every script call of
one inventory load shares one budget (``FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S``); a call that hangs
is stopped with its children and named in one line, exit 2. Real ``/bin/sh`` scripts, run by the
real CLI (Ansible's script inventory contract: ``--list``, then ``--host HOST`` per host)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from fleetctl.inventory.sources.script import HOST_CALLS_AT_ONCE
from tests.test_inventory_cli import fleet, write

HOSTS = 40
LIST = f"""\
if [ "$1" = --list ]; then
  printf '{{"gpu": {{"hosts": [%s], "vars": {{"ansible_connection": "local"}}}}}}\\n' \\
    "$(seq -f '"g%02g"' 1 {HOSTS} | paste -sd, -)"
  exit 0
fi
"""


def test_host_calls_run_in_parallel_at_most_n_at_once(tmp_path):
    """Issue: one ``--host`` call per host, one after another, each with its own 60 s: a slow
    500-host script held the run for hours. Each call here waits until a second call has started
    (a barrier), so calls made one after another never finish (the load fails at the budget);
    in parallel all 40 answer, never more than HOST_CALLS_AT_ONCE running at once."""
    (tmp_path / "calls").mkdir()
    write(tmp_path, "slow.sh", '#!/bin/sh\ncd "$(dirname "$0")/calls"\n' + LIST + """\
: > "started.$2"; : > "running.$2"
ls running.* | wc -l > "seen.$2"
while [ "$(ls started.* | wc -l)" -lt 2 ]; do sleep 0.05; done
rm -f "running.$2"
printf '{"tag": "%s"}\\n' "$2"
""", mode=0o755)
    res = fleet(tmp_path, "-i", "slow.sh", "inventory", "--list", env={"FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S": "20"})
    assert res.returncode == 0, res.stderr
    hostvars = json.loads(res.stdout)["_meta"]["hostvars"]
    assert [(h, v["tag"]) for h, v in hostvars.items()] == [(f"g{i:02d}", f"g{i:02d}") for i in range(1, HOSTS + 1)]
    calls = tmp_path / "calls"
    assert len(list(calls.glob("started.*"))) == HOSTS and not list(calls.glob("running.*"))
    seen = [int(p.read_text()) for p in calls.glob("seen.*")]
    assert max(seen) <= HOST_CALLS_AT_ONCE, seen


def test_a_hung_host_call_is_stopped_at_the_budget_naming_the_script_and_host(tmp_path):
    """Two hosts' ``--host`` hang (a child holds the output open): one line naming the script and
    the first of them, exit 2, and no script process left behind."""
    write(tmp_path, "hang.sh", "#!/bin/sh\n" + LIST + """\
case "$2" in g03|g05) sh -c 'echo $$ > "child.$0.pid"; exec sleep 1000' "$2";; esac
echo '{}'
""", mode=0o755)
    res = fleet(tmp_path, "-i", "hang.sh", "hosts", "gpu", env={"FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S": "3"})
    assert res.returncode == 2 and res.stdout == "", res.stderr
    assert re.fullmatch(r"fleetctl: error: hang\.sh: inventory script ran past 3 s \(the budget of all its calls "
                        r"while the inventory loads\) with --host g03 and was stopped; \d+ more --host calls? "
                        r"unfinished \(set FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S for a longer limit\)\n", res.stderr), \
        res.stderr
    for name in ("g03", "g05"):
        child = int((tmp_path / f"child.{name}.pid").read_text())
        cmdline = Path(f"/proc/{child}/cmdline")
        assert not cmdline.exists() or b"sleep" not in cmdline.read_bytes()  # gone, not left running


def test_one_budget_for_list_and_host_calls_together(tmp_path):
    """``--list`` and ``--host`` each take 2 s, the budget is 3.5 s: each call alone fits, both
    together do not, and the call running when it is spent is named."""
    write(tmp_path, "slow.sh", """\
#!/bin/sh
sleep 2
if [ "$1" = --list ]; then echo '{"gpu": ["g1"]}'; else echo '{}'; fi
""", mode=0o755)
    res = fleet(tmp_path, "-i", "slow.sh", "hosts", "gpu", env={"FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S": "3.5"})
    assert res.returncode == 2, res.stderr
    assert res.stderr == ("fleetctl: error: slow.sh: inventory script ran past 3.5 s (the budget of all its calls "
                          "while the inventory loads) with --host g1 and was stopped (set "
                          "FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S for a longer limit)\n")


def test_a_failing_host_call_stops_the_others_and_is_named(tmp_path):
    write(tmp_path, "bad.sh", "#!/bin/sh\n" + LIST + """\
[ "$2" = g07 ] && { echo 'CMDB: no such host' >&2; exit 3; }
case "$2" in g0*) exec sleep 1000;; esac
echo '{}'
""", mode=0o755)
    res = fleet(tmp_path, "-i", "bad.sh", "hosts", "gpu", env={"FLEETCTL_INVENTORY_SCRIPT_TIMEOUT_S": "600"})
    assert (res.returncode, res.stderr) == (2, "fleetctl: error: bad.sh: inventory script exited with status 3 for "
                                               "--host g07: CMDB: no such host\n")


def test_a_bad_var_from_a_host_call_is_named_by_that_call_not_by_a_meta_key(tmp_path):
    """Operator trial: a script with no ``_meta``; ``ansible_prot`` came from ``dyn.sh --host qb``,
    and the error read ``dyn.sh: _meta.hostvars.qb.ansible_prot: unknown Ansible variable``, a key
    the script never printed. It names the call the var came from."""
    write(tmp_path, "dyn.sh", """#!/bin/sh
if [ "$1" = --list ]; then echo '{"gpu": {"hosts": ["qa", "qb"]}}'; exit 0; fi
case "$2" in qb) echo '{"ansible_prot": 22}';; *) echo '{}';; esac
""", mode=0o755)
    res = fleet(tmp_path, "-i", "dyn.sh", "hosts", "gpu")
    assert res.returncode == 2 and res.stdout == "", res.stderr
    assert res.stderr.startswith("fleetctl: error: dyn.sh --host qb: ansible_prot: unknown Ansible variable "
                                 "'ansible_prot'"), res.stderr
    assert "_meta" not in res.stderr and res.stderr.count("\n") == 1, res.stderr
