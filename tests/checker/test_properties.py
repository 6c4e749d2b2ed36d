"""Properties over generated histories: whatever the topology and the anomalies injected, the
reference engine finds exactly those; a clean run is valid; a torn line anywhere is reported
at its file and line and the rest of the run is checked as if the line were not there."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sac.checker.generate import INJECTIONS, GeneratedRun, generate_run
from sac.checker.python_engine import check_run

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def topologies(draw: st.DrawFn) -> dict[str, Any]:
    queues = draw(st.integers(1, 3))
    return {
        "events": draw(st.integers(200, 3000)),
        "seed": draw(st.integers(0, 2**32)),
        "publishers": draw(st.integers(1, 3)),
        "queues": queues,
        "consumers": draw(st.integers(queues, queues * 3)),
        "faults": draw(st.integers(0, 4)),
    }


@contextmanager
def generated(**kwargs: Any) -> Iterator[GeneratedRun]:
    with tempfile.TemporaryDirectory() as tmp:
        yield generate_run(Path(tmp) / "run", **kwargs)


@FAST
@given(topologies())
def test_a_clean_generated_run_is_valid(topology: dict[str, Any]) -> None:
    with generated(**topology) as run:
        verdict = check_run(run.path).to_json()
    assert verdict["valid"] is True, verdict["anomalies"]
    assert verdict["published"] == verdict["confirmed"] == verdict["effects"] == run.messages
    assert verdict["malformed"]["count"] == 0


@FAST
@given(topologies(), st.lists(st.sampled_from(INJECTIONS), max_size=8))
def test_the_engine_finds_exactly_the_injected_anomalies(
    topology: dict[str, Any], inject: list[str]
) -> None:
    with generated(**topology, inject=inject) as run:
        verdict = check_run(run.path).to_json()
    injected = run.injected
    assert verdict["lost"]["ids"] == sorted(injected.lost)
    assert verdict["duplicated"]["ids"] == sorted(injected.duplicated)
    assert verdict["unexpected"]["ids"] == sorted(injected.unexpected)
    assert sorted((p["queue"], p["msgs"]) for p in verdict["concurrent"]["pairs"]) == sorted(
        (c["queue"], c["msgs"]) for c in injected.concurrent
    )
    assert verdict["reordered"]["ids"] == sorted(injected.reordered)
    assert [(m["file"], m["line"]) for m in verdict["malformed"]["lines"]] == sorted(
        (m["file"], m["line"]) for m in injected.malformed
    )
    assert verdict["unknown_events"] == injected.unknown_events
    assert verdict["effects_source"] == ("effects.jsonl" if injected.effects_file else "events")
    found = {"lost", "duplicated", "unexpected", "concurrent", "reordered", "truncated",
             "malformed"}
    assert verdict["valid"] is not any(name in found for name in inject)


@FAST
@given(topologies(), st.data())
def test_a_torn_line_anywhere_is_reported_there_and_the_rest_is_checked(
    topology: dict[str, Any], data: st.DataObject
) -> None:
    with generated(**topology, inject=["lost", "concurrent"]) as run:
        files = sorted(
            p.relative_to(run.path).as_posix()
            for p in run.path.rglob("*.jsonl")
            if p.stat().st_size
        )
        name = data.draw(st.sampled_from(files), label="file")
        path = run.path / name
        lines = path.read_text().splitlines(keepends=True)
        number = data.draw(st.integers(1, len(lines)), label="line")
        line = lines[number - 1].rstrip("\n")
        cut = data.draw(st.integers(1, len(line) - 1), label="cut")

        lines[number - 1] = "\n"  # as if the line were not there, numbers unchanged
        path.write_text("".join(lines))
        without_line = check_run(run.path).to_json()
        lines[number - 1] = line[:cut] + "\n"
        path.write_text("".join(lines))
        torn = check_run(run.path).to_json()

    assert [(m["file"], m["line"]) for m in torn["malformed"]["lines"]] == [(name, number)]
    assert without_line["malformed"]["count"] == 0
    rest = {k: v for k, v in torn.items() if k not in ("malformed", "valid")}
    assert rest == {k: v for k, v in without_line.items() if k not in ("malformed", "valid")}
    assert torn["valid"] is False
    json.dumps(torn, allow_nan=False)


INTERVAL_FIELDS = {"concurrent", "anomalies", "valid", "activity"}
"""What the processing intervals decide (SPEC.md): all that an `active` event can change."""


@FAST
@given(topologies(), st.lists(st.sampled_from(["lost", "concurrent"]), max_size=3))
def test_claims_change_nothing_but_what_the_intervals_decide(
    topology: dict[str, Any], inject: list[str]
) -> None:
    """The same run with every ``active`` line blanked (numbers kept): handovers, recovery,
    latency, counts and the id anomalies are the same; the injected overlaps are found in
    both (a claim comes before its consumer's delivers, so it never hides a real one)."""
    with generated(**topology, inject=inject) as run:
        claimed = check_run(run.path).to_json()
        for path in (run.path / "events").glob("*.jsonl"):
            lines = path.read_text().splitlines(keepends=True)
            path.write_text("".join("\n" if '"type": "active"' in x else x for x in lines))
        unclaimed = check_run(run.path).to_json()
    differ = {key for key in claimed if claimed[key] != unclaimed[key]}
    assert differ <= INTERVAL_FIELDS
    injected = sorted((c["queue"], c["msgs"]) for c in run.injected.concurrent)
    for verdict in (claimed, unclaimed):
        found = {(p["queue"], tuple(p["msgs"])) for p in verdict["concurrent"]["pairs"]}
        assert {(q, tuple(m)) for q, m in injected} <= found
    assert claimed["concurrent"]["count"] == len(injected)
