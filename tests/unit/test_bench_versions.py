"""``bench/versions.py`` without a broker: the order the series boot in, the ratios it
reports, and what it refuses before any cluster boots."""

from __future__ import annotations

import pytest

from bench import versions
from bench._report import conditions
from sac.sdk.management import OverviewInfo


def test_rounds_alternate_which_series_boots_first() -> None:
    """A slow spell of the machine must not always fall on the same series."""
    series = ["4.0", "3.10"]
    assert [versions.order(series, r) for r in range(4)] == [
        ["4.0", "3.10"], ["3.10", "4.0"], ["4.0", "3.10"], ["3.10", "4.0"]]


def _reports(msg_per_s: float, broker_us: float, gap_p50: float, frozen_p50: float,
             priority: bool) -> dict[str, object]:
    handover_summary = {
        "graceful/blocking": {"handover_s": {"median": 0.1, "p95": 0.2, "min": 0.05, "max": 0.3},
                              "gap_s": {"median": gap_p50, "p95": 0.1, "min": 0.0, "max": 0.2}},
    }
    if priority:
        handover_summary["priority/blocking"] = {
            "handover_s": {"median": 0.2, "p95": 0.3, "min": 0.1, "max": 0.4},
            "gap_s": {"median": 0.02, "p95": 0.1, "min": 0.01, "max": 0.13}}
    return {
        "throughput": {"variants": {"sdk-blocking-publish": {
            "msg_per_s": msg_per_s, "client_cpu_us_per_msg": 6.0,
            "broker_cpu_us_per_msg": broker_us}}},
        "handover": {"summary": handover_summary},
        "takeover": {"summary": {"native-frozen": {"takeover_s": {
            "p50": frozen_p50, "p95": 14.0, "min": 10.0, "max": 14.5}}}},
    }


def test_each_figure_of_the_first_series_is_over_the_seconds() -> None:
    new = _reports(msg_per_s=12000, broker_us=150, gap_p50=0.03, frozen_p50=12.0,
                   priority=True)
    old = _reports(msg_per_s=10000, broker_us=200, gap_p50=0.06, frozen_p50=12.0,
                   priority=False)
    found = versions.ratios(new, old)
    assert found["throughput"]["sdk-blocking-publish"] == {
        "msg_per_s": 1.2, "client_cpu_us_per_msg": 1.0, "broker_cpu_us_per_msg": 0.75}
    assert found["handover"]["graceful/blocking"]["gap_s"]["median"] == 0.5
    assert found["takeover"]["native-frozen"]["takeover_s"]["p50"] == 1.0
    # measured on one series only: figures, but no ratio
    assert "priority/blocking" not in found["handover"]
    table = versions.table(["4.0", "3.10"], {"4.0": new, "3.10": old}, found)
    assert "priority/blocking" in table
    assert "0.020|-|-" in table


def test_a_ratio_without_both_figures_is_none() -> None:
    assert versions.ratio(None, 1.0) is None
    assert versions.ratio(1.0, None) is None
    assert versions.ratio(1.0, 0.0) is None
    assert versions.ratio(3.0, 2.0) == 1.5


@pytest.mark.parametrize(("argv", "message"), [
    (["--rabbitmq", "4.0"], "give two different series, as 4.0,3.10; not '4.0'"),
    (["--rabbitmq", "4.0,4.0"], "give two different series"),
    (["--rabbitmq", "4.0,3.9"], "rabbitmq must be one of '3.10', '4.0'; got '3.9'"),
    (["--benchmarks", "throughput,speed"], "choose from throughput, handover, takeover"),
    (["--throughput", "--messages 0"], "must be positive, not 0"),
    (["--takeover", "--modes nope"], "choose from native-graceful"),
])
def test_bad_options_are_refused_in_one_line_before_any_cluster_boots(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as refused:
        versions.parse_args(argv)
    assert refused.value.code == 2
    assert message in capsys.readouterr().err.splitlines()[-1]


def test_every_series_runs_the_same_options_less_what_it_cannot_run() -> None:
    """The priority handover is measured on 4.0 and left out of 3.10, where every other
    scenario, face and option is the same."""
    _, series = versions.parse_args(["--benchmarks", "handover", "--handover",
                                     "--repeat 2 --scenarios graceful,priority --rate 300"])
    by_name = {s.name: s.options["handover"] for s in series}
    assert [f.fault for f in versions.handover.scenarios(by_name["4.0"])] == [
        "graceful", "priority"]
    assert [f.fault for f in versions.handover.scenarios(by_name["3.10"])] == ["graceful"]
    assert {a.repeat for a in by_name.values()} == {2}
    assert {a.rate for a in by_name.values()} == {300.0}
    assert {a.rabbitmq for a in by_name.values()} == {"4.0", "3.10"}


def test_every_report_names_the_brokers_versions_from_its_overview() -> None:
    """The reports read the management API's overview as the SDK's typed ``OverviewInfo``:
    the versions a reader compares runs by are its fields, never a guessed dict key."""
    overview = OverviewInfo(product="RabbitMQ", version="4.0.5", erlang_version="26.2.5",
                            node="rabbit-1@localhost")
    assert conditions(overview, 3, (0.5, 0.4, 0.3))["broker"] == {
        "nodes": 3, "rabbitmq_version": "4.0.5", "erlang_version": "26.2.5"}
    series = versions.Series(name="4.0", options={})
    with pytest.raises(RuntimeError, match="reported before it was measured"):
        series.measured_overview()
