"""Network faults made real on loopback, for transport tests.

- :class:`BlackHole`: a port whose SYNs the kernel drops: a listener with a full accept queue that
  never accepts (Linux drops a SYN to a listener whose accept queue is full; ``tcp_conn_request``),
  so a connect times out exactly as to a host that is down or behind a firewall that drops. Needs
  no privileges and no packet filter.
- :class:`DropServer`: accepts TCP connections and closes each at once, before any SSH banner:
  what sshd does to connections past ``MaxStartups``.
- :class:`SilentServer`: accepts TCP connections and never sends a banner: a hung sshd.
- :class:`CutLink`: a TCP relay to a real server that can be cut without a word to either side:
  both connections stay open and nothing more passes (a laptop that lost its network: no FIN, no
  RST reaches the server, which sees only silence).
"""

from __future__ import annotations

import select
import socket
import threading


class BlackHole:
    """A loopback port whose SYNs are dropped (see the module docstring)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(0)
        self.port = self.sock.getsockname()[1]
        self.fillers = []
        # backlog 0 holds one completed connection: this one fills it, for good
        filler = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        self.fillers.append(filler)
        probe = socket.socket()
        probe.settimeout(0.2)
        try:  # prove it: a further connect must not complete
            probe.connect(("127.0.0.1", self.port))
            raise RuntimeError("BlackHole: the accept queue is not full; SYNs are not being dropped")
        except (socket.timeout, TimeoutError):
            pass
        finally:
            probe.close()

    def close(self) -> None:
        for s in self.fillers:
            s.close()
        self.sock.close()


class DropServer:
    """Accepts and immediately closes every connection (counted in :attr:`accepted`)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


class SilentServer:
    """Accepts TCP connections and holds them open without ever sending an SSH banner: a hung
    sshd (or a host whose sshd is wedged), so a connect waits for its whole connect timeout."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        self.sock.close()
        for c in self.held:
            c.close()


class SlowDropServer:
    """Accepts every connection and closes it after ``hold_s`` seconds without a word (counted in
    :attr:`accepted`): an sshd that drops handshakes, slowly, so each attempt takes ``hold_s``."""

    def __init__(self, hold_s: float) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.hold_s = hold_s
        self.accepted = 0
        self.timers: list[threading.Timer] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            timer = threading.Timer(self.hold_s, conn.close)
            self.timers.append(timer)
            timer.start()

    def close(self) -> None:
        self.sock.close()
        for t in self.timers:
            t.cancel()
            t.function()


class CutLink:
    """Relays each connection to ``127.0.0.1:target_port`` until :meth:`cut`; from then on no byte
    passes either way and no connection is closed (see the module docstring) until :meth:`close`."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.is_cut = threading.Event()
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                return
            self.held += [conn, upstream]
            threading.Thread(target=self._relay, args=(conn, upstream), daemon=True).start()

    def _relay(self, a: socket.socket, b: socket.socket) -> None:
        peer = {a: b, b: a}
        while not self.is_cut.is_set():
            try:
                ready, _, _ = select.select([a, b], [], [], 0.2)
                for s in ready:
                    data = s.recv(65536)
                    if self.is_cut.is_set():
                        return
                    if not data:
                        peer[s].shutdown(socket.SHUT_WR)
                        return
                    peer[s].sendall(data)
            except OSError:
                return

    def cut(self) -> None:
        self.is_cut.set()

    def close(self) -> None:
        self.is_cut.set()
        self.sock.close()
        for s in self.held:
            s.close()
