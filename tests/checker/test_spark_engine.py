"""The Spark engine on tiny hand-built runs, one per rule of ``sac/checker/SPEC.md``.

Every run is checked in one ``check_runs`` call (a Spark job costs seconds, a run almost
nothing more), its files read in small splits; each test then reads the verdict fields a
user would look at.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from pyspark.sql import DataFrame, SparkSession

from sac.checker import python_engine
from sac.checker.errors import InputError
from sac.checker.spark_engine import check_runs
from sac.checker.spark_positions import in_order
from sac.checker.spark_rules import ranked_values
from tests.checker.test_agreement import comparable

Line = dict[str, Any] | str


def ev(ts: float, actor: str, kind: str, msg: str | None = None, **extra: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"ts": ts, "actor": actor, "type": kind, **extra}
    if msg is not None:
        event["msg"] = msg
    return event


def write_run(
    root: Path,
    name: str,
    events: dict[str, list[Line]] | None = None,
    effects: list[Line] | None = None,
    run: dict[str, Any] | None = None,
    newline: str = "\n",
) -> Path:
    """A run directory: ``events`` per file name, ``effects.jsonl`` rows, ``run.json``.
    A ``str`` line is written as is (for malformed lines)."""
    path = root / name
    (path / "events").mkdir(parents=True)

    def text(lines: list[Line]) -> str:
        return "".join((x if isinstance(x, str) else json.dumps(x)) + newline for x in lines)

    for file, lines in (events or {}).items():
        (path / "events" / file).write_text(text(lines), newline="")
    if effects is not None:
        (path / "effects.jsonl").write_text(text(effects), newline="")
    (path / "run.json").write_text(json.dumps(run if run is not None else {}))
    return path


def processed(actor: str, msg: str, deliver: float | None, commit: float) -> list[Line]:
    """A consumer's deliver (unless None) and commit of ``msg``."""
    done: list[Line] = [ev(commit, actor, "commit", msg, epoch=1)]
    return (
        [ev(deliver, actor, "deliver", msg, redelivered=False)] if deliver is not None else []
    ) + done


def published(*msgs: str, queue: str = "q", ts: float = 0.0) -> list[Line]:
    return [ev(ts, "p", "publish", m, queue=queue, seq=i) for i, m in enumerate(msgs)]


def build_runs(root: Path) -> list[Path]:
    runs = []
    runs.append(
        write_run(
            root,
            "clean",
            {
                "p.jsonl": [
                    *published("m1", ts=1),
                    *published("m2", ts=1.5),
                    ev(2, "p", "confirm", "m1"),
                    ev(2, "p", "confirm", "m2"),
                ],
                "a.jsonl": [
                    *processed("a", "m1", 3, 4),
                    ev(4.1, "a", "ack", "m1"),
                    *processed("a", "m2", 5, 6),
                ],
            },
        )
    )
    runs.append(
        write_run(
            root,
            "effects-file",
            {"p.jsonl": published("m1", "m2"), "a.jsonl": processed("a", "m1", None, 4)},
            effects=[
                {"msg": "m1", "actor": "a", "ts": 4, "epoch": 1},
                {"msg": "m2", "actor": "b", "ts": 5, "epoch": 2},
                {"msg": "m2", "actor": "b", "ts": 6, "epoch": 2},
            ],
        )
    )
    runs.append(
        write_run(
            root,
            "anomalies",
            {
                "p.jsonl": [
                    *published("m1", "m2", "m3"),
                    *(ev(1, "p", "confirm", m) for m in ("m4", "m1", "m2", "m1")),
                ],
                "a.jsonl": [
                    *processed("a", "m2", None, 2),
                    *processed("a", "m2", None, 3),
                    *processed("a", "m9", None, 4),
                    *processed("a", "m8", None, 5),
                    *processed("a", "m8", None, 6),
                    *processed("a", "m3", None, 7),
                ],
            },
        )
    )
    runs.append(
        write_run(
            root,
            "tolerated",
            {"p.jsonl": [*published("m1"), ev(1, "p", "confirm", "m1")]},
            run={"tolerates": {"lost": "measured on purpose"}},
        )
    )
    runs.append(
        write_run(
            root,
            "concurrency",
            {
                "p.jsonl": [
                    *published("mA1", "mB1"),
                    *published("mT1", "mT2", queue="t"),
                    *published("mU1", "mU2", queue="u"),
                    *published("mW1", "mW2", "mW3", queue="w"),
                ],
                "a.jsonl": [
                    ev(0.5, "a", "deliver", "mA1"),
                    *processed("a", "mA1", 1, 3),
                    ev(3.5, "a", "deliver", "mA1"),
                    *processed("a", "mT1", 10, 11),
                    *processed("a", "mU1", 20, 22),
                    *processed("a", "mW1", 30, 35),
                ],
                "b.jsonl": [
                    *processed("b", "mB1", 2, 4),
                    *processed("b", "mT2", 11, 12),
                    *processed("b", "mU2", 21, 23),
                    *processed("b", "mW2", 31, 35),
                ],
                "c.jsonl": [ev(2.5, "c", "deliver", "mA1"), *processed("c", "mW3", 32, 33)],
            },
            # Order unchecked: on w, mW3 (published last) is committed first (reordered).
            run={"single_active_queues": ["q", "t", "w"], "ordered_queues": []},
        )
    )
    runs.append(claims_run(root))
    runs.append(
        write_run(
            root,
            "islands",
            {
                "p.jsonl": [*published("m1", "m2", "m3"), *published("m4", queue="r")],
                "a.jsonl": [
                    *processed("a", "m1", 0, 1),
                    *processed("a", "m2", None, 2),
                    *processed("a", "m3", 3.5, 3.5),
                ],
                "b.jsonl": processed("b", "m4", 0.5, 0.5),
            },
        )
    )
    runs.append(
        write_run(
            root,
            "islands-gap",
            {
                "p.jsonl": published("m1", "m2"),
                "a.jsonl": [*processed("a", "m1", 0, 1), *processed("a", "m2", None, 2.5)],
            },
            run={"activity_gap_s": 1.5},
        )
    )
    runs.append(
        write_run(
            root,
            "handovers",
            {
                "p.jsonl": published("m1", "m2", "m3", "m4", "m5", "m6"),
                "x.jsonl": [
                    *processed("a", "m1", None, 1),
                    *processed("a", "m2", None, 2),
                    *processed("b", "m3", None, 3),
                    *processed("a", "m4", None, 4),
                    *processed("c", "m5", None, 5),
                    *processed("b", "m6", None, 5),
                ],
            },
        )
    )
    runs.append(
        write_run(
            root,
            "recovery",
            {
                "p.jsonl": published("m1"),
                "nemesis.jsonl": [
                    ev(10, "n", "fault_start", fault="kill", target="n1"),
                    ev(9, "n", "fault_end", fault="kill", target="n1"),
                    ev(12, "n", "fault_end", fault="kill", target="n1"),
                    ev(11, "n", "fault_end", fault="kill", target="n2"),
                    ev(20, "n", "fault_start", fault="latency"),
                    ev(20, "n", "fault_end", fault="latency", target=""),
                    ev(30, "n", "fault_start", fault="x"),
                ],
                "a.jsonl": [
                    *processed("a", "m1", None, 10),
                    *processed("a", "m2", None, 11.5),
                    *processed("a", "m3", None, 25),
                ],
            },
        )
    )
    for n in (1, 2, 20, 100):
        order = sorted(range(1, n + 1), key=lambda i: (i * 37) % 101)  # not in time order
        runs.append(
            write_run(
                root,
                f"latency-{n}",
                {
                    "p.jsonl": published(*(f"m{i}" for i in order)),
                    "a.jsonl": [line for i in order for line in processed("a", f"m{i}", None, i)],
                },
            )
        )
    runs.append(
        write_run(
            root,
            "latency-negative",
            {
                "p.jsonl": published("m1", ts=10),
                "a.jsonl": processed("a", "m1", None, 9.999),
            },
        )
    )
    runs.append(write_run(root, "empty", {"p.jsonl": published("m1")}))
    runs.append(
        write_run(
            root,
            "no-publish",
            {
                "c.jsonl": [ev(0.0, "c", "active", queue="other")],  # a queue named
                "a.jsonl": processed("a", "m1", 1, 2),
                "b.jsonl": processed("b", "m2", 1.5, 3),
            },
        )
    )
    runs.append(malformed_run(root))
    odd = odd_names_run(root)
    runs += [odd, odd]
    runs.append(
        write_run(
            root,
            "counts",
            {
                "x.jsonl": [
                    ev(1, "c", "deliver", "m1", redelivered=True),
                    ev(1, "c", "deliver", "m1", redelivered="true"),
                    ev(1, "c", "deliver", "m1", redelivered="yes"),
                    ev(1, "c", "deliver", "m1", redelivered=False),
                    ev(1, "c", "deliver", "m1"),
                    ev(2, "c", "commit_rejected", "m1", why="stale-epoch"),
                    ev(2, "c", "commit_rejected", "m1", why="duplicate"),
                    ev(2, "c", "commit_rejected", "m1", why="other"),
                    ev(2, "c", "commit_rejected", "m1"),
                    ev(3, "c", "connection_lost", node="x", reason="reset"),
                    ev(3, "c", "connection_lost", node="x", reason="reset"),
                    ev(4, "n", "fault_start", fault="f", target="t"),
                    *(
                        ev(5, "p", kind, "m1")
                        for kind in (
                            "ack",
                            "reject",
                            "nack",
                            "return",
                            "retransmit",
                            "duplicate_skipped",
                            "confirm",
                        )
                    ),
                    ev(6, "c", "subscribed", queue="q", by="client"),
                    ev(7, "c", "active", queue="q", epoch=1),  # a queue named
                ]
            },
        )
    )
    runs.append(
        write_run(
            root,
            "queue-choice",
            {
                "p.jsonl": [
                    ev(2, "p", "publish", "m1", queue="b"),
                    ev(1, "p", "publish", "m1", queue="c"),
                    ev(1, "p", "publish", "m2", queue="z"),
                    ev(1, "p", "publish", "m2", queue="y"),
                    ev(0, "p", "publish", "m3"),
                    ev(5, "p", "publish", "m3", queue="k"),
                ],
                "a.jsonl": [
                    *processed("a", "m1", None, 10),
                    *processed("a", "m2", None, 20),
                    *processed("a", "m3", None, 30),
                ],
            },
        )
    )
    runs.append(split_run(root))
    return runs


def split_run(root: Path) -> Path:
    """A run whose event files the module's check reads in many splits: a malformed line
    every 97 lines of a.jsonl (3000 lines) and of b.jsonl (its first 500)."""
    lines: list[Line] = ["oops" if i % 97 == 0 else ev(i, "p", "connected") for i in range(1, 3001)]
    return write_run(root, "split", {"a.jsonl": lines, "b.jsonl": lines[:500],
                                     "p.jsonl": published("m1")})


CLAIMS = {
    # queue: the new consumer's `active` events (actor, ts, queue) around one handover
    "serial": [("new", 4.0, "serial")],  # claimed after the old commit at 3: no pair
    "late": [("new", 2.5, "late")],  # claimed before it: a pair from 2.5
    "after": [("new", 6.0, "after")],  # after the new one's commit at 5: from its deliver
    "other": [("x", 4.0, "other"), ("old", 4.0, "other")],  # not the new one's claim
    "elsewhere": [("new", 4.0, None), ("new", 4.0, 7), ("new", 4.0, "else")],
    "again": [("new", t, "again") for t in (0.5, 2.5, 4.0, 7.0)],  # the one at 4 counts
    "edge": [("new", 5.0, "edge")],  # at the commit time: counts
    "": [("new", 4.0, "")],  # the unknown queue of ids never published: claimed by name
}


def claims_run(root: Path) -> Path:
    """The handover of ``CLAIMS``, once per queue: the old consumer delivers at 1 and commits
    at 3, the new one delivers at 2 and commits at 5; the queue ``""`` holds ids never
    published, and one more handover there (from 10) whose claim names no queue."""
    publishes, old, new, others = [], [], [], []
    for queue, claims in CLAIMS.items():
        if queue:
            publishes += published(f"{queue}-a", f"{queue}-b", queue=queue)
        old += processed("old", f"{queue}-a", 1, 3)
        new += processed("new", f"{queue}-b", 2, 5)
        for actor, ts, named in claims:
            claim = ev(ts, actor, "active", epoch=2)
            if named is not None:
                claim["queue"] = named
            others.append(claim)
    old += processed("old", "u-a", 11, 13)
    new += [*processed("new", "u-b", 12, 15), ev(14, "new", "active", epoch=3)]
    return write_run(
        root,
        "claims",
        {"p.jsonl": publishes, "old.jsonl": old, "new.jsonl": new, "claims.jsonl": others},
    )


def malformed_run(root: Path) -> Path:
    """Malformed lines of every kind, in a directory whose name needs URI escaping; three
    line endings (CRLF in a.jsonl, CR in b.jsonl, LF in effects.jsonl)."""
    ok = {"ts": 1, "actor": "p", "type": "connected"}
    path = write_run(
        root,
        "bad lines+1",
        {
            "a.jsonl": [
                ev(1, "p", "publish", "m1", queue="q"),  # 1
                '{"ts": "1", "actor": "p", "type": "publish", "msg": "m2"}',  # 2 ts a string
                "",  # 3 ignored
                "   \t ",  # 4 ignored
                json.dumps({**ok, "ts": True}),  # 5 ts a boolean
                "[1, 2]",  # 6 not an object
                json.dumps({**ok, "actor": 5}),  # 7 actor a number
                json.dumps({**ok, "type": "confirm"}),  # 8 no msg
                json.dumps(ok),  # 9 fine, no msg needed
                '{"ts": NaN, "actor": "p", "type": "connected"}',  # 10 NaN is not JSON
                json.dumps({**ok, "type": "heartbeat", "extra": [1]}),  # 11 unknown type
                ev(1, "p", "publish", "m3", queue=7),  # 12 fine, queue ""
                '{"ts": 1, "actor": "p", "ty',  # 13 torn write
                json.dumps(ok) + json.dumps(ok),  # 14 two objects on one line
                json.dumps(ok) + " x",  # 15 trailing text
                json.dumps(ok) + "]",  # 16 a stray bracket
                json.dumps(ok) + " /* note */",  # 17 comments are not JSON
                json.dumps(ok).replace('"ts": 1', '"ts": 1e400'),  # 18 not a finite double
                '{"ts": "x", "ts": 1, "actor": "p", "type": "connected"}',  # 19 fine: last key wins
                '{"ts": 1, "ts": "x", "actor": "p", "type": "connected"}',  # 20 ts a string
            ]
        },
        newline="\r\n",
    )
    (path / "events" / "b.jsonl").write_text(
        "\r".join(
            [
                json.dumps(ev(2, "a", "commit", "m1", epoch=1)),
                "not json",
                json.dumps(ev(2, "a", "heartbeat")),
            ]
        )
        + "\r",
        newline="",
    )
    (path / "effects.jsonl").write_text(
        "".join(
            line + "\n"
            for line in [
                '{"msg": "m1", "actor": "a", "ts": 2, "epoch": 1}',
                '{"msg": "m1", "actor": "a", "ts": 2, "epoch": 1.5}',  # 2 not an integer
                '{"msg": "m1", "actor": "a", "ts": 2, "epoch": 3.0}',  # 3 not an integer
                '{"msg": "m1", "actor": "a", "ts": 3, "epoch": null}',
                '{"msg": "m3", "actor": "a", "ts": 4}',
                '{"msg": 1, "actor": "a", "ts": 2}',  # 6 msg a number
                '{"msg": "m4", "actor": "a", "ts": "2"}',  # 7 ts a string
                '{"msg": "m1", "actor": "a", "ts": 2, "epoch": 18446744073709551616}',  # 8 2**64
            ]
        )
    )
    return path


def odd_names_run(root: Path) -> Path:
    """A run whose path has Hadoop glob characters and a file name that looks URI-escaped,
    with hidden files (``.``/``_``: not read, SPEC)."""
    return write_run(
        root,
        "odd[1]{a,b}*?",
        {
            "_under.jsonl": published("m1"),
            ".dot.jsonl": published("m2"),
            "x%20y.jsonl": [*published("m3"), "oops"],
        },
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return build_runs(tmp_path_factory.mktemp("runs"))


class Checked(NamedTuple):
    verdicts: list[dict[str, Any]]
    plans: list[str]
    """The physical plan of each job the call ran."""
    splits: int
    """How many splits the ``split`` run's a.jsonl is read in."""


TINY_SPLITS = {"spark.sql.files.maxPartitionBytes": "16384", "spark.sql.files.openCostInBytes": "0"}
"""Files read in splits of 16 KiB: the ``split`` run's a.jsonl in many, so line numbers
must hold across splits (every other rule then does too)."""


@pytest.fixture(scope="module")
def checked(spark: SparkSession, runs: list[Path]) -> Checked:
    """Every run checked in one ``check_runs`` call (a Spark job costs seconds, a run in it
    almost nothing more), read in ``TINY_SPLITS``, recording the plan of each job on the way."""
    recorded: list[str] = []
    classic = type(spark.range(1))  # the class that runs jobs (pyspark.sql.classic)
    collect = classic.collect

    def recording(frame: DataFrame) -> list[Any]:
        recorded.append(frame._jdf.queryExecution().executedPlan().toString())
        return collect(frame)

    for key, value in TINY_SPLITS.items():
        spark.conf.set(key, value)
    try:
        [split] = [run for run in runs if run.name == "split"]
        splits = spark.read.text(str(split / "events" / "a.jsonl")).rdd.getNumPartitions()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(classic, "collect", recording)
            found = check_runs(spark, runs)
    finally:
        for key in TINY_SPLITS:
            spark.conf.unset(key)
    return Checked([verdict.to_json() for verdict in found], recorded, splits)


@pytest.fixture(scope="module")
def verdicts(runs: list[Path], checked: Checked) -> dict[str, Any]:
    found = checked.verdicts
    assert [v["run"] for v in found] == [path.name for path in runs]
    # The same run given twice is checked twice, each copy whole.
    twice = [v for path, v in zip(runs, found, strict=True) if runs.count(path) == 2]
    assert len(twice) == 2
    assert twice[0] == twice[1]
    return {v["run"]: v for v in found}


def test_reference_engine_agrees_on_every_rule(runs: list[Path], verdicts: dict[str, Any]) -> None:
    """These edge cases are checked by both engines too (``test_agreement`` for the rest)."""
    for path in runs:
        reference = python_engine.check_run(path).to_json()
        assert comparable(verdicts[path.name]) == comparable(reference)


def ids(verdict: dict[str, Any], name: str) -> list[str]:
    assert verdict[name]["count"] == len(verdict[name]["ids"])
    return list(verdict[name]["ids"])


def test_clean_run_is_valid_with_its_numbers(verdicts: dict[str, Any]) -> None:
    v = verdicts["clean"]
    assert v["engine"] == "spark"
    assert (v["valid"], v["published"], v["confirmed"], v["effects"]) == (True, 2, 2, 2)
    assert v["effects_source"] == "events"
    assert [ids(v, n) for n in ("lost", "duplicated", "unexpected")] == [[], [], []]
    assert v["anomalies"] == {}
    assert v["tolerated"] == {}
    assert v["handovers"] == []
    assert v["activity"] == [{"queue": "q", "actor": "a", "start": 3.0, "end": 6.0, "effects": 2}]
    assert v["latency_ms"] == {
        "count": 2,
        "p50": 3000.0,
        "p95": 4500.0,
        "p99": 4500.0,
        "max": 4500.0,
        "histogram": [0] * 11 + [2, 0, 0, 0, 0],
    }


def test_effects_file_is_the_ground_truth(verdicts: dict[str, Any]) -> None:
    v = verdicts["effects-file"]
    assert v["effects_source"] == "effects.jsonl"
    assert v["effects"] == 3
    assert v["counts"]["commit"] == 1
    assert ids(v, "duplicated") == ["m2"]


def test_lost_duplicated_unexpected(verdicts: dict[str, Any]) -> None:
    v = verdicts["anomalies"]
    assert ids(v, "lost") == ["m1", "m4"]
    assert ids(v, "duplicated") == ["m2", "m8"]
    assert ids(v, "unexpected") == ["m8", "m9"]
    assert v["confirmed"] == 3
    assert v["published"] == 3
    assert v["anomalies"] == {
        "m1": ["lost"],
        "m4": ["lost"],
        "m2": ["duplicated"],
        "m8": ["duplicated", "unexpected"],
        "m9": ["unexpected"],
    }
    assert v["valid"] is False


def test_tolerated_anomaly_keeps_the_run_valid(verdicts: dict[str, Any]) -> None:
    v = verdicts["tolerated"]
    assert ids(v, "lost") == ["m1"]
    assert v["valid"] is True
    assert v["tolerated"] == {"lost": "measured on purpose"}


def test_concurrency_pairs(verdicts: dict[str, Any]) -> None:
    """Overlap on q; touching on t is none; u is not checked; on w two islands end together
    and the earlier one is the first of the later pair."""
    v = verdicts["concurrency"]
    assert v["concurrent"] == {
        "count": 3,
        "pairs": [
            {
                "queue": "q",
                "first": {"actor": "a", "start": 1.0, "end": 3.0},
                "second": {"actor": "b", "start": 2.0, "end": 4.0},
                "overlap_s": 1.0,
                "msgs": ["mA1", "mB1"],
            },
            {
                "queue": "w",
                "first": {"actor": "a", "start": 30.0, "end": 35.0},
                "second": {"actor": "b", "start": 31.0, "end": 35.0},
                "overlap_s": 4.0,
                "msgs": ["mW1", "mW2"],
            },
            {
                "queue": "w",
                "first": {"actor": "a", "start": 30.0, "end": 35.0},
                "second": {"actor": "c", "start": 32.0, "end": 33.0},
                "overlap_s": 1.0,
                "msgs": ["mW1", "mW3"],
            },
        ],
    }
    assert v["anomalies"] == {m: ["concurrent"] for m in ("mA1", "mB1", "mW1", "mW2", "mW3")}
    assert v["valid"] is False


def test_a_claim_starts_the_interval_when_later_than_the_deliver(verdicts: dict[str, Any]) -> None:
    """Each queue of ``CLAIMS``: the pairs left, with the second island's start."""
    v = verdicts["claims"]
    pairs = [(p["queue"], p["second"]["start"], p["msgs"]) for p in v["concurrent"]["pairs"]]
    assert pairs == [
        ("", 12.0, ["u-a", "u-b"]),
        ("after", 2.0, ["after-a", "after-b"]),
        ("elsewhere", 2.0, ["elsewhere-a", "elsewhere-b"]),
        ("late", 2.5, ["late-a", "late-b"]),
        ("other", 2.0, ["other-a", "other-b"]),
    ]
    starts = {(a["queue"], a["actor"]): a["start"] for a in v["activity"] if a["start"] < 10}
    assert starts == {
        **{(queue, "old"): 1.0 for queue in CLAIMS},
        **{("serial", "new"): 4.0, ("again", "new"): 4.0, ("edge", "new"): 5.0, ("", "new"): 4.0},
        **{(queue, "new"): 2.0 for queue in ("after", "other", "elsewhere")},
        ("late", "new"): 2.5,
    }


def test_activity_islands_join_at_exactly_the_gap(verdicts: dict[str, Any]) -> None:
    assert verdicts["islands"]["activity"] == [
        {"queue": "q", "actor": "a", "start": 0.0, "end": 2.0, "effects": 2},
        {"queue": "q", "actor": "a", "start": 3.5, "end": 3.5, "effects": 1},
        {"queue": "r", "actor": "b", "start": 0.5, "end": 0.5, "effects": 1},
    ]
    assert verdicts["islands"]["concurrent"]["count"] == 0
    assert verdicts["islands-gap"]["activity"] == [
        {"queue": "q", "actor": "a", "start": 0.0, "end": 2.5, "effects": 2},
    ]


def test_handovers_in_time_order_ties_by_actor(verdicts: dict[str, Any]) -> None:
    rows = [
        (h["from"], h["to"], h["last_commit"], h["first_commit"], h["gap_s"])
        for h in verdicts["handovers"]["handovers"]
    ]
    assert rows == [
        ("a", "b", 2.0, 3.0, 1.0),
        ("b", "a", 3.0, 4.0, 1.0),
        ("a", "b", 4.0, 5.0, 1.0),
        ("b", "c", 5.0, 5.0, 0.0),
    ]
    assert {h["queue"] for h in verdicts["handovers"]["handovers"]} == {"q"}


def test_recovery_per_fault(verdicts: dict[str, Any]) -> None:
    v = verdicts["recovery"]
    assert v["recovery"] == [
        {"fault": "kill", "target": "n1", "start": 10.0, "end": 12.0, "recovery_s": 1.5},
        {"fault": "latency", "target": "", "start": 20.0, "end": 20.0, "recovery_s": 5.0},
        {"fault": "x", "target": "", "start": 30.0, "end": None, "recovery_s": None},
    ]
    assert v["counts"]["fault_start"] == 3


@pytest.mark.parametrize(
    ("n", "p50", "p95", "p99"),
    [(1, 1, 1, 1), (2, 1, 2, 2), (20, 10, 19, 20), (100, 50, 95, 99)],
)
def test_latency_nearest_ranks(
    verdicts: dict[str, Any], n: int, p50: int, p95: int, p99: int
) -> None:
    """Values are 1..n seconds; nearest rank k = ceil(p * n / 100), value v[k-1] = k s."""
    latency = verdicts[f"latency-{n}"]["latency_ms"]
    assert (latency["count"], latency["p50"], latency["p95"], latency["p99"], latency["max"]) == (
        n,
        p50 * 1000.0,
        p95 * 1000.0,
        p99 * 1000.0,
        n * 1000.0,
    )
    assert sum(latency["histogram"]) == n


def test_latency_histogram_bins(verdicts: dict[str, Any]) -> None:
    assert verdicts["latency-100"]["latency_ms"]["histogram"] == [0] * 10 + [1, 3, 5, 20, 30, 41]
    negative = verdicts["latency-negative"]["latency_ms"]
    assert negative["histogram"] == [1] + [0] * 15
    assert negative["p50"] == (9.999 - 10) * 1000


def test_empty_run(verdicts: dict[str, Any]) -> None:
    v = verdicts["empty"]  # one publish and nothing else: less is not a run (test_cli)
    assert (v["valid"], v["published"], v["effects"], v["effects_source"]) == (True, 1, 0, "events")
    assert v["counts"] == {**dict.fromkeys(v["counts"], 0), "publish": 1}
    assert v["reordered"] == {"count": 0, "ids": []}
    assert v["latency_ms"] == {
        "count": 0,
        "p50": None,
        "p95": None,
        "p99": None,
        "max": None,
        "histogram": [0] * 16,
    }
    assert v["activity"] == v["handovers"] == v["recovery"] == []


def test_without_publish_ids_are_unexpected_in_the_unknown_queue(
    verdicts: dict[str, Any],
) -> None:
    v = verdicts["no-publish"]
    assert ids(v, "unexpected") == ["m1", "m2"]
    assert v["latency_ms"]["count"] == 0
    assert [a["queue"] for a in v["activity"]] == ["", ""]
    # Every queue is checked without single_active_queues, the unknown one included.
    assert [(p["queue"], p["overlap_s"]) for p in v["concurrent"]["pairs"]] == [("", 0.5)]


def test_malformed_lines_with_file_and_line(verdicts: dict[str, Any]) -> None:
    v = verdicts["bad lines+1"]
    assert [(m["file"], m["line"]) for m in v["malformed"]["lines"]] == [
        ("effects.jsonl", 2),
        ("effects.jsonl", 3),
        ("effects.jsonl", 6),
        ("effects.jsonl", 7),
        ("effects.jsonl", 8),
        ("events/a.jsonl", 2),
        ("events/a.jsonl", 5),
        ("events/a.jsonl", 6),
        ("events/a.jsonl", 7),
        ("events/a.jsonl", 8),
        ("events/a.jsonl", 10),
        ("events/a.jsonl", 13),
        ("events/a.jsonl", 14),
        ("events/a.jsonl", 15),
        ("events/a.jsonl", 16),
        ("events/a.jsonl", 17),
        ("events/a.jsonl", 18),
        ("events/a.jsonl", 20),
        ("events/b.jsonl", 2),
    ]
    assert v["malformed"]["count"] == 19
    assert all(m["error"] for m in v["malformed"]["lines"])
    assert v["unknown_events"] == {"heartbeat": 2}
    # The rest is still checked: effects rows 1, 4, 5; m3's queue (7) is not a string.
    assert v["effects"] == 3
    assert ids(v, "duplicated") == ["m1"]
    assert v["published"] == 2
    assert {a["queue"] for a in v["activity"]} == {"", "q"}
    assert v["valid"] is False


def test_counts(verdicts: dict[str, Any]) -> None:
    assert verdicts["counts"]["counts"] == {
        "publish": 0,
        "retransmit": 1,
        "confirm": 1,
        "nack": 1,
        "return": 1,
        "deliver": 5,
        "redelivered": 1,
        "duplicate_skipped": 1,
        "commit": 0,
        "commit_rejected_stale": 1,
        "commit_rejected_duplicate": 1,
        "ack": 1,
        "reject": 1,
        "connection_lost": 2,
        "fault_start": 1,
    }


def test_queue_of_a_message_is_its_earliest_named_publish(verdicts: dict[str, Any]) -> None:
    v = verdicts["queue-choice"]
    assert [(a["queue"], a["start"]) for a in v["activity"]] == [
        ("c", 10.0),
        ("k", 30.0),
        ("y", 20.0),
    ]
    assert v["latency_ms"]["max"] == 30000.0  # m3 from its first publish, which has no queue


def test_line_numbers_across_splits(verdicts: dict[str, Any], checked: Checked) -> None:
    """A file read in many splits (tiny maxPartitionBytes) still numbers its lines exactly."""
    verdict = verdicts["split"]
    assert checked.splits > 5
    expected = [("events/a.jsonl", i) for i in range(97, 3001, 97)]
    expected += [("events/b.jsonl", i) for i in range(97, 501, 97)]
    assert [(m["file"], m["line"]) for m in verdict["malformed"]["lines"]] == expected
    assert verdict["counts"]["connection_lost"] == 0
    assert verdict["unknown_events"] == {}


def test_bad_run_json_is_an_input_error(spark: SparkSession, tmp_path: Path) -> None:
    run = write_run(tmp_path, "r", run={"tolerates": {"lost": ""}})
    with pytest.raises(InputError, match="reason"):
        check_runs(spark, [run])
    with pytest.raises(InputError, match="not found"):
        check_runs(spark, [tmp_path / "missing"])


def test_odd_paths_are_read_literally_hidden_files_not(verdicts: dict[str, Any]) -> None:
    v = verdicts["odd[1]{a,b}*?"]
    assert v["published"] == 1
    assert [(m["file"], m["line"]) for m in v["malformed"]["lines"]] == [("events/x%20y.jsonl", 2)]


def test_percentile_ranks_are_exact_across_partitions(spark: SparkSession) -> None:
    """The ranks come from a sort spread over partitions (here 8), ties included: each
    percentile is still exactly the nearest-rank element."""
    rng = random.Random(3)
    runs = {
        run: [float(rng.randint(0, n // 3)) for _ in range(n)]
        for run, n in enumerate((1, 2, 7, 100, 999, 2500))
    }
    values = spark.createDataFrame(
        [(run, x) for run, xs in runs.items() for x in xs], "run int, x double"
    ).repartition(8)
    spark.conf.set("spark.sql.shuffle.partitions", "8")
    try:
        ordered = in_order(values, "run", "x").persist()
        found = {(row["run"], row["rank"]): row["x"] for row in ranked_values(ordered).collect()}
        parts = ordered.select("part").distinct().count()
        ordered.unpersist()
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "4")
    assert parts > 1
    for run, xs in runs.items():
        xs.sort()
        for pct in (50, 95, 99, 100):
            k = (pct * len(xs) + 99) // 100
            assert found[(run, k)] == xs[k - 1], (run, pct)


def test_no_cross_join_in_any_job(checked: Checked) -> None:
    """Every job the engine runs is planned without a cartesian product or a nested-loop
    join: overlaps, ranks and recovery are sorts and equi-joins, so cost stays near-linear.
    (The jobs of the module's one ``check_runs`` call over every run above.)"""
    assert len(checked.plans) >= 10
    for plan in checked.plans:
        assert "CartesianProduct" not in plan
        assert "NestedLoopJoin" not in plan
