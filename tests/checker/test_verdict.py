"""The verdict as one typed value (``sac.checker.verdict.Verdict``): what it derives, the JSON
it writes (``verdict.json``, the keys of SPEC.md's table), and reading it back."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sac.checker.python_engine import check_run
from sac.checker.verdict import Verdict
from sac.history import ANOMALIES, HistoryEvent, Publish, to_line

SPEC = Path(__file__).parents[2] / "sac" / "checker" / "SPEC.md"


def _line(event: HistoryEvent, ts: float, actor: str) -> str:
    return json.dumps(to_line(event, ts=ts, actor=actor))


def a_run(root: Path, run: dict[str, object] | None = None) -> Path:
    """Three messages confirmed: m1 once, m2 twice, m3 never processed; x never published."""
    (root / "events").mkdir(parents=True)
    events = [_line(Publish(msg=m, seq=i, queue="q"), float(i), "p")
              for i, m in enumerate(("m1", "m2", "m3"), 1)]
    events += [json.dumps({"ts": 4.0, "actor": "p", "type": "confirm", "msg": m})
               for m in ("m1", "m2", "m3")]
    (root / "events" / "p.jsonl").write_text("\n".join(events) + "\n")
    effects = [("m1", "c", 5.0), ("m2", "c", 6.0), ("m2", "c", 7.0), ("x", "c", 8.0)]
    (root / "effects.jsonl").write_text("".join(
        json.dumps({"msg": m, "actor": a, "ts": ts, "epoch": None}) + "\n"
        for m, a, ts in effects))
    (root / "run.json").write_text(json.dumps(run or {}))
    return root


def spec_fields() -> list[str]:
    """The field names of SPEC.md's verdict table, in its order."""
    text = SPEC.read_text()
    table = text[text.index("| field | definition |"):]
    table = table[:table.index("\n\n")]
    return re.findall(r"^\| `([a-z_]+)` \|", table, re.MULTILINE)


def test_the_json_has_exactly_the_fields_the_spec_defines(tmp_path: Path) -> None:
    verdict = check_run(a_run(tmp_path / "r"))
    assert sorted(verdict.to_json()) == sorted(spec_fields())


def test_what_a_user_reads_of_a_verdict(tmp_path: Path) -> None:
    verdict = check_run(a_run(tmp_path / "r"))
    assert (verdict.published, verdict.confirmed, verdict.effects) == (3, 3, 4)
    assert (verdict.lost, verdict.duplicated, verdict.unexpected) == (("m3",), ("m2",), ("x",))
    assert {name: verdict.count(name) for name in ANOMALIES} == {
        "lost": 1, "duplicated": 1, "unexpected": 1, "concurrent": 0, "reordered": 0,
        "malformed": 0}
    assert verdict.anomalies == {"m2": ["duplicated"], "m3": ["lost"], "x": ["unexpected"]}
    assert verdict.valid is False
    assert verdict.untolerated() == ["lost", "duplicated", "unexpected"]
    json_form = verdict.to_json()
    assert json_form["lost"] == {"count": 1, "ids": ["m3"]}
    assert json_form["valid"] is False


def test_a_tolerated_anomaly_leaves_the_run_valid(tmp_path: Path) -> None:
    tolerates = {"lost": "m3 is drained later", "duplicated": "no inbox",
                 "unexpected": "a shared sink"}
    verdict = check_run(a_run(tmp_path / "r", {"tolerates": tolerates}))
    assert verdict.valid is True
    assert verdict.untolerated() == []
    assert verdict.to_json()["tolerated"] == tolerates


def test_the_json_reads_back_as_the_same_verdict(tmp_path: Path) -> None:
    verdict = check_run(a_run(tmp_path / "r"))
    text = json.dumps(verdict.to_json(), sort_keys=True)
    again = Verdict.from_json(json.loads(text))
    assert again == verdict
    assert json.dumps(again.to_json(), sort_keys=True) == text


def test_a_json_without_a_field_is_refused_naming_it(tmp_path: Path) -> None:
    broken = check_run(a_run(tmp_path / "r")).to_json()
    del broken["counts"]
    with pytest.raises(ValueError, match="verdict of run 'r' lacks 'counts'"):
        Verdict.from_json(broken)


def test_assemble_puts_every_list_in_the_spec_s_order(tmp_path: Path) -> None:
    verdict = check_run(a_run(tmp_path / "r"))
    shuffled = Verdict.assemble(
        run="r", engine="python", effects_source="effects.jsonl", published=3, confirmed=3,
        effects=4, lost=["m3"], duplicated=["m2"], unexpected=["x"], concurrent=[],
        reordered=[], malformed=[], unknown_events={}, counts=dict(verdict.counts),
        activity=list(reversed(verdict.activity)), handovers=[], recovery=[],
        latency_ms=verdict.latency_ms, tolerated={})
    assert shuffled == verdict
