"""AMQP 0-9-1 methods as plain values: what a simulated client and the simulated broker say
to each other, one frame per method (a publish or a delivery carries its body and
properties with it, as the three frames of a content do on the wire).

Methods that travel both ways (``basic.ack``, ``basic.nack``, ``basic.cancel``,
``channel.close``, ``connection.close`` and their ``-ok``) are one class each, as in the
protocol: the sender gives them their meaning. Besides methods a client hears transport
events (``ConnectionLost``, ``ConnectionRefused``), which are not frames.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

REPLY_SUCCESS = 200
NO_ROUTE = 312
NOT_FOUND = 404
PRECONDITION_FAILED = 406
CHANNEL_ERROR = 504
CONNECTION_FORCED = 320


def _headers(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if value is None else dict(value)


@attrs.frozen(kw_only=True)
class Properties:
    """The basic properties the model reads; anything else rides along in ``other``."""

    message_id: str | None = None
    headers: dict[str, Any] | None = attrs.field(default=None, converter=_headers)
    delivery_mode: int | None = 2
    correlation_id: str | None = None
    content_type: str | None = None

    def with_headers(self, extra: Mapping[str, Any]) -> Properties:
        return attrs.evolve(self, headers={**(self.headers or {}), **extra})

    def header(self, name: str) -> Any:
        return None if self.headers is None else self.headers.get(name)


# ------------------------------------------------------------------ connection and channel


@attrs.frozen(kw_only=True)
class ConnectionOpenOk:
    """The handshake is done (connection.start ... connection.open-ok, folded into one)."""

    version: str = "4.0.5"
    """``connection.start``'s ``version`` server property: what the SDK adapts to."""


@attrs.frozen(kw_only=True)
class ConnectionClose:
    reply_code: int = REPLY_SUCCESS
    reply_text: str = ""


@attrs.frozen(kw_only=True)
class ConnectionCloseOk:
    pass


@attrs.frozen(kw_only=True)
class ConnectionBlocked:
    reason: str = "low on memory"


@attrs.frozen(kw_only=True)
class ConnectionUnblocked:
    pass


@attrs.frozen(kw_only=True)
class Heartbeat:
    pass


@attrs.frozen(kw_only=True)
class ChannelOpen:
    pass


@attrs.frozen(kw_only=True)
class ChannelOpenOk:
    pass


@attrs.frozen(kw_only=True)
class ChannelClose:
    reply_code: int = REPLY_SUCCESS
    reply_text: str = ""


@attrs.frozen(kw_only=True)
class ChannelCloseOk:
    pass


@attrs.frozen(kw_only=True)
class ConfirmSelect:
    pass


@attrs.frozen(kw_only=True)
class ConfirmSelectOk:
    pass


# ------------------------------------------------------------------ queues


@attrs.frozen(kw_only=True)
class QueueDeclare:
    queue: str
    arguments: dict[str, Any] = attrs.field(factory=dict, converter=dict)
    passive: bool = False
    durable: bool = True


@attrs.frozen(kw_only=True)
class QueueDeclareOk:
    queue: str
    message_count: int
    consumer_count: int


@attrs.frozen(kw_only=True)
class QueueDelete:
    queue: str


@attrs.frozen(kw_only=True)
class QueueDeleteOk:
    message_count: int


# ------------------------------------------------------------------ basic


@attrs.frozen(kw_only=True)
class BasicQos:
    prefetch_count: int


@attrs.frozen(kw_only=True)
class BasicQosOk:
    pass


@attrs.frozen(kw_only=True)
class BasicConsume:
    queue: str
    consumer_tag: str
    arguments: dict[str, Any] = attrs.field(factory=dict, converter=dict)


@attrs.frozen(kw_only=True)
class BasicConsumeOk:
    consumer_tag: str


@attrs.frozen(kw_only=True)
class BasicCancel:
    """From a client: stop this consumer. From the broker: the consumer is gone (queue
    deleted, or its leader moved away with ``x-cancel-on-ha-failover``)."""

    consumer_tag: str


@attrs.frozen(kw_only=True)
class BasicCancelOk:
    consumer_tag: str


@attrs.frozen(kw_only=True)
class BasicPublish:
    exchange: str
    routing_key: str
    body: bytes
    properties: Properties = Properties()
    mandatory: bool = False


@attrs.frozen(kw_only=True)
class BasicReturn:
    reply_code: int
    reply_text: str
    exchange: str
    routing_key: str
    body: bytes
    properties: Properties


@attrs.frozen(kw_only=True)
class BasicDeliver:
    consumer_tag: str
    delivery_tag: int
    redelivered: bool
    exchange: str
    routing_key: str
    body: bytes
    properties: Properties

    @property
    def delivery_count(self) -> int | None:
        """``x-delivery-count`` as a quorum queue sets it: absent on a first delivery."""
        value = self.properties.header("x-delivery-count")
        return None if value is None else int(value)


@attrs.frozen(kw_only=True)
class BasicAck:
    """From a client: settle deliveries. From the broker: confirm publishes."""

    delivery_tag: int
    multiple: bool = False


@attrs.frozen(kw_only=True)
class BasicNack:
    """From a client: give deliveries back (or dead-letter them). From the broker: the
    publishes were refused."""

    delivery_tag: int
    multiple: bool = False
    requeue: bool = True


@attrs.frozen(kw_only=True)
class BasicReject:
    delivery_tag: int
    requeue: bool = True


Method = (
    ConnectionOpenOk | ConnectionClose | ConnectionCloseOk | ConnectionBlocked
    | ConnectionUnblocked | Heartbeat | ChannelOpen | ChannelOpenOk | ChannelClose
    | ChannelCloseOk | ConfirmSelect | ConfirmSelectOk | QueueDeclare | QueueDeclareOk
    | QueueDelete | QueueDeleteOk | BasicQos | BasicQosOk | BasicConsume | BasicConsumeOk
    | BasicCancel | BasicCancelOk | BasicPublish | BasicReturn | BasicDeliver | BasicAck
    | BasicNack | BasicReject
)
