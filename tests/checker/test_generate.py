"""The synthetic runs: the layout of docs/history.md, realistic stories, determinism, and each
injection found by the reference engine and nothing else with it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sac.checker import spec
from sac.checker.generate import INJECTED_FILE, generate_run, main
from sac.checker.python_engine import check_run


def files_of(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def without(verdict: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in verdict.items() if k not in keys}


def test_a_run_has_the_history_layout(tmp_path: Path) -> None:
    run = generate_run(tmp_path / "r", events=3000, seed=1, publishers=2, consumers=4, queues=2)
    assert sorted(files_of(run.path)) == [
        "effects.jsonl",
        "events/consumer-0.jsonl",
        "events/consumer-1.jsonl",
        "events/consumer-2.jsonl",
        "events/consumer-3.jsonl",
        "events/nemesis.jsonl",
        "events/publisher-0.jsonl",
        "events/publisher-1.jsonl",
        INJECTED_FILE,
        "run.json",
    ]
    meta = json.loads((run.path / "run.json").read_text())
    assert meta["single_active_queues"] == ["queue-0", "queue-1"]
    assert meta["seed"] == 1
    assert meta["start"] < meta["end"]
    assert run.events >= 3000


def test_each_actor_file_holds_its_actor_in_time_order(tmp_path: Path) -> None:
    run = generate_run(tmp_path / "r", events=5000, seed=2, consumers=3, faults=2)
    total = 0
    for path in (run.path / "events").iterdir():
        events = [json.loads(line) for line in path.read_text().splitlines()]
        assert {e["actor"] for e in events} == {path.stem}
        times = [e["ts"] for e in events]
        assert times == sorted(times)
        total += len(events)
    assert total == run.events


def events_of(run: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in sorted((run / "events").glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]


def late_claims(run: Path) -> list[tuple[str, str, float]]:
    """(old, new, claim time) of each handover where the new consumer was delivered, before
    its claim (``active``), a message it committed after it, and another consumer of the
    queue committed between that deliver and the claim: serial (SPEC.md), though the
    deliver alone would have started the new one's processing before the old commit."""
    events = events_of(run)
    queue_of = {e["msg"]: e["queue"] for e in events if e["type"] == "publish"}
    commits = [e for e in events if e["type"] == "commit"]
    found = []
    for claim in (e for e in events if e["type"] == "active"):
        new, at = claim["actor"], claim["ts"]
        after = {e["msg"] for e in commits if e["actor"] == new and e["ts"] > at}
        early = [
            e["ts"]
            for e in events
            if e["type"] == "deliver" and e["actor"] == new and e["ts"] < at and e["msg"] in after
        ]
        if early:
            found += [
                (e["actor"], new, at)
                for e in commits
                if e["actor"] != new
                and queue_of[e["msg"]] == claim["queue"]
                and min(early) < e["ts"] < at
            ]
    return found


def test_a_clean_run_is_valid_and_tells_the_whole_story(tmp_path: Path) -> None:
    run = generate_run(tmp_path / "r", events=40_000, seed=4, consumers=4, queues=2, faults=3)
    verdict = check_run(run.path).to_json()
    assert verdict["valid"] is True
    assert verdict["published"] == verdict["confirmed"] == verdict["effects"] == run.messages
    counts = verdict["counts"]
    # Every part of the story happens at this size.
    for name in (
        "retransmit",
        "nack",
        "redelivered",
        "duplicate_skipped",
        "commit_rejected_stale",
        "connection_lost",
    ):
        assert counts[name] > 0, name
    assert counts["fault_start"] == 3
    assert len(verdict["handovers"]) > 3
    assert len(late_claims(run.path)) > 1  # and still valid: no concurrent pair
    assert all(h["gap_s"] > 0 for h in verdict["handovers"])
    assert {a["queue"] for a in verdict["activity"]} == {"queue-0", "queue-1"}
    assert all(r["end"] is not None and r["recovery_s"] is not None for r in verdict["recovery"])
    assert verdict["latency_ms"]["count"] == run.effects
    assert json.loads((run.path / INJECTED_FILE).read_text()) == {
        "lost": [],
        "duplicated": [],
        "unexpected": [],
        "reordered": [],
        "concurrent": [],
        "malformed": [],
        "unknown_events": {},
        "effects_file": True,
    }


def test_one_consumer_per_queue_is_still_a_clean_run(tmp_path: Path) -> None:
    run = generate_run(tmp_path / "r", events=5000, seed=4, consumers=2, queues=2, faults=4)
    verdict = check_run(run.path).to_json()
    assert verdict["valid"] is True
    assert verdict["handovers"] == []
    claims = [(e["actor"], e["queue"]) for e in events_of(run.path) if e["type"] == "active"]
    assert len(claims) > len(set(claims)) == 2  # each claims its queue again after a fault


def test_each_commit_is_under_its_consumers_latest_claim(tmp_path: Path) -> None:
    """Consumers claim the queue (``active``, with the epoch) before committing under that
    epoch: at the start and after each handover. In a late claim the broker's deliveries to
    the new consumer come before its claim, and the old one's last commit between them."""
    run = generate_run(tmp_path / "r", events=20_000, seed=5, consumers=3, faults=6)
    epoch_of: dict[str, int] = {}
    for e in sorted(events_of(run.path), key=lambda e: e["ts"]):
        if e["type"] == "active":
            epoch_of[e["actor"]] = e["epoch"]
        elif e["type"] == "commit":
            assert e["epoch"] == epoch_of[e["actor"]], e
    assert len(late_claims(run.path)) > 1
    assert check_run(run.path).to_json()["valid"] is True


def test_the_same_seed_writes_the_same_run(tmp_path: Path) -> None:
    kwargs: dict[str, Any] = {"events": 3000, "consumers": 3, "inject": ["lost", "concurrent"]}
    one = generate_run(tmp_path / "one", seed=9, **kwargs)
    two = generate_run(tmp_path / "two", seed=9, **kwargs)
    other = generate_run(tmp_path / "other", seed=10, **kwargs)
    assert files_of(one.path) == files_of(two.path)
    assert files_of(one.path) != files_of(other.path)


@pytest.mark.parametrize("name", ["lost", "duplicated", "unexpected"])
def test_an_injected_id_anomaly_is_found_and_nothing_else(tmp_path: Path, name: str) -> None:
    run = generate_run(tmp_path / "r", events=4000, seed=5, inject=[name, name])
    verdict = check_run(run.path).to_json()
    ids = getattr(run.injected, name)
    assert len(ids) == 2
    assert verdict[name]["ids"] == sorted(ids)
    assert verdict["anomalies"] == {i: [name] for i in ids}
    assert verdict["valid"] is False


@pytest.mark.parametrize(("consumers", "queues"), [(3, 1), (1, 1), (2, 2)])
def test_an_injected_concurrent_pair_is_found(tmp_path: Path, consumers: int, queues: int) -> None:
    run = generate_run(
        tmp_path / "r",
        events=4000,
        seed=6,
        consumers=consumers,
        queues=queues,
        inject=["concurrent"],
    )
    verdict = check_run(run.path).to_json()
    ((injected),) = run.injected.concurrent
    (pair,) = verdict["concurrent"]["pairs"]
    assert (pair["queue"], pair["msgs"]) == (injected["queue"], injected["msgs"])
    assert pair["first"]["actor"] != pair["second"]["actor"]
    assert pair["overlap_s"] > 0
    assert set(verdict["anomalies"]) == set(injected["msgs"])


@pytest.mark.parametrize("how", ["truncated", "malformed"])
def test_an_injected_bad_line_is_reported_where_it_is(tmp_path: Path, how: str) -> None:
    run = generate_run(tmp_path / "r", events=4000, seed=7, inject=[how])
    verdict = check_run(run.path).to_json()
    ((where),) = run.injected.malformed
    assert [(m["file"], m["line"]) for m in verdict["malformed"]["lines"]] == [
        (where["file"], where["line"])
    ]
    bad = (run.path / where["file"]).read_text().splitlines()[where["line"] - 1]
    if how == "truncated":
        with pytest.raises(json.JSONDecodeError):
            json.loads(bad)
    else:
        assert isinstance(json.loads(bad)["ts"], str)
    assert verdict["anomalies"] == {}


def test_injected_unknown_events_are_counted(tmp_path: Path) -> None:
    run = generate_run(tmp_path / "r", events=4000, seed=8, inject=["unknown"] * 3)
    verdict = check_run(run.path).to_json()
    assert verdict["unknown_events"] == run.injected.unknown_events == {"heartbeat_missed": 3}
    assert verdict["valid"] is True


def test_without_effects_file_the_verdict_is_the_same_from_the_commits(tmp_path: Path) -> None:
    inject = ["lost", "duplicated", "unexpected", "concurrent"]
    with_file = generate_run(tmp_path / "with", events=4000, seed=11, inject=inject)
    without_file = generate_run(
        tmp_path / "without", events=4000, seed=11, inject=[*inject, "no_effects"]
    )
    assert not (without_file.path / spec.EFFECTS_FILE).exists()
    assert without_file.injected.effects_file is False
    one, two = check_run(with_file.path).to_json(), check_run(without_file.path).to_json()
    assert two["effects_source"] == "events"
    assert without(one, "run", "effects_source") == without(two, "run", "effects_source")


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="lots"):
        generate_run(tmp_path / "a", inject=["lots"])
    with pytest.raises(ValueError, match="consumer per queue"):
        generate_run(tmp_path / "b", consumers=1, queues=2)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "old.txt").write_text("x")
    with pytest.raises(FileExistsError):
        generate_run(tmp_path / "c")


def test_the_command_line_writes_several_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(tmp_path), "--events", "500", "--runs", "2", "--inject", "lost"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run-0000", "run-0001"]
    assert check_run(tmp_path / "run-0001").to_json()["lost"]["count"] == 1
    assert "run-0000" in capsys.readouterr().out
