"""The local Spark standalone cluster: a real job runs on its worker, on loopback only, and
stopping it leaves no JVM behind.

Measured here (2 cores, Spark 4.3, Java 17): master and worker ALIVE 4.3 s after ``up()`` on
an idle machine, 11-13 s with a load average of 8; ``down()`` 0.4-0.5 s. The driver's session
and first small job on the cluster (driver JVM, executor JVM, Python worker): 15-30 s.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sac._spark import SECRET_ENV, secret_file
from sac.checker.errors import InputError
from sac.server import (
    AlreadyRunningError,
    LocalSpark,
    PackageMissingError,
    PortBusyError,
    ServerExitedError,
    _proc,
)
from sac.server._ports import port_is_free
from sac.server.spark import PORT_OFFSETS, master_json
from tests.helpers import (
    Lines,
    finish,
    is_loopback,
    listening_addresses,
    spark_submit_args,
    wait_until,
)

# The driver runs in a process of its own: a SparkContext is one per process, and the engines'
# tests may hold a local one in the pytest process. It prints what it saw, then waits for a
# line on stdin, so that the test can look at the cluster while the application is alive.
DRIVER = r"""
import json, os, sys
from pyspark.sql import SparkSession, functions as F

spark = (
    SparkSession.builder.master(sys.argv[1]).appName(sys.argv[2])
    .config("spark.executor.memory", "512m")
    .config("spark.driver.memory", "512m")
    .config("spark.cores.max", "1")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("WARN")

@F.udf("string", useArrow=False)
def where(_id):
    import os
    return f"{os.getpid()} {os.environ.get('SAC_STATE_DIR')}"

df = spark.range(0, 1000, numPartitions=2)
total = df.agg(F.sum("id")).first()[0]
places = sorted({row[0] for row in df.select(where("id")).distinct().collect()})
print(json.dumps({"app": spark.sparkContext.applicationId, "total": total,
                  "places": places, "driver_pid": os.getpid()}), flush=True)
sys.stdin.readline()
spark.stop()
print("stopped", flush=True)
"""


def ports_of(addresses: set[str]) -> set[int]:
    """Java's dual-stack sockets show as ``::ffff:127.0.0.1``; compare ports, not spellings."""
    return {int(a.rsplit(":", 1)[1]) for a in addresses}


def start_driver(cluster: LocalSpark, app_name: str, secret: bool = True,
                 ) -> subprocess.Popen[str]:
    """A driver as a user runs one: with ``secret``, the cluster's secret file goes to
    ``spark-submit`` (``--properties-file``, through ``PYSPARK_SUBMIT_ARGS``)."""
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    env["PYSPARK_SUBMIT_ARGS"] = spark_submit_args(
        *([f"--properties-file {cluster.secret_file}"] if secret else []))
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, cluster.url, app_name],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )


def app_names(cluster: LocalSpark) -> set[str]:
    """Every application the master registered, running or done."""
    state = master_json(cluster.port("master_ui")) or {}
    return {app["name"] for app in [*state.get("activeapps", []),
                                    *state.get("completedapps", [])]}


def secret_of(cluster: LocalSpark) -> str:
    lines = dict(line.split(" ", 1) for line in cluster.secret_file.read_text().splitlines())
    assert lines["spark.authenticate"] == "true"
    return lines["spark.authenticate.secret"]


def test_a_dataframe_job_runs_on_the_worker(spark_standalone: LocalSpark) -> None:
    assert spark_standalone.url == f"spark://127.0.0.1:{spark_standalone.port('master')}"
    driver = start_driver(spark_standalone, "sac-test-on-worker")
    lines = Lines(driver)
    try:
        seen = json.loads(lines.expect("{", timeout=180))
        assert seen["total"] == sum(range(1000))
        # The UDF ran in Python workers that the executor started: they carry the cluster's
        # marker (inherited from the worker), which the driver's processes do not.
        assert seen["places"]
        for place in seen["places"]:
            pid, marker = place.split(" ", 1)
            assert marker == str(spark_standalone.dir)
            assert int(pid) != seen["driver_pid"]

        info = master_json(spark_standalone.port("master_ui"))
        assert info is not None
        apps = {app["id"]: app for app in info["activeapps"]}
        app = apps[seen["app"]]
        assert app["name"] == "sac-test-on-worker"
        assert app["state"] == "RUNNING"
        assert app["cores"] == 1  # granted by our only worker
        executor_logs = list((spark_standalone.work_dir / seen["app"]).glob("*/stderr"))
        assert executor_logs

        # The secret is on no command line of the host (ps): not the daemons', the
        # executor's, nor the driver's JVM's.
        secret = secret_of(spark_standalone).encode()
        assert [pid for pid in _proc.pids() if secret in " ".join(_proc.argv_of(pid)).encode()
                ] == []

        # The executor's JVM and Python workers listen too: loopback only, like the daemons.
        pids = spark_standalone.pids()
        assert len(pids) >= 3  # master, worker, executor (+ its Python daemon)
        addresses = listening_addresses(pids)
        assert [a for a in addresses if not is_loopback(a)] == []
        assert ports_of(addresses) > {spark_standalone.port(role) for role in PORT_OFFSETS}

        assert driver.stdin is not None
        driver.stdin.write("done\n")
        driver.stdin.flush()
        lines.expect("stopped", timeout=60)
        assert driver.wait(60) == 0
    finally:
        finish(driver)


def test_a_driver_without_the_secret_is_refused(spark_standalone: LocalSpark) -> None:
    """Any local user reaches a loopback master: one without the secret must not get to run
    code on the worker. The master refuses its connection (its log says why) and never
    registers the application."""
    log = spark_standalone.master_log
    seen = log.stat().st_size
    refusal = "Expected SaslMessage, received something else"

    def refused() -> bool:
        with log.open(errors="replace") as text:
            text.seek(seen)
            return refusal in text.read()

    driver = start_driver(spark_standalone, "sac-test-no-secret", secret=False)
    try:
        wait_until(lambda: refused() or "sac-test-no-secret" in app_names(spark_standalone),
                   180, "the master's answer to a driver without the secret")
        assert "sac-test-no-secret" not in app_names(spark_standalone)
        assert refused()
    finally:
        finish(driver)
    # The secret is in files only the cluster's user reads.
    assert stat.S_IMODE(spark_standalone.secret_file.stat().st_mode) == 0o600
    daemons = spark_standalone.dir / "conf" / "spark-defaults.conf"
    assert stat.S_IMODE(daemons.stat().st_mode) == 0o600
    assert secret_of(spark_standalone) in daemons.read_text()


def test_sac_check_finds_the_secret_of_a_local_cluster(spark_standalone: LocalSpark) -> None:
    """``sac check --master`` on a cluster of this host uses its secret by itself, whatever
    its home; ``SAC_SPARK_SECRET_FILE`` names one explicitly."""
    found = LocalSpark.serving(spark_standalone.url)
    assert found is not None
    assert found.secret_file == spark_standalone.secret_file
    assert LocalSpark.serving("spark://127.0.0.1:9") is None
    assert LocalSpark.serving("spark://10.0.0.5:7077") is None
    assert secret_file(spark_standalone.url) == spark_standalone.secret_file
    assert secret_file(None) is None


def test_a_named_secret_file_must_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                        ) -> None:
    named = tmp_path / "client.conf"
    monkeypatch.setenv(SECRET_ENV, str(named))
    with pytest.raises(InputError, match=rf"^{SECRET_ENV}=\S+client\.conf: no such file$"):
        secret_file("spark://10.0.0.5:7077")
    named.write_text("spark.authenticate true\n")
    assert secret_file("spark://10.0.0.5:7077") == named


def test_daemons_listen_on_loopback_only(spark_standalone: LocalSpark) -> None:
    pids = spark_standalone.pids()
    addresses = listening_addresses(pids)
    assert [a for a in addresses if not is_loopback(a)] == []
    assert ports_of(addresses) >= {spark_standalone.port(role) for role in PORT_OFFSETS}
    status = spark_standalone.status()
    assert status["running"] is True
    assert status["master"] == "ALIVE"
    assert [w["state"] for w in status["workers"]] == ["ALIVE"]


@pytest.mark.slow
def test_up_measures_and_down_leaves_no_process(tmp_path: Path) -> None:
    cluster = LocalSpark(name="own", home=tmp_path, worker_cores=1)
    started = time.monotonic()
    cluster.up()
    try:
        took = time.monotonic() - started
        print(f"Spark master + worker ALIVE after {took:.1f} s")
        assert took < 60
        pids = cluster.pids()
        assert len(pids) == 2  # master and worker JVMs, nothing else while idle
        assert all(_proc.is_ours(pid, cluster.dir) for pid in pids)
        with pytest.raises(AlreadyRunningError):
            cluster.up()
        assert cluster.master_log in cluster.log_files()
    finally:
        cluster.down()
    assert _proc.find_marked(cluster.dir) == []
    assert _proc.wait_dead(pids, 0) == []
    assert all(port_is_free(cluster.port(role)) for role in PORT_OFFSETS)
    assert not (cluster.dir / "spark.json").exists()


def test_busy_port_is_named(tmp_path: Path) -> None:
    probe = LocalSpark(name="busy", home=tmp_path)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        busy = LocalSpark(name="busy", home=tmp_path, base_port=port - PORT_OFFSETS["master"])
        with pytest.raises(PortBusyError, match=rf"127\.0\.0\.1:{port} \(Spark master RPC\)"):
            busy.up()
    assert _proc.find_marked(probe.dir) == []


def test_missing_java_is_named(tmp_path: Path) -> None:
    cluster = LocalSpark(name="nojava", home=tmp_path, java=str(tmp_path / "no-java"))
    with pytest.raises(PackageMissingError, match=r"java is not installed at .*no-java"):
        cluster.up()


@pytest.mark.slow
def test_a_worker_that_dies_names_its_log_and_leaves_nothing(tmp_path: Path) -> None:
    cluster = LocalSpark(name="dies", home=tmp_path, worker_memory="lots")
    with pytest.raises(ServerExitedError, match=r"Spark worker exited .*logs/worker\.log"):
        cluster.up()
    assert _proc.find_marked(cluster.dir) == []
    assert {role: port_is_free(cluster.port(role)) for role in PORT_OFFSETS} == dict.fromkeys(
        PORT_OFFSETS, True)
