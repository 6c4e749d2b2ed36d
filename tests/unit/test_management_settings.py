"""sac.sdk.ManagementSettings and the consumer's role poll settings: validated, masked."""

from __future__ import annotations

import traceback
from typing import Any

import attrs
import pytest

from sac.sdk import (
    Backoff,
    ConfigurationError,
    ConnectionSettings,
    ConsumerSettings,
    ManagementSettings,
    QueueSettings,
)

SECRET = "s3cr3t-pw"
URL = f"http://admin:{SECRET}@10.0.0.1:15672"


def test_one_url_or_several() -> None:
    one = ManagementSettings(URL)
    assert one.urls == (URL,)
    assert (one.timeout, one.statistics_interval, one.ca_file) == (5.0, 5.0, None)
    assert one.retry.max_attempts is not None  # reads are retried, boundedly
    two = ManagementSettings.from_url(f"{URL}, http://admin:{SECRET}@10.0.0.2:15672",
                                      timeout=2.0)
    assert len(two.urls) == 2
    assert two.timeout == 2.0
    assert ManagementSettings([URL, URL]).urls == (URL, URL)


def test_the_password_never_shows() -> None:
    settings = ManagementSettings(URL)
    assert SECRET not in repr(settings)
    assert SECRET not in repr(ConsumerSettings(
        ConnectionSettings("amqp://u:p@h/"), QueueSettings("q"), management=settings))
    assert settings.display_urls() == ["http://admin:***@10.0.0.1:15672"]


@pytest.mark.parametrize(
    ("urls", "complaint"),
    [
        ("", "at least one management URL"),
        ([], "at least one management URL"),
        (5, "must be a string or a list"),
        ([URL, 5], "non-empty string"),
        (f"amqp://admin:{SECRET}@h:5672", "http:// or https://"),
        ("http://10.0.0.1:15672", "needs a user and a password"),
        (f"http://admin:{SECRET}@h:port", "invalid port"),
    ],
)
def test_bad_urls_are_refused_by_name_never_with_the_password(urls: Any, complaint: str) -> None:
    with pytest.raises(ConfigurationError, match=complaint) as caught:
        ManagementSettings(urls)
    shown = "".join(traceback.format_exception(caught.value))
    assert SECRET not in shown


@pytest.mark.parametrize(
    ("field", "value"),
    [("timeout", 0), ("timeout", -1.0), ("statistics_interval", 0), ("retry", 3),
     ("ca_file", 7)],
)
def test_bad_numbers_name_the_setting(field: str, value: Any) -> None:
    with pytest.raises(ConfigurationError, match=field):
        ManagementSettings(URL, **{field: value})


def test_a_ca_file_needs_an_https_url() -> None:
    with pytest.raises(ConfigurationError, match="ca_file is only used with https://"):
        ManagementSettings(URL, ca_file="/etc/ssl/ca.pem")
    https = ManagementSettings(f"https://admin:{SECRET}@h:15671", ca_file="/etc/ssl/ca.pem")
    assert https.ca_file == "/etc/ssl/ca.pem"


def test_from_env() -> None:
    env = {"SAC_MANAGEMENT_URLS": URL}
    assert ManagementSettings.from_env(environ=env).urls == (URL,)
    with pytest.raises(ConfigurationError, match="SAC_MANAGEMENT_URLS is not set"):
        ManagementSettings.from_env(environ={})
    with pytest.raises(ConfigurationError, match=r"SAC_MANAGEMENT_URLS: .*needs a user") as bad:
        ManagementSettings.from_env(environ={"SAC_MANAGEMENT_URLS": "http://h:1"})
    assert bad.value.__cause__ is None


def test_the_role_is_polled_only_with_a_url_on_a_single_active_queue() -> None:
    conn = ConnectionSettings("amqp://u:p@h/")
    queue = QueueSettings("q")
    assert ConsumerSettings(conn, queue).role_poll is None
    management = ManagementSettings(URL, statistics_interval=1.0)
    polled = ConsumerSettings(conn, queue, management=management)
    assert polled.role_poll == 0.5  # half the statistics interval by default
    assert attrs.evolve(polled, role_poll_interval=2.0).role_poll == 2.0
    shared = QueueSettings("q", single_active_consumer=False)
    assert ConsumerSettings(conn, shared, management=management).role_poll is None
    with pytest.raises(ConfigurationError, match="role_poll_interval"):
        ConsumerSettings(conn, queue, management=management, role_poll_interval=0)
    with pytest.raises(ConfigurationError, match="management must be a ManagementSettings"):
        ConsumerSettings(conn, queue, management=URL)  # type: ignore[arg-type]


def test_frozen_and_evolved_with_validation() -> None:
    settings = ManagementSettings(URL, retry=Backoff(max_attempts=2))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        settings.timeout = 1.0  # type: ignore[misc]
    with pytest.raises(ConfigurationError, match="timeout"):
        attrs.evolve(settings, timeout=0)
