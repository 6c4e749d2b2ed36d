"""What the simulated broker itself promises, checked after a run: a message it committed
is never lost. It is still in a queue (ready, unacked, or waiting to be dead-lettered), or
a consumer acked it, or it left by a rule the queue was given (dropped past the delivery
limit without a dead-letter target, deleted by an operator)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import attrs

from .broker import TIMED_OUT
from .world import World

ALLOWED_FATES = ("acked from ", "deleted from ", "dropped from ")


def broker_violations(world: World) -> list[str]:
    broker = world.broker
    held = {m.uid for q in broker.queues.values() for m in q.holding()}
    held |= {m.uid for pending in broker.dlx_pending.values() for m in pending}
    for log in broker.logs.values():
        held |= {cmd.message.uid for cmd in log.pending if cmd.message is not None}
    problems = []
    for uid, message in broker.committed.items():
        fate = broker.fate.get(uid)
        if uid in held or (fate is not None and fate.startswith(ALLOWED_FATES)):
            continue
        problems.append(f"committed message uid={uid} id={message.properties.message_id!r} "
                        f"was lost ({fate or 'no trace of it'})")
    return problems


# ------------------------------------------------------------------ the SDK's engines
#
# What ``sac sim`` checks after each run of the real engines (``sim.workload``). Each check
# judges from the outside: what the broker took, settled and committed (its trace), what the
# store committed (its ledger), what the publisher wrote and heard on the wire; never the
# engines' own bookkeeping, except to know what the publisher's caller was told.


def first_times(world: World, kind: str, queue: str) -> dict[int, float]:
    """uid -> when the broker first did ``kind`` (``commit``) for it in ``queue``."""
    seen: dict[int, float] = {}
    for entry in world.trace.of(kind):
        if entry.get("queue") == queue:
            seen.setdefault(entry.get("uid"), entry.t)
    return seen


def message_id(world: World, uid: int) -> str | None:
    message = world.broker.committed.get(uid)
    return None if message is None else message.properties.message_id


def parked_at(world: World, parking: str) -> dict[str, float]:
    """Message id -> when a copy of it was first committed in the parking queue (parked by
    a consumer, or dead-lettered by the broker)."""
    parked: dict[str, float] = {}
    for uid, t in first_times(world, "commit", parking).items():
        mid = message_id(world, uid)
        if mid is not None:
            parked.setdefault(mid, t)
    return parked


def committed_at(world: World, queue: str) -> dict[str, float]:
    """Message id -> when its effect was first committed in the dedup store."""
    done: dict[str, float] = {}
    for entry in world.store.ledger:
        if entry.queue == queue:
            done.setdefault(entry.message_id, entry.t)
    return done


def nothing_confirmed_lost(world: World, confirmed: Iterable[str], queue: str,
                           parking: str) -> list[str]:
    """Every message the publisher was told is confirmed ends committed or parked."""
    done, parked = committed_at(world, queue), parked_at(world, parking)
    return [f"{mid} was confirmed but is neither committed nor parked at the end"
            for mid in confirmed if mid not in done and mid not in parked]


def no_ack_before_commit(world: World, queue: str, parking: str) -> list[str]:
    """The broker received a consumer's ack of a message only after its effect was
    committed (or a copy of it parked)."""
    done, parked = committed_at(world, queue), parked_at(world, parking)
    problems = []
    for entry in world.trace.of("settle"):
        if entry.get("how") != "ack":
            continue
        for uid in entry.get("uids"):
            mid = message_id(world, uid)
            if mid is None:
                continue
            since = min(done.get(mid, math.inf), parked.get(mid, math.inf))
            if since > entry.t:
                problems.append(f"{mid} (uid {uid}) was acked by {entry.get('conn')} at "
                                f"t={entry.t:.4f} before its effect was committed or parked "
                                f"({'never' if since == math.inf else f't={since:.4f}'})")
    return problems


def one_effect_per_id(world: World) -> list[str]:
    counts = Counter((e.queue, e.message_id) for e in world.store.ledger)
    return [f"{mid} had its effect committed {n} times in {queue}"
            for (queue, mid), n in counts.items() if n > 1]


def one_consumer_per_epoch(world: World) -> list[str]:
    holders: dict[tuple[str, int], list[str]] = {}
    for e in world.store.ledger:
        who = holders.setdefault((e.queue, e.epoch), [])
        if e.consumer is not None and e.consumer not in who:
            who.append(e.consumer)
    return [f"epoch {epoch} of {queue} committed by {len(who)} consumers: {', '.join(who)}"
            for (queue, epoch), who in holders.items() if len(who) > 1]


@attrs.frozen(kw_only=True)
class Sent:
    """One publish as written on the wire."""

    link: str
    tag: int
    message_id: str
    mark: int | None


@attrs.frozen(kw_only=True)
class Settled:
    """One confirm or nack as received."""

    link: str
    tag: int
    multiple: bool
    ack: bool


def retransmitted_with_mark(sent: Sequence[Sent], settled: Sequence[Settled],
                            told_failed: Iterable[str]) -> list[str]:
    """A message sent again carries ``x-sac-retransmit`` = its earlier sends (a first send
    none), and every message left without a confirm (its link lost, or nacked) is sent
    again, unless its caller was told it failed."""
    problems = []
    sends: Counter[str] = Counter()
    for s in sent:
        expected = sends[s.message_id] or None
        if s.mark != expected:
            problems.append(f"{s.message_id} went out on {s.link} (tag {s.tag}) with mark "
                            f"{s.mark!r}, expected {expected!r}")
        sends[s.message_id] += 1
    resolved: dict[tuple[str, int], bool] = {}
    by_link: dict[str, list[Sent]] = {}
    for s in sent:
        by_link.setdefault(s.link, []).append(s)
    for c in settled:
        for s in by_link.get(c.link, ()):
            if s.tag == c.tag or (c.multiple and s.tag < c.tag):
                resolved.setdefault((c.link, s.tag), c.ack)
    failed = set(told_failed)
    later: Counter[str] = Counter()
    for s in reversed(sent):
        if (not resolved.get((s.link, s.tag), False) and s.message_id not in failed
                and not later[s.message_id]):
            how = "nacked" if (s.link, s.tag) in resolved else "left unconfirmed"
            problems.append(f"{s.message_id} was {how} on {s.link} (tag {s.tag}) and "
                            f"never sent again, nor its caller told")
        later[s.message_id] += 1
    return problems


def no_protocol_errors(world: World) -> list[str]:
    """The broker never had to close a channel or connection over what a client sent (an
    unknown delivery tag, a second ack, a consumer tag reused): the engines speak AMQP
    correctly under every fault. A consumer timeout's close (up to RabbitMQ 4.2) is the
    broker's rule for a consumer that held a delivery too long, not a protocol error."""
    return [f"the broker closed {e.get('conn')}'s "
            f"{'channel ' + str(e.get('channel')) if e.kind == 'channel_error' else 'connection'}"
            f" at t={e.t:.4f}: {e.get('text')}"
            for e in world.trace.of("channel_error", "connection_error")
            if not str(e.get("text")).startswith(f"PRECONDITION_FAILED - {TIMED_OUT}")]


def copies_are_flagged(world: World, queue: str, mark: str) -> list[str]:
    """A message id delivered again is flagged as a possible copy (``redelivered``, an
    ``x-delivery-count``, or the publisher's ``mark`` header): what an inbox's default
    lookup policy relies on to look it up."""
    delivered: set[str] = set()
    problems = []
    for entry in world.trace.of("deliver"):
        if entry.get("queue") != queue:
            continue
        message = world.broker.committed.get(entry.get("uid"))
        if message is None or message.properties.message_id is None:
            continue
        mid = message.properties.message_id
        flagged = (entry.get("redelivered") or entry.get("count")
                   or message.properties.header(mark) is not None)
        if mid in delivered and not flagged:
            problems.append(f"{mid} was delivered again to {entry.get('conn')} at "
                            f"t={entry.t:.4f} without a flag (uid {entry.get('uid')}): an "
                            f"inbox would not look it up")
        delivered.add(mid)
    return problems


@attrs.frozen(kw_only=True)
class Span:
    """A consumer process's worker had a run in hand from ``start`` to ``end`` (None: the
    process died with it)."""

    process: str
    start: float
    end: float | None


def clean_handovers(world: World, client: str, stops: Sequence[tuple[str, float]],
                    spans: Sequence[Span], losses: Sequence[tuple[str, float]],
                    activations: Sequence[tuple[str, float]]) -> list[str]:
    """A consumer that stops gracefully hands the queue over cleanly: the broker makes
    another consumer active only once the stopping one's last run ended (unless the broker
    took the queue away since it last became active, a lost link or a server cancel: then
    fencing is what keeps the two apart). ``stops``: (process, when) of each graceful stop
    of ``client``; ``losses``: (process, when) of each time the queue was taken away from
    it; ``activations``: (process, when) of each time it became active."""
    problems = []
    for process, began in stops:
        mine = [s for s in spans if s.process == process]
        if any(s.end is None for s in mine):
            continue
        late = [s for s in mine if s.end is not None and s.end > began]
        if not late:
            continue
        until = max(s.end for s in late if s.end is not None)
        # Since it last became active: a server cancel before the stop already handed the
        # queue over, whatever the process went on running.
        since = max((t for p, t in activations if p == process and t <= began), default=0.0)
        if any(p == process and since <= t <= until for p, t in losses):
            continue
        for entry in world.trace.of("active"):
            conn = str(entry.get("conn"))
            if began <= entry.t < until and not conn.startswith(client + "#"):
                problems.append(f"{conn} became active at t={entry.t:.4f} while {process}, "
                                f"stopping since t={began:.4f}, still ran a batch until "
                                f"t={until:.4f}")
    return problems
