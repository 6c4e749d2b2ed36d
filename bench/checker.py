"""Both checker engines on generated runs of growing size: events per second and peak memory
of each, the Spark/Python ratio at each size, and where the crossover lies.

Each measurement runs in a process of its own (``--one``), so that peak memory is that
engine's alone: the parent samples the resident memory of the child's whole process tree
(the Spark engine's JVM is a child of its Python driver) every 100 ms. The Spark time is the
check itself; starting the session (the JVM) is reported apart, since a cluster job pays it
once for many runs. Runs are generated once per size and seed under ``--data`` and reused.

    .venv/bin/python -m bench.checker                          # 1 M and 10 M, both engines
    .venv/bin/python -m bench.checker --sizes 1000000 --spark-only-sizes 50000000
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench._report import ROOT, positive_int, save

ENGINES = ("python", "spark")


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
                    break
        except OSError:
            continue
        todo += _children(current)
    return total


def measure(engine: str, run: Path, driver_memory: str, timeout: float) -> dict[str, Any]:
    """One engine on one run, in a child process; its timings and the tree's peak memory."""
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS": f"--driver-memory {driver_memory} pyspark-shell",
           "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.checker", "--one", engine, str(run)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.1):
            peak = max(peak, tree_rss(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        done.set()
        sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{engine} on {run} failed ({proc.returncode}): {err[-2000:]}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    result["peak_rss_mb"] = round(peak / 2**20, 1)
    result["events_per_s"] = round(result["events"] / result["seconds"])
    return result


def one(engine: str, run: Path) -> None:
    """The child's side: check ``run`` once, print timings as one JSON line."""
    events = sum(1 for f in (run / "events").glob("*.jsonl") for _ in f.open("rb"))
    began = time.perf_counter()
    startup = 0.0
    if engine == "python":
        from sac.checker.python_engine import check_runs

        [verdict] = check_runs([run])
    else:
        from sac.checker.spark_engine import check_runs as spark_check
        from sac.checker.spark_engine import spark_session

        spark = spark_session(None)
        startup = time.perf_counter() - began
        began = time.perf_counter()
        [verdict] = spark_check(spark, [run])
        spark.stop()
    seconds = time.perf_counter() - began
    print(json.dumps({"engine": engine, "events": events, "seconds": round(seconds, 3),
                      "startup_s": round(startup, 3), "valid": verdict.valid,
                      "effects": verdict.effects}))


def ensure_run(data: Path, size: int, seed: int) -> Path:
    """A clean generated run of ``size`` events (made once, then reused)."""
    from sac.checker.generate import generate_run

    path = data / f"run-{size}-{seed}"
    if not (path / "run.json").exists():
        if path.exists():
            raise SystemExit(f"{path} is incomplete: remove it")
        print(f"generating {size:,} events in {path} ...", flush=True)
        generate_run(path, events=size, seed=seed, queues=4, consumers=8, faults=8)
    return path


def crossover(rows: list[dict[str, Any]]) -> float | None:
    """The size where Spark's check time equals Python's, on a log scale between the two
    measured sizes around it (None: no crossing within the sizes measured)."""
    both = [(r["events"], r["spark"]["seconds"] / r["python"]["seconds"]) for r in rows
            if "python" in r and "spark" in r]
    for (n1, q1), (n2, q2) in itertools.pairwise(both):
        if (q1 - 1) * (q2 - 1) <= 0 and q1 != q2:
            t = (math.log(q1)) / (math.log(q1) - math.log(q2))
            return round(math.exp(math.log(n1) + t * (math.log(n2) - math.log(n1))))
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", nargs=2, metavar=("ENGINE", "RUN"), help=argparse.SUPPRESS)
    parser.add_argument("--sizes", type=positive_int, nargs="+", default=[1_000_000, 10_000_000],
                        help="events per run measured with both engines")
    parser.add_argument("--spark-only-sizes", type=positive_int, nargs="*", default=[],
                        help="sizes only the Spark engine runs (the Python engine keeps every "
                             "message id in memory)")
    parser.add_argument("--data", type=Path, default=ROOT / ".sac" / "bench-checker")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--driver-memory", default="8g")
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args()
    if args.one:
        one(args.one[0], Path(args.one[1]))
        return
    started = dt.datetime.now(dt.UTC)
    load_before = os.getloadavg()
    rows: list[dict[str, Any]] = []
    plan = [(n, ENGINES) for n in args.sizes] + [(n, ("spark",)) for n in args.spark_only_sizes]
    for size, engines in sorted(plan):
        run = ensure_run(args.data, size, args.seed)
        row: dict[str, Any] = {"size": size}
        for engine in engines:
            result = measure(engine, run, args.driver_memory, args.timeout)
            row["events"] = result["events"]
            row[engine] = result
            print(f"{size:>11,} {engine:>6}: {result['seconds']:8.1f} s  "
                  f"{result['events_per_s']:>10,} ev/s  {result['peak_rss_mb']:>8,.0f} MB",
                  flush=True)
        if "python" in row and "spark" in row:
            row["spark_over_python_time"] = round(
                row["spark"]["seconds"] / row["python"]["seconds"], 3)
        rows.append(row)
    report = {
        "benchmark": "checker",
        "started": started.isoformat(),
        "cpu_count": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "rows": rows,
        "crossover_events": crossover(rows),
    }
    lines = ["events       engine  seconds  events/s   peak MB   spark/python"]
    for row in rows:
        for engine in ENGINES:
            if engine in row:
                r = row[engine]
                ratio = row.get("spark_over_python_time", "") if engine == "spark" else ""
                lines.append(f"{row['events']:>11,}  {engine:>6} {r['seconds']:>8.1f} "
                             f"{r['events_per_s']:>9,} {r['peak_rss_mb']:>9,.0f}   {ratio}")
    lines.append(f"crossover (Spark as fast as Python): {report['crossover_events'] or 'none'}")
    save("checker", started, report, "\n".join(lines))


if __name__ == "__main__":
    main()
