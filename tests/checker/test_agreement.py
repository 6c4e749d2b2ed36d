"""The Spark engine and the reference engine agree exactly on generated runs.

Clean runs of several shapes and runs with each injected anomaly are checked by both engines;
the verdicts must be the same JSON once ``engine`` and the malformed lines' ``error`` texts
(free wording, SPEC.md) are dropped. All runs, the hand-made edge cases too, go through one
``check_runs`` call, which is also how the CLI checks many runs.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from sac.checker import python_engine, spark_engine, spec
from sac.checker.generate import INJECTIONS, generate_run

SHAPES: dict[str, dict[str, Any]] = {
    "clean-1q": {"seed": 1},
    "clean-3q": {"seed": 2, "queues": 3, "consumers": 6, "faults": 4},
    "clean-1consumer": {"seed": 3, "consumers": 1, "faults": 0},
    # Many handovers, five of them late claims: the new consumer's first delivers come before
    # its `active`, the old one's last commit in between (serial: SPEC.md).
    "clean-handovers": {"seed": 60, "queues": 2, "consumers": 5, "faults": 10},
    **{f"inject-{name}": {"seed": 10 + i, "inject": [name]} for i, name in enumerate(INJECTIONS)},
    "inject-all": {"seed": 40, "queues": 2, "consumers": 4, "inject": [*INJECTIONS, "concurrent"]},
    # Generated, then one line in six mangled (mangle): wrong types, missing fields, torn or
    # trailing text, CRLF, duplicate keys; the rest must still be checked the same way.
    "mangled-1": {"seed": 50, "queues": 2, "consumers": 4, "faults": 3, "mangle": 1},
    "mangled-2": {"seed": 51, "queues": 3, "consumers": 3, "inject": ["concurrent"], "mangle": 2},
    "mangled-3": {"seed": 60, "queues": 2, "consumers": 5, "faults": 10, "mangle": 3},
}

ODD_VALUES: list[Any] = [
    "x", "", 1, 1.5, 1e308, True, None, {}, [1, "x"], {"a": 1}, 2**63, 3.0, "1", "true",
    "NaN", 10**30, "q",
]  # fmt: skip
"""Values put in place of a field. Not -0.0: see the report (Python keeps its sign)."""


def mangle(run: Path, seed: int) -> None:
    """Rewrites every file of ``run``, one line in six replaced by a broken variant."""
    rng = random.Random(seed)
    for path in sorted([*run.glob("events/*.jsonl"), *run.glob("effects.jsonl")]):
        lines = []
        for line in path.read_text().splitlines():
            if rng.random() < 1 / 6:
                obj = json.loads(line)
                how = rng.randrange(5)
                if how == 0:
                    obj[rng.choice([*obj, "ts", "actor", "msg", "epoch"])] = rng.choice(ODD_VALUES)
                elif how == 1:
                    del obj[rng.choice(list(obj))]
                elif how == 2:
                    line = line[: rng.randrange(len(line))]
                elif how == 3:
                    line += rng.choice([" x", "{}", "]", ",1", "\t", " ", "\r"])
                else:
                    line = line.replace("{", '{"ts": "soon", ', 1)
                if how < 2:
                    line = json.dumps(obj)
            lines.append(line)
        path.write_text("\r\n".join(lines) + "\r\n", newline="")


def comparable(verdict: dict[str, Any]) -> str:
    """The verdict as the agreement is defined (``spec.comparable``), as sorted JSON."""
    return json.dumps(spec.comparable(verdict), sort_keys=True, indent=1)


def surrogates_negative_zero_and_duplicate_keys(root: Path) -> Path:
    """The three cases the SPEC decided after the engines first disagreed on them."""
    run = root / "edge"
    (run / "events").mkdir(parents=True)
    lines = [
        '{"ts": -0.0, "actor": "p", "type": "publish", "msg": "a", "queue": "q"}',
        '{"ts": 1.0, "actor": "p", "type": "confirm", "msg": "a"}',
        '{"ts": 2.0, "actor": "p", "type": "publish", "msg": "\\ud800", "queue": "q"}',
        '{"ts": 3.0, "actor": "p", "type": "publish", "msg": "\\ud83d\\ude00", "queue": "q"}',
        '{"ts": 4.0, "actor": "p", "type": "publish", "msg": "b", "msg": "c", "queue": "q"}',
    ]
    (run / "events" / "p.jsonl").write_text("\n".join(lines) + "\n")
    (run / "run.json").write_text("{}")
    (run / "effects.jsonl").write_text('{"msg": "a", "actor": "c1", "ts": 5.0, "epoch": 1}\n')
    return run


def byte_order_marks_and_long_lines(root: Path) -> Path:
    """A UTF-8 byte order mark opening a file (Windows editors write one), one opening a later
    line, and a 5 MB line."""
    run = root / "bom"
    (run / "events").mkdir(parents=True)
    (run / "run.json").write_text("{}")
    bom = "\ufeff"
    (run / "events" / "p.jsonl").write_text(
        bom + '{"ts": 1.0, "actor": "p", "type": "publish", "msg": "a", "queue": "q"}\n'
        + bom + '{"ts": 2.0, "actor": "p", "type": "confirm", "msg": "a"}\n'
        + '{"ts": 3.0, "actor": "p", "type": "confirm", "msg": "a", "pad": "'
        + "x" * 5_000_000 + '"}\n', encoding="utf-8")
    (run / "effects.jsonl").write_text(bom + '{"msg": "a", "actor": "c", "ts": 4.0}\n',
                                       encoding="utf-8")
    return run


ORDER_RUNS = [f"order-{n}" for n in range(6)]


def order_and_its_exceptions(root: Path) -> dict[str, Path]:
    """Runs whose every exception to ``reordered`` is in play (see the test)."""
    rng = random.Random(7)
    runs = {}
    for n, name in enumerate(ORDER_RUNS):
        run = root / name
        (run / "events").mkdir(parents=True)
        settings: dict[str, Any] = {"single_active_queues": ["q", "r"]}
        if n % 2:
            settings["ordered_queues"] = ["q", "z"]
        (run / "run.json").write_text(json.dumps(settings))
        lines: list[dict[str, Any]] = []
        holder: dict[str, str] = {}
        for i in range(60):
            msg, publisher = f"m{i:03d}", rng.choice(["p", "p", "s"])
            seq: Any = i if rng.random() < 0.9 else rng.choice(ODD_VALUES)
            queue = rng.choice(["q", "q", "r", "z"])
            lines.append({"ts": i / 10, "actor": publisher, "type": "publish", "msg": msg,
                          "seq": seq, "queue": queue})
            if rng.random() < 0.05:
                kind = rng.choice(["retransmit", "nack", "return"])
                lines.append({"ts": i / 10 + 0.01, "actor": publisher, "type": kind, "msg": msg})
        ids = [f"m{i:03d}" for i in range(60)]
        rng.shuffle(ids)  # against the order, everywhere
        for k, msg in enumerate(ids):
            at = round(10 + k / 5 + rng.choice([0, 0, 0.1]), 1)  # some ties
            first = holder.setdefault(msg, rng.choice(["a", "b"]))
            lines.append({"ts": at - 0.5, "actor": first, "type": "deliver", "msg": msg})
            if rng.random() < 0.3:  # it comes back to another consumer
                how = rng.choice(["client", "server", None, 1, True])
                if how is not None:
                    lines.append({"ts": at - 0.4, "actor": first, "type": "cancelled",
                                  "queue": "q", "by": how})
                first = "c"
                lines.append({"ts": at - 0.3, "actor": first, "type": "deliver", "msg": msg,
                              "redelivered": True})
            if rng.random() < 0.08:
                lines.append({"ts": at - 0.2, "actor": first, "type": "reject", "msg": msg,
                              "requeue": rng.choice([True, False, "true", 1, None])})
            lines.append({"ts": at, "actor": first, "type": "commit", "msg": msg, "epoch": 1})
            if rng.random() < 0.05:
                lines.append({"ts": at + 30, "actor": "b", "type": "commit", "msg": msg})
        for actor in ("p", "s", "a", "b", "c"):
            mine = [json.dumps(e) for e in lines if e["actor"] == actor]
            (run / "events" / f"{actor}.jsonl").write_text("\n".join(mine) + "\n")
        runs[name] = run
    return runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every run of the module by name: the generated ``SHAPES`` and the hand-made ones."""
    root = tmp_path_factory.mktemp("generated")
    paths = {}
    for name, shape in SHAPES.items():
        mangle_seed = shape.get("mangle")
        generate_run(root / name, events=2000, **{k: v for k, v in shape.items() if k != "mangle"})
        if mangle_seed is not None:
            mangle(root / name, mangle_seed)
        paths[name] = root / name
    hand_made = root / "hand-made"
    paths["edge"] = surrogates_negative_zero_and_duplicate_keys(hand_made)
    paths["bom"] = byte_order_marks_and_long_lines(hand_made)
    paths.update(order_and_its_exceptions(hand_made))
    return paths


@pytest.fixture(scope="module")
def spark_verdicts(spark: SparkSession, runs: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """The Spark engine's verdict of every run, by name, from one ``check_runs`` call (a
    Spark job costs seconds, a run in it almost nothing more)."""
    found = spark_engine.check_runs(spark, list(runs.values()))
    return {name: verdict.to_json() for name, verdict in zip(runs, found, strict=True)}


@pytest.mark.parametrize("name", list(SHAPES))
def test_engines_agree(
    runs: dict[str, Path], spark_verdicts: dict[str, dict[str, Any]], name: str,
) -> None:
    expected = python_engine.check_run(runs[name]).to_json()
    got = spark_verdicts[name]
    assert got["engine"] == "spark"
    assert comparable(got) == comparable(expected)


def test_injected_anomalies_are_found(spark_verdicts: dict[str, dict[str, Any]]) -> None:
    """Not only agreement: the anomalies the generator injected are in the verdict."""
    by_name = {v["run"]: v for v in spark_verdicts.values()}
    for name in ("lost", "duplicated", "unexpected", "concurrent", "reordered"):
        assert by_name[f"inject-{name}"][name]["count"] >= 1, name
        assert not by_name[f"inject-{name}"]["valid"]
    assert by_name["inject-malformed"]["malformed"]["count"] == 1
    assert by_name["inject-no_effects"]["effects_source"] == "events"
    assert all(by_name[name]["valid"] for name in SHAPES if name.startswith("clean"))
    assert all(by_name[f"mangled-{i}"]["malformed"]["count"] > 50 for i in (1, 2, 3))


def test_the_engines_agree_on_surrogates_negative_zero_and_duplicate_keys(
    runs: dict[str, Path], spark_verdicts: dict[str, dict[str, Any]],
) -> None:
    """The three cases the SPEC decided after the engines first disagreed on them."""
    [reference] = [v.to_json() for v in python_engine.check_runs([runs["edge"]])]
    verdict = spark_verdicts["edge"]
    assert spec.comparable(verdict) == spec.comparable(reference)
    assert [m["line"] for m in reference["malformed"]["lines"]] == [3]
    assert reference["published"] == 3  # a, the emoji, c (the last "msg" wins)


def test_the_engines_agree_on_byte_order_marks_and_long_lines(
    runs: dict[str, Path], spark_verdicts: dict[str, dict[str, Any]],
) -> None:
    """A UTF-8 byte order mark opening a file (Windows editors write one) is skipped, as
    Hadoop's line reader skips it; one anywhere else is not JSON. A 5 MB line is one line."""
    [reference] = [v.to_json() for v in python_engine.check_runs([runs["bom"]])]
    verdict = spark_verdicts["bom"]
    assert spec.comparable(verdict) == spec.comparable(reference)
    assert [(m["file"], m["line"]) for m in reference["malformed"]["lines"]] == \
        [("events/p.jsonl", 2)]
    assert (reference["published"], reference["confirmed"], reference["effects"]) == (1, 1, 1)


def test_the_engines_agree_on_order_and_its_exceptions(
    runs: dict[str, Path], spark_verdicts: dict[str, dict[str, Any]],
) -> None:
    """``reordered`` on hand-made runs whose every exception is in play: a graceful hand-back
    (checked), a crash and a server cancel (not), parked and requeued rejects, re-sent ids,
    two publishers, a duplicate, ties in time, and ``seq``, ``by`` and ``requeue`` of every
    odd type (only an integer, the string "client" and JSON true count)."""
    references = [v.to_json() for v in python_engine.check_runs([runs[n] for n in ORDER_RUNS])]
    for name, reference in zip(ORDER_RUNS, references, strict=True):
        assert comparable(spark_verdicts[name]) == comparable(reference)
    assert all(r["reordered"]["count"] > 5 for r in references)
