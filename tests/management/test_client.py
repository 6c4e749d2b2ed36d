"""sac.sdk.Management against the session cluster's real management API (RabbitMQ 3.10)."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import socket
import threading
import time
import traceback
import urllib.parse
from collections.abc import Iterator

import pika
import pika.exceptions
import pytest

from sac.sdk import (
    AsyncManagement,
    Backoff,
    Management,
    ManagementError,
    ManagementNotFound,
    ManagementRefused,
    ManagementSettings,
    ManagementUnreachable,
)
from sac.server import LocalCluster
from tests.helpers import wait_until

LAG = 5.0
"""Generous bound on the API's lag here (1 s statistics interval: measured 0.1-1.0 s)."""


def free_port() -> int:
    """A loopback port nothing listens on (a node that is down)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def amqp(cluster: LocalCluster, node: int = 0, name: str | None = None) -> pika.BlockingConnection:
    params = pika.URLParameters(cluster.urls()[node])
    if name is not None:
        params.client_properties = {"connection_name": name}
    return pika.BlockingConnection(params)


@pytest.mark.parametrize("queue_type", ["quorum", "classic"])
def test_the_single_active_consumer_is_read_for_both_queue_types(
    cluster: LocalCluster, management: Management, queue_name: str, queue_type: str
) -> None:
    first, second = amqp(cluster, 0), amqp(cluster, 1)
    try:
        channel = first.channel()
        channel.queue_declare(queue_name, durable=True, arguments={
            "x-queue-type": queue_type, "x-single-active-consumer": True})
        channel.basic_consume(queue_name, lambda *_: None, consumer_tag="tag-a")
        second.channel().basic_consume(queue_name, lambda *_: None, consumer_tag="tag-b")
        queue = wait_until(lambda: (q := management.queue(queue_name)).consumer_count == 2 and q,
                           LAG, "both consumers listed")
        assert (queue.type, queue.single_active) == (queue_type, True)
        assert queue.single_active_consumer_tag == "tag-a"
        assert {c.tag: c.activity_status for c in queue.consumers} == {
            "tag-a": "single_active", "tag-b": "waiting"}
        first.close()
        wait_until(lambda: management.queue(queue_name).single_active_consumer_tag == "tag-b",
                   LAG, "the waiting consumer named active")
        second.channel().queue_delete(queue_name)
    finally:
        for connection in (first, second):
            with contextlib.suppress(pika.exceptions.AMQPError):
                connection.close()


def test_queues_lists_every_queue(management: Management, cluster: LocalCluster,
                                  queue_name: str) -> None:
    with contextlib.closing(amqp(cluster)) as connection:
        connection.channel().queue_declare(queue_name, durable=False, exclusive=True)
        listed = wait_until(lambda: [q for q in management.queues("/") if q.name == queue_name],
                            LAG, "the queue listed")
        assert (listed[0].exclusive, listed[0].durable, listed[0].type) == (True, False, "classic")
        assert any(q.name == queue_name for q in management.queues())  # every vhost


def test_a_missing_queue_is_named(management: Management, queue_name: str) -> None:
    with pytest.raises(ManagementNotFound) as caught:
        management.queue(queue_name)
    error = caught.value
    assert (error.call, error.method, error.status) == ("queue", "GET", 404)
    assert error.path == f"/api/queues/%2F/{urllib.parse.quote(queue_name, safe='')}"
    assert str(error).startswith(f"management API queue(): GET {error.path} on http://")
    assert str(error).endswith("answered 404: Object Not Found: Not Found")
    assert error.__cause__ is None  # no urllib traceback
    assert error.__context__ is None


def test_a_wrong_password_is_refused_and_never_shown(cluster: LocalCluster) -> None:
    url = cluster.management_urls()[0]
    user = urllib.parse.urlsplit(url).username
    wrong = url.replace(f"{user}:", f"{user}:not-the-{user}-password-x", 1)
    client = Management(ManagementSettings(wrong))
    started = time.monotonic()
    with pytest.raises(ManagementRefused) as caught:
        client.policies()
    assert time.monotonic() - started < 2  # never retried
    assert caught.value.status == 401
    shown = "".join(traceback.format_exception(caught.value)) + repr(client)
    assert "password-x" not in shown
    assert cluster.credentials.password not in shown


def test_no_node_answering_is_retried_boundedly_then_named() -> None:
    dead = [f"http://u:p@127.0.0.1:{free_port()}" for _ in range(2)]
    client = Management(ManagementSettings(
        dead, retry=Backoff(initial=0.05, maximum=0.2, max_attempts=3, max_elapsed=2.0)))
    started = time.monotonic()
    with pytest.raises(ManagementUnreachable) as caught:
        client.queue("orders")
    assert time.monotonic() - started < 3
    error = caught.value
    assert error.status is None
    assert "Connection refused" in error.answer
    assert "gave up after 4 attempts" in str(error)  # the first and 3 retries, each on both
    assert isinstance(error.__cause__, ManagementUnreachable)  # the last attempt's own error


def test_a_dead_node_is_passed_over(cluster: LocalCluster, queue_name: str) -> None:
    dead = f"http://u:p@127.0.0.1:{free_port()}"
    client = Management(ManagementSettings([dead, *cluster.management_urls()]))
    with contextlib.closing(amqp(cluster)) as connection:
        connection.channel().queue_declare(queue_name, durable=True)
        assert client.queue(queue_name).name == queue_name
        connection.channel().queue_delete(queue_name)


def test_a_policy_is_put_applied_and_deleted(
    cluster: LocalCluster, management: Management, queue_name: str
) -> None:
    policy = f"p-{queue_name}"
    with contextlib.closing(amqp(cluster)) as connection:
        connection.channel().queue_declare(queue_name, durable=True,
                                           arguments={"x-queue-type": "classic"})
        management.put_policy(policy, f"^{queue_name}$", {"max-length": 10}, priority=3)
        try:
            found = [p for p in management.policies("/") if p.name == policy]
            assert [(p.pattern, p.priority, p.apply_to, dict(p.definition)) for p in found] == [
                (f"^{queue_name}$", 3, "queues", {"max-length": 10})]
            applied = wait_until(
                lambda: (q := management.queue(queue_name)).policy == policy and q, LAG,
                "the policy applied")
            assert applied.effective_policy == {"max-length": 10}
        finally:
            management.delete_policy(policy)
        with pytest.raises(ManagementNotFound, match="delete_policy"):
            management.delete_policy(policy)
        connection.channel().queue_delete(queue_name)


def test_a_runtime_parameter_is_put_and_deleted(
    cluster: LocalCluster, management: Management, queue_name: str
) -> None:
    name = f"up-{queue_name}"
    management.put_parameter("federation-upstream", name, {"uri": cluster.urls()[1]})
    management.delete_parameter("federation-upstream", name)  # 404 had the put not worked
    with pytest.raises(ManagementNotFound):
        management.delete_parameter("federation-upstream", name)
    with pytest.raises(ManagementError) as caught:  # the broker's validation, named
        management.put_parameter("federation-upstream", name, {"uri": 5})
    assert caught.value.status == 400
    assert "put_parameter" in str(caught.value)


def test_connections_are_closed_by_their_client_name(
    cluster: LocalCluster, management: Management, queue_name: str
) -> None:
    name = f"evict-{queue_name}"
    victim, bystander = amqp(cluster, 0, name), amqp(cluster, 1, f"keep-{queue_name}")
    try:
        wait_until(lambda: any(c.client_name == name for c in management.connections()), LAG,
                   "the connection listed")
        report = management.close_connections(name, reason="replaced by a newer leader")
        assert [c.client_name for c in report.closed] == [name]
        assert report.gone == ()
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            victim.sleep(LAG)  # pika reads the broker's connection.close meanwhile
        assert closed.value.reply_code == 320
        assert "replaced by a newer leader" in closed.value.reply_text
        bystander.process_data_events(time_limit=0.1)
        assert bystander.is_open
        assert management.close_connections(name, reason="again").closed == ()
    finally:
        for connection in (victim, bystander):
            with contextlib.suppress(pika.exceptions.AMQPError):
                connection.close()


@pytest.mark.rabbitmq("3.10")  # 4.0: deprecated (logged), and the channel listed without it
def test_channels_show_a_global_prefetch(
    cluster: LocalCluster, management: Management, queue_name: str
) -> None:
    name = f"qos-{queue_name}"
    with contextlib.closing(amqp(cluster, 0, name)) as connection:
        channel = connection.channel()
        channel.queue_declare(queue_name, durable=True, arguments={"x-queue-type": "classic"})
        channel.basic_qos(prefetch_count=7, global_qos=True)
        channel.basic_consume(queue_name, lambda *_: None)
        ours = wait_until(lambda: [c for c in management.connections() if c.client_name == name],
                          LAG, "the connection listed")[0]
        seen = wait_until(lambda: [c for c in management.channels()
                                   if c.connection == ours.name and c.consumer_count == 1],
                          LAG, "its channel listed with its consumer")
        assert (seen[0].global_prefetch_count, seen[0].prefetch_count) == (7, 0)
        channel.queue_delete(queue_name)


def test_channels_show_their_unacked_deliveries(
    cluster: LocalCluster, management: Management, queue_name: str
) -> None:
    """What the federation scenario waits on: a quorum queue's own count of unacked
    messages is refreshed on its leader's tick, the channel's within a statistics
    interval."""
    name = f"unacked-{queue_name}"
    with contextlib.closing(amqp(cluster, 0, name)) as connection:
        channel = connection.channel()
        channel.queue_declare(queue_name, durable=True, arguments={"x-queue-type": "quorum"})
        for n in range(3):
            channel.basic_publish("", queue_name, str(n).encode())
        channel.basic_qos(prefetch_count=10)
        held: list[int] = []
        channel.basic_consume(queue_name, lambda ch, method, *_: held.append(method.delivery_tag))
        wait_until(lambda: (connection.process_data_events(0.05), len(held) == 3)[1], LAG,
                   "the three deliveries")
        ours = wait_until(lambda: [c for c in management.connections() if c.client_name == name],
                          LAG, "the connection listed")[0]
        seen = wait_until(lambda: [c for c in management.channels() if c.connection == ours.name
                                   and c.messages_unacknowledged == 3],
                          LAG, "its channel listed with three unacked")
        assert seen[0].consumer_count == 1
        channel.basic_ack(held[-1], multiple=True)
        wait_until(lambda: [c for c in management.channels() if c.connection == ours.name
                            and c.messages_unacknowledged == 0],
                   LAG, "its channel listed with none unacked once acked")
        channel.queue_delete(queue_name)


def test_the_asyncio_face(cluster: LocalCluster, management_settings: ManagementSettings,
                          queue_name: str) -> None:
    api = AsyncManagement(management_settings)
    with contextlib.closing(amqp(cluster)) as connection:
        connection.channel().queue_declare(queue_name, durable=True)

        async def both() -> tuple[str, bool]:
            queue = await api.queue(queue_name)
            listed = await api.queues("/")
            return queue.name, any(q.name == queue_name for q in listed)

        assert asyncio.run(both()) == (queue_name, True)
        with pytest.raises(ManagementNotFound):
            asyncio.run(api.queue(f"{queue_name}-missing"))
        connection.channel().queue_delete(queue_name)


# ---------------------------------------------------------------- answers a broker seldom gives


class _Busy(http.server.BaseHTTPRequestHandler):
    """Answers every request 503, as a node that is starting (or a proxy) does."""

    hits: list[str]

    def _busy(self) -> None:
        self.hits.append(self.command)
        body = b'{"error":"service_unavailable","reason":"node starting"}'
        self.send_response(503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = do_DELETE = _busy

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[int]:
    """A local HTTP server on loopback answering with ``handler``: its port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def busy_node() -> Iterator[tuple[str, list[str]]]:
    hits: list[str] = []
    with serving(type("Handler", (_Busy,), {"hits": hits})) as port:
        yield f"http://u:p@127.0.0.1:{port}", hits


def test_a_read_is_retried_on_5xx_a_write_never(busy_node: tuple[str, list[str]]) -> None:
    url, hits = busy_node
    client = Management(ManagementSettings(
        url, retry=Backoff(initial=0.01, maximum=0.05, max_attempts=2, max_elapsed=5.0)))
    with pytest.raises(ManagementUnreachable) as read:
        client.queues()
    assert hits == ["GET"] * 3  # the first try and two retries
    assert read.value.status == 503
    assert "service_unavailable: node starting" in str(read.value)
    hits.clear()
    with pytest.raises(ManagementUnreachable) as write:
        client.put_policy("p", ".*", {"max-length": 1})
    assert hits == ["PUT"]  # it may have been applied: never sent again
    assert str(write.value).startswith("management API put_policy(): PUT /api/policies/%2F/p")


class _Elsewhere(http.server.BaseHTTPRequestHandler):
    """Records the headers of every request that reaches it, answering ``[]``: the host a
    redirect names."""

    seen: list[dict[str, str]]

    def _record(self) -> None:
        self.seen.append(dict(self.headers))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"[]")

    do_GET = do_PUT = do_DELETE = _record

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Redirecting(http.server.BaseHTTPRequestHandler):
    """Answers every request with ``status`` and a Location on another host."""

    status: int
    location: str

    def _redirect(self) -> None:
        self.send_response(self.status)
        self.send_header("Location", self.location + self.path)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_PUT = do_DELETE = _redirect

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_credentials_never_follow_a_redirect(status: int) -> None:
    """A node that answers 3xx to another host: the client does not go there, so no
    Authorization header reaches it; the call fails naming where the redirect pointed."""
    seen: list[dict[str, str]] = []
    with serving(type("Handler", (_Elsewhere,), {"seen": seen})) as elsewhere:
        location = f"http://127.0.0.1:{elsewhere}"
        handler = type("Handler", (_Redirecting,), {"status": status, "location": location})
        with serving(handler) as port:
            client = Management(ManagementSettings(
                f"http://admin:s3cret@127.0.0.1:{port}",
                retry=Backoff(initial=0.01, maximum=0.05, max_attempts=2, max_elapsed=5.0)))
            failures: list[ManagementError | None] = []
            for call in (client.queues, lambda: client.delete_policy("p"),
                         lambda: client.put_policy("p", ".*", {"max-length": 1})):
                try:
                    call()
                    failures.append(None)
                except ManagementError as exc:
                    failures.append(exc)
    assert [h["Authorization"] for h in seen if "Authorization" in h] == []
    assert seen == []
    for failure in failures:
        assert failure is not None
        assert failure.status == status
        assert f"a redirect to '{location}/api/" in str(failure)
        assert "s3cret" not in str(failure)


def test_exchanges_bindings_and_queue_deletion(
    cluster: LocalCluster, management: Management, queue_name: str
) -> None:
    exchange = f"x-{queue_name}"
    with contextlib.closing(amqp(cluster)) as connection:
        channel = connection.channel()
        channel.queue_declare(queue_name, durable=True)
        management.put_exchange(exchange, "topic")
        management.bind_queue(queue_name, exchange, "orders.*", {"x-note": "kept"})
        bindings = management.queue_bindings(queue_name)
        assert [(b.source, b.routing_key) for b in bindings] == [
            ("", queue_name), (exchange, "orders.*")]
        ours = bindings[1]
        assert ours.arguments == {"x-note": "kept"}
        assert ours.properties_key
        channel.confirm_delivery()  # the message is in the queue once basic_publish returns
        channel.basic_publish(exchange, "orders.new", b"routed", mandatory=True)
        with pytest.raises(ManagementError) as not_empty:
            management.delete_queue(queue_name)  # only an empty one, by default
        assert not_empty.value.status == 400
        management.unbind_queue(queue_name, ours)
        assert [b.source for b in management.queue_bindings(queue_name)] == [""]
        management.delete_exchange(exchange)
        management.delete_queue(queue_name, if_empty=False)
        with pytest.raises(ManagementNotFound):
            management.queue(queue_name)
        # A quorum queue refuses "if empty" whatever it holds: the error says what to do.
        channel.queue_declare(queue_name, durable=True, arguments={"x-queue-type": "quorum"})
        with pytest.raises(ManagementError) as quorum:
            management.delete_queue(queue_name)
        assert "quorum queue" in str(quorum.value)
        assert f"delete_queue({queue_name!r}, if_empty=False)" in str(quorum.value)
        management.delete_queue(queue_name, if_empty=False)
