"""A local Spark standalone cluster (one master, one worker) from the pip ``pyspark`` package.

The pip package carries the whole Spark distribution (``bin/spark-class``, ``jars/``), so no
download is needed: we run ``spark-class`` with ``SPARK_HOME`` set to the package directory. The
daemon scripts (``sbin/start-master.sh``) are not in the package, and they would daemonise and
write to ``$SPARK_HOME/logs`` anyway; ``spark-class`` ``exec``s the JVM, so the pid we record is
the JVM itself and it stays in the session we started.

Everything is on loopback: ``SPARK_LOCAL_IP=127.0.0.1`` binds the RPC ports, the web UIs and
the executors' block managers there (the executors inherit the worker's environment), and
``--host 127.0.0.1`` is what the master advertises. The master's REST submission server is off.
Ports come from a block of 100 of our own (``PORT_OFFSETS``), as for RabbitMQ, ZooKeeper and
PostgreSQL; work and log files live under one state directory.

Ready means the master's JSON (``http://127.0.0.1:<web UI>/json/``) lists our worker ALIVE:
only then can an application get executors. The worker starts once the master answers, because
a worker that finds no master retries only after 5-15 s.

Executors run Python workers with the worker's ``PYSPARK_PYTHON`` unless the driver sets
``spark.pyspark.python``; both default to this interpreter, since the driver's and the
executors' Python must match.

Authentication. Whoever reaches a master can run code on its worker as the worker's user,
and loopback is reachable by every local user: so ``spark.authenticate`` is on, with a secret
``up()`` generates. The daemons read it from their properties file; a driver reads it from
``secret_file`` (both mode 0600), passed to ``spark-submit`` as ``--properties-file``
(PySpark: ``PYSPARK_SUBMIT_ARGS``), never on a command line, where ``ps`` would show it. The
worker hands it to its executors in their environment. ``serving(url)`` finds the cluster
behind a master URL of this host, for ``sac check --master``.

Example::

    with LocalSpark(name="spark") as spark:
        SparkSession.builder.master(spark.url).config("spark.executor.memory", "512m")
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import shutil
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import _proc
from ._errors import (
    NotRunningError,
    PackageMissingError,
    ServerError,
    ServerExitedError,
    StartTimeoutError,
)
from ._files import check_name, default_home, read_json, tail, write_secret
from ._lifecycle import ServerBase
from ._ports import allocate_base, check_free, port_is_free

# Offsets inside our block of 100 that no RabbitMQ, ZooKeeper or PostgreSQL port uses (see
# ``PortLayout`` and ``postgres.PORT_OFFSET``), so a Spark cluster never collides with a server
# set that got the same block elsewhere.
PORT_OFFSETS = {
    "master": 70,
    "master_ui": 71,
    "worker": 72,
    "worker_ui": 73,
}
ROLES = {
    "master": "Spark master RPC",
    "master_ui": "Spark master web UI",
    "worker": "Spark worker RPC",
    "worker_ui": "Spark worker web UI",
}
STATE_FILE = "spark.json"
STOP_GRACE = 15.0
PORT_RELEASE_TIMEOUT = 10.0
INSTALL_HINT = "`pip install 'sac[spark]'` (or the `checker` extra) in the venv"
# The properties every daemon reads: no REST submission server (it would open port 6066 on
# every interface), and nothing that phones home.
DAEMON_PROPERTIES = {
    "spark.master.rest.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.worker.cleanup.enabled": "false",
    "spark.ui.killEnabled": "false",  # the web UIs have no authentication: read-only
}
SECRET_PROPERTY = "spark.authenticate.secret"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"


def auth_properties(secret: str) -> dict[str, str]:
    """What daemons and drivers need to authenticate to each other."""
    return {"spark.authenticate": "true", SECRET_PROPERTY: secret}


def properties_text(properties: dict[str, str]) -> str:
    """A Spark properties file (``key value`` lines)."""
    return "".join(f"{key} {value}\n" for key, value in properties.items())


def spark_home() -> Path:
    """The pyspark package directory: it holds ``bin/spark-class`` and ``jars/``."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise PackageMissingError(f"pyspark is not installed: {INSTALL_HINT}")
    home = Path(spec.origin).parent
    if not (home / "bin" / "spark-class").exists() or not (home / "jars").is_dir():
        raise PackageMissingError(
            f"{home} has no bin/spark-class or jars/: this pyspark is not a full pip "
            f"distribution; reinstall it ({INSTALL_HINT})"
        )
    return home


def master_json(ui_port: int, timeout: float = 2.0) -> dict[str, Any] | None:
    """The master's state as its web UI serves it, or None while nothing answers."""
    url = f"http://127.0.0.1:{ui_port}/json/"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            data = json.loads(resp.read())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class LocalSpark(ServerBase):
    """A standalone Spark master and one worker, their state under one directory."""

    KIND = "Spark"
    STATE_FILE = STATE_FILE

    def __init__(
        self,
        name: str = "spark",
        *,
        home: Path | str | None = None,
        base_port: int | None = None,
        worker_cores: int = 2,
        worker_memory: str = "1g",
        daemon_memory: str = "256m",
        python: str | None = None,
        java: str | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        check_name(name)
        if not 1 <= worker_cores <= 2:
            raise ValueError(f"worker_cores {worker_cores} is not 1 or 2: we share 2 cores")
        self.home = default_home() if home is None else Path(home).resolve()
        self.dir = self.home / name
        self.name = name
        self._base = base_port
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.daemon_memory = daemon_memory
        self.python = python or sys.executable
        self._java = java
        self.start_timeout = start_timeout

    @classmethod
    def attach(cls, name: str = "spark", home: Path | str | None = None) -> LocalSpark:
        spark = cls(name=name, home=home)
        state = read_json(spark.dir / STATE_FILE)
        if state is None:
            raise NotRunningError(f"Spark {name!r} is not running (no state in {spark.dir})")
        spark._base = int(state["base_port"])
        return spark

    def __repr__(self) -> str:
        return f"LocalSpark(dir={self.dir}, base_port={self._base})"

    # ------------------------------------------------------------------ addresses

    def port(self, role: str) -> int:
        """The port of ``role`` (a key of ``PORT_OFFSETS``)."""
        if self._base is None:
            raise NotRunningError("Spark has no ports yet: call up() first")
        return self._base + PORT_OFFSETS[role]

    @property
    def url(self) -> str:
        """The master URL a SparkSession takes: ``spark://127.0.0.1:<port>``."""
        return f"spark://127.0.0.1:{self.port('master')}"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.port('master_ui')}"

    @property
    def work_dir(self) -> Path:
        """Where the worker puts each application's executor directories and logs."""
        return self.dir / "work"

    @property
    def secret_file(self) -> Path:
        """The Spark properties a driver needs to be let in (``spark.authenticate`` and its
        secret), mode 0600: ``spark-submit --properties-file <this>``."""
        return self.dir / "conf" / "client.conf"

    @classmethod
    def serving(cls, url: str) -> LocalSpark | None:
        """The ``LocalSpark`` whose master listens at ``url`` (``spark://127.0.0.1:<port>``) on
        this host, found through its master's process and state marker, whatever its home;
        None if there is none we may look at (another user's)."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "spark" or parts.hostname not in ("127.0.0.1", "localhost"):
            return None
        try:
            port = parts.port
        except ValueError:
            return None
        for pid in _proc.pids():
            argv = _proc.argv_of(pid)
            if MASTER_CLASS not in argv or "--port" not in argv:
                continue
            at = argv.index("--port") + 1
            mark = _proc.marker_of(pid)
            if at < len(argv) and argv[at] == str(port) and mark:
                state_dir = Path(mark)
                with contextlib.suppress(NotRunningError, ValueError):
                    found = cls.attach(state_dir.name, home=state_dir.parent)
                    if found.port("master") == port:
                        return found
        return None

    @property
    def master_log(self) -> Path:
        return self.dir / "logs" / "master.log"

    @property
    def worker_log(self) -> Path:
        return self.dir / "logs" / "worker.log"

    def log_files(self) -> list[Path]:
        """The daemons' logs, then every executor's stdout and stderr."""
        files = [self.master_log, self.worker_log]
        files += sorted(self.work_dir.glob("*/*/std*"))
        return [f for f in files if f.exists()]

    # ------------------------------------------------------------------ state

    def _state(self) -> dict[str, Any]:
        return self._read_state() or {}

    def _pids(self) -> dict[str, int]:
        return {k: int(v) for k, v in self._state().get("pids", {}).items()}

    def pids(self) -> list[int]:
        """Every live process of the cluster: master, worker, executors and their Pythons."""
        return _proc.find_marked(self.dir)

    def is_running(self) -> bool:
        pids = self._pids()
        return bool(pids) and all(_proc.is_ours(p, self.dir) for p in pids.values())

    def status(self) -> dict[str, Any]:
        info = master_json(self.port("master_ui")) if self._base is not None else None
        return {
            "name": self.name,
            "dir": str(self.dir),
            "url": self.url if self._base is not None else None,
            "ui": self.ui_url if self._base is not None else None,
            "pids": self._pids(),
            "running": self.is_running(),
            "secret_file": str(self.secret_file),
            "master": None if info is None else info.get("status"),
            "workers": [] if info is None else [
                {"id": w.get("id"), "state": w.get("state"), "cores": w.get("cores")}
                for w in info.get("workers", [])
            ],
            "logs": [str(p) for p in self.log_files()],
        }

    # ------------------------------------------------------------------ lifecycle

    def _java_binary(self) -> str:
        java = self._java or shutil.which("java")
        if java is None or not os.access(java, os.X_OK):
            raise PackageMissingError(
                f"java is not installed{'' if java is None else f' at {java}'}: Spark needs "
                "Java 17 or 21 (`apt-get install -y default-jre-headless`, or `make deps`)"
            )
        return java

    def _env(self, home: Path, java: str) -> dict[str, str]:
        return {
            "PATH": f"{Path(java).resolve().parent}:/usr/sbin:/usr/bin:/sbin:/bin",
            "LANG": "C.UTF-8",
            "HOME": str(self.dir),
            "SPARK_HOME": str(home),
            "SPARK_CONF_DIR": str(self.dir / "conf"),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_DIRS": str(self.dir / "tmp"),
            "SPARK_DAEMON_MEMORY": self.daemon_memory,
            "PYSPARK_PYTHON": self.python,
            _proc.MARKER: str(self.dir),
        }

    def _check_installed(self) -> None:
        spark_home()
        self._java_binary()

    def _any_running(self) -> bool:
        return self.is_running()

    def _prepare(self) -> None:
        if self._base is None:
            self._base = allocate_base(self.home, self.name, {
                off: ROLES[role] for role, off in PORT_OFFSETS.items()
            })
        check_free({self.port(role): ROLES[role] for role in PORT_OFFSETS})
        self._fresh_dir()
        for sub in ("conf", "logs", "work", "tmp"):
            (self.dir / sub).mkdir()
        (self.dir / "conf").chmod(0o700)
        auth = auth_properties(secrets.token_urlsafe(32))
        write_secret(self._properties, properties_text({**DAEMON_PROPERTIES, **auth}))
        write_secret(self.secret_file, properties_text(auth))
        self._write_state({"base_port": self._base, "pids": {}})

    @property
    def _properties(self) -> Path:
        return self.dir / "conf" / "spark-defaults.conf"

    def _boot(self) -> None:
        home = spark_home()
        env = self._env(home, self._java_binary())
        spark_class = str(home / "bin" / "spark-class")
        props = str(self._properties)
        self._spawn("master", [spark_class, "org.apache.spark.deploy.master.Master",
                               "--host", "127.0.0.1", "--port", str(self.port("master")),
                               "--webui-port", str(self.port("master_ui")),
                               "--properties-file", props], env, self.master_log)
        self._wait("master", self.master_log, self._master_alive)
        self._spawn("worker", [spark_class, "org.apache.spark.deploy.worker.Worker",
                               "--host", "127.0.0.1", "--port", str(self.port("worker")),
                               "--webui-port", str(self.port("worker_ui")),
                               "--cores", str(self.worker_cores),
                               "--memory", self.worker_memory,
                               "--work-dir", str(self.work_dir),
                               "--properties-file", props, self.url], env, self.worker_log)
        self._wait("worker", self.worker_log, self._worker_alive)

    def _spawn(self, role: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        """Start one daemon, its pid recorded at once (what a failed ``up()`` stops)."""
        state = self._state()
        state.setdefault("pids", {})[role] = _proc.spawn(argv, env, log, self.dir)
        self._write_state(state)

    def _master_alive(self) -> bool:
        info = master_json(self.port("master_ui"))
        return info is not None and info.get("status") == "ALIVE"

    def _worker_alive(self) -> bool:
        info = master_json(self.port("master_ui"))
        if info is None:
            return False
        return any(w.get("state") == "ALIVE" and w.get("host") == "127.0.0.1"
                   and w.get("port") == self.port("worker") for w in info.get("workers", []))

    def _wait(self, role: str, log: Path, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.start_timeout
        pid = self._pids()[role]
        while not ready():
            if not _proc.is_alive(pid):
                raise ServerExitedError(
                    f"the Spark {role} exited while starting; read {log}:\n{tail(log)}"
                )
            if time.monotonic() >= deadline:
                what = ("answer on " + self.ui_url + "/json/" if role == "master"
                        else "show its worker ALIVE on " + self.ui_url + "/json/")
                raise StartTimeoutError(
                    f"the Spark master did not {what} within {self.start_timeout:g} s; "
                    f"read {log}:\n{tail(log)}"
                )
            time.sleep(0.1)

    def _teardown(self) -> list[int]:
        """Stop the worker (it kills its executors) and the master, then prove none is left."""
        recorded = self._pids()
        leaders = [recorded[r] for r in ("worker", "master") if r in recorded]
        pids = _proc.stop_marked(self.dir, leaders, STOP_GRACE, "Spark")
        self._wait_ports_released()
        self._forget_state()
        return pids

    def _wait_ports_released(self) -> None:
        """A JVM's main thread shows as a zombie while its other threads still close the
        sockets they share: wait for the ports themselves, so that ``up()`` right after
        ``down()`` finds them free."""
        if self._base is None:
            return
        ports = [self.port(role) for role in PORT_OFFSETS]
        deadline = time.monotonic() + PORT_RELEASE_TIMEOUT
        while busy := [port for port in ports if not port_is_free(port)]:
            if time.monotonic() >= deadline:
                raise ServerError(
                    f"ports {busy} stayed bound {PORT_RELEASE_TIMEOUT:g} s after every Spark "
                    f"process of {self.dir} had exited; see `ss -ltnp`"
                )
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL the master, the worker and every executor at once, as a crash would; the
        state and logs stay (``down()`` cleans up)."""
        pids = self.pids()
        if not pids:
            raise NotRunningError(f"Spark in {self.dir} is not running")
        _proc.kill_all(pids, "Spark")
