"""The RabbitMQ management HTTP API as requests to make and answers to read: no sockets here.

``sac/sdk/management.py`` sends each ``Request`` (standard library urllib) and hands the answer's
status and body back to the parsers below, so that what is asked and how an answer is read
are tested without a broker, and the shell stays a few lines of I/O.

What RabbitMQ reports, as measured on our clusters (3.10.8 and 4.0.5):

- The single active consumer of a queue: each entry of a queue's ``consumer_details`` has an
  ``activity_status`` (``single_active`` or ``waiting``) for quorum and classic queues alike.
  The queue itself names the active consumer too, lagging the entries (a classic queue's
  ``single_active_consumer_tag``: up to 1.7 s against 1.0 s at a 1 s statistics interval; a
  quorum queue's, refreshed on the queue's tick, every 5 s by default), under a name that
  moved: ``single_active_consumer_ctag`` for a quorum queue on 3.10,
  ``single_active_consumer_tag`` on 4.0. The entries come first; the queue's field stands in
  when there are none, and decides when several entries claim the role: on 4.0, after a
  consumer of higher priority took over, the entries list both the old and the new active
  consumer as ``single_active`` for as long as both stay subscribed (25 s and more here),
  while ``rabbitmqctl list_consumers`` and the queue's field name only the new one.
- Everything here comes from the management agent's statistics: it is as old as the
  broker's statistics interval (``collect_statistics_interval`` and the agent's finest sample
  retention step, both 5 s in RabbitMQ's defaults, 1 s on our local clusters). A consumer that
  just subscribed, or a connection that just opened, may not be listed yet.
- A quorum queue refuses a global QoS (``basic.qos`` with ``global``): the channel is closed
  with 540 NOT_IMPLEMENTED. ``ChannelInfo.global_prefetch_count`` shows who uses one.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import attrs

from .._errors import ConfigurationError
from .urls import mask_url, split_url

T = TypeVar("T")

# ---------------------------------------------------------------------------- URLs


@attrs.frozen
class Endpoint:
    """One node's management API, from a URL ``http(s)://user:password@host:port[/prefix]``."""

    scheme: str
    host: str
    port: int
    user: str
    password: str = attrs.field(repr=False)
    prefix: str
    """The path the API hangs under (``management.path_prefix``), without a trailing slash."""

    @property
    def base(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.prefix}"

    @property
    def shown(self) -> str:
        """The URL without credentials: safe to log."""
        return self.base


DEFAULT_PORTS = {"http": 15672, "https": 15671}


def parse_endpoint(url: str) -> Endpoint:
    """Validate one management URL; raise ConfigurationError naming what is wrong (never the
    password: the message shows the URL with ``***`` for it)."""
    parts = split_url(url, tuple(DEFAULT_PORTS), "management URL")
    shown = mask_url(url)
    if parts.username is None or parts.password is None:
        raise ConfigurationError(f"management URL {shown!r} needs a user and a password "
                                 "(http://user:password@host:15672)")
    if parts.query or parts.fragment:
        raise ConfigurationError(f"management URL {shown!r} must not have a query or a "
                                 "fragment")
    assert parts.hostname is not None
    return Endpoint(
        scheme=parts.scheme, host=parts.hostname,
        port=parts.port or DEFAULT_PORTS[parts.scheme],
        user=urllib.parse.unquote(parts.username),
        password=urllib.parse.unquote(parts.password),
        prefix=parts.path.rstrip("/"))


# ---------------------------------------------------------------------------- requests


@attrs.frozen
class Request:
    """One call to the API. ``call`` names the client method that made it, for errors."""

    call: str
    method: str
    path: str
    """From ``/api/`` on, each name quoted (``/api/queues/%2F/orders``)."""
    body: bytes | None = None
    reason: str | None = None
    """Sent as ``X-Reason`` (closing a connection: the client is told why)."""

    @property
    def idempotent(self) -> bool:
        """Whether sending it twice is harmless, so that it may be retried after an answer
        was lost (only reads: a write might have been applied)."""
        return self.method == "GET"


def _q(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def get_queue(vhost: str, name: str) -> Request:
    return Request("queue", "GET", f"/api/queues/{_q(vhost)}/{_q(name)}")


def list_queues(vhost: str | None = None) -> Request:
    return Request("queues", "GET", "/api/queues" if vhost is None else f"/api/queues/{_q(vhost)}")


def queue_bindings(vhost: str, name: str) -> Request:
    return Request("queue_bindings", "GET", f"/api/queues/{_q(vhost)}/{_q(name)}/bindings")


def delete_queue(vhost: str, name: str, *, if_empty: bool = True) -> Request:
    """Delete a queue; by default only an empty one (the broker answers 400 otherwise)."""
    query = "?if-empty=true" if if_empty else ""
    return Request("delete_queue", "DELETE", f"/api/queues/{_q(vhost)}/{_q(name)}{query}")


def put_exchange(vhost: str, name: str, kind: str = "direct", *, durable: bool = True) -> Request:
    body = {"type": kind, "durable": durable, "auto_delete": False, "internal": False,
            "arguments": {}}
    return Request("put_exchange", "PUT", f"/api/exchanges/{_q(vhost)}/{_q(name)}", _json(body))


def delete_exchange(vhost: str, name: str) -> Request:
    return Request("delete_exchange", "DELETE", f"/api/exchanges/{_q(vhost)}/{_q(name)}")


def bind_queue(vhost: str, queue: str, exchange: str, routing_key: str,
               arguments: Mapping[str, Any] | None = None) -> Request:
    body = {"routing_key": routing_key, "arguments": dict(arguments or {})}
    return Request("bind_queue", "POST",
                   f"/api/bindings/{_q(vhost)}/e/{_q(exchange)}/q/{_q(queue)}", _json(body))


def unbind_queue(vhost: str, queue: str, exchange: str, properties_key: str) -> Request:
    """``properties_key`` names the binding (``BindingInfo.properties_key``)."""
    return Request("unbind_queue", "DELETE",
                   f"/api/bindings/{_q(vhost)}/e/{_q(exchange)}/q/{_q(queue)}/"
                   f"{_q(properties_key)}")


def list_policies(vhost: str | None = None) -> Request:
    path = "/api/policies" if vhost is None else f"/api/policies/{_q(vhost)}"
    return Request("policies", "GET", path)


APPLY_TO = ("queues", "exchanges", "all")


def put_policy(vhost: str, name: str, pattern: str, definition: Mapping[str, Any], *,
               priority: int = 0, apply_to: str = "queues") -> Request:
    if apply_to not in APPLY_TO:
        raise ValueError(f"apply_to must be one of {', '.join(APPLY_TO)}, got {apply_to!r}")
    body = {"pattern": pattern, "definition": dict(definition), "priority": priority,
            "apply-to": apply_to}
    return Request("put_policy", "PUT", f"/api/policies/{_q(vhost)}/{_q(name)}", _json(body))


def delete_policy(vhost: str, name: str) -> Request:
    return Request("delete_policy", "DELETE", f"/api/policies/{_q(vhost)}/{_q(name)}")


def put_parameter(component: str, vhost: str, name: str, value: Any) -> Request:
    """A runtime parameter (``federation-upstream``, ``shovel``...)."""
    body = {"component": component, "vhost": vhost, "name": name, "value": value}
    return Request("put_parameter", "PUT",
                   f"/api/parameters/{_q(component)}/{_q(vhost)}/{_q(name)}", _json(body))


def delete_parameter(component: str, vhost: str, name: str) -> Request:
    return Request("delete_parameter", "DELETE",
                   f"/api/parameters/{_q(component)}/{_q(vhost)}/{_q(name)}")


def list_connections() -> Request:
    return Request("connections", "GET", "/api/connections")


def close_connection(name: str, reason: str) -> Request:
    return Request("close_connections", "DELETE", f"/api/connections/{_q(name)}", reason=reason)


def list_channels() -> Request:
    return Request("channels", "GET", "/api/channels")


def put_queue(vhost: str, name: str, *, durable: bool = True, auto_delete: bool = False,
              arguments: Mapping[str, Any] | None = None) -> Request:
    """Declare a queue (the node that takes the request hosts it, or leads it: a quorum
    queue's leader starts on the node asked)."""
    body = {"durable": durable, "auto_delete": auto_delete, "arguments": dict(arguments or {})}
    return Request("put_queue", "PUT", f"/api/queues/{_q(vhost)}/{_q(name)}", _json(body))


def get_overview() -> Request:
    return Request("overview", "GET", "/api/overview")


def list_feature_flags() -> Request:
    return Request("feature_flags", "GET", "/api/feature-flags")


def list_nodes() -> Request:
    return Request("nodes", "GET", "/api/nodes?columns=name,running")


def _under(base: str, vhost: str | None) -> str:
    """``base`` for every vhost (None), or for one."""
    return base if vhost is None else f"{base}/{_q(vhost)}"


def list_federation_links(vhost: str | None = "/") -> Request:
    return Request("federation_links", "GET", _under("/api/federation-links", vhost))


def list_shovels(vhost: str | None = "/") -> Request:
    return Request("shovels", "GET", _under("/api/shovels", vhost))


def restart_shovel(vhost: str, name: str) -> Request:
    return Request("restart_shovel", "DELETE",
                   f"/api/shovels/vhost/{_q(vhost)}/{_q(name)}/restart")


def list_parameters(component: str, vhost: str | None = None) -> Request:
    return Request("parameters", "GET", _under(f"/api/parameters/{_q(component)}", vhost))


def get_path(path: str, query: Mapping[str, str] | None = None) -> Request:
    """``GET /api/<path>``: the escape hatch for what no method reads. ``path`` is the API's
    own (its names quoted by the caller: ``queues/%2F/orders``); the query goes in
    ``query``, encoded here."""
    if not isinstance(path, str) or not path.strip("/"):
        raise ValueError(f"path must name an API resource (such as 'users'), got {path!r}")
    if "?" in path or "#" in path:
        raise ValueError(f"path {path!r} must not hold a query or a fragment: pass the "
                         "query as query={...}")
    if any(part in (".", "..") for part in path.split("/")):
        raise ValueError(f"path {path!r} must not climb out of /api/ ('.' or '..')")
    suffix = f"?{urllib.parse.urlencode(dict(query))}" if query else ""
    return Request("get", "GET", f"/api/{path.lstrip('/')}{suffix}")


# ---------------------------------------------------------------------------- answers


class Malformed(ValueError):
    """The broker's answer is not what this API returns (the shell names the call)."""


@attrs.frozen
class ConsumerInfo:
    """One consumer of a queue, as the queue's ``consumer_details`` list it."""

    tag: str
    active: bool
    activity_status: str | None
    """``single_active`` or ``waiting`` on a single-active queue, ``up`` otherwise."""
    prefetch_count: int
    channel: str | None
    """The channel's name (``127.0.0.1:5000 -> 127.0.0.1:5672 (1)``), when still known."""
    connection: str | None
    """Its connection's name as the broker names it (not the client-provided one)."""
    arguments: Mapping[str, Any] = attrs.field(factory=dict)
    """What the consumer asked with ``basic.consume`` (``x-priority``,
    ``x-cancel-on-ha-failover``...)."""


@attrs.frozen
class QueueInfo:
    """A queue as the API reports it (from statistics: see the module docstring)."""

    vhost: str
    name: str
    type: str
    durable: bool
    exclusive: bool
    auto_delete: bool
    arguments: Mapping[str, Any]
    policy: str | None
    effective_policy: Mapping[str, Any]
    """The definition of the policy that applies (``ha-mode``, ``queue-mode``...)."""
    consumers: tuple[ConsumerInfo, ...]
    """Only a single queue's answer lists them (``queue()``, not ``queues()``)."""
    consumer_count: int
    messages: int | None
    messages_ready: int | None
    messages_unacknowledged: int | None
    node: str | None
    """Where it lives: a classic queue's node, a quorum queue's leader."""
    reported_single_active_tag: str | None = None
    """The queue's own ``single_active_consumer_tag`` (``..._ctag`` on 3.10's quorum
    queues): staler than the consumers' entries, but right when several claim the role."""
    synchronised_mirrors: tuple[str, ...] | None = None
    """A mirrored classic queue's mirrors that hold every message (RabbitMQ 3.x's
    ``synchronised_slave_nodes``): what a mirror that takes over can serve without loss.
    None when the answer has none (not mirrored, or RabbitMQ 4, which has no mirrors)."""
    online: tuple[str, ...] | None = None
    """A quorum queue's members that are up and part of its Raft group (``online``): a
    majority of ``members`` must be, for the queue to accept and deliver. None when the
    answer has none (not a quorum queue)."""

    @property
    def single_active(self) -> bool:
        return bool(self.arguments.get("x-single-active-consumer"))

    @property
    def claiming_tags(self) -> tuple[str, ...]:
        """The consumers whose entries list them as the single active one. More than one
        happens: RabbitMQ 4.0 keeps listing the consumer a higher priority one took over
        from, and 3.10 a consumer the broker cancelled (its queue deleted) while its channel
        lives, if a queue of that name exists again."""
        return tuple(c.tag for c in self.consumers if c.activity_status == "single_active")

    @property
    def settled_by_queue_tag(self) -> bool:
        """Several entries claim the role and the queue's own field names one of them, which
        is then taken as the active one (see the module docstring)."""
        claiming = self.claiming_tags
        return len(claiming) > 1 and self.reported_single_active_tag in claiming

    @property
    def active_tags(self) -> tuple[str, ...]:
        """The consumers taken as the single active one: the entries that claim it, the one
        of them the queue's own field names when several do, or that field alone when no
        consumer is listed. More than one: the answer cannot tell."""
        tag = self.reported_single_active_tag
        if not self.consumers:
            return () if tag is None else (tag,)
        if self.settled_by_queue_tag:
            assert tag is not None
            return (tag,)
        return self.claiming_tags

    @property
    def single_active_consumer_tag(self) -> str | None:
        """The tag of the consumer the broker made the active one, or None: none known yet,
        none left, not a single-active queue, or more than one listed (see ``active_tags``)."""
        tags = self.active_tags
        return tags[0] if len(tags) == 1 else None

    def activity_of(self, tag: str) -> str | None:
        """How the queue lists consumer ``tag``: ``single_active``, ``waiting`` (``up`` on a
        queue without single active consumer), or None when not listed."""
        for consumer in self.consumers:
            if consumer.tag == tag:
                if (consumer.activity_status == "single_active"
                        and tag not in self.active_tags):
                    return "waiting"  # a stale claim the queue's own field overrules
                return consumer.activity_status
        return "single_active" if self.active_tags == (tag,) else None


@attrs.frozen
class BindingInfo:
    source: str
    """The exchange (``""``: the default exchange, which binds every queue by its name)."""
    routing_key: str
    arguments: Mapping[str, Any]
    properties_key: str = ""
    """What names the binding when it is deleted."""


@attrs.frozen
class PolicyInfo:
    vhost: str
    name: str
    pattern: str
    apply_to: str
    priority: int
    definition: Mapping[str, Any]


@attrs.frozen
class ConnectionInfo:
    name: str
    """The broker's name for it (``127.0.0.1:5000 -> 127.0.0.1:5672``): what closes it."""
    client_name: str | None
    """The name the client gave it (``connection_name``; ``ConnectionSettings.name``)."""
    user: str | None
    vhost: str | None
    node: str | None
    ssl: bool | None = None
    """Whether the client connected over TLS (None: the answer does not say)."""
    peer_host: str | None = None
    """The client's address as the broker sees it (behind a NAT or a bridge: the near
    side's)."""


@attrs.frozen
class ChannelInfo:
    name: str
    connection: str | None
    number: int
    prefetch_count: int
    global_prefetch_count: int
    """Above 0: the channel set a global QoS (shared by its consumers), which quorum queues
    refuse."""
    consumer_count: int
    vhost: str | None
    messages_unacknowledged: int = 0
    """Deliveries on this channel not yet acked, as the channel last reported them (every
    ``collect_statistics_interval``). Fresher than a quorum queue's own count, which its
    leader refreshes only on its tick (5 s by default)."""


@attrs.frozen(kw_only=True)
class OverviewInfo:
    """What the broker says it is (``/api/overview``)."""

    product: str
    """``RabbitMQ`` (or a distribution's name for it)."""
    version: str
    erlang_version: str | None
    node: str | None
    """The node that answered."""


@attrs.frozen(kw_only=True)
class FeatureFlagInfo:
    """One feature flag (``/api/feature-flags``): ``khepri_db`` enabled means the metadata
    lives in Khepri (RabbitMQ 4), not Mnesia."""

    name: str
    state: str
    """``enabled``, ``disabled`` or ``state_changing``."""


@attrs.frozen(kw_only=True)
class NodeInfo:
    """A cluster member as ``/api/nodes`` lists it (a member that is down is listed, not
    running)."""

    name: str
    running: bool


@attrs.frozen(kw_only=True)
class FederationLinkInfo:
    """One federation link (``/api/federation-links``): of a queue or of an exchange."""

    upstream: str | None
    queue: str | None
    """The federated queue (None: the link federates an exchange)."""
    exchange: str | None
    status: str
    """``starting``, ``running``, ``error``..."""


@attrs.frozen(kw_only=True)
class ShovelInfo:
    """One shovel (``/api/shovels``)."""

    name: str
    state: str | None
    """``starting``, ``running``, ``terminated``... (None while the API knows none)."""


@attrs.frozen(kw_only=True)
class ParameterInfo:
    """One runtime parameter (``/api/parameters``): a federation upstream, a shovel..."""

    component: str
    vhost: str
    name: str
    value: Any
    """The parameter's definition, as put (``{"uri": ...}`` for an upstream)."""


def _obj(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise Malformed(f"{what} should be a JSON object, got {type(value).__name__}")
    return value


def _list(value: Any, what: str) -> Sequence[Any]:
    if not isinstance(value, list):
        raise Malformed(f"{what} should be a JSON list, got {type(value).__name__}")
    return value


def _str(data: Mapping[str, Any], key: str, what: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise Malformed(f"{what} has no {key!r} string (got {value!r})")
    return value


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _details(value: Any) -> Mapping[str, Any]:
    # The broker sends [] instead of an object once a channel is gone.
    return value if isinstance(value, Mapping) else {}


def parse_consumer(data: Any) -> ConsumerInfo:
    entry = _obj(data, "a consumer")
    channel = _details(entry.get("channel_details"))
    return ConsumerInfo(
        tag=_str(entry, "consumer_tag", "a consumer"),
        active=bool(entry.get("active", True)),
        activity_status=_opt_str(entry.get("activity_status")),
        prefetch_count=_int(entry.get("prefetch_count")),
        channel=_opt_str(channel.get("name")),
        connection=_opt_str(channel.get("connection_name")),
        arguments=dict(_obj(entry.get("arguments") or {}, "a consumer's arguments")))


def parse_queue(data: Any) -> QueueInfo:
    entry = _obj(data, "a queue")
    what = f"queue {entry.get('name')!r}"
    consumers = tuple(parse_consumer(c) for c in _list(entry.get("consumer_details", []),
                                                       f"{what}'s consumer_details"))
    arguments = _obj(entry.get("arguments") or {}, f"{what}'s arguments")
    effective = entry.get("effective_policy_definition") or {}
    count = entry.get("consumers")
    return QueueInfo(
        vhost=_str(entry, "vhost", what), name=_str(entry, "name", what),
        type=_opt_str(entry.get("type")) or "classic",
        durable=bool(entry.get("durable")), exclusive=bool(entry.get("exclusive")),
        auto_delete=bool(entry.get("auto_delete")),
        arguments=dict(arguments), policy=_opt_str(entry.get("policy")),
        effective_policy=dict(_obj(effective, f"{what}'s effective policy")),
        consumers=consumers,
        consumer_count=_int(count, len(consumers)),
        messages=_opt_int(entry.get("messages")),
        messages_ready=_opt_int(entry.get("messages_ready")),
        messages_unacknowledged=_opt_int(entry.get("messages_unacknowledged")),
        node=_opt_str(entry.get("leader")) or _opt_str(entry.get("node")),
        reported_single_active_tag=_opt_str(entry.get("single_active_consumer_tag"))
        or _opt_str(entry.get("single_active_consumer_ctag")),
        synchronised_mirrors=_names(entry.get("synchronised_slave_nodes"),
                                    f"{what}'s synchronised_slave_nodes"),
        online=_names(entry.get("online"), f"{what}'s online members"))


def _names(value: Any, what: str) -> tuple[str, ...] | None:
    """A list of node names, or None when the answer has none."""
    if value is None:
        return None
    names = _list(value, what)
    if not all(isinstance(n, str) for n in names):
        raise Malformed(f"{what} should be node names, got {value!r}")
    return tuple(names)


def parse_queues(data: Any) -> list[QueueInfo]:
    return [parse_queue(q) for q in _list(data, "the queues")]


def _each(data: Any, what: str, one: Callable[[Mapping[str, Any]], T]) -> list[T]:
    """A list answer (of ``what``, a plural), each entry an object read by ``one``."""
    return [one(_obj(item, f"an entry of {what}")) for item in _list(data, f"the {what}")]


def _binding(entry: Mapping[str, Any]) -> BindingInfo:
    return BindingInfo(
        source=_str(entry, "source", "a binding"),
        routing_key=_str(entry, "routing_key", "a binding"),
        arguments=dict(_obj(entry.get("arguments") or {}, "a binding's arguments")),
        properties_key=_opt_str(entry.get("properties_key")) or "")


def _policy(entry: Mapping[str, Any]) -> PolicyInfo:
    what = f"policy {entry.get('name')!r}"
    return PolicyInfo(
        vhost=_str(entry, "vhost", what), name=_str(entry, "name", what),
        pattern=_str(entry, "pattern", what),
        apply_to=_opt_str(entry.get("apply-to")) or "all",
        priority=_int(entry.get("priority")),
        definition=dict(_obj(entry.get("definition") or {}, f"{what}'s definition")))


def _connection(entry: Mapping[str, Any]) -> ConnectionInfo:
    client = _details(entry.get("client_properties"))
    return ConnectionInfo(
        name=_str(entry, "name", "a connection"),
        client_name=_opt_str(client.get("connection_name")),
        user=_opt_str(entry.get("user")), vhost=_opt_str(entry.get("vhost")),
        node=_opt_str(entry.get("node")),
        ssl=entry["ssl"] if isinstance(entry.get("ssl"), bool) else None,
        peer_host=_opt_str(entry.get("peer_host")))


def _channel(entry: Mapping[str, Any]) -> ChannelInfo:
    connection = _details(entry.get("connection_details"))
    return ChannelInfo(
        name=_str(entry, "name", "a channel"),
        connection=_opt_str(connection.get("name")),
        number=_int(entry.get("number")),
        prefetch_count=_int(entry.get("prefetch_count")),
        global_prefetch_count=_int(entry.get("global_prefetch_count")),
        consumer_count=_int(entry.get("consumer_count")),
        vhost=_opt_str(entry.get("vhost")),
        messages_unacknowledged=_int(entry.get("messages_unacknowledged")))


def parse_bindings(data: Any) -> list[BindingInfo]:
    return _each(data, "bindings", _binding)


def parse_policies(data: Any) -> list[PolicyInfo]:
    return _each(data, "policies", _policy)


def parse_connections(data: Any) -> list[ConnectionInfo]:
    return _each(data, "connections", _connection)


def parse_channels(data: Any) -> list[ChannelInfo]:
    return _each(data, "channels", _channel)


def parse_overview(data: Any) -> OverviewInfo:
    entry = _obj(data, "the overview")
    version = _opt_str(entry.get("product_version")) or _opt_str(entry.get("rabbitmq_version"))
    if version is None:
        raise Malformed("the overview has no 'product_version' or 'rabbitmq_version' string")
    return OverviewInfo(
        product=_opt_str(entry.get("product_name")) or "RabbitMQ", version=version,
        erlang_version=_opt_str(entry.get("erlang_version")), node=_opt_str(entry.get("node")))


def _feature_flag(entry: Mapping[str, Any]) -> FeatureFlagInfo:
    what = f"feature flag {entry.get('name')!r}"
    return FeatureFlagInfo(name=_str(entry, "name", what), state=_str(entry, "state", what))


def _node(entry: Mapping[str, Any]) -> NodeInfo:
    return NodeInfo(name=_str(entry, "name", "a node"), running=entry.get("running") is True)


def _federation_link(entry: Mapping[str, Any]) -> FederationLinkInfo:
    return FederationLinkInfo(
        upstream=_opt_str(entry.get("upstream")), queue=_opt_str(entry.get("queue")),
        exchange=_opt_str(entry.get("exchange")),
        status=_str(entry, "status", f"the federation link of {entry.get('upstream')!r}"))


def _shovel(entry: Mapping[str, Any]) -> ShovelInfo:
    return ShovelInfo(name=_str(entry, "name", "a shovel"), state=_opt_str(entry.get("state")))


def _parameter(entry: Mapping[str, Any]) -> ParameterInfo:
    what = f"parameter {entry.get('name')!r}"
    return ParameterInfo(component=_str(entry, "component", what),
                         vhost=_str(entry, "vhost", what), name=_str(entry, "name", what),
                         value=entry.get("value"))


def parse_feature_flags(data: Any) -> list[FeatureFlagInfo]:
    return _each(data, "feature flags", _feature_flag)


def parse_nodes(data: Any) -> list[NodeInfo]:
    return _each(data, "nodes", _node)


def parse_federation_links(data: Any) -> list[FederationLinkInfo]:
    return _each(data, "federation links", _federation_link)


def parse_shovels(data: Any) -> list[ShovelInfo]:
    return _each(data, "shovels", _shovel)


def parse_parameters(data: Any) -> list[ParameterInfo]:
    return _each(data, "parameters", _parameter)


def decode(body: bytes) -> Any:
    """The answer's JSON (None for an empty body, as a PUT or DELETE answers)."""
    if not body.strip():
        return None
    try:
        return json.loads(body)
    except ValueError as exc:
        raise Malformed(f"the answer is not JSON: {body[:200]!r}") from exc


def answer_text(body: bytes, limit: int = 300) -> str:
    """What the broker said in an error answer, in one line: its ``reason`` when it sent
    JSON (``{"error": "Object Not Found", "reason": "Not Found"}``), else the text."""
    text = body.decode(errors="replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, Mapping):
        parts = [str(data[k]) for k in ("error", "reason") if data.get(k)]
        if parts:
            text = ": ".join(dict.fromkeys(parts))
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def is_redirect(status: int) -> bool:
    return 300 <= status < 400


def redirect_text(location: str | None) -> str:
    """Why a 3xx answer is an error, naming where it pointed (its password masked)."""
    where = "nowhere (no Location)" if not location else repr(mask_url(" ".join(
        location.split())[:300]))
    return (f"a redirect to {where}, not followed: it would carry the credentials to "
            "whatever host it names; give the client the URL of the API itself")


RETRIED_STATUSES = frozenset({500, 502, 503, 504})
"""Answers that say "not now" (a node starting, a proxy without its upstream): a read is
tried again, on the next node."""
