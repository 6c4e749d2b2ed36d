"""A TCP relay between a client and a broker node, for faults that need the network rather
than the broker: ``black_hole()`` silently drops everything the broker sends (confirms
included) while the client's bytes still reach it; ``cut()`` then closes both sides.

That is how a publisher loses confirms for messages the broker did enqueue, which is what
makes a retransmission a duplicate. (The chaos suite's Toxiproxy-compatible server does this
for campaigns; tests keep this small one to stay independent of it.)
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from types import TracebackType
from typing import Self


class Relay:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._dropping = threading.Event()
        self._closed = threading.Event()
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

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ, "accept")
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        peers: dict[socket.socket, tuple[socket.socket, bool]] = {}
        while not self._closed.is_set():
            for key, _ in sel.select(timeout=0.5):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if key.data == "accept":
                    client, _addr = self._listener.accept()
                    try:
                        server = socket.create_connection(self.target, timeout=5)
                    except OSError:
                        client.close()
                        continue
                    with self._lock:
                        self._pairs.append((client, server))
                    peers[client] = (server, False)
                    peers[server] = (client, True)
                    sel.register(client, selectors.EVENT_READ, "data")
                    sel.register(server, selectors.EVENT_READ, "data")
                elif key.data == "wake":
                    self._wake_r.recv(64)
                elif sock in peers:  # not closed earlier in this same batch
                    other, from_broker = peers[sock]
                    try:
                        data = sock.recv(65536)
                    except OSError:
                        data = b""
                    if data and not (from_broker and self._dropping.is_set()):
                        with contextlib.suppress(OSError):
                            other.sendall(data)
                    elif not data:
                        for s in (sock, other):
                            with contextlib.suppress(KeyError, ValueError):
                                sel.unregister(s)
                            peers.pop(s, None)
                            s.close()
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
