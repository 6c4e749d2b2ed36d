"""The fault proxy's API answers only a client on this host that means to talk to it, and
no client can wedge it: against the real server (``ProxyThread``, and ``sac proxy serve``
in a process of its own), over raw HTTP where a well-behaved client could not send what is
tested."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sac.chaos.proxy import ApiLimits, ProxyThread
from tests.helpers import wait_until

WAIT = 5.0  # seconds any single wait may take before the test fails
QUICK = ApiLimits(idle_timeout=0.5, request_timeout=0.5, max_connections=2)


def _request(port: int, method: str, path: str, body: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """One request on a connection of its own: the status and the decoded JSON answer."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        answer = conn.getresponse()
        raw = answer.read()
        return answer.status, json.loads(raw) if raw else None
    finally:
        conn.close()


JSON = {"Content-Type": "application/json"}


def _create(port: int, name: str, headers: dict[str, str]) -> tuple[int, Any]:
    body = json.dumps({"name": name, "upstream": "127.0.0.1:9"}).encode()
    return _request(port, "POST", "/proxies", body, headers)


def _proxies(port: int) -> set[str]:
    status, answer = _request(port, "GET", "/proxies")
    assert status == 200
    return set(answer)


@pytest.fixture
def api(fault_proxy: ProxyThread) -> Iterator[int]:
    yield fault_proxy.port
    for name in _proxies(fault_proxy.port):
        assert _request(fault_proxy.port, "DELETE", f"/proxies/{name}")[0] == 204


# --- who may ask ------------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["attacker.example:8474", "attacker.example",
                                  "127.0.0.1.attacker.example", "10.0.0.1:8474",
                                  "127.0.0.1:8474@attacker.example", "[::1]:x"])
def test_a_request_addressed_to_another_host_is_refused(api: int, host: str) -> None:
    """DNS rebinding: a page at attacker.example whose name now resolves to 127.0.0.1 sends
    its own Host. The API refuses it and creates nothing."""
    status, answer = _create(api, "rebound", {**JSON, "Host": host})
    assert status == 403, answer
    assert "not a loopback address" in answer["error"]
    assert _proxies(api) == set()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost:8474", "[::1]:8474", "127.0.0.2:1"])
def test_loopback_hosts_are_served(api: int, host: str) -> None:
    assert _create(api, "local", {**JSON, "Host": host})[0] == 201
    assert _proxies(api) == {"local"}


@pytest.mark.parametrize("origin", ["https://attacker.example", "null", "http://10.0.0.1:8474",
                                    "file://", "http://localhost.attacker.example"])
def test_a_web_page_cannot_drive_the_api(api: int, origin: str) -> None:
    """A page in the user's browser posting to http://127.0.0.1:8474 (fetch with
    ``mode: no-cors``, or a form): the Host is loopback, the Origin is not."""
    status, answer = _create(api, "from-a-page", {**JSON, "Origin": origin})
    assert status == 403, answer
    assert "refuses requests made by web pages" in answer["error"]
    status, answer = _request(api, "POST", "/reset", headers={"Origin": origin})
    assert status == 403, answer
    assert _proxies(api) == set()


def test_a_page_served_from_loopback_may(api: int) -> None:
    assert _create(api, "local", {**JSON, "Origin": f"http://127.0.0.1:{api}"})[0] == 201


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", "application/jsonx"])
def test_a_write_whose_body_is_not_declared_json_is_refused(
        api: int, content_type: str | None) -> None:
    headers = {} if content_type is None else {"Content-Type": content_type}
    status, answer = _create(api, "typed", headers)
    assert status == 415, answer
    assert "application/json" in answer["error"]
    assert _proxies(api) == set()


def test_json_with_parameters_and_bodiless_writes_are_served(api: int) -> None:
    """What Toxiproxy clients send: ``json=`` bodies (``application/json``, a charset
    allowed), and ``/reset`` and ``DELETE`` without a body or a type."""
    assert _create(api, "typed", {"Content-Type": "Application/JSON; charset=utf-8"})[0] == 201
    assert _request(api, "POST", "/reset") == (204, None)
    assert _request(api, "DELETE", "/proxies/typed") == (204, None)


# --- what may be asked ------------------------------------------------------------------------

@pytest.mark.parametrize("body", [
    b"[" * 100_000 + b"]" * 100_000,   # the parser's own recursion limit
    b'{"name": "p", "upstream": "127.0.0.1:9", "x": ' + b"[" * 17 + b"]" * 17 + b"}",
    b'{"name": "\xff\xfe"}',          # not UTF-8
    b'{"name": "p", "upstream": "127.0.0.1:9", "enabled": ' + b"9" * 5000 + b"}",
    b'{"name": ',
])
def test_bad_json_is_answered_400(api: int, body: bytes) -> None:
    status, answer = _request(api, "POST", "/proxies", body, JSON)
    assert status == 400, answer
    assert answer["status"] == 400
    assert _request(api, "GET", "/version")[0] == 200


def test_a_body_over_the_cap_is_refused_unread(api: int) -> None:
    body = json.dumps("x" * ApiLimits().max_body).encode()
    status, answer = _request(api, "POST", "/proxies", body, JSON)
    assert status == 413, answer
    assert "too large" in answer["error"]


@pytest.mark.parametrize("length", ["\u00b2", "9" * 5000, "-1", "1e3"])
def test_a_bad_content_length_is_answered_400(api: int, length: str) -> None:
    with socket.create_connection(("127.0.0.1", api), timeout=WAIT) as sock:
        sock.sendall(f"POST /proxies HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {length}\r\n"
                     "Content-Type: application/json\r\n\r\n".encode("latin-1"))
        answer = _until_eof(sock)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert b"bad Content-Length" in answer


# --- how long and how many --------------------------------------------------------------------

def _until_eof(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


@pytest.fixture
def quick() -> Iterator[ProxyThread]:
    with ProxyThread(limits=QUICK) as running:
        yield running


def test_a_request_trickled_byte_by_byte_is_cut_off(quick: ProxyThread) -> None:
    """Slowloris: a byte every 100 ms keeps every read short, but the whole request must
    arrive within ``request_timeout`` (0.5 s): 408, and the connection is closed."""
    head = b"POST /proxies HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 1000
    with socket.create_connection(("127.0.0.1", quick.port), timeout=WAIT) as sock:
        started = time.monotonic()
        answer = b""
        for byte in head:
            try:
                sock.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                break
            sock.settimeout(0.1)  # the trickle's pace: wait for an answer at most this long
            try:
                answer = sock.recv(65536)
            except TimeoutError:
                continue
            break
        sock.settimeout(WAIT)
        answer += _until_eof(sock)
        elapsed = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert 0.5 <= elapsed < WAIT


def test_an_idle_connection_is_closed_without_an_answer(quick: ProxyThread) -> None:
    with socket.create_connection(("127.0.0.1", quick.port), timeout=WAIT) as sock:
        started = time.monotonic()
        assert _until_eof(sock) == b""
        assert 0.5 <= time.monotonic() - started < WAIT


def test_a_client_that_never_reads_its_answers_is_cut_off(quick: ProxyThread) -> None:
    """Requests sent back to back, no answer ever read: once the answers fill the socket
    buffers, the server waits ``request_timeout`` (0.5 s) for the client to take them, then
    closes the connection, and serves others meanwhile."""
    requests = b"GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 1000
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(WAIT * 6)  # a send blocked this long: the server never cut it off
        sock.connect(("127.0.0.1", quick.port))
        cut_off = False
        while not cut_off:
            try:
                sock.sendall(requests)
            except (BrokenPipeError, ConnectionResetError):
                cut_off = True
            assert _request(quick.port, "GET", "/version")[0] == 200


def test_connections_over_the_cap_are_answered_503_until_one_closes() -> None:
    limits = ApiLimits(idle_timeout=WAIT * 4, request_timeout=WAIT, max_connections=2)
    with ProxyThread(limits=limits) as proxy:
        held = [http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=WAIT)
                for _ in range(2)]
        for conn in held:  # each one served once, and kept open (keep-alive)
            conn.request("GET", "/version")
            assert conn.getresponse().read()
        status, answer = _request(proxy.port, "GET", "/version")
        assert status == 503
        assert "serves 2 connections at once" in answer["error"]
        held.pop().close()
        wait_until(lambda: _request(proxy.port, "GET", "/version")[0] == 200, WAIT,
                   "a connection served again once one closed")
        held[0].request("GET", "/version")  # the one still open was never cut
        assert held[0].getresponse().status == 200
        held[0].close()


@pytest.mark.parametrize(("field", "value"), [("idle_timeout", 0), ("request_timeout", -1.0),
                                             ("max_connections", 0), ("max_body", True)])
def test_bad_limits_are_refused_in_one_line(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=f"^ApiLimits.{field} must be"):
        ApiLimits(**{field: value})


# --- the command ------------------------------------------------------------------------------

def test_sac_proxy_serve_refuses_a_rebound_host_and_serves_loopback() -> None:
    command = [sys.executable, "-m", "sac", "proxy", "serve", "--port", "0"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as server:
        try:
            assert server.stdout is not None
            line = server.stdout.readline()
            assert line.startswith("fault proxy: Toxiproxy API on http://127.0.0.1:"), line
            port = int(line.rsplit(":", 1)[1].strip("/\n"))
            assert port != 0
            status, answer = _create(port, "p", {**JSON, "Host": f"attacker.example:{port}"})
            assert status == 403, answer
            assert _request(port, "GET", "/proxies") == (200, {})
            server.send_signal(signal.SIGINT)
            assert server.wait(WAIT) == 0
        finally:
            if server.poll() is None:
                server.kill()
