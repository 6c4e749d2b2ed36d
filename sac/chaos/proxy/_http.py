"""A minimal HTTP/1.1 server side over asyncio streams: one request at a time per
connection, ``Content-Length`` bodies only (what every Toxiproxy client sends), keep-alive
unless the client asks to close. Anything else is answered 400/411/413 and the connection
closed, never guessed at.

The API drives a process that opens listeners and cuts connections, so it answers only a
client on this host that means to talk to it (``refusal``): a request addressed to a name
that is not loopback (a web page whose DNS name was rebound to 127.0.0.1), one sent by a web
page (an ``Origin`` that is not loopback: browsers add it to every cross-site write), and a
write whose body is not declared JSON (a form post) are refused before the API sees them.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.parse
from http import HTTPStatus
from typing import Any

import attrs

from ._model import is_loopback

MAX_HEAD = 64 * 1024
WRITES = frozenset({"POST", "PATCH", "PUT", "DELETE"})
_LENGTH = re.compile(r"[0-9]{1,15}")  # ASCII digits only: str.isdigit() takes '²' too


def _positive(_inst: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"ApiLimits.{attribute.name} must be a positive number, got {value!r}")


def _count(_inst: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"ApiLimits.{attribute.name} must be an integer >= 1, got {value!r}")


@attrs.frozen
class ApiLimits:
    """What one client may hold of the API: a local user's mistake or a stuck script must
    not keep the chaos suite from its own fault proxy."""

    idle_timeout: float = attrs.field(default=30.0, validator=_positive)
    """Seconds a connection may wait for its next request; then it is closed (no answer:
    nothing was asked)."""
    request_timeout: float = attrs.field(default=10.0, validator=_positive)
    """Seconds from a request's first byte until all of it has arrived (else 408 and the
    connection closed: a client trickling bytes cannot hold a connection for ever), and
    for an answer to be taken."""
    max_connections: int = attrs.field(default=64, validator=_count)
    """Connections served at once; one more is answered 503 and closed."""
    max_body: int = attrs.field(default=256 * 1024, validator=_count)
    """Bytes of a request body (a ``/populate`` of a thousand proxies is under 200 KiB);
    a larger one is answered 413 before it is read."""


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(status, message)
        self.status = status
        self.message = message


@attrs.frozen
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def keep_alive(self) -> bool:
        return self.headers.get("connection", "").lower() != "close"


def parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    """Request line and headers (names lower-cased) of a head ending in a blank line."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError as exc:  # pragma: no cover - latin-1 decodes any byte
        raise HttpError(400, "undecodable request head") from exc
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(400, f"bad request line {lines[0]!r}")
    method, target, _ = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise HttpError(400, f"bad header line {line!r}")
        headers[name.lower()] = value.strip()
    path = target.split("?", 1)[0]
    return method.upper(), path, headers


async def read_request(reader: asyncio.StreamReader, first: bytes,
                       max_body: int) -> Request:
    """The request that begins with ``first`` (its first byte, already read)."""
    try:
        head = first + await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        raise HttpError(400, "connection closed inside a request head") from exc
    except asyncio.LimitOverrunError as exc:
        raise HttpError(431, "request head too large") from exc
    method, path, headers = parse_head(head[:-4])
    if "transfer-encoding" in headers:
        raise HttpError(411, "chunked bodies are not supported; send Content-Length")
    length_text = headers.get("content-length", "0")
    if not _LENGTH.fullmatch(length_text):
        raise HttpError(400, f"bad Content-Length {length_text[:40]!r}")
    length = int(length_text)
    if length > max_body:
        raise HttpError(413, f"body of {length} bytes is too large (at most {max_body})")
    body = await reader.readexactly(length) if length else b""
    return Request(method, path, headers, body)


def _loopback_authority(authority: str) -> bool:
    """``host[:port]`` (IPv6 in brackets) names a loopback address."""
    try:
        parts = urllib.parse.urlsplit("//" + authority)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a port
    except ValueError:
        return False
    return parts.hostname is not None and is_loopback(parts.hostname) and \
        parts.path == "" and not parts.username and not parts.password


def _media_type(value: str) -> str:
    return value.split(";", 1)[0].strip().lower()


def refusal(request: Request) -> HttpError | None:
    """Why the API must not act on ``request`` (see the module's docstring), or None."""
    host = request.headers.get("host")
    if host is None:
        return HttpError(400, "no Host header")
    if not _loopback_authority(host):
        return HttpError(403, f"Host {host[:100]!r} is not a loopback address: the fault proxy "
                              "API answers only requests addressed to this host's loopback")
    origin = request.headers.get("origin")
    if origin is not None:
        parts = urllib.parse.urlsplit(origin)
        if parts.scheme not in ("http", "https") or not _loopback_authority(parts.netloc) or \
                parts.path not in ("", "/"):
            return HttpError(403, f"Origin {origin[:100]!r} is not loopback: the fault proxy API "
                                  "refuses requests made by web pages")
    content_type = request.headers.get("content-type")
    if request.method in WRITES and (request.body or content_type is not None) and \
            _media_type(content_type or "") != "application/json":
        return HttpError(415, f"a {request.method} body must be Content-Type: application/json, "
                              f"not {(content_type or 'none')[:100]!r}")
    return None


def render_response(status: int, payload: Any, keep_alive: bool) -> bytes:
    """A complete response; ``payload`` None means no body (204)."""
    body = b"" if payload is None else json.dumps(payload).encode() + b"\n"
    reason = HTTPStatus(status).phrase
    lines = [f"HTTP/1.1 {status} {reason}"]
    if payload is not None:
        lines.append("Content-Type: application/json")
    lines.append(f"Content-Length: {len(body)}")
    lines.append("Connection: keep-alive" if keep_alive else "Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def render_error(error: HttpError) -> bytes:
    """An error answer that closes the connection."""
    return render_response(error.status, {"error": error.message, "status": error.status},
                           keep_alive=False)
