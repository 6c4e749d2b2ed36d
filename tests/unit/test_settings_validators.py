"""Every validated setting of the SDK rejects a bad value with ``ConfigurationError`` naming
the field: the settings classes are found by walking the SDK (every attrs class with a field
validator), so a new validated field without a case here fails the coverage test."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from sac import sdk
from sac.sdk import ConfigurationError, ConnectionSettings, QueueSettings
from sac.sdk._core.backoff import Backoff
from sac.sdk._core.codecs import Serializer
from sac.sdk._core.outbox import OutboxPolicy
from sac.sdk._core.poison import MessageIdFrom
from sac.sdk._settings import (
    ConsumerSettings,
    GroupSettings,
    GuardSettings,
    ManagementSettings,
    PartitionedQueue,
    PublisherSettings,
)
from sac.sdk.dedup._store import Retention

CONN = ConnectionSettings("amqp://app:pw@localhost/")
QUEUE = QueueSettings("orders")

MAKE: dict[type, Callable[..., object]] = {
    ConnectionSettings: lambda **kw: ConnectionSettings(**{"urls": CONN.urls, **kw}),
    QueueSettings: lambda **kw: QueueSettings(**{"name": "orders", **kw}),
    PublisherSettings: lambda **kw: PublisherSettings(CONN, **kw),
    ConsumerSettings: lambda **kw: ConsumerSettings(CONN, QUEUE, **kw),
    ManagementSettings: lambda **kw: ManagementSettings("http://app:pw@localhost:15672", **kw),
    Backoff: Backoff,
    Retention: Retention,
    GuardSettings: lambda **kw: GuardSettings(**{"hosts": "zk:2181", "group": "/g", **kw}),
    GroupSettings: lambda **kw: GroupSettings(**{"hosts": "zk:2181", "group": "/g",
                                                 "partitions": 4, **kw}),
    PartitionedQueue: lambda **kw: PartitionedQueue(**{"name": "orders", "partitions": 4, **kw}),
    OutboxPolicy: lambda **kw: OutboxPolicy(**{"window": 10, "nack_backoff": Backoff(), **kw}),
    Serializer: lambda **kw: Serializer(**{"content_type": "text/plain", "encode": bytes,
                                          "decode": bytes, **kw}),
}

BAD: dict[tuple[type, str], Any] = {
    (ConnectionSettings, "heartbeat"): 0,
    (ConnectionSettings, "connect_timeout"): -1.0,
    (ConnectionSettings, "blocked_timeout"): "soon",
    (ConnectionSettings, "reconnect"): 5,
    (QueueSettings, "name"): "amq.mine",
    (QueueSettings, "type"): "stream",
    (QueueSettings, "parking_queue"): "",
    (QueueSettings, "delivery_limit"): 0,
    (PublisherSettings, "window"): 0,
    (PublisherSettings, "nack_stall_timeout"): 0,
    (PublisherSettings, "throttle_on_nack"): 1,
    (PublisherSettings, "confirm_timeout"): True,
    (PublisherSettings, "close_timeout"): -5,
    (PublisherSettings, "max_message_size"): 0,
    (PublisherSettings, "nack_backoff"): None,
    (ConsumerSettings, "prefetch"): 0,
    (ConsumerSettings, "ack_batch"): 1.5,
    (ConsumerSettings, "priority"): 2**31,
    (ConsumerSettings, "stop_timeout"): 0,
    (ConsumerSettings, "retry"): Backoff(initial=600, maximum=600, max_elapsed=None),
    (ConsumerSettings, "message_id_from"): "x-order-id",
    (ConsumerSettings, "guard"): "zk:2181/sac",
    (GuardSettings, "hosts"): "zk:two",
    (GuardSettings, "group"): "/sac/",
    (GuardSettings, "session_timeout"): 0,
    (GuardSettings, "connect_timeout"): -1,
    (GuardSettings, "retry"): 3,
    (GuardSettings, "evict"): "yes",
    (GuardSettings, "auth"): ("app", ""),
    (GroupSettings, "hosts"): "zk:two",
    (GroupSettings, "group"): "g",
    (GroupSettings, "partitions"): 0,
    (GroupSettings, "session_timeout"): 0,
    (GroupSettings, "connect_timeout"): -1,
    (PartitionedQueue, "name"): "amq.orders",
    (PartitionedQueue, "partitions"): 10_001,
    (PartitionedQueue, "template"): QueueSettings("x", single_active_consumer=False),
    (ConsumerSettings, "management"): "http://app:pw@localhost:15672",
    (ConsumerSettings, "role_poll_interval"): 0,
    (ConsumerSettings, "handover"): "close",
    (ManagementSettings, "timeout"): 0,
    (ManagementSettings, "statistics_interval"): -1.0,
    (ManagementSettings, "retry"): 5,
    (ManagementSettings, "ca_file"): 7,
    (OutboxPolicy, "window"): 0,
    (OutboxPolicy, "nack_backoff"): None,
    (OutboxPolicy, "throttle_on_nack"): "yes",
    (OutboxPolicy, "nack_stall_timeout"): 0,
    (OutboxPolicy, "blocked_timeout"): -1.0,
    (OutboxPolicy, "confirm_timeout"): "later",
    (Backoff, "initial"): 0,
    (Backoff, "maximum"): -1,
    (Backoff, "multiplier"): 0.5,
    (Backoff, "max_attempts"): 0,
    (Backoff, "max_elapsed"): "forever",
    (Retention, "max_age"): 0,
    (Retention, "max_records"): 2.5,
    (Retention, "interval"): -1,
    (Retention, "batch"): 0,
    (Serializer, "content_type"): "json",
    (Serializer, "encode"): b"not a function",
    (Serializer, "decode"): None,
}
"""A bad value for each validated field (the others stay valid)."""


def validated_fields() -> set[tuple[type, str]]:
    """(class, field) of every attrs field with a validator in the SDK."""
    for module in pkgutil.walk_packages(sdk.__path__, "sac.sdk."):
        importlib.import_module(module.name)
    found = set()
    for cls in _attrs_classes(object):
        if cls.__module__.startswith("sac.sdk"):
            found |= {(cls, f.name) for f in attrs.fields(cls) if f.validator is not None}
    return found


def _attrs_classes(root: type) -> set[type]:
    found = set()
    for sub in type.__subclasses__(root):
        if attrs.has(sub):
            found.add(sub)
        found |= _attrs_classes(sub)
    return found


def test_every_validated_field_has_a_bad_value_here() -> None:
    assert validated_fields() == set(BAD)


@pytest.mark.parametrize(("cls", "field"), sorted(BAD, key=lambda k: (k[0].__name__, k[1])),
                         ids=lambda v: v if isinstance(v, str) else v.__name__)
def test_a_bad_value_is_a_configuration_error_naming_the_field(cls: type, field: str) -> None:
    MAKE[cls]()  # the other fields' defaults are valid
    with pytest.raises(ConfigurationError) as caught:
        MAKE[cls](**{field: BAD[cls, field]})
    assert field.replace("_", " ") in str(caught.value) or field in str(caught.value)


@pytest.mark.parametrize(("make", "word"), [
    (lambda: Backoff(max_attempts=None, max_elapsed=None), "bounded"),
    (lambda: Backoff(initial=2.0, maximum=1.0), "maximum"),
    (lambda: MessageIdFrom(), "header_name"),
    (lambda: MessageIdFrom(header_name=""), "header_name"),
    (lambda: QueueSettings("q", type="classic", delivery_limit=3), "delivery_limit"),
    (lambda: QueueSettings("q", parking_queue="q"), "parking_queue"),
    (lambda: QueueSettings("q", parking_queue=None, delivery_limit=3), "delivery_limit"),
    (lambda: ConnectionSettings(()), "URL"),
])
def test_checks_across_fields_are_configuration_errors_too(
    make: Callable[[], object], word: str
) -> None:
    with pytest.raises(ConfigurationError, match=word):
        make()
