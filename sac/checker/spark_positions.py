"""Exact 1-based positions of rows in a distributed order, without collecting and without a
single-task sort: the trick behind malformed line numbers and percentile ranks.

``monotonically_increasing_id()`` taken right where rows come out in order (a file split being
read, a partition coming out of a sort) is consecutive within that *segment*. So a row's
position in its group is the number of rows in the group's earlier segments plus its distance
from its segment's first id. That needs one aggregation to one row per (group, segment),
a window over those few rows, and a join back; every row stays where it is.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

ID = "mid"
"""The column holding the consecutive ids."""


def positions(rows: DataFrame, everything: DataFrame, group: list[str], segment: str) -> DataFrame:
    """``rows`` (a subset of ``everything``, keeping its ``group``, ``segment`` and ``mid``
    columns) with ``position`` (1-based within its group, over ``everything``) and ``total``
    (the rows of its group in ``everything``).

    Segments are ordered within a group by ``segment``'s value (a split's byte offset, a
    partition's index), and ids must be consecutive within each (group, segment).
    """
    earlier = Window.partitionBy(*group).orderBy(segment).rowsBetween(Window.unboundedPreceding, -1)
    segments = (
        everything.groupBy(*group, segment)
        .agg(F.min(ID).alias("first_id"), F.count(F.lit(1)).alias("rows"))
        .withColumn("before", F.coalesce(F.sum("rows").over(earlier), F.lit(0)))
        .withColumn("total", F.sum("rows").over(Window.partitionBy(*group)))
    )
    return (
        rows.join(segments, [*group, segment])
        .withColumn("position", F.col("before") + F.col(ID) - F.col("first_id") + 1)
        .drop("first_id", "rows", "before")
    )


def in_order(values: DataFrame, group: str, order: str) -> DataFrame:
    """``values`` sorted by (``group``, ``order``) across the cluster (range partitioning),
    with the ``part`` (segment) and ``mid`` columns that ``positions`` needs. Persist it
    before using it twice: the ids must be the same for the aggregation and the join."""
    return values.orderBy(group, order).select(
        "*", F.spark_partition_id().alias("part"), F.monotonically_increasing_id().alias(ID)
    )
