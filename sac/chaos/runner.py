"""One chaos run: a workload of SDK actors on a local cluster, a scenario's faults, and the
checker's verdict of the history it leaves (``docs/history.md``).

``run(settings, cluster, out)`` writes ``out/<scenario>-s<seed>[-<weakening>]/`` with
``run.json``, ``events/*.jsonl``, ``effects.jsonl`` (the sink read back), ``logs/`` (each
actor's stderr) and ``verdict.json``, and returns a ``RunResult``. Every wait has a bound
(``RunSettings.time_limit`` for the whole run); every process, proxy and fault the run made
(a ZooKeeper it started for guarded consumers too) is gone when it returns or raises, Ctrl-C
included, and the queue is deleted.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import logging
import time
import uuid
from pathlib import Path
from typing import Any

import attrs

from sac.checker.errors import CheckerError
from sac.checker.verdict import Verdict
from sac.history import MESSAGE_ANOMALIES
from sac.sdk import Backoff, ManagementError
from sac.server import LocalCluster, LocalPostgres, LocalZooKeeper
from ._process import ActorProcess
from .actors import Sink
from .errors import ChaosError, UnknownScenario
from .faults import FaultProxy
from .federation import federate, unfederate
from .scenario import Scenario
from .scenarios import SCENARIOS
from .settings import GUARD_LEASE_S, GUARD_TICK_MS, RunSettings
from .world import World

log = logging.getLogger(__name__)


@attrs.frozen
class RunResult:
    path: Path
    settings: RunSettings
    verdict: Verdict
    expected: tuple[str, ...]
    """Anomalies a weakened run must show; empty for a run of the real configuration."""
    seconds: float
    error: str | None = None
    """Why the run could not be carried out as planned (its history is checked anyway)."""
    repaired: tuple[str, ...] = ()
    """Nodes restarted because they did not serve again after a fault."""

    @property
    def outcome(self) -> str:
        """``pass`` (a valid run), ``caught`` (a weakened run whose anomaly was found),
        ``ERROR`` (the run could not be carried out) or ``FAIL`` (an anomaly in a real run,
        or a weakened run that looked valid)."""
        if self.error is not None:
            return "ERROR"
        found = {name for name in MESSAGE_ANOMALIES if self.verdict.count(name)}
        if not self.expected:
            return "pass" if self.verdict.valid else "FAIL"
        return "caught" if found & set(self.expected) else "FAIL"


QUEUE_GONE_WITHIN = Backoff(initial=0.2, maximum=2.0, max_attempts=None, max_elapsed=90.0)
"""How long a run's end tries to delete its queue: a node just back from a partition may
refuse or time out for a while after the heal. Seen on 4.0.5 after a majorities ring: all
three nodes paused and restarted, two of the queue's members were not running, and the
broker took 38 s to delete the queue."""


def delete_run_queue(cluster: LocalCluster, queue: str) -> None:
    """The run's queue, its parking queue and a policy a scenario made for it, each gone
    (404 counts as gone); tried again under ``QUEUE_GONE_WITHIN``. What still fails then is
    logged and left to the next run's reset, rather than hiding the run's verdict."""
    api = cluster.management()
    deletions = [functools.partial(api.delete_queue, name, if_empty=False)
                 for name in (queue, f"{queue}.parked")]
    deletions.append(functools.partial(api.delete_policy, queue))
    started = time.monotonic()
    for attempt in itertools.count(1):
        try:
            for delete in deletions:
                try:
                    delete()
                except ManagementError as exc:
                    if exc.status != 404:
                        raise
            return
        except ManagementError as exc:
            delay = QUEUE_GONE_WITHIN.delay(attempt, time.monotonic() - started)
            if delay is None:
                log.warning("chaos run: queue %s not deleted: %s", queue, exc)
                return
            time.sleep(delay)


def run(settings: RunSettings, cluster: LocalCluster, out: Path, *,
        postgres: LocalPostgres | None = None, zookeeper: LocalZooKeeper | None = None,
        scenarios: dict[str, Scenario] | None = None, check: str = "python",
        toxiproxy_url: str | None = None, other: LocalCluster | None = None) -> RunResult:
    """Carry out one run and check it; see the module's docstring. A scenario with guarded
    consumers uses ``zookeeper`` (its tick short enough for ``GUARD_LEASE_S``), or starts
    one of its own in the run's directory for the run; a federated one federates with
    ``other``, or a one-node cluster it starts for the run."""

    table = SCENARIOS if scenarios is None else scenarios
    if settings.scenario not in table:
        raise UnknownScenario(f"no scenario {settings.scenario!r}; there are: "
                              f"{', '.join(sorted(table))}")
    scenario = table[settings.scenario]
    if scenario.network == "netns" and cluster.spec.network != "netns":
        raise ChaosError(f"scenario {scenario.name} cuts links between nodes: it needs a netns "
                         f"cluster (LocalCluster(network='netns'), `sac server up --network "
                         f"netns`), and {cluster.name!r} runs on loopback")
    if scenario.rabbitmq not in (None, cluster.spec.rabbitmq):
        raise ChaosError(f"{scenario.refusal(cluster.spec.rabbitmq)} (cluster "
                         f"{cluster.name!r} runs {cluster.spec.rabbitmq})")
    if scenario.guard and zookeeper is not None:
        _check_lease(zookeeper)
    started = time.monotonic()
    run_dir = out / settings.label
    again = 1
    while run_dir.exists():  # an earlier run of the same plan: keep it, number this one
        again += 1
        run_dir = out / f"{settings.label}-{again}"
    (run_dir / "events").mkdir(parents=True)
    queue = f"chaos-{settings.label}-{uuid.uuid4().hex[:6]}"
    expected = scenario.expect if settings.weakened else ()
    meta: dict[str, Any] = {
        "scenario": scenario.name, "summary": scenario.summary, "seed": settings.seed,
        "parameters": attrs.asdict(settings), "queue": queue,
        "queue_type": scenario.queue_type, "single_active_queues": [queue],
        # A guard's lock over a plain or federated queue keeps one consumer, not the order.
        "ordered_queues": [queue] if scenario.single_active else [],
        "expect": list(expected),
        "topology": {"nodes": [n.name for n in cluster.nodes], "cluster": cluster.name},
        "start": time.time(),
    }
    store = settings.store or scenario.store
    meta["store"] = store
    if store == "postgres":
        if postgres is None:
            raise ChaosError(f"scenario {scenario.name} runs on PostgreSQL: start one "
                             "(sac.server.LocalPostgres) and pass it")
        sink = Sink(postgres.create_database(f"chaos_{uuid.uuid4().hex[:10]}"))
    else:
        sink = Sink(f"sqlite:{run_dir / 'sink.db'}")
    sink.create()
    servers = contextlib.ExitStack()  # what this run starts for itself
    try:
        hosts = None
        if scenario.guard:
            if zookeeper is None:
                zookeeper = servers.enter_context(LocalZooKeeper(
                    "zk", home=run_dir, tick_time_ms=GUARD_TICK_MS))
            hosts = zookeeper.hosts
        if scenario.federated and other is None:
            other = servers.enter_context(LocalCluster(
                f"fed-{uuid.uuid4().hex[:6]}", nodes=1, home=run_dir,
                rabbitmq=cluster.spec.rabbitmq))
        proxy = FaultProxy(f"chaos-{uuid.uuid4().hex[:6]}", toxiproxy_url)
    except BaseException:
        servers.close()
        raise
    world = World(settings, cluster, run_dir, proxy, queue, scenario.queue_type, sink,
                  single_active=scenario.single_active, zookeeper=hosts,
                  management=tuple(cluster.management_urls()) if scenario.evict else (),
                  other=other if scenario.federated else None,
                  short_batches=scenario.short_batches)
    if scenario.federated:
        meta["topology"]["federated_with"] = {
            "cluster": world.clusters[1].name, "nodes": [n.name for n in world.clusters[1].nodes]}
    if hosts is not None:
        meta["guard"] = {"zookeeper": hosts, "group": world.guard_group,
                         "lease_s": GUARD_LEASE_S, "native_single_active": scenario.single_active,
                         "evict": scenario.evict}
    error: BaseException | None = None
    try:
        actors = _spawn(world)
        world.ensure_whole()
        # What the run ran on, as the broker itself says (version, metadata store).
        meta["broker"] = cluster.broker()
        if scenario.federated:
            meta["topology"]["federated_with"]["broker"] = world.clusters[1].broker()
        if scenario.prepare is not None:
            scenario.prepare(cluster, queue)
        if scenario.federated:
            federate(world.clusters, queue, proxy)
        _drive(world, scenario, actors)
    except ChaosError as exc:
        error = exc  # the run went wrong (an actor died, a wait ran out): checked all the same
    except BaseException as exc:
        error = exc
        raise
    finally:
        world.close()
        meta["routes"] = proxy.routes()
        proxy.close()
        if scenario.federated:
            unfederate(world.clusters, queue)
        servers.close()
        meta["end"] = time.time()
        meta["restarts"] = world.restarts
        meta["repaired"] = world.repaired
        meta["faults"] = world.nemesis.faults
        if error is not None:
            meta["error"] = f"{type(error).__name__}: {error}"
        world.sink.dump(run_dir / "effects.jsonl", world.commit_times())
        (run_dir / "run.json").write_text(json.dumps(meta, indent=2, sort_keys=True))
        delete_run_queue(cluster, queue)
    try:
        verdict = _check(run_dir, check)
    except CheckerError as exc:  # a run that died before its history holds anything
        failed = f"; the run itself failed: {meta['error']}" if error is not None else ""
        raise ChaosError(f"run {run_dir} could not be checked: {exc}{failed}") from exc
    return RunResult(run_dir, settings, verdict, expected, time.monotonic() - started,
                     None if error is None else meta["error"], tuple(world.repaired))


def _check_lease(zookeeper: LocalZooKeeper) -> None:
    """Refuse a ZooKeeper that cannot grant guarded consumers their lease (before anything
    of the run is made)."""
    if not zookeeper.min_session_timeout <= GUARD_LEASE_S <= zookeeper.max_session_timeout:
        raise ChaosError(
            f"guarded consumers ask ZooKeeper for a lease of {GUARD_LEASE_S:g} s, and "
            f"{zookeeper.hosts} grants {zookeeper.min_session_timeout:g} s to "
            f"{zookeeper.max_session_timeout:g} s: give a ZooKeeper with a shorter tick "
            f"(LocalZooKeeper(tick_time_ms={GUARD_TICK_MS}))")


def _spawn(world: World) -> list[ActorProcess]:
    """The run's first actors, started held (``ActorProcess.release``): the consumers of
    every slot, then the publisher. Each imports what it needs while the cluster is checked
    and the queue set up, and while the actor before it connects: a run waits for no
    actor's start-up."""
    consumers = [world.start_consumer(slot, held=True)
                 for slot in range(world.settings.consumers)]
    return [*consumers, world.start_publisher(held=True)]


def _drive(world: World, scenario: Scenario, actors: list[ActorProcess]) -> None:
    """The consumers subscribe in slot order (the first is the active one), then the
    publisher starts, then the scenario's faults."""
    s = world.settings
    *consumers, publisher = actors
    for process in consumers:
        process.release()
        process.wait_for("subscription", lambda p: p.role in ("waiting", "active"),
                         world.bound(60))
    world.start()
    publisher.release()
    scenario.body(world)
    for publisher in world.publishers:
        publisher.wait_for("end of publishing", lambda p: p.last("done") is not None,
                           world.bound(s.time_limit))
    _drain(world)
    for process in world.live_consumers():
        world.stop_consumer(process)


def _drain(world: World) -> None:
    """Until every confirmed message has an effect, or the run's time is up (the checker
    then reports what is missing as lost)."""
    confirmed = world.confirmed_ids()
    while not confirmed <= world.sink.distinct():
        if world.left() <= 0:
            return
        world.pause(0.1)


def _check(run_dir: Path, engine: str) -> Verdict:
    if engine == "python":
        from sac.checker.python_engine import check_run

        verdict = check_run(run_dir)
    else:
        raise ChaosError(f"unknown engine {engine!r}")
    (run_dir / "verdict.json").write_text(json.dumps(verdict.to_json(), indent=2,
                                                     sort_keys=True))
    return verdict
