"""The Spark session a ``sac`` command runs on, started quietly.

The JVM PySpark starts inherits this process's stderr and writes its banner and warnings
there: a user would see pages of JVM output around the one line that matters. So the JVM's
stderr goes to a log file in ``--out`` while it starts, and a failure to start is one line
naming that log.

A standalone master lets in only drivers with its secret (``spark.authenticate``): the
properties file ``$SAC_SPARK_SECRET_FILE`` names, or else, for a master of this host that
``sac.server.LocalSpark`` started, its ``secret_file``. The file goes to ``spark-submit`` as
``--properties-file`` (through ``PYSPARK_SUBMIT_ARGS``): the secret never shows on a command
line.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from sac.checker.errors import InputError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def session(master: str | None, log: Path, app: str) -> tuple[SparkSession, bool]:
    """The session to run on, and whether this command started it (and stops it).

    A process that already has one (a notebook, a test calling ``sac.cli.main``) keeps it,
    running and as configured. Otherwise a new one, whose JVM writes to ``log``.
    """
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession

    from sac.checker.spark_engine import spark_session

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    log.parent.mkdir(parents=True, exist_ok=True)
    properties = secret_file(master)
    try:
        with stderr_to(log), submit_properties(properties):
            spark = spark_session(master, app=app)
    except PySparkException as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"Spark did not start: {first} (see {log})") from None
    if not spark.sparkContext.getConf().contains("spark.sql.shuffle.partitions"):
        # One shuffle partition per core, unless the properties say otherwise: Spark's
        # default of 200 turns a job's few dozen small stages into thousands of tasks, on a
        # laptop and on a small standalone cluster alike (one small run's check on a worker
        # of one core: 79 s with 200, 42 s with one per core).
        spark.conf.set("spark.sql.shuffle.partitions", str(spark.sparkContext.defaultParallelism))
    return spark, True


SECRET_ENV = "SAC_SPARK_SECRET_FILE"


def secret_file(master: str | None) -> Path | None:
    """The Spark properties file with the secret of ``master`` (see the module's docstring),
    or None: a local master, or a cluster without authentication."""
    named = os.environ.get(SECRET_ENV)
    if named:
        path = Path(named)
        if not path.is_file():
            raise InputError(f"{SECRET_ENV}={named}: no such file")
        return path
    if master is None or not master.startswith("spark://"):
        return None
    from sac.server import LocalSpark

    local = LocalSpark.serving(master)
    return None if local is None else local.secret_file


@contextlib.contextmanager
def submit_properties(path: Path | None) -> Iterator[None]:
    """``spark-submit`` reads ``path`` (and still ``spark-defaults.conf``) while the driver's
    JVM starts in this block; PySpark passes every other setting as ``--conf`` on the JVM's
    command line."""
    if path is None:
        yield
        return
    saved = os.environ.get("PYSPARK_SUBMIT_ARGS")
    ours = f"--properties-file {shlex.quote(str(path))} --load-spark-defaults"
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"{ours} {saved or 'pyspark-shell'}"
    try:
        yield
    finally:
        if saved is None:
            del os.environ["PYSPARK_SUBMIT_ARGS"]
        else:
            os.environ["PYSPARK_SUBMIT_ARGS"] = saved


@contextlib.contextmanager
def stderr_to(log: Path) -> Iterator[None]:
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with log.open("ab") as sink:
            os.dup2(sink.fileno(), 2)
            try:
                yield
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
    finally:
        os.close(saved)
