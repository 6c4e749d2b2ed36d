"""The campaign's plan and table, without servers."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from sac.chaos.campaign import failed, plan, row, series_of, table
from sac.chaos.errors import ChaosError
from sac.chaos.runner import RunResult
from sac.chaos.scenarios import SCENARIOS
from sac.chaos.settings import RunSettings
from sac.checker.verdict import Pair, Recovery, Span, Verdict


def verdict(**counts: int) -> Verdict:
    """A verdict of 300 published messages with ``counts`` of each anomaly."""
    def ids(name: str) -> list[str]:
        return [f"{name}-{i}" for i in range(counts.get(name, 0))]

    span: Span = {"actor": "a", "start": 1.0, "end": 2.0}
    pair: Pair = {"queue": "q", "first": span, "second": span, "overlap_s": 1.0, "msgs": []}
    return Verdict.assemble(
        run="r", engine="python", effects_source="events", published=300, confirmed=300,
        effects=300, lost=ids("lost"), duplicated=ids("duplicated"),
        unexpected=ids("unexpected"), concurrent=[pair] * counts.get("concurrent", 0),
        reordered=ids("reordered"), malformed=[], unknown_events={}, counts={}, activity=[],
        handovers=[], recovery=[recovery(0.5), recovery(None), recovery(4.25)],
        latency_ms={"count": 0, "p50": None, "p95": None, "p99": None, "max": None,
                    "histogram": []},
        tolerated={})


def recovery(seconds: float | None) -> Recovery:
    return {"fault": "kill_node", "target": "n", "start": 1.0, "end": None,
            "recovery_s": seconds}


def result(weakened: str | None, expected: tuple[str, ...], **counts: int) -> RunResult:
    settings = RunSettings("consumer-reset", seed=2, weakened=weakened)  # type: ignore[arg-type]
    return RunResult(Path("r"), settings, verdict(**counts), expected, 1.0)


def test_the_plan_pairs_each_run_with_its_weakening() -> None:
    runs = plan(["consumer-reset", "consumer-freeze"], 2, messages=50)
    assert [(r.scenario, r.seed, r.weakened) for r in runs] == [
        ("consumer-reset", 1, None), ("consumer-reset", 1, "dedup-off"),
        ("consumer-reset", 2, None), ("consumer-reset", 2, "dedup-off"),
        ("consumer-freeze", 1, None), ("consumer-freeze", 1, "fencing-off"),
        ("consumer-freeze", 2, None), ("consumer-freeze", 2, "fencing-off")]
    assert {r.messages for r in runs} == {50}
    assert len(plan(list(SCENARIOS), 1, weakened=False)) == len(SCENARIOS)


def test_outcomes() -> None:
    assert result(None, ()).outcome == "pass"
    assert result(None, (), lost=1).outcome == "FAIL"
    assert result("dedup-off", ("duplicated",), duplicated=3).outcome == "caught"
    assert result("dedup-off", ("duplicated",), lost=2).outcome == "FAIL"  # not what it must find
    assert result("dedup-off", ("duplicated",)).outcome == "FAIL"  # a suite that cannot fail
    assert result("cancel-first", ("reordered",), reordered=2).outcome == "caught"
    went_wrong = attrs.evolve(result(None, ()), error="ChaosTimeout: no effect within 30 s")
    assert went_wrong.outcome == "ERROR"
    assert failed([row(went_wrong)]) == [row(went_wrong)]


def test_the_table() -> None:
    rows = [row(result(None, ())), row(result("dedup-off", ("duplicated",), duplicated=3)),
            row(result("dedup-off", ("duplicated",)))]
    text = table(rows).splitlines()
    assert text[0].split() == ["scenario", "seed", "config", "messages", "lost", "duplicated",
                               "concurrent", "reordered", "recovery", "verdict"]
    assert text[1].split() == ["consumer-reset", "2", "default", "300", "0", "0", "0", "0",
                               "4.25", "s", "pass"]
    assert text[2].split()[-1] == "caught"
    assert [r.verdict for r in failed(rows)] == ["FAIL"]
    # Columns aligned: the verdict column starts at the same place on every line.
    assert {line.rindex(line.split()[-1]) for line in text} == {text[0].index("verdict")}


def test_settings_are_checked() -> None:
    with pytest.raises(ChaosError, match="messages"):
        RunSettings("consumer-reset", messages=0)
    with pytest.raises(ValueError, match="weakened"):
        RunSettings("consumer-reset", weakened="nothing")  # type: ignore[arg-type]


def test_a_plain_queue_needs_guarded_consumers() -> None:
    from sac.chaos.scenario import Scenario

    with pytest.raises(ChaosError, match="guard=True"):
        Scenario("x", "a plain queue, nothing to keep a second consumer off it", lambda _w: None,
                 "dedup-off", ("duplicated",), single_active=False)


@pytest.mark.parametrize("options", [{"guard": True}, {}],
                         ids=["guarded-native-single-active", "unguarded-native"])
def test_a_federated_queue_is_kept_to_one_consumer_by_the_guard(options: dict[str, bool]
                                                                  ) -> None:
    """Native single active consumer is per cluster: across two only the guard can hold."""
    from sac.chaos.scenario import Scenario

    with pytest.raises(ChaosError, match="federated queue is kept to one consumer"):
        Scenario("x", "federated", lambda _w: None, "dedup-off", ("duplicated",),
                 federated=True, **options)


def test_the_federated_scenarios_are_guarded_on_plain_queues() -> None:
    from sac.chaos.scenarios import SCENARIOS

    federated = sorted(s.name for s in SCENARIOS.values() if s.federated)
    assert federated == ["federation-link-reset", "zk-leader-freeze"]
    assert all(SCENARIOS[n].guard and not SCENARIOS[n].single_active
               and SCENARIOS[n].store == "postgres" for n in federated)


def test_the_face_names_every_export() -> None:
    from sac import chaos

    for name in chaos.__all__:
        assert getattr(chaos, name) is not None
    with pytest.raises(AttributeError, match="nothing"):
        chaos.nothing  # noqa: B018


def test_every_scenario_runs_on_4_0_but_those_that_need_3_10() -> None:
    by_default = series_of(SCENARIOS.values(), None, "4.0")
    assert {name for name, series in by_default.items() if series != "4.0"} == {
        "mirrored-failover"}
    assert by_default["mirrored-failover"] == "3.10"
    assert set(series_of(SCENARIOS.values(), "3.10", "4.0").values()) == {"3.10"}
    # Asked for on 4.0: refused, naming why.
    with pytest.raises(ChaosError, match=r"^scenario mirrored-failover needs RabbitMQ 3\.10, "
                       r"not 4\.0: RabbitMQ 4\.0 removed classic queue mirroring"):
        series_of(SCENARIOS.values(), "4.0", "4.0")
