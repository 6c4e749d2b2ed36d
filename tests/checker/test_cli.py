"""``sac check`` as a user runs it: a separate process, its exit status, what it prints, the
files it writes, on both engines, locally and on the local Spark standalone cluster."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sac.checker.generate import generate_run
from sac.server import LocalSpark
from sac.server.spark import master_json

ROOT = Path(__file__).parents[2]


def sac(*args: str | Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sac", *map(str, args)],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT,
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
    runs: dict[str, Path], tmp_path: Path,
) -> None:
    sac("check", runs["clean"], runs["lost"], "--engine", "python", "--out", tmp_path)
    expected = {name: json.loads((runs[name] / "verdict.json").read_text())
                for name in ("clean", "lost")}
    done = sac("check", runs["clean"], runs["lost"], "--out", tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr == "", "the JVM's banner and warnings belong in check-spark.log"
    assert (tmp_path / "check-spark.log").exists()
    for name, reference in expected.items():
        verdict = json.loads((runs[name] / "verdict.json").read_text())
        assert verdict["engine"] == "spark"
        assert {**verdict, "engine": ""} == {**reference, "engine": ""}


def test_the_spark_engine_runs_on_a_standalone_cluster(
    runs: dict[str, Path], tmp_path: Path, spark_standalone: LocalSpark,
) -> None:
    done = sac("check", runs["lost"], "--master", spark_standalone.url, "--out", tmp_path)
    assert done.returncode == 1, done.stderr
    verdict = json.loads((runs["lost"] / "verdict.json").read_text())
    assert verdict["lost"]["ids"] == injected_lost(runs["lost"])
    state = master_json(spark_standalone.port("master_ui"))
    assert state is not None
    apps = [*state.get("activeapps", []), *state.get("completedapps", [])]
    assert any(app["name"] == "sac-check" for app in apps), apps


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["check", "/nonexistent/run-1", "--engine", "python"], "/nonexistent/run-1"),
        (["check", ".", "--master", "spark://127.0.0.1:9"], "cannot reach 127.0.0.1:9"),
        (["check", ".", "--engine", "python", "--master", "spark://127.0.0.1:9"],
         "--master needs --engine spark"),
    ],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(args: list[str], message: str) -> None:
    done = sac(*args)
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
