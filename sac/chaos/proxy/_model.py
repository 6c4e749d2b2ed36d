"""The API's objects and their validation, without I/O: what a request body means, what a
toxic may hold, and how each is rendered back as JSON.

Every bad value raises ``ApiError`` with the HTTP status the Toxiproxy API gives it; nothing
quietly falls back to a default.
"""

from __future__ import annotations

import ipaddress
import itertools
from typing import Any, Final

import attrs

STREAMS: Final = ("upstream", "downstream")

#: Each toxic type and its integer attributes with their defaults (as Toxiproxy 2.x has them).
TOXIC_TYPES: Final[dict[str, dict[str, int]]] = {
    "latency": {"latency": 0, "jitter": 0},
    "bandwidth": {"rate": 0},
    "slow_close": {"delay": 0},
    "timeout": {"timeout": 0},
    "reset_peer": {"timeout": 0},
    "slicer": {"average_size": 0, "size_variation": 0, "delay": 0},
    "limit_data": {"bytes": 0},
    "noop": {},
}
# bandwidth's rate <= 0 means unlimited; every other attribute is a size or a delay.
_MAY_BE_NEGATIVE: Final = frozenset({("bandwidth", "rate")})

_serials = itertools.count(1)


class ApiError(Exception):
    """A request the API refuses: ``status`` is the HTTP status, ``message`` the reason."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(status, message)
        self.status = status
        self.message = message

    def to_json(self) -> dict[str, Any]:
        return {"error": self.message, "status": self.status}


@attrs.frozen
class Toxic:
    """One toxic. ``serial`` is new for every creation or update, so that a connection draws
    its toxicity again for a changed toxic (it is not part of the JSON)."""

    name: str
    type: str
    stream: str
    toxicity: float
    attributes: dict[str, int]
    serial: int = attrs.field(factory=lambda: next(_serials), eq=False)

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self, filter=lambda field, _: field.name != "serial")


@attrs.frozen
class ProxySpec:
    """What a user asked of a proxy: ``listen`` as given (``host:port``, port may be 0)."""

    name: str
    listen: str
    upstream: str
    enabled: bool = True


def _object(body: Any, what: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, f"{what}: expected a JSON object")
    return body


def _string(body: dict[str, Any], key: str, what: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise ApiError(400, f"{what}: missing or empty field {key!r}")
    return value


def _bool(body: dict[str, Any], key: str, default: bool, what: str) -> bool:
    value = body.get(key, default)
    if not isinstance(value, bool):
        raise ApiError(400, f"{what}: field {key!r} must be true or false")
    return value


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` (IPv6 in brackets) to ``(host, port)``; ``ValueError`` if malformed."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError(f"address {address!r} is not host:port")
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"address {address!r}: port out of range")
    return host.strip("[]"), port


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


NETNS_BRIDGES: Final = ipaddress.ip_network("198.18.0.0/15")
"""Where local netns clusters put their bridges (RFC 2544, never routed): a broker inside a
namespace reaches the host only at its bridge's address, so a proxy for a link the broker
opens itself (a federation upstream) listens there."""


def may_listen(host: str) -> bool:
    """Loopback, or the host's side of a local netns bridge: never an address other
    machines reach."""
    if is_loopback(host):
        return True
    try:
        return ipaddress.ip_address(host) in NETNS_BRIDGES
    except ValueError:
        return False


def _listen(value: str, what: str) -> str:
    try:
        host, _ = split_address(value)
    except ValueError as exc:
        raise ApiError(400, f"{what}: {exc}") from exc
    if not may_listen(host):
        raise ApiError(400, f"{what}: listen address {value!r} is neither loopback nor a "
                       "local netns bridge (198.18.0.0/15)")
    return value


def parse_proxy(body: Any) -> ProxySpec:
    """A ``POST /proxies`` body (or one item of ``/populate``)."""
    body = _object(body, "proxy")
    name = _string(body, "name", "proxy")
    upstream = _string(body, "upstream", f"proxy {name}")
    try:
        split_address(upstream)
    except ValueError as exc:
        raise ApiError(400, f"proxy {name}: upstream: {exc}") from exc
    listen = _listen(body.get("listen") or "127.0.0.1:0", f"proxy {name}")
    return ProxySpec(name, listen, upstream, _bool(body, "enabled", True, f"proxy {name}"))


def update_proxy(spec: ProxySpec, body: Any) -> ProxySpec:
    """A ``POST``/``PATCH /proxies/{p}`` body applied to ``spec``."""
    body = _object(body, f"proxy {spec.name}")
    changes: dict[str, Any] = {}
    if "listen" in body:
        changes["listen"] = _listen(_string(body, "listen", spec.name), f"proxy {spec.name}")
    if "upstream" in body:
        upstream = _string(body, "upstream", f"proxy {spec.name}")
        try:
            split_address(upstream)
        except ValueError as exc:
            raise ApiError(400, f"proxy {spec.name}: upstream: {exc}") from exc
        changes["upstream"] = upstream
    if "enabled" in body:
        changes["enabled"] = _bool(body, "enabled", spec.enabled, f"proxy {spec.name}")
    return attrs.evolve(spec, **changes)


def _toxicity(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ApiError(400, f"{what}: toxicity must be a number from 0 to 1")
    return float(value)


def _attributes(kind: str, given: Any, base: dict[str, int], what: str) -> dict[str, int]:
    if not isinstance(given, dict):
        raise ApiError(400, f"{what}: attributes must be an object")
    known = TOXIC_TYPES[kind]
    merged = dict(base)
    for key, value in given.items():
        if key not in known:
            raise ApiError(400, f"{what}: {kind} has no attribute {key!r} (has {sorted(known)})")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ApiError(400, f"{what}: attribute {key!r} must be an integer")
        if value < 0 and (kind, key) not in _MAY_BE_NEGATIVE:
            raise ApiError(400, f"{what}: attribute {key!r} must not be negative")
        merged[key] = value
    return merged


def parse_toxic(body: Any) -> Toxic:
    """A ``POST /proxies/{p}/toxics`` body, defaults filled in as Toxiproxy does."""
    body = _object(body, "toxic")
    kind = body.get("type")
    if kind not in TOXIC_TYPES:
        raise ApiError(400, f"toxic: unknown type {kind!r} (known: {sorted(TOXIC_TYPES)})")
    stream = body.get("stream", "downstream")
    if stream not in STREAMS:
        raise ApiError(400, f"toxic: stream must be upstream or downstream, not {stream!r}")
    name = body.get("name") or f"{kind}_{stream}"
    if not isinstance(name, str):
        raise ApiError(400, "toxic: name must be a string")
    what = f"toxic {name}"
    toxicity = _toxicity(body.get("toxicity", 1.0), what)
    attributes = _attributes(kind, body.get("attributes", {}), TOXIC_TYPES[kind], what)
    return Toxic(name, kind, stream, toxicity, attributes)


def update_toxic(toxic: Toxic, body: Any) -> Toxic:
    """A ``POST``/``PATCH .../toxics/{t}`` body: attributes merged, toxicity replaced. The
    name, type and stream cannot change (asking to is an error, not ignored)."""
    what = f"toxic {toxic.name}"
    body = _object(body, what)
    for key in ("name", "type", "stream"):
        if key in body and body[key] != getattr(toxic, key):
            raise ApiError(400, f"{what}: {key} cannot be changed")
    toxicity = _toxicity(body.get("toxicity", toxic.toxicity), what)
    attributes = _attributes(toxic.type, body.get("attributes", {}), toxic.attributes, what)
    return Toxic(toxic.name, toxic.type, toxic.stream, toxicity, attributes)
