"""A test double of fleetctl's own ``Connection`` seam (never of asyncssh), and a connection kind for it.

A :class:`FakeHost` is an in-memory host: a file system (path -> bytes) and a command handler.
:class:`FakeConnection` implements the ``Connection`` contract on it and records every command and
transfer, so engine tests can assert what ran where, in which order, and what did not run. The kind
is registered by the ``fake_kind`` fixture as one line in ``fleetctl.connection.registry.KINDS``
(as a new real kind would be) for hosts with ``ansible_connection: fake``.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetctl.connection.base import CommandResult, Connection, LineCallback, OutputLine
from fleetctl.connection.registry import ConnectionKind, ConnectionSettings, ConnectOptions, HostRef, KindScope
from fleetctl.errors import ConnectionLost, HostUnreachable, TransferError
from fleetctl.engine.session_start import STDIN_MARK

Handler = Callable[["FakeHost", list[str], dict[str, str], "str | None"], "tuple[int, str, str] | None"]

H200_FACTS: dict[str, Any] = {
    "gpus": [{"index": 0, "name": "NVIDIA H200", "compute_cap": "9.0", "memory_mib": 143771}],
    "driver_version": "580.95",
    "cuda": {"home": "/usr/local/cuda", "nvcc": "/usr/local/cuda/bin/nvcc", "version": "13.0",
             "source": "/usr/local/cuda", "archs": ["compute_90", "compute_100", "compute_120"]},
    "python": {"executable": "/venv/bin/python3", "exists": True, "prefix": "/venv", "tag": "cp312",
               "version": "3.12.3", "torch": "2.11.0+cu130", "torch_cuda": "13.0"},
    "cmake": {"version": "3.28.3", "path": "/usr/bin/cmake"},
    "cpu_count": 16, "mem_total_mib": 128000, "mem_available_mib": 120000, "disk_free_mib": 500000,
}


@dataclass
class FakeHost:
    """An in-memory host.

    Attributes:
        name: its name.
        files: remote path -> bytes.
        facts: what its facts script prints (a JSON object).
        handlers: tried in order for every command; the first returning ``(rc, stdout, stderr)`` wins.
        log: every command (argv) and transfer, in order: ``("run", argv)``, ``("put", path)``,
            ``("get", path)``.
        unreachable: connecting fails with this cause.
        drop_after: the connection is lost at the command whose argv contains this string.
        delay_s: each command takes this long (seconds).
        connect_wait: awaited when the host is connected (a host whose connect hangs: an sshd
            that never sends its banner), before ``unreachable`` is looked at.
        first_wait: awaited before the run's first command answers (a host past connect whose
            login shell hangs: an rc file waiting on a dead mount).
        execs: every command the engine itself started on the host (argv), in order; the probes
            the run's first command runs for it are in ``log`` only.
        answer_wait: awaited with each command's argv (once it is in ``log``) before it answers:
            a test sees which commands of several hosts are asked together.
        links: path -> the folder it is a symlink to (a staged venv's live path), as
            ``os.path.realpath`` resolves it for the install-state and stamps probes.
    """

    name: str
    files: dict[str, bytes] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=lambda: json.loads(json.dumps(H200_FACTS)))
    handlers: list[Handler] = field(default_factory=list)
    log: list[tuple[str, Any]] = field(default_factory=list)
    unreachable: str | None = None
    drop_after: str | None = None
    delay_s: float = 0.0
    connect_wait: Callable[[], Awaitable[None]] | None = None
    first_wait: Callable[[], Awaitable[None]] | None = None
    execs: list[list[str]] = field(default_factory=list)
    answer_wait: Callable[[list[str]], Awaitable[None]] | None = None
    links: dict[str, str] = field(default_factory=dict)

    def commands(self) -> list[list[str]]:
        return [a for kind, a in self.log if kind == "run"]

    def ran(self, word: str) -> list[list[str]]:
        """Commands whose argv holds ``word`` (as an element or inside one)."""
        return [a for a in self.commands() if any(word in x for x in a)]


def fake_mtime(data: bytes) -> int:
    """A fake file's mtime (whole seconds): a function of its bytes, so that rewriting a file with
    other bytes moves it, as a write on a real host does, and rewriting the same bytes keeps it."""
    import zlib

    return 1_700_000_000 + zlib.crc32(data) % 1_000_000


def _default(host: FakeHost, argv: list[str], env: dict[str, str], cwd: str | None) -> tuple[int, str, str]:
    joined = " ".join(argv)
    if argv[:4] == ["stat", "-L", "-c", "%s %Y"]:
        if argv[4] not in host.files:
            return 1, "", f"stat: cannot statx '{argv[4]}': No such file or directory\n"
        return 0, f"{len(host.files[argv[4]])} {fake_mtime(host.files[argv[4]])}\n", ""
    if argv[0] == "/bin/sh" and "mkdir -p" in joined:
        return 0, "", ""
    if any(a.endswith("facts.py") for a in argv):
        return 0, json.dumps(host.facts) + "\n", ""
    hash_present = len(argv) > 3 and argv[0] == "/bin/sh" and argv[3] == "fleetctl-hash"
    if argv[:1] == ["sha256sum"] or hash_present:  # the latter hashes only the files that exist
        import hashlib

        out, err, rc = [], [], 0
        for p in argv[4:] if hash_present else argv[1:]:
            if p == "--":
                continue
            if p in host.files:
                out.append(f"{hashlib.sha256(host.files[p]).hexdigest()}  {p}")
            elif not hash_present:
                err.append(f"sha256sum: {p}: No such file or directory")
                rc = 1
        return rc, "\n".join(out) + ("\n" if out else ""), "\n".join(err)
    if argv[0] in ("rm", "mkdir", "cp", "true", "echo", "test"):
        if argv[0] == "test":
            return (0 if argv[-1] in host.files else 1), "", ""
        if argv[0] == "echo":
            return 0, " ".join(argv[1:]) + "\n", ""
        return 0, "", ""
    if argv[0] == "/bin/sh" and argv[1] == "-c":
        return 0, "", ""  # probes of stamps, wheels, trees: nothing there
    return 0, "", ""


class FakeConnection(Connection):
    """``Connection`` on a :class:`FakeHost`. The run's first command (``python3 -S -c BOOT`` with
    ``playbooks/scripts/session_start.py`` and its job on stdin) is played by
    :meth:`_session_start`: folders, the deploy lock (``host.files``), facts and every probe of
    the job through the host's handlers, each logged as a command, as the real script runs them."""

    holds_stdin = True

    def __init__(self, host: FakeHost) -> None:
        self.fake = host
        self.host = host.name
        self.home = f"/home/{host.name}"
        self.opened = False

    async def open(self) -> None:
        if self.fake.connect_wait is not None:
            await self.fake.connect_wait()
        if self.fake.unreachable:
            raise HostUnreachable(self.host, self.fake.unreachable)
        self.opened = True
        OPEN["now"] += 1
        OPEN["peak"] = max(OPEN["peak"], OPEN["now"])

    async def close(self) -> None:
        if self.opened:
            OPEN["now"] -= 1
        self.opened = False

    async def run(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None,
                  timeout_s: float | None = None, on_line: LineCallback | None = None, stdin: bytes | None = None,
                  become: bool = False, capture_bytes: int | None = None, hold_stdin: bool = False) -> CommandResult:
        argv = [str(a) for a in argv]
        self.fake.log.append(("run", argv))
        self.fake.execs.append(argv)
        if argv[:3] == ["python3", "-S", "-c"] and stdin is not None:
            box = [stdin]  # let go of while the lock is held, as SSHConnection does (memory at scale)
            del stdin
            if self.fake.first_wait is not None:
                await self.fake.first_wait()
            return await self._session_start(argv, box, on_line, hold_stdin)
        if self.fake.drop_after and any(self.fake.drop_after in a for a in argv):
            raise ConnectionLost(self.host, argv[0])
        t0 = time.monotonic()
        if self.fake.answer_wait is not None:
            await self.fake.answer_wait(argv)
        if self.fake.delay_s:
            await asyncio.sleep(self.fake.delay_s)
        for handler in [*self.fake.handlers, _default]:
            got = handler(self.fake, argv, dict(env or {}), cwd)
            if got is not None:
                break
        rc, out, err = got
        for stream, text in (("stdout", out), ("stderr", err)):
            for line in text.splitlines(keepends=True):
                if on_line:
                    on_line(OutputLine(stream, line.encode()))
        return CommandResult(argv=argv, rc=rc, stdout=out.encode(), stderr=err.encode(),
                             duration_s=time.monotonic() - t0)

    def _answer(self, argv: list[str], env: dict[str, str], cwd: str | None) -> tuple[int, str, str]:
        for handler in [*self.fake.handlers, _default]:
            got = handler(self.fake, argv, env, cwd)
            if got is not None:
                return got
        raise AssertionError("unreachable")

    async def _session_start(self, argv: list[str], stdin: list[bytes], on_line: LineCallback | None,
                             hold: bool) -> CommandResult:
        import base64
        import posixpath

        if self.fake.drop_after and any(self.fake.drop_after in a for a in ["session_start", *argv]):
            raise ConnectionLost(self.host, "python3")
        blocks = []
        mark, _, rest = stdin.pop().partition(b"\n")
        assert mark == STDIN_MARK, mark  # the line a login rc file that reads stdin would take
        for _ in range(3):  # the script, the facts script, the job
            n, _, rest = rest.partition(b"\n")
            blocks.append(rest[:int(n)])
            rest = rest[int(n):]
        job = json.loads(blocks[2])
        del blocks, rest
        home = f"/home/{self.fake.name}"
        base = job["workdir"]
        workdir = base if base.startswith("/") else posixpath.normpath(posixpath.join(home, base))
        run_dir = posixpath.join(workdir, "runs", job["run_id"])
        out: dict[str, Any] = {"login": {"shell": "/bin/bash", "home": home, "home_missing": False},
                               "workdir": workdir, "run_dir": run_dir}
        lock_path = None
        if job.get("lock"):
            lock_path = job["lock"]["path"] or posixpath.join(workdir, "deploy.lock")
            held = self.fake.files.get(lock_path, b"")
            if held.strip() and self.fake.name in _HELD:
                out["lock"] = {"path": lock_path, "busy": held.decode()}
                return self._finish(out, on_line)
            self.fake.files[lock_path] = f"4242 {job['lock']['record']}\n".encode()
            _HELD.add(self.fake.name)
            out["lock"] = {"path": lock_path, "locked": 4242, "previous": held.decode()}
        answers = []
        for probe in job.get("probes") or []:
            fill = lambda v: v.replace("\x00W", workdir) if isinstance(v, str) else v  # noqa: E731
            pargv = [fill(a) for a in probe["argv"]]
            self.fake.log.append(("run", pargv))
            rc, o, e = self._answer(pargv, {k: fill(v) for k, v in (probe.get("env") or {}).items()},
                                    fill(probe.get("cwd")))
            answers.append({"rc": rc, "signal": None, "out": base64.b64encode(o.encode()).decode(),
                            "err": base64.b64encode(e.encode()).decode(), "s": 0.0})
        out["probes"] = answers
        if job.get("facts"):
            out["facts_stdout"] = json.dumps(self.fake.facts) + "\n"
        res = self._finish(out, on_line)
        if hold and lock_path is not None:
            try:
                await asyncio.Event().wait()
            finally:
                self.fake.files[lock_path] = b""
                _HELD.discard(self.fake.name)
        return res

    def _finish(self, out: dict[str, Any], on_line: LineCallback | None) -> CommandResult:
        line = ("@@FLEETCTL_SESSION@@ " + json.dumps(out) + "\n").encode()
        if on_line:
            on_line(OutputLine("stdout", line))
        return CommandResult(argv=["python3"], rc=0, stdout=line)

    async def put(self, local_path: str, remote_path: str, *, mode: int | None = None) -> None:
        self.fake.log.append(("put", remote_path))
        try:
            self.fake.files[remote_path] = Path(local_path).read_bytes()
        except OSError as exc:
            raise TransferError(f"{self.host}: upload {local_path}: {exc}") from None

    async def get(self, remote_path: str, local_path: str) -> None:
        self.fake.log.append(("get", remote_path))
        if remote_path not in self.fake.files:
            raise TransferError(f"{self.host}: get {remote_path}: no such file")
        Path(local_path).parent.mkdir(parents=True, exist_ok=True)
        Path(local_path).write_bytes(self.fake.files[remote_path])


class FakeSettings(ConnectionSettings):
    """A fake host reads no vars."""


#: host name -> FakeHost, filled by the tests.
HOSTS: dict[str, FakeHost] = {}
#: hosts whose deploy lock a running fake first command holds.
_HELD: set[str] = set()
#: fake connections open now, and the most that were open at once (a test resets ``peak``).
OPEN = {"now": 0, "peak": 0}


class _Scope(KindScope):
    def connection(self, host: HostRef) -> FakeConnection:
        return FakeConnection(HOSTS[host.name])


class _FakeKind(ConnectionKind):
    name = "fake"
    settings_model = FakeSettings

    def scope(self, options: ConnectOptions) -> KindScope:
        return _Scope()


SETTINGS = FakeSettings
KIND = _FakeKind()


def own_folders(host: FakeHost, venv: str = "/venv", workdir: str = "") -> FakeHost:
    """Give ``host`` facts naming its own venv and workdir folders (``facts["targets"]``, as the
    facts script reports each folder's id on a real host): no other host shares them."""
    host.facts["targets"] = {"venv": {"id": f"venv-{host.name}", "path": venv},
                             "workdir": {"id": f"workdir-{host.name}", "path": workdir or f"/w/{host.name}"}}
    return host


def shell(argv: list[str]) -> str:
    return shlex.join(argv)


def python_packaging(host: FakeHost, argv: list[str], env: dict[str, str], cwd: str | None):
    """Emulates what build_wheel and pip_install ask of a host: the venv probe, stamps, the build
    (writes a wheel whose bytes name the arch list), the wheel listing, pip install (records the
    dist in ``host.files['<venv>/installed/<dist>']``) and the install-state probe."""
    import hashlib
    import posixpath

    from fleetctl.tasks.build_keys import STAMP_NAME
    from fleetctl.tasks.build_preflight import VENV_PROBE
    from fleetctl.tasks.venv_state import STATE_SCRIPT, record_path

    if len(argv) > 3 and argv[1] == "-c" and argv[2] == VENV_PROBE:
        asked = json.loads(argv[3])
        gone = host.facts.get("missing_modules", [])
        reqs = {r: {"name": r, "installed": None if r in gone else "1.0", "ok": r not in gone}
                for r in asked["requirements"]}
        return 0, json.dumps({"executable": argv[0], "prefix": posixpath.dirname(posixpath.dirname(argv[0])),
                              "missing": [m for m in asked["imports"] if m in gone], "requirements": reqs,
                              "setuptools": "80.0", "torch_archs": None, "tmp": None}) + "\n", ""
    if len(argv) > 3 and argv[0] == "/bin/sh" and argv[3] == "fleetctl-stamps":
        out_dir, inst = argv[4], argv[5]
        venv = argv[6] if len(argv) > 6 else ""
        lines = [f"VENV {host.links.get(venv, venv)}"]  # the venv's real path
        for path, data in sorted(host.files.items()):
            if path.startswith(out_dir + "/") and path.endswith("/" + STAMP_NAME):
                stamp = json.loads(data)
                wheel = host.files.get(stamp.get("wheel"))
                if wheel is not None:
                    lines.append(f"STAMP {len(wheel)} {fake_mtime(wheel)} {json.dumps(stamp)}")
        for path, data in sorted(host.files.items()):
            if posixpath.dirname(posixpath.dirname(path)) == inst and path.endswith(".json"):
                lines.append("INSTALLED " + data.decode())
        return 0, "".join(line + "\n" for line in lines), ""
    if len(argv) > 3 and argv[0] == "/bin/sh" and argv[3] == "fleetctl-wheels":
        dest = argv[4]
        out = [f"{len(d)} {fake_mtime(d)} {hashlib.sha256(d).hexdigest()}  {p}" for p, d in sorted(host.files.items())
               if posixpath.dirname(p) == dest and p.endswith(".whl")]
        return 0, "".join(x + "\n" for x in out), ""
    if "wheel" in argv and "--wheel-dir" in argv:
        dest = argv[argv.index("--wheel-dir") + 1]
        # a host whose facts name its interpreter's platform builds a platform wheel, as
        # scikit-build-core and setuptools tag one from sysconfig.get_platform()
        plat = ((host.facts.get("python") or {}).get("platform") or {}).get("sysconfig")
        name = f"toy-0.1-cp312-cp312-{plat.replace('-', '_')}.whl" if plat else "toy-0.1-py3-none-any.whl"
        host.files[posixpath.join(dest, name)] = f"toy for {env.get('TORCH_CUDA_ARCH_LIST')}".encode()
        return 0, f"Successfully built toy\n", ""
    if "install" in argv and "pip" in argv:
        wheel = argv[-1]
        if wheel not in host.files:
            return 1, "", f"ERROR: {wheel} does not exist\n"
        host.files[f"/venv-state/{posixpath.basename(wheel).split('-')[0]}"] = hashlib.sha256(host.files[wheel]).hexdigest().encode()
        return 0, "Successfully installed toy\n", ""
    if len(argv) > 3 and argv[1] == "-c" and argv[2] == STATE_SCRIPT:
        dist, venv = argv[3], posixpath.dirname(posixpath.dirname(argv[0]))
        venv = host.links.get(venv, venv)
        # the venv's own record, as the script finds it (venv_state.RECORD_LAYOUT)
        rec_path = record_path(posixpath.dirname(argv[4]), dist, venv)
        rec = json.loads(host.files[rec_path]) if rec_path in host.files else None
        held = host.files.get(f"/venv-state/{dist}")
        state = {"record": rec if (rec or {}).get("venv") == venv else None, "venv": venv,"dist": {"version": "0.1", "record_sha256": held.decode()} if held else None,
                 "torch": host.facts["python"]["torch"], "cuda": host.facts["python"]["torch_cuda"],
                 "stamp": json.loads(host.files[argv[5]]) if len(argv) > 5 and argv[5] in host.files else None}
        return 0, json.dumps(state) + "\n", ""
    return None
