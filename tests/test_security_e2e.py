"""Secrets never reach a log, event, run record or terminal; hostile values never reach a shell."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetctl.connection.ssh import SSHConnection
from fleetctl.util.redact import MASK
from tests.support.fleet import fleetctl, last_run, write_inventory

pytestmark = pytest.mark.sshd

TOKEN = "hf_Zx9SECRETtokenQ"
DB_PASSWORD = "pa55-w0rd!-only-here"
MARKED = "marked-value-7c1e"


def all_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())


def test_secrets_are_redacted_everywhere(sshd_farm, tmp_path):
    h = sshd_farm.start("sec")
    hv = {**h.inventory_vars(sshd_farm.known_hosts), "hf_token": TOKEN, "db": {"value": MARKED, "secret": True}}
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"sec": hv}})
    play = tmp_path / "play.yaml"
    play.write_text(
        "name: secrets\nhosts: all\ngather_facts: false\n"
        f"vars:\n  db_password: {json.dumps(DB_PASSWORD)}\n"
        "tasks:\n"
        "  - name: use them\n"
        "    env: {HF_TOKEN: '{{ hf_token }}', DB_PASSWORD: '{{ db_password }}', PLAIN: '{{ db }}'}\n"
        "    command: {argv: [sh, -c, 'echo token=$HF_TOKEN pw=$DB_PASSWORD m=$PLAIN; echo \"{{ db }}\" >&2']}\n"
        "  - name: fail with them\n"
        "    command: {argv: [sh, -c, 'echo \"error: bad credential {{ db_password }}\" >&2; exit 1']}\n")
    outputs = []
    for extra in ([], ["--dry-run"], ["--json"]):
        res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), *extra, home=tmp_path)
        outputs.append(res.stdout + res.stderr)
        assert res.returncode == (0 if extra == ["--dry-run"] else 1), res.stdout[-2000:]
    res = fleetctl("-i", str(inv), "run", "--hosts", "g", "--json", "--", "echo", TOKEN, home=tmp_path)
    outputs.append(res.stdout + res.stderr)
    everything = all_bytes(tmp_path / "runs") + "".join(outputs).encode()
    for secret in (TOKEN, DB_PASSWORD, MARKED):
        assert secret.encode() not in everything, secret
    assert MASK.encode() in everything
    # the commands still got the real values
    log = [p for p in (tmp_path / "runs").glob("*/logs/sec.log")]
    assert any(f"token={MASK} pw={MASK} m={MASK}".encode() in p.read_bytes() for p in log)


hostile = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/"),
                  min_size=1, max_size=24).filter(lambda s: s not in (".", ".."))


def test_hostile_paths_and_file_names_reach_the_host_exactly(sshd_farm, tmp_path):
    h = sshd_farm.start("paths", shell="zsh")
    base = Path(h.root) / "dest"
    base.mkdir()
    os.chmod(base, 0o777)
    src = tmp_path / "f.txt"
    src.write_text("content\n")

    @settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
    @given(names=st.lists(hostile, min_size=1, max_size=5, unique=True))
    def check(names):
        async def go():
            conn = SSHConnection(h.name, address="127.0.0.1", port=h.port, user=h.user,
                                 key_file=str(h.client_key), known_hosts=str(sshd_farm.known_hosts))
            async with conn:
                for name in names:
                    folder = base / name
                    await conn.put(str(src), str(folder / name), mode=0o640)
                    res = await conn.run(["/bin/pwd"], cwd=str(folder))
                    assert res.stdout.decode() == str(folder) + "\n"
                    target = folder / name
                    assert target.read_text() == "content\n"
                    assert stat.S_IMODE(target.stat().st_mode) == 0o640
        asyncio.run(go())

    check()


def test_remote_folders_are_private_and_files_not_world_writable(sshd_farm, tmp_path):
    h = sshd_farm.start("modes")
    work = tmp_path / "work" / "modes"
    inv = write_inventory(tmp_path / "inv.yaml", {"g": {"m": {**h.inventory_vars(sshd_farm.known_hosts),
                                                              "workdir": str(work)}}})
    play = tmp_path / "play.yaml"
    src = Path(__file__).resolve().parents[1] / "kernel_src"
    play.write_text(f"name: modes\nhosts: all\ntasks:\n  - name: up\n    copy: {{src: {src}, dest: '{{{{ workdir }}}}/src'}}\n")
    res = fleetctl("-i", str(inv), "deploy", "--hosts", "g", "--playbook", str(play), home=tmp_path)
    assert res.returncode == 0, res.stdout[-2000:]
    assert stat.S_IMODE(work.stat().st_mode) == 0o700
    for p in work.rglob("*"):
        mode = stat.S_IMODE(p.lstat().st_mode)
        assert not mode & 0o002, (p, oct(mode))
        if p.is_dir():
            assert mode == 0o700, (p, oct(mode))
