"""Host key checking as OpenSSH does it (sshconnect.c ``check_host_key``), with fleetctl's policy.

The name a key is looked up and recorded under is :attr:`SSHTarget.host_key_name`: ``HostKeyAlias``
if set, else the host after ``HostName`` in ``[host]:port`` form (plain ``host`` on port 22), for
direct hosts, aliases and hosts behind jump hosts alike. Patterns, negations and hashed entries
(``|1|...``) match as in OpenSSH (asyncssh's known_hosts matcher). The files are the target's
``UserKnownHostsFile`` list (or the inventory's ``known_hosts``) plus ``GlobalKnownHostsFile``; a
jump host's are those of its own ssh_config ``Host`` block (:func:`~fleetctl.connection.ssh_target.resolve_jump`).

Outcomes, as OpenSSH with ``StrictHostKeyChecking yes`` (or ``accept-new`` when
``accept_new`` is set):

- known and matching: accepted. Like OpenSSH, a key recorded without a port is also accepted for
  a host on another port that has no entry of its own (no ``HostKeyAlias``).
- known under the name but different (of any key type): refused as CHANGED, whatever the flags,
  naming the old and new fingerprints once each and the exact ``ssh-keygen -R NAME -f FILE`` that
  removes the old entry. (OpenSSH treats a host known only by keys of other types as new;
  fleetctl does not: ``accept_new`` only ever adds keys for names that have none.)
- unknown: refused, or recorded in the first user known_hosts file with ``accept_new``: hashed
  when ``HashKnownHosts`` is on; with ``CheckHostIP``, the address is recorded too (``name,ip``,
  or one hashed line each). One line per (name, key), never a second: the file is re-read under a
  lock before it is written (:func:`record_known_host`), so inventory aliases of one HostName:port
  connecting at once, or two controllers, record the key once.
- ``@revoked``: refused, naming the file and number of the ``@revoked`` line itself.
- ``CheckHostIP`` (off by default since OpenSSH 8.5; never for loopback addresses, jump or proxy
  connections, or when the host is its address): a different key recorded for the address is
  refused; a missing one is added.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import hmac
import ipaddress
import os
import shlex
from dataclasses import dataclass, field

import asyncssh

from .ssh_target import SSHTarget, host_port_name


@dataclass(frozen=True)
class KnownKey:
    """A key recorded in a known_hosts file, with where it was found (line numbers from 1)."""

    key: asyncssh.SSHKey
    file: str
    line: int

    @property
    def fingerprint(self) -> str:
        return self.key.get_fingerprint("sha256")


_cache: dict[str, tuple[tuple[int, int], asyncssh.SSHKnownHosts, list[str]]] = {}


def _read(path: str) -> tuple[asyncssh.SSHKnownHosts, list[str]] | None:
    """A known_hosts file parsed (cached until it changes), and its lines; ``None`` if absent."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    stamp = (st.st_mtime_ns, st.st_size)
    hit = _cache.get(path)
    if hit and hit[0] == stamp:
        return hit[1], hit[2]
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        parsed = asyncssh.import_known_hosts(text)
    except (OSError, ValueError):
        return None
    _cache[path] = (stamp, parsed, text.splitlines())
    return parsed, text.splitlines()


def _blob(key: asyncssh.SSHKey) -> str:
    return key.export_public_key("openssh").decode("ascii").split()[1]


#: which list of asyncssh's ``SSHKnownHosts.match`` a line's marker puts its key in (sshd(8),
#: "SSH_KNOWN_HOSTS FILE FORMAT": an optional first field ``@cert-authority`` or ``@revoked``)
_HOST, _CA, _REVOKED = 0, 1, 2
_MARKERS = {_HOST: None, _CA: "@cert-authority", _REVOKED: "@revoked"}


def _line_of(lines: list[str], key: asyncssh.SSHKey, name: str, kind: int = _HOST) -> int:
    """The number (from 1) of the first line recording ``key`` for ``name`` as ``kind`` (a host key,
    ``@cert-authority`` or ``@revoked``: one key may be on a plain line and a ``@revoked`` one, and
    the line named must be the one that says what is reported). A key recorded for several names (a
    host's own line and its port-less or hashed one, a key shared by hosts) is on several lines, and
    the line ``ssh-keygen -R`` removes is the one that matches the name; else the first line holding
    the key with that marker; 0 if none."""
    blob = _blob(key)
    first = 0
    for i, line in enumerate(lines, 1):
        fields = line.split()
        if blob not in fields or fields[0].startswith("#"):
            continue
        marker = fields[0].lower() if fields[0].startswith("@") else None
        if marker != _MARKERS[kind]:
            continue
        first = first or i
        try:
            matched = asyncssh.import_known_hosts(line).match(name, "", None)[:3]
        except ValueError:
            continue
        if any(k == key for k in matched[kind]):
            return i
    return first


def lookup(files: tuple[str, ...], name: str) -> tuple[list[KnownKey], list[KnownKey], list[KnownKey]]:
    """Keys recorded for exactly ``name`` (OpenSSH's lookup string, e.g. ``[h]:2222``) in
    ``files``: ``(host keys, CA keys, revoked keys)``, each with its file and line."""
    hosts: list[KnownKey] = []
    cas: list[KnownKey] = []
    revoked: list[KnownKey] = []
    for path in files:
        got = _read(path)
        if got is None:
            continue
        parsed, lines = got
        # port None and the name already in [host]:port form: an exact lookup, no fallback
        host_keys, ca_keys, revoked_keys = parsed.match(name, "", None)[:3]
        hosts += [KnownKey(k, path, _line_of(lines, k, name, _HOST)) for k in host_keys]
        cas += [KnownKey(k, path, _line_of(lines, k, name, _CA)) for k in ca_keys]
        revoked += [KnownKey(k, path, _line_of(lines, k, name, _REVOKED)) for k in revoked_keys]
    return hosts, cas, revoked


def hashed_name(name: str, salt: bytes | None = None) -> str:
    """OpenSSH's hashed known_hosts name: ``|1|base64(salt)|base64(HMAC-SHA1(salt, name))``."""
    salt = salt if salt is not None else os.urandom(20)
    digest = hmac.new(salt, name.encode("utf-8"), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def record_known_host(path: str, names: list[str], key: asyncssh.SSHKey, *,
                      hashed: bool) -> tuple[list[str], list[KnownKey]]:
    """Record ``key`` in ``path`` (created 0600, parents 0700) for each of ``names`` that does not
    hold it yet: one plain line ``name1,name2 TYPE BLOB``, or one hashed line per name, appended in
    one write.

    OpenSSH records a key under the name it connected to (``[host]:port``, or ``HostKeyAlias``;
    hostfile.c ``add_host_to_hostfile``), so several inventory hosts on one HostName:port share one
    line. The file is re-read under an exclusive ``flock(2)`` of it, so hosts of one run (forks) and
    controllers recording at once never write a name's key twice, hashed lines included (matched as
    OpenSSH matches them, through asyncssh's known_hosts matcher).

    Returns:
        ``(names written, keys of another kind found)``: a name that meanwhile got another key is not
        written, and for ``names[0]`` its keys are returned (the caller refuses it as changed).

    Raises:
        OSError: the file or its folder cannot be made, locked, read or written.
    """
    algo, blob = key.export_public_key("openssh").decode("ascii").split()[:2]
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)  # released when the file is closed
        fh.seek(0)
        text = fh.read().decode("utf-8", errors="replace")
        try:
            parsed = asyncssh.import_known_hosts(text)
        except ValueError:
            parsed = asyncssh.import_known_hosts("")
        lines = text.splitlines()
        missing, other = [], []
        for i, name in enumerate(names):
            held = parsed.match(name, "", None)[0]
            if key in held:
                continue
            if held:
                if i == 0:
                    other = [KnownKey(k, path, _line_of(lines, k, name)) for k in held]
                continue
            missing.append(name)
        if other or not missing:
            return [], other
        if hashed:
            out = "".join(f"{hashed_name(n)} {algo} {blob}\n" for n in missing)
        else:
            out = f"{','.join(missing)} {algo} {blob}\n"
        if text and not text.endswith("\n"):
            out = "\n" + out
        fh.write(out.encode("ascii"))
        fh.flush()
    _cache.pop(path, None)
    return missing, []


def _is_loopback(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip.split("%")[0]).is_loopback
    except ValueError:
        return False


def _remove_command(name: str, files: list[str]) -> str:
    return " && ".join(f"ssh-keygen -R {shlex.quote(name)} -f {shlex.quote(f)}" for f in files)


@dataclass
class HostKeyPolicy:
    """The host key check of one connection attempt.

    Hand :meth:`known_hosts` to asyncssh as its ``known_hosts`` argument and call :meth:`verify`
    from ``SSHClient.validate_host_public_key`` (asyncssh calls it for keys it does not trust).
    After a refusal, :attr:`refusal` holds the one-line reason.

    Args:
        target: the host as ssh reaches it.
        accept_new: record the key of a name that has none (``StrictHostKeyChecking=accept-new``).
        peer_ip: the address the TCP connection reached, for ``CheckHostIP``; ``None`` through a
            jump host or proxy command.
        label: prefix for messages (``"jump host bastion: "``).
    """

    target: SSHTarget
    accept_new: bool = False
    peer_ip: str | None = None
    label: str = ""
    refusal: str | None = None
    recorded: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        t = self.target
        self.name = t.host_key_name
        self.files = t.user_known_hosts + t.global_known_hosts
        self.known, self.cas, self.revoked = lookup(self.files, self.name)
        self.fallback: list[KnownKey] = []
        if not self.known and not self.cas and t.host_key_alias is None and t.port != 22:
            # OpenSSH: "checking without port identifier" for a name with no entry of its own
            self.fallback = lookup(self.files, t.host)[0]
        ip = self.peer_ip
        self.ip_name: str | None = None
        if (t.check_host_ip and ip and t.host_key_alias is None and not t.proxy_jump and not t.proxy_command
                and not _is_loopback(ip) and ip != t.host):
            self.ip_name = host_port_name(ip, t.port)

    # -- asyncssh hooks -------------------------------------------------------------------------

    def known_hosts(self, host: str, addr: str, port: int | None):
        """asyncssh's ``known_hosts`` callable: the keys trusted for this name (its arguments are
        ignored: the name is :attr:`SSHTarget.host_key_name`, computed as OpenSSH does)."""
        trusted = [k.key for k in self.known or self.fallback]
        return trusted, [k.key for k in self.cas], [k.key for k in self.revoked]

    def verify(self, key: asyncssh.SSHKey) -> bool:
        """Decide on a key asyncssh does not trust: False (with :attr:`refusal` set) for a changed
        key or an unknown one without ``accept_new``; True after recording a new one."""
        fp = f"{key.get_algorithm()} {key.get_fingerprint('sha256')}"
        if self.known:
            self.refusal = self._changed_message(fp)
            return False
        if not self.accept_new:
            where = self.target.user_known_hosts[0] if self.target.user_known_hosts else "known_hosts"
            self.refusal = (f"{self.label}host key unknown for {self.name}: the host offers {fp}, which is not "
                            f"in {where}; check the fingerprint, then run again with --accept-new-host-keys to "
                            f"record it")
            return False
        if self.ip_name and not self._ip_ok(key):
            return False
        names = [self.name] + ([self.ip_name] if self.ip_name and not lookup(self.files, self.ip_name)[0] else [])
        dest = self.target.user_known_hosts[0] if self.target.user_known_hosts else None
        if dest is None:
            self.refusal = f"{self.label}host key for {self.name} is unknown and UserKnownHostsFile is none"
            return False
        try:
            written, other = record_known_host(dest, names, key, hashed=self.target.hash_known_hosts)
        except OSError as exc:
            self.refusal = f"{self.label}cannot record the host key of {self.name} in {dest}: {exc.strerror or exc}"
            return False
        if other:  # recorded meanwhile (another host of this run, another controller) with another key
            self.known = other
            self.refusal = self._changed_message(fp)
            return False
        self.recorded = written  # empty: another host of this run (or controller) recorded it meanwhile
        return True

    def after_login(self, key: asyncssh.SSHKey | None) -> str | None:
        """``CheckHostIP`` for a trusted key: a refusal message if the address's recorded key
        differs; records the address when it has none (as OpenSSH does)."""
        if key is None or not self.ip_name or self.recorded:
            return None
        if not self._ip_ok(key):
            return self.refusal
        if not lookup(self.files, self.ip_name)[0] and self.target.user_known_hosts:
            try:
                record_known_host(self.target.user_known_hosts[0], [self.ip_name], key,
                                  hashed=self.target.hash_known_hosts)
            except OSError:
                pass
        return None

    def describe_failure(self, exc: Exception) -> str:
        """One line for a HostKeyNotVerifiable asyncssh raised (a revoked key or CA problem when
        :meth:`verify` was never reached)."""
        if self.refusal:
            return self.refusal
        text = str(exc)
        if "revoked" in text.lower():
            where = ", ".join(sorted({f"{k.file}:{k.line}" for k in self.revoked}))
            return f"{self.label}host key for {self.name} is marked @revoked in {where or 'known_hosts'}; refusing"
        return f"{self.label}host key for {self.name} not accepted: {text}"

    # -- helpers ------------------------------------------------------------------------------

    def _ip_ok(self, key: asyncssh.SSHKey) -> bool:
        assert self.ip_name is not None
        ip_keys = lookup(self.files, self.ip_name)[0]
        if ip_keys and all(k.key != key for k in ip_keys):
            old = ", ".join(dict.fromkeys(f"{k.file}:{k.line} {k.fingerprint}" for k in ip_keys))
            files = list(dict.fromkeys(k.file for k in ip_keys))
            self.refusal = (f"{self.label}host key for {self.name} is known, but its address {self.ip_name} is recorded "
                            f"with a different key ({old}): refusing (DNS spoofing, or the address now belongs to "
                            f"another host; CheckHostIP). If expected: {_remove_command(self.ip_name, files)}")
            return False
        return True

    def _changed_message(self, new_fp: str) -> str:
        # The verdict and what it may mean come first, the fingerprints after: a summary that
        # shows only a message's beginning never repeats them.
        old = list(dict.fromkeys(f"{k.key.get_algorithm()} {k.fingerprint}" for k in self.known))
        where = list(dict.fromkeys(f"{k.file}:{k.line}" for k in self.known))
        files = list(dict.fromkeys(k.file for k in self.known))
        return (f"{self.label}host key changed for {self.name}: refusing to connect. Someone may be intercepting "
                f"the connection (man-in-the-middle), or the host was reinstalled or got new host keys. "
                f"known_hosts has {', '.join(old)} ({', '.join(where)}); the host now offers {new_fp}. If the "
                f"change is expected, remove the old key: {_remove_command(self.name, files)}")
