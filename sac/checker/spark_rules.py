"""The rules of ``SPEC.md`` as DataFrame operations, for every run at once.

Every DataFrame here carries ``run`` (the run's index) and every window and join is keyed by it
first, so one job checks any number of runs. What the driver collects from these is bounded by
anomalies and activity (ids, pairs, islands, handovers, faults), never by events.

Order-dependent rules are window functions over a sort, never a cross join, so the cost stays
a sort of the rows involved, near-linear in events: processing starts per (run, msg, actor)
(delivers) and (run, actor, queue) (claims), islands and handovers per (run, queue, actor) and
(run, queue), the concurrency sweep over the islands of a queue, fault ends per (run, fault,
target). The two rules that would otherwise sort a whole run in one task do not: percentile
ranks come from a sort spread over the cluster (``spark_positions``), and recovery tags each
effect with the number of fault starts before it (``recovery``). The per-queue windows are
what the spec's sweep asks for: one queue's effects are sorted in one task (and one
consumer's effects on it, for its claims).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from sac.history import Active, Cancelled, Confirm, Deliver, FaultEnd, FaultStart, Publish, Reject
from . import spec
from .spark_positions import positions

_EARLIER = (Window.unboundedPreceding, -1)
_SO_FAR = (Window.unboundedPreceding, Window.currentRow)
_FROM_HERE = (Window.currentRow, Window.unboundedFollowing)


def first_publishes(events: DataFrame) -> DataFrame:
    """``run, msg, first_pub, queue``: per published id, its earliest publish time and its
    queue (the queue of its earliest publish naming one, ties by name; else ``""``)."""
    named = F.when(F.col("queue").isNotNull(), F.struct("ts", "queue"))
    return (
        events.filter(F.col("type") == Publish.KIND)
        .groupBy("run", "msg")
        .agg(F.min("ts").alias("first_pub"), F.min(named).alias("q"))
        .select(
            "run",
            "msg",
            "first_pub",
            F.coalesce(F.col("q.queue"), F.lit(spec.UNKNOWN_QUEUE)).alias("queue"),
        )
    )


def confirmed_ids(events: DataFrame) -> DataFrame:
    """``run, msg``: distinct confirmed ids."""
    return events.filter(F.col("type") == Confirm.KIND).select("run", "msg").distinct()


def anomaly_ids(effects: DataFrame, published: DataFrame, confirmed: DataFrame) -> DataFrame:
    """``run, name, msg`` for ``lost``, ``duplicated`` and ``unexpected`` (anti-joins)."""
    rows = effects.groupBy("run", "msg").agg(F.count(F.lit(1)).alias("rows"))
    lost = confirmed.join(rows, ["run", "msg"], "left_anti").withColumn("name", F.lit("lost"))
    duplicated = (
        rows.filter(F.col("rows") >= 2).select("run", "msg").withColumn("name", F.lit("duplicated"))
    )
    unexpected = (
        rows.select("run", "msg")
        .join(published, ["run", "msg"], "left_anti")
        .withColumn("name", F.lit("unexpected"))
    )
    return lost.unionByName(duplicated).unionByName(unexpected).select("run", "name", "msg")


def intervals(events: DataFrame, effects: DataFrame, published: DataFrame) -> DataFrame:
    """``run, msg, actor, c, s, queue, first_pub``: each effect row's processing interval,
    in the queue of its id (``processing_starts``)."""
    placed = effects.select(*_EFFECT_KEY).join(published, ["run", "msg"], "left")
    return processing_starts(
        events,
        placed.select(
            *_EFFECT_KEY,
            F.coalesce(F.col("queue"), F.lit(spec.UNKNOWN_QUEUE)).alias("queue"),
            "first_pub",
        ),
    )


_EFFECT_KEY = ("run", "msg", "actor", "ts")


def processing_starts(events: DataFrame, effects: DataFrame) -> DataFrame:
    """``effects`` (``run, msg, actor, ts, queue`` and any other columns, kept) with ``ts``
    renamed ``c`` and ``s``: the later of the last deliver of the id by the same actor and
    the actor's last ``active`` on the effect's queue, at or before ``c``; else ``c``.

    Two sweeps (``latest_before``): the delivers of each (run, msg, actor) and the claims
    of each (run, actor, queue), each sorted together with the effects by time.
    """
    delivers = events.filter(F.col("type") == Deliver.KIND).select(*_EFFECT_KEY)
    delivered = latest_before(delivers, effects, ["run", "msg", "actor"], "ts", "delivered")
    claimed = latest_before(claims(events), delivered, ["run", "actor", "queue"], "ts", "claimed")
    extra = [name for name in effects.columns if name not in _EFFECT_KEY]
    # greatest() skips nulls: null only when there is neither.
    start = F.coalesce(F.greatest("delivered", "claimed"), F.col("ts"))
    return claimed.select("run", "msg", "actor", F.col("ts").alias("c"), start.alias("s"), *extra)


def claims(events: DataFrame) -> DataFrame:
    """``run, actor, queue, ts``: the ``active`` events that name a queue (one without a
    queue claims none)."""
    return events.filter((F.col("type") == Active.KIND) & F.col("queue").isNotNull()).select(
        "run", "actor", "queue", "ts"
    )


def latest_before(
    marks: DataFrame, rows: DataFrame, key: list[str], value: str, name: str
) -> DataFrame:
    """``rows`` with ``name``: the ``value`` of the latest of ``marks`` with the same ``key``
    at or before the row's ``ts`` (null without one).

    ``marks`` has the ``key`` columns, ``ts`` and ``value``; the marks and rows of each key
    are sorted together by time, marks first on a tie, and the last mark's value so far is
    carried to each row: a sweep, never a join of rows with marks.
    """
    columns = rows.columns

    def none(name: str) -> Column:
        return F.lit(None).cast(rows.schema[name].dataType).alias(name)

    kind = marks.schema[value].dataType
    tagged = rows.select(*columns, F.lit(None).cast(kind).alias("_mark"), F.lit(1).alias("_row"))
    keyed = marks.select(
        *(F.col(c) if c in key or c == "ts" else none(c) for c in columns),
        F.col(value).alias("_mark"),
        F.lit(0).alias("_row"),
    )
    order = Window.partitionBy(*key).orderBy("ts", "_row").rowsBetween(*_SO_FAR)
    return (
        keyed.unionByName(tagged)
        .withColumn(name, F.last("_mark", ignorenulls=True).over(order))
        .filter(F.col("_row") == 1)
        .select(*columns, name)
    )


def with_islands(intervals_df: DataFrame, gap: Column) -> DataFrame:
    """``intervals_df`` with ``island``: its island's number within (run, queue, actor).

    Sorted by (s, c, msg), an interval starts a new island when its ``s`` is beyond the
    largest ``c`` so far plus ``gap``: a running max and a running sum of the starts.
    """
    order = Window.partitionBy("run", "queue", "actor").orderBy("s", "c", "msg")
    reach = F.max("c").over(order.rowsBetween(*_EARLIER))
    starts = reach.isNull() | (F.col("s") > reach + gap)
    return intervals_df.withColumn("new", starts.cast("int")).withColumn(
        "island", F.sum("new").over(order.rowsBetween(*_SO_FAR))
    )


def islands(numbered: DataFrame) -> DataFrame:
    """``run, queue, actor, island, start, end, effects`` from ``with_islands``' output."""
    return numbered.groupBy("run", "queue", "actor", "island").agg(
        F.min("s").alias("start"), F.max("c").alias("end"), F.count(F.lit(1)).alias("effects")
    )


def concurrent_pairs(found: DataFrame) -> DataFrame:
    """``run, queue, first, second, overlap_s`` (``first``/``second``: actor, island, start,
    end) by the sweep of ``SPEC.md``: per queue, islands by (start, end, actor); each is paired
    with the earlier island reaching furthest (largest end, earliest on ties) when that one
    ends after it starts."""
    order = Window.partitionBy("run", "queue").orderBy("start", "end", "actor")
    ranked = found.withColumn("pos", F.row_number().over(order))
    # max over (end, -pos): the largest end, the earliest island among equal ends.
    furthest = F.max(
        F.struct(
            F.col("end").alias("end"),
            (-F.col("pos")).alias("neg_pos"),
            F.col("actor").alias("actor"),
            F.col("island").alias("island"),
            F.col("start").alias("start"),
        )
    ).over(order.rowsBetween(*_EARLIER))
    second = F.struct("actor", "island", "start", "end")
    return (
        ranked.withColumn("a", furthest)
        .filter(F.col("a.end") > F.col("start"))
        .select(
            "run",
            "queue",
            F.struct("a.actor", "a.island", "a.start", "a.end").alias("first"),
            second.alias("second"),
            (F.least(F.col("a.end"), F.col("end")) - F.col("start")).alias("overlap_s"),
        )
    )


def pair_msgs(pairs: DataFrame, numbered: DataFrame) -> DataFrame:
    """``run, queue, actor, island, msg``: per pair (named by its second island), the ids of
    the first island's intervals ending after the second starts and of the second's intervals
    starting before the first ends. Equi-joins of the few pairs with the intervals."""
    key = ["run", "queue", "actor", "island"]
    small = F.broadcast(pairs)
    from_first = _pair_side(small, "first", F.col("second.start"))
    from_second = _pair_side(small, "second", F.col("first.end"))
    first_msgs = from_first.join(numbered, key).filter(F.col("c") > F.col("bound"))
    second_msgs = from_second.join(numbered, key).filter(F.col("s") < F.col("bound"))
    columns: list[Column | str] = [
        "run",
        "queue",
        F.col("pair_actor").alias("actor"),
        F.col("pair_island").alias("island"),
        "msg",
    ]
    return first_msgs.select(*columns).unionByName(second_msgs.select(*columns)).distinct()


def _pair_side(pairs: DataFrame, side: str, bound: Column) -> DataFrame:
    """The island on ``side`` of each pair, the pair's key and the bound its intervals are
    compared with."""
    return pairs.select(
        "run",
        "queue",
        F.col(f"{side}.actor").alias("actor"),
        F.col(f"{side}.island").alias("island"),
        F.col("second.actor").alias("pair_actor"),
        F.col("second.island").alias("pair_island"),
        bound.alias("bound"),
    )


def handovers(timed: DataFrame) -> DataFrame:
    """``run, queue, from, to, last_commit, first_commit, gap_s, msg``: consecutive effect
    rows of a queue (by ts, actor, msg) by different actors. ``msg`` (of the later row) is
    the tie-break that makes the driver's sort match the reference's stable sort."""
    order = Window.partitionBy("run", "queue").orderBy("c", "actor", "msg")
    return (
        timed.withColumn("from", F.lag("actor").over(order))
        .withColumn("last_commit", F.lag("c").over(order))
        .filter(F.col("from").isNotNull() & (F.col("from") != F.col("actor")))
        .select(
            "run",
            "queue",
            "from",
            F.col("actor").alias("to"),
            "last_commit",
            F.col("c").alias("first_commit"),
            (F.col("c") - F.col("last_commit")).alias("gap_s"),
            "msg",
        )
    )


def recovery(events: DataFrame, effects: DataFrame) -> DataFrame:
    """``run, fault, target, start, end, recovery_s`` per ``fault_start``.

    ``end``: fault starts and ends of one (fault, target) sorted by time, starts first on a
    tie (an end at the same time counts); the smallest end from each start on. Nemesis events
    are few, so this sort is small.

    ``recovery_s`` needs, per start, the first effect after it, and effects are many: rather
    than sort a run's effects in one task, each effect is tagged with ``j``, the number of the
    run's starts before it (the few starts are broadcast as a sorted array), and only the
    earliest effect per (run, j) is kept (a partial aggregation, no shuffle of effects).
    An effect is after start ``i`` (0-based, in time order) exactly when its ``j > i``, so
    the first effect after start ``i`` is the smallest of the kept ones with ``j > i``.
    """
    faults = events.filter(F.col("type").isin(FaultStart.KIND, FaultEnd.KIND)).select(
        "run", "fault", "target", "ts", (F.col("type") == FaultEnd.KIND).cast("int").alias("k")
    )
    by_fault = (
        Window.partitionBy("run", "fault", "target").orderBy("ts", "k").rowsBetween(*_FROM_HERE)
    )
    starts = (
        faults.withColumn("end", F.min(F.when(F.col("k") == 1, F.col("ts"))).over(by_fault))
        .filter(F.col("k") == 0)
        .select("run", "fault", "target", F.col("ts").alias("start"), "end")
    )
    times = starts.groupBy("run").agg(F.array_sort(F.collect_list("start")).alias("starts"))
    before = F.size(F.filter("starts", lambda start: start < F.col("ts")))
    firsts = (
        effects.join(F.broadcast(times), "run")
        .groupBy("run", before.alias("j"))
        .agg(F.min("ts").alias("first"))
    )
    indexed = starts.join(times, "run").withColumn(
        "i", F.array_position("starts", F.col("start")) - 1
    )
    next_effect = (
        indexed.select("run", "i")
        .distinct()
        .join(firsts, "run")
        .filter(F.col("j") > F.col("i"))
        .groupBy("run", "i")
        .agg(F.min("first").alias("next_effect"))
    )
    return indexed.join(next_effect, ["run", "i"], "left").select(
        "run",
        "fault",
        "target",
        "start",
        "end",
        (F.col("next_effect") - F.col("start")).alias("recovery_s"),
    )


def latencies(timed: DataFrame) -> DataFrame:
    """``run, x``: publish-to-effect times in ms, for effect rows of a published id."""
    return timed.filter(F.col("first_pub").isNotNull()).select(
        "run", ((F.col("c") - F.col("first_pub")) * 1000).alias("x")
    )


def histogram(values: DataFrame) -> DataFrame:
    """``run, bin, n``: latency histogram counts (bin: edges at or below x, minus one, >= 0)."""
    at_or_below = sum(
        ((F.col("x") >= F.lit(float(edge))).cast("int") for edge in spec.HISTOGRAM_EDGES_MS),
        F.lit(0),
    )
    return (
        values.withColumn("bin", F.greatest(at_or_below - 1, F.lit(0)))
        .groupBy("run", "bin")
        .agg(F.count(F.lit(1)).alias("n"))
    )


def ranked_values(ordered: DataFrame) -> DataFrame:
    """``run, rank, n, x``: the values at the nearest ranks of ``spec.PERCENTILES`` and at
    ``n`` (the max), exactly. ``ordered`` is ``spark_positions.in_order(values, "run", "x")``,
    persisted: the values are sorted across the cluster and each row's rank is its position,
    so no run's values have to fit one task (``percentile_approx``: see ``spark_engine``).
    """
    ranked = positions(ordered, ordered, ["run"], "part").select(
        "run", F.col("position").alias("rank"), F.col("total").alias("n"), "x"
    )
    wanted = [nearest_rank(pct, "n") for pct in spec.PERCENTILES] + [F.col("n")]
    return ranked.filter(F.col("rank").isin(*wanted))


def nearest_rank(pct: int, n: str) -> Column:
    """1-based nearest rank, in integer arithmetic like ``spec.nearest_rank`` (+1)."""
    return F.expr(f"({pct} * {n} + 99) div 100")


def reordered(
    events: DataFrame, effects: DataFrame, published: DataFrame, settings: DataFrame
) -> DataFrame:
    """``run, msg``: ids committed after an id their publisher published later, on a checked
    queue (``SPEC.md``, "Order"), as the reference's ``python_engine.reordered``.

    Each id's first commit is placed by its publisher's ``seq``; ids that keep no place
    (``spec.UNORDERED_EVENTS``, a ``reject`` not requeued) or came back from a consumer's failure
    (``returned_by_failure``) are left out; then, per (run, queue, publisher), the first
    commits sorted by (time, seq, id) and a running max of the ``seq`` before each: a window,
    one publisher's messages on one queue in one task.
    """
    publishes = events.filter((F.col("type") == Publish.KIND) & F.col("seq").isNotNull())
    positions = publishes.groupBy("run", "msg").agg(
        F.min(F.struct("ts", "actor", "seq")).alias("p")
    )
    parked = (F.col("type") == Reject.KIND) & ~F.col("requeue")
    unordered = events.filter(F.col("type").isin(*spec.UNORDERED_EVENTS) | parked).select(
        "run", "msg"
    )
    firsts = effects.groupBy("run", "msg").agg(F.min(F.struct("ts", "actor")).alias("f"))
    candidates = (
        firsts.join(positions, ["run", "msg"])
        .join(unordered, ["run", "msg"], "left_anti")
        .join(published.select("run", "msg", "queue"), ["run", "msg"])
        .join(settings.select("run", "ordered"), "run")
        .filter(F.col("ordered").isNull() | F.array_contains("ordered", F.col("queue")))
        .select(
            "run",
            "msg",
            F.col("f.actor").alias("actor"),
            F.col("f.ts").alias("ts"),
            "queue",
            F.col("p.actor").alias("publisher"),
            F.col("p.seq").alias("seq"),
        )
    )
    kept = candidates.join(returned_by_failure(events, candidates), ["run", "msg"], "left_anti")
    order = Window.partitionBy("run", "queue", "publisher").orderBy("ts", "seq", "msg")
    before = F.max("seq").over(order.rowsBetween(*_EARLIER))
    return kept.withColumn("before", before).filter(F.col("before") > F.col("seq")).select(
        "run", "msg"
    )


def returned_by_failure(events: DataFrame, commits: DataFrame) -> DataFrame:
    """``run, msg`` of the ``commits`` (``run, msg, actor, ts``: an id's first commit) whose
    delivery (the committer's last of the id at or before the commit) followed an earlier
    delivery of the id whose holder did not hand it back gracefully: no ``cancelled`` by the
    client of that holder between the two deliveries (both ends included).

    Two sweeps (``latest_before``): the id's distinct deliveries, each carrying the one before
    it (a lag in (time, actor) order), up to the commit; then the holder's client cancels up
    to that delivery.
    """
    distinct = (
        events.filter(F.col("type") == Deliver.KIND).select("run", "msg", "actor", "ts").distinct()
    )
    by_time = Window.partitionBy("run", "msg").orderBy("ts", "actor")
    delivers = distinct.select(
        "run",
        "msg",
        "actor",
        "ts",
        F.struct(
            F.col("ts").alias("at"),
            F.lag("actor").over(by_time).alias("holder"),
            F.lag("ts").over(by_time).alias("held"),
        ).alias("d"),
    )
    taken = latest_before(
        delivers, commits.select("run", "msg", "actor", "ts"), ["run", "msg", "actor"], "d", "d"
    ).filter(F.col("d.holder").isNotNull())
    cancels = events.filter(
        (F.col("type") == Cancelled.KIND) & (F.col("by") == spec.CLIENT_CANCEL)
    ).select("run", "actor", "ts")
    back = taken.select(
        "run",
        "msg",
        F.col("d.holder").alias("actor"),
        F.col("d.at").alias("ts"),
        F.col("d.held").alias("held"),
    )
    cancelled = latest_before(cancels, back, ["run", "actor"], "ts", "cancel")
    graceful = F.col("cancel").isNotNull() & (F.col("cancel") >= F.col("held"))
    return cancelled.filter(~graceful).select("run", "msg")
