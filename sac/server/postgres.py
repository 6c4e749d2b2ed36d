"""A local PostgreSQL server from Debian's ``postgresql`` package, on loopback.

Debian's wrappers (``pg_ctlcluster``, ``pg_createcluster``) tie a server to ``/etc/postgresql``
and ``/var/lib/postgresql``, so we call ``initdb`` and ``postgres`` from
``/usr/lib/postgresql/<version>/bin`` directly, with a data directory, a port, a socket directory
and a password of our own. Everything lives under one state directory, as for RabbitMQ and
ZooKeeper (as root, but for ``data/`` and ``run/``: see below): ``rm -r`` of it is a complete
reset.

Root. ``initdb`` and ``postgres`` refuse to run as root. When we are root they run as the
``postgres`` system user that the package creates, through ``setpriv`` (util-linux): unlike
``runuser`` it execs instead of staying behind as a root parent, so the pid we record is the
postmaster itself and our signals reach it unchanged (``runuser`` does not pass SIGINT on, and
SIGINT is PostgreSQL's fast shutdown). That user owns ``data/`` and ``run/`` only; the
credentials, logs and state stay root's, in the state directory. ``initdb`` and a booting
server must walk down to ``data/`` by its absolute path, and a state directory under root's
home or pytest's ``/tmp/pytest-of-root`` (both 0700) denies them that. We never change a mode
on the host to let them through: as root, ``data/`` and ``run/`` live in a runtime directory of
their own, ``/var/lib/sac/postgres/<name>-<hash of the state directory>/`` (``runtime_root``),
which we create (0711: the ``postgres`` user may pass, not list) and which names its state
directory in ``owner``. ``up()`` wipes it with the rest; any ``up()`` removes those whose state
directory is gone (``rm -r`` of the home, pytest's cleanup of old sessions), so ``rm -r`` of
the state directory is still a complete reset, finished at the next ``up()``.

Finding our processes. PostgreSQL writes each child's process title over its argv *and*
environment and puts each child in a session of its own, so children lose the
``SAC_STATE_DIR`` marker and a signal to the postmaster's group misses them. They keep their
working directory, the data directory: ``pids()`` finds them by that.

Example::

    with LocalPostgres(name="pg") as pg:
        psycopg.connect(pg.create_database("dedup"))
        print(pg.display_dsn)  # password masked, for people
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import stat
import struct
import subprocess
import time
import urllib.parse
from pathlib import Path
from typing import Any, Self

import attrs

from . import _proc
from ._errors import (
    AlreadyRunningError,
    CommandError,
    NotRunningError,
    PackageMissingError,
    ServerError,
    ServerExitedError,
    StartTimeoutError,
)
from ._files import (
    Credentials,
    check_name,
    default_home,
    read_json,
    tail,
    write_secret,
)
from ._lifecycle import ServerBase
from ._ports import allocate_base, check_free

PG_ROOT = Path("/usr/lib/postgresql")
SYSTEM_USER = "postgres"
SUPERUSER = "sac"
# Offset of the port inside our own block of 100: no RabbitMQ or ZooKeeper port of PortLayout
# uses it, so a server here never collides with a cluster that got the same block elsewhere.
PORT_OFFSET = 32
SHUTDOWN_GRACE = 30.0
RUNTIME_ROOT = Path("/var/lib/sac/postgres")  # as root: where data/ and run/ live
RUNTIME_MODE = 0o711  # the postgres user passes through, lists nothing
OWNER_FILE = "owner"  # in a runtime directory: the state directory it belongs to
SUN_PATH_MAX = 107  # bytes of a Unix socket path, without the final NUL
DATABASE_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
PROTOCOL_3 = 196608
INSTALL_HINT = "`apt-get install -y postgresql`, or `make deps`"


def startup_answer(port: int, user: str = SUPERUSER, timeout: float = 1.0) -> str | None:
    """Send a protocol-3 startup packet: ``"ready"`` if the server asks for a password (it
    accepts connections), its error message if it refuses ("the database system is starting
    up"), None if nothing answered.

    We hang up at the password prompt: PostgreSQL logs nothing for that (psql does it every time
    it needs a password), so probing leaves the log clean and needs no client library.
    """
    params = f"user\0{user}\0database\0postgres\0\0".encode()
    body = struct.pack("!I", PROTOCOL_3) + params
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(struct.pack("!I", len(body) + 4) + body)
            head = _recv_exactly(sock, 5)
            if head is None:
                return None
            kind, length = head[:1], struct.unpack("!I", head[1:])[0]
            # Read the whole message: closing with unread bytes sends a reset, which the server
            # logs ("could not receive data from client").
            rest = _recv_exactly(sock, min(max(length - 4, 0), 8192)) or b""
    except OSError:
        return None
    if kind == b"R":
        return "ready"
    if kind != b"E":
        return f"unexpected message {kind!r}"
    for field in rest.split(b"\0"):
        if field[:1] == b"M":
            return field[1:].decode(errors="replace")
    return "error without a message"


def _process_cwds() -> list[str]:
    """The working directory of every process we may look at."""
    cwds = []
    for pid in _proc.pids():
        with contextlib.suppress(OSError):
            cwds.append(os.readlink(f"/proc/{pid}/cwd"))
    return cwds


def _recv_exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks = b""
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            return None
        chunks += chunk
    return chunks


@attrs.frozen
class RunAs:
    """Who runs ``initdb`` and ``postgres``: ourselves, or (as root) the ``postgres`` user."""

    prefix: tuple[str, ...] = ()
    uid: int | None = None
    gid: int | None = None
    gids: tuple[int, ...] = ()

    @classmethod
    def for_current_user(cls) -> RunAs:
        if os.geteuid() != 0:
            return cls()
        try:
            entry = pwd.getpwnam(SYSTEM_USER)
        except KeyError:
            raise PackageMissingError(
                f"the {SYSTEM_USER!r} system user is missing; it comes with Debian's "
                f"postgresql-common package ({INSTALL_HINT})"
            ) from None
        setpriv = shutil.which("setpriv", path="/usr/bin:/bin:/usr/sbin:/sbin")
        if setpriv is None:
            raise PackageMissingError(
                "setpriv is missing: install util-linux (`apt-get install -y util-linux`)"
            )
        return cls(
            prefix=(setpriv, f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}",
                    "--init-groups", "--"),
            uid=entry.pw_uid,
            gid=entry.pw_gid,
            gids=tuple(os.getgrouplist(entry.pw_name, entry.pw_gid)),
        )

    def own(self, path: Path) -> None:
        if self.uid is not None and self.gid is not None:
            os.chown(path, self.uid, self.gid)

    def closed_on_way_to(self, path: Path) -> list[Path]:
        """The existing ancestors of ``path`` this user cannot search (the owner's, group's
        or others' search bit, whichever applies to it, is off)."""
        if self.uid is None:
            return []
        closed = []
        for parent in reversed(path.parents):
            try:
                st = parent.stat()
            except FileNotFoundError:
                break  # we create the rest, passable
            if st.st_uid == self.uid:
                bit = stat.S_IXUSR
            elif st.st_gid in self.gids:
                bit = stat.S_IXGRP
            else:
                bit = stat.S_IXOTH
            if not st.st_mode & bit:
                closed.append(parent)
        return closed

    def check_way_to(self, path: Path) -> None:
        """Raise unless this user can walk down to ``path``: we never open a way by changing
        a directory of the host."""
        closed = self.closed_on_way_to(path)
        if closed:
            mode = stat.filemode(closed[0].stat().st_mode)
            raise ServerError(
                f"the {SYSTEM_USER} user cannot enter {closed[0]} (mode {mode}) on the way to "
                f"{path}; choose a runtime_root it can reach"
            )


class LocalPostgres(ServerBase):
    """One PostgreSQL server with its data, config, logs and password under one directory.

    ``up()`` wipes any earlier state of the same name and creates a fresh server; ``start()``
    boots again on the data that is there (after ``kill()``: crash recovery); ``attach()``
    finds a running one again. ``start_timeout`` covers the whole of ``up()`` or ``start()``.
    """

    KIND = "PostgreSQL"
    STATE_FILE = "postgres.json"

    def __init__(
        self,
        name: str = "pg",
        *,
        port: int | None = None,
        home: Path | str | None = None,
        start_timeout: float = 60.0,
        pg_root: Path | str = PG_ROOT,
        runtime_root: Path | str = RUNTIME_ROOT,
    ) -> None:
        check_name(name)
        if start_timeout <= 0:
            raise ValueError(f"start_timeout must be positive, not {start_timeout!r}")
        self.home = default_home() if home is None else Path(home).resolve()
        self.dir = self.home / name
        self.name = name
        self._port = port
        self.start_timeout = start_timeout
        self.pg_root = Path(pg_root)
        self.runtime_root = Path(runtime_root)
        self._bin: Path | None = None
        self._credentials: Credentials | None = None
        self._deadline = 0.0
        """When the ``up()`` or ``start()`` under way must be done (``time.monotonic``)."""

    @classmethod
    def attach(cls, name: str = "pg", home: Path | str | None = None) -> LocalPostgres:
        """The server ``name`` as recorded by an earlier ``up``; NotRunningError if none."""
        probe = cls(name=name, home=home)
        state = read_json(probe.dir / "postgres.json")
        if state is None:
            raise NotRunningError(f"PostgreSQL {name!r} is not running (no state in {probe.dir})")
        pg = cls(name=name, home=home, port=int(state["port"]))
        pg._bin = Path(state["bin_dir"])
        if os.geteuid() == 0 and state.get("runtime_dir"):  # where that up put the data
            pg.runtime_root = Path(state["runtime_dir"]).parent
        return pg

    def __repr__(self) -> str:
        return f"LocalPostgres(dir={self.dir}, port={self._port})"

    # ------------------------------------------------------------------ where things are

    @property
    def port(self) -> int:
        if self._port is None:
            raise NotRunningError("PostgreSQL has no port yet: call up() first")
        return self._port

    @property
    def runtime_dir(self) -> Path:
        """Where PostgreSQL's own directories (``data/``, ``run/``) are: the state directory,
        or as root one of ``runtime_root`` that the ``postgres`` user can reach (see the
        module's docstring)."""
        if os.geteuid() != 0:
            return self.dir
        digest = hashlib.sha256(str(self.dir).encode()).hexdigest()[:12]
        return self.runtime_root / f"{self.name}-{digest}"

    @property
    def data_dir(self) -> Path:
        return self.runtime_dir / "data"

    @property
    def socket_dir(self) -> Path | None:
        """Where the Unix socket is, or None when its path would be too long for the kernel
        (a deep home): clients then use TCP, which is all we use anyway."""
        run = self.runtime_dir / "run"
        if len(str(run / f".s.PGSQL.{self._port or 65535}").encode()) > SUN_PATH_MAX:
            return None
        if "," in str(run) or "'" in str(run):  # a list separator / quote in the setting
            return None
        return run

    @property
    def log_file(self) -> Path:
        return self.dir / "postgres.log"

    def log_files(self) -> list[Path]:
        files = [self.log_file, self.dir / "initdb.log"]
        return [f for f in files if f.exists()]

    @property
    def credentials_file(self) -> Path:
        return self.dir / "credentials.json"

    @property
    def credentials(self) -> Credentials:
        """The superuser and its password (``repr`` masks the password)."""
        if self._credentials is None:
            data = read_json(self.credentials_file)
            if data is None:
                raise NotRunningError(
                    f"PostgreSQL {self.name!r} has no credentials in {self.dir}: call up() first"
                )
            self._credentials = Credentials(user=data["user"], password=data["password"])
        return self._credentials

    def _dsn(self, database: str, password: str) -> str:
        user = urllib.parse.quote(self.credentials.user, safe="")
        return f"postgresql://{user}:{password}@127.0.0.1:{self.port}/{database}"

    @property
    def dsn(self) -> str:
        """libpq URL of the ``postgres`` database, with the password: for code, never printing."""
        return self._dsn("postgres", urllib.parse.quote(self.credentials.password, safe=""))

    @property
    def display_dsn(self) -> str:
        """The same URL with the password masked: safe to print and log."""
        return self._dsn("postgres", "***")

    # ------------------------------------------------------------------ binaries

    def _bin_dir(self) -> Path:
        """The newest installed version's ``bin`` (or the one an attached server runs)."""
        if self._bin is not None:
            return self._bin
        versions = []
        for entry in self.pg_root.glob("*/bin"):
            parts = entry.parent.name.split(".")
            if all(p.isdigit() for p in parts) and all(
                (entry / tool).exists() for tool in ("initdb", "postgres", "psql")
            ):
                versions.append((tuple(int(p) for p in parts), entry))
        if not versions:
            raise PackageMissingError(
                f"PostgreSQL is not installed: no {self.pg_root}/<version>/bin/initdb. "
                f"Install the Debian package postgresql ({INSTALL_HINT})."
            )
        self._bin = max(versions)[1]
        return self._bin

    def _env(self, **extra: str) -> dict[str, str]:
        return {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "LANG": "C.UTF-8",
            _proc.MARKER: str(self.dir),
            **extra,
        }

    # ------------------------------------------------------------------ processes

    def _pid(self) -> int | None:
        state = self._read_state()
        pid = None if state is None else state.get("pid")
        return int(pid) if pid is not None else None

    def is_running(self) -> bool:
        pid = self._pid()
        return pid is not None and _proc.is_ours(pid, self.dir)

    def pids(self) -> list[int]:
        """Every live process of this server: what carries our marker (the postmaster,
        ``initdb``) and every ``postgres`` process working in our data directory."""
        found = set(_proc.find_marked(self.dir))
        data = str(self.data_dir)
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cwd = os.readlink(entry / "cwd")
                exe = os.readlink(entry / "exe")
            except OSError:
                continue
            inside = cwd == data or cwd.startswith(data + os.sep)
            is_postgres = Path(exe).name.split(" ")[0] == "postgres"  # "postgres (deleted)"
            if inside and is_postgres and _proc.is_alive(int(entry.name)):
                found.add(int(entry.name))
        return sorted(found)

    def _check_installed(self) -> None:
        self._bin_dir()
        RunAs.for_current_user()

    def _any_running(self) -> bool:
        return self.is_running()

    def _prepare(self) -> None:
        """A fresh state directory, a new password; ``start_timeout`` counts from here."""
        self._deadline = time.monotonic() + self.start_timeout
        bin_dir = self._bin_dir()
        if self._port is None:
            base = allocate_base(self.home, self.name, {PORT_OFFSET: "PostgreSQL"})
            self._port = base + PORT_OFFSET
        check_free({self.port: "PostgreSQL"})
        self._fresh_dir()
        creds = Credentials(user=SUPERUSER, password=secrets.token_urlsafe(24))
        self._credentials = creds
        write_secret(self.credentials_file, json.dumps(attrs.asdict(creds)) + "\n")
        # For psql (create_database) and for people: PGPASSFILE=<this> psql -h 127.0.0.1 ...
        escaped = creds.password.replace("\\", "\\\\").replace(":", "\\:")
        write_secret(self.dir / "pgpass", f"127.0.0.1:{self.port}:*:{creds.user}:{escaped}\n")
        self._write_state({
            "port": self.port,
            "base_port": self.port - PORT_OFFSET,
            "pid": None,
            "bin_dir": str(bin_dir),
            "version": bin_dir.parent.name,
            "user": SYSTEM_USER if RunAs.for_current_user().uid is not None else None,
            "runtime_dir": str(self.runtime_dir),
        })

    def _boot(self) -> None:
        """New data (``initdb``), our config lines, then the postmaster."""
        run_as = RunAs.for_current_user()
        self._make_runtime(run_as)
        for sub in (self.runtime_dir / "run", self.data_dir):
            sub.mkdir(mode=0o700)
            run_as.own(sub)
        self._initdb(self._bin_dir(), run_as, self.credentials, self._deadline)
        self._write_config()
        self._postmaster(run_as)

    def start(self) -> Self:
        """Boot again on the data an earlier ``up()`` made, after ``kill()`` or ``down()``:
        same port, password and databases. What was committed before a kill must be there."""
        if self.is_running():
            raise AlreadyRunningError(self._already_running())
        if not (self.data_dir / "PG_VERSION").exists():
            raise NotRunningError(f"PostgreSQL has no data in {self.data_dir}: call up() first")
        if self._port is None:  # a new object after down(): the port is in our config lines
            ports = re.findall(r"^port = (\d+)$", (self.data_dir / "postgresql.conf").read_text(),
                               flags=re.MULTILINE)
            self._port = int(ports[-1])
        bin_dir = self._bin_dir()
        run_as = RunAs.for_current_user()
        self._deadline = time.monotonic() + self.start_timeout
        check_free({self.port: "PostgreSQL"})
        state: dict[str, Any] = self._read_state() or {
            "port": self.port,
            "base_port": self.port - PORT_OFFSET,
            "bin_dir": str(bin_dir),
            "version": bin_dir.parent.name,
            "user": SYSTEM_USER if run_as.uid is not None else None,
        }
        state["pid"] = None
        self._write_state(state)
        with self._starting():
            run_as.check_way_to(self.data_dir)
            self._postmaster(run_as)
        return self

    def _make_runtime(self, run_as: RunAs) -> None:
        """As root: a fresh runtime directory the ``postgres`` user can reach, made without
        changing any existing directory; the runtime directories of state directories that
        are gone are removed on the way."""
        runtime = self.runtime_dir
        if runtime == self.dir:
            return
        run_as.check_way_to(runtime)
        missing = [p for p in reversed(runtime.parents) if not p.exists()]
        for parent in missing:
            with contextlib.suppress(FileExistsError):  # another up() made it meanwhile
                parent.mkdir(mode=RUNTIME_MODE)
                parent.chmod(RUNTIME_MODE)  # mkdir's mode passes through the umask
        if runtime.exists():
            shutil.rmtree(runtime)
        runtime.mkdir(mode=RUNTIME_MODE)
        runtime.chmod(RUNTIME_MODE)
        (runtime / OWNER_FILE).write_text(str(self.dir) + "\n")
        self._prune_orphans()

    def _prune_orphans(self) -> None:
        """Remove the runtime directories whose state directory no longer exists and in
        which no process works."""
        busy = {cwd for cwd in _process_cwds() if cwd.startswith(str(self.runtime_root) + "/")}
        for entry in self.runtime_root.iterdir():
            try:
                owner = (entry / OWNER_FILE).read_text().strip()
            except OSError:
                continue  # not one of ours, or being made
            inside = str(entry) + "/"
            if owner and not Path(owner).exists() and not any(
                    cwd.startswith(inside) for cwd in busy):
                shutil.rmtree(entry, ignore_errors=True)

    def _initdb(self, bin_dir: Path, run_as: RunAs, creds: Credentials, deadline: float) -> None:
        log = self.dir / "initdb.log"
        # initdb reads the password from a file: one only its user can read, gone afterwards.
        pwfile = self.runtime_dir / "initdb.pw"
        write_secret(pwfile, creds.password + "\n")
        run_as.own(pwfile)
        argv = [
            *run_as.prefix,
            str(bin_dir / "initdb"),
            f"--pgdata={self.data_dir}",
            f"--username={creds.user}",
            f"--pwfile={pwfile}",
            "--auth=scram-sha-256",
            "--encoding=UTF8",
            "--locale=C",
            "--no-instructions",
        ]
        try:
            with open(log, "ab") as out:
                done = subprocess.run(
                    argv,
                    env=self._env(),
                    cwd=self.dir,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=max(deadline - time.monotonic(), 0.1),
                    start_new_session=True,
                    check=False,
                )
        except subprocess.TimeoutExpired:
            raise StartTimeoutError(
                f"initdb did not finish within {self.start_timeout:g} s; read {log}"
            ) from None
        finally:
            pwfile.unlink(missing_ok=True)
        if done.returncode != 0:
            raise CommandError(f"initdb failed (exit {done.returncode}); read {log}:\n{tail(log)}")

    def _write_config(self) -> None:
        socket_dir = self.socket_dir
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{socket_dir or ''}'",
            "unix_socket_permissions": "0700",
            "max_connections": "100",
            "shared_buffers": "32MB",
            # Data safety first: a dedup store that loses a commit on a crash is no store.
            "fsync": "on",
            "synchronous_commit": "on",
            "full_page_writes": "on",
            "password_encryption": "'scram-sha-256'",
            "cluster_name": f"'sac-{self.name}'",
            "huge_pages": "off",
            "timezone": "'UTC'",
            "log_timezone": "'UTC'",
            "log_destination": "'stderr'",
            "logging_collector": "off",
            "log_line_prefix": "'%m [%p] %q%u@%d '",
            "log_statement": "'none'",
        }
        lines = ["", "# Added by sac (sac.server.postgres); later lines win over initdb's above."]
        lines += [f"{key} = {value}" for key, value in settings.items()]
        with open(self.data_dir / "postgresql.conf", "a") as conf:
            conf.write("\n".join(lines) + "\n")

    def _postmaster(self, run_as: RunAs) -> None:
        argv = [*run_as.prefix, str(self._bin_dir() / "postgres"), "-D", str(self.data_dir)]
        pid = _proc.spawn(argv, self._env(), self.log_file, self.dir)
        state = self._read_state() or {}
        state["pid"] = pid
        self._write_state(state)
        self._wait_ready(pid, self._deadline)

    def _wait_ready(self, pid: int, deadline: float) -> None:
        answer = None
        while True:
            if not _proc.is_alive(pid):
                log = self.log_file
                raise ServerExitedError(
                    f"PostgreSQL exited while starting; read {log}:\n{tail(log)}"
                )
            answer = startup_answer(self.port)
            if answer == "ready":
                return
            if time.monotonic() >= deadline:
                raise StartTimeoutError(
                    f"PostgreSQL did not accept connections on 127.0.0.1:{self.port} within "
                    f"{self.start_timeout:g} s (last answer: {answer}); read {self.log_file}"
                )
            time.sleep(0.05)

    def _teardown(self) -> list[int]:
        """Stop every process of this server; return the pids that were running."""
        pids = self.pids()
        postmaster = self._pid()
        if postmaster is not None and postmaster in pids:
            # SIGINT is PostgreSQL's fast shutdown: clients are disconnected, a checkpoint is
            # written. SIGTERM (smart shutdown) would wait for every client to hang up first.
            with contextlib.suppress(ProcessLookupError):
                os.kill(postmaster, signal.SIGINT)
            _proc.wait_dead([postmaster], SHUTDOWN_GRACE)
        _proc.terminate([p for p in pids if _proc.is_alive(p)], grace=5.0)
        left = self.pids()
        if left:  # not group leaders (initdb's children): signal them one by one
            self._kill_each(left)
            left = self.pids()
        if left:
            raise ServerError(f"PostgreSQL processes {left} survived SIGKILL")
        self._forget_state()
        return pids

    @staticmethod
    def _kill_each(pids: list[int]) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _proc.wait_dead(pids, 5.0)

    def down(self) -> None:
        """Fast shutdown (clients cut off, checkpoint written); data and logs stay for reading."""
        super().down()

    def kill(self) -> None:
        """SIGKILL the postmaster and every child at once, as a crash would: ``start()`` then
        runs crash recovery. Children go too, else they would hold the old shared memory and
        the next postmaster would refuse to start."""
        pid = self._pid()
        if pid is None or not _proc.is_ours(pid, self.dir):
            raise NotRunningError(f"PostgreSQL in {self.dir} is not running")
        self._kill_each(self.pids())

    def status(self) -> dict[str, Any]:
        state = self._read_state() or {}
        running = self.is_running()
        return {
            "name": self.name,
            "dir": str(self.dir),
            "port": self._port,
            "pid": self._pid(),
            "running": running,
            "accepting": running and startup_answer(self.port) == "ready",
            "version": state.get("version"),
            "user": state.get("user"),
            "dsn": self.display_dsn if self.credentials_file.exists() and self._port else None,
            "data_dir": str(self.data_dir),
            "socket_dir": str(self.socket_dir) if self.socket_dir else None,
            "log": str(self.log_file),
            "logs": [str(p) for p in self.log_files()],
            "credentials_file": str(self.credentials_file),
        }

    # ------------------------------------------------------------------ databases

    def _psql(self, sql: str) -> str:
        """Run one statement as the superuser over TCP; the password goes through the pgpass
        file, never the command line or the environment."""
        argv = [
            str(self._bin_dir() / "psql"),
            "--no-psqlrc", "--quiet", "--no-align", "--tuples-only",
            "--set=ON_ERROR_STOP=1",
            "--host=127.0.0.1", f"--port={self.port}",
            f"--username={self.credentials.user}", "--dbname=postgres",
            f"--command={sql}",
        ]
        env = self._env(PGPASSFILE=str(self.dir / "pgpass"), PGCONNECT_TIMEOUT="10")
        try:
            done = subprocess.run(
                argv, env=env, cwd=self.dir, capture_output=True, text=True, timeout=60,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise CommandError(f"psql did not answer within 60 s: {sql}") from None
        if done.returncode != 0:
            raise CommandError(f"psql failed on {sql!r}: {done.stderr.strip()[-500:]}")
        return done.stdout.strip()

    def create_database(self, name: str) -> str:
        """Create database ``name`` unless it exists; return its DSN (with the password)."""
        if not DATABASE_RE.match(name):
            raise ValueError(
                f"database name {name!r} is not valid: use 1-63 lower-case letters, digits and "
                "'_', not starting with a digit"
            )
        if not self.is_running():
            raise NotRunningError(f"PostgreSQL in {self.dir} is not running")
        exists = self._psql(f"SELECT 1 FROM pg_database WHERE datname = '{name}'") == "1"
        if not exists:
            try:
                self._psql(f'CREATE DATABASE "{name}"')
            except CommandError as exc:  # created meanwhile by someone else: fine
                if "already exists" not in str(exc):
                    raise
        return self._dsn(name, urllib.parse.quote(self.credentials.password, safe=""))
