"""Takeover time: how long a single-active queue goes unserved when its active consumer goes
away, per way of taking over (a *mode*), over many trials, with no effect lost or doubled.

A trial: a fresh quorum queue with single active consumer (the SDK's defaults; the guard
modes: without it); consumer A
(node 2) subscribes first and becomes the active one, consumer B (node 3) waits; an SDK
``Publisher`` in this process (node 1, so node 1 leads the queue) publishes at a steady
``--rate`` before, during and after the event. A and B are the chaos suite's consumer actor
(``sac.chaos.actors.consumer``, each a process of its own), writing one row per message to a
SQLite sink *through the inbox* (``Inbox`` over ``SQLiteStore``, fencing on), as a user who
cares about duplicates runs them. Then the mode's event strikes A:

``native-graceful``
    SIGTERM: the SDK's graceful stop (the running handler finishes and is acked, then the
    subscription is cancelled); the broker hands the queue to B at once.
``native-frozen``
    SIGSTOP: nothing closes A's socket, so only the broker's heartbeat check notices (two
    silent checks in a row, one per heartbeat interval: 2H to 3H after the freeze, expected
    11-15 s at H = 5 s). The event falls at a random point of the heartbeat cycle (a random
    0-H seconds of extra warm-up, ``--seed``). If A froze in a batch holding the SQLite
    write lock, B's epoch claim kills it (``SQLiteStore(evict_frozen_holder=True)``).

``guard-clean``
    A and B guarded by a ZooKeeper election (``ConsumerSettings.guard``; a ZooKeeper with a
    100 ms tick, lease ``--lease``, 1 s) on a queue *without* native single active consumer:
    only the leader subscribes. SIGTERM of A: its graceful stop, then its session ends,
    which deletes its election node; B wins, subscribes and is handed the queue.
``guard-expiry``
    The same, but A's link to ZooKeeper (through the fault proxy) is cut: A suspends and
    starts nothing new, ZooKeeper expires its session once the lease is over, B wins with a
    newer token and subscribes. Once B is active the link is healed: A hears that its
    session is gone and gives its channel up (what it held goes back to the queue, to B).
``guard-evict-frozen``
    Guarded A and B on a queue *with* native single active consumer, given the management
    API; SIGSTOP of A (at a random point of the heartbeat cycle): its lease expires, B wins
    and has the broker close A's connection, and the broker hands B the queue at once.

Takeover time: from the event (``time.time()`` just before the signal or the cut) to B's
first effect (the ``ts`` the actor gives the row when the effect runs, ``time.time()`` on the
same host).
``b_active_s`` is to B's first delivery (its role change, on the monotonic clock). Each trial
then publishes a tail (``--tail``), waits until every confirmed message has a row, stops B
gracefully and checks: no message twice in the sink (``duplicates``), none confirmed without a
row (``missing``), and B had no effect before the event (A was alone).

A new mode (a lease eviction of a frozen consumer, say) plugs in as a ``Mode`` subclass:
the queue (``queue``), what the actors need (``actor``: e.g. the guard's options, from the
``Servers`` the bench started), when A alone serves (``alone``), how the event strikes
(``strike``) and what to undo once B took over (``heal``); add it to ``MODES``. Every mode
is compared with ``native-frozen``, the time the guard's lease is meant to beat
(``vs_native_frozen``), and with the same mode in an earlier result file (``--baseline``).

One local 3-node cluster (``--cluster-name``) serves every trial; rounds are outermost, so a
slow spell of the machine hits each mode alike. Each wait is bounded (``--timeout``). Results:
a table on stdout and ``bench/results/takeover-<UTC>.json``. ``python -m bench.takeover --help``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import attrs
from toxiproxy import Toxiproxy
from toxiproxy.proxy import Proxy

from sac.chaos._process import ActorProcess
from sac.chaos.actors import ConsumerActor, Sink
from sac.chaos.errors import ChaosError
from sac.chaos.proxy import ProxyThread
from sac.sdk import ConnectionSettings, PublisherSettings, QueueSettings, Role, SacError
from sac.sdk.management import OverviewInfo
from sac.server import LocalCluster, LocalZooKeeper
from ._report import (
    DEFAULT_SERIES,
    choices,
    conditions,
    positive_int,
    rabbitmq_series,
    save,
    spread,
)
from .handover import SteadyPublisher

NODES = 3
STEP_TIMEOUT = 60.0
"""Seconds allowed for a consumer to subscribe or become active, for the warm-up and tail."""
REFERENCE = "native-frozen"
ZK_TICK_MS = 100
"""The tick of the bench's ZooKeeper: sessions (leases) from 0.2 s, expired within a tick."""


@dataclass(frozen=True)
class Servers:
    """What the bench started, for the modes that need more than the cluster."""

    cluster: LocalCluster
    zookeeper: LocalZooKeeper | None = None
    """A short-tick ZooKeeper (``ZK_TICK_MS``), for the guard modes."""
    proxies: Toxiproxy | None = None
    """The API of a fault proxy, to put in front of ZooKeeper (``guard-expiry``)."""
    lease: float = 1.0
    """Guarded consumers' ZooKeeper session timeout (s)."""

    @property
    def zk(self) -> LocalZooKeeper:
        if self.zookeeper is None:
            raise RuntimeError("a guard mode without the bench's ZooKeeper")
        return self.zookeeper


@dataclass(frozen=True)
class Strike:
    wall: float
    """``time.time()`` just before the event: the clock of the sink's ``ts``."""
    monotonic: float
    """``time.monotonic()`` at the same moment: the clock of the actors' role changes."""


class Mode:
    """One way for B to take over from A. Subclasses set ``name`` and ``strike``."""

    name: ClassVar[str]
    random_phase: ClassVar[bool] = False
    """Add 0-H s of warm-up (H: the heartbeat), so that the event falls at a random point of
    the broker's heartbeat cycle."""
    guarded: ClassVar[bool] = False
    """A and B are guarded by a ZooKeeper election: the bench starts a ZooKeeper."""

    def queue(self, name: str) -> QueueSettings:
        """The trial's queue (the publisher declares it): native single active consumer."""
        return QueueSettings(name)

    def actor(self, spec: ConsumerActor, servers: Servers) -> ConsumerActor:
        """The settings of A and B in this mode (the native modes take them as they are)."""
        return spec

    def alone(self, a: ActorProcess, run_dir: Path) -> None:
        """Until A alone may serve, before B starts: a native queue's first subscriber is
        its active consumer already."""

    def strike(self, a: ActorProcess) -> Strike:
        raise NotImplementedError

    def heal(self) -> None:
        """Once B is active: undo what the event did that is not A's own doing."""

    def close(self) -> None:
        """The trial is over: drop what the mode made for it."""

    @staticmethod
    def signal(a: ActorProcess, sig: signal.Signals) -> Strike:
        at = Strike(time.time(), time.monotonic())
        a.signal(sig)
        return at


class NativeGraceful(Mode):
    name = "native-graceful"

    def strike(self, a: ActorProcess) -> Strike:
        return self.signal(a, signal.SIGTERM)


class NativeFrozen(Mode):
    name = "native-frozen"
    random_phase = True

    def strike(self, a: ActorProcess) -> Strike:
        return self.signal(a, signal.SIGSTOP)


class GuardMode(Mode):
    """A and B guarded by a ZooKeeper election (``ConsumerSettings.guard``, lease
    ``Servers.lease``) on a queue without native single active consumer: the guard alone
    decides who consumes, and fences A's inbox with its token."""

    guarded = True

    def queue(self, name: str) -> QueueSettings:
        return QueueSettings(name, single_active_consumer=False)

    def actor(self, spec: ConsumerActor, servers: Servers) -> ConsumerActor:
        return attrs.evolve(spec, single_active=False, guard_hosts=self.hosts(spec, servers),
                            guard_group=f"/sac-bench/{spec.queue}", guard_lease=servers.lease)

    def hosts(self, spec: ConsumerActor, servers: Servers) -> str:
        """Where ``spec``'s consumer reaches ZooKeeper."""
        return servers.zk.hosts

    def alone(self, a: ActorProcess, run_dir: Path) -> None:
        """Until A leads (its ``subscribed`` event: only the leader subscribes), so that B
        joins the election behind it."""
        events = run_dir / "events" / f"{a.name}.jsonl"
        deadline = time.monotonic() + STEP_TIMEOUT
        while not _recorded(events, "subscribed"):
            if not a.alive or time.monotonic() >= deadline:
                raise ChaosError(f"{a.name} did not lead within {STEP_TIMEOUT:g} s: "
                                 f"{a.log_tail()}")
            time.sleep(0.05)


class GuardClean(GuardMode):
    """SIGTERM of A: its graceful stop, then its session's end deletes its election node;
    B wins and subscribes."""

    name = "guard-clean"

    def strike(self, a: ActorProcess) -> Strike:
        return self.signal(a, signal.SIGTERM)


class GuardExpiry(GuardMode):
    """A's link to ZooKeeper (through the fault proxy) cut: ZooKeeper expires A's session
    once the lease is over and B wins; A, which suspended at the cut and started nothing
    new, hears that its session is gone once the link is back (``heal``, after B took over)
    and gives its channel up, and what it held goes back to the queue."""

    name = "guard-expiry"

    def __init__(self) -> None:
        self._link: Proxy | None = None
        """A's link of the trial under way (trials run one at a time)."""

    def hosts(self, spec: ConsumerActor, servers: Servers) -> str:
        if spec.actor != "consumer-a":
            return servers.zk.hosts
        if servers.proxies is None:
            raise RuntimeError("guard-expiry without the bench's fault proxy")
        self.close()
        self._link = servers.proxies.create(upstream=servers.zk.hosts,
                                            name=f"zk-{spec.queue}", listen="127.0.0.1:0")
        return str(self._link.listen)

    def strike(self, a: ActorProcess) -> Strike:
        assert self._link is not None
        at = Strike(time.time(), time.monotonic())
        self._link.disable()
        return at

    def heal(self) -> None:
        if self._link is not None:
            self._link.enable()

    def close(self) -> None:
        if self._link is not None:
            with contextlib.suppress(Exception):
                self._link.destroy()
            self._link = None


class GuardEvictFrozen(GuardMode):
    """SIGSTOP of A, guarded, on a queue *with* native single active consumer, both given
    the cluster's management API (``ConsumerSettings.management``): A's lease runs out, B
    wins with a newer token and has the broker close A's connection (``GuardSettings.evict``),
    so the broker hands B the queue at once instead of after A's missed heartbeats."""

    name = "guard-evict-frozen"
    random_phase = True

    def queue(self, name: str) -> QueueSettings:
        return QueueSettings(name)

    def actor(self, spec: ConsumerActor, servers: Servers) -> ConsumerActor:
        return attrs.evolve(super().actor(spec, servers), single_active=True,
                            management_urls=servers.cluster.management_urls())

    def strike(self, a: ActorProcess) -> Strike:
        return self.signal(a, signal.SIGSTOP)


def _recorded(events: Path, kind: str) -> bool:
    """Whether the history file ``events`` holds an event of type ``kind`` yet."""
    if not events.exists():
        return False
    for line in events.read_text().splitlines():
        with contextlib.suppress(ValueError):
            if json.loads(line).get("type") == kind:
                return True
    return False


MODES: dict[str, Mode] = {mode.name: mode for mode in (
    NativeGraceful(), NativeFrozen(), GuardClean(), GuardExpiry(), GuardEvictFrozen())}


# --------------------------------------------------------------------------- one trial


@dataclass
class Trial:
    mode: str
    index: int
    queue: str
    heartbeat: int
    warmup_messages: int = 0
    takeover_s: float | None = None
    """The event to B's first effect."""
    b_active_s: float | None = None
    """The event to B's first delivery."""
    a_last_after_event_s: float | None = None
    """A's last effect, relative to the event (graceful: the handler it finished)."""
    overlap: bool | None = None
    """B's first effect came before A's last one: two consumers working at once."""
    published: int = 0
    effects_a: int = 0
    effects_b: int = 0
    duplicates: int = 0
    """Sink rows beyond the first for a message id."""
    missing: int = 0
    missing_sample: list[str] = field(default_factory=list)
    a_exit: int | None = None
    """A's exit status before the bench ended it: 0 after a graceful stop, -9 when B's claim
    evicted it as a frozen lock holder, None when it was still there (frozen)."""
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (self.takeover_s is not None and not self.errors and not self.duplicates
                and not self.missing and not self.overlap)


class Bench:
    def __init__(self, servers: Servers, args: argparse.Namespace, work: Path) -> None:
        self.servers = servers
        self.args = args
        self.work = work
        self.rng = random.Random(args.seed)
        self.urls = servers.cluster.urls()

    def _conn(self, first: int, name: str) -> ConnectionSettings:
        urls = self.urls[first:] + self.urls[:first]
        return ConnectionSettings(urls=urls, heartbeat=self.args.heartbeat, name=name)

    def _actor(self, mode: Mode, name: str, first: int, queue: str, run_dir: Path,
               sink: Sink) -> ActorProcess:
        spec = ConsumerActor(
            actor=name, run_dir=str(run_dir), queue=queue,
            urls=self._conn(first, name).urls, heartbeat=self.args.heartbeat,
            dedup="inbox", effect_ms=0, sink=sink.location,
        )
        return ActorProcess.start(mode.actor(spec, self.servers))

    def run(self, mode: Mode, index: int) -> Trial:
        args = self.args
        queue = f"takeover-{mode.name}-{index}-{uuid.uuid4().hex[:6]}"
        trial = Trial(mode.name, index, queue, args.heartbeat)
        run_dir = self.work / queue
        (run_dir / "events").mkdir(parents=True)
        sink = Sink(f"sqlite:{run_dir / 'sink.db'}")
        sink.create()
        publisher = SteadyPublisher(
            PublisherSettings(self._conn(0, "takeover-publisher"), queue=mode.queue(queue)),
            args.rate,
        )
        actors: list[ActorProcess] = []
        try:
            publisher.connect()  # declares the queue: node 1 leads it
            a = self._actor(mode, "consumer-a", 1, queue, run_dir, sink)
            actors.append(a)
            a.expect("role", STEP_TIMEOUT, role=Role.WAITING.value)
            mode.alone(a, run_dir)
            b = self._actor(mode, "consumer-b", 2, queue, run_dir, sink)
            actors.append(b)
            b.expect("role", STEP_TIMEOUT, role=Role.WAITING.value)
            publisher.start()
            a.expect("role", STEP_TIMEOUT, role=Role.ACTIVE.value)
            trial.warmup_messages = args.warmup
            if mode.random_phase:
                trial.warmup_messages += int(self.rng.uniform(0, args.heartbeat) * args.rate)
            if not publisher.wait_confirmed(trial.warmup_messages, STEP_TIMEOUT):
                raise RuntimeError(f"warm-up not confirmed: {publisher.error!r}")
            if b.role == Role.ACTIVE.value:
                trial.errors.append("B was active before the event: A was not alone")

            at = mode.strike(a)
            active = b.expect("role", args.timeout, role=Role.ACTIVE.value)
            trial.b_active_s = float(active["monotonic"]) - at.monotonic
            mode.heal()
            if not publisher.wait_confirmed(publisher.count() + args.tail, STEP_TIMEOUT):
                raise RuntimeError(f"tail not confirmed: {publisher.error!r}")
            publisher.close()
            self._drain(set(publisher.confirmed), sink)
            trial.a_exit = a.returncode
            if b.stop(STEP_TIMEOUT) != 0:
                trial.errors.append(f"B did not stop gracefully: {b.log_tail()}")
            self._account(trial, publisher, sink, at)
        except (ChaosError, RuntimeError) as exc:
            trial.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            publisher.close()
            for actor in actors:
                actor.close()  # SIGKILL whatever is left (a frozen A): ends a stopped one too
            mode.close()
            if publisher.error is not None:
                trial.errors.append(f"publisher: {publisher.error!r}")
            self._delete(queue, trial)
        if trial.ok and not args.keep:
            shutil.rmtree(run_dir, ignore_errors=True)
        return trial

    def _drain(self, confirmed: set[str], sink: Sink) -> None:
        """Until every confirmed message has a row (checked every 50 ms), or ``--timeout``
        (what is still missing then is counted as missing)."""
        deadline = time.monotonic() + self.args.timeout
        while not confirmed <= sink.distinct() and time.monotonic() < deadline:
            time.sleep(0.05)

    @staticmethod
    def _account(trial: Trial, publisher: SteadyPublisher, sink: Sink, at: Strike) -> None:
        rows = list(sink.rows())
        a = [r for r in rows if r["actor"] == "consumer-a"]
        b = [r for r in rows if r["actor"] == "consumer-b"]
        confirmed = set(publisher.confirmed)
        counts = Counter(str(r["msg"]) for r in rows)
        missing = sorted(confirmed - set(counts))
        trial.published = len(confirmed)
        trial.effects_a, trial.effects_b = len(a), len(b)
        trial.duplicates = sum(n - 1 for n in counts.values())
        trial.missing, trial.missing_sample = len(missing), missing[:10]
        if not b:
            trial.errors.append("B made no effect")
            return
        first_b = min(float(r["ts"]) for r in b)
        trial.takeover_s = first_b - at.wall
        if a:
            last_a = max(float(r["ts"]) for r in a)
            trial.a_last_after_event_s = last_a - at.wall
            trial.overlap = first_b < last_a
        if first_b < at.wall:
            trial.errors.append("B made an effect before the event")

    def _delete(self, queue: str, trial: Trial) -> None:
        cluster = self.servers.cluster
        api = cluster.management()
        for name in (queue, f"{queue}.parked"):
            try:
                api.delete_queue(name, if_empty=False)
            except SacError as exc:  # one failed trial must not end the bench
                trial.errors.append(f"deleting {name}: {exc}")


# --------------------------------------------------------------------------- report


def summarize(trials: Sequence[Trial]) -> dict[str, dict[str, Any]]:
    summary: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(t.mode for t in trials):
        runs = [t for t in trials if t.mode == name]
        taken = [t.takeover_s for t in runs if t.takeover_s is not None]
        summary[name] = {
            "trials": len(runs),
            "trials_ok": sum(t.ok for t in runs),
            "takeover_s": spread(taken, "p50"),
            "b_active_s": spread(
                [t.b_active_s for t in runs if t.b_active_s is not None], "p50"),
            "duplicates": sum(t.duplicates for t in runs),
            "missing": sum(t.missing for t in runs),
            "overlaps": sum(bool(t.overlap) for t in runs),
            "a_evicted": sum(t.a_exit == -signal.SIGKILL for t in runs),
            "errors": sum(len(t.errors) for t in runs),
        }
    return summary


def compare(summary: dict[str, dict[str, Any]], baseline: dict[str, Any] | None
            ) -> dict[str, dict[str, Any]]:
    """Each mode against ``native-frozen`` of this run, and against itself in ``baseline``
    (an earlier ``takeover-*.json``): ratios of p50 and max (below 1: faster)."""

    def ratio(new: float | None, old: float | None) -> float | None:
        return None if new is None or not old else round(new / old, 3)

    out: dict[str, dict[str, Any]] = {}
    reference = summary.get(REFERENCE, {}).get("takeover_s", {})
    old = (baseline or {}).get("summary", {})
    for name, s in summary.items():
        now = s["takeover_s"]
        entry: dict[str, Any] = {}
        if name != REFERENCE and reference:
            entry["vs_native_frozen_p50"] = ratio(now["p50"], reference.get("p50"))
        if name in old:
            before = old[name]["takeover_s"]
            entry["vs_baseline_p50"] = ratio(now["p50"], before.get("p50"))
            entry["vs_baseline_max"] = ratio(now["max"], before.get("max"))
        out[name] = entry
    return out


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def table(summary: dict[str, dict[str, Any]], comparison: dict[str, dict[str, Any]]) -> str:
    lines = [f"{'mode':<17}{'trials':>7}{'ok':>4} {'p50 s':>8} {'max s':>8} {'min s':>8} "
             f"{'active p50':>10} {'dups':>5} {'missing':>8} {'evicted':>8} {'errors':>7} "
             "vs native-frozen p50"]
    for name, s in summary.items():
        t = s["takeover_s"]
        versus = comparison.get(name, {}).get("vs_native_frozen_p50")
        lines.append(
            f"{name:<17}{s['trials']:>7}{s['trials_ok']:>4} {_fmt(t['p50']):>8} "
            f"{_fmt(t['max']):>8} {_fmt(t['min']):>8} {_fmt(s['b_active_s']['p50']):>10} "
            f"{s['duplicates']:>5} {s['missing']:>8} {s['a_evicted']:>8} {s['errors']:>7} "
            f"{'' if versus is None else f'x{versus}'}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def _modes(text: str) -> list[Mode]:
    return [MODES[x] for x in choices(list(MODES))(text)]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.takeover",
        description="Takeover time of a single-active queue (p50 and max over trials), per "
        "mode: " + ", ".join(MODES) + "; with no duplicate effect and nothing missing.")
    parser.add_argument("--trials", type=positive_int, default=20, help="trials per mode")
    parser.add_argument("--modes", type=_modes, default=list(MODES.values()),
                        help=f"comma-separated (default: {','.join(MODES)})")
    parser.add_argument("--rate", type=float, default=200.0, help="publish rate, msg/s")
    parser.add_argument("--heartbeat", type=positive_int, default=5,
                        help="AMQP heartbeat (s) of every client")
    parser.add_argument("--warmup", type=positive_int, default=200,
                        help="messages confirmed (A active) before the event")
    parser.add_argument("--tail", type=positive_int, default=200,
                        help="messages confirmed after B's takeover before publishing stops")
    parser.add_argument("--timeout", type=float, default=40.0,
                        help="seconds allowed per trial for B's takeover, and for the drain")
    parser.add_argument("--lease", type=float, default=1.0,
                        help="guard modes: the ZooKeeper session timeout (s), from 0.2 (the "
                        f"bench's ZooKeeper ticks every {ZK_TICK_MS} ms)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the random heartbeat phase (native-frozen)")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="an earlier bench/results/takeover-*.json to compare with")
    parser.add_argument("--keep", action="store_true",
                        help="keep every trial's directory (sink, actor logs and histories); "
                        "a failed trial's is always kept")
    parser.add_argument("--cluster-name", default="takeover", help="LocalCluster name")
    parser.add_argument("--rabbitmq", type=rabbitmq_series, default=DEFAULT_SERIES,
                        help=f"the RabbitMQ series to boot (default {DEFAULT_SERIES}); "
                        "python -m bench.versions compares two in one run")
    args = parser.parse_args(argv)
    if args.rate <= 0 or args.timeout <= 0:
        parser.error("--rate and --timeout must be positive")
    if not 2 * ZK_TICK_MS / 1000 <= args.lease <= 60:
        parser.error(f"--lease must be in [{2 * ZK_TICK_MS / 1000:g}, 60] s, not {args.lease:g}")
    if args.baseline is not None and not args.baseline.is_file():
        parser.error(f"--baseline: no file {args.baseline}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    baseline = json.loads(args.baseline.read_text()) if args.baseline else None
    started = dt.datetime.now(dt.UTC)
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="bench-takeover-"))
    print(f"booting a 3-node RabbitMQ {args.rabbitmq} cluster {args.cluster_name!r} ...",
          file=sys.stderr, flush=True)
    with LocalCluster(name=args.cluster_name, nodes=NODES, rabbitmq=args.rabbitmq) as cluster, \
            servers_for(cluster, args) as servers:
        overview = cluster.management().overview()
        trials = run_all(Bench(servers, args, work), args)
    report = describe(args, started, load_before, overview, trials, baseline)
    save("takeover", started, report, table(report["summary"], report["comparison"]))
    kept = [t.queue for t in trials if not t.ok or args.keep]
    if kept:
        print(f"trial directories kept in {work}: {', '.join(kept)}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if all(t.ok for t in trials) else 1


@contextlib.contextmanager
def servers_for(cluster: LocalCluster, args: argparse.Namespace) -> Iterator[Servers]:
    """What ``args.modes`` need beside ``cluster``: for a guard mode, a short-tick ZooKeeper
    and a fault proxy in front of it (stopped on exit)."""
    with contextlib.ExitStack() as stack:
        if not any(mode.guarded for mode in args.modes):
            yield Servers(cluster, lease=args.lease)
            return
        zookeeper = stack.enter_context(LocalZooKeeper(
            name=f"{cluster.name}-zk", tick_time_ms=ZK_TICK_MS))
        proxy = stack.enter_context(ProxyThread())
        proxies = Toxiproxy()
        proxies.update_api_consumer("127.0.0.1", proxy.port)
        yield Servers(cluster, zookeeper, proxies, args.lease)


def run_all(bench: Bench, args: argparse.Namespace) -> list[Trial]:
    """``args.trials`` trials of every mode, rounds outermost, each printed as it ends."""
    trials: list[Trial] = []
    for index in range(args.trials):
        for mode in args.modes:
            t = bench.run(mode, index)
            trials.append(t)
            print(f"  {t.mode:<16} trial {index + 1}: takeover {_fmt(t.takeover_s)} s "
                  f"(B active {_fmt(t.b_active_s)} s), published {t.published}, "
                  f"A {t.effects_a}, B {t.effects_b}, dups {t.duplicates}, "
                  f"missing {t.missing}, A exit {t.a_exit}"
                  + (f", errors: {t.errors}" if t.errors else ""),
                  file=sys.stderr, flush=True)
    return trials


def describe(args: argparse.Namespace, started: dt.datetime, load_before: Sequence[float],
             overview: OverviewInfo, trials: Sequence[Trial],
             baseline: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON report of a run (``bench.versions`` writes one per RabbitMQ series)."""
    summary = summarize(trials)
    comparison = compare(summary, baseline)
    return {
        "benchmark": "single-active takeover",
        "timestamp": started.isoformat(timespec="seconds"),
        "modes": [mode.name for mode in args.modes],
        "trials_per_mode": args.trials,
        "rate_msg_per_s": args.rate,
        "heartbeat_s": args.heartbeat,
        "warmup_messages": args.warmup,
        "tail_messages": args.tail,
        "seed": args.seed,
        "takeover": "event (signal sent) to B's first effect (sink row ts), wall clock, "
                    "one host; b_active_s: to B's first delivery (monotonic)",
        "consumers": "sac.chaos.actors.consumer, Inbox over SQLiteStore (fencing on), "
                     "prefetch " + str(attrs.fields(ConsumerActor).prefetch.default),
        "placement": {"publisher": "node 1 (queue leader)", "A": "node 2", "B": "node 3"},
        "reference": {REFERENCE: "11-15 s expected at heartbeat 5 (2-3 heartbeats)",
                      "guard modes (target)": "p50 <= 1.5 s, no duplicate effect"},
        "guard": {"lease_s": args.lease, "zookeeper_tick_ms": ZK_TICK_MS,
                  "queue": "quorum, no native single active consumer",
                  "expiry": "A's ZooKeeper link disabled at the fault proxy (connections "
                            "closed, new ones refused); healed once B is active",
                  "evict-frozen": "quorum queue with native single active consumer, both "
                                  "consumers given the management API: B, elected, closes "
                                  "A's connection (GuardSettings.evict)"},
        "baseline": None if args.baseline is None else str(args.baseline),
        **conditions(overview, NODES, load_before),
        "summary": summary,
        "comparison": comparison,
        "trials": [asdict(t) | {"ok": t.ok} for t in trials],
    }


if __name__ == "__main__":
    sys.exit(main())
