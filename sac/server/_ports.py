"""Port blocks: one block of 100 loopback ports per managed server set.

A fixed layout inside the block (see ``PortLayout``) keeps every port of a cluster derivable
from its base, so ``status`` and a human reading ``ss -ltn`` agree, and two clusters never
collide as long as their blocks differ.
"""

from __future__ import annotations

import errno
import json
import socket
import zlib
from pathlib import Path

import attrs

from ._errors import PortBusyError, ServerError

BLOCK = 100
FIRST_BLOCK = 20000
LAST_BLOCK = 29900  # CLI dist ports stay far below the kernel's ephemeral range
MAX_NODES = 9


@attrs.frozen
class PortLayout:
    """Where each service of a cluster listens, from the block's ``base``."""

    base: int = attrs.field(validator=attrs.validators.and_(attrs.validators.ge(1024),
                                                            attrs.validators.le(65535 - BLOCK)))

    def amqp(self, index: int) -> int:
        return self.base + index

    def management(self, index: int) -> int:
        return self.base + 10 + index

    def dist(self, index: int) -> int:
        return self.base + 20 + index

    def amqps(self, index: int) -> int:
        """AMQP over TLS."""
        return self.base + 60 + index

    @property
    def epmd(self) -> int:
        return self.base + 30

    @property
    def zookeeper(self) -> int:
        return self.base + 31

    @property
    def ctl_dist_range(self) -> tuple[int, int]:
        """Ports the RabbitMQ CLI tools may listen on while they run."""
        return self.base + 40, self.base + 59

    def listening_ports(self, nodes: int, zookeeper: bool) -> dict[int, str]:
        """Every port the servers will bind, with what binds it (for error messages)."""
        ports: dict[int, str] = {}
        for i in range(nodes):
            ports[self.amqp(i)] = f"AMQP of node {i + 1}"
            ports[self.management(i)] = f"management API of node {i + 1}"
            ports[self.dist(i)] = f"Erlang distribution of node {i + 1}"
            ports[self.amqps(i)] = f"AMQPS (TLS) of node {i + 1}"
        ports[self.epmd] = "epmd"
        if zookeeper:
            ports[self.zookeeper] = "ZooKeeper"
        return ports


def port_is_free(port: int) -> bool:
    """True if nothing listens on 127.0.0.1:port (TIME_WAIT leftovers do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def check_free(ports: dict[int, str]) -> None:
    """Raise ``PortBusyError`` naming the first busy port and its role."""
    for port, role in sorted(ports.items()):
        if not port_is_free(port):
            raise PortBusyError(
                f"port 127.0.0.1:{port} ({role}) is already in use; stop what listens there "
                f"(see `ss -ltnp 'sport = :{port}'`) or choose another base port"
            )


def _claimed_bases(home: Path) -> set[int]:
    bases = set()
    states = ("state.json", "zookeeper.json", "postgres.json", "spark.json")
    for state in [p for name in states for p in home.glob(f"*/{name}")]:
        try:
            bases.add(int(json.loads(state.read_text())["base_port"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return bases


def allocate_base(home: Path, name: str, needed: dict[int, str] | None = None) -> int:
    """Pick a free block, preferring one derived from ``name`` so that ports are stable.

    ``needed`` maps block offsets to roles; all of them must be free in the chosen block.
    """
    offsets = needed or {0: "AMQP"}
    count = (LAST_BLOCK - FIRST_BLOCK) // BLOCK + 1
    start = zlib.crc32(name.encode()) % count
    claimed = _claimed_bases(home)
    for step in range(count):
        base = FIRST_BLOCK + ((start + step) % count) * BLOCK
        if base in claimed:
            continue
        if all(port_is_free(base + off) for off in offsets):
            return base
    raise ServerError(
        f"no free block of {BLOCK} ports between {FIRST_BLOCK} and {LAST_BLOCK + BLOCK - 1}"
    )
