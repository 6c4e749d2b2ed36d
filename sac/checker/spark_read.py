"""Reading many run directories into a few DataFrames, for the Spark engine (``SPEC.md``).

All runs' files are read in **one** text scan, each line tagged with its run (an integer
index into the list of runs) from its file path, so a month of histories is one job, not one
job per run. The driver only lists files and reads each small ``run.json`` (with the reference
engine's own ``sac.checker.runs.open_run``, so both engines accept and refuse the same settings);
it never sees an event.

Each line is parsed once with ``try_parse_json`` into a ``VARIANT`` (whole lines only: see
``_parse_whole``) and checked field by field against its JSON type (``schema_of_variant``):
Spark's typed JSON reader coerces (a number read as a string column becomes ``"5"``), which
would let a wrong type through where the reference reports a malformed line. The fields are
then taken out of the variant into the explicit schemas ``EVENT_COLUMNS``/``EFFECT_COLUMNS``.

Line numbers: Spark's readers have none. ``monotonically_increasing_id()`` on the scan is
consecutive within each input split, and a split is a contiguous byte range of one file, so a
line's number is (lines of the file's earlier splits) + (its id - the split's first id) + 1.
That costs one aggregation over the lines (one row per split and partition, so the shuffle is
tiny) and a join of the few malformed lines with its result (``spark_positions``); no line is
collected and no file is read twice (the parsed lines are persisted for the rules that
follow).
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark import StorageLevel
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sac.history import Cancelled, Commit, CommitRejected, Deliver, Publish, Reject
from . import spec
from .errors import InputError
from .runs import Run, event_files, open_run
from .spark_positions import positions

EVENT = "event"
EFFECT = "effect"
"""The two kinds of line files (``kind`` column)."""

_BLANK = r"^[ \t\r\n]*$"
"""Ignored lines (SPEC: only space, tab, CR; ``\\n`` never reaches a line)."""
_OBJECT_START = r"^[ \t\r\n]*\{"
"""A line that parsed as JSON is an object exactly when it starts with ``{``: cheaper than
asking the variant for its whole schema."""

_INTEGER_TYPES = ("TINYINT", "SMALLINT", "INT", "BIGINT")


FILES_SCHEMA = T.StructType(
    [
        T.StructField("path", T.StringType(), False),
        T.StructField("run", T.IntegerType(), False),
        T.StructField("file", T.StringType(), False),
        T.StructField("kind", T.StringType(), False),
        T.StructField("has_effects", T.BooleanType(), False),
    ]
)
"""One row per input file, built on the driver from the listing."""

RUNS_SCHEMA = T.StructType(
    [
        T.StructField("run", T.IntegerType(), False),
        T.StructField("gap", T.DoubleType(), False),
        T.StructField("checked", T.ArrayType(T.StringType(), False), True),
        T.StructField("ordered", T.ArrayType(T.StringType(), False), True),
    ]
)
"""One row per run: its ``activity_gap_s``, ``single_active_queues`` and the queues checked
for order (``RunConfig.ordered_queues``); null: every queue."""

EVENT_COLUMNS = (
    "run",
    "ts",
    "actor",
    "type",
    "msg",
    "queue",
    "redelivered",
    "why",
    "fault",
    "target",
    "seq",
    "by",
    "requeue",
)
"""The explicit schema of an event row (``run``: the run's index; ``ts``: double; ``seq``:
long, of ``publish`` events, null unless an integer; ``by``: of ``cancelled`` events;
``requeue``: of ``reject`` events, true only for JSON ``true``)."""
EFFECT_COLUMNS = ("run", "msg", "actor", "ts")
HISTORY_GLOB = "*.jsonl"
"""The event files of a history given to ``read_history``."""


@dataclass(frozen=True)
class Inputs:
    """What the rules read: well-formed rows, malformed lines, per-run settings."""

    runs: list[Run]
    events: DataFrame
    """Well-formed events of every type, unknown ones included (``EVENT_COLUMNS``)."""
    effects: DataFrame
    """Effect rows (``EFFECT_COLUMNS``): ``effects.jsonl``, or the commit events without it."""
    malformed: DataFrame
    """``run, file, line, error``: one row per malformed line."""
    settings: DataFrame
    """``RUNS_SCHEMA``."""
    persisted: tuple[DataFrame, ...]
    """To unpersist when the verdicts are out."""


def open_runs(paths: list[Path]) -> list[Run]:
    """The runs at ``paths`` (``InputError`` for a missing one or a bad ``run.json``)."""
    return [open_run(path) for path in paths]


def _listed(queues: frozenset[str] | None) -> list[str] | None:
    return sorted(queues) if queues is not None else None


def read_inputs(spark: SparkSession, runs: list[Run]) -> Inputs:
    """One scan over every file of ``runs``, parsed, checked and split into DataFrames."""
    files = _list_files(runs)
    files_df = F.broadcast(spark.createDataFrame(files, FILES_SCHEMA))
    settings = F.broadcast(
        spark.createDataFrame(
            [
                (
                    i,
                    float(run.config.activity_gap_s),
                    _listed(run.config.single_active_queues),
                    _listed(run.config.ordered_queues),
                )
                for i, run in enumerate(runs)
            ],
            RUNS_SCHEMA,
        )
    )
    lines = _scan(spark, [path for path, *_ in files]).join(files_df, "path")
    parsed = _parse(lines).persist(StorageLevel.MEMORY_AND_DISK)

    good = parsed.filter(F.col("error").isNull() & ~F.col("blank"))
    events = good.filter(F.col("kind") == EVENT).select(*EVENT_COLUMNS)
    effects = good.filter(
        (F.col("kind") == EFFECT)
        | ((F.col("kind") == EVENT) & (F.col("type") == Commit.KIND) & ~F.col("has_effects"))
    ).select(*EFFECT_COLUMNS)
    return Inputs(
        runs=runs,
        events=events,
        effects=effects,
        malformed=_number_malformed(parsed),
        settings=settings,
        persisted=(parsed,),
    )


@dataclass(frozen=True)
class History:
    """A fleet's event files read as one history (``sac audit``): no run directory, no
    ``run.json``, no ``effects.jsonl``; every row has ``run`` 0, so the rules keyed by run
    apply unchanged."""

    files: list[str]
    """The files read, as Hadoop URIs (``file:///...`` for local ones)."""
    events: DataFrame
    """Well-formed events (``EVENT_COLUMNS``)."""
    malformed: DataFrame
    """``run, file, line, error``; ``file`` is the path Spark read (``file:`` dropped)."""
    unnumbered: DataFrame
    """The malformed lines without their numbers: counting them needs no numbering."""
    persisted: tuple[DataFrame, ...]


def read_history(spark: SparkSession, paths: Sequence[str]) -> History:
    """Every ``*.jsonl`` file under ``paths`` (files or directories, searched recursively,
    on any filesystem Hadoop reads), parsed and checked line by line as ``read_inputs``
    does. ``InputError`` for a path that does not exist or holds no such file."""
    files = list_history(spark, paths)
    lines = _scan(spark, files).select(
        "*",
        F.lit(0).alias("run"),
        F.col("path").alias("file"),
        F.lit(EVENT).alias("kind"),
        F.lit(True).alias("has_effects"),
    )
    parsed = _parse(lines).persist(StorageLevel.MEMORY_AND_DISK)
    good = parsed.filter(F.col("error").isNull() & ~F.col("blank"))
    return History(
        files=files,
        events=good.select(*EVENT_COLUMNS),
        malformed=_number_malformed(parsed),
        unnumbered=parsed.filter(F.col("error").isNotNull()),
        persisted=(parsed,),
    )


def list_history(spark: SparkSession, paths: Sequence[str]) -> list[str]:
    """The ``*.jsonl`` files under ``paths``, each once, as Spark's own listing finds them.

    Spark lists, not ``os``, so ``hdfs://`` and ``s3a://`` paths work as local ones do; it
    skips names starting with ``.`` or ``_`` (as ``SPEC.md`` reads run directories), even a
    file named directly. A path that yields no file is refused rather than read as empty: it
    is most likely a typo, and an audit of nothing would look clean. A file under two given
    paths is read once (twice would double its commits).
    """
    found: set[str] = set()
    for path in paths:
        reader = (
            spark.read.option("recursiveFileLookup", "true")
            .option("pathGlobFilter", HISTORY_GLOB)
        )
        try:
            listed = reader.text(_no_glob(path)).inputFiles()
        except AnalysisException as exc:
            if exc.getCondition() == "PATH_NOT_FOUND":
                raise InputError(f"{path}: no such file or directory") from None
            raise
        if not listed:
            raise InputError(
                f"{path}: no {HISTORY_GLOB} file (names starting with . or _ are not read)"
            )
        # Listed as URIs (a space is %20); Spark reads a path as written.
        found.update(urllib.parse.unquote(uri) for uri in listed)
    return sorted(found)


def _list_files(runs: list[Run]) -> list[tuple[str, int, str, str, bool]]:
    """``FILES_SCHEMA`` rows: the absolute path Spark is given, and what the file is."""
    rows = []
    for i, run in enumerate(runs):
        has_effects = run.has_effects_file
        found = [(p, EVENT) for p in event_files(run)]
        if has_effects:
            found.append((run.path / spec.EFFECTS_FILE, EFFECT))
        for path, kind in found:
            rel = path.relative_to(run.path).as_posix()
            rows.append((os.path.abspath(path), i, rel, kind, has_effects))
    return rows


_LINE_SCHEMA = T.StructType(
    [
        T.StructField("value", T.StringType(), True),
        T.StructField("path", T.StringType(), True),
        T.StructField("split", T.LongType(), True),
        T.StructField("mid", T.LongType(), True),
    ]
)


def _scan(spark: SparkSession, paths: list[str]) -> DataFrame:
    """``value, path, split, mid``: every line with its file, split start and scan id.

    ``mid`` is taken right on the scan, before anything could reorder or drop a row; the path
    Spark reports is a URI (``file:/a%20b``), turned back into the local path we gave it.
    """
    if not paths:
        return spark.createDataFrame([], _LINE_SCHEMA)
    # Hidden names (. or _) are never in ``paths`` (sac.checker.runs.event_files); Spark skips them.
    raw = spark.read.text([_no_glob(path) for path in sorted(set(paths))]).select(
        "value",
        F.col("_metadata.file_path").alias("uri"),
        F.col("_metadata.file_block_start").alias("split"),
        F.monotonically_increasing_id().alias("mid"),
    )
    # url_decode also turns '+' into a space (form encoding); a '+' in a path is literal.
    decoded = F.url_decode(F.regexp_replace("uri", r"\+", "%2B"))
    return raw.select(
        "value", F.regexp_replace(decoded, r"^file:(//)?", "").alias("path"), "split", "mid"
    )


def _no_glob(path: str) -> str:
    """``path`` for Hadoop, which expands ``*?[]{}`` in paths: each escaped to stay literal."""
    return re.sub(r"([\\{}\[\]*?])", r"\\\1", path)


# Every extraction is try_variant_get: variant_get raises (ANSI) on a value it cannot cast,
# and a malformed line ("ts": "soon") must be reported, not fail the job.


def _json_type(v: Column, field: str) -> Column:
    """The JSON type of ``field`` as ``schema_of_variant`` names it; null when absent."""
    return F.schema_of_variant(F.try_variant_get(v, f"$.{field}", "variant"))


def _is_string(v: Column, field: str) -> Column:
    return F.coalesce(_json_type(v, field) == "STRING", F.lit(False))


def _is_number(v: Column, field: str) -> Column:
    """A JSON number that is a finite double (``1e400`` is read as infinity: malformed)."""
    kind = _json_type(v, field)
    as_double = F.try_variant_get(v, f"$.{field}", "double")
    finite = ~as_double.isin(float("inf"), float("-inf"))
    return F.coalesce(
        (kind.isin(*_INTEGER_TYPES, "DOUBLE", "FLOAT") | kind.startswith("DECIMAL")) & finite,
        F.lit(False),
    )


def _is_null_or_integer(v: Column, field: str) -> Column:
    """Absent, JSON null or an integer of 64 bits (SPEC). A variant keeps an integer that
    fits as ``BIGINT``; ``3.0`` becomes a ``DECIMAL(1,0)`` and a larger integer a decimal, both
    refused as they should be."""
    kind = _json_type(v, field)
    return kind.isNull() | kind.isin("VOID", *_INTEGER_TYPES)


def _boolean(v: Column, field: str) -> Column:
    """True when ``field`` is JSON ``true``; false otherwise, absent included (no coercion)."""
    return F.coalesce(
        (_json_type(v, field) == "BOOLEAN") & F.try_variant_get(v, f"$.{field}", "boolean"),
        F.lit(False),
    )


def _string(v: Column, field: str) -> Column:
    """``field`` when it is a JSON string, else null (SPEC: no coercion)."""
    return F.when(_is_string(v, field), F.try_variant_get(v, f"$.{field}", "string"))


def _parse_whole(line: Column) -> Column:
    """The line's JSON value as a variant, null unless the *whole* line is one JSON value.

    ``try_parse_json`` stops after the first value and ignores what follows (``{}{}``, ``{} x``,
    a comment), where Python's ``json.loads`` refuses the line. So the line is parsed inside
    ``[line,0]``: anything after the first value either breaks the array or adds elements,
    and a value that closes the array early leaves fewer; exactly two elements means the
    line was one value followed by JSON whitespace only.
    """
    wrapped = F.try_parse_json(F.concat(F.lit("["), line, F.lit(",0]")))
    whole = (
        F.try_variant_get(wrapped, "$[1]", "variant").isNotNull()
        & F.try_variant_get(wrapped, "$[2]", "variant").isNull()
    )
    return F.when(whole, F.try_variant_get(wrapped, "$[0]", "variant"))


def _parse(lines: DataFrame) -> DataFrame:
    """Each line with ``blank``, ``error`` (null when well-formed) and its typed fields."""
    v = F.col("v")
    message_type = F.col("type").isin(*sorted(spec.MESSAGE_EVENT_TYPES))
    event_error = (
        F.when(~_is_number(v, "ts"), F.lit("ts: missing or not a number"))
        .when(~_is_string(v, "actor"), F.lit("actor: missing or not a string"))
        .when(~_is_string(v, "type"), F.lit("type: missing or not a string"))
        .when(message_type & ~_is_string(v, "msg"), F.lit("msg: missing or not a string"))
    )
    effect_error = (
        F.when(~_is_string(v, "msg"), F.lit("msg: missing or not a string"))
        .when(~_is_string(v, "actor"), F.lit("actor: missing or not a string"))
        .when(~_is_number(v, "ts"), F.lit("ts: missing or not a number"))
        .when(~_is_null_or_integer(v, "epoch"), F.lit("epoch: not an integer or null"))
    )
    typed = F.col("type")
    with_v = (
        lines.withColumn("blank", F.col("value").rlike(_BLANK))
        .withColumn("v", F.when(~F.col("blank"), _parse_whole(F.col("value"))))
        .withColumn("type", _string(v, "type"))
    )
    return with_v.select(
        "run",
        "file",
        "kind",
        "has_effects",
        "split",
        "mid",
        "blank",
        F.try_variant_get(v, "$.ts", "double").alias("ts"),
        _string(v, "actor").alias("actor"),
        "type",
        _string(v, "msg").alias("msg"),
        F.when(typed.isin(*spec.QUEUE_EVENTS), _string(v, "queue")).alias("queue"),
        F.when(typed == Deliver.KIND, _boolean(v, "redelivered")).alias("redelivered"),
        F.when(typed == CommitRejected.KIND, _string(v, "why")).alias("why"),
        F.when(typed.startswith("fault_"), F.coalesce(_string(v, "fault"), F.lit(""))).alias(
            "fault"
        ),
        F.when(typed.startswith("fault_"), F.coalesce(_string(v, "target"), F.lit(""))).alias(
            "target"
        ),
        F.when(
            (typed == Publish.KIND) & _json_type(v, "seq").isin(*_INTEGER_TYPES),
            F.try_variant_get(v, "$.seq", "long"),
        ).alias("seq"),
        F.when(typed == Cancelled.KIND, _string(v, "by")).alias("by"),
        F.when(typed == Reject.KIND, _boolean(v, "requeue")).alias("requeue"),
        F.when(F.col("blank"), F.lit(None))
        .when(v.isNull(), F.lit("not JSON"))
        .when(~F.col("value").rlike(_OBJECT_START), F.lit("not an object"))
        .when(F.col("kind") == EVENT, event_error)
        .otherwise(effect_error)
        .alias("error"),
    )


def _number_malformed(parsed: DataFrame) -> DataFrame:
    """``run, file, line, error`` of the malformed lines (see the module docstring)."""
    bad = parsed.filter(F.col("error").isNotNull())
    return positions(bad, parsed, ["run", "file"], "split").select(
        "run", "file", F.col("position").alias("line"), "error"
    )
