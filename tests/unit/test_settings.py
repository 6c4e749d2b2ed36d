"""sac.sdk._settings (and the Delivery a handler receives): validation, masking, frozen values."""

from __future__ import annotations

import traceback
from typing import Any

import attrs
import pytest

from sac.sdk._core.backoff import Backoff
from sac.sdk._core.queues import BrokerVersion
from sac.sdk._delivery import RETRANSMIT_HEADER, Delivery, delivery_count
from sac.sdk._errors import ConfigurationError
from sac.sdk._settings import (
    ConnectionSettings,
    ConsumerSettings,
    ManagementSettings,
    PublisherSettings,
    QueueSettings,
    mask_url,
    parse_amqp_url,
)

SECRET = "s3cr3t-pw"
URL = f"amqp://app:{SECRET}@10.0.0.1:5672/"


# --- URLs ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "match"),
    [
        pytest.param(f"app:{SECRET}@localhost:5672/", "amqp://", id="no-scheme"),
        pytest.param("localhost:5672", "amqp://", id="no-scheme-no-user"),
        pytest.param(f"http://app:{SECRET}@localhost/", "'http'", id="http"),
        pytest.param(f"amqp://app:{SECRET}@/", "no host", id="no-host"),
        pytest.param(f"amqp:app:{SECRET}@localhost", "no host", id="no-slashes"),
        pytest.param(f"amqp://app:{SECRET}@localhost:abc/", "invalid port", id="port-text"),
        pytest.param(f"amqp://app:{SECRET}@localhost:99999/", "invalid port", id="port-range"),
        pytest.param(f"amqp://app:{SECRET}@localhost:0/", "invalid port", id="port-zero"),
        pytest.param("amqp://h:99999", "invalid port", id="port-range-no-user"),
        pytest.param(f"amqp://app:{SECRET}@localhost/a/b", "one path segment", id="vhost"),
        pytest.param(
            f"amqp://app:{SECRET[:3]}/{SECRET[3:]}@localhost/",
            "invalid port",
            id="unescaped-slash-in-password",
        ),
        pytest.param("", "at least one", id="empty"),
        pytest.param(" , ,", "at least one", id="empty-list"),
    ],
)
def test_malformed_urls_are_refused_without_showing_the_password(url: str, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match) as info:
        ConnectionSettings.from_url(url)
    shown = "".join(traceback.format_exception(info.value))  # what a log would show
    assert SECRET not in shown
    assert SECRET[:3] + "'" not in shown
    assert isinstance(info.value, ValueError)


def test_empty_sequence_of_urls_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="at least one"):
        ConnectionSettings(urls=[])


def test_one_bad_url_in_a_list_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="amqp://"):
        ConnectionSettings.from_url(f"{URL},http://other/")


@pytest.mark.parametrize(
    "url",
    [
        "amqp://localhost",
        "amqps://broker.example.com:5671/prod",
        "amqp://guest:guest@127.0.0.1:5672/%2F",
        "amqp://[::1]:5672/",
    ],
)
def test_good_urls_are_accepted(url: str) -> None:
    assert parse_amqp_url(url).hostname
    assert ConnectionSettings.from_url(url).urls == (url,)


def test_comma_list_gives_several_urls_in_order() -> None:
    settings = ConnectionSettings.from_url(
        f"{URL}, amqp://app:{SECRET}@10.0.0.2/ ,amqp://10.0.0.3,"
    )
    assert settings.urls == (URL, f"amqp://app:{SECRET}@10.0.0.2/", "amqp://10.0.0.3")


def test_from_url_passes_overrides() -> None:
    settings = ConnectionSettings.from_url(URL, heartbeat=10, name="svc")
    assert (settings.heartbeat, settings.name) == (10, "svc")


def test_mask_url_hides_only_the_password() -> None:
    assert mask_url(URL) == "amqp://app:***@10.0.0.1:5672/"
    assert mask_url("amqp://[::1]:5672/") == "amqp://[::1]:5672/"
    assert mask_url(f"amqp://app:{SECRET}@[::1]/v") == "amqp://app:***@[::1]/v"
    assert mask_url("amqp://app@host/") == "amqp://app@host/"


def test_repr_never_contains_the_password() -> None:
    settings = ConnectionSettings.from_url(f"{URL},amqps://app:{SECRET}@10.0.0.2/")
    text = repr(settings)
    assert SECRET not in text
    assert "10.0.0.1" in text
    assert "10.0.0.2" in text
    assert SECRET not in repr(PublisherSettings(connection=settings))
    assert SECRET not in repr(ConsumerSettings(connection=settings, queue=QueueSettings("q")))
    assert all(SECRET not in u for u in settings.display_urls())
    assert settings.urls[0] == URL  # the real URL is still there to connect with


# --- environment -----------------------------------------------------------------------------


def test_from_env_reads_urls_and_heartbeat() -> None:
    env = {
        "SAC_AMQP_URLS": f"{URL},amqp://10.0.0.2",
        "SAC_HEARTBEAT": "11",
        "SAC_CONNECT_TIMEOUT": "2.5",
        "SAC_CONNECTION_NAME": "billing",
    }
    settings = ConnectionSettings.from_env(environ=env)
    assert settings.urls == (URL, "amqp://10.0.0.2")
    assert settings.heartbeat == 11
    assert settings.connect_timeout == 2.5
    assert settings.name == "billing"


def test_from_env_defaults_and_prefix() -> None:
    settings = ConnectionSettings.from_env(prefix="APP_", environ={"APP_AMQP_URLS": URL})
    assert settings.heartbeat == ConnectionSettings.from_url(URL).heartbeat
    assert settings.name is None


def test_from_env_without_urls_names_the_variable() -> None:
    with pytest.raises(ConfigurationError, match="SAC_AMQP_URLS"):
        ConnectionSettings.from_env(environ={"SAC_HEARTBEAT": "5"})


def test_from_env_with_a_bad_url_names_the_variable_not_the_password() -> None:
    with pytest.raises(ConfigurationError, match="SAC_AMQP_URLS") as info:
        ConnectionSettings.from_env(environ={"SAC_AMQP_URLS": f"http://app:{SECRET}@h/"})
    assert SECRET not in str(info.value)


@pytest.mark.parametrize("value", ["abc", "1.5", "", "0", "-3"])
def test_bad_heartbeat_names_the_variable(value: str) -> None:
    with pytest.raises(ConfigurationError, match="SAC_HEARTBEAT"):
        ConnectionSettings.from_env(environ={"SAC_AMQP_URLS": URL, "SAC_HEARTBEAT": value})


@pytest.mark.parametrize("value", ["soon", "0", "-1", "nan"])
def test_bad_timeout_names_the_variable(value: str) -> None:
    with pytest.raises(ConfigurationError, match="SAC_BLOCKED_TIMEOUT"):
        ConnectionSettings.from_env(environ={"SAC_AMQP_URLS": URL, "SAC_BLOCKED_TIMEOUT": value})


# --- numbers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("heartbeat", 0),
        ("heartbeat", 2.5),
        ("heartbeat", True),
        ("connect_timeout", 0),
        ("connect_timeout", -1.0),
        ("blocked_timeout", "60"),
    ],
)
def test_bad_connection_numbers_name_the_setting(field: str, value: Any) -> None:
    with pytest.raises(ConfigurationError, match=field):
        ConnectionSettings.from_url(URL, **{field: value})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("window", 0),
        ("confirm_timeout", 0),
        ("close_timeout", -5),
        ("max_message_size", 0),
    ],
)
def test_bad_publisher_numbers_name_the_setting(field: str, value: Any) -> None:
    connection = ConnectionSettings.from_url(URL)
    with pytest.raises(ConfigurationError, match=field):
        PublisherSettings(connection, **{field: value})


def test_publisher_nack_retries_are_bounded_by_default() -> None:
    publisher = PublisherSettings(ConnectionSettings.from_url(URL))
    assert publisher.nack_backoff.max_elapsed is not None
    assert publisher.nack_backoff.max_attempts is not None


def test_publisher_throttles_on_nacks_unless_told_not_to() -> None:
    connection = ConnectionSettings.from_url(URL)
    assert PublisherSettings(connection).throttle_on_nack is True
    assert PublisherSettings(connection, throttle_on_nack=False).throttle_on_nack is False
    with pytest.raises(ConfigurationError, match="throttle_on_nack must be True or False"):
        PublisherSettings(connection, throttle_on_nack="no")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value"),
    [("prefetch", 0), ("ack_batch", 0), ("ack_batch", False), ("stop_timeout", 0)],
)
def test_bad_consumer_numbers_name_the_setting(field: str, value: Any) -> None:
    connection = ConnectionSettings.from_url(URL)
    with pytest.raises(ConfigurationError, match=field):
        ConsumerSettings(connection, QueueSettings("q"), **{field: value})


# --- queues ----------------------------------------------------------------------------------


def test_queue_arguments_for_quorum_sac_delivery_limit_and_dlx() -> None:
    queue = QueueSettings(
        "orders",
        delivery_limit=5,
        dead_letter_exchange="orders.dlx",
        dead_letter_routing_key="dead",
    )
    assert queue.arguments() == {
        "x-queue-type": "quorum",
        "x-single-active-consumer": True,
        "x-delivery-limit": 5,
        "x-dead-letter-exchange": "orders.dlx",
        "x-dead-letter-routing-key": "dead",
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
    }


def test_by_default_a_queue_dead_letters_at_least_once_into_its_parking_queue() -> None:
    queue = QueueSettings("orders")
    assert queue.parking_queue == "orders.parked"
    assert queue.arguments() == {
        "x-queue-type": "quorum",
        "x-single-active-consumer": True,
        "x-delivery-limit": 20,
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "orders.parked",
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
    }
    parking = queue.parking()
    assert parking is not None
    assert parking.name == "orders.parked"
    # No delivery limit: -1 on 4.x (its default of 20 would drop a much-listed message),
    # nothing on 3.x.
    assert parking.arguments() == {"x-queue-type": "quorum", "x-delivery-limit": -1}
    assert parking.arguments(BrokerVersion(3, 10, 8)) == {"x-queue-type": "quorum"}
    assert QueueSettings("orders", declare=False).parking().declare is False  # type: ignore[union-attr]


def test_without_a_dead_letter_target_there_is_no_delivery_limit() -> None:
    queue = QueueSettings("orders", parking_queue=None)
    assert queue.delivery_limit is None
    assert queue.parking() is None
    assert queue.arguments() == {"x-queue-type": "quorum", "x-single-active-consumer": True}
    with pytest.raises(ConfigurationError, match="would drop"):
        QueueSettings("orders", parking_queue=None, delivery_limit=5)


def test_a_classic_queue_parks_too_but_counts_no_deliveries() -> None:
    queue = QueueSettings("jobs", type="classic")
    assert queue.delivery_limit is None
    assert queue.arguments() == {
        "x-queue-type": "classic", "x-single-active-consumer": True,
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "jobs.parked"}
    # Its parking queue is replicated: declared on every start, it must not depend on one node.
    assert queue.parking().arguments() == {  # type: ignore[union-attr]
        "x-queue-type": "quorum", "x-delivery-limit": -1}


@pytest.mark.parametrize("name", ["orders", "amq.parked", ""])
def test_a_bad_parking_queue_is_refused(name: str) -> None:
    with pytest.raises(ConfigurationError, match="parking_queue"):
        QueueSettings("orders", parking_queue=name)


def test_queue_arguments_minimal_and_extra() -> None:
    queue = QueueSettings(
        "jobs", type="classic", single_active_consumer=False, parking_queue=None,
        extra_arguments={"x-max-length": 9}
    )
    assert queue.arguments() == {"x-queue-type": "classic", "x-max-length": 9}


def test_handler_retry_must_stay_below_the_consumer_timeout() -> None:
    connection = ConnectionSettings.from_url(URL)
    settings = ConsumerSettings(connection, QueueSettings("q"))
    assert settings.retry.max_attempts == 4
    with pytest.raises(ConfigurationError, match="retry may keep a message unacked"):
        ConsumerSettings(connection, QueueSettings("q"),
                         retry=Backoff(initial=1, maximum=60, max_attempts=None, max_elapsed=3600))
    with pytest.raises(ConfigurationError, match="message_id_from"):
        ConsumerSettings(connection, QueueSettings("q"),
                         message_id_from="x-id")  # type: ignore[arg-type]


def test_queue_arguments_are_a_fresh_dict() -> None:
    queue = QueueSettings("orders")
    queue.arguments()["x-queue-type"] = "classic"
    assert queue.arguments()["x-queue-type"] == "quorum"


def test_delivery_limit_on_a_classic_queue_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="delivery_limit"):
        QueueSettings("orders", type="classic", delivery_limit=5)


@pytest.mark.parametrize("limit", [0, -2, True, 2.5])
def test_delivery_limit_below_one_is_refused(limit: int) -> None:
    with pytest.raises(ConfigurationError, match=r"delivery_limit must be None, -1 \(no limit\)"):
        QueueSettings("orders", delivery_limit=limit)


def test_no_delivery_limit_is_minus_one_on_4_0_and_no_argument_on_3_x() -> None:
    """RabbitMQ 4.0's quorum queues default to a limit of 20 and take -1 for none; 3.10 has
    no default limit and reads -1 as a limit below one delivery (dead-lettering at the first
    return, as measured on 3.10.8)."""
    queue = QueueSettings("orders", delivery_limit=-1)
    assert queue.arguments(BrokerVersion(4, 0, 5))["x-delivery-limit"] == -1
    assert queue.arguments()["x-delivery-limit"] == -1  # not known: 4.0 or later
    assert "x-delivery-limit" not in queue.arguments(BrokerVersion(3, 10, 8))
    # nothing is dropped past no limit: no dead-letter target needed
    alone = QueueSettings("orders", parking_queue=None, delivery_limit=-1)
    assert alone.arguments(BrokerVersion(4, 0, 5)) == {
        "x-queue-type": "quorum", "x-single-active-consumer": True, "x-delivery-limit": -1}
    # a limit is sent as it is to both
    assert QueueSettings("orders", delivery_limit=5).arguments(
        BrokerVersion(3, 10, 8))["x-delivery-limit"] == 5
    with pytest.raises(ConfigurationError, match="needs a quorum queue"):
        QueueSettings("orders", type="classic", delivery_limit=-1)


def test_unknown_queue_type_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="stream"):
        QueueSettings("orders", type="stream")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("amq.x", "reserved"),
        ("", "1-255 bytes"),
        ("a" * 256, "1-255 bytes"),
        ("é" * 128, "1-255 bytes"),  # 128 characters but 256 bytes
    ],
)
def test_bad_queue_names_are_refused(name: str, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        QueueSettings(name)


@pytest.mark.parametrize("name", ["a" * 255, "amq", "x.amq.y", "é" * 127])
def test_queue_names_up_to_255_bytes_are_accepted(name: str) -> None:
    assert QueueSettings(name).name == name


# --- frozen ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "field", "value"),
    [
        (ConnectionSettings.from_url(URL), "heartbeat", 9),
        (QueueSettings("q"), "name", "other"),
        (PublisherSettings(ConnectionSettings.from_url(URL)), "window", 2),
        (ConsumerSettings(ConnectionSettings.from_url(URL), QueueSettings("q")), "prefetch", 1),
    ],
)
def test_settings_are_frozen(settings: object, field: str, value: object) -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(settings, field, value)


def test_evolve_validates_the_new_value() -> None:
    connection = ConnectionSettings.from_url(URL)
    assert attrs.evolve(connection, heartbeat=30).heartbeat == 30
    with pytest.raises(ConfigurationError, match="heartbeat"):
        attrs.evolve(connection, heartbeat=0)
    assert isinstance(connection.reconnect, Backoff)


# --- deliveries ------------------------------------------------------------------------------


def _delivery(**overrides: Any) -> Delivery:
    values: dict[str, Any] = {
        "body": b"payload",
        "message_id": "m-1",
        "headers": {},
        "redelivered": False,
        "delivery_count": None,
        "queue": "orders",
        "routing_key": "orders",
        "exchange": "",
    }
    values.update(overrides)
    return Delivery(**values)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (None, None),
        ({}, None),
        ({"other": 1}, None),
        ({"x-delivery-count": 1}, 1),
        ({"x-delivery-count": 4}, 4),
        ({"x-delivery-count": True}, None),
        ({"x-delivery-count": "2"}, None),
    ],
)
def test_delivery_count(headers: dict[str, Any] | None, expected: int | None) -> None:
    assert delivery_count(headers) == expected


@pytest.mark.parametrize(
    ("overrides", "retransmitted", "maybe_duplicate"),
    [
        ({}, False, False),
        ({"redelivered": True}, False, True),
        ({"delivery_count": 1}, False, True),
        ({"headers": {RETRANSMIT_HEADER: 1}}, True, True),
        ({"headers": {RETRANSMIT_HEADER: 0}}, False, False),
        ({"headers": {"x-other": 1}}, False, False),
    ],
)
def test_delivery_duplicate_flags(
    overrides: dict[str, Any], retransmitted: bool, maybe_duplicate: bool
) -> None:
    delivery = _delivery(**overrides)
    assert delivery.retransmitted is retransmitted
    assert delivery.maybe_duplicate is maybe_duplicate


def test_delivery_repr_shows_the_body_size_not_the_body() -> None:
    delivery = _delivery(body=b"secret body", delivery_tag=77)
    text = repr(delivery)
    assert "<11 bytes>" in text
    assert "secret body" not in text
    assert "77" not in text
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        delivery.redelivered = True  # type: ignore[misc]


def test_the_outbox_policy_carries_the_publisher_settings() -> None:
    nacks = Backoff(initial=0.2, maximum=2.0)
    connection = ConnectionSettings.from_url(URL, blocked_timeout=7.0)
    policy = PublisherSettings(connection, window=17, nack_backoff=nacks,
                               throttle_on_nack=False, nack_stall_timeout=3.0,
                               confirm_timeout=9.0).outbox_policy()
    assert attrs.asdict(policy, recurse=False) == {
        "window": 17, "nack_backoff": nacks, "throttle_on_nack": False,
        "nack_stall_timeout": 3.0, "blocked_timeout": 7.0, "confirm_timeout": 9.0}


def test_management_from_env_reads_the_statistics_interval() -> None:
    env = {"SAC_MANAGEMENT_URLS": "http://u:p@h:15672",
           "SAC_MANAGEMENT_STATISTICS_INTERVAL": "1"}
    assert ManagementSettings.from_env(environ=env).statistics_interval == 1.0
    env["SAC_MANAGEMENT_STATISTICS_INTERVAL"] = "soon"
    with pytest.raises(ConfigurationError, match="SAC_MANAGEMENT_STATISTICS_INTERVAL='soon'"):
        ManagementSettings.from_env(environ=env)
