"""The fault proxy against a real echo server on loopback, driven by ``toxiproxy-python``
for every call that client makes and by plain HTTP (urllib) for the rest of the API."""

from __future__ import annotations

import contextlib
import json
import random
import socket
import socketserver
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from toxiproxy import Toxiproxy
from toxiproxy.exceptions import InvalidToxic, NotFound

from sac.chaos.proxy import ApiError, ProxyThread
from sac.chaos.proxy._model import parse_toxic, update_toxic
from sac.chaos.proxy._pacing import bandwidth_plan, latency_delay, slice_sizes
from sac.cli import build_parser

WAIT = 5.0  # seconds any single wait may take before the test fails


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        # A reset is what several tests cause on purpose: not an error of the echo server.
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            while data := self.request.recv(65536):
                self.request.sendall(data)


class _EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@pytest.fixture(scope="module")
def echo() -> Iterator[str]:
    server = _EchoServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def client(fault_proxy: ProxyThread) -> Iterator[Toxiproxy]:
    toxiproxy = Toxiproxy()
    toxiproxy.update_api_consumer("127.0.0.1", fault_proxy.port)
    toxiproxy.destroy_all()
    yield toxiproxy
    toxiproxy.destroy_all()


def _http(proxy: ProxyThread, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    headers = {} if body is None else {"Content-Type": "application/json"}
    request = urllib.request.Request(proxy.url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=WAIT) as answer:
            raw = answer.read()
            return answer.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def _connect(listen: str) -> socket.socket:
    host, port = listen.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=WAIT)
    return sock


def _receive(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _until_eof(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _echo_time(listen: str, payload: bytes) -> float:
    with _connect(listen) as sock:
        start = time.monotonic()
        sock.sendall(payload)
        assert _receive(sock, len(payload)) == payload
        return time.monotonic() - start


# --- the API through toxiproxy-python ---------------------------------------------------------

def test_client_creates_lists_and_destroys_proxies(client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="echo")
    assert proxy.listen.startswith("127.0.0.1:")
    assert not proxy.listen.endswith(":0")
    assert set(client.proxies()) == {"echo"}
    assert client.get_proxy("echo").upstream == echo
    assert b"version" in client.version()
    assert proxy.destroy()
    assert client.proxies() == {}


def test_client_toxics_and_reset(client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="echo")
    proxy.add_toxic(type="latency", attributes={"latency": 10})
    proxy.add_toxic(type="limit_data", stream="upstream", name="cap", toxicity=0.5,
                    attributes={"bytes": 10})
    toxics = proxy.toxics()
    assert set(toxics) == {"latency_downstream", "cap"}
    assert toxics["cap"].stream == "upstream"
    assert toxics["cap"].toxicity == 0.5
    assert toxics["latency_downstream"].attributes == {"latency": 10, "jitter": 0}
    assert proxy.destroy_toxic("cap")
    assert set(proxy.toxics()) == {"latency_downstream"}
    proxy.disable()
    assert client.reset()
    assert proxy.toxics() == {}
    assert client.get_proxy("echo").enabled is True


def test_client_errors(client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="echo")
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(type="earthquake")
    with pytest.raises(NotFound):
        proxy.destroy_toxic("nothing")


def test_client_populate(client: Toxiproxy, echo: str) -> None:
    made = client.populate([{"name": "a", "upstream": echo, "listen": "127.0.0.1:0"}])
    assert [p.name for p in made] == ["a"]
    assert set(client.proxies()) == {"a"}


# --- the rest of the API over plain HTTP ------------------------------------------------------

def test_http_errors_carry_status(fault_proxy: ProxyThread, client: Toxiproxy, echo: str) -> None:
    assert _http(fault_proxy, "GET", "/proxies/nope") == (
        404, {"error": "proxy not found", "status": 404})
    assert _http(fault_proxy, "POST", "/proxies", {"name": "p"})[0] == 400
    assert _http(fault_proxy, "POST", "/proxies", {"name": "p", "upstream": echo})[0] == 201
    status, body = _http(fault_proxy, "POST", "/proxies", {"name": "p", "upstream": echo})
    assert (status, body["error"]) == (409, "proxy already exists")
    assert _http(fault_proxy, "POST", "/proxies/p/toxics", {"type": "latency"})[0] == 200
    assert _http(fault_proxy, "POST", "/proxies/p/toxics", {"type": "latency"})[0] == 409
    status, body = _http(fault_proxy, "POST", "/proxies/p/toxics",
                         {"type": "latency", "stream": "sideways"})
    assert status == 400
    assert "stream" in body["error"]
    assert _http(fault_proxy, "GET", "/proxies/p/toxics/nope")[0] == 404
    assert _http(fault_proxy, "POST", "/proxies", {"name": "q", "upstream": echo,
                                                   "listen": "0.0.0.0:0"})[0] == 400


def test_http_proxy_and_toxic_crud(fault_proxy: ProxyThread, client: Toxiproxy, echo: str) -> None:
    status, proxy = _http(fault_proxy, "POST", "/proxies", {"name": "p", "upstream": echo})
    assert status == 201
    assert _http(fault_proxy, "GET", "/proxies/p") == (200, proxy)
    status, toxic = _http(fault_proxy, "POST", "/proxies/p/toxics",
                          {"type": "slicer", "attributes": {"average_size": 5}})
    assert toxic["attributes"] == {"average_size": 5, "size_variation": 0, "delay": 0}
    status, toxic = _http(fault_proxy, "PATCH", "/proxies/p/toxics/slicer_downstream",
                          {"attributes": {"delay": 7}, "toxicity": 0.25})
    assert status == 200
    assert toxic["attributes"] == {"average_size": 5, "size_variation": 0, "delay": 7}
    assert toxic["toxicity"] == 0.25
    assert _http(fault_proxy, "GET", "/proxies/p/toxics/slicer_downstream") == (200, toxic)
    assert _http(fault_proxy, "GET", "/proxies/p")[1]["toxics"] == [toxic]
    assert _http(fault_proxy, "DELETE", "/proxies/p/toxics/slicer_downstream") == (204, None)
    status, answer = _http(fault_proxy, "POST", "/populate", [
        {"name": "p", "upstream": echo},  # identical: left alone
        {"name": "r", "upstream": echo},
    ])
    assert status == 201
    assert [p["name"] for p in answer["proxies"]] == ["p", "r"]
    assert answer["proxies"][0]["listen"] == proxy["listen"]
    assert _http(fault_proxy, "GET", "/version")[1]["version"]
    assert _http(fault_proxy, "DELETE", "/proxies/r") == (204, None)
    assert _http(fault_proxy, "GET", "/proxies/r")[0] == 404


# --- the data path ----------------------------------------------------------------------------

def test_bytes_are_relayed_both_ways(client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="echo")
    payload = random.Random(1).randbytes(200_000)
    with _connect(proxy.listen) as sock:
        sock.sendall(payload)
        assert _receive(sock, len(payload)) == payload
        sock.shutdown(socket.SHUT_WR)
        assert _until_eof(sock) == b""


def test_disable_closes_connections_and_enable_listens_again(
        client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="echo")
    with _connect(proxy.listen) as sock:
        sock.sendall(b"hi")
        assert _receive(sock, 2) == b"hi"
        proxy.disable()
        assert _until_eof(sock) == b""
    with pytest.raises(ConnectionRefusedError):
        _connect(proxy.listen)
    proxy.enable()
    assert _echo_time(proxy.listen, b"back") >= 0


def test_a_client_that_stopped_reading_does_not_hold_up_a_delete(
        fault_proxy: ProxyThread, client: Toxiproxy) -> None:
    """A frozen client (SIGSTOP: it reads nothing more) under an upstream that keeps
    writing: the proxy's buffers to it fill up and a clean close could never flush them. A
    delete must still end its connections, and answer, within its grace of 2 s."""
    stop = threading.Event()
    sent = [0]

    class _Firehose(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            with contextlib.suppress(OSError):
                while not stop.is_set():
                    self.request.sendall(b"x" * 65536)
                    sent[0] += 1

    def stalled() -> bool:
        """Every buffer between the upstream and the client is full: nothing moved for
        half a second."""
        before = sent[0]
        time.sleep(0.5)
        return sent[0] == before

    with _EchoServer(("127.0.0.1", 0), _Firehose) as upstream:
        threading.Thread(target=upstream.serve_forever, daemon=True).start()
        proxy = client.create(upstream=f"127.0.0.1:{upstream.server_address[1]}",
                              name="firehose")
        try:
            with _connect(proxy.listen) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                assert sock.recv(1)  # the flow is on; from now on this client reads nothing
                deadline = time.monotonic() + 30
                while not stalled():
                    assert time.monotonic() < deadline, "the flow never stalled"
                started = time.monotonic()
                status, _ = _http(fault_proxy, "DELETE", "/proxies/firehose")
                assert status == 204
                assert time.monotonic() - started < WAIT
        finally:
            stop.set()
            upstream.shutdown()


@pytest.mark.parametrize("toxic", [
    {"type": "latency", "attributes": {"latency": 600_000}},
    {"type": "slow_close", "stream": "upstream", "attributes": {"delay": 600_000}},
    {"type": "reset_peer", "attributes": {"timeout": 600_000}},
], ids=lambda toxic: toxic["type"])
def test_a_toxic_holding_a_chunk_does_not_hold_up_a_delete(
        fault_proxy: ProxyThread, client: Toxiproxy, echo: str, toxic: dict[str, Any]) -> None:
    """A toxic in the middle of its wait (ten minutes of latency on a chunk, a close
    delayed as long): a delete still ends the connection and answers within its grace, as
    Toxiproxy's does, rather than when the wait is over."""
    proxy = client.create(upstream=echo, name="held")
    proxy.add_toxic(**toxic)
    with _connect(proxy.listen) as sock:
        sock.sendall(b"held")
        if toxic["type"] == "slow_close":
            assert _receive(sock, 4) == b"held"
            sock.shutdown(socket.SHUT_WR)
        started = time.monotonic()
        status, _ = _http(fault_proxy, "DELETE", "/proxies/held")
        assert status == 204
        assert time.monotonic() - started < WAIT
        assert _until_eof(sock) == b""


def test_disable_also_ends_connections_still_dialing_the_upstream(client: Toxiproxy) -> None:
    """An upstream whose accept queue is full drops SYNs, so the proxy's dial hangs; a
    disable must end that client's connection at once, and the dial must never turn into a
    relay once the upstream accepts again."""
    upstream = socket.socket()
    upstream.bind(("127.0.0.1", 0))
    upstream.listen(0)  # Linux queues one connection, then drops SYNs
    address = upstream.getsockname()
    queued: list[socket.socket] = []
    try:
        queued.append(socket.create_connection(address, timeout=WAIT))
        proxy = client.create(upstream=f"127.0.0.1:{address[1]}", name="stuck")
        with _connect(proxy.listen) as sock:
            sock.sendall(b"hello")
            proxy.disable()
            started = time.monotonic()
            assert _until_eof(sock) == b""
            assert time.monotonic() - started < 1.0  # not after the dial's SYN retries
        upstream.settimeout(WAIT)
        accepted = []
        for _ in range(len(queued) + 1):  # the one that filled the queue, and ours if any
            try:
                accepted.append(upstream.accept()[0])
            except TimeoutError:
                break
        for conn in accepted:
            conn.settimeout(0.5)
            with contextlib.suppress(TimeoutError):  # the queue filler sends nothing either
                assert conn.recv(16) == b""  # nothing relayed from a stopped proxy
            conn.close()
    finally:
        for conn in queued:
            conn.close()
        upstream.close()


def test_latency_delays_each_chunk_from_its_own_arrival(client: Toxiproxy, echo: str) -> None:
    """Two writes 100 ms apart through 400 ms of latency (downstream): each echo comes back
    about 400 ms after its own write, not the second one after both delays (800 ms)."""
    proxy = client.create(upstream=echo, name="echo")
    proxy.add_toxic(type="latency", attributes={"latency": 400, "jitter": 0})
    with _connect(proxy.listen) as sock:
        start = time.monotonic()
        sock.sendall(b"one")
        time.sleep(0.1)  # the workload's spacing, not a wait for an event
        sock.sendall(b"two")
        assert _receive(sock, 3) == b"one"
        first = time.monotonic() - start
        assert _receive(sock, 3) == b"two"
        second = time.monotonic() - start
    assert 0.4 <= first < 0.55
    assert 0.5 <= second < 0.65  # 100 ms + 400 ms, not 400 + 400


def test_latency_adds_at_least_the_delay(client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="echo")
    proxy.add_toxic(type="latency", attributes={"latency": 200, "jitter": 0})
    assert _echo_time(proxy.listen, b"ping") >= 0.2
    proxy.add_toxic(type="latency", stream="upstream", attributes={"latency": 100})
    assert _echo_time(proxy.listen, b"ping") >= 0.3


def test_timeout_zero_is_a_black_hole_until_removed(client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="echo")
    with _connect(proxy.listen) as sock:
        proxy.add_toxic(type="timeout", attributes={"timeout": 0})
        sock.sendall(b"lost")
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(10)  # nothing comes back, and the connection stays open
        sock.settimeout(WAIT)
        proxy.destroy_toxic("timeout_downstream")
        assert _until_eof(sock) == b""


def test_timeout_closes_after_its_delay(client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="echo")
    proxy.add_toxic(type="timeout", attributes={"timeout": 100})
    with _connect(proxy.listen) as sock:
        start = time.monotonic()
        sock.sendall(b"lost")
        assert _until_eof(sock) == b""
        assert time.monotonic() - start >= 0.05


def test_reset_peer_resets_the_client(client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="echo")
    proxy.add_toxic(type="reset_peer", stream="upstream", attributes={"timeout": 0})
    with _connect(proxy.listen) as sock:
        sock.sendall(b"boom")
        with pytest.raises(ConnectionResetError):
            _until_eof(sock)


def test_limit_data_closes_after_n_bytes(client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="echo")
    proxy.add_toxic(type="limit_data", attributes={"bytes": 10})
    with _connect(proxy.listen) as sock:
        sock.sendall(b"x" * 100)
        assert _until_eof(sock) == b"x" * 10


def test_slicer_delivers_the_same_bytes(client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="echo")
    proxy.add_toxic(type="slicer",
                    attributes={"average_size": 10, "size_variation": 5, "delay": 100})
    payload = random.Random(2).randbytes(5000)
    with _connect(proxy.listen) as sock:
        sock.sendall(payload)
        assert _receive(sock, len(payload)) == payload


def test_bandwidth_takes_at_least_size_over_rate(client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="echo")
    proxy.add_toxic(type="bandwidth", attributes={"rate": 50})  # 50 KB/s
    assert _echo_time(proxy.listen, b"b" * 20_000) >= 20_000 / 50_000


def test_slow_close_delays_the_close(client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="echo")
    proxy.add_toxic(type="slow_close", attributes={"delay": 200})
    with _connect(proxy.listen) as sock:
        sock.sendall(b"bye")
        assert _receive(sock, 3) == b"bye"
        start = time.monotonic()
        sock.shutdown(socket.SHUT_WR)
        assert _until_eof(sock) == b""
        assert time.monotonic() - start >= 0.2


def test_toxicity_zero_never_applies(client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="echo")
    proxy.add_toxic(type="limit_data", toxicity=0.0, attributes={"bytes": 1})
    assert _echo_time(proxy.listen, b"whole") >= 0


# --- pure parts -------------------------------------------------------------------------------

def test_slice_sizes_cover_the_chunk() -> None:
    rng = random.Random(3)
    sizes = slice_sizes(1000, 10, 5, rng)
    assert sum(sizes) == 1000
    assert all(1 <= s <= 15 for s in sizes)
    assert slice_sizes(7, 0, 0, rng) == [7]


def test_bandwidth_plan_waits_size_over_rate() -> None:
    plan = bandwidth_plan(12_345, 10)
    assert sum(size for size, _ in plan) == 12_345
    assert sum(wait for _, wait in plan) == pytest.approx(12_345 / 10_000)
    assert bandwidth_plan(5, 0) == [(5, 0.0)]


def test_latency_delay_stays_within_jitter() -> None:
    rng = random.Random(4)
    assert all(0.09 <= latency_delay(100, 10, rng) <= 0.11 for _ in range(100))
    assert latency_delay(0, 50, rng) >= 0


@pytest.mark.parametrize("body", [
    {"type": "latency", "attributes": {"latency": -1}},
    {"type": "latency", "attributes": {"latnecy": 5}},
    {"type": "latency", "attributes": {"latency": "5"}},
    {"type": "latency", "toxicity": 2},
    {"type": "nope"},
    [],
])
def test_bad_toxics_are_refused(body: Any) -> None:
    with pytest.raises(ApiError) as caught:
        parse_toxic(body)
    assert caught.value.status == 400


def test_toxic_update_merges_attributes() -> None:
    toxic = parse_toxic({"type": "latency", "attributes": {"latency": 5}})
    updated = update_toxic(toxic, {"attributes": {"jitter": 2}})
    assert updated.attributes == {"latency": 5, "jitter": 2}
    assert updated.serial != toxic.serial
    with pytest.raises(ApiError):
        update_toxic(toxic, {"type": "timeout"})


def test_cli_has_proxy_serve() -> None:
    args = build_parser().parse_args(["proxy", "serve", "--port", "9999"])
    assert (args.host, args.port) == ("127.0.0.1", 9999)
