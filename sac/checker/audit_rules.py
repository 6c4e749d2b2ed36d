"""The rules of ``sac audit`` (``SPEC.md``, "sac audit") as DataFrame operations.

An audit reads one history (a fleet's event files, ``spark_read.read_history``), so every
frame carries ``run`` 0 and the verdict's rules in ``spark_rules`` (first publishes,
processing intervals, islands, the concurrency sweep, handovers) apply unchanged; what is new
here is where an effect's queue comes from, the settle window, and placing every figure in a
(queue, UTC day) row. Nothing here collects: ``sac.checker.audit`` collects the per-row figures
and the capped id lists that these frames end in.

Each per-id figure has one home row, so a row's figures add up: publisher-side figures
(published, confirmed, lost, pending) in the queue the id was published to, consumer-side
ones (committed, duplicated, unexpected) in the queue its effect was committed in, both on
the day of its first publish. The two queues are the same under the default exchange.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from sac.history import Commit, Confirm
from . import spark_rules as rules
from . import spec

SECONDS_PER_DAY = 86_400
ROW = ("queue", "day")
"""The key of an audit row."""


def utc_day(ts: Column) -> Column:
    """``YYYY-MM-DD``, the UTC date of Unix seconds ``ts``: arithmetic on the day number, so
    the session's time zone cannot move a message to another day."""
    return F.date_from_unix_date(_day_number(ts)).cast("string")


def row_key(ts: Column) -> tuple[Column, Column]:
    """The ``ROW`` columns of something in ``queue`` at time ``ts``."""
    return F.col("queue"), utc_day(ts).alias("day")


def effects_from_events(events: DataFrame, published: DataFrame) -> DataFrame:
    """``run, queue, msg, actor, ts``: the ``commit`` events as effects.

    A commit names no queue: it is in the queue its id was published to, else (an id no
    publisher recorded, or published without a queue) in the queue of the committing actor's
    latest ``active`` event at or before it (``""`` when there is none). Only those orphans
    are sorted with the actors' ``active`` events, per actor.
    """
    commits = events.filter(F.col("type") == Commit.KIND).select("run", "msg", "actor", "ts")
    named = published.select(
        "run", "msg", F.when(F.col("queue") != spec.UNKNOWN_QUEUE, F.col("queue")).alias("pq")
    )
    placed = commits.join(named, ["run", "msg"], "left")
    known = placed.filter(F.col("pq").isNotNull()).select(
        "run", F.col("pq").alias("queue"), "msg", "actor", "ts"
    )
    orphans = placed.filter(F.col("pq").isNull()).select("run", "msg", "actor", "ts")
    latest = rules.latest_before(rules.claims(events), orphans, ["run", "actor"], "queue", "aq")
    guessed = latest.select(
        "run",
        F.coalesce(F.col("aq"), F.lit(spec.UNKNOWN_QUEUE)).alias("queue"),
        "msg",
        "actor",
        "ts",
    )
    return known.unionByName(guessed)


def tag_effects(
    effects: DataFrame, published: DataFrame, span: tuple[float, float] | None
) -> DataFrame:
    """``effects`` with ``first_pub`` (null: never published in the history) and ``outside``:
    an effect of an unpublished id committed outside the history's ``span`` (``None``: the
    history has no event). A table holds effects from before the history began and after
    it was cut; the history cannot tell whether those ids were published, so they are not
    counted as ``unexpected`` (nor anywhere else)."""
    firsts = published.select("run", "msg", "first_pub")
    unpublished = F.col("first_pub").isNull()
    if span is None:
        beyond = F.lit(True)
    else:
        beyond = (F.col("ts") < F.lit(span[0])) | (F.col("ts") > F.lit(span[1]))
    return effects.join(firsts, ["run", "msg"], "left").withColumn(
        "outside", unpublished & beyond
    )


def message_side(
    events: DataFrame, published: DataFrame, effects: DataFrame, cutoff: float
) -> DataFrame:
    """``run, msg, queue, day, published, confirmed, lost, pending`` (flags) per id with a
    ``publish`` or ``confirm`` event, in the queue it was published to and on the day of its
    first publish (of its first confirm when its publish is missing).

    A confirmed id without an effect (in any queue) is ``lost`` when its first confirm is at
    or before ``cutoff`` (the history's end minus the settle window), else ``pending``: the
    broker holds a message from its confirm, so that is when the consumers' time starts.

    One aggregation per id over the publishes, confirms and effects together (rather than
    joins of three aggregations): a single shuffle, partially aggregated where it is read.
    """
    none = {"first_pub": "double", "queue": "string", "first_confirm": "double",
            "has_effect": "boolean"}

    def part(frame: DataFrame, **given: Column) -> DataFrame:
        return frame.select(
            "run", "msg", *(given.get(name, F.lit(None)).cast(kind).alias(name)
                            for name, kind in none.items())
        )

    merged = (
        part(published, first_pub=F.col("first_pub"), queue=F.col("queue"))
        .unionByName(part(events.filter(F.col("type") == Confirm.KIND), first_confirm=F.col("ts")))
        .unionByName(part(effects, has_effect=F.lit(True)))
        .groupBy("run", "msg")
        .agg(
            F.min("first_pub").alias("first_pub"),
            F.max("queue").alias("queue"),  # only the publish part has one
            F.min("first_confirm").alias("first_confirm"),
            F.max("has_effect").alias("has_effect"),
        )
        .filter(F.col("first_pub").isNotNull() | F.col("first_confirm").isNotNull())
    )
    confirmed = F.col("first_confirm").isNotNull()
    unfinished = confirmed & F.col("has_effect").isNull()
    return merged.select(
        "run",
        "msg",
        F.coalesce(F.col("queue"), F.lit(spec.UNKNOWN_QUEUE)).alias("queue"),
        utc_day(F.coalesce(F.col("first_pub"), F.col("first_confirm"))).alias("day"),
        F.col("first_pub").isNotNull().alias("published"),
        confirmed.alias("confirmed"),
        (unfinished & (F.col("first_confirm") <= F.lit(cutoff))).alias("lost"),
        (unfinished & (F.col("first_confirm") > F.lit(cutoff))).alias("pending"),
    )


def effect_side(tagged: DataFrame) -> DataFrame:
    """``run, msg, queue, day, committed, duplicated, unexpected`` (flags) per id and queue
    with an effect (``tag_effects`` rows inside the history), on the day of the id's first
    publish (of its first effect in that queue when never published). Duplicated: more than
    one effect of the id in one queue (what the inbox's key forbids)."""
    return (
        tagged.groupBy("run", "queue", "msg")
        .agg(
            F.count(F.lit(1)).alias("rows"),
            F.min("ts").alias("first_effect"),
            F.min("first_pub").alias("first_pub"),
        )
        .select(
            "run",
            "msg",
            "queue",
            utc_day(F.coalesce(F.col("first_pub"), F.col("first_effect"))).alias("day"),
            F.lit(True).alias("committed"),
            (F.col("rows") >= 2).alias("duplicated"),
            F.col("first_pub").isNull().alias("unexpected"),
        )
    )


def row_counts(parts: list[tuple[DataFrame, list[str]]]) -> DataFrame:
    """``queue, day, name, n``: per row, how many rows of each frame have each of its flags
    (boolean columns; a frame's flag ``True`` counts every row). One aggregation over all
    the frames, however many figures they carry."""
    names = [flag for _, flags in parts for flag in flags]
    counted = None
    for frame, flags in parts:
        ones = frame.select(
            *ROW,
            *(
                (F.col(name).cast("long") if name in flags and name in frame.columns
                 else F.lit(1 if name in flags else 0).cast("long")).alias(name)
                for name in names
            ),
        )
        counted = ones if counted is None else counted.unionByName(ones)
    if counted is None:
        raise ValueError("no frame to count")
    sums = counted.groupBy(*ROW).agg(*(F.sum(name).alias(name) for name in names))
    return sums.unpivot(list(ROW), tuple(names), "name", "n")


def flagged_ids(frame: DataFrame, flags: list[str]) -> DataFrame:
    """``queue, day, name, msg``: the ids having each of ``flags``."""
    parts = [
        frame.filter(F.col(flag)).select(*ROW, F.lit(flag).alias("name"), "msg") for flag in flags
    ]
    found = parts[0]
    for part in parts[1:]:
        found = found.unionByName(part)
    return found


def first_ids(ids: DataFrame, cap: int) -> DataFrame:
    """``queue, day, name, msg``: the ``cap`` smallest ids of each (row, name); a window per
    (row, name), so only those reach the driver."""
    order = Window.partitionBy(*ROW, "name").orderBy("msg")
    return ids.withColumn("rank", F.row_number().over(order)).filter(F.col("rank") <= cap).drop(
        "rank"
    )


def concurrent_islands(timed: DataFrame, single_active: list[str] | None) -> DataFrame:
    """``timed`` on the checked queues, numbered into islands of one actor's back-to-back
    processing (gap 0, as the verdict's concurrency): persist it, the pairs and their ids
    both read it."""
    checked = timed if single_active is None else timed.filter(F.col("queue").isin(single_active))
    return rules.with_islands(checked, F.lit(spec.CONCURRENCY_GAP_S))


def concurrent_pairs(numbered: DataFrame) -> DataFrame:
    """The verdict's overlapping pairs (``spark_rules.concurrent_pairs``) with ``day``: the
    UTC day the overlap starts (the second island's start)."""
    pairs = rules.concurrent_pairs(rules.islands(numbered))
    return pairs.withColumn("day", utc_day(F.col("second.start")))


def concurrent_ids(pairs: DataFrame, numbered: DataFrame) -> DataFrame:
    """``queue, day, msg``: the ids processed inside the overlaps, on the day of the pair
    they are in (an id in two pairs on two days is in both rows)."""
    days = pairs.select(
        "run",
        "queue",
        F.col("second.actor").alias("actor"),
        F.col("second.island").alias("island"),
        "day",
    )
    msgs = rules.pair_msgs(pairs, numbered)
    return msgs.join(days, ["run", "queue", "actor", "island"]).select(*ROW, "msg").distinct()


def activity(timed: DataFrame, gap: float) -> DataFrame:
    """``queue, day, name, n``: ``periods``, the stretches of one consumer's work (islands
    with ``gap``, as the verdict's activity) going on that day, and ``consumers``, whose they
    are. A stretch over midnight counts on each of its days: the day a busy consumer started
    is no more its day than the next."""
    found = rules.islands(rules.with_islands(timed, F.lit(gap)))
    days = F.sequence(_day_number(F.col("start")), _day_number(F.col("end")))
    per_row = (
        found.select("queue", "actor", F.explode(days).alias("d"))
        .groupBy("queue", "d")
        .agg(F.count(F.lit(1)).alias("periods"), F.countDistinct("actor").alias("consumers"))
        .select("queue", F.date_from_unix_date("d").cast("string").alias("day"), "periods",
                "consumers")
    )
    return per_row.unpivot(list(ROW), ["periods", "consumers"], "name", "n")


def handover_stats(timed: DataFrame) -> DataFrame:
    """``queue, day, handovers, p50, max``: per row, the verdict's handovers (consecutive
    effects of a queue by different consumers) starting that day (at the last commit before
    the change), and the exact nearest-rank median and the largest of their gaps (seconds).

    Ranked by a window per row: handovers are changes of consumer, few per queue and day,
    where ``spark_rules.ranked_values`` is built for a run's every effect.
    """
    found = rules.handovers(timed).select(*row_key(F.col("last_commit")), "gap_s")
    ranked = found.withColumn(
        "rank", F.row_number().over(Window.partitionBy(*ROW).orderBy("gap_s"))
    ).withColumn("n", F.count(F.lit(1)).over(Window.partitionBy(*ROW)))
    median = F.col("rank") == rules.nearest_rank(50, "n")
    return ranked.groupBy(*ROW).agg(
        F.max("n").alias("handovers"),
        F.max(F.when(median, F.col("gap_s"))).alias("p50"),
        F.max("gap_s").alias("max"),
    )


def _day_number(ts: Column) -> Column:
    """Days since 1970-01-01 (UTC) of Unix seconds ``ts``."""
    return F.floor(ts / SECONDS_PER_DAY).cast("int")
