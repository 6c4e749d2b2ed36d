"""``sac check`` as a user runs it: a separate process, its exit status, what it prints, the
files it writes, on both engines, locally and on the local Spark standalone cluster.

A process with Spark starts a JVM of its own (15-30 s): one test shows that as a user sees
it (on the standalone cluster); the others that need Spark's verdicts call ``sac.cli.main``
in this process, on the session the tests share, which the command then uses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from sac import cli
from sac.checker import python_engine
from sac.checker.generate import generate_run
from sac.server import LocalSpark
from sac.server.spark import master_json
from tests.helpers import spark_submit_args

ROOT = Path(__file__).parents[2]


def sac(*args: str | Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``sac`` in a process of its own; the Spark it starts compiles quickly
    (``tests.helpers.CLIENT_JIT``)."""
    return subprocess.run(
        [sys.executable, "-m", "sac", *map(str, args)],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT,
        env={**os.environ, "PYSPARK_SUBMIT_ARGS": spark_submit_args()},
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A clean run and one with a lost message, small enough for any engine."""
    base = tmp_path_factory.mktemp("runs")
    clean = generate_run(base / "clean", events=3000, seed=11, queues=2, consumers=3).path
    lost = generate_run(base / "lost", events=3000, seed=12, queues=2, consumers=3,
                        inject=["lost"]).path
    return {"clean": clean, "lost": lost}


def injected_lost(run: Path) -> list[str]:
    return list(json.loads((run / "injected.json").read_text())["lost"])


def test_the_python_engine_writes_verdicts_summary_and_report(
    runs: dict[str, Path], tmp_path: Path,
) -> None:
    done = sac("check", runs["clean"], runs["lost"], "--engine", "python", "--out", tmp_path)
    assert done.returncode == 1, done.stderr  # one run is invalid
    lost_id = injected_lost(runs["lost"])[0]
    assert f"{runs['lost']}: INVALID: lost 1 ({lost_id})" in done.stdout
    assert f"{runs['clean']}: valid" in done.stdout
    verdict = json.loads((runs["lost"] / "verdict.json").read_text())
    assert verdict["lost"] == {"count": 1, "ids": [lost_id]}
    assert verdict["engine"] == "python"
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["runs"], summary["valid"], summary["invalid"]) == (2, 1, ["lost"])
    assert lost_id in (tmp_path / "report.html").read_text()


def test_the_spark_engine_locally_gives_the_same_verdicts(
    runs: dict[str, Path], tmp_path: Path, spark: SparkSession,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The default engine, local Spark, in this process (``sac.cli.main``) on the session the
    tests share, which the command uses and leaves running: the reference engine's verdicts
    and the same lines printed (a JVM of its own: the standalone test below)."""
    checked = [str(runs["clean"]), str(runs["lost"])]
    assert cli.main(["check", *checked, "--engine", "python",
                     "--out", str(tmp_path / "python")]) == 1
    printed = capsys.readouterr().out.splitlines()
    expected = {name: json.loads((runs[name] / "verdict.json").read_text())
                for name in ("clean", "lost")}
    status = cli.main(["check", *checked, "--out", str(tmp_path / "spark")])
    captured = capsys.readouterr()
    assert status == 1, captured.err
    assert captured.err == ""
    for name, reference in expected.items():
        verdict = json.loads((runs[name] / "verdict.json").read_text())
        assert verdict["engine"] == "spark"
        assert {**verdict, "engine": ""} == {**reference, "engine": ""}
    lines = captured.out.splitlines()
    assert lines[:-1] == printed[:-1]  # each run's line
    assert lines[-1] == f"1 of 2 run(s) valid; report: {tmp_path / 'spark' / 'report.html'}"
    summary = json.loads((tmp_path / "spark" / "summary.json").read_text())
    assert (summary["engine"], summary["invalid"]) == ("spark", ["lost"])
    assert spark.range(1).count() == 1  # still running


def test_the_spark_engine_runs_on_a_standalone_cluster(
    runs: dict[str, Path], tmp_path: Path, spark_standalone: LocalSpark,
) -> None:
    """``sac check --master spark://...`` as a user runs it: a process and a JVM of its own,
    the jobs on the cluster's worker, the reference engine's verdict, the exit status, the
    lines printed, and nothing else on the terminal: the JVM's banner and warnings belong in
    check-spark.log."""
    [reference] = [json.loads(json.dumps(verdict.to_json()))
                   for verdict in python_engine.check_runs([runs["lost"]])]
    done = sac("check", runs["lost"], "--master", spark_standalone.url, "--out", tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr == "", "the JVM's banner and warnings belong in check-spark.log"
    assert (tmp_path / "check-spark.log").exists()
    lost_id = injected_lost(runs["lost"])[0]
    assert done.stdout.splitlines() == [
        f"{runs['lost']}: INVALID: lost 1 ({lost_id})",
        f"0 of 1 run(s) valid; report: {tmp_path / 'report.html'}",
    ]
    verdict = json.loads((runs["lost"] / "verdict.json").read_text())
    assert verdict["engine"] == "spark"
    assert {**verdict, "engine": ""} == {**reference, "engine": ""}
    state = master_json(spark_standalone.port("master_ui"))
    assert state is not None
    apps = [*state.get("activeapps", []), *state.get("completedapps", [])]
    assert any(app["name"] == "sac-check" for app in apps), apps


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["check", "/nonexistent/run-1", "--engine", "python"], "/nonexistent/run-1"),
        (["check", "RUN", "--master", "spark://127.0.0.1:9"], "cannot reach 127.0.0.1:9"),
        (["check", "RUN", "--engine", "python", "--master", "spark://127.0.0.1:9"],
         "--master needs --engine spark"),
    ],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(
    runs: dict[str, Path], args: list[str], message: str,
) -> None:
    done = sac(*(runs["clean"] if a == "RUN" else a for a in args))
    assert done.returncode == 2
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr


def test_a_malformed_line_is_named_and_the_rest_is_checked(
    tmp_path: Path,
) -> None:
    run = generate_run(tmp_path / "torn", events=2000, seed=5, inject=["truncated"]).path
    torn = json.loads((run / "injected.json").read_text())["malformed"]
    done = sac("check", run, "--engine", "python", "--out", tmp_path)
    assert done.returncode == 1
    where = f"{run / torn[0]['file']}:{torn[0]['line']}: malformed line"
    assert where in done.stdout, done.stdout
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["published"] > 0  # the rest of the run was checked
    assert verdict["lost"]["count"] == 0


# --- input that is not a run -------------------------------------------------------------


def _lines(*events: dict[str, object]) -> str:
    return "".join(json.dumps(e) + "\n" for e in events)


def not_a_run(base: Path, kind: str) -> Path:
    """A directory ``sac check`` must refuse, of the ``kind`` named in ``NOT_RUNS``."""
    path = base / kind
    path.mkdir()
    if kind == "scratch":  # what /tmp holds: files and directories of other programs
        (path / "notes.txt").write_text("hello\n")
        (path / "cache" / "events").mkdir(parents=True)
        (path / "cache" / "events" / "x.jsonl").write_text("{}\n")
        return path
    if kind == "no-run-json":
        path.rmdir()
        generate_run(path, events=300, seed=3)
        (path / "run.json").unlink()
        return path
    if kind == "empty":
        return path
    (path / "run.json").write_text("{}")
    if kind == "no-events":
        return path
    (path / "events").mkdir()
    if kind == "empty-events":
        (path / "events" / "p.jsonl").write_text("")
        (path / "events" / "c.jsonl").write_text("")
    elif kind == "only-malformed":
        (path / "events" / "p.jsonl").write_text('{"ts": "soon"}\nnot json\n\n')
    elif kind == "no-queue":
        (path / "events" / "p.jsonl").write_text(_lines(
            {"ts": 1.0, "actor": "p", "type": "publish", "msg": "m-1", "seq": 1},
            {"ts": 1.1, "actor": "p", "type": "confirm", "msg": "m-1"}))
        (path / "events" / "c.jsonl").write_text(_lines(
            {"ts": 2.0, "actor": "c", "type": "deliver", "msg": "m-1", "redelivered": False},
            {"ts": 2.1, "actor": "c", "type": "commit", "msg": "m-1", "epoch": None}))
    return path


NOT_RUNS = {
    # kind: (what the one line names, decided before Spark starts)
    "empty": ("not a run: no run.json", True),
    "scratch": ("not a run: no run.json", True),
    "no-run-json": ("not a run: no run.json", True),
    "no-events": ("not a run: no history events (events/*.jsonl: none)", True),
    "empty-events": ("not a run: no history events (events/*.jsonl: empty)", True),
    # Only reading every line tells these: the Spark engine's first job does.
    "only-malformed": ("no history events (no well-formed event line)", False),
    "no-queue": ("no event names a queue", False),
}


@pytest.mark.parametrize("engine", ["python", "spark"])
@pytest.mark.parametrize("kind", list(NOT_RUNS))
def test_a_directory_that_is_not_a_run_is_refused_and_nothing_is_written(
    tmp_path: Path, kind: str, engine: str, request: pytest.FixtureRequest,
) -> None:
    """An empty directory, scratch space, a run without run.json, without events or whose
    events name no queue could not be checked: exit 2, one line naming what is missing, no
    verdict.json, summary or report. What the listing shows is refused before Spark starts:
    ``sac`` in a process of its own, which starts no JVM (no check-spark.log). What only the
    Spark engine's jobs find is refused by them, in this process (``sac.cli.main``) on the
    session the tests share: a JVM of its own would add nothing but its start."""
    path = not_a_run(tmp_path, kind)
    out = tmp_path / "out"
    missing, before_spark = NOT_RUNS[kind]
    args = ["check", str(path), "--engine", engine, "--out", str(out)]
    if before_spark or engine == "python":
        done = sac(*args)
        status, stdout, stderr = done.returncode, done.stdout, done.stderr
    else:
        spark: SparkSession = request.getfixturevalue("spark")
        capsys: pytest.CaptureFixture[str] = request.getfixturevalue("capsys")
        status = cli.main(args)
        stdout, stderr = capsys.readouterr()
        assert spark.range(1).count() == 1  # the command left the shared session running
    assert status == 2, stdout + stderr
    assert stderr.startswith(f"sac check: {path}: {missing}"), stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert "valid" not in stdout
    assert not (path / "verdict.json").exists()
    assert not (out / "summary.json").exists()
    assert not (out / "report.html").exists()
    if before_spark:
        assert not (out / "check-spark.log").exists(), "refused before Spark started"
