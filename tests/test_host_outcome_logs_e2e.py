"""Every ad hoc kind's host log ends with the host's outcome line (``==> host OK...`` /
``==> host FAILED: CAUSE``), as a ``run`` host's log does: ``fleetctl logs RUN HOST`` of a
``facts`` host said nothing at all, and a ``copy``'s or ``fetch``'s ended with its own lines or a
``failed:`` line dressed as the host's stderr (``err| failed: ...``)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.support.fake_gpu import write_failing_nvidia_smi
from tests.support.fleet import fleetctl, last_run, write_inventory
from tests.support.sshd import free_port

NVML = "Failed to initialize NVML: Driver/library version mismatch"


def test_every_kinds_host_log_ends_with_the_hosts_outcome_line(tmp_path):
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"lh": {"ansible_connection": "local"}}})
    src = tmp_path / "f.txt"
    src.write_text("hi\n")
    broken = tmp_path / "broken-bin"  # a local host whose nvidia-smi fails: facts fail
    write_failing_nvidia_smi(broken, rc=18, message=NVML)
    env_broken = {"PATH": f"{broken}{os.pathsep}{os.environ['PATH']}"}
    cases = [
        (("facts", "--hosts", "lh"), {}, 0, "==> host OK"),
        (("facts", "--hosts", "lh"), env_broken, 1, "==> host FAILED: GPU stack broken: nvidia-smi: exit 18"),
        (("copy", "--hosts", "lh", str(src), f"{tmp_path}/dest/"), {}, 0, "==> host OK: 1 files, 3 bytes"),
        (("copy", "--hosts", "lh", str(src), "/proc/fleetctl-no/"), {}, 1, f"==> host FAILED: put {src} -> /proc/fleetctl-no/f.txt: "),
        (("fetch", "--hosts", "lh", str(src), f"{tmp_path}/got"), {}, 0, "==> host OK: 1 files, 3 bytes"),
        (("fetch", "--hosts", "lh", f"{tmp_path}/nope", f"{tmp_path}/got"), {}, 1,
         f"==> host FAILED: fetch {tmp_path}/nope: no such file or folder on the host"),
        (("run", "--hosts", "lh", "--", "true"), {}, 0, "==> host OK: rc=0"),
        (("run", "--hosts", "lh", "--", "sh", "-c", "exit 3"), {}, 1, "==> host FAILED: rc=3"),
    ]
    for args, env, rc, last in cases:
        res = fleetctl("-i", str(inv), *args, home=tmp_path, env=env)
        assert res.returncode == rc, (args, res.stdout + res.stderr)
        run_id = last_run(tmp_path).name
        one = fleetctl("logs", run_id, "lh", home=tmp_path)
        assert one.returncode == rc, (args, one.stdout + one.stderr)  # logs RUN HOST exits by the host's status
        lines = one.stdout.splitlines()
        assert lines and lines[-1].startswith(last), (args, one.stdout)
        assert sum(ln.startswith("==> host ") for ln in lines) == 1, (args, one.stdout)  # one outcome line
        assert not any(ln.startswith("err| failed: ") for ln in lines), (args, one.stdout)  # never dressed as the host's
        every = fleetctl("logs", run_id, home=tmp_path)
        assert every.stdout.splitlines()[-1] == "lh: " + lines[-1], (args, every.stdout)


@pytest.mark.sshd
def test_an_unreachable_hosts_log_ends_with_its_cause_in_every_kind_of_run(sshd_farm, tmp_path):
    """Operator trial: ``fleetctl logs`` of an unreachable host's log file held nothing at all (its
    cause only in run.json), where every other outcome ends its log with a ``==> host`` line. A
    refused connection, a host key that does not match known_hosts, a refused login: each log ends
    with ``==> host UNREACHABLE: CAUSE``, the cause as run.json has it, in ad hoc and playbook runs."""
    h = sshd_farm.start("ur", shell="bash")
    stranger_kh = tmp_path / "stranger_known_hosts"  # another key for the host's address: a mismatch
    stranger_kh.write_text(f"[127.0.0.1]:{h.port} {(sshd_farm.client_key.with_suffix('.pub')).read_text()}")
    other_key = tmp_path / "other_key"  # a key the host does not authorize: the login is refused
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_key)], check=True)
    hosts = {"gone": {"ansible_host": "127.0.0.1", "ansible_port": free_port()},
             "stranger": {**h.inventory_vars(sshd_farm.known_hosts), "known_hosts": str(stranger_kh)},
             "denied": {**h.inventory_vars(sshd_farm.known_hosts), "ansible_ssh_private_key_file": str(other_key)}}
    inv = write_inventory(tmp_path / "inv.yaml", {"g": hosts})
    causes = {"gone": "refused", "stranger": "host key", "denied": "authentication failed"}
    for args in (("run", "--hosts", "g", "--", "true"), ("fetch", "--hosts", "g", "/etc/hostname", str(tmp_path / "o")),
                 ("verify", "--hosts", "g")):
        res = fleetctl("-i", str(inv), *args, home=tmp_path)
        assert res.returncode == 1, (args, res.stdout + res.stderr)
        run_dir = last_run(tmp_path)
        record = json.loads((run_dir / "run.json").read_text())["hosts"]
        for name, word in causes.items():
            assert record[name]["status"] == "unreachable", (args, name, record[name])
            error = record[name]["error"]
            assert word in error.lower(), (args, name, error)
            log = (run_dir / "logs" / f"{name}.log").read_text()
            assert log.splitlines()[-1] == "==> host UNREACHABLE: " + " ".join(error.splitlines()), (args, name, log)
            assert log.count("==> host ") == 1, (args, name, log)
        every = fleetctl("logs", run_dir.name, home=tmp_path).stdout.splitlines()
        assert sum(ln.startswith(("gone: ", "stranger: ", "denied: ")) for ln in every) == 3, (args, every)
        one = fleetctl("logs", run_dir.name, "stranger", home=tmp_path)
        assert one.stdout.splitlines()[-1].startswith("==> host UNREACHABLE: "), (args, one.stdout)
