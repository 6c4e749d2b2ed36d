"""The SDK's two faces cannot drift: for every pair ``X`` / ``AsyncX``, each public method and
property of the asyncio face is on the blocking face, with the same parameters (names, kinds,
defaults, annotations) and the same result, modulo ``async`` (an awaited ``T`` is a returned
``T``) and the future a pipelined call gives (``asyncio.Future`` on the loop,
``concurrent.futures.Future`` for a thread)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import re
from typing import Any

import pytest

from sac import sdk

PAIRS = [
    (sdk.Publisher, sdk.AsyncPublisher),
    (sdk.Consumer, sdk.AsyncConsumer),
    (sdk.Management, sdk.AsyncManagement),
    (sdk.Parking, sdk.AsyncParking),
    (sdk.Mover, sdk.AsyncMover),
]

KNOWN_GAPS = {("AsyncConsumer", "wait")}
"""Members an asyncio face has and its blocking twin lacks by design. The blocking ``Consumer``
runs its handler in the thread that calls ``run()``, so ``run()`` is where that thread waits
until the consumer stops: a separate ``wait()`` would have no handler thread to wait beside.
Should a blocking ``wait`` ever be added, the test fails, so that it leaves this set."""

_AWAITABLE = re.compile(r"^(?:Awaitable|Coroutine\[Any, Any,)\[?(?P<inner>.*)\]$")


def _blocking_form(annotation: Any) -> str:
    """An asyncio face's annotation as its blocking twin writes it."""
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    match = _AWAITABLE.match(text)
    if match is not None:
        text = match["inner"]
    return text.replace("asyncio.Future[", "concurrent.futures.Future[")


def _text(annotation: Any) -> str:
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)


def _members(cls: type) -> dict[str, Any]:
    """The public methods and properties a class (and its bases) defines."""
    found: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if klass is object:
            continue
        for name, value in vars(klass).items():
            if not name.startswith("_") and (callable(value) or isinstance(value, property)):
                found[name] = value
    return found


def _shape(member: Any, blocking: bool) -> tuple[Any, ...]:
    if isinstance(member, property):
        assert member.fget is not None
        result = inspect.signature(member.fget).return_annotation
        return ("property", _text(result) if blocking else _blocking_form(result))
    signature = inspect.signature(member)
    params = [(p.name, p.kind, p.default, _text(p.annotation))
              for p in signature.parameters.values()]
    result = signature.return_annotation
    return ("method", params, _text(result) if blocking else _blocking_form(result))


@pytest.mark.parametrize(("blocking", "asyncio_face"), PAIRS,
                         ids=[b.__name__ for b, _ in PAIRS])
def test_the_asyncio_face_has_a_blocking_twin_for_each_member(
    blocking: type, asyncio_face: type
) -> None:
    twins = _members(blocking)
    for name, member in _members(asyncio_face).items():
        if (asyncio_face.__name__, name) in KNOWN_GAPS:
            assert name not in twins, f"{blocking.__name__}.{name} exists: drop the known gap"
            continue
        assert name in twins, f"{asyncio_face.__name__}.{name} has no {blocking.__name__}.{name}"
        assert _shape(twins[name], blocking=True) == _shape(member, blocking=False), (
            f"{blocking.__name__}.{name} and {asyncio_face.__name__}.{name} differ")


def test_each_asyncio_face_is_awaited_and_each_blocking_face_is_not() -> None:
    for blocking, asyncio_face in PAIRS:
        for name, member in _members(asyncio_face).items():
            if not isinstance(member, property) and name in _members(blocking):
                assert not inspect.iscoroutinefunction(_members(blocking)[name]), name


def test_the_rule_sees_a_drift_and_only_a_drift() -> None:
    """The comparison itself can fail: a parameter renamed on one face is seen; ``async``
    and the future type are not a difference."""

    class Twin:
        def queue(self, name: str, vhost: str = "/") -> int:
            return 0

        def send(self, body: bytes) -> concurrent.futures.Future[str]:
            raise NotImplementedError

    class AsyncTwin:
        async def queue(self, name: str, vhost: str = "/") -> int:
            return 0

        async def send(self, body: bytes) -> asyncio.Future[str]:
            raise NotImplementedError

    class Drifted:
        async def queue(self, name: str, host: str = "/") -> int:
            return 0

    for name in ("queue", "send"):
        assert _shape(_members(Twin)[name], blocking=True) == _shape(
            _members(AsyncTwin)[name], blocking=False)
    assert _shape(Twin.queue, blocking=True) != _shape(Drifted.queue, blocking=False)
