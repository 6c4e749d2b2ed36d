"""A local standalone ZooKeeper from Debian's ``zookeeper`` package, on loopback.

``zkServer.sh`` is tied to ``/etc/zookeeper`` and ``/var/log/zookeeper``, so we start the server
class with Java directly, with a config of our own: the admin server off (it would open port
8080) and only the four-letter words we use for probes.

``tick_time_ms`` sets ZooKeeper's tickTime, its unit of time: a session may be as short as
2 ticks (``min_session_timeout``) and expires within a tick of its timeout. The default
(2000 ms, ZooKeeper's) allows sessions of 4 s to 60 s; a short tick makes short leases
possible (100 ms: sessions from 0.2 s), for takeover tests and measurements.

Example::

    with LocalZooKeeper(name="zk", tick_time_ms=100) as zk:
        KazooClient(hosts=zk.hosts, timeout=0.5)
"""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path
from typing import Any

from . import _proc
from ._errors import (
    NotRunningError,
    PackageMissingError,
    ServerExitedError,
    StartTimeoutError,
)
from ._files import check_name, default_home, read_json, tail
from ._lifecycle import ServerBase
from ._ports import PortLayout, allocate_base, check_free

JARS = (
    Path("/usr/share/java/zookeeper.jar"),
    Path("/usr/share/java/slf4j-log4j12.jar"),
    Path("/usr/share/java/log4j-1.2.jar"),
)
LOG4J = """log4j.rootLogger=INFO, FILE
log4j.appender.FILE=org.apache.log4j.FileAppender
log4j.appender.FILE.File={log}
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=%d{{ISO8601}} %-5p [%t:%C{{1}}@%L] - %m%n
"""


def four_letter(port: int, word: str, timeout: float = 1.0) -> str | None:
    """Send a four-letter word; the answer, or None if nothing answered."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(word.encode())
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
    except OSError:
        return None
    return b"".join(chunks).decode(errors="replace")


DEFAULT_TICK_MS = 2000
MAX_SESSION_TIMEOUT_MS = 60000


class LocalZooKeeper(ServerBase):
    """One ZooKeeper server (standalone mode) with its state under one directory."""

    KIND = "ZooKeeper"
    STATE_FILE = "zookeeper.json"

    def __init__(
        self,
        name: str = "zk",
        *,
        port: int | None = None,
        home: Path | str | None = None,
        start_timeout: float = 30.0,
        java: str | None = None,
        jars: tuple[Path, ...] = JARS,
        tick_time_ms: int = DEFAULT_TICK_MS,
    ) -> None:
        check_name(name)
        if (isinstance(tick_time_ms, bool) or not isinstance(tick_time_ms, int)
                or not 1 <= tick_time_ms <= MAX_SESSION_TIMEOUT_MS // 20):
            raise ValueError(f"tick_time_ms must be an integer in [1, "
                              f"{MAX_SESSION_TIMEOUT_MS // 20}], got {tick_time_ms!r}")
        self.tick_time_ms = tick_time_ms
        self.home = default_home() if home is None else Path(home).resolve()
        self.dir = self.home / name
        self.name = name
        self._port = port
        self.start_timeout = start_timeout
        self._java = java
        self.jars = jars
        self._owns_block = True

    @classmethod
    def inside(cls, state_dir: Path, port: int) -> LocalZooKeeper:
        """The ZooKeeper that belongs to a cluster: its ports come from the cluster's block."""
        zk = cls(name=state_dir.name, port=port, home=state_dir.parent)
        zk._owns_block = False
        return zk

    @classmethod
    def attach(cls, name: str = "zk", home: Path | str | None = None) -> LocalZooKeeper:
        probe = cls(name=name, home=home)
        state = read_json(probe.dir / "zookeeper.json")
        if state is None:
            raise NotRunningError(f"ZooKeeper {name!r} is not running (no state in {probe.dir})")
        return cls(name=name, home=home, port=int(state["port"]),
                   tick_time_ms=int(state.get("tick_time_ms", DEFAULT_TICK_MS)))

    def __repr__(self) -> str:
        return f"LocalZooKeeper(dir={self.dir}, port={self._port})"

    @property
    def port(self) -> int:
        if self._port is None:
            raise NotRunningError("ZooKeeper has no port yet: call up() first")
        return self._port

    @property
    def min_session_timeout(self) -> float:
        """The shortest session (seconds) this server grants: 2 x tickTime."""
        return 2 * self.tick_time_ms / 1000

    @property
    def max_session_timeout(self) -> float:
        """The longest session (seconds) this server grants."""
        return MAX_SESSION_TIMEOUT_MS / 1000

    @property
    def hosts(self) -> str:
        """The connection string kazoo takes."""
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.dir / "zookeeper.log"

    def _java_binary(self) -> str:
        java = self._java or shutil.which("java")
        if java is None:
            raise PackageMissingError(
                "java is not installed: install a Java runtime (`apt-get install -y "
                "default-jre-headless`, or `make deps`)"
            )
        for jar in self.jars:
            if not jar.exists():
                raise PackageMissingError(
                    f"ZooKeeper is not installed: {jar} is missing. Install the Debian package "
                    "zookeeper (`apt-get install -y zookeeper`, or `make deps`)."
                )
        return java

    def _pid(self) -> int | None:
        state = self._read_state()
        pid = None if state is None else state.get("pid")
        return int(pid) if pid is not None else None

    def is_running(self) -> bool:
        pid = self._pid()
        return pid is not None and _proc.is_ours(pid, self.dir)

    def _check_installed(self) -> None:
        self._java_binary()

    def _any_running(self) -> bool:
        return self.is_running()

    def _prepare(self) -> None:
        if self._port is None:
            base = allocate_base(self.home, self.name, {PortLayout(1024).zookeeper - 1024: "zk"})
            self._port = PortLayout(base).zookeeper
            block = base
        else:
            block = self._port
        check_free({self.port: "ZooKeeper client port"})
        self._fresh_dir()
        (self.dir / "data").mkdir()
        (self.dir / "zoo.cfg").write_text(
            "\n".join(
                [
                    f"tickTime={self.tick_time_ms}",
                    "initLimit=10",
                    "syncLimit=5",
                    f"dataDir={self.dir / 'data'}",
                    f"clientPort={self.port}",
                    "clientPortAddress=127.0.0.1",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr,stat,mntr,envi,conf",
                    f"maxSessionTimeout={MAX_SESSION_TIMEOUT_MS}",
                    "",
                ]
            )
        )
        (self.dir / "log4j.properties").write_text(LOG4J.format(log=self.log_file))
        state: dict[str, Any] = {"port": self.port, "pid": None,
                                 "tick_time_ms": self.tick_time_ms}
        if self._owns_block:
            state["base_port"] = block - (PortLayout(1024).zookeeper - 1024)
        self._write_state(state)

    def _boot(self) -> None:
        env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "LANG": "C.UTF-8",
            _proc.MARKER: str(self.dir),
        }
        argv = [
            self._java_binary(),
            "-Xmx256m",
            "-Dzookeeper.admin.enableServer=false",
            f"-Dlog4j.configuration=file:{self.dir / 'log4j.properties'}",
            "-cp",
            ":".join(str(j) for j in self.jars),
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(self.dir / "zoo.cfg"),
        ]
        pid = _proc.spawn(argv, env, self.dir / "console.log", self.dir)
        state = self._read_state() or {}
        state["pid"] = pid
        self._write_state(state)
        self._wait_ready(pid)

    def _wait_ready(self, pid: int) -> None:
        deadline = time.monotonic() + self.start_timeout
        while True:
            if not _proc.is_alive(pid):
                raise ServerExitedError(
                    f"ZooKeeper exited while starting; read {self.log_file} and "
                    f"{self.dir / 'console.log'}:\n{tail(self.dir / 'console.log')}"
                )
            if four_letter(self.port, "ruok") == "imok":
                return
            if time.monotonic() >= deadline:
                raise StartTimeoutError(
                    f"ZooKeeper did not answer on {self.hosts} within {self.start_timeout:g} s; "
                    f"read {self.log_file}"
                )
            time.sleep(0.1)

    def _teardown(self) -> list[int]:
        pid = self._pid()
        pids = _proc.stop_marked(self.dir, [] if pid is None else [pid], 10.0, "ZooKeeper")
        self._forget_state()
        return pids

    def kill(self) -> None:
        """SIGKILL the server, as a crash would; its data and state stay (``down()`` cleans
        up)."""
        pid = self._pid()
        if pid is None or not _proc.is_ours(pid, self.dir):
            raise NotRunningError(f"ZooKeeper in {self.dir} is not running")
        _proc.kill_all(sorted({pid, *_proc.find_marked(self.dir)}), "ZooKeeper")

    def log_files(self) -> list[Path]:
        """ZooKeeper's log, then what the JVM printed: those that exist."""
        return [f for f in (self.log_file, self.dir / "console.log") if f.exists()]

    def status(self) -> dict[str, Any]:
        pid = self._pid()
        mode = None
        srvr = four_letter(self.port, "srvr") if self._port is not None else None
        if srvr:
            for line in srvr.splitlines():
                if line.startswith("Mode:"):
                    mode = line.split(":", 1)[1].strip()
        return {
            "name": self.name,
            "dir": str(self.dir),
            "port": self._port,
            "pid": pid,
            "running": self.is_running(),
            "mode": mode,
            "tick_time_ms": self.tick_time_ms,
            "log": str(self.log_file),
            "logs": [str(p) for p in self.log_files()],
        }
