"""The publisher's options are explicit keyword parameters, the same on both faces and in
``PublishOptions``, so a type checker sees a typo; at run time a wrong keyword names the
method the caller called, before anything else (no broker is needed to hear of it)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from sac.sdk import (
    AsyncPublisher,
    ConnectionSettings,
    Publisher,
    PublisherSettings,
    PublishOptions,
    QueueSettings,
)

SETTINGS = PublisherSettings(ConnectionSettings("amqp://u:p@h/"), queue=QueueSettings("q"))


@pytest.mark.parametrize(("method", "args"), [
    ("publish", (b"x",)), ("send", (b"x",)), ("publish_many", ([b"x"],))])
def test_a_wrong_keyword_names_the_blocking_method(method: str, args: tuple[Any, ...]) -> None:
    call = getattr(Publisher(SETTINGS), method)
    with pytest.raises(TypeError, match=(
            rf"^Publisher\.{method}\(\) got an unexpected keyword argument 'mesage_id'$")):
        call(*args, mesage_id="m-1")


@pytest.mark.parametrize("method", ["publish", "send", "publish_many"])
def test_the_options_are_the_asyncio_faces(method: str) -> None:
    """What ``PublishOptions`` lists is exactly what each face takes: a new option there
    must be added here too, so that a dict of options stays checked."""
    for face in (AsyncPublisher, Publisher):
        keywords = [name for name, p in inspect.signature(getattr(face, method))
                    .parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
        assert keywords == list(PublishOptions.__annotations__), face.__name__
