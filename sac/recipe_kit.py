"""What the recipes share around the SDK: finding the broker, saying a bad input in one line,
and running a consumer in a process of its own.

A recipe is run from a checkout (``python -m recipes.<name> --help``) against a cluster started
by ``sac server up`` (``--cluster NAME``, default ``sac``) or against any broker (``--url``,
once per node). It exits 0 when it proved what it says, 1 when it did not, 2 on bad input.

A consumer runs in a process of its own, as it would in production, so that stopping it is a
real process's graceful stop (SIGTERM) and a crash is a real process dying. It reports what it
does (role changes, its statistics) as small dicts through a pipe of its own, each with the
host's monotonic clock, which every process of one machine shares.
"""

from __future__ import annotations

import argparse
import multiprocessing
import multiprocessing.connection
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import attrs

from sac.sdk import ConfigurationError, ConnectionSettings, QueueSettings, SacError
from sac.server import LocalCluster, LocalZooKeeper, ServerError

PROVED, NOT_PROVED, BAD_INPUT = 0, 1, 2
"""The exit statuses of every recipe."""

Event = dict[str, Any]


class BadInput(Exception):
    """An input the recipe cannot use: printed as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    """argparse, with a refused argument said in one line (not the usage block), status 2."""

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
    where = parser.add_argument_group("broker (one of)")
    where.add_argument("--cluster", default="sac", metavar="NAME",
                       help="a cluster started by `sac server up --name NAME` (default: sac)")
    where.add_argument("--home", default=None, metavar="DIR",
                       help="its state directory root (default: $SAC_HOME or .sac)")
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

    def remove(self, queue: QueueSettings) -> str:
        """Delete the recipe's queue and its parking queue through the local cluster's
        management API; what was done, in words (with ``--url`` they are left)."""
        names = [queue.name] + ([queue.parking_queue] if queue.parking_queue else [])
        if self.cluster is None:
            return f"left on the broker: queue(s) {', '.join(names)} (delete them when done)"
        existing = {q["name"] for q in self.cluster.management_api("queues/%2F?columns=name")}
        names = [name for name in names if name in existing]
        for name in names:
            quoted = urllib.parse.quote(name, safe="")
            self.cluster.management_api(f"queues/%2F/{quoted}", method="DELETE")
        return f"deleted queue(s) {', '.join(names)}" if names else "no queue to delete"


def find_broker(args: argparse.Namespace) -> Broker:
    """The broker named on the command line; ``BadInput`` when there is none to use."""
    if args.url:
        try:
            ConnectionSettings(urls=args.url)
        except ConfigurationError as exc:
            raise BadInput(f"--url: {exc}") from None
        return Broker(tuple(args.url), None)
    try:
        cluster = LocalCluster.attach(args.cluster, home=args.home)
        return Broker(tuple(cluster.urls()), cluster)
    except ServerError as exc:
        raise BadInput(str(exc)) from None


def add_two_cluster_arguments(parser: argparse.ArgumentParser, first: tuple[str, str, str],
                              second: tuple[str, str, str]) -> None:
    """The options of a recipe that spans two clusters: each cluster's name (option,
    default, help), and the state directory, ZooKeeper and shared inbox they share."""
    where = parser.add_argument_group("servers")
    for option, default, text in (first, second):
        where.add_argument(option, default=default, metavar="NAME", help=text)
    where.add_argument("--home", default=None, metavar="DIR",
                       help="their state directory root (default: $SAC_HOME or .sac)")
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
            print(f"could not delete the queue: {exc}")


def verdict(checks: dict[str, bool], proved: str) -> int:
    """Print each check that failed, or ``proved``; the exit status."""
    for what, ok in checks.items():
        if not ok:
            print(f"NOT PROVED: {what}")
    if all(checks.values()):
        print(f"PROVED: {proved}")
        return PROVED
    return NOT_PROVED


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
