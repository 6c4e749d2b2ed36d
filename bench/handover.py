"""Single-active-consumer handover time: how long a waiting consumer waits for its turn.

A quorum queue declared with ``x-single-active-consumer`` (the SDK's default ``QueueSettings``)
hands every message to one consumer, A; a second consumer, B, subscribed to the same queue,
waits. This benchmark measures how long the queue goes unserved when A goes away, which is the
number an operator has to plan for (the queue's backlog grows for that long) and the one a
choice of heartbeat interval trades against spurious failovers. Three ways for A to go:

``graceful``
    A calls ``stop()`` (cancel, finish the running handler and ack, close). Timed from the
    ``stop()`` call to the first message B handles. Both A and B run in this process: the
    run times the ``stop()`` call itself and compares A's last handler start with B's first
    on one clock, which a process stopped by SIGTERM would not tell.
``connection-reset``
    A runs in a process of its own, the chaos suite's consumer actor
    (``sac/chaos/actors/consumer.py``, no inbox, each handled id appended to a file), and gets
    SIGKILL: the kernel closes its socket, so the broker learns at once. Timed from the kill.
``frozen``
    A's process gets SIGSTOP: nothing closes its socket and the kernel keeps acknowledging TCP
    segments, so only the missing AMQP heartbeats reveal it. Timed from the SIGSTOP, once with
    a 2 s and once with a 5 s heartbeat (``--frozen-heartbeats``); A is SIGKILLed afterwards.
    RabbitMQ checks once per heartbeat interval H (timed from the connection's start) whether
    anything arrived, and closes the connection at the second silent check in a row: the
    handover takes 2H to 3H, depending on where the fault falls between two checks. A fixed
    warm-up would always put it at the same point (every run the same number), so frozen runs
    add a random 0 to H seconds' worth of messages to the warm-up (``--seed``); each run
    records ``a_subscribed_to_fault_s`` to tell the phase.
``priority`` (RabbitMQ 4.0 only)
    the rolling deploy of docs/guides/coordination.md ("Rolling deploy with priorities"): A
    (the broker's default priority) serves alone, then B subscribes with
    ``ConsumerSettings.priority`` ``B_PRIORITY``; the broker stops sending to A, waits until
    A has acked what it holds, and makes B the active consumer. A is never stopped (it is,
    after the run). Timed from B's ``start()`` call. 3.x ignores priorities for single active
    consumer (B would wait forever), so the scenario is refused there.

``gap_s`` (graceful and priority, where A runs in this process) is what the queue's
consumers see of the handover: from A's last handled message to B's first. Both runs also
check ``in_order``: every message handled once, A's then B's, in publish order.

In every run an SDK ``Publisher`` (on node 1, which therefore leads the fresh queue) publishes
at a steady ``--rate`` (500 msg/s) before, during and after the fault, each body carrying its
publish time; A is on node 2 and B on node 3. B records ``time.monotonic()`` when its handler
first runs; the benchmark waits on events, with timeouts, never on sleeps. Each run also
records the messages published (confirmed), handled by A and by B, the ids published but never
handled (lost: should always be none) and the duplicates: messages A handled but had not yet
acked when it was killed or frozen come again to B (expected after a kill or a freeze, never
after a graceful stop). Both SDK faces, ``blocking`` (``Consumer``) and ``asyncio``
(``AsyncConsumer``), are measured for every scenario: A and B of a run use the same face.

One 3-node cluster (``handover``, loopback only) serves the whole run, a fresh queue per run,
deleted afterwards. Results: a table on stdout and ``bench/results/handover-<UTC>.json``.
Run ``python -m bench.handover --help``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import attrs
import pika

from sac.chaos._process import ActorProcess
from sac.chaos.actors import ConsumerActor, Face
from sac.chaos.errors import ChaosError
from sac.sdk import (
    AsyncConsumer,
    ConnectionSettings,
    Consumer,
    ConsumerSettings,
    Delivery,
    Publisher,
    PublisherSettings,
    QueueSettings,
    Role,
    SacError,
    Unconfirmed,
)
from sac.sdk.management import OverviewInfo
from sac.server import LocalCluster
from ._report import (
    DEFAULT_SERIES,
    choices,
    conditions,
    positive_int,
    rabbitmq_series,
    save,
    spread,
)

FACES = ("blocking", "asyncio")
Fault = Literal["graceful", "connection-reset", "frozen", "priority"]
FAULTS: tuple[Fault, ...] = ("graceful", "connection-reset", "frozen", "priority")
PRIORITY_SERIES = ("4.0",)
"""Where a consumer of higher priority takes a single-active quorum queue over (3.x ignores
priorities for single active consumer)."""
B_PRIORITY = 10
"""B's ``ConsumerSettings.priority`` in the ``priority`` scenario (A keeps the default)."""
PREFETCH: int = attrs.fields(ConsumerSettings).prefetch.default or 0
NODES = 3
START_TIMEOUT = 60.0
"""Seconds allowed for a consumer to subscribe or become active, and for the warm-up."""


@dataclass(frozen=True)
class Scenario:
    fault: Fault
    heartbeat: int

    @property
    def label(self) -> str:
        return f"frozen-hb{self.heartbeat}" if self.fault == "frozen" else self.fault


# --------------------------------------------------------------------------- consumers


@dataclass(frozen=True)
class Handled:
    message_id: str
    at: float
    """``time.monotonic()`` when the handler started on it."""
    published_at: float | None
    """The publisher's ``time.monotonic()`` from the body (the same clock: one machine)."""
    redelivered: bool


class LocalConsumer:
    """A consumer of either face in this process, handling in the background.

    Its handler records every message and sets ``first`` on the first one; ``wait_for_ids``
    waits (on a condition, with a timeout) until given ids were all handled."""

    def __init__(self, face: str, settings: ConsumerSettings) -> None:
        self.face = face
        self.handled: list[Handled] = []
        self.first = threading.Event()
        self.active = threading.Event()
        self.roles: list[str] = []
        self.error: BaseException | None = None
        self.subscribed_at: float | None = None
        self._cond = threading.Condition()
        self._wanted: set[str] = set()
        self._blocking: Consumer | None = None
        self._async: AsyncConsumer | None = None
        self._runner: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        if face == "blocking":
            self._blocking = Consumer(settings, self._handle, on_role_change=self._role)
        else:
            self._loop = asyncio.new_event_loop()
            self._runner = threading.Thread(
                target=self._loop.run_forever, name="bench-consumer-loop", daemon=True
            )
            self._runner.start()
            self._async = AsyncConsumer(settings, self._ahandle, on_role_change=self._role)

    def wait_active(self, timeout: float) -> bool:
        return self.active.wait(timeout)

    def _role(self, role: Role) -> None:
        self.roles.append(role.value)
        if role is Role.WAITING and self.subscribed_at is None:
            self.subscribed_at = time.monotonic()
        if role is Role.ACTIVE:
            self.active.set()

    def _handle(self, delivery: Delivery) -> None:
        now = time.monotonic()
        try:
            published_at: float | None = float(json.loads(delivery.body)["t"])
        except (ValueError, KeyError, TypeError):
            published_at = None
        record = Handled(str(delivery.message_id), now, published_at, delivery.redelivered)
        with self._cond:
            self.handled.append(record)
            self._wanted.discard(record.message_id)
            self._cond.notify_all()
        self.first.set()

    async def _ahandle(self, delivery: Delivery) -> None:
        self._handle(delivery)

    def start(self) -> LocalConsumer:
        """Connect and subscribe (returns once subscribed)."""
        if self._blocking is not None:
            self._blocking.start()
            self._runner = threading.Thread(
                target=self._run_blocking, name="bench-consumer-run", daemon=True
            )
            self._runner.start()
        else:
            assert self._async is not None
            assert self._loop is not None
            try:
                asyncio.run_coroutine_threadsafe(self._async.start(), self._loop).result(
                    START_TIMEOUT
                )
            except BaseException:
                self._stop_loop()
                raise
        return self

    def _run_blocking(self) -> None:
        assert self._blocking is not None
        try:
            self._blocking.run()
        except Exception as exc:  # noqa: BLE001 - reported with the run
            self.error = exc

    def stop(self) -> None:
        """Graceful handover (idempotent)."""
        if self._blocking is not None:
            self._blocking.stop()
            if self._runner is not None:
                self._runner.join(60)
        elif self._loop is not None and not self._loop.is_closed():
            assert self._async is not None
            try:
                asyncio.run_coroutine_threadsafe(self._async.stop(), self._loop).result(60)
            finally:
                self._stop_loop()

    def _stop_loop(self) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._runner is not None:
            self._runner.join(10)
        self._loop.close()

    def first_at(self) -> Handled | None:
        with self._cond:
            return self.handled[0] if self.handled else None

    def ids(self) -> list[str]:
        with self._cond:
            return [h.message_id for h in self.handled]

    def wait_for_ids(self, ids: set[str], timeout: float) -> bool:
        """Until every id in ``ids`` was handled (by this consumer) or ``timeout``."""
        with self._cond:
            self._wanted = ids - {h.message_id for h in self.handled}
            return self._cond.wait_for(lambda: not self._wanted, timeout)

    def missing(self) -> set[str]:
        with self._cond:
            return set(self._wanted)


class ConsumerProcess:
    """Consumer A in a process of its own, to be killed or frozen: the chaos suite's consumer
    actor without the inbox, each handled id appended to a file (a ``file:`` sink: a SQLite
    commit per message would not keep up with the publisher), read once the process is dead.
    Its role changes, each with the time it happened, arrive on its stdout."""

    def __init__(
        self, face: str, queue: str, conn: ConnectionSettings, workdir: Path
    ) -> None:
        self.spec = ConsumerActor(
            actor="handover-a", run_dir=str(workdir), queue=queue, urls=conn.urls,
            heartbeat=conn.heartbeat, face=cast(Face, face), dedup="off", effect_ms=0,
            prefetch=PREFETCH, sink=f"file:{workdir / 'a-effects.jsonl'}",
        )
        self.process = ActorProcess.start(self.spec)

    def _roles(self) -> list[dict[str, Any]]:
        return [m for m in list(self.process.messages) if m.get("event") == "role"]

    @property
    def roles(self) -> list[str]:
        return [str(m["role"]) for m in self._roles()]

    @property
    def subscribed_at(self) -> float | None:
        """``time.monotonic()`` (one clock for every process of the host) when A first
        waited for its turn: its subscription."""
        waiting = [m for m in self._roles() if m["role"] == Role.WAITING.value]
        return float(waiting[0]["monotonic"]) if waiting else None

    def wait_role(self, role: Role, timeout: float) -> bool:
        try:
            self.process.expect("role", timeout, role=role.value)
        except ChaosError:
            return False
        return True

    def wait_active(self, timeout: float) -> bool:
        return self.wait_role(Role.ACTIVE, timeout)

    def signal(self, sig: signal.Signals) -> float:
        """Send ``sig``; the ``time.monotonic()`` just before."""
        now = time.monotonic()
        self.process.signal(sig)
        return now

    def kill(self) -> None:
        self.process.close()

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def ids(self) -> list[str]:
        """What A handled (call after ``kill``)."""
        return self.spec.open_sink().handled(self.spec.actor)

    def stderr_tail(self, lines: int = 5) -> str:
        return self.process.log_tail(lines)


# --------------------------------------------------------------------------- publisher


class SteadyPublisher:
    """An SDK ``Publisher`` sending ``rate`` msg/s from a thread, paced by a timer; bodies
    carry their publish time. ``confirmed`` lists what the broker confirmed."""

    def __init__(self, settings: PublisherSettings, rate: float) -> None:
        self._pub = Publisher(settings)
        self._rate = rate
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name="bench-publisher", daemon=True)
        self.confirmed: list[str] = []
        self.sent = 0
        self.failed = 0
        self.unconfirmed = 0
        self.error: BaseException | None = None

    def connect(self) -> None:
        """Connect (and declare the queue) without publishing yet."""
        self._pub.start()

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        began = time.monotonic()
        try:
            while True:
                delay = began + self.sent / self._rate - time.monotonic()
                if (delay > 0 and self._stop.wait(delay)) or self._stop.is_set():
                    return
                mid = f"m{self.sent:07d}"
                body = json.dumps(
                    {"seq": self.sent, "t": time.monotonic(), "wall": time.time()}
                ).encode()
                future = self._pub.send(body, message_id=mid)
                future.add_done_callback(self._settled)
                self.sent += 1
        except Exception as exc:  # noqa: BLE001 - reported with the run
            self.error = exc
            with self._cond:
                self._cond.notify_all()

    def _settled(self, future: Any) -> None:
        with self._cond:
            if future.cancelled() or future.exception() is not None:
                self.failed += 1
            else:
                self.confirmed.append(str(future.result()))
            self._cond.notify_all()

    def count(self) -> int:
        with self._cond:
            return len(self.confirmed)

    def wait_confirmed(self, n: int, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(
                lambda: len(self.confirmed) >= n or self.error is not None, timeout
            ) and self.error is None

    def close(self) -> None:
        """Stop sending, wait for the outstanding confirms, disconnect."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
        try:
            self._pub.close(timeout=30)
        except Unconfirmed as exc:  # counted and reported, not fatal
            self.unconfirmed = len(exc.message_ids)
            if self.error is None:
                self.error = exc


# --------------------------------------------------------------------------- one run


@dataclass
class RunResult:
    scenario: str
    face: str
    heartbeat: int
    run: int
    queue: str
    leader: str | None = None
    warmup_messages: int = 0
    a_subscribed_to_fault_s: float | None = None
    """From A's subscription (its connection opened just before) to the fault."""
    handover_s: float | None = None
    """Fault (stop() call, SIGKILL, SIGSTOP) to B's first handled message."""
    first_b_age_s: float | None = None
    """How long B's first message had been published when B handled it."""
    first_b_redelivered: bool | None = None
    stop_call_s: float | None = None
    """graceful: how long A's stop() call took; priority: B's start() call."""
    a_last_after_fault_s: float | None = None
    """graceful, priority: A's last handled message, relative to the stop() or start() call."""
    gap_s: float | None = None
    """graceful, priority: from A's last handled message to B's first."""
    overlap: bool | None = None
    """graceful, priority: B handled a message before A's last one started (not exclusive)."""
    in_order: bool | None = None
    """graceful, priority: every message handled once, A's then B's, in publish order."""
    sent: int = 0
    published: int = 0
    handled_a: int = 0
    handled_b: int = 0
    lost: int = 0
    lost_sample: list[str] = field(default_factory=list)
    duplicates: int = 0
    """Handlings beyond the first of the same id (A and B together)."""
    redelivered_to_b: int = 0
    """Distinct ids that A handled and B handled again."""
    left_in_queue: int | None = None
    a_roles: list[str] = field(default_factory=list)
    b_roles: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _rotated(urls: Sequence[str], first: int) -> list[str]:
    """The cluster's URLs with node ``first`` (0-based) tried first."""
    return list(urls[first:]) + list(urls[:first])


class Bench:
    def __init__(self, cluster: LocalCluster, args: argparse.Namespace) -> None:
        self.cluster = cluster
        self.urls = cluster.urls()
        self.args = args
        self.rng = random.Random(args.seed)

    def _conn(self, node: int, heartbeat: int, name: str) -> ConnectionSettings:
        return ConnectionSettings(urls=_rotated(self.urls, node), heartbeat=heartbeat, name=name)

    def leader(self, queue: str) -> str | None:
        with contextlib.suppress(SacError):
            return self.cluster.management().queue(queue).node
        return None

    def depth(self, queue: str) -> int:
        """Ready messages, by a passive declare on node 1 (exact, unlike the management API)."""
        connection = pika.BlockingConnection(pika.URLParameters(self.urls[0]))
        try:
            ok = connection.channel().queue_declare(queue, passive=True)
            return int(ok.method.message_count)
        finally:
            connection.close()

    def delete(self, queue: str) -> None:
        self.cluster.management().delete_queue(queue, if_empty=False)

    def run_once(self, scenario: Scenario, face: str, index: int) -> RunResult:
        queue = f"handover-{scenario.label}-{face}-{index}-{uuid.uuid4().hex[:6]}"
        result = RunResult(scenario.label, face, scenario.heartbeat, index, queue)
        qs = QueueSettings(queue)
        hb = scenario.heartbeat
        publisher = SteadyPublisher(
            PublisherSettings(self._conn(0, hb, "handover-publisher"), queue=qs), self.args.rate
        )
        a_local: LocalConsumer | None = None
        a_proc: ConsumerProcess | None = None
        b: LocalConsumer | None = None
        published_started = False
        with tempfile.TemporaryDirectory(prefix="handover-") as tmp:
            try:
                publisher.connect()  # declares the queue first: its leader is node 1
                published_started = True
                result.leader = self.leader(queue)
                a_conn = self._conn(1, hb, "handover-a")
                b_settings = ConsumerSettings(
                    self._conn(2, hb, "handover-b"), qs,
                    priority=B_PRIORITY if scenario.fault == "priority" else None,
                )
                a: LocalConsumer | ConsumerProcess
                if scenario.fault in ("graceful", "priority"):
                    a = a_local = LocalConsumer(face, ConsumerSettings(a_conn, qs)).start()
                else:
                    a = a_proc = ConsumerProcess(face, queue, a_conn, Path(tmp))
                    if not a_proc.wait_role(Role.WAITING, START_TIMEOUT):
                        raise RuntimeError(
                            f"A's process did not subscribe: {a_proc.stderr_tail()}"
                        )
                if scenario.fault != "priority":  # B waits from the start
                    b = LocalConsumer(face, b_settings).start()
                publisher.start()
                if not a.wait_active(START_TIMEOUT):
                    raise RuntimeError("A never became active")
                result.warmup_messages = self.args.warmup
                if scenario.fault == "frozen":  # a random phase against the heartbeat checks
                    result.warmup_messages += int(self.rng.uniform(0, hb) * self.args.rate)
                if not publisher.wait_confirmed(result.warmup_messages, START_TIMEOUT):
                    raise RuntimeError(f"warm-up not confirmed: {publisher.error!r}")
                if b is not None and b.first.is_set():
                    result.errors.append("B handled messages before the fault: A was not alone")

                if scenario.fault == "priority":  # B's arrival is the event
                    fault_at = time.monotonic()
                    b = LocalConsumer(face, b_settings).start()
                    result.stop_call_s = time.monotonic() - fault_at
                else:
                    fault_at = self._fault(scenario, a_local, a_proc, result)
                assert b is not None
                if a.subscribed_at is not None:
                    result.a_subscribed_to_fault_s = fault_at - a.subscribed_at
                if b.first.wait(self.args.timeout):
                    first = b.first_at()
                    assert first is not None
                    result.handover_s = first.at - fault_at
                    result.first_b_redelivered = first.redelivered
                    if first.published_at is not None:
                        result.first_b_age_s = first.at - first.published_at
                else:
                    result.errors.append(f"B handled nothing within {self.args.timeout:g} s")

                # a steady tail after the takeover, then stop publishing
                publisher.wait_confirmed(publisher.count() + self.args.tail, START_TIMEOUT)
                publisher.close()
                if a_proc is not None:
                    a_proc.kill()  # the frozen one too: SIGKILL ends a stopped process
                a_ids = a.ids()
                published = set(publisher.confirmed)
                if not b.wait_for_ids(published - set(a_ids), self.args.timeout):
                    result.errors.append(
                        f"B did not handle {len(b.missing())} remaining messages "
                        f"within {self.args.timeout:g} s"
                    )
                b.stop()
                self._account(result, publisher, a_ids, b, a_local, fault_at)
                result.left_in_queue = self.depth(queue)
            except Exception as exc:  # noqa: BLE001 - one failed run must not end the bench
                result.errors.append(f"{type(exc).__name__}: {exc}")
            finally:
                with contextlib.suppress(Exception):
                    publisher.close()
                for consumer in (a_local, b):
                    if consumer is not None:
                        with contextlib.suppress(Exception):
                            consumer.stop()
                if a_proc is not None:
                    with contextlib.suppress(Exception):
                        a_proc.kill()
                    result.a_roles = list(a_proc.roles)
                    if a_proc.returncode not in (None, -signal.SIGKILL):
                        result.errors.append(
                            f"A's process exited with {a_proc.returncode}: "
                            f"{a_proc.stderr_tail()}"
                        )
                if a_local is not None:
                    result.a_roles = list(a_local.roles)
                if b is not None:
                    result.b_roles = list(b.roles)
                for consumer in (a_local, b):
                    if consumer is not None and consumer.error is not None:
                        result.errors.append(f"consumer error: {consumer.error!r}")
                if publisher.error is not None:
                    result.errors.append(f"publisher: {publisher.error!r}")
                if published_started:
                    try:
                        self.delete(queue)
                    except Exception as exc:  # noqa: BLE001
                        result.errors.append(f"deleting the queue: {exc}")
        return result

    def _fault(
        self,
        scenario: Scenario,
        a_local: LocalConsumer | None,
        a_proc: ConsumerProcess | None,
        result: RunResult,
    ) -> float:
        """Make A go away; the ``time.monotonic()`` the fault began."""
        if scenario.fault == "graceful":
            assert a_local is not None
            fault_at = time.monotonic()
            a_local.stop()
            result.stop_call_s = time.monotonic() - fault_at
            return fault_at
        assert a_proc is not None
        sig = signal.SIGKILL if scenario.fault == "connection-reset" else signal.SIGSTOP
        return a_proc.signal(sig)

    @staticmethod
    def _account(
        result: RunResult,
        publisher: SteadyPublisher,
        a_ids: list[str],
        b: LocalConsumer,
        a_local: LocalConsumer | None,
        fault_at: float,
    ) -> None:
        b_ids = b.ids()
        published = set(publisher.confirmed)
        result.sent = publisher.sent
        result.published = len(published)
        result.handled_a = len(a_ids)
        result.handled_b = len(b_ids)
        lost = sorted(published - set(a_ids) - set(b_ids))
        result.lost = len(lost)
        result.lost_sample = lost[:10]
        counts = Counter(a_ids) + Counter(b_ids)
        result.duplicates = sum(c - 1 for c in counts.values() if c > 1)
        result.redelivered_to_b = len(set(a_ids) & set(b_ids))
        if a_local is not None and a_local.handled:
            last_a = a_local.handled[-1].at
            result.a_last_after_fault_s = last_a - fault_at
            first_b = b.first_at()
            result.overlap = first_b is not None and first_b.at < last_a
            if first_b is not None:
                result.gap_s = first_b.at - last_a
            # ids are m0000000, m0000001, ...: their order is the publish order
            result.in_order = a_ids + b_ids == sorted(published)


# --------------------------------------------------------------------------- report


def summarize(results: Sequence[RunResult]) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[RunResult]] = {}
    for r in results:
        groups.setdefault(f"{r.scenario}/{r.face}", []).append(r)
    summary: dict[str, dict[str, Any]] = {}
    for key, runs in groups.items():
        ok = [r for r in runs if r.handover_s is not None]
        summary[key] = {
            "scenario": runs[0].scenario,
            "face": runs[0].face,
            "heartbeat": runs[0].heartbeat,
            "runs": len(runs),
            "runs_with_handover": len(ok),
            "handover_s": spread([r.handover_s for r in ok if r.handover_s is not None]),
            "gap_s": spread([r.gap_s for r in ok if r.gap_s is not None]),
            "in_order": [r.in_order for r in runs],
            "first_b_age_s": spread(
                [r.first_b_age_s for r in ok if r.first_b_age_s is not None]
            ),
            "published": [r.published for r in runs],
            "handled_a": [r.handled_a for r in runs],
            "handled_b": [r.handled_b for r in runs],
            "duplicates": [r.duplicates for r in runs],
            "lost": [r.lost for r in runs],
            "any_lost": any(r.lost for r in runs),
            "errors": sum(len(r.errors) for r in runs),
        }
    return summary


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def table(summary: dict[str, dict[str, Any]]) -> str:
    lines = [
        f"{'scenario':<17}{'face':<9}{'hb':>3} {'median s':>9} {'min s':>7} {'max s':>7}"
        f" {'gap p50':>8} {'gap max':>8}"
        f"  {'published':<17} {'A':<17} {'B':<17} {'dups':<11} {'lost':<7} err"
    ]

    def nums(values: list[int]) -> str:
        return ",".join(str(v) for v in values)

    for s in summary.values():
        h = s["handover_s"]
        lines.append(
            f"{s['scenario']:<17}{s['face']:<9}{s['heartbeat']:>3} {_fmt(h['median']):>9} "
            f"{_fmt(h['min']):>7} {_fmt(h['max']):>7} {_fmt(s['gap_s']['median']):>8} "
            f"{_fmt(s['gap_s']['max']):>8}  {nums(s['published']):<17} "
            f"{nums(s['handled_a']):<17} {nums(s['handled_b']):<17} "
            f"{nums(s['duplicates']):<11} {nums(s['lost']):<7} {s['errors']}"
        )
    return "\n".join(lines)


def _ints(text: str) -> list[int]:
    return [positive_int(x) for x in text.split(",") if x.strip()]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.handover",
        description="Single-active-consumer handover time on a quorum queue (local 3-node "
        "cluster): graceful stop, killed process, frozen process.",
    )
    parser.add_argument("--repeat", type=positive_int, default=3, help="runs per scenario/face")
    parser.add_argument("--rate", type=float, default=500.0, help="publish rate, msg/s")
    parser.add_argument("--warmup", type=positive_int, default=1000,
                        help="messages confirmed (with A active) before the fault")
    parser.add_argument("--tail", type=positive_int, default=500,
                        help="messages published after B's takeover before stopping")
    parser.add_argument("--heartbeat", type=positive_int, default=5,
                        help="heartbeat (s) for graceful and connection-reset")
    parser.add_argument("--frozen-heartbeats", type=_ints, default=[2, 5],
                        help="heartbeats (s) to measure the frozen scenario with")
    parser.add_argument("--scenarios", type=choices(FAULTS), default=None,
                        help=f"comma list of {', '.join(FAULTS)} (default: all); those the "
                        f"series cannot run are left out (priority runs on "
                        f"{', '.join(PRIORITY_SERIES)} only)")
    parser.add_argument("--faces", type=choices(FACES), default=list(FACES))
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds allowed for B's takeover and for draining, per run")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed for the frozen runs' random warm-up phase")
    parser.add_argument("--cluster-name", default="handover", help="LocalCluster name")
    parser.add_argument("--rabbitmq", type=rabbitmq_series, default=DEFAULT_SERIES,
                        help=f"the RabbitMQ series to boot (default {DEFAULT_SERIES}); "
                        "python -m bench.versions compares two in one run")
    args = parser.parse_args(argv)
    if args.rate <= 0:
        parser.error("--rate must be positive")
    args.scenarios = args.scenarios or list(FAULTS)
    if not applicable(args.scenarios, args.rabbitmq):
        parser.error(f"nothing to run on RabbitMQ {args.rabbitmq}: the priority scenario "
                     f"needs {', '.join(PRIORITY_SERIES)} (3.x ignores priorities for single "
                     "active consumer)")
    return args


def applicable(faults: Sequence[Fault], series: str) -> tuple[Fault, ...]:
    """The scenarios of ``faults`` that RabbitMQ ``series`` can run."""
    return tuple(f for f in faults if f != "priority" or series in PRIORITY_SERIES)


def scenarios(args: argparse.Namespace) -> list[Scenario]:
    """What to run: ``args.scenarios`` that ``args.rabbitmq`` can run, frozen once per
    heartbeat of ``--frozen-heartbeats``."""
    out: list[Scenario] = []
    for fault in applicable(args.scenarios, args.rabbitmq):
        if fault == "frozen":
            out += [Scenario("frozen", hb) for hb in args.frozen_heartbeats]
        else:
            out.append(Scenario(fault, args.heartbeat))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    load_before = os.getloadavg()
    plan = scenarios(args)
    print(f"booting a 3-node RabbitMQ {args.rabbitmq} cluster {args.cluster_name!r} ...",
          file=sys.stderr, flush=True)
    with LocalCluster(name=args.cluster_name, nodes=NODES, rabbitmq=args.rabbitmq) as cluster:
        overview = cluster.management().overview()
        results = run_all(Bench(cluster, args), plan, args)
    report = describe(args, started, load_before, overview, results)
    save("handover", started, report, table(report["summary"]))
    return 0


def run_all(bench: Bench, plan: Sequence[Scenario], args: argparse.Namespace,
            ) -> list[RunResult]:
    """Every run of ``plan`` on ``bench``'s cluster, each printed as it ends; rounds
    outermost: a slow spell on the machine hits every scenario alike."""
    results: list[RunResult] = []
    for index in range(args.repeat):
        for scenario in plan:
            for face in args.faces:
                r = bench.run_once(scenario, face, index)
                results.append(r)
                print(
                    f"  {r.scenario:<17} {r.face:<9} run {index + 1}: handover "
                    f"{_fmt(r.handover_s)} s, gap {_fmt(r.gap_s)} s, published {r.published}, "
                    f"A {r.handled_a}, B {r.handled_b}, dups {r.duplicates}, lost {r.lost}"
                    + (f", errors: {r.errors}" if r.errors else ""),
                    file=sys.stderr, flush=True,
                )
    return results


def describe(args: argparse.Namespace, started: dt.datetime, load_before: Sequence[float],
             overview: OverviewInfo, results: Sequence[RunResult]) -> dict[str, Any]:
    """The JSON report of a run (``bench.versions`` writes one per RabbitMQ series)."""
    summary = summarize(results)
    return {
        "benchmark": "single-active-consumer handover",
        "timestamp": started.isoformat(timespec="seconds"),
        "queue": {"type": "quorum", "single_active_consumer": True},
        "rate_msg_per_s": args.rate,
        "warmup_messages": args.warmup,
        "frozen_warmup_jitter": "plus uniform 0..heartbeat s of messages (random phase)",
        "seed": args.seed,
        "tail_messages": args.tail,
        "prefetch": PREFETCH,
        "repeat": args.repeat,
        "statistic": "median/min/max of handover_s over the runs of a scenario and face",
        "placement": {"publisher": "node 1 (queue leader)", "A": "node 2", "B": "node 3"},
        "a_runner": {"graceful": "in process", "other": "sac.chaos.actors.consumer"},
        "left_out": {f: f"RabbitMQ {args.rabbitmq} cannot run it" for f in args.scenarios
                     if f not in applicable(args.scenarios, args.rabbitmq)},
        "priority": {"b_priority": B_PRIORITY, "a_priority": "the broker's default (0)",
                     "timed_from": "B's start() call"},
        **conditions(overview, NODES, load_before),
        "summary": summary,
        "runs": [asdict(r) for r in results],
    }


if __name__ == "__main__":
    sys.exit(main())
