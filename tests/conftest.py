"""Real servers for the whole run: 3-node RabbitMQ clusters (4.0, the default, and 3.10 for the
tests that ask for it), one ZooKeeper, one PostgreSQL, one Spark standalone cluster.

A test reaches RabbitMQ through ``cluster``: the session cluster of the series the test runs
on, 4.0 unless the test is marked ``@pytest.mark.rabbitmq("3.10")`` (3.10 only: classic
mirrored queues, 3.10's model) or ``@pytest.mark.rabbitmq("4.0", "3.10")`` (once on each: the
core promises). A 3.10 cluster is started only if some selected test needs it.

Started once per session with readiness probes (AMQP header, management API membership,
ZooKeeper ``ruok``, PostgreSQL asking a startup packet for its password, the Spark master's JSON
listing its worker ALIVE). A server that cannot start makes the tests that need it error out:
never skip. When a test fails, the tail of every server log is attached to its report.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest

from sac.chaos.proxy import ProxyThread
from sac.server import LocalCluster, LocalPostgres, LocalServer, LocalSpark, LocalZooKeeper

LOG_TAIL_LINES = 40
_servers_key = pytest.StashKey[list[LocalServer]]()
_stopping_key = pytest.StashKey[ThreadPoolExecutor]()
_stops_key = pytest.StashKey[list[Future[None]]]()
ServerT = TypeVar("ServerT", bound=LocalServer)


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_servers_key] = []
    config.stash[_stops_key] = []


@pytest.fixture(scope="session", autouse=True)
def _servers_stop_side_by_side(pytestconfig: pytest.Config) -> Iterator[None]:
    """The session's servers stop together at the end, not one after another: each stop is
    mostly a wait for a graceful shutdown (RabbitMQ nodes take seconds), so in a row they
    added up to some 20 s. Set up before any server fixture, so torn down after all of them:
    their teardowns hand the stop to this pool, which waits for every stop and raises the
    first failure."""
    with ThreadPoolExecutor(max_workers=16, thread_name_prefix="server-stop") as pool:
        pytestconfig.stash[_stopping_key] = pool
        yield
    for stop in pytestconfig.stash[_stops_key]:
        stop.result()


def _served(config: pytest.Config, local: ServerT) -> Iterator[ServerT]:
    """``local`` up for the session, its log tails attached to failed tests' reports, and
    stopped side by side with the others (``_servers_stop_side_by_side``)."""
    config.stash[_servers_key].append(local)
    local.up()
    try:
        yield local
    finally:
        config.stash[_stops_key].append(
            config.stash[_stopping_key].submit(local.__exit__, None, None, None))


@pytest.fixture(scope="session")
def sac_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where this run's servers keep their state (pytest keeps the last runs for reading)."""
    return tmp_path_factory.mktemp("sac-home")


SERIES_FIXTURES = {"4.0": "cluster4", "3.10": "cluster310"}
"""The session cluster that runs each RabbitMQ series."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test marked ``rabbitmq(...)`` runs once on each series the marker names."""
    marker = metafunc.definition.get_closest_marker("rabbitmq")
    if marker is None or "rabbitmq" not in metafunc.fixturenames:
        return
    unknown = [s for s in marker.args if s not in SERIES_FIXTURES]
    if not marker.args or unknown:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: rabbitmq() takes series out of "
                                f"{sorted(SERIES_FIXTURES)}, not {list(marker.args)}")
    metafunc.parametrize("rabbitmq", marker.args)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``rabbitmq(..., narrow={param: value})``: on any series but the first, only the
    variants whose parameters match run (the rest are deselected, and counted as such). Why:
    what the other faces and stores do is proven on the first series; the second proves the
    broker's part, which one variant shows, and `make test` has a time budget."""
    keep, dropped = [], []
    for item in items:
        marker = item.get_closest_marker("rabbitmq")
        callspec = getattr(item, "callspec", None)
        narrow = marker.kwargs.get("narrow") if marker is not None else None
        if narrow and callspec is not None and \
                callspec.params.get("rabbitmq", marker.args[0]) != marker.args[0] and \
                any(callspec.params.get(k) != v for k, v in narrow.items()):
            dropped.append(item)
        else:
            keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture
def rabbitmq() -> str:
    """The RabbitMQ series a test runs on: 4.0 unless its ``rabbitmq`` marker says otherwise."""
    return "4.0"


@pytest.fixture
def cluster(rabbitmq: str, request: pytest.FixtureRequest) -> LocalCluster:
    """The 3-node session cluster of the test's series."""
    local: LocalCluster = request.getfixturevalue(SERIES_FIXTURES[rabbitmq])
    return local


BOOTED_AHEAD: dict[str, Callable[[Path], LocalServer]] = {
    "cluster4": lambda home: LocalCluster(name=f"test4-{os.getpid()}", nodes=3, home=home,
                                          rabbitmq="4.0"),
    "cluster310": lambda home: LocalCluster(name=f"test-{os.getpid()}", nodes=3, home=home,
                                            rabbitmq="3.10"),
    "spark_standalone": lambda home: LocalSpark(name=f"spark-{os.getpid()}", home=home,
                                                worker_cores=1),
}
"""The session servers booted ahead (``_servers_booted_ahead``): the slow boots that the
first tests needing them would otherwise wait for, in the order the test paths need them."""


def _booted_ahead_needed(items: list[pytest.Item]) -> list[str]:
    """The ``BOOTED_AHEAD`` fixtures some of ``items`` use (``cluster`` by its series)."""
    needed: set[str] = set()
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if "cluster" in names:
            callspec = getattr(item, "callspec", None)
            series = callspec.params.get("rabbitmq", "4.0") if callspec is not None else "4.0"
            names.add(SERIES_FIXTURES[series])
        needed |= names & BOOTED_AHEAD.keys()
    return [name for name in BOOTED_AHEAD if name in needed]


class _BootedAhead:
    """Session servers booted one after the other in a thread of their own (see
    ``_servers_booted_ahead``), by fixture name."""

    def __init__(self, config: pytest.Config, home: Path, booting: ThreadPoolExecutor) -> None:
        self.config, self.home, self.booting = config, home, booting
        self.boots: dict[str, tuple[LocalServer, Future[LocalServer]]] = {}

    def start(self, fixture: str) -> None:
        if fixture not in self.boots:
            local = BOOTED_AHEAD[fixture](self.home)
            self.config.stash[_servers_key].append(local)
            self.boots[fixture] = (local, self.booting.submit(local.up))

    def served(self, fixture: str, kind: type[ServerT]) -> ServerT:
        """The server, once it serves (booted now if no selected test declared it); its
        boot's error fails the tests that need it."""
        self.start(fixture)
        local, booted = self.boots[fixture]
        booted.result()
        assert isinstance(local, kind)
        return local

    def stop_all(self) -> None:
        """Each server stopped side by side with the others, once its boot is over (``up()``
        stops what it started when it fails)."""
        for local, booted in self.boots.values():
            with contextlib.suppress(Exception):
                booted.result()
            self.config.stash[_stops_key].append(
                self.config.stash[_stopping_key].submit(local.__exit__, None, None, None))


@pytest.fixture(scope="session", autouse=True)
def _servers_booted_ahead(
    request: pytest.FixtureRequest, sac_home: Path, pytestconfig: pytest.Config,
    _servers_stop_side_by_side: None,
) -> Iterator[_BootedAhead]:
    """The ``BOOTED_AHEAD`` servers the selected tests use start booting at the first test,
    one after the other in a thread, while the tests that need no server run (about a minute
    of them, mostly on one core): each boot is some 10-30 s that the first test needing the
    server no longer waits for. A server booted that no test came to ask for is stopped all
    the same."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="server-boot") as booting:
        ahead = _BootedAhead(pytestconfig, sac_home, booting)
        for fixture in _booted_ahead_needed(request.session.items):
            ahead.start(fixture)
        try:
            yield ahead
        finally:
            ahead.stop_all()


@pytest.fixture(scope="session")
def cluster4(_servers_booted_ahead: _BootedAhead) -> LocalCluster:
    """Three nodes of RabbitMQ 4.0 (Debian 13's 4.0.5, from the cached root filesystem, which
    the first run on a machine builds: about 30 s more)."""
    return _servers_booted_ahead.served("cluster4", LocalCluster)


@pytest.fixture(scope="session")
def cluster310(_servers_booted_ahead: _BootedAhead) -> LocalCluster:
    """Three nodes of RabbitMQ 3.10 (Debian 12's 3.10.8): classic mirrored queues live here."""
    return _servers_booted_ahead.served("cluster310", LocalCluster)


@pytest.fixture(scope="session")
def cluster_b(sac_home: Path, pytestconfig: pytest.Config) -> Iterator[LocalCluster]:
    """A second cluster, of one node of 4.0: the other side of a federation with ``cluster``."""
    local = LocalCluster(name=f"test-b-{os.getpid()}", nodes=1, home=sac_home, rabbitmq="4.0")
    yield from _served(pytestconfig, local)


@pytest.fixture(scope="session")
def zookeeper(sac_home: Path, pytestconfig: pytest.Config) -> Iterator[LocalZooKeeper]:
    local = LocalZooKeeper(name=f"zk-{os.getpid()}", home=sac_home)
    yield from _served(pytestconfig, local)


@pytest.fixture(scope="session")
def zookeeper_short_tick(sac_home: Path, pytestconfig: pytest.Config) -> Iterator[LocalZooKeeper]:
    """A ZooKeeper with a 100 ms tick: sessions (leases) from 0.2 s, expired within a tick."""
    local = LocalZooKeeper(name=f"zk-tick-{os.getpid()}", home=sac_home, tick_time_ms=100)
    yield from _served(pytestconfig, local)


@pytest.fixture(scope="session")
def postgres(sac_home: Path, pytestconfig: pytest.Config) -> Iterator[LocalPostgres]:
    local = LocalPostgres(name=f"pg-{os.getpid()}", home=sac_home)
    yield from _served(pytestconfig, local)


@pytest.fixture(scope="session")
def spark_standalone(_servers_booted_ahead: _BootedAhead) -> LocalSpark:
    """A master and one worker (1 core, 1 GiB): sessions take ``master=spark_standalone.url``
    and ``spark.executor.memory`` of at most 1g, else the worker never grants an executor."""
    return _servers_booted_ahead.served("spark_standalone", LocalSpark)


# Partitions and the chaos scenarios: netns clusters of each series and metadata store.


def _netns_cluster(config: pytest.Config, home: Path, name: str,
                   **settings: str) -> Iterator[LocalCluster]:
    local = LocalCluster(name=f"{name}-{os.getpid()}", nodes=3, home=home, network="netns",
                         **settings)
    yield from _served(config, local)


@pytest.fixture(scope="session")
def netns_cluster4(sac_home: Path, pytestconfig: pytest.Config) -> Iterator[LocalCluster]:
    """Three RabbitMQ 4.0 nodes, each in a network namespace of its own (root), Mnesia."""
    yield from _netns_cluster(pytestconfig, sac_home, "net4", rabbitmq="4.0")


@pytest.fixture(scope="session")
def netns_cluster_khepri(sac_home: Path, pytestconfig: pytest.Config
                         ) -> Iterator[LocalCluster]:
    """The same with its metadata in Khepri (the ``khepri_db`` feature flag enabled)."""
    yield from _netns_cluster(pytestconfig, sac_home, "netk", rabbitmq="4.0",
                              metadata_store="khepri")


@pytest.fixture(scope="session")
def netns_cluster310(sac_home: Path, pytestconfig: pytest.Config) -> Iterator[LocalCluster]:
    """Three RabbitMQ 3.10 nodes in namespaces: 3.10's partition behaviour, and the scenarios
    that need 3.10 (classic mirrored queues)."""
    yield from _netns_cluster(pytestconfig, sac_home, "net310", rabbitmq="3.10")


@pytest.fixture(scope="session")
def cluster_b310(sac_home: Path, pytestconfig: pytest.Config) -> Iterator[LocalCluster]:
    """One RabbitMQ 3.10 node: the other side of a federation for a scenario that runs on
    3.10."""
    local = LocalCluster(name=f"test-b310-{os.getpid()}", nodes=1, home=sac_home,
                         rabbitmq="3.10")
    yield from _served(pytestconfig, local)


@pytest.fixture(scope="module")
def fault_proxy() -> Iterator[ProxyThread]:
    """The fault proxy (Toxiproxy's API) in a thread of the test process, one per module."""
    with ProxyThread() as running:
        yield running


@pytest.fixture
def queue_name(request: pytest.FixtureRequest) -> str:
    """A queue name unique to the test, readable in the management UI, safe in URLs."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name[:80]).strip("-")
    return f"{readable}-{os.urandom(4).hex()}"


def _log_tails(config: pytest.Config) -> list[tuple[str, str]]:
    sections = []
    for srv in config.stash[_servers_key]:
        files = srv.log_files() if isinstance(srv, LocalServer) else []
        for path in files:
            lines = path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
            sections.append((f"server log {path}", "\n".join(lines)))
    return sections


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Iterator[None]:
    report = yield
    if report.failed:
        for title, text in _log_tails(item.config):
            report.sections.append((title, text))
    return report
