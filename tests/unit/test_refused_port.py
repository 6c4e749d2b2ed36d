"""A port where nothing listens is named as such: pika wraps the operating system's refusal
in two exceptions that say nothing themselves (``AMQPConnectionError``), and the reason a user
needs is the innermost one. A real refusal (loopback port 1), on both faces."""

from __future__ import annotations

import asyncio

import pytest

from sac.sdk import (
    AsyncPublisher,
    ConnectError,
    ConnectionSettings,
    Publisher,
    PublisherSettings,
    QueueSettings,
)

SETTINGS = PublisherSettings(ConnectionSettings("amqp://u:p@127.0.0.1:1/"),
                             queue=QueueSettings("q"))
REASON = "attempt 1, 127.0.0.1:1: ConnectionRefusedError: [Errno 111] Connection refused"


def test_the_blocking_face_names_the_refusal() -> None:
    with pytest.raises(ConnectError) as caught, Publisher(SETTINGS):
        pass
    assert str(caught.value).endswith(REASON), str(caught.value)


def test_the_asyncio_face_names_the_refusal() -> None:
    async def start() -> None:
        async with AsyncPublisher(SETTINGS):
            pass

    with pytest.raises(ConnectError) as caught:
        asyncio.run(start())
    assert str(caught.value).endswith(REASON), str(caught.value)
