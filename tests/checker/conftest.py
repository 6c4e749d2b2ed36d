"""One SparkSession for the whole test run: starting one costs seconds, a job far less.

``local[2]`` on the loopback with the UI off and few shuffle partitions: the machine is shared
and the test runs are tiny, so the default 200 partitions would only add task overhead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from sac.checker.spark_engine import spark_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = spark_session("local[2]", app="sac-check-tests")
    session.conf.set("spark.sql.shuffle.partitions", "4")
    yield session
    session.stop()
