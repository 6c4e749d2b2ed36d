"""``sac audit``: lost, duplicated and concurrent processing per queue and per UTC day, and
handover gaps, over a production fleet's histories (``SPEC.md``, "sac audit").

A production history is what the SDK's ``HistoryRecorder`` writes in every process: the
events of a run directory (``SPEC.md``) without a nemesis, cut at an arbitrary moment, and often
without ``effects.jsonl``. The committed effects come from the inbox table in PostgreSQL
(``sac.checker.inbox``) or, without one, from the ``commit`` events. Everything up to the
per-row figures is DataFrame operations (``audit_rules``, reusing the verdict's rules); the
driver collects only what an audit row shows (counts, at most ``ID_CAP`` ids per list, the
handover gaps' median and maximum, the first malformed lines), never an event or an effect.

    >>> result = audit(spark, ["hdfs://nn/fleet/2024-05"], inbox={       # doctest: +SKIP
    ...     "url": "jdbc:postgresql://db:5432/app", "user": "audit", "password": pw})
    >>> [(r["queue"], r["day"], r["lost"]["ids"]) for r in result.anomalous]  # doctest: +SKIP
    [('orders', '2024-05-03', ['order-8812'])]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sac.history import CONCURRENT, DUPLICATED, LOST, UNEXPECTED
from . import audit_rules as arules
from . import spark_rules as rules
from . import spec
from .errors import InputError
from .inbox import InboxSource
from .runs import require_checkable
from .spark_read import History, read_history

ID_CAP = 100
"""Ids listed per anomaly and row (and malformed lines listed); ``more`` counts the rest."""
DEFAULT_SETTLE_S = 300.0
ANOMALIES = (LOST, DUPLICATED, UNEXPECTED, CONCURRENT)
"""What makes a row anomalous (``concurrent``: an overlapping pair): the anomalies of messages
but ``reordered``, which a fleet's history cannot tell (SPEC, "sac audit")."""
ID_LISTS = ("lost", "pending", "duplicated", "unexpected", "concurrent")
TOTALS = (
    "published",
    "confirmed",
    "committed",
    "lost",
    "pending",
    "duplicated",
    "unexpected",
    "concurrent",
    "concurrent_pairs",
    "handovers",
)
EFFECTS_FROM_INBOX = "inbox"
EFFECTS_FROM_EVENTS = "events"

Row = dict[str, Any]


@dataclass(frozen=True)
class AuditResult:
    """One audit: a row per (queue, UTC day) with anything in it, sorted by (queue, day)."""

    rows: list[Row]
    malformed: dict[str, Any]
    """``{"count", "lines": [{"file", "line", "error"}], "more"}``, the first by (file, line)."""
    effects: dict[str, Any]
    """Where the effects came from: ``{"source": "events"}`` or ``{"source": "inbox",
    "url", "table"}`` (the URL with any password masked)."""
    history: dict[str, Any]
    """``{"files", "start", "end"}``: files read and the first and last event time."""
    settings: dict[str, Any]
    outside_history: int
    """Inbox rows of ids the history never published, committed outside it: not audited."""

    @property
    def anomalous(self) -> list[Row]:
        """The rows with an anomaly, in row order."""
        return [row for row in self.rows if row["anomalies"]]

    @property
    def clean(self) -> bool:
        """No anomaly in any row and no malformed line (a line not read may hide a loss)."""
        return not self.anomalous and self.malformed["count"] == 0

    def totals(self) -> dict[str, int]:
        """Sums over the rows of each count in ``TOTALS``."""
        found = dict.fromkeys(TOTALS, 0)
        for row in self.rows:
            for name in TOTALS:
                value = row[name] if name != "concurrent_pairs" else row["concurrent"]["pairs"]
                found[name] += value["count"] if isinstance(value, dict) else value
        return found

    def as_json(self) -> dict[str, Any]:
        """What ``audit.json`` holds."""
        return {
            "clean": self.clean,
            "effects": self.effects,
            "history": self.history,
            "settings": self.settings,
            "outside_history": self.outside_history,
            "malformed": self.malformed,
            "totals": self.totals(),
            "rows": self.rows,
        }


def audit(
    spark: SparkSession,
    paths: Sequence[str],
    *,
    inbox: Mapping[str, str] | None = None,
    single_active: Sequence[str] | None = None,
    settle_s: float = DEFAULT_SETTLE_S,
    activity_gap_s: float = spec.DEFAULT_ACTIVITY_GAP_S,
) -> AuditResult:
    """Audit the history in ``paths`` (files or directories searched recursively for
    ``*.jsonl``; any filesystem Spark reads).

    ``inbox``: JDBC options of the inbox table (``url``, ``user``, ``password``, ``table``,
    default ``sac_dedup_records``, and any other Spark JDBC option); without it the effects
    are the ``commit`` events. ``single_active``: the queues checked for concurrent
    processing (``None``: every queue). ``settle_s``: a confirmed message without an effect
    is ``pending``, not ``lost``, when confirmed within this many seconds of the history's
    end. ``activity_gap_s``: the longest pause inside one stretch of a consumer's work.

    Raises ``InputError`` for a path that yields no file, a history without a well-formed
    event or without an event naming a queue (an audit of nothing would look clean), a bad
    setting, or an inbox that cannot be read (one line, password masked).
    """
    if not paths:
        raise InputError("nothing to audit: no path given")
    for name, value in (("settle_s", settle_s), ("activity_gap_s", activity_gap_s)):
        if not math.isfinite(value) or value < 0:
            raise InputError(f"{name} must be a finite number >= 0, not {value!r}")
    source = InboxSource.from_options(inbox) if inbox is not None else None
    checked = sorted(set(single_active)) if single_active is not None else None
    spark.conf.set("spark.sql.variant.allowDuplicateKeys", "true")
    persisted: list[DataFrame] = []
    try:
        history = read_history(spark, list(paths))
        persisted.extend(history.persisted)
        return _Audit(spark, history, source, checked, settle_s, activity_gap_s, persisted,
                      ", ".join(paths)).run()
    except (PySparkException, Py4JJavaError) as exc:
        failure = source.failure(exc) if source is not None else None
        if failure is None:
            raise
        raise failure from None
    finally:
        for frame in persisted:
            frame.unpersist()


@dataclass
class _Audit:
    """Builds the frames, runs the few collecting jobs and fills the rows from them."""

    spark: SparkSession
    history: History
    source: InboxSource | None
    checked: list[str] | None
    settle_s: float
    gap: float
    persisted: list[DataFrame]
    """Every frame persisted on the way, for ``audit`` to unpersist."""
    where: str
    """The paths as given, for an error naming them."""
    rows: dict[tuple[str, str], Row] = field(default_factory=dict)

    def _keep(self, frame: DataFrame) -> DataFrame:
        self.persisted.append(frame.persist())
        return frame

    def run(self) -> AuditResult:
        # The table's schema first: a bad URL, login or table fails before any job runs.
        table = self.source.read(self.spark) if self.source is not None else None
        events = self.history.events
        known = F.col("type").isin(*spec.KNOWN_EVENT_TYPES)
        named = known & F.col("type").isin(*spec.QUEUE_EVENTS) & F.col("queue").isNotNull()
        span_row = events.agg(
            F.min("ts").alias("start"),
            F.max("ts").alias("end"),
            F.count(F.when(known, 1)).alias("events"),
            F.count(F.when(named, 1)).alias("queued"),
        ).first()
        require_checkable(
            self.where,
            span_row["events"] if span_row is not None else 0,
            span_row["queued"] if span_row is not None else 0,
        )
        span = None
        if span_row is not None and span_row["start"] is not None:
            span = (float(span_row["start"]), float(span_row["end"]))
        cutoff = span[1] - self.settle_s if span is not None else -math.inf

        published = self._keep(rules.first_publishes(events))
        effects = table if table is not None else arules.effects_from_events(events, published)
        tagged = self._keep(arules.tag_effects(effects, published, span))
        inside = tagged.filter(~F.col("outside"))
        messages = self._keep(arules.message_side(events, published, inside, cutoff))
        effected = self._keep(arules.effect_side(inside))
        timed = self._keep(
            rules.processing_starts(events, inside.select("run", "msg", "actor", "ts", "queue"))
        )
        numbered = self._keep(arules.concurrent_islands(timed, self.checked))
        pairs = self._keep(arules.concurrent_pairs(numbered))
        concurrent = arules.concurrent_ids(pairs, numbered)

        totals = {"outside": 0, "malformed": 0}
        for found in self._report(messages, effected, pairs, concurrent, timed, tagged).collect():
            self._fill(found, totals)
        lines = []
        if totals["malformed"]:  # numbering lines costs a pass over them: only when needed
            first = self.history.malformed.orderBy("file", "line").limit(ID_CAP).collect()
            lines = [{"file": m["file"], "line": m["line"], "error": m["error"]} for m in first]
        return AuditResult(
            rows=[_finish(self.rows[key]) for key in sorted(self.rows)],
            malformed={
                "count": totals["malformed"],
                "lines": lines,
                "more": totals["malformed"] - len(lines),
            },
            effects=(
                {
                    "source": EFFECTS_FROM_INBOX,
                    "url": self.source.display_url,
                    "table": self.source.table,
                }
                if self.source is not None
                else {"source": EFFECTS_FROM_EVENTS}
            ),
            history={
                "files": len(self.history.files),
                "start": span[0] if span else None,
                "end": span[1] if span else None,
            },
            settings={
                "settle_s": self.settle_s,
                "activity_gap_s": self.gap,
                "single_active": self.checked,
            },
            outside_history=totals["outside"],
        )

    def _report(
        self,
        messages: DataFrame,
        effected: DataFrame,
        pairs: DataFrame,
        concurrent: DataFrame,
        timed: DataFrame,
        tagged: DataFrame,
    ) -> DataFrame:
        """Everything the rows show, as ``queue, day, name, n, x, msg`` in one frame, so one
        job computes it: counts in ``n``, handover gaps in ``x``, listed ids in ``msg``; the
        counts of the whole history (``outside``, ``malformed``) in a row of nulls."""
        nowhere = (F.lit(None).cast("string").alias("queue"),
                   F.lit(None).cast("string").alias("day"))
        handovers = arules.handover_stats(timed)
        parts = [
            arules.row_counts(
                [
                    (messages, ["published", "confirmed", "lost", "pending"]),
                    (effected, ["committed", "duplicated", "unexpected"]),
                    (pairs, ["concurrent_pairs"]),
                    (concurrent, ["concurrent"]),
                    (tagged.filter(F.col("outside")).select(*nowhere), ["outside"]),
                    (self.history.unnumbered.select(*nowhere), ["malformed"]),
                ]
            ),
            arules.activity(timed, self.gap),
            handovers.select(*arules.ROW, F.lit("handovers").alias("name"),
                             F.col("handovers").alias("n")),
            handovers.select(*arules.ROW, F.lit("p50_gap_s").alias("name"),
                             F.col("p50").alias("x")),
            handovers.select(*arules.ROW, F.lit("max_gap_s").alias("name"),
                             F.col("max").alias("x")),
            arules.first_ids(
                arules.flagged_ids(messages, ["lost", "pending"])
                .unionByName(arules.flagged_ids(effected, ["duplicated", "unexpected"]))
                .unionByName(concurrent.withColumn("name", F.lit("concurrent"))),
                ID_CAP,
            ),
        ]
        report = _padded(parts[0])
        for part in parts[1:]:
            report = report.unionByName(_padded(part))
        return report

    def _fill(self, found: Any, totals: dict[str, int]) -> None:
        """One ``_report`` row into its audit row (or ``totals``)."""
        name = found["name"]
        if name in totals:  # every row has these, 0 but in the row of nulls
            totals[name] += int(found["n"] or 0)
            return
        if found["msg"] is None and found["x"] is None and not found["n"]:
            return
        row = self._row(found["queue"], found["day"])
        if found["msg"] is not None:
            row[name]["ids"].append(found["msg"])
        elif found["x"] is not None:
            row["handovers"][name] = found["x"]
        elif name == "handovers":
            row["handovers"]["count"] = int(found["n"])
        elif name in ID_LISTS:
            row[name]["count"] = int(found["n"])
        elif name == "concurrent_pairs":
            row["concurrent"]["pairs"] = int(found["n"])
        elif name in ("periods", "consumers"):
            row["activity"][name] = int(found["n"])
        else:
            row[name] = int(found["n"])

    def _row(self, queue: str, day: str) -> Row:
        key = (queue, day)
        if key not in self.rows:
            self.rows[key] = _empty_row(queue, day)
        return self.rows[key]


_REPORT_COLUMNS = {"queue": "string", "day": "string", "name": "string", "n": "long",
                   "x": "double", "msg": "string"}


def _padded(part: DataFrame) -> DataFrame:
    """``part`` with every ``_REPORT_COLUMNS`` column, null where it has none."""
    return part.select(
        *(
            (F.col(name) if name in part.columns else F.lit(None)).cast(kind).alias(name)
            for name, kind in _REPORT_COLUMNS.items()
        )
    )


def _listed() -> dict[str, Any]:
    return {"count": 0, "ids": [], "more": 0}


def _empty_row(queue: str, day: str) -> Row:
    """A row with every figure at what a row without that kind of data has."""
    return {
        "queue": queue,
        "day": day,
        "published": 0,
        "confirmed": 0,
        "committed": 0,
        "lost": _listed(),
        "pending": _listed(),
        "duplicated": _listed(),
        "unexpected": _listed(),
        "concurrent": {"pairs": 0, **_listed()},
        "handovers": {"count": 0, "p50_gap_s": None, "max_gap_s": None},
        "activity": {"periods": 0, "consumers": 0},
        "anomalies": [],
    }


def _finish(row: Row) -> Row:
    """Sorted id lists, their ``more``, and the row's anomaly names."""
    for name in ID_LISTS:
        listed = row[name]
        listed["ids"].sort()
        listed["more"] = listed["count"] - len(listed["ids"])
    row["anomalies"] = [
        name
        for name in ANOMALIES
        if (row[name]["pairs"] if name == "concurrent" else row[name]["count"]) > 0
    ]
    return row
