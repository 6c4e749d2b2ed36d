"""The chaos actors' settings and the sink's file kind, without servers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sac.chaos.actors import ConsumerActor, PublisherActor, Sink


def consumer(**options: Any) -> ConsumerActor:
    settings = {"urls": ["amqp://guest:guest@127.0.0.1:5672/%2F"], **options}
    return ConsumerActor(actor="a", run_dir="/tmp/run", queue="q", **settings)


def test_the_test_options_default_to_the_chaos_workload() -> None:
    spec = consumer()
    assert (spec.delivery_limit, spec.handle_signals, spec.crash_on_body) == (None, True, None)
    assert (spec.pause_in_effect, spec.pause_after_writes, spec.pause_after_commit) == ("", 0, "")
    assert spec.open_sink().location == "sqlite:/tmp/run/sink.db"


def test_a_consumer_goes_through_json_unchanged() -> None:
    spec = consumer(face="asyncio", dedup="inbox", delivery_limit=2, handle_signals=False,
                    crash_on_body="m1", pause_in_effect="*", pause_after_writes=3,
                    pause_after_commit="m-9")
    assert ConsumerActor.from_json(spec.to_json()) == spec
    assert spec.argv()[1:] == ["-m", "sac.chaos.actors.consumer"]


def test_no_password_goes_on_the_command_line() -> None:
    """Every local user reads a process's command line (``ps``): the settings, URLs with
    their passwords included, go on the actor's stdin (``ActorProcess``)."""
    secret = "s3cret-pw"
    spec = consumer(urls=[f"amqp://u:{secret}@127.0.0.1:5672/%2F"],
                    management_urls=(f"http://u:{secret}@127.0.0.1:15672",),
                    sink=f"postgresql://u:{secret}@127.0.0.1:5432/db")
    assert secret in spec.to_json()
    assert [arg for arg in spec.argv() if secret in arg] == []
    publisher = PublisherActor(actor="p", run_dir="/tmp/run", queue="q",
                               urls=[f"amqp://u:{secret}@127.0.0.1:5672/%2F"])
    assert [arg for arg in publisher.argv() if secret in arg] == []


@pytest.mark.parametrize(("options", "match"), [
    ({"pause_after_writes": 3, "dedup": "off"}, "need dedup='inbox'"),
    ({"pause_after_commit": "m1", "dedup": "redelivered-only"}, "need dedup='inbox'"),
    ({"sink": "file:/tmp/effects.jsonl"}, "needs a database sink"),
    ({"pause_after_writes": -1}, "zero or more"),
    ({"pause_after_writes": True}, "zero or more"),
    ({"delivery_limit": 0}, "1 or more"),
    ({"sink": "/tmp/effects.jsonl", "dedup": "off"}, "a sink is"),
    ({"guard_hosts": "127.0.0.1:2181"}, r"GuardSettings\.group"),
    ({"guard_group": "/g"}, r"GuardSettings\.hosts"),
    ({"guard_hosts": "127.0.0.1:2181", "guard_group": "/g", "guard_lease": 0}, "positive"),
])
def test_contradictions_are_refused(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        consumer(**options)


def test_a_guarded_consumer_on_a_plain_queue() -> None:
    spec = consumer(guard_hosts="127.0.0.1:2181", guard_group="/sac-chaos/q", guard_lease=0.5,
                    single_active=False)
    assert ConsumerActor.from_json(spec.to_json()) == spec
    guard = spec.guard()
    assert guard is not None
    assert (guard.hosts, guard.group, guard.session_timeout) == (
        "127.0.0.1:2181", "/sac-chaos/q", 0.5)
    assert not spec.queue_settings().single_active_consumer
    assert "x-single-active-consumer" not in spec.queue_settings().arguments()
    assert consumer().guard() is None
    assert consumer().queue_settings().single_active_consumer


def test_a_file_sink_keeps_every_effect_in_order(tmp_path: Path) -> None:
    sink = Sink(f"file:{tmp_path / 'effects.jsonl'}")
    assert not sink.transactional
    sink.create()
    assert list(sink.rows()) == []
    for n, msg in enumerate(["m2", "m1", "m2"]):
        sink.write(msg, "a" if n < 2 else "b", None, 100.0 + n)
    assert sink.handled("a") == ["m2", "m1"]
    assert sink.distinct() == {"m1", "m2"}
    assert sink.seen("m1")
    assert not sink.seen("m3")
    with pytest.raises(ValueError, match="no store"):
        sink.store()
