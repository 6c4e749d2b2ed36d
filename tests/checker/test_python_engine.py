"""The reference engine on tiny hand-built runs whose verdict is known: one rule of SPEC.md at
a time, with its edges (ties, touching intervals, a gap exactly equal, empty runs)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from sac.checker import spec
from sac.checker.errors import InputError
from sac.checker.python_engine import check_run, check_runs, latency, summarize


def ev(ts: float, actor: str, kind: str, **fields: Any) -> dict[str, Any]:
    return {"ts": ts, "actor": actor, "type": kind, **fields}


def pub(ts: float, msg: str, queue: str | None = "q", actor: str = "p") -> dict[str, Any]:
    fields = {"msg": msg, "seq": 1} | ({"queue": queue} if queue is not None else {})
    return ev(ts, actor, "publish", **fields)


def eff(msg: str, actor: str, ts: float, epoch: int | None = 1) -> dict[str, Any]:
    return {"msg": msg, "actor": actor, "epoch": epoch, "ts": ts}


def write_run(
    root: Path,
    *,
    events: Sequence[dict[str, Any]] = (),
    effects: list[dict[str, Any]] | None = None,
    run: dict[str, Any] | None = None,
    files: dict[str, str] | None = None,
    name: str = "run-1",
) -> Path:
    """A run directory: events grouped by actor into ``events/<actor>.jsonl``; ``files``:
    extra raw files (relative path -> text) for lines that are not what they should be."""
    path = root / name
    (path / "events").mkdir(parents=True)
    by_actor: dict[str, list[str]] = {}
    for event in events:
        by_actor.setdefault(str(event["actor"]), []).append(json.dumps(event))
    for actor, lines in by_actor.items():
        (path / "events" / f"{actor}.jsonl").write_text("\n".join(lines) + "\n")
    if effects is not None:
        (path / "effects.jsonl").write_text("".join(json.dumps(e) + "\n" for e in effects))
    (path / "run.json").write_text(json.dumps(run if run is not None else {}))
    for rel, text in (files or {}).items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_bytes(text.encode())
    return path


def intervals_run(
    tmp_path: Path,
    spans: list[tuple[str, str, float, float]],
    extra: Sequence[dict[str, Any]] = (),
    **kwargs: Any,
) -> dict[str, Any]:
    """A run where each (msg, actor, s, c) is published to ``q`` and processed over [s, c]
    (delivered at s, committed at c), with the ``extra`` events."""
    events = [pub(0.0, m) for m, *_ in spans] + list(extra)
    events += [ev(s, a, "deliver", msg=m, redelivered=False) for m, a, s, _ in spans]
    effects = [eff(m, a, c) for m, a, _, c in spans]
    return check_run(write_run(tmp_path, events=events, effects=effects, **kwargs)).to_json()


# --- reading -----------------------------------------------------------------------------


def test_a_run_with_one_publish_is_valid_with_nothing_else_in_it(tmp_path: Path) -> None:
    verdict = check_run(write_run(tmp_path, events=[pub(1.0, "a")], name="bare")).to_json()
    assert verdict["run"] == "bare"
    assert verdict["engine"] == "python"
    assert verdict["valid"] is True
    assert verdict["effects_source"] == "events"
    assert (verdict["published"], verdict["confirmed"], verdict["effects"]) == (1, 0, 0)
    for name in ("lost", "duplicated", "unexpected", "reordered"):
        assert verdict[name] == {"count": 0, "ids": []}
    assert verdict["concurrent"] == {"count": 0, "pairs": []}
    assert verdict["malformed"] == {"count": 0, "lines": []}
    assert verdict["counts"] == {**dict.fromkeys(spec.COUNT_KEYS, 0), "publish": 1}
    assert verdict["latency_ms"] == {
        "count": 0,
        "p50": None,
        "p95": None,
        "p99": None,
        "max": None,
        "histogram": [0] * 16,
    }
    assert verdict["anomalies"] == verdict["unknown_events"] == verdict["tolerated"] == {}
    assert verdict["activity"] == verdict["handovers"] == verdict["recovery"] == []
    json.dumps(verdict, allow_nan=False)  # JSON-able as it is


@pytest.mark.parametrize(
    ("kind", "missing"),
    [
        ("no run.json", "not a run: no run.json"),
        ("no events", "not a run: no history events (events/*.jsonl: none)"),
        ("empty events", "not a run: no history events (events/*.jsonl: empty)"),
        ("malformed only", "no history events (no well-formed event line)"),
        ("unknown types only", "no history events (no well-formed event line)"),
        ("no queue", "no event names a queue"),
    ],
)
def test_a_run_with_nothing_to_check_is_an_input_error_naming_what_is_missing(
    tmp_path: Path, kind: str, missing: str
) -> None:
    """A verdict needs evidence: "valid" for want of any would pass the wrong directory."""
    files = {
        "no run.json": {},
        "no events": {},
        "empty events": {"events/p.jsonl": ""},
        "malformed only": {"events/p.jsonl": '{"ts": 1}\n[]\n'},
        "unknown types only": {"events/c.jsonl": json.dumps(ev(1.0, "c", "evict")) + "\n"},
        "no queue": {"events/p.jsonl": json.dumps(pub(1.0, "a", queue=None)) + "\n"},
    }[kind]
    path = write_run(tmp_path, files=files)
    if kind == "no run.json":
        (path / "run.json").unlink()
    with pytest.raises(InputError) as caught:
        check_run(path)
    assert str(caught.value).startswith(f"{path}: {missing}")


def test_a_missing_directory_is_an_input_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="nowhere"):
        check_run(tmp_path / "nowhere")


def test_the_run_name_of_dot_is_the_directory_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(write_run(tmp_path, events=[pub(1.0, "a")], name="r-7"))
    assert check_run(Path(".")).to_json()["run"] == "r-7"


@pytest.mark.parametrize(
    ("run_json", "complaint"),
    [
        ("{not json", "not JSON"),
        ("[]", "not a JSON object"),
        ('{"tolerates": {"lost": ""}}', "reason"),
        ('{"tolerates": {"lots": "why"}}', "lots"),
        ('{"tolerates": ["lost"]}', "tolerates"),
        ('{"single_active_queues": "q"}', "single_active_queues"),
        ('{"ordered_queues": [1]}', "ordered_queues"),
        ('{"activity_gap_s": -1}', "activity_gap_s"),
        ('{"activity_gap_s": true}', "activity_gap_s"),
    ],
)
def test_a_run_json_that_cannot_be_trusted_is_an_input_error(
    tmp_path: Path, run_json: str, complaint: str
) -> None:
    path = write_run(tmp_path, files={"run.json": run_json})
    with pytest.raises(InputError, match=complaint) as caught:
        check_run(path)
    assert "run.json" in str(caught.value)


def test_malformed_lines_are_reported_by_file_and_line_and_the_rest_is_checked(
    tmp_path: Path,
) -> None:
    good = json.dumps(pub(1.0, "a"))
    lines = [
        good,
        "",  # blank: ignored, but still a line
        "   \t",
        '{"ts": 2, "actor": "p", "type": "publish", "msg": "b", "queue": "q"',  # truncated
        "[1, 2]",  # not an object
        '{"actor": "p", "type": "publish", "msg": "c"}',  # no ts
        '{"ts": true, "actor": "p", "type": "publish", "msg": "c"}',  # bool is no number
        '{"ts": "3", "actor": "p", "type": "publish", "msg": "c"}',
        '{"ts": 3, "actor": 7, "type": "publish", "msg": "c"}',
        '{"ts": 3, "actor": "p", "type": null, "msg": "c"}',
        '{"ts": 3, "actor": "p", "type": "publish"}',  # message event without msg
        '{"ts": NaN, "actor": "p", "type": "publish", "msg": "c"}',
        '{"ts": 1e400, "actor": "p", "type": "publish", "msg": "c"}',  # not a finite double
        '{"ts": 1' + "0" * 400 + ', "actor": "p", "type": "publish", "msg": "c"}',
        '{"ts": 4, "actor": "p", "type": "connected"}',  # no msg needed
        json.dumps(pub(5.0, "d")),
    ]
    effects = [
        '{"msg": "a", "actor": "c", "ts": 6}',  # epoch may be absent
        '{"msg": "d", "actor": "c", "ts": 7, "epoch": null}',
        '{"msg": "e", "actor": "c", "ts": 8, "epoch": 1.5}',
        '{"msg": "e", "actor": "c", "epoch": 1}',
        '{"msg": 5, "actor": "c", "ts": 8}',
        '{"msg": "e", "actor": "c", "ts": 8, "epoch": 9223372036854775808}',  # over 64 bits
        '{"msg": "e", "actor": "c", "ts": 8, "epoch": 9223372036854775807}',
    ]
    path = write_run(
        tmp_path,
        files={
            "events/p.jsonl": "\n".join(lines) + "\n",
            "events/a.jsonl": '{"ts": 1, "actor": "a", "type": "connected"}\n{"ts":',
            "effects.jsonl": "\n".join(effects),
        },
    )
    verdict = check_run(path).to_json()
    where = [(m["file"], m["line"]) for m in verdict["malformed"]["lines"]]
    assert where == [
        ("effects.jsonl", 3),
        ("effects.jsonl", 4),
        ("effects.jsonl", 5),
        ("effects.jsonl", 6),
        ("events/a.jsonl", 2),
        *[("events/p.jsonl", n) for n in range(4, 15)],
    ]
    assert all(m["error"] for m in verdict["malformed"]["lines"])
    assert verdict["malformed"]["count"] == 16
    assert verdict["published"] == 2
    assert verdict["effects"] == 3
    assert verdict["valid"] is False


def test_verdicts_compare_without_engine_and_error_texts(tmp_path: Path) -> None:
    published = json.dumps(pub(1.0, "a")) + "\n"
    files = {"events/p.jsonl": "{", "events/q.jsonl": published}
    verdict = check_run(write_run(tmp_path, files=files)).to_json()
    other = json.loads(json.dumps(verdict))
    other["engine"] = "spark"
    other["malformed"]["lines"][0]["error"] = "Unexpected end of input"
    assert verdict != other
    assert spec.comparable(verdict) == spec.comparable(other)
    assert spec.comparable(verdict)["malformed"]["lines"] == [{"file": "events/p.jsonl", "line": 1}]


def test_lines_end_at_cr_lf_and_crlf_alike(tmp_path: Path) -> None:
    good = json.dumps(pub(1.0, "a"))
    path = write_run(tmp_path, files={"events/p.jsonl": f"{good}\r{good}\r\n{{\n{good}"})
    verdict = check_run(path).to_json()
    assert [m["line"] for m in verdict["malformed"]["lines"]] == [3]
    assert verdict["counts"]["publish"] == 3


def test_invalid_utf8_reads_as_replacement_characters(tmp_path: Path) -> None:
    path = write_run(tmp_path)
    (path / "events" / "p.jsonl").write_bytes(
        b'{"ts": 1, "actor": "p", "type": "publish", "msg": "a\xff", "queue": "q"}\n{"ts": 1\xff}\n'
    )
    verdict = check_run(path).to_json()
    assert verdict["published"] == 1
    assert [m["line"] for m in verdict["malformed"]["lines"]] == [2]


def test_hidden_event_files_are_not_read(tmp_path: Path) -> None:
    line = json.dumps(pub(1.0, "a")) + "\n"
    hidden = {"events/.p.jsonl.swp.jsonl": line, "events/_tmp.jsonl": line, "events/p.txt": line}
    verdict = check_run(write_run(tmp_path, files={**hidden, "events/p.jsonl": line})).to_json()
    assert verdict["counts"]["publish"] == 1


def test_unknown_event_types_are_counted_and_otherwise_ignored(tmp_path: Path) -> None:
    events = [
        pub(0.5, "a"),
        ev(1.0, "c", "heartbeat"),
        ev(2.0, "c", "heartbeat"),
        ev(3.0, "c", "gc_pause", msg="x"),
        {"actor": "c", "type": "heartbeat"},  # no ts: malformed, not unknown
    ]
    verdict = check_run(write_run(tmp_path, events=events)).to_json()
    assert verdict["unknown_events"] == {"heartbeat": 2, "gc_pause": 1}
    assert verdict["malformed"]["count"] == 1
    assert verdict["valid"] is False


def test_without_effects_file_the_commits_are_the_effects(tmp_path: Path) -> None:
    events = [
        pub(1.0, "a"),
        pub(1.0, "b"),
        ev(2.0, "c", "commit", msg="a", epoch=1),
        ev(3.0, "c", "commit", msg="a", epoch=None),
        ev(4.0, "c", "commit_rejected", msg="b", epoch=0, why="stale-epoch"),
    ]
    verdict = check_run(write_run(tmp_path, events=events)).to_json()
    assert verdict["effects_source"] == "events"
    assert verdict["effects"] == 2
    assert verdict["duplicated"]["ids"] == ["a"]


def test_with_an_effects_file_commit_events_are_not_effects(tmp_path: Path) -> None:
    events = [pub(1.0, "a"), ev(2.0, "c", "commit", msg="a", epoch=1)]
    verdict = check_run(write_run(tmp_path, events=events, effects=[])).to_json()
    assert verdict["effects_source"] == "effects.jsonl"
    assert verdict["effects"] == 0
    assert verdict["counts"]["commit"] == 1


# --- lost, duplicated, unexpected, valid ---------------------------------------------------


def test_lost_duplicated_and_unexpected_ids_sorted_with_their_anomalies(tmp_path: Path) -> None:
    events = [pub(1.0, m) for m in ("m3", "m1", "m2", "m4")]
    events += [ev(2.0, "p", "confirm", msg=m) for m in ("m3", "m1", "m2", "x9")]
    events += [ev(2.0, "p", "retransmit", msg="r1", seq=2)]  # retransmit is no publish
    effects = [eff("m2", "c", 3.0), eff("m2", "c", 4.0), eff("m2", "d", 5.0)]
    effects += [eff("u2", "c", 6.0), eff("u1", "c", 7.0), eff("u1", "c", 8.0), eff("r1", "c", 9)]
    verdict = check_run(write_run(tmp_path, events=events, effects=effects)).to_json()
    assert (verdict["published"], verdict["confirmed"], verdict["effects"]) == (4, 4, 7)
    assert verdict["lost"] == {"count": 3, "ids": ["m1", "m3", "x9"]}
    assert verdict["duplicated"] == {"count": 2, "ids": ["m2", "u1"]}
    assert verdict["unexpected"] == {"count": 3, "ids": ["r1", "u1", "u2"]}
    assert verdict["anomalies"] == {
        "m1": ["lost"],
        "m3": ["lost"],
        "x9": ["lost"],
        "m2": ["duplicated"],
        "u1": ["duplicated", "unexpected"],
        "u2": ["unexpected"],
        "r1": ["unexpected"],
    }
    assert verdict["valid"] is False


def test_a_run_with_effects_and_no_publish_at_all(tmp_path: Path) -> None:
    effects = [eff("b", "c", 2.0), eff("a", "c", 1.0)]
    claimed = [ev(0.5, "c", "active", queue="q")]  # a queue named: something to check
    verdict = check_run(write_run(tmp_path, events=claimed, effects=effects)).to_json()
    assert verdict["unexpected"]["ids"] == ["a", "b"]
    assert verdict["latency_ms"]["count"] == 0
    assert [(a["queue"], a["effects"]) for a in verdict["activity"]] == [("", 2)]


def test_tolerated_anomalies_keep_a_run_valid(tmp_path: Path) -> None:
    tolerates = {"duplicated": "redelivered-flag-only dedup", "malformed": "torn last line"}
    events = [pub(1.0, "a")]
    effects = [eff("a", "c", 2.0), eff("a", "c", 3.0)]
    path = write_run(
        tmp_path,
        events=events,
        effects=effects,
        run={"tolerates": tolerates},
        files={"events/z.jsonl": '{"ts": 1'},
    )
    verdict = check_run(path).to_json()
    assert (verdict["duplicated"]["count"], verdict["malformed"]["count"]) == (1, 1)
    assert verdict["valid"] is True
    assert verdict["tolerated"] == tolerates


def test_a_tolerated_anomaly_does_not_excuse_another(tmp_path: Path) -> None:
    events = [pub(1.0, "a"), ev(1.5, "p", "confirm", msg="a"), ev(1.5, "p", "confirm", msg="b")]
    tolerates = {"unexpected": "ids from another system"}
    path = write_run(
        tmp_path, events=events, effects=[eff("a", "c", 2.0)], run={"tolerates": tolerates}
    )
    verdict = check_run(path).to_json()
    assert verdict["lost"]["ids"] == ["b"]
    assert verdict["valid"] is False


# --- queues and processing intervals -------------------------------------------------------


def test_the_queue_of_a_message_is_its_earliest_publish_ties_by_queue_name(
    tmp_path: Path,
) -> None:
    events = [
        pub(2.0, "a", "late"),
        pub(1.0, "a", "zeta"),
        pub(1.0, "a", "alpha"),
        pub(0.5, "b", None),  # earliest publish of b names no queue: the next one does
        pub(3.0, "b", "beta"),
        pub(1.0, "c", None),
        ev(1.0, "p", "publish", msg="d", queue=7),  # not a string: as if missing
    ]
    effects = [eff(m, "w", 10.0) for m in "abcd"]
    verdict = check_run(write_run(tmp_path, events=events, effects=effects)).to_json()
    assert {(a["queue"], a["effects"]) for a in verdict["activity"]} == {
        ("alpha", 1),
        ("beta", 1),
        ("", 2),
    }
    assert verdict["published"] == 4


def test_an_interval_starts_at_the_actors_last_deliver_at_or_before_the_commit(
    tmp_path: Path,
) -> None:
    events = [pub(0.0, m) for m in "abc"]
    events += [
        ev(1.0, "w", "deliver", msg="a"),
        ev(2.0, "w", "deliver", msg="a"),  # the last one before the commit
        ev(5.0, "w", "deliver", msg="a"),  # after the commit: not this interval's
        ev(1.5, "other", "deliver", msg="a"),  # another actor's
        ev(3.0, "w", "deliver", msg="b"),  # at the very commit time: counts
    ]
    effects = [eff("a", "w", 3.0), eff("b", "w", 3.0), eff("c", "w", 4.0)]
    verdict = check_run(
        write_run(tmp_path, events=events, effects=effects, run={"activity_gap_s": 0})
    ).to_json()
    assert [(a["start"], a["end"], a["effects"]) for a in verdict["activity"]] == [
        (2.0, 3.0, 2),
        (4.0, 4.0, 1),  # no deliver: s = c
    ]


# --- claims: `active` events start processing intervals too -----------------------------------

HANDOVER = [("a", "old", 1.0, 3.0), ("b", "new", 2.0, 5.0)]
"""The old consumer commits ``a`` at 3, after the new one's first deliver (of ``b``, at 2)."""


def claim(ts: float, actor: str = "new", **fields: Any) -> dict[str, Any]:
    """An ``active`` event; ``queue`` defaults to ``q`` (pass ``queue=None`` for none)."""
    fields.setdefault("queue", "q")
    if fields["queue"] is None:
        del fields["queue"]
    return ev(ts, actor, "active", epoch=2, **fields)


def concurrent_starts(verdict: dict[str, Any]) -> list[tuple[str, str, float, float]]:
    """(first actor, second actor, second start, overlap) of each pair."""
    return [
        (p["first"]["actor"], p["second"]["actor"], p["second"]["start"], p["overlap_s"])
        for p in verdict["concurrent"]["pairs"]
    ]


def test_an_old_commit_between_the_new_consumers_first_deliver_and_its_claim_is_serial(
    tmp_path: Path,
) -> None:
    """The broker hands the queue over (the new one's deliver at 2); the old consumer's
    commit at 3 is accepted; the new one claims its epoch at 4 and only then commits."""
    unclaimed = intervals_run(tmp_path, HANDOVER, name="unclaimed")
    assert concurrent_starts(unclaimed) == [("old", "new", 2.0, 1.0)]  # from the deliver alone
    verdict = intervals_run(tmp_path, HANDOVER, [claim(4.0)])
    assert verdict["concurrent"] == {"count": 0, "pairs": []}
    assert verdict["anomalies"] == {}
    assert verdict["valid"] is True
    assert [(a["actor"], a["start"], a["end"]) for a in verdict["activity"]] == [
        ("old", 1.0, 3.0),
        ("new", 4.0, 5.0),  # from the claim
    ]


def test_an_old_commit_after_the_new_consumers_claim_is_concurrent(tmp_path: Path) -> None:
    verdict = intervals_run(tmp_path, HANDOVER, [claim(2.5)])
    assert verdict["concurrent"]["pairs"] == [
        {
            "queue": "q",
            "first": {"actor": "old", "start": 1.0, "end": 3.0},
            "second": {"actor": "new", "start": 2.5, "end": 5.0},
            "overlap_s": 0.5,
            "msgs": ["a", "b"],
        }
    ]
    assert verdict["valid"] is False


def test_the_later_of_deliver_and_claim_starts_the_interval(tmp_path: Path) -> None:
    verdict = intervals_run(tmp_path, HANDOVER, [claim(1.5)])  # claimed, then delivered at 2
    assert concurrent_starts(verdict) == [("old", "new", 2.0, 1.0)]


def test_a_claim_after_the_commit_does_not_move_the_start(tmp_path: Path) -> None:
    verdict = intervals_run(tmp_path, HANDOVER, [claim(5.5)])
    assert concurrent_starts(verdict) == [("old", "new", 2.0, 1.0)]


def test_a_claim_at_the_commit_time_counts(tmp_path: Path) -> None:
    verdict = intervals_run(tmp_path, HANDOVER, [claim(5.0)])
    assert verdict["concurrent"]["count"] == 0
    assert ("new", 5.0, 5.0) in [(a["actor"], a["start"], a["end"]) for a in verdict["activity"]]


def test_a_claim_by_another_actor_does_not_count(tmp_path: Path) -> None:
    verdict = intervals_run(tmp_path, HANDOVER, [claim(4.0, "other"), claim(4.0, "old")])
    assert concurrent_starts(verdict) == [("old", "new", 2.0, 1.0)]


def test_only_a_claim_of_the_messages_queue_counts(tmp_path: Path) -> None:
    claims = [claim(4.0, queue="r"), claim(4.0, queue=None), claim(4.0, queue=7)]
    verdict = intervals_run(tmp_path, HANDOVER, claims)
    assert concurrent_starts(verdict) == [("old", "new", 2.0, 1.0)]


def test_a_claim_without_a_queue_counts_not_even_for_the_unknown_queue(tmp_path: Path) -> None:
    """Ids never published are in queue ``""``: a claim naming ``""`` is a claim of it, a
    claim naming no queue is not."""
    events = [ev(s, a, "deliver", msg=m) for m, a, s, _ in HANDOVER]
    events.append(ev(0.0, "x", "active", queue="other"))  # a queue named: something to check
    effects = [eff(m, a, c) for m, a, _, c in HANDOVER]
    nameless = write_run(
        tmp_path, events=[*events, claim(4.0, queue=None)], effects=effects, name="nameless"
    )
    empty = write_run(tmp_path, events=[*events, claim(4.0, queue="")], effects=effects)
    assert [p["queue"] for p in check_run(nameless).to_json()["concurrent"]["pairs"]] == [""]
    assert check_run(empty).to_json()["concurrent"]["count"] == 0


def test_the_last_of_several_claims_at_or_before_the_commit_counts(tmp_path: Path) -> None:
    """A consumer claims again after each fault; each effect starts at its latest claim."""
    spans = [*HANDOVER, ("c", "old", 6.0, 8.0), ("d", "new", 7.0, 10.0)]
    claims = [claim(0.0, "old"), claim(0.5), claim(2.5), claim(4.0), claim(9.0), claim(12.0)]
    verdict = intervals_run(tmp_path, spans, claims, run={"activity_gap_s": 0})
    # b starts at the claim at 4 (not 0.5 or 2.5): serial; d at the claim at 9, after the
    # old one's commit of c at 8 (its own claim at 0 is before its delivers): serial too.
    assert verdict["concurrent"]["count"] == 0
    assert [(a["actor"], a["start"], a["end"]) for a in verdict["activity"]] == [
        ("old", 1.0, 3.0),
        ("new", 4.0, 5.0),
        ("old", 6.0, 8.0),
        ("new", 9.0, 10.0),
    ]


def test_claims_move_activity_but_not_handovers_recovery_or_latency(tmp_path: Path) -> None:
    faults = [
        ev(2.5, "nemesis", "fault_start", fault="reset_peer", target="old"),
        ev(3.5, "nemesis", "fault_end", fault="reset_peer", target="old"),
    ]
    plain = intervals_run(tmp_path, HANDOVER, faults, name="plain")
    claimed = intervals_run(tmp_path, HANDOVER, [*faults, claim(4.0)], name="claimed")
    differ = {key for key in plain if plain[key] != claimed[key]}
    assert differ == {"run", "concurrent", "anomalies", "valid", "activity"}
    assert claimed["handovers"] != []
    assert claimed["recovery"] != []
    assert claimed["latency_ms"]["count"] == 2
    assert claimed["counts"] == plain["counts"]  # an `active` is not counted


# --- concurrency -----------------------------------------------------------------------------


def test_overlapping_intervals_of_two_actors_are_a_concurrent_pair(tmp_path: Path) -> None:
    verdict = intervals_run(tmp_path, [("a", "x", 1.0, 3.0), ("b", "y", 2.0, 4.0)])
    assert verdict["concurrent"] == {
        "count": 1,
        "pairs": [
            {
                "queue": "q",
                "first": {"actor": "x", "start": 1.0, "end": 3.0},
                "second": {"actor": "y", "start": 2.0, "end": 4.0},
                "overlap_s": 1.0,
                "msgs": ["a", "b"],
            }
        ],
    }
    assert verdict["anomalies"] == {"a": ["concurrent"], "b": ["concurrent"]}
    assert verdict["valid"] is False


def test_touching_intervals_do_not_overlap(tmp_path: Path) -> None:
    verdict = intervals_run(tmp_path, [("a", "x", 1.0, 2.0), ("b", "y", 2.0, 3.0)])
    assert verdict["concurrent"]["count"] == 0
    assert verdict["valid"] is True


def test_an_interval_inside_another_overlaps_by_its_length(tmp_path: Path) -> None:
    verdict = intervals_run(tmp_path, [("a", "x", 1.0, 10.0), ("b", "y", 2.0, 3.5)])
    (pair,) = verdict["concurrent"]["pairs"]
    assert pair["overlap_s"] == 1.5


def test_each_island_is_paired_with_the_earlier_one_reaching_furthest(tmp_path: Path) -> None:
    # x and y both end at 10: z is paired with x, the first in (start, end, actor) order.
    spans = [
        ("a1", "x", 0.0, 4.0),
        ("a2", "x", 4.0, 10.0),  # starts where a1 ends: joins x's island [0, 10]
        ("b", "y", 1.0, 10.0),
        ("c", "z", 5.0, 6.0),
        ("d", "w", 12.0, 13.0),  # after everything: no pair
    ]
    verdict = intervals_run(tmp_path, spans)
    pairs = [
        (p["first"]["actor"], p["second"]["actor"], p["overlap_s"], p["msgs"])
        for p in verdict["concurrent"]["pairs"]
    ]
    assert pairs == [("x", "y", 9.0, ["a1", "a2", "b"]), ("x", "z", 1.0, ["a2", "c"])]


def test_islands_with_the_same_start_are_ordered_by_end_then_actor(tmp_path: Path) -> None:
    verdict = intervals_run(tmp_path, [("a", "y", 1.0, 2.0), ("b", "x", 1.0, 2.0)])
    (pair,) = verdict["concurrent"]["pairs"]
    assert (pair["first"]["actor"], pair["second"]["actor"]) == ("x", "y")
    assert pair["msgs"] == ["a", "b"]


def test_one_actor_overlapping_itself_is_not_concurrent(tmp_path: Path) -> None:
    verdict = intervals_run(tmp_path, [("a", "x", 1.0, 3.0), ("b", "x", 2.0, 4.0)])
    assert verdict["concurrent"]["count"] == 0


def test_pairs_are_sorted_by_queue_then_second_start(tmp_path: Path) -> None:
    events = [pub(0.0, "a", "q2"), pub(0.0, "b", "q2"), pub(0.0, "c", "q1"), pub(0.0, "d", "q1")]
    events += [pub(0.0, "e", "q1"), pub(0.0, "f", "q1")]
    spans = [("a", "x", 1.0, 3.0), ("b", "y", 2.0, 4.0), ("c", "x", 5.0, 7.0)]
    spans += [("d", "y", 6.0, 8.0), ("e", "z", 0.0, 1.5), ("f", "w", 1.0, 2.0)]
    events += [ev(s, a, "deliver", msg=m) for m, a, s, _ in spans]
    effects = [eff(m, a, c) for m, a, _, c in spans]
    verdict = check_run(write_run(tmp_path, events=events, effects=effects)).to_json()
    assert [(p["queue"], p["second"]["start"]) for p in verdict["concurrent"]["pairs"]] == [
        ("q1", 1.0),
        ("q1", 6.0),
        ("q2", 2.0),
    ]


def test_only_the_single_active_queues_are_checked(tmp_path: Path) -> None:
    events = [pub(0.0, "a", "q1"), pub(0.0, "b", "q1"), pub(0.0, "c", "q2"), pub(0.0, "d", "q2")]
    spans = [("a", "x", 1, 3), ("b", "y", 2, 4), ("c", "x", 1, 3), ("d", "y", 2, 4)]
    spans += [("u", "x", 1, 3), ("v", "y", 2, 4)]  # never published: queue ""
    events += [ev(s, a, "deliver", msg=m) for m, a, s, _ in spans]
    effects = [eff(m, a, c) for m, a, _, c in spans]
    checked = write_run(
        tmp_path, events=events, effects=effects, run={"single_active_queues": ["q2"]}
    )
    every = write_run(tmp_path, events=events, effects=effects, run={}, name="every")
    assert [p["queue"] for p in check_run(checked).concurrent] == ["q2"]
    assert [p["queue"] for p in check_run(every).concurrent] == ["", "q1", "q2"]


# --- activity (islands with a gap) ---------------------------------------------------------


def test_a_gap_exactly_equal_to_activity_gap_joins_the_island(tmp_path: Path) -> None:
    spans = [("a", "x", 0.0, 10.0), ("b", "x", 10.5, 11.0), ("c", "x", 11.75, 12.0)]
    verdict = intervals_run(tmp_path, spans, run={"activity_gap_s": 0.5})
    assert verdict["activity"] == [
        {"queue": "q", "actor": "x", "start": 0.0, "end": 11.0, "effects": 2},
        {"queue": "q", "actor": "x", "start": 11.75, "end": 12.0, "effects": 1},
    ]


def test_activity_uses_the_default_gap_and_is_sorted_by_queue_start_actor(
    tmp_path: Path,
) -> None:
    spans = [("a", "y", 0.0, 1.0), ("b", "x", 0.0, 1.0), ("c", "x", 2.0, 2.5), ("d", "x", 4, 5)]
    verdict = intervals_run(tmp_path, spans)
    assert [(a["actor"], a["start"], a["end"], a["effects"]) for a in verdict["activity"]] == [
        ("x", 0.0, 2.5, 2),
        ("y", 0.0, 1.0, 1),
        ("x", 4.0, 5.0, 1),
    ]


# --- handovers, recovery -----------------------------------------------------------------------


def test_handovers_are_consecutive_effects_of_different_actors_per_queue(tmp_path: Path) -> None:
    events = [pub(0.0, m, "q1") for m in "abcde"] + [pub(0.0, "f", "q0")]
    effects = [
        eff("a", "x", 1.0),
        eff("b", "x", 2.0),
        eff("c", "y", 3.5),
        eff("e", "x", 5.0),  # ties on ts are ordered by actor: x, then y
        eff("d", "y", 5.0),
        eff("f", "z", 9.0),  # alone on its queue: no handover
    ]
    verdict = check_run(write_run(tmp_path, events=events, effects=effects)).to_json()
    assert verdict["handovers"] == [
        {
            "queue": "q1",
            "from": "x",
            "to": "y",
            "last_commit": 2.0,
            "first_commit": 3.5,
            "gap_s": 1.5,
        },
        {
            "queue": "q1",
            "from": "y",
            "to": "x",
            "last_commit": 3.5,
            "first_commit": 5.0,
            "gap_s": 1.5,
        },
        {
            "queue": "q1",
            "from": "x",
            "to": "y",
            "last_commit": 5.0,
            "first_commit": 5.0,
            "gap_s": 0.0,
        },
    ]


def test_recovery_is_from_each_fault_start_to_the_next_effect(tmp_path: Path) -> None:
    fault = {"fault": "reset_peer", "target": "consumer-1"}
    events = [
        pub(0.0, "a"),
        ev(10.0, "nemesis", "fault_start", **fault),
        ev(9.0, "nemesis", "fault_end", **fault),  # before the start: not its end
        ev(12.0, "nemesis", "fault_end", **fault),
        ev(11.0, "nemesis", "fault_end", fault="reset_peer", target="consumer-2"),
        ev(20.0, "nemesis", "fault_start", fault="latency"),  # no target: ""
        ev(20.0, "nemesis", "fault_end", fault="latency"),  # at the start: its end
        ev(30.0, "nemesis", "fault_start", **fault),  # never healed, nothing after
    ]
    effects = [eff("a", "c", 10.0), eff("b", "c", 13.5), eff("c", "c", 25.0)]
    verdict = check_run(write_run(tmp_path, events=events, effects=effects)).to_json()
    assert verdict["recovery"] == [
        {
            "fault": "reset_peer",
            "target": "consumer-1",
            "start": 10.0,
            "end": 12.0,
            "recovery_s": 3.5,
        },
        {"fault": "latency", "target": "", "start": 20.0, "end": 20.0, "recovery_s": 5.0},
        {
            "fault": "reset_peer",
            "target": "consumer-1",
            "start": 30.0,
            "end": None,
            "recovery_s": None,
        },
    ]
    assert verdict["counts"]["fault_start"] == 3


# --- latency ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "p50", "p95", "p99"),
    [(1, 1, 1, 1), (2, 1, 2, 2), (20, 10, 19, 20), (100, 50, 95, 99)],
)
def test_percentiles_are_nearest_rank(n: int, p50: int, p95: int, p99: int) -> None:
    result = latency([float(v) for v in range(n, 0, -1)])  # n..1, unsorted
    assert (result["p50"], result["p95"], result["p99"]) == (p50, p95, p99)
    assert (result["count"], result["max"]) == (n, n)


def test_histogram_bins_by_the_spec_edges() -> None:
    values = [-5.0, 0.0, 0.999, 1.0, 4.99, 5.0, 59999.9, 60000.0, 1e9]
    histogram = latency(values)["histogram"]
    assert len(histogram) == len(spec.HISTOGRAM_EDGES_MS) == 16
    assert histogram[0] == 3  # -5, 0 and 0.999
    assert histogram[1] == 1
    assert histogram[2] == 1  # [2, 5)
    assert histogram[3] == 1  # [5, 10)
    assert histogram[14] == 1  # [30000, 60000)
    assert histogram[15] == 2  # 60000 and above
    assert sum(histogram) == len(values)


def test_latency_is_from_the_first_publish_for_every_effect_row(tmp_path: Path) -> None:
    events = [pub(10.0, "a"), pub(9.0, "a"), ev(9.5, "p", "retransmit", msg="a", seq=2)]
    effects = [eff("a", "c", 9.25), eff("a", "c", 11.0), eff("ghost", "c", 11.0)]
    verdict = check_run(write_run(tmp_path, events=events, effects=effects)).to_json()
    assert verdict["latency_ms"]["count"] == 2
    assert verdict["latency_ms"]["p50"] == 250.0
    assert verdict["latency_ms"]["max"] == 2000.0


def test_integer_times_come_out_as_floats(tmp_path: Path) -> None:
    path = write_run(tmp_path, events=[pub(1, "a")], effects=[eff("a", "c", 2)])
    verdict = check_run(path).to_json()
    assert json.dumps(verdict["activity"][0]["start"]) == "2.0"
    assert json.dumps(verdict["latency_ms"]["max"]) == "1000.0"


# --- counts, many runs -----------------------------------------------------------------------


def test_counts_of_events(tmp_path: Path) -> None:
    events = [
        pub(1.0, "a"),
        ev(1.1, "p", "retransmit", msg="a", seq=2),
        ev(1.2, "p", "nack", msg="a"),
        ev(1.3, "p", "return", msg="a"),
        ev(1.4, "p", "confirm", msg="a"),
        ev(1.5, "p", "connection_lost", node="n", reason="r"),
        ev(2.0, "c", "deliver", msg="a", redelivered=False),
        ev(2.1, "c", "deliver", msg="a", redelivered=True),
        ev(2.2, "c", "deliver", msg="a", redelivered="yes"),  # only JSON true counts
        ev(2.3, "c", "duplicate_skipped", msg="a", why="id-seen"),
        ev(2.4, "c", "commit", msg="a", epoch=1),
        ev(2.5, "c", "commit_rejected", msg="a", epoch=0, why="stale-epoch"),
        ev(2.6, "c", "commit_rejected", msg="a", epoch=1, why="duplicate"),
        ev(2.7, "c", "commit_rejected", msg="a", epoch=1, why="disk full"),
        ev(2.8, "c", "ack", msg="a"),
        ev(2.9, "c", "reject", msg="a", requeue=False),
        ev(3.0, "n", "fault_start", fault="x", target="y"),
        ev(3.1, "n", "fault_end", fault="x", target="y"),
        ev(3.2, "c", "active", queue="q", epoch=1),
    ]
    verdict = check_run(write_run(tmp_path, events=events)).to_json()
    assert verdict["counts"] == {
        "publish": 1,
        "retransmit": 1,
        "confirm": 1,
        "nack": 1,
        "return": 1,
        "deliver": 3,
        "redelivered": 1,
        "duplicate_skipped": 1,
        "commit": 1,
        "commit_rejected_stale": 1,
        "commit_rejected_duplicate": 1,
        "ack": 1,
        "reject": 1,
        "connection_lost": 1,
        "fault_start": 1,
    }
    assert verdict["unknown_events"] == {}


def test_summary_of_many_runs(tmp_path: Path) -> None:
    clean = write_run(tmp_path, name="b-clean", events=[pub(1.0, "a")], effects=[eff("a", "c", 2)])
    dup = write_run(tmp_path, name="c-dup", events=[pub(1.0, "a")], effects=[eff("a", "c", 2)] * 3)
    lost = write_run(
        tmp_path,
        name="a-lost",
        events=[pub(1.0, "a"), ev(1.0, "p", "confirm", msg="a")],
        files={"events/z.jsonl": "{"},
    )
    verdicts = check_runs([clean, dup, lost])
    assert [v.run for v in verdicts] == ["b-clean", "c-dup", "a-lost"]
    assert summarize(verdicts, "python") == {
        "runs": 3,
        "valid": 1,
        "invalid": ["a-lost", "c-dup"],
        "engine": "python",
        "totals": {
            "published": 3,
            "confirmed": 1,
            "effects": 4,
            "lost": 1,
            "duplicated": 1,
            "unexpected": 0,
            "concurrent": 0,
            "reordered": 0,
            "malformed": 1,
        },
    }


# --- order ---------------------------------------------------------------------------------


def seq_pub(ts: float, msg: str, seq: int, actor: str = "p", queue: str = "q") -> dict[str, Any]:
    return ev(ts, actor, "publish", msg=msg, seq=seq, queue=queue)


def delivered(ts: float, actor: str, msg: str) -> dict[str, Any]:
    return ev(ts, actor, "deliver", msg=msg, redelivered=False)


def handover_back(a_leaves: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """m1..m6 from one publisher. A takes m1..m4 (a prefetch), commits m1 and m2, then
    leaves as ``a_leaves`` says; B takes m5 and m6 first, then m3 and m4 come back to it."""
    events = [seq_pub(i / 10, f"m{i}", i) for i in range(1, 7)]
    events += [delivered(1.0 + i / 100, "A", f"m{i}") for i in range(1, 5)]
    events += [ev(1.1, "A", "commit", msg="m1", epoch=1), ev(1.2, "A", "commit", msg="m2", epoch=1)]
    events += list(a_leaves)
    events += [ev(2.0, "B", "active", queue="q", epoch=2)]
    for i, m in enumerate(["m5", "m6", "m3", "m4"]):
        at = 2.1 + i / 10
        events += [delivered(at, "B", m), ev(at + 0.05, "B", "commit", msg=m, epoch=2)]
    return events


def test_a_graceful_handover_whose_prefetch_comes_back_late_is_reordered(tmp_path: Path) -> None:
    """The old stop order: A cancels (by the client) while holding m3 and m4, B is handed
    m5 and m6 at once, and A's prefetch reaches B only after them."""
    events = handover_back([ev(1.5, "A", "cancelled", queue="q", by="client")])
    verdict = check_run(write_run(tmp_path, events=events))
    assert verdict.to_json()["reordered"] == {"count": 2, "ids": ["m3", "m4"]}
    assert verdict.anomalies == {"m3": ["reordered"], "m4": ["reordered"]}
    assert verdict.valid is False
    assert summarize([verdict], "python")["totals"]["reordered"] == 2


@pytest.mark.parametrize(
    "a_leaves",
    [
        [],  # killed: nothing more from A
        [ev(1.5, "A", "connection_lost", node="n1", reason="reset")],
        [ev(0.5, "A", "cancelled", queue="q", by="client"),  # a cancel before it held m3
         ev(1.5, "A", "connection_lost", node="n1", reason="reset")],
        [ev(1.5, "A", "cancelled", queue="q", by="server")],  # the broker's cancel
    ],
    ids=["killed", "connection-lost", "earlier-cancel", "server-cancel"],
)
def test_what_a_failed_consumer_gives_back_late_is_not_reordered(
    tmp_path: Path, a_leaves: list[dict[str, Any]]
) -> None:
    """A consumer that crashed or lost its link returns its messages when the broker
    notices, behind what its successor took: the broker keeps no order for those."""
    verdict = check_run(write_run(tmp_path, events=handover_back(a_leaves))).to_json()
    assert verdict["reordered"] == {"count": 0, "ids": []}
    assert verdict["valid"] is True


def test_order_is_per_publisher_and_per_checked_queue(tmp_path: Path) -> None:
    """Two publishers' messages interleave freely; one publisher's must not, on a checked
    queue only; the first commit of an id is its place (a second one is a duplicate)."""
    events = [
        seq_pub(1.0, "p1", 1, "p"), seq_pub(1.1, "r1", 1, "r"), seq_pub(1.2, "p2", 2, "p"),
        seq_pub(1.3, "r2", 2, "r"), seq_pub(1.4, "x1", 1, "p", queue="other"),
        seq_pub(1.5, "x2", 2, "p", queue="other"),
    ]
    commits = [("r1", 2.0), ("r2", 2.1), ("p1", 2.2), ("p2", 2.3), ("p1", 2.4),  # dup later
               ("x2", 2.5), ("x1", 2.6)]  # against the order, on an unchecked queue
    events += [ev(ts, "c", "commit", msg=m, epoch=1) for m, ts in commits]
    path = write_run(tmp_path, events=events, run={"single_active_queues": ["q"]})
    verdict = check_run(path).to_json()
    assert verdict["reordered"]["count"] == 0
    assert verdict["duplicated"]["ids"] == ["p1"]
    everywhere = check_run(write_run(tmp_path, events=events, name="all")).to_json()
    assert everywhere["reordered"]["ids"] == ["x1"]
    ordered = {"single_active_queues": ["q"], "ordered_queues": ["other"]}
    named = check_run(write_run(tmp_path, events=events, run=ordered, name="named")).to_json()
    assert named["reordered"]["ids"] == ["x1"]
    unordered = {"ordered_queues": []}  # e.g. a guard's lock over a plain queue: no order
    assert check_run(write_run(tmp_path, events=events, run=unordered, name="none")).to_json()[
        "reordered"]["count"] == 0


@pytest.mark.parametrize(
    "kind", ["reject", "retransmit", "nack", "return"],
)
def test_parked_replayed_and_republished_messages_keep_no_place(tmp_path: Path, kind: str) -> None:
    """m1 parked (rejected) and replayed after m2, or sent again by its publisher: its place
    in the queue is not its publisher's order, so it is not compared."""
    actor = "c" if kind == "reject" else "p"
    events = [
        seq_pub(1.0, "m1", 1), seq_pub(1.1, "m2", 2), ev(1.5, actor, kind, msg="m1"),
        ev(2.0, "c", "commit", msg="m2", epoch=1), ev(3.0, "c", "commit", msg="m1", epoch=1),
    ]
    assert check_run(write_run(tmp_path, events=events)).to_json()["reordered"]["count"] == 0
    plain = [e for e in events if e["type"] != kind]
    assert check_run(write_run(tmp_path, events=plain, name="plain")).reordered == ("m1",)
    if kind == "reject":  # put back, not parked: it keeps its place, so it is late here
        events[2]["requeue"] = True
        requeued = write_run(tmp_path, events=events, name="requeued")
        assert check_run(requeued).to_json()["reordered"]["ids"] == ["m1"]


def test_reordered_can_be_tolerated_with_a_reason(tmp_path: Path) -> None:
    events = [seq_pub(1.0, "m1", 1), seq_pub(1.1, "m2", 2),
              ev(2.0, "c", "commit", msg="m2", epoch=1), ev(3.0, "c", "commit", msg="m1", epoch=1)]
    tolerates = {"reordered": "no single active consumer here"}
    verdict = check_run(write_run(tmp_path, events=events, run={"tolerates": tolerates})).to_json()
    assert verdict["reordered"]["ids"] == ["m1"]
    assert verdict["valid"] is True
