"""Asking for another queue type than the existing queue's names the type, not whichever
argument RabbitMQ happened to compare first."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sac.sdk import ConnectionSettings, PublisherSettings, QueueMismatch, QueueSettings
from tests.sdk.faces import PublisherFace


@pytest.mark.rabbitmq("4.0", "3.10", narrow={"face": "asyncio"})
def test_classic_asked_of_the_sdks_quorum_queue_names_the_type(
    face: str,
    publishers: Callable[..., PublisherFace],
    conn: ConnectionSettings,
    queue_name: str,
) -> None:
    made = publishers(face, PublisherSettings(conn, queue=QueueSettings(queue_name)))
    made.start()
    made.close()
    wrong = publishers(
        face, PublisherSettings(conn, queue=QueueSettings(queue_name, type="classic")))
    with pytest.raises(QueueMismatch) as caught:
        wrong.start()
    text = str(caught.value)
    assert "the queue is a quorum queue" in text
    assert "the settings ask for type='classic'" in text
