"""The history contract (``sac.history``): one definition of every event kind, which the
SDK's recorder enforces, and from which the checked-in JSON Schema and the table of
``docs/history.md`` are generated (a change to one without the other fails here)."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import typing
from pathlib import Path

import jsonschema
import pytest

from sac import history
from sac.history import (
    ANOMALIES,
    BY_KIND,
    EVENTS,
    KINDS,
    MESSAGE_KINDS,
    Deliver,
    Evict,
    Reject,
    UnknownEvent,
    event_of,
    to_line,
)
from sac.history.schema import TABLE_END, TABLE_START
from sac.sdk import HistoryRecorder
from sac.sdk._history import recorded_id

ROOT = Path(__file__).parents[2]
SCHEMA = ROOT / "docs" / "history.schema.json"
DOCS = ROOT / "docs" / "history.md"
REGENERATE = "python -m sac.history --schema > docs/history.schema.json"


def test_the_checked_in_schema_is_the_generated_one() -> None:
    assert SCHEMA.read_text() == history.schema_text(), f"stale schema: run {REGENERATE}"


def test_the_schema_command_prints_it() -> None:
    done = subprocess.run([sys.executable, "-m", "sac.history", "--schema"], check=True,
                          capture_output=True, text=True, timeout=60)
    assert done.stdout == SCHEMA.read_text()


def test_the_docs_table_is_the_generated_one() -> None:
    text = DOCS.read_text()
    table = text[text.index(TABLE_START):text.index(TABLE_END) + len(TABLE_END)] + "\n"
    assert table == history.markdown_table(), \
        "stale table in docs/history.md: paste python -m sac.history --table"


def test_every_kind_is_documented_and_every_documented_kind_exists() -> None:
    text = DOCS.read_text()
    table = text[text.index(TABLE_START):text.index(TABLE_END)]
    documented = re.findall(r"^\| `([a-z_]+)` \|", table, re.MULTILINE)
    assert documented == list(KINDS)
    assert "(history.schema.json)" in text


def test_each_kind_once_with_a_meaning_and_documented_fields() -> None:
    assert len(KINDS) == len(set(KINDS)) == len(EVENTS) == 19
    for cls in EVENTS:
        assert cls.__doc__, cls
        assert cls.WRITER, cls
        for f in dataclasses.fields(cls):
            assert f.metadata["doc"], (cls, f.name)
    assert {"publish", "confirm", "deliver", "commit", "ack"} <= MESSAGE_KINDS
    assert "active" not in MESSAGE_KINDS


def test_the_union_of_events_is_the_list_of_events() -> None:
    """A kind added to one and not the other would escape mypy's exhaustive matches, or the
    schema and the docs."""
    assert typing.get_args(history.HistoryEvent) == EVENTS


def test_the_anomalies_are_named_once_with_a_meaning() -> None:
    assert list(ANOMALIES) == ["lost", "duplicated", "unexpected", "concurrent", "reordered",
                               "malformed"]
    assert all(ANOMALIES.values())


def test_a_line_is_the_envelope_then_the_fields_optional_ones_only_when_set() -> None:
    line = to_line(Reject(msg="m-1", requeue=False), ts=1.5, actor="c")
    assert line == {"ts": 1.5, "actor": "c", "type": "reject", "msg": "m-1", "requeue": False}
    parked = to_line(Reject(msg="m-1", requeue=False, parked="q.parked"), ts=1.5, actor="c")
    assert parked["parked"] == "q.parked"
    nulls = to_line(Deliver(msg=None, redelivered=True, delivery_count=None), ts=2, actor="c")
    assert (nulls["msg"], nulls["delivery_count"]) == (None, None)


def test_an_unknown_kind_or_field_or_a_missing_field_is_refused_with_a_clear_error() -> None:
    with pytest.raises(UnknownEvent, match="'delivered' is not one of publish"):
        event_of("delivered", {"msg": "m"})
    with pytest.raises(UnknownEvent, match=r"'ack' takes msg: .*'requeue'"):
        event_of("ack", {"msg": "m", "requeue": True})
    with pytest.raises(UnknownEvent, match=r"'evict' takes outcome, .*'token'"):
        event_of("evict", {"outcome": "none", "connection": "c", "previous_token": 1})
    assert event_of("evict", {"outcome": "none", "connection": "c", "token": 2,
                              "previous_token": 1}) == Evict(
        outcome="none", connection="c", token=2, previous_token=1)


def test_events_are_frozen_and_keyword_only() -> None:
    event = Deliver(msg="m", redelivered=False, delivery_count=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.msg = "n"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Deliver("m", False, 1)  # type: ignore[misc]


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_recorder_writes_an_event_as_one_compact_line(tmp_path: Path) -> None:
    path = tmp_path / "consumer.jsonl"
    with HistoryRecorder(path, "consumer-a") as rec:
        rec.record(Deliver(msg="m-1", redelivered=False, delivery_count=None))
        rec.record(Reject(msg="m-1", requeue=False))  # optional parked left out
    first, second = path.read_text().splitlines()
    ts = json.loads(first)["ts"]
    assert first == (f'{{"ts":{ts!r},"actor":"consumer-a","type":"deliver","msg":"m-1",'
                     '"redelivered":false,"delivery_count":null}')
    assert second.endswith('"type":"reject","msg":"m-1","requeue":false}')


def test_an_id_is_recorded_under_its_canonical_text_once(tmp_path: Path) -> None:
    path = tmp_path / "consumer.jsonl"
    with HistoryRecorder(path, "consumer-a") as rec:
        rec.record(Reject(msg=recorded_id(b"\xff"), requeue=False))  # pika's bytes
        rec.record(Reject(msg=recorded_id("a\x00b"), requeue=True))
        rec.record(Reject(msg=recorded_id(None), requeue=True))
    # A canonical id is written as it is: escaping it again would make it another id.
    assert [line["msg"] for line in _lines(path)] == ["sac-id:%FF", "sac-id:a%00b", None]


def test_the_recorder_refuses_what_is_not_an_event(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    with HistoryRecorder(path, "c") as rec:
        with pytest.raises(TypeError, match=r"takes a sac\.history event such as Deliver"):
            rec.record("commit")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="unexpected keyword argument"):
            rec.record(Deliver(msg="m", redelivered=False, delivery_count=None),
                       epoch=1)  # type: ignore[call-arg]
    assert path.read_text() == ""


@pytest.mark.parametrize("kind", KINDS)
def test_the_schema_requires_what_the_constructor_requires(kind: str) -> None:
    definition = history.schema()["$defs"][kind]
    cls = BY_KIND[kind]
    required = [f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING]
    assert definition["required"] == required
    assert list(definition["properties"]) == [f.name for f in dataclasses.fields(cls)]


SAMPLES = [
    history.Publish(msg="m-1", seq=1, queue="orders"),
    history.Retransmit(msg="m-1", seq=1),
    history.Confirm(msg="m-1"),
    history.Nack(msg="m-1"),
    history.Return(msg="m-1"),
    history.Connected(node="127.0.0.1:5672", reason="start"),
    history.ConnectionLost(node="127.0.0.1:5672", reason="heartbeat"),
    history.Subscribed(queue="orders", by="client"),
    history.Cancelled(queue="orders", by="server"),
    history.Active(queue="orders", epoch=None),
    history.Deliver(msg="m-1", redelivered=True, delivery_count=2),
    history.DuplicateSkipped(msg="m-1", why="id-seen"),
    history.Commit(msg="m-1", epoch=3),
    history.CommitRejected(msg="m-1", epoch=3, why="stale-epoch"),
    history.Ack(msg=None),
    history.Reject(msg="m-1", requeue=False, parked="orders.parked"),
    history.Evict(outcome="failed", connection="c-1", token=4, previous_token=3, error="boom"),
    history.FaultStart(fault="kill_node", target="rabbit-1", params={"signal": "KILL"}),
    history.FaultEnd(fault="kill_node", target="rabbit-1", params={}),
]


def _validator() -> jsonschema.protocols.Validator:
    jsonschema.Draft202012Validator.check_schema(history.schema())
    return jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))


def test_every_kind_written_by_the_recorder_is_valid_under_the_schema(tmp_path: Path) -> None:
    assert sorted(type(e).KIND for e in SAMPLES) == sorted(KINDS)
    path = tmp_path / "all.jsonl"
    with HistoryRecorder(path, "a") as rec:
        for event in SAMPLES:
            rec.record(event)
    validator = _validator()
    for line in _lines(path):
        assert list(validator.iter_errors(line)) == [], line


@pytest.mark.parametrize(("line", "error"), [
    ({"ts": 1.0, "actor": "p", "type": "publish", "msg": "m", "seq": 1}, "'queue' is a required"),
    ({"ts": 1.0, "actor": "c", "type": "deliver", "msg": "m", "redelivered": "yes",
      "delivery_count": None}, "'yes' is not of type 'boolean'"),
    ({"ts": 1.0, "actor": "c", "type": "commit_rejected", "msg": "m", "epoch": 1,
      "why": "late"}, "'late' is not one of"),
    ({"actor": "c", "type": "ack", "msg": "m"}, "'ts' is a required"),
])
def test_the_schema_refuses_a_line_the_contract_does_not_allow(
        line: dict[str, object], error: str) -> None:
    assert error in "; ".join(e.message for e in _validator().iter_errors(line))


def test_the_schema_lets_a_kind_of_its_own_and_an_added_field_pass() -> None:
    """docs/history.md: fields may be added; an unknown type is counted, not refused."""
    validator = _validator()
    assert validator.is_valid({"ts": 1.0, "actor": "x", "type": "my_event", "anything": 1})
    assert validator.is_valid({"ts": 1.0, "actor": "c", "type": "ack", "msg": "m", "note": 1})
