"""The Spark engine: ``sac/checker/SPEC.md`` on PySpark, for one run on a laptop or a month of
histories on a cluster, with the same code.

Everything up to the verdict is DataFrame operations over every run at once (``spark_read``
reads, ``spark_rules`` holds the rules); there is no Python UDF, so executors need pyspark and
nothing of ours. The driver collects only what the verdict lists (ids, pairs, islands,
handovers, faults, a few ranked values and counts), which is bounded by anomalies and activity,
never by events, and assembles one ``Verdict`` per run with ``Verdict.assemble``, as the
reference engine (``python_engine``) does: the two are identical apart from ``engine`` and the
malformed lines' ``error`` texts.

    >>> spark = spark_session("local[2]")                      # doctest: +SKIP
    >>> [v.valid for v in check_runs(spark, [Path("runs/r1")])]  # doctest: +SKIP
    [True]

Percentiles are exact nearest ranks (``spark_rules.ranked_values``), not ``percentile_approx``.
Measured against the spec's integer nearest rank (450 groups of n = 1..300 and 150 sizes up to
10 000, uniform, exponential and heavily tied values, merged from 8 partitions):
``percentile_approx(x, p, 10000)`` (the default accuracy) differs from n = 5 738 on (46 of the
150 larger sizes); with accuracy 1e6 it agreed everywhere, and still at n = 300 000, but not at
n = 1 500 000 (p50 and p95 off). It is exact only while its summary keeps every value, which
is the memory of an exact method without its guarantee.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sac.history import CommitRejected, Deliver
from . import spark_rules as rules
from . import spec
from .runs import require_checkable
from .spark_positions import in_order
from .spark_read import Inputs, open_runs, read_inputs
from .verdict import (
    Activity,
    Handover,
    Latency,
    MalformedLine,
    Pair,
    Recovery,
    Span,
    Verdict,
)

ENGINE = "spark"

POSTGRESQL_JDBC_JAR = Path("/usr/share/java/postgresql.jar")
"""The PostgreSQL JDBC driver as Debian's ``libpostgresql-jdbc-java`` installs it: ``sac audit``
reads the SDK's inbox table through it (no other download)."""
POSTGRESQL_JDBC_PACKAGE = "libpostgresql-jdbc-java"



def _no_latency() -> Latency:
    """``latency_ms`` of a run without effects; the collected ranks fill it in."""
    return {"count": 0, "p50": None, "p95": None, "p99": None, "max": None,
            "histogram": [0] * len(spec.HISTOGRAM_EDGES_MS)}


@dataclass
class _Parts:
    """What the collected results say of one run, before ``Verdict.assemble`` orders it."""

    name: str
    tolerated: dict[str, str]
    effects_source: str
    sizes: dict[str, int] = field(
        default_factory=lambda: {"published": 0, "confirmed": 0, "effects": 0})
    ids: dict[str, list[str]] = field(
        default_factory=lambda: {name: [] for name in ("lost", "duplicated", "unexpected",
                                                       "reordered")})
    pairs: list[Pair] = field(default_factory=list)
    malformed: list[MalformedLine] = field(default_factory=list)
    unknown_events: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    activity: list[Activity] = field(default_factory=list)
    handovers: list[tuple[Handover, str]] = field(default_factory=list)
    """Each with the id of its first commit, the last key of its order."""
    recovery: list[Recovery] = field(default_factory=list)
    latency: Latency = field(default_factory=_no_latency)

    def verdict(self) -> Verdict:
        handovers = [row for row, _ in sorted(self.handovers, key=lambda h: (
            h[0]["queue"], h[0]["first_commit"], h[0]["to"], h[1]))]
        return Verdict.assemble(
            run=self.name, engine=ENGINE, effects_source=self.effects_source,
            published=self.sizes["published"], confirmed=self.sizes["confirmed"],
            effects=self.sizes["effects"], lost=self.ids["lost"],
            duplicated=self.ids["duplicated"], unexpected=self.ids["unexpected"],
            concurrent=self.pairs, reordered=self.ids["reordered"], malformed=self.malformed,
            unknown_events=self.unknown_events, counts=self.counts, activity=self.activity,
            handovers=handovers, recovery=self.recovery, latency_ms=self.latency,
            tolerated=self.tolerated)


def spark_session(master: str | None = None, app: str = "sac-check") -> SparkSession:
    """A session for checking runs: ``local[*]`` unless ``master`` says otherwise (a
    ``spark://`` URL for a standalone cluster). For a local master the driver binds to the
    loopback only and the UI is off: the checker serves nothing. Logs are quiet (errors).

    The PostgreSQL JDBC driver is on the classpath when installed (``POSTGRESQL_JDBC_JAR``),
    so one session serves ``sac check`` and ``sac audit --inbox-jdbc`` alike; Spark ships it
    to a cluster's executors itself."""
    master = master or "local[*]"
    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # Python's json keeps the last of duplicate keys; so does this, instead of refusing.
        .config("spark.sql.variant.allowDuplicateKeys", "true")
    )
    if POSTGRESQL_JDBC_JAR.is_file():
        builder = builder.config("spark.jars", str(POSTGRESQL_JDBC_JAR))
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def check_runs(spark: SparkSession, paths: list[Path]) -> list[Verdict]:
    """The verdicts of the run directories ``paths``, in their order, computed in one set of
    Spark jobs for all of them.

    Raises ``sac.checker.errors.InputError`` (before any job) when a directory is missing, is
    not a run or its ``run.json`` cannot be trusted, and after the first job when a run holds
    nothing to check, as the reference engine does.
    """
    runs = open_runs(paths)
    if not runs:
        return []
    spark.conf.set("spark.sql.variant.allowDuplicateKeys", "true")
    inputs = read_inputs(spark, runs)
    persisted: list[DataFrame] = list(inputs.persisted)
    try:
        return _Assembly(inputs, persisted).verdicts()
    finally:
        for frame in persisted:
            frame.unpersist()


class _Assembly:
    """Runs the collecting jobs and fills one verdict per run from their small results."""

    def __init__(self, inputs: Inputs, persisted: list[DataFrame]) -> None:
        self.inputs = inputs
        self.persisted = persisted
        self.out = [
            _Parts(run.name, dict(run.config.tolerates),
                   spec.EFFECTS_SOURCE_FILE if run.has_effects_file
                   else spec.EFFECTS_SOURCE_EVENTS)
            for run in inputs.runs
        ]

    def _keep(self, frame: DataFrame) -> DataFrame:
        self.persisted.append(frame.persist())
        return frame

    def verdicts(self) -> list[Verdict]:
        events, effects = self.inputs.events, self.inputs.effects
        published = self._keep(rules.first_publishes(events))
        confirmed = rules.confirmed_ids(events)
        self._counts(events)  # first: refuses a run with nothing to check before other jobs
        timed = self._keep(rules.intervals(events, effects, published))
        self._sizes(published, confirmed, effects)
        self._malformed()
        self._ids(rules.anomaly_ids(effects, published, confirmed))
        self._ids(
            rules.reordered(events, effects, published, self.inputs.settings).withColumn(
                "name", F.lit("reordered")
            )
        )
        self._concurrency(timed)
        self._activity(timed)
        self._handovers(timed)
        self._recovery(events, effects)
        self._latency(timed)
        return [parts.verdict() for parts in self.out]

    def _counts(self, events: DataFrame) -> None:
        as_int = "int"
        rows = (
            events.groupBy("run", "type")
            .agg(
                F.count(F.lit(1)).alias("n"),
                F.sum(F.col("redelivered").cast(as_int)).alias("redelivered"),
                F.sum((F.col("why") == "stale-epoch").cast(as_int)).alias("stale"),
                F.sum((F.col("why") == "duplicate").cast(as_int)).alias("duplicate"),
                F.count("queue").alias("queued"),
            )
            .collect()
        )
        known = [0] * len(self.out)
        queued = [0] * len(self.out)
        for row in rows:
            parts = self.out[row["run"]]
            counts, kind = parts.counts, row["type"]
            if kind not in spec.KNOWN_EVENT_TYPES:
                parts.unknown_events[kind] = row["n"]
                continue
            known[row["run"]] += row["n"]
            queued[row["run"]] += row["queued"]
            if kind in spec.COUNT_KEYS:
                counts[kind] = row["n"]
            if kind == Deliver.KIND:
                counts[spec.REDELIVERED] = row["redelivered"] or 0
            if kind == CommitRejected.KIND:
                counts[spec.COMMIT_REJECTED_WHY["stale-epoch"]] = row["stale"] or 0
                counts[spec.COMMIT_REJECTED_WHY["duplicate"]] = row["duplicate"] or 0
        for run, read, named in zip(self.inputs.runs, known, queued, strict=True):
            require_checkable(run.path, read, named)

    def _sizes(self, published: DataFrame, confirmed: DataFrame, effects: DataFrame) -> None:
        def per_run(frame: DataFrame, name: str) -> DataFrame:
            return (
                frame.groupBy("run")
                .agg(F.count(F.lit(1)).alias("n"))
                .withColumn("name", F.lit(name))
            )

        sizes = (
            per_run(published, "published")
            .unionByName(per_run(confirmed, "confirmed"))
            .unionByName(per_run(effects, "effects"))
        )
        for row in sizes.collect():
            self.out[row["run"]].sizes[row["name"]] = row["n"]

    def _malformed(self) -> None:
        for row in self.inputs.malformed.collect():
            self.out[row["run"]].malformed.append(
                {"file": row["file"], "line": row["line"], "error": row["error"]}
            )

    def _ids(self, named: DataFrame) -> None:
        for row in named.collect():
            self.out[row["run"]].ids[row["name"]].append(row["msg"])

    def _concurrency(self, timed: DataFrame) -> None:
        settings = self.inputs.settings
        checked = (
            timed.join(settings, "run")
            .filter(F.col("checked").isNull() | F.array_contains(F.col("checked"), F.col("queue")))
            .drop("gap", "checked", "ordered")
        )
        numbered = self._keep(rules.with_islands(checked, F.lit(spec.CONCURRENCY_GAP_S)))
        pairs = self._keep(rules.concurrent_pairs(rules.islands(numbered)))
        msgs: dict[tuple[int, str, str, int], list[str]] = defaultdict(list)
        for row in rules.pair_msgs(pairs, numbered).collect():
            msgs[(row["run"], row["queue"], row["actor"], row["island"])].append(row["msg"])
        for row in pairs.collect():
            first, second = row["first"], row["second"]
            key = (row["run"], row["queue"], second["actor"], second["island"])
            self.out[row["run"]].pairs.append(
                {
                    "queue": row["queue"],
                    "first": _span(first),
                    "second": _span(second),
                    "overlap_s": row["overlap_s"],
                    "msgs": sorted(msgs[key]),
                }
            )

    def _activity(self, timed: DataFrame) -> None:
        gaps = timed.join(self.inputs.settings, "run")
        found = rules.islands(rules.with_islands(gaps, F.col("gap")))
        for row in found.collect():
            self.out[row["run"]].activity.append(
                {
                    "queue": row["queue"],
                    "actor": row["actor"],
                    "start": row["start"],
                    "end": row["end"],
                    "effects": row["effects"],
                }
            )

    def _handovers(self, timed: DataFrame) -> None:
        for row in rules.handovers(timed).collect():
            self.out[row["run"]].handovers.append((
                {
                    "queue": row["queue"],
                    "from": row["from"],
                    "to": row["to"],
                    "last_commit": row["last_commit"],
                    "first_commit": row["first_commit"],
                    "gap_s": row["gap_s"],
                },
                row["msg"],
            ))

    def _recovery(self, events: DataFrame, effects: DataFrame) -> None:
        for row in rules.recovery(events, effects).collect():
            self.out[row["run"]].recovery.append(
                {
                    "fault": row["fault"],
                    "target": row["target"],
                    "start": row["start"],
                    "end": row["end"],
                    "recovery_s": row["recovery_s"],
                }
            )

    def _latency(self, timed: DataFrame) -> None:
        values = self._keep(rules.latencies(timed))
        for row in rules.histogram(values).collect():
            self.out[row["run"]].latency["histogram"][row["bin"]] = row["n"]
        ordered = self._keep(in_order(values, "run", "x"))
        for row in rules.ranked_values(ordered).collect():
            latency, n = self.out[row["run"]].latency, row["n"]
            latency["count"] = n
            rank = row["rank"]
            if spec.nearest_rank(50, n) + 1 == rank:
                latency["p50"] = row["x"]
            if spec.nearest_rank(95, n) + 1 == rank:
                latency["p95"] = row["x"]
            if spec.nearest_rank(99, n) + 1 == rank:
                latency["p99"] = row["x"]
            if rank == n:
                latency["max"] = row["x"]


def _span(island: Any) -> Span:
    return {"actor": island["actor"], "start": island["start"], "end": island["end"]}
