"""A minimal HTTP/1.1 server side over asyncio streams: one request at a time per
connection, ``Content-Length`` bodies only (what every Toxiproxy client sends), keep-alive
unless the client asks to close. Anything else is answered 400/411/413 and the connection
closed, never guessed at."""

from __future__ import annotations

import asyncio
import json
from http import HTTPStatus
from typing import Any

import attrs

MAX_HEAD = 64 * 1024
MAX_BODY = 1024 * 1024


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


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """The next request, or None when the client closed between requests."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise HttpError(400, "connection closed inside a request head") from exc
    except asyncio.LimitOverrunError as exc:
        raise HttpError(431, "request head too large") from exc
    method, path, headers = parse_head(head[:-4])
    if "transfer-encoding" in headers:
        raise HttpError(411, "chunked bodies are not supported; send Content-Length")
    length_text = headers.get("content-length", "0")
    if not length_text.isdigit():
        raise HttpError(400, f"bad Content-Length {length_text!r}")
    length = int(length_text)
    if length > MAX_BODY:
        raise HttpError(413, f"body of {length} bytes is too large")
    body = await reader.readexactly(length) if length else b""
    return Request(method, path, headers, body)


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
