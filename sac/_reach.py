"""Saying at once, in one line, that a server the command needs does not answer.

Spark retries an absent master for a minute and then fails in its logs; a JDBC connection
fails only after the JVM has started. A TCP connect first costs milliseconds and names the
address.
"""

from __future__ import annotations

import socket
import urllib.parse

from sac.checker.errors import InputError

DEFAULT_MASTER_PORT = 7077
TIMEOUT_S = 5.0


def check_master(master: str) -> None:
    """``InputError`` unless ``master`` is ``local[...]``, ``yarn``, ``k8s://...`` or a
    ``spark://HOST:PORT`` that accepts a connection."""
    parts = urllib.parse.urlsplit(master)
    if parts.scheme != "spark" or not parts.hostname:
        if master.startswith(("local", "yarn", "k8s://")):
            return
        raise InputError(f"--master {master!r}: expected spark://HOST:PORT or local[N]")
    check_tcp(parts.hostname, parts.port or DEFAULT_MASTER_PORT, f"--master {master}")


def check_tcp(host: str, port: int, what: str) -> None:
    """``InputError`` naming ``what`` unless ``host:port`` accepts a TCP connection."""
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT_S):
            pass
    except OSError as exc:
        raise InputError(f"{what}: cannot reach {host}:{port} ({exc.strerror or exc})") from None
