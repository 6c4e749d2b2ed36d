"""The SDK's inbox table in PostgreSQL as the source of committed effects, for ``sac audit``.

A fleet's consumers commit each message's effect together with a row of the inbox table
(``sac_dedup_records``, written by the SDK's ``PostgresStore``), so in production that table is
the ground truth that ``effects.jsonl`` is in a chaos run. Spark reads it through its JDBC
source with Debian's driver jar (``spark_engine.POSTGRESQL_JDBC_JAR``), on the executors: the
driver sees the table's schema, never its rows. The pipeline imports nothing from ``sac.sdk``, so
the table's shape is restated here (``COLUMNS``).

Errors. A JDBC failure (no route, a refused login, a missing table or column, no driver jar)
becomes one ``InputError`` line naming the cause PostgreSQL or the driver gave, with the
password masked wherever it could appear; Spark's own wrapper ("Couldn't connect to the
database") says nothing a user can act on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .errors import InputError

DEFAULT_TABLE = "sac_dedup_records"
COLUMNS = ("queue", "message_id", "consumer", "committed_at")
"""The columns read: ``queue TEXT, message_id TEXT, consumer TEXT, committed_at DOUBLE
PRECISION`` (Unix seconds); the key is ``(queue, message_id)``."""
DRIVER = "org.postgresql.Driver"
URL_PREFIX = "jdbc:postgresql:"
PACKAGE = "libpostgresql-jdbc-java"
"""The Debian package with the driver jar, named in the error when the driver is missing."""
_OWN_OPTIONS = frozenset({"url", "user", "password", "table"})
_FIXED_OPTIONS = frozenset({"dbtable", "query", "driver"})
"""Spark JDBC options this source sets itself: the table is read whole, by our driver."""
_URL_PASSWORD = re.compile(r"(?i)(password=)[^&;]*")


@dataclass(frozen=True)
class InboxSource:
    """Where the inbox table is and how to log in; ``repr`` never shows the password.

    >>> source = InboxSource.from_options({"url": "jdbc:postgresql://db/app", "password": "pw"})
    >>> source  # doctest: +NORMALIZE_WHITESPACE
    InboxSource(url='jdbc:postgresql://db/app', user=None, table='sac_dedup_records',
                options={})
    """

    url: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    table: str = DEFAULT_TABLE
    options: Mapping[str, str] = field(default_factory=dict)
    """Other Spark JDBC options, passed on: ``numPartitions`` with ``partitionColumn``
    (``committed_at``), ``lowerBound`` and ``upperBound`` to read a large table in parallel,
    ``fetchsize``, ``connectTimeout``."""

    def __post_init__(self) -> None:
        if not self.url.startswith(URL_PREFIX):
            raise InputError(
                f"inbox: {self.display_url!r} is not a PostgreSQL JDBC URL "
                f"(expected {URL_PREFIX}//HOST:PORT/DATABASE)"
            )
        if not self.table:
            raise InputError("inbox: the table name is empty")
        fixed = sorted(_FIXED_OPTIONS & {key.lower() for key in self.options})
        if fixed:
            raise InputError(f"inbox: options {fixed} are set by the audit itself")

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> InboxSource:
        """From ``url``, ``user``, ``password``, ``table`` and other Spark JDBC options."""
        if "url" not in options:
            raise InputError(f"inbox: a url is needed ({URL_PREFIX}//HOST:PORT/DATABASE)")
        return cls(
            url=options["url"],
            user=options.get("user"),
            password=options.get("password"),
            table=options.get("table", DEFAULT_TABLE),
            options={k: v for k, v in options.items() if k not in _OWN_OPTIONS},
        )

    @property
    def display_url(self) -> str:
        """The URL with a ``password=`` parameter masked: safe to print."""
        return _URL_PASSWORD.sub(r"\1***", self.url)

    def read(self, spark: SparkSession) -> DataFrame:
        """``run, queue, msg, actor, ts``: one row per committed effect (``run`` 0; a null
        ``consumer`` is the actor ``""``). Resolving the table connects once from the
        driver, so a bad URL, login or table fails here, as an ``InputError``."""
        reader = (
            spark.read.format("jdbc")
            .options(**self.options)
            .option("url", self.url)
            .option("dbtable", self.table)
            .option("driver", DRIVER)
        )
        if self.user is not None:
            reader = reader.option("user", self.user)
        if self.password is not None:
            reader = reader.option("password", self.password)
        try:
            table = reader.load()
        except (PySparkException, Py4JJavaError) as exc:
            failure = self.failure(exc)
            if failure is None:
                raise
            raise failure from None
        missing = [name for name in COLUMNS if name not in table.columns]
        if missing:
            raise InputError(
                f"inbox table {self.table}: no column {', '.join(missing)} "
                f"(expected the SDK's {DEFAULT_TABLE}: {', '.join(COLUMNS)})"
            )
        return table.select(
            F.lit(0).alias("run"),
            F.col("queue").cast("string").alias("queue"),
            F.col("message_id").cast("string").alias("msg"),
            F.coalesce(F.col("consumer").cast("string"), F.lit("")).alias("actor"),
            F.col("committed_at").cast("double").alias("ts"),
        ).filter(F.col("msg").isNotNull() & F.col("ts").isNotNull())

    def failure(self, exc: BaseException) -> InputError | None:
        """The one-line ``InputError`` for ``exc`` when a JDBC cause is behind it (at
        ``read`` or later, in a job reading the table); ``None`` for any other error."""
        causes = _java_causes(exc)
        if any(name == "java.lang.ClassNotFoundException" and DRIVER in message
               for name, message in causes):
            return InputError(
                f"the PostgreSQL JDBC driver is not on Spark's classpath: install {PACKAGE} "
                "(its jar /usr/share/java/postgresql.jar is added to the session when present)"
            )
        for name, message in causes:
            if name.startswith(("org.postgresql.", "java.net.", "java.sql.")):
                first = message.strip().splitlines()[0] if message.strip() else name
                return InputError(self._masked(f"inbox {self.display_url} ({self.table}): {first}"))
        return None

    def _masked(self, text: str) -> str:
        masked = _URL_PASSWORD.sub(r"\1***", text)
        if self.password:
            masked = masked.replace(self.password, "***")
        return masked


def _java_causes(exc: BaseException) -> list[tuple[str, str]]:
    """(class, message) of the Java exceptions behind a PySpark error, outermost first;
    empty when there are none (a Python error, or Spark Connect, which keeps no JVM
    object). PySpark keeps the throwable in ``_origin`` (captured errors) or
    ``java_exception`` (``Py4JJavaError``): its causes are where the driver's message is."""
    throwable: Any = getattr(exc, "_origin", None) or getattr(exc, "java_exception", None)
    found: list[tuple[str, str]] = []
    while throwable is not None and len(found) < 32:
        found.append((str(throwable.getClass().getName()), str(throwable.getMessage() or "")))
        throwable = throwable.getCause()
    return found
