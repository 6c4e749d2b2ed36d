"""``sac sim`` from the command line: exit status, the summary, the replay."""

from __future__ import annotations

import json

import pytest

from sac.cli import main


def test_a_clean_campaign_exits_0_with_its_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--schedules", "20", "--seed", "100", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["schedules"] == 20
    assert report["first_seed"] == 100
    assert report["violations"] == 0
    assert report["runs_per_second"] > 0


def test_a_violation_exits_1_with_its_seed_shrunk_schedule_and_replay(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--schedules", "50", "--seed", "0", "--variant", "no-fencing"]) == 1
    out = capsys.readouterr().out
    assert "seed 9 (schedule 10 of the campaign) failed:" in out
    assert "committed by 2 consumers" in out
    assert "shrunk from 5 to 2 fault(s)" in out
    assert "LeaderMoved(at=1.34, queue='q')" in out
    assert "replay: sac sim --replay 9 --variant no-fencing" in out


def test_replay_prints_the_trace_tail_and_the_same_run_each_time(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--replay", "9", "--variant", "no-fencing", "--json"]) == 1
    first = json.loads(capsys.readouterr().out)
    assert main(["sim", "--replay", "9", "--variant", "no-fencing", "--json"]) == 1
    second = json.loads(capsys.readouterr().out)
    assert first == second
    assert len(first["trace_tail"]) == 60
    assert any("committed by 2 consumers" in v for v in first["violations"])
    assert main(["sim", "--replay", "9", "--tail", "5"]) == 0
    out = capsys.readouterr().out
    assert "the last 5 of" in out
    assert "no violation" in out


def test_a_bad_variant_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--variant", "nope"]) == 2
    assert "unknown variant 'nope'" in capsys.readouterr().err


def test_the_flagged_lookup_is_checked_for_what_it_relies_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["sim", "--replay", "1625", "--tail", "0"]) == 0
    assert main(["sim", "--replay", "1625", "--tail", "0", "--lookup", "flagged"]) == 1
    assert "without a flag" in capsys.readouterr().out
