"""sac.sdk._core.management_api: what is asked and how answers are read, without a broker.

The answers below are cut from what RabbitMQ 3.10.8 returned on a test cluster."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sac.sdk._core import management_api as api

QUORUM = {
    "name": "orders", "vhost": "/", "type": "quorum", "durable": True, "exclusive": False,
    "auto_delete": False, "arguments": {"x-queue-type": "quorum", "x-single-active-consumer": True},
    "leader": "sac-1@localhost", "members": ["sac-1@localhost", "sac-2@localhost"],
    "messages": 3, "messages_ready": 2, "messages_unacknowledged": 1,
    "consumer_details": [
        {"arguments": {}, "ack_required": True, "active": False, "activity_status": "waiting",
         "consumer_tag": "tag-b", "exclusive": False, "prefetch_count": 7,
         "channel_details": {"name": "127.0.0.1:55150 -> 127.0.0.1:27701 (1)",
                             "connection_name": "127.0.0.1:55150 -> 127.0.0.1:27701"},
         "queue": {"name": "orders", "vhost": "/"}},
        {"arguments": {}, "ack_required": True, "active": True,
         "activity_status": "single_active", "consumer_tag": "tag-a", "exclusive": False,
         "prefetch_count": 7, "channel_details": [], "queue": {"name": "orders", "vhost": "/"}},
    ],
}
CLASSIC = {
    "name": "legacy", "vhost": "/", "type": "classic", "durable": True, "exclusive": False,
    "auto_delete": False, "arguments": {"x-single-active-consumer": True,
                                        "x-max-priority": 5},
    "node": "sac-2@localhost", "policy": "ha-all",
    "effective_policy_definition": {"ha-mode": "all", "ha-sync-mode": "automatic"},
    "consumers": 1, "single_active_consumer_tag": "tag-old", "consumer_details": [
        {"active": True, "activity_status": "single_active", "consumer_tag": "tag-new",
         "prefetch_count": 0, "channel_details": {"name": "ch", "connection_name": "conn"}}],
}


def test_a_queue_answer_read() -> None:
    queue = api.parse_queue(QUORUM)
    assert (queue.vhost, queue.name, queue.type, queue.node) == (
        "/", "orders", "quorum", "sac-1@localhost")
    assert (queue.messages, queue.messages_ready, queue.messages_unacknowledged) == (3, 2, 1)
    assert queue.single_active
    assert [c.tag for c in queue.consumers] == ["tag-b", "tag-a"]
    assert queue.consumer_count == 2  # quorum queues report no "consumers" count
    waiting = queue.consumers[0]
    assert (waiting.active, waiting.activity_status, waiting.prefetch_count) == (
        False, "waiting", 7)
    assert waiting.connection == "127.0.0.1:55150 -> 127.0.0.1:27701"
    assert queue.consumers[1].channel is None  # the broker sends [] once a channel is gone


def test_the_single_active_consumer_comes_from_the_consumers_first() -> None:
    """A quorum queue has no queue-level tag; a classic queue's lags its consumer entries."""
    assert api.parse_queue(QUORUM).single_active_consumer_tag == "tag-a"
    classic = api.parse_queue(CLASSIC)
    assert classic.reported_single_active_tag == "tag-old"
    assert classic.single_active_consumer_tag == "tag-new"
    assert classic.effective_policy == {"ha-mode": "all", "ha-sync-mode": "automatic"}
    assert classic.node == "sac-2@localhost"


def test_a_lingering_entry_makes_the_active_consumer_unclear() -> None:
    """RabbitMQ 3.10 keeps listing a consumer it cancelled (queue deleted) while its channel
    lives, once a queue of that name exists again: two entries say single_active."""
    entries = [{"consumer_tag": t, "active": True, "activity_status": "single_active"}
               for t in ("sac-1", "sac-2")]
    queue = api.parse_queue(dict(QUORUM, consumer_details=entries))
    assert queue.active_tags == ("sac-1", "sac-2")
    assert queue.single_active_consumer_tag is None
    assert queue.activity_of("sac-2") == "single_active"


@pytest.mark.parametrize("field", ["single_active_consumer_tag", "single_active_consumer_ctag"])
def test_the_queue_tag_decides_between_two_claims_under_either_name(field: str) -> None:
    """RabbitMQ 4.0, after a consumer of higher priority took over: both entries say
    single_active, the queue's own field (``..._tag`` on 4.0, ``..._ctag`` on 3.10's quorum
    queues) names the new one, and the old one reads as waiting."""
    entries = [{"consumer_tag": t, "active": True, "activity_status": "single_active"}
               for t in ("old", "new")]
    queue = api.parse_queue(dict(QUORUM, consumer_details=entries, **{field: "new"}))
    assert queue.reported_single_active_tag == "new"
    assert queue.claiming_tags == ("old", "new")
    assert queue.settled_by_queue_tag
    assert queue.active_tags == ("new",)
    assert queue.single_active_consumer_tag == "new"
    assert (queue.activity_of("old"), queue.activity_of("new")) == ("waiting", "single_active")
    # a field naming neither claimant (stale) decides nothing
    stale = api.parse_queue(dict(QUORUM, consumer_details=entries, **{field: "gone"}))
    assert not stale.settled_by_queue_tag
    assert stale.active_tags == ("old", "new")
    assert stale.activity_of("old") == "single_active"
    # one claim needs no field to decide
    one = api.parse_queue(dict(QUORUM, **{field: "tag-b"}))
    assert not one.settled_by_queue_tag
    assert one.active_tags == ("tag-a",)


def test_how_a_consumer_is_listed() -> None:
    queue = api.parse_queue(QUORUM)
    assert (queue.activity_of("tag-a"), queue.activity_of("tag-b")) == ("single_active",
                                                                        "waiting")
    assert queue.activity_of("gone") is None
    listed = api.parse_queue({k: v for k, v in CLASSIC.items() if k != "consumer_details"})
    assert listed.activity_of("tag-old") == "single_active"  # the queue's own field
    assert listed.activity_of("tag-new") is None


def test_no_active_consumer_known() -> None:
    only_waiting = dict(QUORUM, consumer_details=[QUORUM["consumer_details"][0]])  # type: ignore[index]
    assert api.parse_queue(only_waiting).single_active_consumer_tag is None
    nobody = dict(QUORUM, consumer_details=[])
    assert api.parse_queue(nobody).single_active_consumer_tag is None
    # a classic queue listed without consumers: its own field is all there is
    listed = {k: v for k, v in CLASSIC.items() if k != "consumer_details"}
    assert api.parse_queue(listed).single_active_consumer_tag == "tag-old"


@pytest.mark.parametrize(
    ("answer", "complaint"),
    [
        ([], "a queue should be a JSON object"),
        ({"vhost": "/"}, "has no 'name' string"),
        (dict(QUORUM, consumer_details={"tag": 1}), "consumer_details should be a JSON list"),
        (dict(QUORUM, consumer_details=[{"active": True}]), "no 'consumer_tag'"),
        (dict(QUORUM, arguments=[1]), "arguments should be a JSON object"),
    ],
)
def test_an_answer_that_is_not_a_queue_is_refused(answer: Any, complaint: str) -> None:
    with pytest.raises(api.Malformed, match=complaint):
        api.parse_queue(answer)


def test_lists_read() -> None:
    policies = api.parse_policies([{"vhost": "/", "name": "ha-all", "pattern": "^legacy",
                                    "apply-to": "queues", "priority": 1,
                                    "definition": {"ha-mode": "all"}}])
    assert policies == [api.PolicyInfo("/", "ha-all", "^legacy", "queues", 1, {"ha-mode": "all"})]
    connections = api.parse_connections([
        {"name": "127.0.0.1:1 -> 127.0.0.1:2", "user": "u", "vhost": "/", "node": "n",
         "client_properties": {"connection_name": "orders-consumer", "product": "sac"}},
        {"name": "127.0.0.1:3 -> 127.0.0.1:2", "client_properties": {}}])
    assert [(c.name, c.client_name) for c in connections] == [
        ("127.0.0.1:1 -> 127.0.0.1:2", "orders-consumer"), ("127.0.0.1:3 -> 127.0.0.1:2", None)]
    channels = api.parse_channels([
        {"name": "c (1)", "number": 1, "prefetch_count": 0, "global_prefetch_count": 7,
         "consumer_count": 1, "vhost": "/", "connection_details": {"name": "c"},
         "messages_unacknowledged": 3},
        {"name": "d (1)", "connection_details": {"name": "d"}}])
    assert channels == [api.ChannelInfo("c (1)", "c", 1, 0, 7, 1, "/", 3),
                        api.ChannelInfo("d (1)", "d", 0, 0, 0, 0, None, 0)]
    bindings = api.parse_bindings([{"source": "", "routing_key": "orders", "arguments": {}},
                                   {"source": "ex", "routing_key": "k", "arguments": None}])
    assert bindings == [api.BindingInfo("", "orders", {}), api.BindingInfo("ex", "k", {})]
    assert [q.name for q in api.parse_queues([QUORUM, CLASSIC])] == ["orders", "legacy"]
    with pytest.raises(api.Malformed, match="the policies should be a JSON list"):
        api.parse_policies({"error": "x"})


def test_requests_quote_every_name() -> None:
    request = api.get_queue("/", "a queue/with odd?chars")
    assert request.path == "/api/queues/%2F/a%20queue%2Fwith%20odd%3Fchars"
    assert (request.method, request.call, request.idempotent) == ("GET", "queue", True)
    assert api.list_queues().path == "/api/queues"
    assert api.list_queues("prod").path == "/api/queues/prod"
    assert api.queue_bindings("/", "q").path == "/api/queues/%2F/q/bindings"
    assert api.list_policies().path == "/api/policies"
    close = api.close_connection("127.0.0.1:1 -> 127.0.0.1:2", "evicted")
    assert close.path == "/api/connections/127.0.0.1%3A1%20-%3E%20127.0.0.1%3A2"
    assert (close.method, close.reason, close.idempotent) == ("DELETE", "evicted", False)


def test_writes_carry_their_json() -> None:
    put = api.put_policy("/", "ha-all", "^legacy$", {"ha-mode": "all"}, priority=2)
    assert (put.method, put.path, put.idempotent) == ("PUT", "/api/policies/%2F/ha-all", False)
    assert put.body is not None
    assert json.loads(put.body) == {"pattern": "^legacy$", "definition": {"ha-mode": "all"},
                                    "priority": 2, "apply-to": "queues"}
    upstream = api.put_parameter("federation-upstream", "/", "east", {"uri": "amqp://x"})
    assert upstream.path == "/api/parameters/federation-upstream/%2F/east"
    assert upstream.body is not None
    assert json.loads(upstream.body)["value"] == {"uri": "amqp://x"}
    gone = api.delete_parameter("federation-upstream", "/", "east")
    assert (gone.method, gone.body) == ("DELETE", None)
    assert api.delete_policy("v", "p").path == "/api/policies/v/p"
    with pytest.raises(ValueError, match="apply_to must be one of"):
        api.put_policy("/", "p", ".*", {}, apply_to="bindings")


def test_endpoints() -> None:
    plain = api.parse_endpoint("http://admin:s%40cret@10.0.0.1:15672/")
    assert (plain.user, plain.password, plain.base) == ("admin", "s@cret", "http://10.0.0.1:15672")
    assert "s@cret" not in repr(plain)
    prefixed = api.parse_endpoint("https://a:b@rabbit.example/mq/")
    assert prefixed.base == "https://rabbit.example:15671/mq"
    assert api.parse_endpoint("http://a:b@[::1]:1").base == "http://[::1]:1"


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("", "non-empty string"),
        ("amqp://a:b@h:5672", "must start with http:// or https://"),
        ("http://a:b@:15672", "has no host"),
        ("http://a:b@h:notaport", "invalid port"),
        ("http://h:15672", "needs a user and a password"),
        ("http://a:topsecret@h:15672/?x=1", "must not have a query"),
    ],
)
def test_a_bad_url_is_named_without_its_password(url: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint) as caught:
        api.parse_endpoint(url)
    assert "topsecret" not in str(caught.value)
    assert caught.value.__cause__ is None


def test_answers_decoded_and_error_texts_in_one_line() -> None:
    assert api.decode(b"") is None
    assert api.decode(b'{"a": 1}') == {"a": 1}
    with pytest.raises(api.Malformed, match="not JSON"):
        api.decode(b"<html>proxy error</html>")
    assert api.answer_text(b'{"error":"Object Not Found","reason":"Not Found"}') == (
        "Object Not Found: Not Found")
    assert api.answer_text(b'{"error":"not_authorised","reason":"not_authorised"}') == (
        "not_authorised")
    assert api.answer_text(b"line one\nline   two") == "line one line two"
    assert api.answer_text(b"x" * 400).endswith("...")


def test_a_redirect_is_an_error_naming_its_target_without_a_password() -> None:
    assert [s for s in (200, 204, 301, 302, 303, 307, 308, 400) if api.is_redirect(s)] == [
        301, 302, 303, 307, 308]
    text = api.redirect_text("http://u:topsecret@evil.example:80/api/queues")
    assert "'http://u:***@evil.example:80/api/queues'" in text
    assert "topsecret" not in text
    assert "not followed" in text
    assert "no Location" in api.redirect_text(None)


# ---------------------------------------------------------------- the cluster, federation, shovels


def test_the_overview_read() -> None:
    assert api.parse_overview({
        "product_name": "RabbitMQ", "product_version": "4.0.5", "rabbitmq_version": "4.0.5",
        "erlang_version": "26.2.5", "node": "sac-1@localhost"}) == api.OverviewInfo(
        product="RabbitMQ", version="4.0.5", erlang_version="26.2.5", node="sac-1@localhost")
    older = api.parse_overview({"rabbitmq_version": "3.10.8"})  # no product fields
    assert (older.product, older.version, older.erlang_version, older.node) == (
        "RabbitMQ", "3.10.8", None, None)


def test_cluster_lists_read() -> None:
    assert api.parse_feature_flags([{"name": "khepri_db", "state": "enabled", "stability":
                                     "experimental", "desc": "..."}]) == [
        api.FeatureFlagInfo(name="khepri_db", state="enabled")]
    assert api.parse_nodes([{"name": "sac-1@localhost", "running": True},
                            {"name": "sac-2@localhost", "running": False},
                            {"name": "sac-3@localhost"}]) == [
        api.NodeInfo(name="sac-1@localhost", running=True),
        api.NodeInfo(name="sac-2@localhost", running=False),
        api.NodeInfo(name="sac-3@localhost", running=False)]
    links = api.parse_federation_links([
        {"node": "n", "queue": "orders", "upstream": "east", "status": "running",
         "type": "queue", "vhost": "/", "id": "1"},
        {"exchange": "events", "upstream": "west", "status": "error", "error": "..."}])
    assert links == [
        api.FederationLinkInfo(upstream="east", queue="orders", exchange=None, status="running"),
        api.FederationLinkInfo(upstream="west", queue=None, exchange="events", status="error")]
    assert api.parse_shovels([{"name": "move", "state": "running", "vhost": "/"},
                              {"name": "new"}]) == [
        api.ShovelInfo(name="move", state="running"), api.ShovelInfo(name="new", state=None)]
    assert api.parse_parameters([{"component": "shovel", "vhost": "/", "name": "move",
                                  "value": {"src-queue": "a"}}]) == [
        api.ParameterInfo(component="shovel", vhost="/", name="move",
                          value={"src-queue": "a"})]


def test_a_queue_reads_its_mirrors_and_its_online_members() -> None:
    mirrored = api.parse_queue(dict(CLASSIC, synchronised_slave_nodes=["sac-1@localhost"],
                                    slave_nodes=["sac-1@localhost", "sac-3@localhost"]))
    assert mirrored.synchronised_mirrors == ("sac-1@localhost",)
    assert mirrored.online is None  # a classic queue has no Raft members
    quorum = api.parse_queue(dict(QUORUM, online=["sac-1@localhost"]))
    assert (quorum.online, quorum.synchronised_mirrors) == (("sac-1@localhost",), None)
    assert api.parse_queue(QUORUM).online is None  # not in the answer: not known


def test_a_consumers_arguments_and_a_connections_tls_read() -> None:
    consumer = api.parse_consumer({"consumer_tag": "t", "arguments": {"x-priority": 5}})
    assert consumer.arguments == {"x-priority": 5}
    (tls, plain) = api.parse_connections([
        {"name": "a", "ssl": True, "peer_host": "10.0.0.7", "client_properties": {}},
        {"name": "b", "ssl": "yes"}])
    assert (tls.ssl, tls.peer_host) == (True, "10.0.0.7")
    assert (plain.ssl, plain.peer_host) == (None, None)  # not a boolean: not known


@pytest.mark.parametrize(
    ("parse", "answer", "complaint"),
    [
        (api.parse_overview, [], "the overview should be a JSON object"),
        (api.parse_overview, {"product_name": "RabbitMQ"}, "no 'product_version' or "
                                                           "'rabbitmq_version' string"),
        (api.parse_feature_flags, {"x": 1}, "the feature flags should be a JSON list"),
        (api.parse_feature_flags, [{"name": "khepri_db"}], "feature flag 'khepri_db' has no "
                                                           "'state' string"),
        (api.parse_nodes, [{"running": True}], "a node has no 'name' string"),
        (api.parse_nodes, ["sac-1"], "an entry of nodes should be a JSON object"),
        (api.parse_federation_links, [{"upstream": "east"}],
         "the federation link of 'east' has no 'status' string"),
        (api.parse_shovels, None, "the shovels should be a JSON list"),
        (api.parse_parameters, [{"name": "p", "vhost": "/"}],
         "parameter 'p' has no 'component' string"),
        (api.parse_queue, dict(QUORUM, online="sac-1"), "online members should be a JSON list"),
        (api.parse_queue, dict(CLASSIC, synchronised_slave_nodes=[1]),
         "synchronised_slave_nodes should be node names"),
        (api.parse_consumer, {"consumer_tag": "t", "arguments": [1]},
         "a consumer's arguments should be a JSON object"),
    ],
)
def test_a_malformed_answer_is_named(parse: Any, answer: Any, complaint: str) -> None:
    with pytest.raises(api.Malformed, match=complaint):
        parse(answer)


def test_the_new_requests() -> None:
    assert (api.get_overview().path, api.get_overview().call) == ("/api/overview", "overview")
    assert api.list_feature_flags().path == "/api/feature-flags"
    assert api.list_nodes().path == "/api/nodes?columns=name,running"
    assert api.list_federation_links().path == "/api/federation-links/%2F"
    assert api.list_federation_links(None).path == "/api/federation-links"
    assert api.list_shovels("blue/green").path == "/api/shovels/blue%2Fgreen"
    assert api.list_parameters("shovel").path == "/api/parameters/shovel"
    assert api.list_parameters("shovel", "/").path == "/api/parameters/shovel/%2F"
    restart = api.restart_shovel("/", "move a/b")
    assert (restart.method, restart.path, restart.idempotent) == (
        "DELETE", "/api/shovels/vhost/%2F/move%20a%2Fb/restart", False)
    put = api.put_queue("/", "orders", arguments={"x-queue-type": "quorum"})
    assert (put.method, put.path, put.idempotent) == ("PUT", "/api/queues/%2F/orders", False)
    assert put.body is not None
    assert json.loads(put.body) == {"durable": True, "auto_delete": False,
                                    "arguments": {"x-queue-type": "quorum"}}


def test_the_escape_hatch_builds_a_read_and_refuses_what_is_not_a_path() -> None:
    assert api.get_path("users").path == "/api/users"
    read = api.get_path("/connections", {"columns": "name,ssl"})
    assert (read.method, read.path, read.idempotent) == (
        "GET", "/api/connections?columns=name%2Cssl", True)
    for path, complaint in [("queues?columns=name", "pass the query as query="),
                            ("", "must name an API resource"),
                            ("../../etc", "must not climb out of /api/")]:
        with pytest.raises(ValueError, match=complaint):
            api.get_path(path)
