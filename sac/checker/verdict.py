"""The verdict of one run (``sac/checker/SPEC.md``, "The verdict"): one typed value that both
engines fill the same way (``Verdict.assemble``), and that ``verdict.json``, the report,
``sac check`` and the chaos suite read.

What follows from the rest is not stored: ``anomalies`` (the ids named per anomaly) and
``valid`` are properties, so a verdict cannot disagree with itself. The JSON form
(``to_json``/``from_json``) keeps the spec's keys: ``{"lost": {"count", "ids"}, ...}``.

The rows of the lists (pairs, activity, handovers, recovery, malformed lines) are typed dicts:
they are JSON objects the report and ``verdict.json`` use as they are.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict, cast

from sac.history import CONCURRENT, MALFORMED, Anomaly, MessageAnomaly
from . import spec


class Span(TypedDict):
    actor: str
    start: float
    end: float
"""One side of a concurrent pair: an island of one actor's processing."""


class Pair(TypedDict):
    """Two actors' islands on one single-active queue that overlap in time."""

    queue: str
    first: Span
    second: Span
    overlap_s: float
    msgs: list[str]


class MalformedLine(TypedDict):
    file: str
    line: int
    error: str


class Activity(TypedDict):
    """An island: who worked on which queue when (``effects``: how many effects)."""

    queue: str
    actor: str
    start: float
    end: float
    effects: int


Handover = TypedDict("Handover", {"queue": str, "from": str, "to": str, "last_commit": float,
                                  "first_commit": float, "gap_s": float})
"""Consecutive effects on one queue by different actors: the work changed hands."""


class Recovery(TypedDict):
    """A fault, when it was healed and how long until the next effect."""

    fault: str
    target: str
    start: float
    end: float | None
    recovery_s: float | None


class Latency(TypedDict):
    """Publish-to-effect times in ms: nearest-rank percentiles, max and histogram."""

    count: int
    p50: float | None
    p95: float | None
    p99: float | None
    max: float | None
    histogram: list[int]


_ID_LISTS: tuple[MessageAnomaly, ...] = ("lost", "duplicated", "unexpected", "reordered")
"""The anomalies whose verdict entry lists ids (``concurrent`` lists pairs)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """One run's verdict. Build it with ``assemble``, which puts each list in the spec's
    order; ``to_json`` is ``verdict.json``."""

    run: str
    engine: str
    effects_source: str
    published: int
    confirmed: int
    effects: int
    lost: tuple[str, ...]
    duplicated: tuple[str, ...]
    unexpected: tuple[str, ...]
    concurrent: tuple[Pair, ...]
    reordered: tuple[str, ...]
    malformed: tuple[MalformedLine, ...]
    unknown_events: Mapping[str, int]
    counts: Mapping[str, int]
    activity: tuple[Activity, ...]
    handovers: tuple[Handover, ...]
    recovery: tuple[Recovery, ...]
    latency_ms: Latency
    tolerated: Mapping[str, str]

    @classmethod
    def assemble(
        cls, *, run: str, engine: str, effects_source: str, published: int, confirmed: int,
        effects: int, lost: Iterable[str], duplicated: Iterable[str], unexpected: Iterable[str],
        concurrent: Iterable[Pair], reordered: Iterable[str],
        malformed: Iterable[MalformedLine], unknown_events: Mapping[str, int],
        counts: Mapping[str, int], activity: Iterable[Activity], handovers: Iterable[Handover],
        recovery: Iterable[Recovery], latency_ms: Latency, tolerated: Mapping[str, str],
    ) -> Verdict:
        """The verdict of these parts, each list sorted as the spec says (stably: rows that
        tie keep the order an engine gave them)."""
        return cls(
            run=run, engine=engine, effects_source=effects_source, published=published,
            confirmed=confirmed, effects=effects,
            lost=tuple(sorted(lost)), duplicated=tuple(sorted(duplicated)),
            unexpected=tuple(sorted(unexpected)), reordered=tuple(sorted(reordered)),
            concurrent=tuple(sorted(concurrent, key=lambda p: (
                p["queue"], p["second"]["start"], p["second"]["actor"]))),
            malformed=tuple(sorted(malformed, key=lambda m: (m["file"], m["line"]))),
            unknown_events=dict(unknown_events),
            counts={key: counts.get(key, 0) for key in spec.COUNT_KEYS},
            activity=tuple(sorted(activity, key=lambda r: (r["queue"], r["start"], r["actor"]))),
            handovers=tuple(sorted(handovers, key=lambda r: (
                r["queue"], r["first_commit"], r["to"]))),
            recovery=tuple(sorted(recovery, key=lambda r: (r["start"], r["fault"], r["target"]))),
            latency_ms=latency_ms,
            tolerated=dict(tolerated),
        )

    def count(self, anomaly: Anomaly) -> int:
        """How many: ids, pairs for ``concurrent``, lines for ``malformed``."""
        found: tuple[object, ...] = getattr(self, anomaly)
        return len(found)

    def ids(self, anomaly: MessageAnomaly) -> tuple[str, ...]:
        """The ids an anomaly names, sorted (``concurrent``: those in any pair)."""
        if anomaly == CONCURRENT:
            return tuple(sorted({m for pair in self.concurrent for m in pair["msgs"]}))
        found: tuple[str, ...] = getattr(self, anomaly)
        return found

    @property
    def anomalies(self) -> dict[str, list[str]]:
        """``{id: [names]}`` for every id an anomaly names, the names sorted."""
        named: dict[str, list[str]] = defaultdict(list)
        for name in spec.ANOMALIES:
            for msg in self.ids(name):
                named[msg].append(name)
        return dict(named)

    @property
    def valid(self) -> bool:
        """Every anomaly at 0, but those the run tolerates."""
        return all(self.count(name) == 0 for name in spec.TOLERABLE
                   if name not in self.tolerated)

    def untolerated(self) -> list[Anomaly]:
        """The anomalies found that the run does not tolerate, in the spec's order."""
        return [name for name in spec.TOLERABLE
                if self.count(name) and name not in self.tolerated]

    def to_json(self) -> dict[str, Any]:
        """``verdict.json``: the spec's keys, lists as JSON arrays."""
        out: dict[str, Any] = {
            "run": self.run,
            "engine": self.engine,
            "effects_source": self.effects_source,
            "published": self.published,
            "confirmed": self.confirmed,
            "effects": self.effects,
        }
        for name in _ID_LISTS:
            ids = list(getattr(self, name))
            out[name] = {"count": len(ids), "ids": ids}
        out[CONCURRENT] = {"count": len(self.concurrent), "pairs": list(self.concurrent)}
        out[MALFORMED] = {"count": len(self.malformed), "lines": list(self.malformed)}
        out.update(
            unknown_events=dict(self.unknown_events),
            counts=dict(self.counts),
            anomalies=self.anomalies,
            activity=list(self.activity),
            handovers=list(self.handovers),
            recovery=list(self.recovery),
            latency_ms=dict(self.latency_ms),
            valid=self.valid,
            tolerated=dict(self.tolerated),
        )
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Verdict:
        """A verdict read back from ``to_json`` (``verdict.json``); ``ValueError`` naming
        the first key it lacks."""
        try:
            return cls(
                run=data["run"], engine=data["engine"], effects_source=data["effects_source"],
                published=data["published"], confirmed=data["confirmed"],
                effects=data["effects"],
                lost=tuple(data["lost"]["ids"]), duplicated=tuple(data["duplicated"]["ids"]),
                unexpected=tuple(data["unexpected"]["ids"]),
                reordered=tuple(data["reordered"]["ids"]),
                concurrent=tuple(data["concurrent"]["pairs"]),
                malformed=tuple(data["malformed"]["lines"]),
                unknown_events=dict(data["unknown_events"]), counts=dict(data["counts"]),
                activity=tuple(data["activity"]), handovers=tuple(data["handovers"]),
                recovery=tuple(data["recovery"]),
                latency_ms=cast(Latency, dict(data["latency_ms"])),
                tolerated=dict(data["tolerated"]),
            )
        except KeyError as exc:
            raise ValueError(f"verdict of run {data.get('run', '?')!r} lacks {exc.args[0]!r} "
                             "(see SPEC.md)") from None
