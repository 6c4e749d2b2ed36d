"""The harness the recipes share, installed with sac so that a recipe copied alone into a
project runs there: finding the broker (a local cluster by name, or any broker by URL) and
checking it answers, saying bad input in one line, running a consumer in a process of its
own, a steady publisher, the recipes' effects database, and printing the verdict.

A recipe (``recipes/*.py`` in the repository) is the pattern it teaches, near its top, and a
proof below that drives the pattern through this kit. It is run as ``python recipes/NAME.py``
against a cluster started by ``sac server up`` (``--cluster NAME``, default ``sac``) or any
broker (``--url``, once per node), and exits 0 when it proved what it says, 1 when it did not,
2 on bad input (one line on stderr: no such cluster, a broker that refuses the password or
does not answer, an option out of range).

A consumer runs in a process of its own, as it would in production, so that stopping it is a
real process's graceful stop (SIGTERM) and a crash is a real process dying. It reports what it
does (role changes, its statistics) as small dicts through a pipe of its own, each with the
host's monotonic clock, which every process of one machine shares.

This module is for the recipes and for scripts written like them; applications use
``sac.sdk`` alone.
"""

from __future__ import annotations

import argparse
import multiprocessing
import multiprocessing.connection
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, NoReturn

import attrs

from sac.sdk import (
    AuthenticationError,
    ConfigurationError,
    ConnectError,
    ConnectionSettings,
    Management,
    PostgresStore,
    Publisher,
    PublisherSettings,
    QueueNotFound,
    QueueSettings,
    SacError,
    SQLiteStore,
    Store,
)
from sac.server import HOME_HELP, LocalCluster, LocalZooKeeper, ServerError

__all__ = [
    "BAD_INPUT",
    "EXIT_STATUSES",
    "NOT_PROVED",
    "PROVED",
    "BadInput",
    "Broker",
    "ConsumerProcess",
    "Database",
    "Parser",
    "Reporter",
    "Side",
    "SteadyPublisher",
    "add_broker_arguments",
    "add_two_cluster_arguments",
    "attach",
    "attempt",
    "find_broker",
    "find_sides",
    "find_zookeeper",
    "poll",
    "positive",
    "run",
    "sample",
    "verdict",
]

PROVED, NOT_PROVED, BAD_INPUT = 0, 1, 2
"""The exit statuses of every recipe."""

Event = dict[str, Any]


class BadInput(Exception):
    """An input the recipe cannot use: printed as one line, exit status 2."""


EXIT_STATUSES = "exit status: 0 proved, 1 not proved, 2 bad input (one line on stderr)"


class Parser(argparse.ArgumentParser):
    """argparse, with a refused argument said in one line (not the usage block), status 2,
    and the exit statuses under ``--help``. ``--help`` prints and exits 0 before a recipe
    touches any server."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("epilog", EXIT_STATUSES)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(BAD_INPUT, f"{self.prog}: error: {message}\n")


def positive(kind: Callable[[str], int | float]) -> Callable[[str], Any]:
    """An argparse type: a number above zero."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be above zero, not {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its message
    return parse


def add_broker_arguments(parser: argparse.ArgumentParser) -> None:
    """``--cluster NAME`` and ``--home DIR`` (a local cluster), or ``--url`` once per node
    (any broker): what ``find_broker`` reads."""
    where = parser.add_argument_group("broker (one of)")
    where.add_argument("--cluster", default="sac", metavar="NAME",
                       help="a cluster started by `sac server up --name NAME` (default: sac)")
    where.add_argument("--home", default=None, metavar="DIR",
                       help=HOME_HELP)
    where.add_argument("--url", action="append", default=[], metavar="AMQP_URL",
                       help="any broker instead: amqp://user:password@host:port/vhost, "
                       "repeated once per node")


@attrs.frozen
class Broker:
    """Where the recipe's clients connect, and how to tidy up afterwards."""

    urls: tuple[str, ...]
    cluster: LocalCluster | None
    """The local cluster found by name, or None for ``--url`` (no management API known)."""

    @property
    def description(self) -> str:
        shown = ", ".join(ConnectionSettings(urls=self.urls).display_urls())
        if self.cluster is None:
            return shown
        return f"cluster {self.cluster.name!r} ({len(self.urls)} nodes): {shown}"

    def connection(self, name: str, first: int = 0) -> ConnectionSettings:
        """Settings for one client (named in the management UI), starting at node ``first``
        so that the clients spread over the nodes."""
        urls = self.urls[first % len(self.urls):] + self.urls[:first % len(self.urls)]
        return ConnectionSettings(urls=urls, name=name)

    def check(self) -> None:
        """Connect once, before anything is declared: a password the broker refuses or a
        broker that does not answer is bad input (``BadInput``), said before the run
        starts rather than as a failed proof with queues to tidy up."""
        try:
            with Publisher(PublisherSettings(self.connection("sac-recipe-check"))):
                pass
        except AuthenticationError as exc:
            raise BadInput(f"the broker refused the login: {exc}") from None
        except ConnectError as exc:
            raise BadInput(f"no broker answers: {exc}") from None

    def exists(self, name: str) -> bool:
        """Whether queue ``name`` is on the broker (a passive declare: nothing is made)."""
        probe = QueueSettings(name, declare=False, parking_queue=None)
        try:
            with Publisher(PublisherSettings(self.connection("sac-recipe-tidy"), queue=probe)):
                return True
        except QueueNotFound:
            return False

    def remove(self, queue: QueueSettings) -> str:
        """Delete the recipe's queue and its parking queue (through the local cluster's
        management API); what was done, in words. With ``--url`` no management API is
        known: those of them that exist are named as left on the broker, and only those."""
        names = [queue.name] + ([queue.parking_queue] if queue.parking_queue else [])
        if self.cluster is None:
            left = [name for name in names if self.exists(name)]
            if not left:
                return "no queue to delete"
            return f"left on the broker: queue(s) {', '.join(left)} (delete them when done)"
        api = self.cluster.management()
        existing = {q.name for q in api.queues("/")}
        names = [name for name in names if name in existing]
        for name in names:
            api.delete_queue(name, if_empty=False)
        return f"deleted queue(s) {', '.join(names)}" if names else "no queue to delete"


def find_broker(args: argparse.Namespace) -> Broker:
    """The broker ``add_broker_arguments`` named, checked to answer; ``BadInput`` when there
    is none to use."""
    if args.url:
        try:
            ConnectionSettings(urls=args.url)
        except ConfigurationError as exc:
            raise BadInput(f"--url: {exc}") from None
        broker = Broker(tuple(args.url), None)
    else:
        cluster = attach(args.cluster, args.home)
        broker = Broker(tuple(cluster.urls()), cluster)
    broker.check()
    return broker


def attach(name: str, home: str | None) -> LocalCluster:
    """The local cluster ``name`` (from ``sac server up --name NAME``); ``BadInput`` when it
    is not running."""
    try:
        return LocalCluster.attach(name, home=home)
    except ServerError as exc:
        raise BadInput(str(exc)) from None


@attrs.frozen
class Side:
    """One of the two local clusters of a recipe that spans two: its clients' broker and its
    management API."""

    label: str
    cluster: LocalCluster

    @property
    def broker(self) -> Broker:
        return Broker(tuple(self.cluster.urls()), self.cluster)

    def management(self) -> Management:
        return self.cluster.management()


def find_sides(args: argparse.Namespace, first: tuple[str, str],
               second: tuple[str, str]) -> tuple[Side, Side]:
    """The two clusters ``add_two_cluster_arguments`` named, as (label, option attribute)
    pairs; each checked to answer (``BadInput`` otherwise)."""
    sides = tuple(Side(label, attach(getattr(args, option), args.home))
                  for label, option in (first, second))
    for side in sides:
        side.broker.check()
    return sides[0], sides[1]


def add_two_cluster_arguments(parser: argparse.ArgumentParser, first: tuple[str, str, str],
                              second: tuple[str, str, str]) -> None:
    """The options of a recipe that spans two clusters: each cluster's name (option,
    default, help), and the state directory, ZooKeeper and shared inbox they share."""
    where = parser.add_argument_group("servers")
    for option, default, text in (first, second):
        where.add_argument(option, default=default, metavar="NAME", help=text)
    where.add_argument("--home", default=None, metavar="DIR",
                       help=HOME_HELP)
    where.add_argument("--zookeeper", default=None, metavar="HOSTS",
                       help="ZooKeeper's connection string (default: the one started with "
                       "either cluster by `sac server up --zookeeper`)")
    where.add_argument("--dsn", default=None, metavar="POSTGRESQL_DSN",
                       help="the shared inbox on PostgreSQL (default: a SQLite file)")


def find_zookeeper(given: str | None, clusters: Sequence[LocalCluster]) -> str:
    """``given`` (``--zookeeper``), or the one a cluster was started with (the first that
    runs); ``BadInput`` when none."""
    if given:
        return given
    for cluster in clusters:
        if cluster.spec.zookeeper:
            zk: LocalZooKeeper = cluster.zookeeper()
            if zk.is_running():
                return zk.hosts
    raise BadInput(f"no ZooKeeper: give --zookeeper HOSTS, or start cluster "
                   f"{clusters[0].name!r} with `sac server up --zookeeper`")


def run(main: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None = None) -> int:
    """``main``'s exit status; a ``BadInput`` (or Ctrl-C) said in one line."""
    try:
        return main(argv)
    except BadInput as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr, flush=True)
        return BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        return NOT_PROVED


def attempt(broker: Broker, queue: QueueSettings, body: Callable[[], int]) -> int:
    """``body()``'s exit status: an SDK error or a wait that ran out is said in one line and
    not proved; the recipe's queue is removed afterwards in any case."""
    try:
        return body()
    except (SacError, TimeoutError) as exc:
        print(f"FAILED: {type(exc).__name__}: {exc}")
        return NOT_PROVED
    finally:
        try:
            print(broker.remove(queue))
        except Exception as exc:  # noqa: BLE001 - tidying up must not hide the verdict
            print(f"could not tidy up queue {queue.name}: {' '.join(str(exc).split())}")


def verdict(checks: dict[str, bool], proved: str) -> int:
    """Print each check that failed, or ``proved``; the exit status."""
    for what, ok in checks.items():
        if not ok:
            print(f"NOT PROVED: {what}")
    if all(checks.values()):
        print(f"PROVED: {proved}")
        return PROVED
    return NOT_PROVED


def sample(ids: Sequence[str]) -> str:
    """A few of ``ids``, to print after their count."""
    return f" (e.g. {', '.join(ids[:5])})" if ids else ""


def poll(condition: Callable[[], bool], timeout: float, every: float = 0.05) -> bool:
    """Until ``condition()`` holds (checked every ``every`` s) or ``timeout``; whether it
    held. For what nothing signals, such as rows appearing in a database."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(every)
    return True


# --------------------------------------------------------------------------- processes


class Reporter:
    """The child's end of its pipe: ``say`` may be called from any of its threads."""

    def __init__(self, name: str, pipe: multiprocessing.connection.Connection) -> None:
        self.name = name
        self._pipe = pipe
        self._lock = threading.Lock()

    def say(self, event: str, **fields: Any) -> None:
        with self._lock:
            self._pipe.send({"event": event, "t": time.monotonic(), **fields})


def _child(target: Callable[..., None], name: str,
           pipe: multiprocessing.connection.Connection, args: tuple[Any, ...]) -> None:
    target(Reporter(name, pipe), *args)


class ConsumerProcess:
    """``target(reporter, *args)`` in a process of its own (``spawn``: a fresh interpreter,
    nothing inherited but the arguments), with what it says collected here.

    Waits are on a condition with a deadline; a process that ends ends every wait on it."""

    def __init__(self, name: str, target: Callable[..., None], *args: Any) -> None:
        context = multiprocessing.get_context("spawn")
        receiving, sending = context.Pipe(duplex=False)
        self.name = name
        self.events: list[Event] = []
        self._cond = threading.Condition()
        self._ended = False
        self.process = context.Process(target=_child, args=(target, name, sending, args),
                                       name=name, daemon=True)
        self.process.start()
        sending.close()  # the child's copy is the only writer left: EOF when it ends
        self._reader = threading.Thread(target=self._read, args=(receiving,),
                                        name=f"recipe-{name}", daemon=True)
        self._reader.start()

    def _read(self, pipe: multiprocessing.connection.Connection) -> None:
        try:
            while True:
                event = pipe.recv()
                with self._cond:
                    self.events.append(event)
                    self._cond.notify_all()
        except (EOFError, OSError):
            pass  # the process ended (a crash may cut its last message short)
        finally:
            pipe.close()
            with self._cond:
                self._ended = True
                self._cond.notify_all()

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def wait(self, event: str, timeout: float, **fields: Any) -> Event:
        """The first event ``event`` with these ``fields``, waiting up to ``timeout``;
        ``TimeoutError`` naming it when it does not come (or the process ended)."""

        def found() -> Event | None:
            return next((e for e in self.events if e["event"] == event
                         and all(e.get(k) == v for k, v in fields.items())), None)

        with self._cond:
            self._cond.wait_for(lambda: found() is not None or self._ended, timeout)
            seen = found()
        if seen is None:
            what = " ".join([event, *(f"{k}={v}" for k, v in fields.items())])
            ended = "" if self.process.is_alive() else f" (it exited with {self.exitcode})"
            raise TimeoutError(f"{self.name}: no {what} within {timeout:g} s{ended}")
        return seen

    def stop(self, timeout: float) -> int | None:
        """Graceful: SIGTERM (the SDK consumer finishes its handler, acks, cancels), then
        SIGKILL if it has not ended within ``timeout``. Its exit status."""
        if self.process.is_alive():
            self.process.terminate()
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(10)
        return self.exitcode

    def join(self, timeout: float) -> int | None:
        self.process.join(timeout)
        return self.exitcode

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(10)

    @property
    def exitcode(self) -> int | None:
        return self.process.exitcode


# --------------------------------------------------------------------------- the publisher


class SteadyPublisher:
    """Publishes ``count`` messages at ``rate`` a second from a thread of its own (ids
    ``<prefix>000001``...), each confirmed by the broker before it counts. With
    ``hold_at=N`` it stops after N messages until ``release()``: what comes after a step
    of the run (a consumer stopped) is then published after it, whatever the timing."""

    def __init__(self, settings: PublisherSettings, rate: float, count: int,
                 prefix: str = "m", hold_at: int | None = None) -> None:
        self.rate = rate
        self.count = count
        self.prefix = prefix
        self.hold_at = hold_at
        self.confirmed: list[str] = []
        self.failed: list[str] = []
        self._publisher = Publisher(settings)
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._released = threading.Event()
        self._thread = threading.Thread(target=self._publish, name="recipe-publisher",
                                        daemon=True)

    def connect(self) -> None:
        """Connect and declare the queue, without publishing yet."""
        self._publisher.start()

    def start(self) -> None:
        self._thread.start()

    def _publish(self) -> None:
        began = time.monotonic()
        for seq in range(1, self.count + 1):
            if self.hold_at is not None and seq - 1 == self.hold_at:
                self._released.wait()
                began = time.monotonic() - self.hold_at / self.rate
            if self._stop.wait(max(0.0, began + seq / self.rate - time.monotonic())):
                return
            future = self._publisher.send(f"message {seq}".encode(),
                                          message_id=f"{self.prefix}{seq:06d}")
            future.add_done_callback(self._settled)

    def _settled(self, future: Future[str]) -> None:
        with self._cond:
            if future.exception() is None:
                self.confirmed.append(future.result())
            else:
                self.failed.append(repr(future.exception()))
            self._cond.notify_all()

    def wait_confirmed(self, n: int, timeout: float) -> bool:
        with self._cond:
            self._cond.wait_for(lambda: len(self.confirmed) >= n or bool(self.failed),
                                timeout)
            return len(self.confirmed) >= n and not self.failed

    def release(self) -> None:
        """Publish the rest, after ``hold_at``."""
        self._released.set()

    def finish(self, timeout: float) -> None:
        """Until the last message is sent and every confirm is in (or ``timeout``)."""
        self._thread.join(timeout)
        self.close(timeout)

    def close(self, timeout: float) -> None:
        """Stop sending; wait up to ``timeout`` for the confirms of what was sent."""
        self._stop.set()
        self._released.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._publisher.close(timeout=timeout)


# --------------------------------------------------------------------------- the database


@attrs.frozen
class Database:
    """The dedup store's database, which also holds a recipe's effects: a SQLite file or a
    PostgreSQL DSN. An effects table has no unique key, so that an effect made twice shows
    as two rows."""

    dsn: str | None = None
    path: str | None = None

    def store(self) -> Store:
        return PostgresStore(self.dsn) if self.dsn else SQLiteStore(str(self.path))

    def describe(self) -> str:
        if not self.dsn:
            return f"SQLite file {self.path}"
        from psycopg.conninfo import conninfo_to_dict

        try:
            info = conninfo_to_dict(self.dsn)
        except Exception:  # noqa: BLE001 - create() says what is wrong with it
            return "PostgreSQL (--dsn)"
        return (f"PostgreSQL database {info.get('dbname', '?')} on "
                f"{info.get('host', 'localhost')}:{info.get('port', 5432)}")

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """One statement (``?`` placeholders) in a transaction of its own."""
        if self.dsn:
            import psycopg

            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as pg:
                cursor = pg.execute(sql.replace("?", "%s"), params)
                return cursor.fetchall() if cursor.description else []
        db = sqlite3.connect(str(self.path), timeout=30.0)
        try:
            with db:
                return db.execute(sql, params).fetchall()
        finally:
            db.close()

    def create(self, table: str, columns: str) -> None:
        """The effects table (``columns`` as SQL, the same for both databases); ``BadInput``
        when the database cannot be used."""
        try:
            self.query(f"CREATE TABLE IF NOT EXISTS {table} ({columns})")
        except ImportError:
            raise BadInput("--dsn needs psycopg: pip install 'sac[postgres]'") from None
        except Exception as exc:  # noqa: BLE001 - any driver's refusal, said in one line
            raise BadInput(f"cannot use {self.describe()}: {exc}".strip()) from None
