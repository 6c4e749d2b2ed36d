"""The reference engine: ``sac/checker/SPEC.md`` in plain Python.

It is the definition the Spark engine is compared against, so it is written to be read next
to the spec rather than to be fast: one pass over the files collects what each rule needs
(``_Collected``), then each part of the verdict is a plain function on lists, in the spec's
order. Memory grows with the number of message ids, not with the size of the files.

    >>> verdict = check_run(Path("runs/r1"))  # doctest: +SKIP
    >>> verdict.valid, verdict.lost            # doctest: +SKIP
    (False, ('m-17',))
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import attrs

from sac.history import (
    ANOMALIES,
    Active,
    Cancelled,
    Commit,
    CommitRejected,
    Confirm,
    Deliver,
    FaultEnd,
    FaultStart,
    Publish,
    Reject,
)
from . import spec
from .runs import (
    Effect,
    Event,
    Findings,
    Run,
    is_integer,
    open_run,
    read_effects,
    read_events,
    require_checkable,
)
from .verdict import Activity, Handover, Latency, Pair, Recovery, Verdict

ENGINE = "python"


@attrs.frozen(kw_only=True)
class Interval:
    """The processing of one effect row: from its last deliver or claim to its commit."""

    queue: str
    actor: str
    start: float
    end: float
    msg: str


@dataclass
class Island:
    """Intervals of one actor on one queue that follow each other with gaps ``<= gap``."""

    queue: str
    actor: str
    start: float
    end: float
    intervals: list[Interval]


@dataclass
class _Collected:
    """What one pass over the events keeps for the rules (per id, not per event)."""

    first_publish: dict[str, float] = field(default_factory=dict)
    queue_publish: dict[str, tuple[float, str]] = field(default_factory=dict)
    """id -> (ts, queue) of its earliest publish that names a queue."""
    confirmed: set[str] = field(default_factory=set)
    delivers: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    """(msg, actor) -> deliver times (only for pairs that have an effect, when known)."""
    actives: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    """(actor, queue) -> times of its ``active`` events naming that queue."""
    commits: list[Effect] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    fault_starts: list[tuple[float, str, str]] = field(default_factory=list)
    fault_ends: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    publisher_seq: dict[str, tuple[float, str, int]] = field(default_factory=dict)
    """id -> (ts, publisher, seq) of its earliest publish with an integer ``seq``."""
    unordered: set[str] = field(default_factory=set)
    """Ids whose place in the queue is not their publisher's order: retransmitted, nacked,
    returned, or parked by a consumer (a ``reject`` not requeued)."""
    client_cancels: dict[str, list[float]] = field(default_factory=dict)
    """actor -> times of its ``cancelled`` events with ``by`` ``"client"``."""
    events: int = 0
    """Well-formed events of a known type."""

    def queue_of(self, msg: str) -> str:
        found = self.queue_publish.get(msg)
        return found[1] if found else spec.UNKNOWN_QUEUE


def check_run(path: Path) -> Verdict:
    """The verdict of the run directory at ``path`` (``SPEC.md``).

    Raises ``InputError`` when the directory or its ``run.json`` cannot be used, or the
    run holds nothing to check (``runs.require_checkable``).
    """
    run = open_run(path)
    findings = Findings()
    if run.has_effects_file:
        effects = list(read_effects(run, findings))
        wanted: set[tuple[str, str]] | None = {(e.msg, e.actor) for e in effects}
        source = spec.EFFECTS_SOURCE_FILE
        collected = _collect(read_events(run, findings), wanted)
    else:
        collected = _collect(read_events(run, findings), None)
        effects = collected.commits
        source = spec.EFFECTS_SOURCE_EVENTS
    require_checkable(path, collected.events,
                      len(collected.queue_publish) + len(collected.actives))
    return _verdict(run, findings, collected, effects, source)


def check_runs(paths: Iterable[Path]) -> list[Verdict]:
    """The verdicts of ``paths``, in their order."""
    return [check_run(path) for path in paths]


def summarize(verdicts: Sequence[Verdict], engine: str) -> dict[str, Any]:
    """``summary.json`` for ``verdicts`` (of either engine): counts, invalid runs, totals."""
    totals = {key: 0 for key in spec.SUMMARY_TOTALS}
    for verdict in verdicts:
        totals["published"] += verdict.published
        totals["confirmed"] += verdict.confirmed
        totals["effects"] += verdict.effects
        for name in ANOMALIES:
            totals[name] += verdict.count(name)
    return {
        "runs": len(verdicts),
        "valid": sum(1 for v in verdicts if v.valid),
        "invalid": sorted(v.run for v in verdicts if not v.valid),
        "engine": engine,
        "totals": totals,
    }


def _collect(events: Iterable[Event], wanted: set[tuple[str, str]] | None) -> _Collected:
    """One pass over the events.

    ``wanted``: the (msg, actor) pairs of the effect rows, whose delivers are all that the
    intervals need; ``None`` when the effects are the commit events, which are then kept.
    """
    c = _Collected()
    wanted_msgs = None if wanted is None else {msg for msg, _ in wanted}
    for event in events:
        kind = event["type"]
        ts = event["ts"]
        c.events += 1
        if kind in spec.COUNT_KEYS:
            c.counts[kind] += 1
        if kind in spec.UNORDERED_EVENTS or (
            kind == Reject.KIND and event.get("requeue") is not True
        ):
            c.unordered.add(event["msg"])
        if kind == Publish.KIND:
            msg = event["msg"]
            if ts < c.first_publish.get(msg, float("inf")):
                c.first_publish[msg] = ts
            seq = event.get("seq")
            if is_integer(seq):
                position = (ts, event["actor"], seq)
                if msg not in c.publisher_seq or position < c.publisher_seq[msg]:
                    c.publisher_seq[msg] = position
            queue = event.get("queue")
            if isinstance(queue, str):
                candidate = (ts, queue)
                if msg not in c.queue_publish or candidate < c.queue_publish[msg]:
                    c.queue_publish[msg] = candidate
        elif kind == Confirm.KIND:
            c.confirmed.add(event["msg"])
        elif kind == Deliver.KIND:
            if event.get("redelivered") is True:
                c.counts[spec.REDELIVERED] += 1
            # Every delivery of a message that has an effect: the intervals need its own
            # committer's, the order rule those of whoever held it before.
            if wanted_msgs is None or event["msg"] in wanted_msgs:
                c.delivers.setdefault((event["msg"], event["actor"]), []).append(ts)
        elif kind == Cancelled.KIND:
            if event.get("by") == spec.CLIENT_CANCEL:
                c.client_cancels.setdefault(event["actor"], []).append(ts)
        elif kind == Active.KIND:
            queue = event.get("queue")
            if isinstance(queue, str):  # no queue named: it counts for none
                c.actives.setdefault((event["actor"], queue), []).append(ts)
        elif kind == Commit.KIND and wanted is None:
            c.commits.append(Effect(msg=event["msg"], actor=event["actor"], ts=ts))
        elif kind == CommitRejected.KIND:
            reason = spec.COMMIT_REJECTED_WHY.get(_text(event, "why"))
            if reason:
                c.counts[reason] += 1
        elif kind == FaultStart.KIND:
            c.fault_starts.append((ts, _text(event, "fault"), _text(event, "target")))
        elif kind == FaultEnd.KIND:
            c.fault_ends.setdefault((_text(event, "fault"), _text(event, "target")), []).append(ts)
    for times in (*c.delivers.values(), *c.actives.values(), *c.fault_ends.values(),
                  *c.client_cancels.values()):
        times.sort()
    return c


def _text(event: Event, name: str) -> str:
    """A string field; missing (or not a string) is ``""``."""
    value = event.get(name)
    return value if isinstance(value, str) else ""


def _verdict(
    run: Run,
    findings: Findings,
    c: _Collected,
    effects: list[Effect],
    source: str,
) -> Verdict:
    rows_per_id = Counter(e.msg for e in effects)
    lost = sorted(c.confirmed - rows_per_id.keys())
    duplicated = sorted(m for m, n in rows_per_id.items() if n > 1)
    unexpected = sorted(m for m in rows_per_id if m not in c.first_publish)

    intervals = processing_intervals(effects, c.delivers, c.actives, c.queue_of)
    checked = run.config.single_active_queues
    pairs = concurrent_pairs(
        [
            island
            for island in islands(intervals, spec.CONCURRENCY_GAP_S)
            if checked is None or island.queue in checked
        ]
    )
    late = reordered(effects, c, run.config.ordered_queues)

    return Verdict.assemble(
        run=run.name,
        engine=ENGINE,
        effects_source=source,
        published=len(c.first_publish),
        confirmed=len(c.confirmed),
        effects=len(effects),
        lost=lost,
        duplicated=duplicated,
        unexpected=unexpected,
        concurrent=pairs,
        reordered=late,
        malformed=[{"file": m.file, "line": m.line, "error": m.error}
                   for m in findings.malformed],
        unknown_events=findings.unknown_events,
        counts=c.counts,
        activity=activity(islands(intervals, run.config.activity_gap_s)),
        handovers=handovers(effects, c.queue_of),
        recovery=recovery(c.fault_starts, c.fault_ends, effects),
        latency_ms=latency(
            [(e.ts - c.first_publish[e.msg]) * 1000 for e in effects if e.msg in c.first_publish]
        ),
        tolerated=run.config.tolerates,
    )


def processing_intervals(
    effects: Iterable[Effect],
    delivers: dict[tuple[str, str], list[float]],
    actives: dict[tuple[str, str], list[float]],
    queue_of: Callable[[str], str],
) -> list[Interval]:
    """Each effect's ``[s, c]``: ``s`` the later of its actor's last deliver of the id and
    its actor's last ``active`` on the id's queue, at or before ``c``.

    ``delivers`` ((msg, actor)) and ``actives`` ((actor, queue)) hold sorted times; without
    either at or before the commit, ``s = c``.
    """
    intervals = []
    for effect in effects:
        queue = queue_of(effect.msg)
        latest = (
            _last_at_or_before(delivers.get((effect.msg, effect.actor), []), effect.ts),
            _last_at_or_before(actives.get((effect.actor, queue), []), effect.ts),
        )
        start = max((ts for ts in latest if ts is not None), default=effect.ts)
        intervals.append(Interval(queue=queue, actor=effect.actor, start=start, end=effect.ts,
                                  msg=effect.msg))
    return intervals


def _last_at_or_before(times: list[float], ts: float) -> float | None:
    """The largest of the sorted ``times`` that is ``<= ts``, if any."""
    i = bisect.bisect_right(times, ts)
    return times[i - 1] if i else None


def islands(intervals: Iterable[Interval], gap: float) -> list[Island]:
    """Per (queue, actor), intervals joined while each starts ``<= gap`` after the end so far."""
    by_owner: dict[tuple[str, str], list[Interval]] = defaultdict(list)
    for interval in intervals:
        by_owner[(interval.queue, interval.actor)].append(interval)
    found: list[Island] = []
    for (queue, actor), owned in by_owner.items():
        current: Island | None = None
        for interval in sorted(owned, key=lambda i: (i.start, i.end, i.msg)):
            if current is None or interval.start > current.end + gap:
                current = Island(queue, actor, interval.start, interval.end, [])
                found.append(current)
            current.end = max(current.end, interval.end)
            current.intervals.append(interval)
    return found


def concurrent_pairs(checked: Iterable[Island]) -> list[Pair]:
    """Overlapping islands of different actors on one queue, found by a sweep in time order.

    Each island is compared with the earlier island that reaches furthest (largest end, the
    earliest on ties): if that one does not reach past this start, none does.
    """
    by_queue: dict[str, list[Island]] = defaultdict(list)
    for island in checked:
        by_queue[island.queue].append(island)
    pairs = []
    for queue in sorted(by_queue):
        furthest: Island | None = None
        for island in sorted(by_queue[queue], key=lambda i: (i.start, i.end, i.actor)):
            if furthest is not None and furthest.end > island.start:
                pairs.append(_pair(furthest, island))
            if furthest is None or island.end > furthest.end:
                furthest = island
    return sorted(pairs, key=lambda p: (p["queue"], p["second"]["start"], p["second"]["actor"]))


def _pair(first: Island, second: Island) -> Pair:
    msgs = {i.msg for i in first.intervals if i.end > second.start}
    msgs |= {i.msg for i in second.intervals if i.start < first.end}
    return {
        "queue": second.queue,
        "first": {"actor": first.actor, "start": first.start, "end": first.end},
        "second": {"actor": second.actor, "start": second.start, "end": second.end},
        "overlap_s": min(first.end, second.end) - second.start,
        "msgs": sorted(msgs),
    }


def reordered(
    effects: Iterable[Effect], c: _Collected, checked: frozenset[str] | None
) -> list[str]:
    """Ids committed after an id their publisher published later on the same checked queue
    (``SPEC.md``, "Order"): per (queue, publisher), the first commits in time order, each
    compared with the highest ``seq`` committed before it.

    Ids whose queue position is not their publisher's order (``_Collected.unordered``), and
    ids a consumer lost to a failure (``returned_by_failure``), are left out of the sequence.
    """
    first: dict[str, tuple[float, str]] = {}
    for effect in effects:
        commit = (effect.ts, effect.actor)
        if effect.msg not in first or commit < first[effect.msg]:
            first[effect.msg] = commit
    if checked is not None and not checked:
        return []
    held: dict[str, set[tuple[float, str]]] = defaultdict(set)  # id -> (ts, actor) delivered
    for (msg, actor), times in c.delivers.items():
        held[msg].update((ts, actor) for ts in times)
    sequences: dict[tuple[str, str], list[tuple[float, int, str]]] = defaultdict(list)
    for msg, (ts, actor) in first.items():
        published = c.publisher_seq.get(msg)
        queue = c.queue_of(msg)
        if (
            published is None
            or msg in c.unordered
            or (checked is not None and queue not in checked)
            or returned_by_failure(c, held.get(msg, set()), actor, ts)
        ):
            continue
        _, publisher, seq = published
        sequences[(queue, publisher)].append((ts, seq, msg))
    late = []
    for sequence in sequences.values():
        highest: int | None = None
        for _, seq, msg in sorted(sequence):
            if highest is not None and highest > seq:
                late.append(msg)
            highest = seq if highest is None else max(highest, seq)
    return sorted(late)


def returned_by_failure(c: _Collected, held: set[tuple[float, str]], actor: str,
                        commit: float) -> bool:
    """Whether the delivery ``actor`` committed a message from (its last at or before the
    commit) came after an earlier delivery of it (``held``: its distinct (ts, actor)
    deliveries, to anyone) whose holder did not hand it back gracefully: no ``cancelled``
    by the client of that holder between the two.

    A consumer that crashed or lost its connection gives its unacknowledged messages back
    when the broker notices, possibly behind what its successor has already taken: the
    broker keeps no order for those (``SPEC.md``).
    """
    deliveries = sorted(held)
    for i in range(len(deliveries) - 1, -1, -1):
        ts, who = deliveries[i]
        if who == actor and ts <= commit:
            if i == 0:
                return False  # its first delivery: it came in the queue's order
            before, holder = deliveries[i - 1]
            cancel = _last_at_or_before(c.client_cancels.get(holder, []), ts)
            return cancel is None or cancel < before
    return False


def activity(found: Iterable[Island]) -> list[Activity]:
    """Who worked on which queue when, sorted by (queue, start, actor)."""
    rows: list[Activity] = [
        {
            "queue": i.queue,
            "actor": i.actor,
            "start": i.start,
            "end": i.end,
            "effects": len(i.intervals),
        }
        for i in found
    ]
    return sorted(rows, key=lambda r: (r["queue"], r["start"], r["actor"]))


def handovers(effects: Iterable[Effect], queue_of: Callable[[str], str]) -> list[Handover]:
    """Consecutive effects (per queue, by time) by different actors: the work changed hands."""
    by_queue: dict[str, list[Effect]] = defaultdict(list)
    for effect in effects:
        by_queue[queue_of(effect.msg)].append(effect)
    rows: list[Handover] = []
    for queue, owned in by_queue.items():
        ordered = sorted(owned, key=lambda e: (e.ts, e.actor, e.msg))
        for before, after in itertools.pairwise(ordered):
            if before.actor != after.actor:
                rows.append(
                    {
                        "queue": queue,
                        "from": before.actor,
                        "to": after.actor,
                        "last_commit": before.ts,
                        "first_commit": after.ts,
                        "gap_s": after.ts - before.ts,
                    }
                )
    return sorted(rows, key=lambda r: (r["queue"], r["first_commit"], r["to"]))


def recovery(
    starts: Iterable[tuple[float, str, str]],
    ends: dict[tuple[str, str], list[float]],
    effects: Iterable[Effect],
) -> list[Recovery]:
    """Per fault: when it was healed and how long until the next effect after it started."""
    effect_times = sorted(e.ts for e in effects)
    rows: list[Recovery] = []
    for start, fault, target in sorted(starts):
        healed = ends.get((fault, target), [])
        i = bisect.bisect_left(healed, start)
        j = bisect.bisect_right(effect_times, start)
        rows.append(
            {
                "fault": fault,
                "target": target,
                "start": start,
                "end": healed[i] if i < len(healed) else None,
                "recovery_s": effect_times[j] - start if j < len(effect_times) else None,
            }
        )
    return rows


def latency(values_ms: Iterable[float]) -> Latency:
    """Nearest-rank percentiles (``spec.PERCENTILES``), max and histogram of publish-to-effect
    times (ms)."""
    ordered = sorted(values_ms)
    n = len(ordered)
    histogram = [0] * len(spec.HISTOGRAM_EDGES_MS)
    for value in ordered:
        histogram[spec.histogram_bin(value)] += 1

    def ranked(pct: int) -> float | None:
        return ordered[spec.nearest_rank(pct, n)] if n else None

    return {"count": n, "histogram": histogram, "p50": ranked(50), "p95": ranked(95),
            "p99": ranked(99), "max": ordered[-1] if n else None}
