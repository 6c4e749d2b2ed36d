"""The management API of a local cluster: ``sac.sdk.Management``, and the few calls it does
not have yet.

``LocalCluster.management()`` hands out a ``ServerManagement``: the SDK's client, so that the
servers, chaos, the recipes, the CLI and the benchmarks reach the API through one transport
(nodes tried in turn, reads retried, redirects refused, never the password in an error).

REPLACE: every method of ``ServerManagement`` is one that ``sac.sdk.Management`` lacks, under
the name and signature asked of it; once it has them, ``LocalCluster.management()`` returns
a ``Management`` and this module goes, without a change at the callers. Until then this is
the one place that reaches past ``sac.sdk.management``'s exported names (``Request``, the
errors, ``Management._parse``/``_send``): the calls go through the SDK's own transport
rather than a second client.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from typing import Any

import attrs

from sac.sdk.management import (  # type: ignore[attr-defined]  # REPLACE: export them
    Management,
    ManagementError,
    ManagementNotFound,
    ManagementSettings,
    ManagementUnreachable,
    Request,
)

__all__ = [
    "FederationLinkInfo",
    "ManagementError",
    "ManagementNotFound",
    "ManagementSettings",
    "ManagementUnreachable",
    "NodeInfo",
    "OverviewInfo",
    "ServerManagement",
    "ShovelInfo",
]


def _q(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


def _entries(data: Any) -> list[Mapping[str, Any]]:
    """A list answer's objects (anything else in it skipped: the caller reads fields)."""
    return [e for e in data if isinstance(e, Mapping)] if isinstance(data, list) else []


def _object(data: Any) -> Mapping[str, Any]:
    return data if isinstance(data, Mapping) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


@attrs.frozen(kw_only=True)
class NodeInfo:
    """A cluster member as ``/api/nodes`` lists it."""

    name: str
    running: bool


@attrs.frozen(kw_only=True)
class OverviewInfo:
    """What the broker says it is (``/api/overview``)."""

    product: str
    version: str
    node: str | None
    """The node that answered."""


@attrs.frozen(kw_only=True)
class FederationLinkInfo:
    """One federation link (``/api/federation-links``): of a queue or of an exchange."""

    upstream: str | None
    queue: str | None
    exchange: str | None
    status: str
    """``starting``, ``running``, ``error``..."""


@attrs.frozen(kw_only=True)
class ShovelInfo:
    """One dynamic shovel (``/api/shovels``)."""

    name: str
    state: str | None
    """``starting``, ``running``, ``terminated``..."""


class ServerManagement(Management):
    """``sac.sdk.Management`` with the calls it does not have yet (see the module)."""

    def get(self, path: str) -> Any:
        """The decoded answer of ``GET /api/<path>`` (its names quoted by the caller, a
        query allowed: ``queues/%2F?columns=name``), for what no method reads."""
        return self._parse(Request("get", "GET", "/api/" + path.lstrip("/")), lambda d: d)

    def overview(self) -> OverviewInfo:
        data = self._parse(Request("overview", "GET", "/api/overview"), _object)
        return OverviewInfo(
            product=_text(data.get("product_name")) or "RabbitMQ",
            version=str(data.get("product_version") or data.get("rabbitmq_version")),
            node=_text(data.get("node")))

    def feature_flags(self) -> list[Mapping[str, Any]]:
        """``[{"name", "state", ...}]``: which flags the cluster has enabled."""
        return self._parse(Request("feature_flags", "GET", "/api/feature-flags"), _entries)

    def nodes(self) -> list[NodeInfo]:
        return self._parse(Request("nodes", "GET", "/api/nodes?columns=name,running"),
                           lambda data: [NodeInfo(name=str(e.get("name")),
                                                  running=bool(e.get("running")))
                                         for e in _entries(data)])

    def federation_links(self, vhost: str | None = "/") -> list[FederationLinkInfo]:
        path = "/api/federation-links" + ("" if vhost is None else f"/{_q(vhost)}")
        return self._parse(Request("federation_links", "GET", path), lambda data: [
            FederationLinkInfo(upstream=_text(e.get("upstream")), queue=_text(e.get("queue")),
                               exchange=_text(e.get("exchange")),
                               status=str(e.get("status")))
            for e in _entries(data)])

    def shovels(self, vhost: str = "/") -> list[ShovelInfo]:
        return self._parse(Request("shovels", "GET", f"/api/shovels/{_q(vhost)}"),
                           lambda data: [ShovelInfo(name=str(e.get("name")),
                                                    state=_text(e.get("state")))
                                         for e in _entries(data)])

    def restart_shovel(self, name: str, vhost: str = "/") -> None:
        self._send(Request("restart_shovel", "DELETE",
                           f"/api/shovels/vhost/{_q(vhost)}/{_q(name)}/restart"))

    def parameters(self, component: str, vhost: str | None = None) -> list[Mapping[str, Any]]:
        """The runtime parameters of ``component`` (``federation-upstream``, ``shovel``):
        ``[{"name", "vhost", "value"}]``."""
        path = f"/api/parameters/{_q(component)}" + ("" if vhost is None else f"/{_q(vhost)}")
        return self._parse(Request("parameters", "GET", path), _entries)

    def put_queue(self, name: str, vhost: str = "/", *, durable: bool = True,
                  auto_delete: bool = False,
                  arguments: Mapping[str, Any] | None = None) -> None:
        """Declare a queue (through whichever node the client asks first: a quorum queue's
        leader starts there)."""
        body = {"durable": durable, "auto_delete": auto_delete,
                "arguments": dict(arguments or {})}
        self._send(Request("put_queue", "PUT", f"/api/queues/{_q(vhost)}/{_q(name)}",
                           _json(body)))

    def call(self, path: str, method: str, body: Any = None) -> Any:
        """``method /api/<path>`` with a JSON ``body``: what ``LocalCluster.management_api``
        still serves its last callers with (outside ``sac.server``'s owners; see there)."""
        request = Request("management_api", method, "/api/" + path.lstrip("/"),
                          None if body is None else _json(body))
        return self._send(request)[0]
