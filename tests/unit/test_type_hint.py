"""The queue type read out of a PRECONDITION_FAILED naming another argument."""

from __future__ import annotations

from sac.sdk._core.queues import parse_inequivalent, type_hint

TEXT = ("PRECONDITION_FAILED - inequivalent arg '{arg}' for queue 'q' in vhost '/': "
        "received {received} but current is {current}")


def _hint(arg: str, received: str, current: str, wanted: str) -> str | None:
    parsed = parse_inequivalent(TEXT.format(arg=arg, received=received, current=current))
    assert parsed is not None
    return type_hint(parsed, wanted)


def test_a_quorum_only_argument_on_the_queue_names_it_quorum() -> None:
    hint = _hint("x-dead-letter-strategy", "none",
                 "the value 'at-least-once' of type 'longstr'", "classic")
    assert hint is not None
    assert hint.startswith("the queue is a quorum queue")


def test_a_classic_only_argument_on_the_queue_names_it_classic() -> None:
    hint = _hint("x-max-priority", "none", "the value '10' of type 'signedint'", "quorum")
    assert hint is not None
    assert hint.startswith("the queue is a classic queue")


def test_nothing_is_claimed_when_the_argument_says_nothing_of_the_type() -> None:
    assert _hint("x-overflow", "the value 'reject-publish' of type 'longstr'", "none",
                 "quorum") is None
    assert _hint("x-delivery-limit", "the value '5' of type 'long'",
                 "the value '3' of type 'long'", "quorum") is None
    assert _hint("x-queue-type", "'classic'", "'quorum'", "classic") is None
