"""Whether a new leader evicts its predecessor's connection (``_core/eviction.py``): only an
older token's record, only one instance's connection, never its own, only on a native
single-active queue with a management URL; and of the connections bearing the record's
name, only a consumer of its queue, in its vhost, under its user is closed."""

from __future__ import annotations

import pytest

from sac.sdk._core.eviction import (
    Evict,
    Keep,
    decide_eviction,
    evicted_by,
    eviction_reason,
    instance_connection_name,
    names_one_instance,
    targets,
)
from sac.sdk._core.guarding import LeaderRecord, Leadership
from sac.sdk._core.management_api import ConnectionInfo

OLD = instance_connection_name("orders-consumer", "0123456789abcdef")
OWN = instance_connection_name("orders-consumer", "fedcba9876543210")


def decide(previous: LeaderRecord | None, token: int = 200, *, own: str = OWN,
           single_active: bool = True, management: bool = True,
           enabled: bool = True) -> Evict | Keep:
    return decide_eviction(Leadership(token=token, node="/g/election/n", previous=previous),
                           own, "/sac/orders",
                           single_active=single_active, management=management,
                           enabled=enabled)


def test_a_predecessor_with_an_older_token_is_evicted_by_its_own_connection_name() -> None:
    previous = LeaderRecord(token=100, consumer="a", connection=OLD, host="host", pid=42)
    decision = decide(previous)
    assert isinstance(decision, Evict)
    assert (decision.connection, decision.token, decision.previous) == (OLD, 200, previous)
    assert "token 200" in decision.reason
    assert "token 100" in decision.reason
    assert evicted_by(f"CONNECTION_FORCED - {decision.reason}") == 200


@pytest.mark.parametrize(("previous", "kwargs", "why"), [
    (None, {}, "no previous leader"),
    (LeaderRecord(token=200, consumer="a", connection=OLD), {}, "not older"),
    (LeaderRecord(token=300, consumer="a", connection=OLD), {}, "not older"),
    (LeaderRecord(token=100, consumer="a", connection=None), {}, "names no connection"),
    (LeaderRecord(token=100, consumer="a", connection=OWN), {}, "this consumer"),
    (LeaderRecord(token=100, consumer="a", connection="orders-consumer"), {}, "shared"),
    (LeaderRecord(token=100, consumer="a", connection=OLD), {"single_active": False},
     "no native single active"),
    (LeaderRecord(token=100, consumer="a", connection=OLD), {"management": False},
     "no management URL"),
    (LeaderRecord(token=100, consumer="a", connection=OLD), {"enabled": False}, "eviction is off"),
])
def test_nothing_is_closed_unless_every_rule_allows(
    previous: LeaderRecord | None, kwargs: dict[str, bool], why: str
) -> None:
    decision = decide(previous, **kwargs)  # type: ignore[arg-type]
    assert isinstance(decision, Keep)
    assert why in decision.why


def test_instance_names_are_recognised_and_ids_checked() -> None:
    assert names_one_instance(OLD)
    assert not names_one_instance("orders-consumer")
    assert not names_one_instance(OLD + "x")
    with pytest.raises(ValueError, match="16 hex digits"):
        instance_connection_name("c", "xyz")


def test_only_our_eviction_reason_names_a_token() -> None:
    assert evicted_by("CONNECTION_FORCED - Closed via management plugin") is None
    assert evicted_by("") is None
    reason = eviction_reason(7, LeaderRecord(token=5), "/sac/ördérs")
    assert reason.isascii()
    assert evicted_by(reason) == 7


def test_only_a_consumer_of_this_queue_in_this_vhost_under_this_user_is_closed() -> None:
    def connection(name: str, user: str = "app", vhost: str = "/") -> ConnectionInfo:
        return ConnectionInfo(name, OLD, user, vhost, "rabbit@a")

    frozen = connection("10.0.0.1:5001 -> 10.0.0.9:5672")
    elsewhere = connection("10.0.0.2:5002 -> 10.0.0.9:5672")  # consumes another queue
    stranger = connection("10.0.0.3:5003 -> 10.0.0.9:5672", user="guest")
    other_vhost = connection("10.0.0.4:5004 -> 10.0.0.9:5672", vhost="staging")
    consumers = {frozen.name, stranger.name, other_vhost.name}
    close, spared = targets([frozen, elsewhere, stranger, other_vhost], consumers, "orders",
                            "/", {"app"})
    assert close == (frozen,)
    assert [(s.connection, s.why) for s in spared] == [
        (elsewhere, "it is not a consumer of queue 'orders' in vhost '/'"),
        (stranger, "it belongs to user 'guest', not 'app'"),
        (other_vhost, "it is in vhost 'staging', not '/'")]
    assert targets([frozen], set(), "orders", "/", {"app"})[0] == ()  # no such queue
