"""Small helpers for tests against real servers: listening sockets, waiting on events, the
output of a process of the test's own."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import queue as queue_module
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float, what: str) -> T:
    """Poll ``predicate`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def _decode_address(hex_addr: str) -> str:
    addr, port = hex_addr.split(":")
    raw = bytes.fromhex(addr)
    if len(raw) == 4:
        host = ".".join(str(b) for b in raw[::-1])
    else:  # IPv6: four little-endian 32-bit words
        words = [raw[i : i + 4][::-1] for i in range(0, 16, 4)]
        full = b"".join(words)
        host = ":".join(full[i : i + 2].hex() for i in range(0, 16, 2))
    return f"{host}:{int(port, 16)}"


def listening_addresses(pids: list[int]) -> set[str]:
    """Every TCP address that one of ``pids`` listens on (from /proc, no ss needed), each
    read in the process's own network namespace."""
    found = set()
    for pid in pids:
        inodes = _socket_inodes(pid)
        for table in (f"/proc/{pid}/net/tcp", f"/proc/{pid}/net/tcp6"):
            try:
                lines = Path(table).read_text().splitlines()[1:]
            except OSError:  # the process is gone
                continue
            for line in lines:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == "0A" and inode in inodes:  # 0A = LISTEN
                    found.add(_decode_address(local))
    return found


def is_loopback(address: str) -> bool:
    """127.0.0.0/8, ::1 and IPv4-mapped 127.x (Java's dual-stack sockets) are loopback."""
    host = ipaddress.ip_address(address.rsplit(":", 1)[0])
    if isinstance(host, ipaddress.IPv6Address) and host.ipv4_mapped is not None:
        return host.ipv4_mapped.is_loopback
    return host.is_loopback


def finish(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait(10)
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


class Lines:
    """A consumer process's stdout, read by a thread, so that waiting for a line can time
    out."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: queue_module.Queue[str | None] = queue_module.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)

    def expect(self, prefix: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue_module.Empty:
                raise AssertionError(
                    f"no {prefix!r} from the consumer process within {timeout} s; "
                    f"it printed {self.seen}") from None
            if line is None:
                raise AssertionError(f"the process ended ({self.proc.wait(10)}) before "
                                     f"{prefix!r}; it printed {self.seen}")
            self.seen.append(line)
            if line.startswith(prefix):
                return line


CLIENT_JIT = "-XX:TieredStopAtLevel=1"
"""The JVMs of a Spark application the test starts for one small job (a driver and its
executor on the standalone cluster) compile with the client compiler only: such a JVM lives
for a few dozen tiny jobs, so its time goes to compiling Spark's code rather than running it,
and the optimising compiler's threads, which pay off only later, take the 2 cores from the
jobs. Measured here: ``sac check`` on the standalone cluster 75-93 s -> 49-71 s, the
DataFrame job on the worker 39 s -> 23 s. Not the tests' shared local session
(``tests/checker/conftest.py``): it runs jobs for minutes, and its later modules ran slower
(the audits' in-process jobs 15 s -> 28 s) than its first one gained. Which compiler runs the
code changes no result."""


def spark_submit_args(*options: str) -> str:
    """``PYSPARK_SUBMIT_ARGS`` for a driver the test starts (``options`` first, such as
    ``--properties-file``): its JVM and its executors' with ``CLIENT_JIT``."""
    return " ".join([*options, f"--driver-java-options={CLIENT_JIT}",
                     f"--conf spark.executor.extraJavaOptions={CLIENT_JIT}", "pyspark-shell"])
