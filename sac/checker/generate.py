"""Synthetic run directories (``SPEC.md``): realistic, deterministic, of any size.

A run is simulated message by message in publish order. Publishers publish and get confirms,
now and then a ``nack`` or a lost connection followed by a ``retransmit`` of the same id (whose
second copy may reach the consumer, which skips it with ``duplicate_skipped``). Each queue has
one active consumer at a time that delivers, commits and acks; every so often, and at each
``reset_peer``/``kill_node`` fault of the ``nemesis``, the queue is handed over to another of
its consumers after a gap, with a new epoch (the new one's ``active`` event); sometimes the old
one is a zombie that delivered a message and gets ``commit_rejected`` (stale epoch) for it
later; sometimes the old one is still processing when the broker hands the queue over, and
commits (accepted: no claim yet) after the new one's first deliveries but before its claim,
which its effects wait for; sometimes the old one crashes holding a message, which the broker
gives back to the new one behind a later message of its publisher (a failure's return: not
``reordered``). A clean run is valid.

``inject`` adds anomalies whose ids (and lines) are written to ``RUN/injected.json`` so that a
test can check each one is found:

- ``lost``: a confirmed message is delivered and acked but never committed (no effect row);
- ``duplicated``: a message is committed a second time by its consumer;
- ``unexpected``: a consumer commits an id that no publisher published;
- ``concurrent``: another consumer processes the next message of the queue while the active
  one is still processing (one overlapping pair, both ids);
- ``reordered``: the active consumer hands the queue over gracefully (a client cancel) while
  holding a message, which reaches the next consumer behind its publisher's next one (the
  held message's id);
- ``truncated`` / ``malformed``: an ``ack`` line is cut short / has a string ``ts``;
- ``unknown``: an event of a type the spec does not know;
- ``no_effects``: no ``effects.jsonl`` (the effects are then the commit events).

Memory stays bounded whatever the size: every line goes to its file as soon as no earlier
event of that actor can still come (a heap ordered by time, flushed up to the current publish
time, so each file is in time order as a real actor's would be).

    python -m sac.checker.generate runs/big --events 10000000 --seed 7 --queues 4 --consumers 8
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import random
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sac import history as h
from . import spec

INJECTIONS = (
    "lost",
    "duplicated",
    "unexpected",
    "concurrent",
    "reordered",
    "truncated",
    "malformed",
    "unknown",
    "no_effects",
)
INJECTED_FILE = "injected.json"
UNKNOWN_TYPE = "heartbeat_missed"

T0 = 1_700_000_000.0
"""The default ``start``: the first message's publish time (2023-11-14 22:13:20 UTC)."""
NEMESIS = "nemesis"
ROGUE = "consumer-rogue"
FAULTS = ("reset_peer", "latency", "kill_node", "timeout")
HANDOVER_FAULTS = frozenset({"reset_peer", "kill_node"})

# Time constants (seconds): a busy but unsaturated system, ~1000 messages per second.
PUBLISH_GAP_MEAN = 0.001
NETWORK = (0.0002, 0.002)
CONFIRM = (0.0003, 0.003)
PROCESS = (0.0001, 0.0006)
ACK = (0.00002, 0.0001)
HANDOVER_GAP = (0.05, 0.3)
HANDED = (0.001, 0.01)
"""From the old consumer's lost connection to the broker's first delivery to the new one."""
FAULT_DURATION = (0.05, 0.5)
# Per message (a handover per queue): rare enough that the backlog always drains.
P_HANDOVER = 1 / 2500
P_ZOMBIE = 0.3
P_LATE_CLAIM = 0.5
"""Of the handovers to another consumer: the old one is still processing and commits after
the new one's first deliveries, before its claim (``late_claim``)."""
P_NACK = 0.004
P_RECONNECT = 0.002
P_COPY_ARRIVED = 0.5
P_CRASH_BACK = 0.3
"""Of the handovers: the old consumer crashes holding a message that comes back late."""

_EVENTS_PER_MESSAGE = 6
"""Events per message, rounded up (it is about 5): injection targets are picked among the
first ``events / 6`` messages, so they are reached before ``events`` events are."""


@dataclass
class Injected:
    """What was injected and where: the verdict must report each of these."""

    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    concurrent: list[dict[str, Any]] = field(default_factory=list)
    """``{"queue", "msgs"}`` of each overlapping pair."""
    reordered: list[str] = field(default_factory=list)
    malformed: list[dict[str, Any]] = field(default_factory=list)
    """``{"file", "line"}`` of each corrupted line."""
    unknown_events: dict[str, int] = field(default_factory=dict)
    effects_file: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {
            "lost": sorted(self.lost),
            "duplicated": sorted(self.duplicated),
            "unexpected": sorted(self.unexpected),
            "concurrent": self.concurrent,
            "reordered": sorted(self.reordered),
            "malformed": sorted(self.malformed, key=lambda m: (m["file"], m["line"])),
            "unknown_events": self.unknown_events,
            "effects_file": self.effects_file,
        }


@dataclass(frozen=True)
class GeneratedRun:
    path: Path
    events: int
    """Event lines written (injected bad lines included)."""
    messages: int
    effects: int
    injected: Injected


class _Writer:
    """Event lines per actor, written in time order; effect rows as they are committed."""

    def __init__(self, root: Path, actors: Sequence[str], effects: bool) -> None:
        self.root = root
        (root / spec.EVENTS_DIR).mkdir(parents=True, exist_ok=True)
        self.actors = list(actors)
        self.index = {actor: i for i, actor in enumerate(self.actors)}
        self.files: list[IO[str]] = [
            (root / spec.EVENTS_DIR / f"{a}.jsonl").open("w", buffering=1 << 20)
            for a in self.actors
        ]
        self.lines = [0] * len(self.actors)
        self.effects: IO[str] | None = (
            (root / spec.EFFECTS_FILE).open("w", buffering=1 << 20) if effects else None
        )
        self.heap: list[tuple[float, int, int, str, str]] = []
        self.order = itertools.count()
        self.events = 0
        self.effect_rows = 0
        self.corrupted: list[dict[str, Any]] = []

    def add_actor(self, actor: str) -> None:
        self.index[actor] = len(self.actors)
        self.actors.append(actor)
        self.files.append((self.root / spec.EVENTS_DIR / f"{actor}.jsonl").open("w"))
        self.lines.append(0)

    def event(self, ts: float, actor: str, kind: str, rest: str = "", corrupt: str = "") -> None:
        """Queue an event line; ``rest`` is the extra fields, JSON, with a leading ``, ``."""
        line = f'{{"ts": {ts!r}, "actor": "{actor}", "type": "{kind}"{rest}}}\n'
        heapq.heappush(self.heap, (ts, next(self.order), self.index[actor], line, corrupt))
        self.events += 1

    def effect(self, ts: float, actor: str, msg: str, epoch: int) -> None:
        if self.effects is not None:
            self.effects.write(
                f'{{"msg": "{msg}", "actor": "{actor}", "epoch": {epoch}, "ts": {ts!r}}}\n'
            )
        self.effect_rows += 1

    def flush(self, upto: float) -> None:
        """Write every queued line with ``ts <= upto`` (no later call adds an earlier one)."""
        heap = self.heap
        while heap and heap[0][0] <= upto:
            _, _, actor, line, corrupt = heapq.heappop(heap)
            self.lines[actor] += 1
            if corrupt:
                line = _corrupt(line, corrupt)
                self.corrupted.append(
                    {
                        "file": f"{spec.EVENTS_DIR}/{self.actors[actor]}.jsonl",
                        "line": self.lines[actor],
                    }
                )
            self.files[actor].write(line)

    def close(self) -> None:
        self.flush(float("inf"))
        for f in self.files:
            f.close()
        if self.effects is not None:
            self.effects.close()


def _corrupt(line: str, how: str) -> str:
    if how == "truncated":
        # Any strict prefix of an object line is invalid JSON; keep at least "{".
        return line[: max(1, len(line) // 2)] + "\n"
    return line.replace('"ts": ', '"ts": "', 1).replace(', "actor"', '", "actor"', 1)


@dataclass
class _Queue:
    name: str
    consumers: list[str]
    active: str
    free: float
    """When the active consumer can take the next message."""
    epoch: int = 1
    handover_due: bool = False


class _Simulation:
    """The state of a run being generated; ``step`` writes one message's story."""

    def __init__(
        self,
        writer: _Writer,
        rng: random.Random,
        publishers: list[str],
        queues: list[_Queue],
        injected: Injected,
        start: float,
    ) -> None:
        self.w = writer
        self.rng = rng
        self.publishers = publishers
        self.queues = queues
        self.injected = injected
        self.seq = dict.fromkeys(publishers, 0)
        self.publisher_free = dict.fromkeys(publishers, start)
        self.t = start
        self.last_publisher = publishers[0]
        """Who published the last message (a ``reordered`` pair has one publisher)."""
        self.copy_at: float | None = None
        """When a second copy of the message just published reaches the queue, if one does."""

    def u(self, bounds: tuple[float, float]) -> float:
        return self.rng.uniform(*bounds)

    def publish(self, msg: str, queue: str, plain: bool, publisher: str | None = None) -> float:
        """Publish ``msg`` (with a nack or a reconnect unless ``plain``); when it can arrive.

        Returns the time the copy that gets processed is in the queue; a second copy, if
        any, is queued with ``self.copy_at``.
        """
        w, rng = self.w, self.rng
        pub = publisher or rng.choice(self.publishers)
        self.last_publisher = pub
        ts = max(self.t, self.publisher_free[pub])
        self.seq[pub] += 1
        w.event(ts, pub, h.Publish.KIND,
                f', "msg": "{msg}", "seq": {self.seq[pub]}, "queue": "{queue}"')
        self.copy_at = None
        roll = rng.random() if not plain else 1.0
        if roll < P_NACK:
            nack = ts + self.u(CONFIRM)
            w.event(nack, pub, h.Nack.KIND, f', "msg": "{msg}"')
            return self._retransmit(pub, msg, nack + rng.uniform(0.005, 0.03))
        if roll < P_NACK + P_RECONNECT:
            lost = ts + rng.uniform(0.0002, 0.001)
            w.event(lost, pub, h.ConnectionLost.KIND,
                    ', "node": "rabbit-1:5672", "reason": "reset"')
            back = lost + rng.uniform(0.02, 0.1)
            w.event(back, pub, h.Connected.KIND, ', "node": "rabbit-2:5672", "reason": "reconnect"')
            self.publisher_free[pub] = back
            arrival = self._retransmit(pub, msg, back + 0.0001)
            if rng.random() < P_COPY_ARRIVED:
                self.copy_at = arrival
                return ts + self.u(NETWORK)
            return arrival
        w.event(ts + self.u(CONFIRM), pub, h.Confirm.KIND, f', "msg": "{msg}"')
        return ts + self.u(NETWORK)

    def _retransmit(self, pub: str, msg: str, ts: float) -> float:
        self.seq[pub] += 1
        self.w.event(ts, pub, h.Retransmit.KIND, f', "msg": "{msg}", "seq": {self.seq[pub]}')
        self.w.event(ts + self.u(CONFIRM), pub, h.Confirm.KIND, f', "msg": "{msg}"')
        return ts + self.u(NETWORK)

    def process(
        self,
        q: _Queue,
        msg: str,
        arrival: float,
        *,
        actor: str | None = None,
        redelivered: bool = False,
        commit: bool = True,
        corrupt: str = "",
    ) -> tuple[float, float]:
        """Deliver, commit (unless not ``commit``) and ack ``msg``; its (deliver, commit)."""
        who = actor or q.active
        d = max(q.free, arrival)
        self.deliver(d, who, msg, redelivered)
        c = d + self.u(PROCESS)
        if commit:
            self.commit(c, who, msg, q.epoch)
        ack = c + self.u(ACK)
        self.w.event(ack, who, h.Ack.KIND, f', "msg": "{msg}"', corrupt)
        q.free = ack
        return d, c

    def deliver(self, ts: float, who: str, msg: str, redelivered: bool = False) -> None:
        count = "2" if redelivered else "null"
        self.w.event(
            ts,
            who,
            h.Deliver.KIND,
            f', "msg": "{msg}", "redelivered": {"true" if redelivered else "false"}, '
            f'"delivery_count": {count}',
        )

    def commit(self, ts: float, who: str, msg: str, epoch: int) -> None:
        """A commit event and its effect row."""
        self.w.event(ts, who, h.Commit.KIND, f', "msg": "{msg}", "epoch": {epoch}')
        self.w.effect(ts, who, msg, epoch)

    def skip_copy(self, q: _Queue, msg: str, arrival: float) -> None:
        """The retransmitted copy reaches the consumer, which has seen the id."""
        d = max(q.free, arrival)
        self.deliver(d, q.active, msg)
        self.skip_seen(q, msg, d + 0.00001)

    def skip_seen(self, q: _Queue, msg: str, ts: float) -> None:
        """The active consumer's dedup skips ``msg`` (an id it has seen) at ``ts``, acks it."""
        self.w.event(ts, q.active, h.DuplicateSkipped.KIND, f', "msg": "{msg}", "why": "id-seen"')
        ack = ts + self.u(ACK)
        self.w.event(ack, q.active, h.Ack.KIND, f', "msg": "{msg}"')
        q.free = ack

    def handover(self, q: _Queue, next_msg: str, arrival: float) -> bool:
        """Hand ``q`` to another consumer after a gap; True when the old one is a zombie that
        delivered ``next_msg`` (the new one then gets it redelivered)."""
        w, rng = self.w, self.rng
        old = q.active
        others = [c for c in q.consumers if c != old]
        zombie = bool(others) and rng.random() < P_ZOMBIE
        now = max(q.free, self.t)
        if zombie:
            now = max(now, arrival)
            self.deliver(now, old, next_msg)
        lost = self.lose(old, now)
        start = self.claim(q, rng.choice(others) if others else old, lost + self.u(HANDOVER_GAP))
        back = start + 0.001
        if zombie:
            w.event(
                back,
                old,
                h.CommitRejected.KIND,
                f', "msg": "{next_msg}", "epoch": {q.epoch - 1}, "why": "stale-epoch"',
            )
            back += 0.001
        self.come_back(q, old, back)
        return zombie

    def late_claim(self, q: _Queue, msg: str, arrival: float, second: str) -> None:
        """Hand ``q`` over while its active consumer is still processing ``msg``.

        The broker requeues ``msg`` and hands the queue over at once: the new consumer is
        delivered ``msg`` again and then ``second`` before its inbox claims the new epoch
        (``active``); the old one's commit of ``msg`` lands in between, accepted (no claim
        yet). After its claim the new one skips ``msg`` (seen) and processes ``second``.
        Serial processing, though the old commit is after the new one's first delivers.
        """
        old = q.active
        second_arrival = self.publish(second, q.name, plain=True)
        d = max(q.free, arrival)
        self.deliver(d, old, msg)
        lost = self.lose(old, d)
        new = self.rng.choice([c for c in q.consumers if c != old])
        handed = lost + self.u(HANDED)
        self.deliver(handed, new, msg, redelivered=True)
        d2 = max(handed, second_arrival) + 0.00005
        self.deliver(d2, new, second)
        c = d2 + self.u(PROCESS)
        self.commit(c, old, msg, q.epoch)
        start = self.claim(q, new, max(lost + self.u(HANDOVER_GAP), c + 0.001))
        self.skip_seen(q, msg, start + 0.00001)
        c2 = q.free + self.u(PROCESS)
        self.commit(c2, new, second, q.epoch)
        q.free = c2 + self.u(ACK)
        self.w.event(q.free, new, h.Ack.KIND, f', "msg": "{second}"')
        self.come_back(q, old, start + 0.001)

    def hand_back(self, q: _Queue, msg: str, arrival: float, second: str, new: str,
                  graceful: bool) -> None:
        """The active consumer holds ``msg`` (delivered, not started) and leaves: gracefully
        (its client cancels) or not (its connection is lost). ``new`` claims the queue and is
        handed its publisher's next message ``second`` first; ``msg`` comes back after it,
        redelivered. Reordered when ``graceful`` (the old stop order), a failure's return
        otherwise."""
        w, old = self.w, q.active
        second_arrival = self.publish(second, q.name, plain=True, publisher=self.last_publisher)
        d = max(q.free, arrival)
        self.deliver(d, old, msg)
        if graceful:
            gone = d + 0.0001
            w.event(gone, old, h.Cancelled.KIND, f', "queue": "{q.name}", "by": "client"')
        else:
            gone = self.lose(old, d)
        start = self.claim(q, new, gone + self.u(HANDED))
        for m, at, again in ((second, second_arrival, False), (msg, start, True)):
            delivered = max(q.free, at) + 0.00005
            self.deliver(delivered, new, m, redelivered=again)
            c = delivered + self.u(PROCESS)
            self.commit(c, new, m, q.epoch)
            q.free = c + self.u(ACK)
            w.event(q.free, new, h.Ack.KIND, f', "msg": "{m}"')
        if old != new:
            self.come_back(q, old, q.free + 0.001)

    def lose(self, old: str, now: float) -> float:
        """``old``'s connection is found dead (missed heartbeats) just after ``now``."""
        lost = now + 0.0005
        self.w.event(
            lost, old, h.ConnectionLost.KIND, ', "node": "rabbit-1:5672", "reason": "heartbeat"'
        )
        return lost

    def claim(self, q: _Queue, new: str, start: float) -> float:
        """``new`` claims ``q`` with the next epoch at ``start`` (its ``active`` event)."""
        q.active = new
        q.epoch += 1
        self.w.event(start, new, h.Active.KIND, f', "queue": "{q.name}", "epoch": {q.epoch}')
        q.free = start
        return start

    def come_back(self, q: _Queue, old: str, back: float) -> None:
        """``old`` reconnects and subscribes again, a standby now."""
        self.w.event(back, old, h.Connected.KIND,
                     ', "node": "rabbit-2:5672", "reason": "reconnect"')
        self.w.event(back + 0.0001, old, h.Subscribed.KIND,
                     f', "queue": "{q.name}", "by": "client"')
        q.handover_due = False


def generate_run(
    path: Path,
    *,
    events: int = 10_000,
    seed: int = 0,
    publishers: int = 2,
    consumers: int = 3,
    queues: int = 1,
    faults: int = 2,
    inject: Iterable[str] = (),
    start: float = T0,
) -> GeneratedRun:
    """Write a run of at least ``events`` events to ``path`` (created); what it holds.

    ``consumers`` are spread over ``queues`` (consumer ``k`` on queue ``k % queues``), so
    there must be at least as many; ``inject`` names anomalies from ``INJECTIONS`` (repeat a
    name to inject it several times). ``start`` is when publishing starts (Unix seconds;
    the clients connect a second earlier): a start just before a UTC midnight spreads a
    short run over two days, as ``sac audit`` counts them.

    >>> generate_run(Path("/tmp/r"), events=1000, inject=["lost"]).injected.lost  # doctest: +SKIP
    ['m-0000000042']
    """
    inject = list(inject)
    unknown = sorted(set(inject) - set(INJECTIONS))
    if unknown:
        raise ValueError(f"unknown injections {unknown}; known: {', '.join(INJECTIONS)}")
    if queues < 1 or publishers < 1 or consumers < queues:
        raise ValueError("need at least one queue, one publisher and a consumer per queue")
    if path.exists() and any(path.iterdir()):
        # Files of an earlier run (another actor's events) would silently join this one.
        raise FileExistsError(f"{path} is not empty")
    rng = random.Random(seed)
    queue_names = [f"queue-{j}" for j in range(queues)]
    consumer_names = [f"consumer-{k}" for k in range(consumers)]
    publisher_names = [f"publisher-{p}" for p in range(publishers)]
    qs = [
        _Queue(name, consumers=consumer_names[j::queues], active=consumer_names[j], free=start)
        for j, name in enumerate(queue_names)
    ]
    injected = Injected(effects_file="no_effects" not in inject)
    path.mkdir(parents=True, exist_ok=True)
    writer = _Writer(path, [*publisher_names, *consumer_names, NEMESIS], injected.effects_file)
    sim = _Simulation(writer, rng, publisher_names, qs, injected, start)

    for actor in [*publisher_names, *consumer_names]:
        writer.event(
            start - 1.0, actor, h.Connected.KIND, ', "node": "rabbit-1:5672", "reason": "start"'
        )
    for q in qs:
        for c in q.consumers:
            writer.event(start - 0.5, c, h.Subscribed.KIND,
                         f', "queue": "{q.name}", "by": "client"')
        writer.event(start - 0.1, q.active, h.Active.KIND, f', "queue": "{q.name}", "epoch": 1')

    planned = max(1, events // _EVENTS_PER_MESSAGE)
    targets = _targets(rng, [i for i in inject if i != "no_effects"], planned)
    fault_at = {(k + 1) * planned // (faults + 1): k for k in range(faults)}
    last_target = max(targets, default=-1) + 1
    fault_ends: list[float] = []
    i = 0
    while writer.events < events or i <= last_target:
        sim.t += rng.expovariate(1 / PUBLISH_GAP_MEAN)
        if i in fault_at:
            fault_ends.append(_fault(sim, fault_at[i]))
        q = rng.choice(qs)
        i += _step(sim, q, i, targets.get(i, ""), i + 1 not in targets)
        writer.flush(sim.t)
    for q in qs:
        writer.flush(q.free)
    writer.close()

    injected.malformed = writer.corrupted
    if "unknown" in inject:
        injected.unknown_events = {UNKNOWN_TYPE: inject.count("unknown")}
    (path / INJECTED_FILE).write_text(json.dumps(injected.as_dict(), indent=1) + "\n")
    end = max([sim.t, *fault_ends, *(q.free for q in qs)])
    run = {
        "scenario": "synthetic",
        "seed": seed,
        "parameters": {
            "events": events,
            "publishers": publishers,
            "consumers": consumers,
            "queues": queues,
            "faults": faults,
            "inject": inject,
        },
        "topology": {q.name: q.consumers for q in qs},
        "single_active_queues": queue_names,
        "start": start - 1.0,
        "end": end,
    }
    (path / spec.RUN_FILE).write_text(json.dumps(run, indent=1) + "\n")
    return GeneratedRun(path, writer.events, i, writer.effect_rows, injected)


def _targets(rng: random.Random, names: list[str], planned: int) -> dict[int, str]:
    """Message index -> injection. Multiples of 3, so a ``concurrent`` target's next message
    (which it uses) is never a target itself; past ``planned`` when there are many."""
    slots = max(planned, 3 * len(names) + 3)
    chosen = rng.sample(range(3, slots, 3), len(names)) if names else []
    return dict(zip(chosen, names, strict=True))


def _fault(sim: _Simulation, k: int) -> float:
    """Start fault number ``k`` now; return when it ends."""
    kind = FAULTS[k % len(FAULTS)]
    if kind in HANDOVER_FAULTS:
        q = sim.queues[k % len(sim.queues)]
        target = q.active
        q.handover_due = True
    else:
        target = sim.rng.choice(sim.publishers)
    end = sim.t + sim.u(FAULT_DURATION)
    rest = f', "fault": "{kind}", "target": "{target}", "params": {{}}'
    sim.w.event(sim.t, NEMESIS, h.FaultStart.KIND, rest)
    sim.w.event(end, NEMESIS, h.FaultEnd.KIND, rest)
    return end


def _step(sim: _Simulation, q: _Queue, i: int, target: str, next_free: bool) -> int:
    """One message (two for a ``concurrent`` target or a late claim, which takes the next
    index when ``next_free``); how many message indexes it used."""
    msg = f"m-{i:010d}"
    arrival = sim.publish(msg, q.name, plain=bool(target))
    copy_at = sim.copy_at
    redelivered = False
    if not target and (q.handover_due or sim.rng.random() < P_HANDOVER * len(sim.queues)):
        late = next_free and len(q.consumers) > 1 and sim.rng.random() < P_LATE_CLAIM
        if not late and next_free and len(q.consumers) > 1 and sim.rng.random() < P_CRASH_BACK:
            new = sim.rng.choice([c for c in q.consumers if c != q.active])
            sim.hand_back(q, msg, arrival, f"m-{i + 1:010d}", new, graceful=False)
            if copy_at is not None:
                sim.skip_copy(q, msg, copy_at)
            return 2
        if late:
            sim.late_claim(q, msg, arrival, f"m-{i + 1:010d}")
            if copy_at is not None:
                sim.skip_copy(q, msg, copy_at)
            return 2
        redelivered = sim.handover(q, msg, arrival)
    if target == "concurrent":
        _concurrent(sim, q, i, msg, arrival)
        return 2
    if target == "reordered":
        new = ([c for c in q.consumers if c != q.active] or [q.active])[0]
        sim.hand_back(q, msg, arrival, f"m-{i + 1:010d}", new, graceful=True)
        sim.injected.reordered.append(msg)
        return 2
    corrupt = target if target in ("truncated", "malformed") else ""
    sim.process(q, msg, arrival, redelivered=redelivered, commit=target != "lost", corrupt=corrupt)
    if copy_at is not None:
        sim.skip_copy(q, msg, copy_at)
    if target == "lost":
        sim.injected.lost.append(msg)
    elif target == "duplicated":
        sim.process(q, msg, q.free, redelivered=True)
        sim.injected.duplicated.append(msg)
    elif target == "unexpected":
        ghost = f"x-{i:010d}"
        sim.process(q, ghost, q.free)
        sim.injected.unexpected.append(ghost)
    elif target == "unknown":
        sim.w.event(q.free, q.active, UNKNOWN_TYPE, "")
    return 1


def _concurrent(sim: _Simulation, q: _Queue, i: int, msg: str, arrival: float) -> None:
    """``msg`` by the active consumer while another one processes the next message."""
    w = sim.w
    second = f"m-{i + 1:010d}"
    second_arrival = sim.publish(second, q.name, plain=True)
    # Preferably a standby of this queue, else any other consumer, else one more actor.
    others = [c for c in q.consumers if c != q.active] or [
        c for other in sim.queues for c in other.consumers if c != q.active
    ]
    rogue = others[0] if others else ROGUE
    if rogue not in w.index:
        w.add_actor(rogue)
    d = max(q.free, arrival)
    d2 = max(second_arrival, d) + 0.00005
    c = max(d + sim.u(PROCESS), d2 + 0.0002)
    c2 = c + 0.0003
    for who, m, start, end in ((q.active, msg, d, c), (rogue, second, d2, c2)):
        sim.deliver(start, who, m)
        sim.commit(end, who, m, q.epoch)
        w.event(end + 0.0001, who, h.Ack.KIND, f', "msg": "{m}"')
    q.free = c2 + 0.0001
    sim.injected.concurrent.append({"queue": q.name, "msgs": [msg, second]})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sac.checker.generate", description="Write synthetic run directories."
    )
    parser.add_argument("dir", type=Path, help="the run directory (with --runs: their parent)")
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--publishers", type=int, default=2)
    parser.add_argument("--consumers", type=int, default=3)
    parser.add_argument("--queues", type=int, default=1)
    parser.add_argument("--faults", type=int, default=2)
    parser.add_argument("--inject", action="append", default=[], choices=INJECTIONS)
    parser.add_argument("--runs", type=int, default=0, help="write DIR/run-0000... (seed+i)")
    parser.add_argument("--start", type=float, default=T0,
                        help="Unix time of the first publish (default: %(default)s)")
    args = parser.parse_args(argv)
    targets = (
        [(args.dir / f"run-{n:04d}", args.seed + n) for n in range(args.runs)]
        if args.runs
        else [(args.dir, args.seed)]
    )
    for path, seed in targets:
        run = generate_run(
            path,
            events=args.events,
            seed=seed,
            publishers=args.publishers,
            consumers=args.consumers,
            queues=args.queues,
            faults=args.faults,
            inject=args.inject,
            start=args.start,
        )
        print(f"{run.path}: {run.events} events, {run.messages} messages, {run.effects} effects")
    return 0


if __name__ == "__main__":
    sys.exit(main())
