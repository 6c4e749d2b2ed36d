"""A nemesis tool: a TCP relay between a client and a broker node that knows where the AMQP
frames are, for faults at a given step of the protocol that the Toxiproxy API cannot express
(its toxics see bytes and time, never which method a frame carries):

- ``black_hole()`` silently drops everything the broker sends (confirms included) while the
  client's bytes still reach it; ``cut()`` then closes both sides. That is how a publisher
  loses confirms for messages the broker did enqueue, which is what makes a retransmission a
  duplicate.
- ``reset()`` resets every relayed connection (RST, as a crashed peer or a middlebox does).
- ``reset_at(step)`` arms a reset for the moment a client *sends* one step of the AMQP
  connection sequence (``connect``, ``handshake``, ``channel.open``, ``confirm.select``,
  ``queue.declare``, ``basic.qos``, ``basic.consume``): the relay reads the client's frames,
  and the frame of that step never reaches the broker; the connection is reset instead.
  ``resets`` lists what was reset, in order, so a test can show that its fault happened.

Everything else (latency, cuts, resets at a moment, timeouts) goes through the fault proxy
(``sac.chaos.faults.FaultProxy``), which a real Toxiproxy can replace.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import threading
from types import TracebackType
from typing import Self

from .errors import ChaosTimeout

STEPS: dict[str, tuple[int, int] | None] = {
    "connect": None,  # the TCP connection itself, reset as soon as it is accepted
    "handshake": (10, 11),  # connection.start-ok
    "channel.open": (20, 10),
    "confirm.select": (85, 10),
    "queue.declare": (50, 10),
    "basic.qos": (60, 10),
    "basic.consume": (60, 20),
}
_PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
_FRAME_HEAD = struct.Struct(">BHI")
_LINGER_RESET = struct.pack("ii", 1, 0)


class _ClientFrames:
    """Follows the frames a client sends, to find where an armed step begins."""

    def __init__(self) -> None:
        self._buffer = b""  # from the start of the frame not yet complete
        self._header_done = False
        self.method: tuple[int, int] | None = None
        """The method of the frame ``find`` found."""

    def find(self, data: bytes, methods: set[tuple[int, int]]) -> int | None:
        """Where in ``data`` the first frame of one of ``methods`` begins (0 when it began in
        earlier data); every frame before it is passed."""
        carried = len(self._buffer)
        buffer = self._buffer + data
        pos = 0
        if not self._header_done:
            if len(buffer) < len(_PROTOCOL_HEADER):
                self._buffer = buffer
                return None
            self._header_done = True
            pos = len(_PROTOCOL_HEADER)
        found = None
        while len(buffer) - pos >= _FRAME_HEAD.size + 4:
            kind, _channel, size = _FRAME_HEAD.unpack_from(buffer, pos)
            if kind == 1:
                method = struct.unpack_from(">HH", buffer, pos + _FRAME_HEAD.size)
                if method in methods:
                    self.method = method
                    found = max(0, pos - carried)
                    break
            end = pos + _FRAME_HEAD.size + size + 1
            if len(buffer) < end:
                break
            pos = end
        self._buffer = buffer[pos:]
        return found


def _reset(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    sock.close()


class Relay:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._dropping = threading.Event()
        self._closed = threading.Event()
        self._armed: dict[str, int] = {}
        self._reset_done: list[threading.Event] = []
        self.resets: list[str] = []
        """``reset`` for each ``reset()``, the step's name for each armed reset done."""
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread = threading.Thread(target=self._run, name="relay", daemon=True)
        self._thread.start()

    def url(self, template: str) -> str:
        """``template`` (a node's AMQP URL) pointed at the relay instead."""
        host_port = template.split("@", 1)[1].split("/", 1)[0]
        return template.replace(host_port, f"127.0.0.1:{self.port}", 1)

    def black_hole(self) -> None:
        self._dropping.set()

    def cut(self) -> None:
        """Close every relayed connection (the client sees its socket close)."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for a, b in pairs:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
        self._wake_w.send(b"x")

    def reset(self, timeout: float = 10.0) -> None:
        """Reset every relayed connection (RST to the client and to the broker); returns once
        done."""
        done = threading.Event()
        with self._lock:
            self._reset_done.append(done)
        self._wake_w.send(b"x")
        if not done.wait(timeout):
            raise ChaosTimeout(f"the relay did not reset within {timeout:g} s")

    def reset_at(self, step: str, times: int = 1) -> None:
        """Reset the next ``times`` connections that reach ``step`` (see ``STEPS``)."""
        if step not in STEPS:
            raise ValueError(f"unknown step {step!r}; one of {sorted(STEPS)}")
        with self._lock:
            self._armed[step] = times

    def disarm(self) -> None:
        with self._lock:
            self._armed.clear()

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._pairs)

    def close(self) -> None:
        self._closed.set()
        self.cut()
        self._thread.join(5)
        self._listener.close()
        self._wake_r.close()
        self._wake_w.close()

    def _take_armed(self, step: str) -> bool:
        """Whether ``step`` is armed; uses one of its resets if so (relay thread)."""
        with self._lock:
            left = self._armed.get(step, 0)
            if left <= 0:
                return False
            self._armed[step] = left - 1
            self.resets.append(step)
            return True

    def _armed_methods(self) -> set[tuple[int, int]]:
        with self._lock:
            return {m for step, n in self._armed.items() if n > 0
                    if (m := STEPS[step]) is not None}

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ, "accept")
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        peers: dict[socket.socket, tuple[socket.socket, bool]] = {}
        frames: dict[socket.socket, _ClientFrames] = {}

        def drop(*socks: socket.socket, reset: bool = False) -> None:
            for s in socks:
                with contextlib.suppress(KeyError, ValueError):
                    sel.unregister(s)
                peers.pop(s, None)
                frames.pop(s, None)
                with self._lock:
                    self._pairs = [p for p in self._pairs if s not in p]
                if reset:
                    _reset(s)
                else:
                    s.close()

        while not self._closed.is_set():
            for key, _ in sel.select(timeout=0.5):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if key.data == "accept":
                    client, _addr = self._listener.accept()
                    if self._take_armed("connect"):
                        _reset(client)
                        continue
                    try:
                        server = socket.create_connection(self.target, timeout=5)
                    except OSError:
                        client.close()
                        continue
                    with self._lock:
                        self._pairs.append((client, server))
                    peers[client] = (server, False)
                    peers[server] = (client, True)
                    frames[client] = _ClientFrames()
                    sel.register(client, selectors.EVENT_READ, "data")
                    sel.register(server, selectors.EVENT_READ, "data")
                elif key.data == "wake":
                    self._wake_r.recv(64)
                    with self._lock:
                        waiting, self._reset_done = self._reset_done, []
                    if waiting:
                        clients = [s for s, (_o, from_broker) in peers.items()
                                   if not from_broker]
                        for client in clients:
                            self.resets.append("reset")
                            drop(client, peers[client][0], reset=True)
                        for done in waiting:
                            done.set()
                elif sock in peers:  # not closed earlier in this same batch
                    other, from_broker = peers[sock]
                    try:
                        data = sock.recv(65536)
                    except OSError:
                        data = b""
                    if data and not from_broker and sock in frames:
                        watched = frames[sock]
                        at = watched.find(data, self._armed_methods())
                        if at is not None:
                            step = next(s for s, m in STEPS.items() if m == watched.method)
                            if self._take_armed(step):
                                with contextlib.suppress(OSError):
                                    other.sendall(data[:at])
                                drop(sock, other, reset=True)
                                continue
                    if data and not (from_broker and self._dropping.is_set()):
                        with contextlib.suppress(OSError):
                            other.sendall(data)
                    elif not data:
                        drop(sock, other)
        # Closed while connections were still relayed (cut() only shut them down): close
        # them here, or they are left to the garbage collector (ResourceWarning).
        for sock in list(peers):
            drop(sock)
        sel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

