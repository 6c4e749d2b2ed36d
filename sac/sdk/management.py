"""The RabbitMQ management HTTP API: queues, their consumers, policies, runtime parameters,
federation links, shovels, connections, channels and the cluster's nodes, version and
feature flags; and ``get``, for what none of the methods reads.

A thin shell over the standard library (``urllib``): what to ask and how to read the answer
is pure code in ``_core/management_api.py``. Two faces, as for every client of the SDK:
``Management`` blocks; ``AsyncManagement`` has the same methods with the same parameters,
awaited (each runs the blocking call in a worker thread, so the event loop never waits on
HTTP).

- Reads (GET) that get no answer, or a 5xx, are tried on the next node and again under
  ``ManagementSettings.retry`` (bounded, full jitter); writes (PUT, DELETE) move on to the
  next node only when the request could not be sent (connection refused), never after it
  may have been applied.
- Failures raise ``ManagementError`` subclasses naming the call, method, path, node and the
  broker's answer: ``ManagementNotFound`` (404), ``ManagementRefused`` (401/403),
  ``ManagementUnreachable`` (no answer, 5xx). Never a urllib traceback, never the password.
- A redirect (3xx) is never followed: it is a ``ManagementError`` naming where it pointed.
  urllib would send the ``Authorization`` header to whatever host the answer names (from
  https to http included), and the API itself never redirects a call: a 3xx comes from
  something in between (a proxy, a load balancer, a hostile peer), and the fix is to give
  the client the URL of the API itself.
- What the API reports comes from the broker's statistics: it is up to the statistics
  interval old (``ManagementSettings.statistics_interval``).

Example::

    from sac.sdk import Management, ManagementSettings

    api = Management(ManagementSettings.from_url("http://admin:secret@10.0.0.1:15672"))
    queue = api.queue("orders")
    print(queue.type, queue.single_active_consumer_tag, queue.effective_policy)
    api.close_connections("orders-consumer-7", reason="replaced by a newer leader")

    async_api = AsyncManagement(ManagementSettings.from_url("http://admin:secret@10.0.0.1:15672"))
    queue = await async_api.queue("orders")
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import random
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs

from ._core import management_api as api
from ._core.management_api import (
    BindingInfo,
    ChannelInfo,
    ConnectionInfo,
    ConsumerInfo,
    Endpoint,
    FeatureFlagInfo,
    FederationLinkInfo,
    Malformed,
    NodeInfo,
    OverviewInfo,
    ParameterInfo,
    PolicyInfo,
    QueueInfo,
    Request,
    ShovelInfo,
)
from ._core.retry import Retry
from ._errors import (
    ManagementError,
    ManagementNotFound,
    ManagementRefused,
    ManagementUnreachable,
)
from ._settings import ManagementSettings


@attrs.frozen
class ConnectionsClosed:
    """What ``close_connections`` did: the connections it closed, and those that were gone
    by the time it asked (closed meanwhile)."""

    client_name: str
    closed: tuple[ConnectionInfo, ...]
    gone: tuple[ConnectionInfo, ...] = ()
    spared: tuple[ConnectionInfo, ...] = ()
    """Of that name, but not closed (a guard's eviction closes only a consumer of its
    queue: ``_core/eviction.py``)."""


T = TypeVar("T")
E = TypeVar("E", bound=ManagementError)


class _NotSent(Exception):
    """The request never left (connection refused, unknown host): any node may take it."""


class _NoAnswer(Exception):
    """Sent, maybe applied, but no answer came (timeout, reset)."""


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Hands every 3xx back as the answer, never following it: the credentials go to the
    node they were given for and nowhere else (see the module docstring)."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str,
                         headers: Any, newurl: str) -> None:
        return None


def _why(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    if isinstance(reason, BaseException):
        exc = reason
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if type(exc).__name__ not in text else text


class Management:
    """A client of the management API of one cluster (``ManagementSettings.urls``: a node
    each). Safe to share between threads."""

    def __init__(
        self,
        settings: ManagementSettings,
        *,
        sleep: Callable[[float], Any] = time.sleep,
        rng: Callable[[], float] = random.random,
    ) -> None:
        if not isinstance(settings, ManagementSettings):
            raise TypeError(f"settings must be ManagementSettings, got {type(settings).__name__}")
        self.settings = settings
        self._endpoints = [api.parse_endpoint(url) for url in settings.urls]
        self._first = 0
        """The node that answered last: asked first next time."""
        self._retry = Retry(settings.retry, time.monotonic, sleep, rng=rng)
        context = None
        if any(e.scheme == "https" for e in self._endpoints):
            context = ssl.create_default_context(cafile=settings.ca_file)
        self._opener = urllib.request.build_opener(
            urllib.request.HTTPSHandler(context=context), _NoRedirects())

    def __repr__(self) -> str:
        return f"Management({', '.join(e.shown for e in self._endpoints)})"

    # ------------------------------------------------------------------ queues

    def queue(self, name: str, vhost: str = "/") -> QueueInfo:
        """One queue, with its consumers and which one the broker made active."""
        return self._parse(api.get_queue(vhost, name), api.parse_queue)

    def queues(self, vhost: str | None = None) -> list[QueueInfo]:
        """Every queue (of ``vhost``, or of all vhosts), without their consumers' details."""
        return self._parse(api.list_queues(vhost), api.parse_queues)

    def queue_bindings(self, name: str, vhost: str = "/") -> list[BindingInfo]:
        """The bindings of a queue (the default exchange's included, with source ``""``)."""
        return self._parse(api.queue_bindings(vhost, name), api.parse_bindings)

    def put_queue(self, name: str, vhost: str = "/", *, durable: bool = True,
                  auto_delete: bool = False,
                  arguments: Mapping[str, Any] | None = None) -> None:
        """Declare a queue, as AMQP's ``queue.declare`` would (the same again is a no-op; a
        different one is a ``ManagementError``, 400). The node asked first hosts it, or
        leads it for a quorum queue: a client of one node (``ManagementSettings.urls``)
        chooses where."""
        self._send(api.put_queue(vhost, name, durable=durable, auto_delete=auto_delete,
                                 arguments=arguments))

    def delete_queue(self, name: str, vhost: str = "/", *, if_empty: bool = True) -> None:
        """Delete a queue; by default only if it is empty (``ManagementError``, 400,
        otherwise).

        RabbitMQ deletes only classic queues "if empty": a quorum queue (the SDK's default)
        or a stream refuses the flag whatever it holds, and the error says so and what to do.
        Why not check the count and then delete: the count the API shows lags, and a message
        published in between would be deleted with the queue."""
        try:
            self._send(api.delete_queue(vhost, name, if_empty=if_empty))
        except ManagementError as exc:
            if not (if_empty and exc.status == 400 and "if-empty" in exc.answer):
                raise
            raise ManagementError(
                exc.call, exc.method, exc.path, exc.node, exc.status,
                f"{exc.answer}. RabbitMQ deletes only classic queues if empty: for a quorum "
                f"queue or a stream, stop its publishers, let its consumers drain it, then "
                f"delete_queue({name!r}, if_empty=False)") from None

    # ------------------------------------------------------------------ exchanges, bindings

    def put_exchange(self, name: str, kind: str = "direct", vhost: str = "/", *,
                     durable: bool = True) -> None:
        self._send(api.put_exchange(vhost, name, kind, durable=durable))

    def delete_exchange(self, name: str, vhost: str = "/") -> None:
        self._send(api.delete_exchange(vhost, name))

    def bind_queue(self, queue: str, exchange: str, routing_key: str,
                   arguments: Mapping[str, Any] | None = None, vhost: str = "/") -> None:
        """Bind ``queue`` to ``exchange`` (binding the same twice is one binding)."""
        self._send(api.bind_queue(vhost, queue, exchange, routing_key, arguments))

    def unbind_queue(self, queue: str, binding: BindingInfo, vhost: str = "/") -> None:
        """Remove one of the bindings ``queue_bindings`` listed."""
        self._send(api.unbind_queue(vhost, queue, binding.source, binding.properties_key))

    # ------------------------------------------------------------------ policies, parameters

    def policies(self, vhost: str | None = None) -> list[PolicyInfo]:
        return self._parse(api.list_policies(vhost), api.parse_policies)

    def put_policy(self, name: str, pattern: str, definition: Mapping[str, Any], *,
                   vhost: str = "/", priority: int = 0, apply_to: str = "queues") -> None:
        """Create or replace a policy."""
        self._send(api.put_policy(vhost, name, pattern, definition, priority=priority,
                                  apply_to=apply_to))

    def delete_policy(self, name: str, vhost: str = "/") -> None:
        self._send(api.delete_policy(vhost, name))

    def put_parameter(self, component: str, name: str, value: Any, vhost: str = "/") -> None:
        """Create or replace a runtime parameter (``federation-upstream``, ``shovel``...)."""
        self._send(api.put_parameter(component, vhost, name, value))

    def delete_parameter(self, component: str, name: str, vhost: str = "/") -> None:
        self._send(api.delete_parameter(component, vhost, name))

    def parameters(self, component: str, vhost: str | None = None) -> list[ParameterInfo]:
        """The runtime parameters of ``component`` (``federation-upstream``, ``shovel``...),
        of ``vhost`` or of every vhost."""
        return self._parse(api.list_parameters(component, vhost), api.parse_parameters)

    # ------------------------------------------------------------------ federation, shovels

    def federation_links(self, vhost: str | None = "/") -> list[FederationLinkInfo]:
        """The federation links of ``vhost`` (None: of every vhost), as the node that
        answers runs them: a link runs where its queue or exchange lives."""
        return self._parse(api.list_federation_links(vhost), api.parse_federation_links)

    def shovels(self, vhost: str | None = "/") -> list[ShovelInfo]:
        """The shovels of ``vhost`` (None: of every vhost), with their state."""
        return self._parse(api.list_shovels(vhost), api.parse_shovels)

    def restart_shovel(self, name: str, vhost: str = "/") -> None:
        """Restart a dynamic shovel: it reconnects both ends, and sends again what its
        source had not seen confirmed (at least once)."""
        self._send(api.restart_shovel(vhost, name))

    # ------------------------------------------------------------------ the cluster

    def overview(self) -> OverviewInfo:
        """What the broker is (product and versions) and which node answered."""
        return self._parse(api.get_overview(), api.parse_overview)

    def feature_flags(self) -> list[FeatureFlagInfo]:
        """Every feature flag the cluster knows, and whether it is enabled."""
        return self._parse(api.list_feature_flags(), api.parse_feature_flags)

    def nodes(self) -> list[NodeInfo]:
        """The cluster's members, running or not, as the node that answers sees them."""
        return self._parse(api.list_nodes(), api.parse_nodes)

    def get(self, path: str, query: Mapping[str, str] | None = None) -> Any:
        """The decoded JSON of ``GET /api/<path>``, for what no method here reads (a
        connection's ``peer_host``, ``/api/users``...): the escape hatch. ``path`` is the
        API's (``connections``, ``queues/%2F/orders``: names quoted by the caller, as the API
        documents them); ``query`` is encoded here (``{"columns": "name,ssl"}``). A read, so
        retried and failed as the methods' are; what it returns is the broker's JSON,
        unchecked."""
        return self._send(api.get_path(path, query))[0]

    # ------------------------------------------------------------------ connections, channels

    def connections(self) -> list[ConnectionInfo]:
        return self._parse(api.list_connections(), api.parse_connections)

    def close_connections(self, client_name: str, reason: str) -> ConnectionsClosed:
        """Close every connection the client named ``client_name``
        (``ConnectionSettings.name``), telling each client ``reason`` (its connection.close
        says ``CONNECTION_FORCED - <reason>``). Returns what it closed; one closed meanwhile
        is reported as gone. A connection opened within the statistics interval may not be
        listed yet, so it is not closed."""
        found = [c for c in self.connections() if c.client_name == client_name]
        closed = [c for c in found if self.close_connection(c.name, reason)]
        gone = [c for c in found if c not in closed]
        return ConnectionsClosed(client_name, tuple(closed), tuple(gone))

    def close_connection(self, name: str, reason: str) -> bool:
        """Close the connection the broker names ``name`` (``ConnectionInfo.name``), telling
        the client ``reason``; False when it was gone already."""
        try:
            self._send(api.close_connection(name, reason))
        except ManagementNotFound:
            return False
        return True

    def channels(self) -> list[ChannelInfo]:
        """Every channel: its prefetch, global prefetch (a global QoS), unacked deliveries."""
        return self._parse(api.list_channels(), api.parse_channels)

    # ------------------------------------------------------------------ I/O

    def _parse(self, request: Request, parse: Callable[[Any], T]) -> T:
        data, endpoint = self._send(request)
        try:
            return parse(data)
        except Malformed as exc:
            raise ManagementError(request.call, request.method, request.path, endpoint.shown,
                                  200, f"an answer this client cannot read: {exc}") from None

    def _send(self, request: Request) -> tuple[Any, Endpoint]:
        if not request.idempotent:
            return self._once(request)
        return self._retry.run(lambda: self._once(request), retry_on=ManagementUnreachable,
                               give_up=_gave_up)

    def _once(self, request: Request) -> tuple[Any, Endpoint]:
        """Ask each node in turn, from the last that answered, until one answers."""
        count = len(self._endpoints)
        last: ManagementUnreachable | None = None
        for step in range(count):
            index = (self._first + step) % count
            endpoint = self._endpoints[index]
            try:
                status, body, location = self._http(endpoint, request)
            except _NotSent as exc:
                last = self._error(ManagementUnreachable, request, endpoint, None, str(exc))
                continue
            except _NoAnswer as exc:
                last = self._error(ManagementUnreachable, request, endpoint, None, str(exc))
                if request.idempotent:
                    continue
                raise last from None
            if status in api.RETRIED_STATUSES:
                last = self._error(ManagementUnreachable, request, endpoint, status,
                                   api.answer_text(body))
                if request.idempotent:
                    continue
                raise last
            self._first = index
            if 200 <= status < 300:
                try:
                    return api.decode(body), endpoint
                except Malformed as exc:
                    raise self._error(ManagementError, request, endpoint, status,
                                      str(exc)) from None
            if api.is_redirect(status):
                raise self._error(ManagementError, request, endpoint, status,
                                  api.redirect_text(location))
            kind: type[ManagementError] = ManagementError
            if status in (401, 403):
                kind = ManagementRefused
            elif status == 404:
                kind = ManagementNotFound
            raise self._error(kind, request, endpoint, status, api.answer_text(body))
        assert last is not None
        raise last

    @staticmethod
    def _error(kind: type[E], request: Request, endpoint: Endpoint,
                                   status: int | None, answer: str) -> E:
        return kind(request.call, request.method, request.path, endpoint.shown, status, answer)

    def _http(self, endpoint: Endpoint, request: Request) -> tuple[int, bytes, str | None]:
        """One HTTP exchange: the status, body and ``Location`` of any answer, else
        ``_NotSent`` or ``_NoAnswer``."""
        req = urllib.request.Request(endpoint.base + request.path, data=request.body,
                                     method=request.method)
        token = base64.b64encode(f"{endpoint.user}:{endpoint.password}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
        req.add_header("Accept", "application/json")
        if request.body is not None:
            req.add_header("Content-Type", "application/json")
        if request.reason is not None:
            req.add_header("X-Reason", request.reason)
        try:
            with self._opener.open(req, timeout=self.settings.timeout) as answer:
                return int(answer.status), answer.read(), None
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, exc.read(), exc.headers.get("Location")
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, ConnectionRefusedError | socket.gaierror | ssl.SSLError):
                raise _NotSent(_why(exc)) from None
            raise _NoAnswer(_why(exc)) from None
        except (OSError, http.client.HTTPException) as exc:
            raise _NoAnswer(_why(exc)) from None


class AsyncManagement:
    """The asyncio face of ``Management``: the same methods with the same parameters,
    awaited. Each call runs the blocking one in a worker thread (``asyncio.to_thread``): the
    API is a few HTTP requests, and urllib's are the ones the blocking face already retries,
    times out and keeps the credentials of, so both faces behave alike. Safe to share
    between tasks."""

    def __init__(
        self,
        settings: ManagementSettings,
        *,
        sleep: Callable[[float], Any] = time.sleep,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self._blocking = Management(settings, sleep=sleep, rng=rng)
        self.settings = settings

    def __repr__(self) -> str:
        return f"Async{self._blocking!r}"

    # ------------------------------------------------------------------ queues

    async def queue(self, name: str, vhost: str = "/") -> QueueInfo:
        """One queue, with its consumers and which one the broker made active."""
        return await asyncio.to_thread(self._blocking.queue, name, vhost)

    async def queues(self, vhost: str | None = None) -> list[QueueInfo]:
        """Every queue (of ``vhost``, or of all vhosts), without their consumers' details."""
        return await asyncio.to_thread(self._blocking.queues, vhost)

    async def queue_bindings(self, name: str, vhost: str = "/") -> list[BindingInfo]:
        """The bindings of a queue (the default exchange's included, with source ``""``)."""
        return await asyncio.to_thread(self._blocking.queue_bindings, name, vhost)

    async def put_queue(self, name: str, vhost: str = "/", *, durable: bool = True,
                        auto_delete: bool = False,
                        arguments: Mapping[str, Any] | None = None) -> None:
        """As ``Management.put_queue``: declare a queue."""
        await asyncio.to_thread(self._blocking.put_queue, name, vhost, durable=durable,
                                auto_delete=auto_delete, arguments=arguments)

    async def delete_queue(self, name: str, vhost: str = "/", *, if_empty: bool = True) -> None:
        """As ``Management.delete_queue``: by default only if it is empty."""
        await asyncio.to_thread(self._blocking.delete_queue, name, vhost, if_empty=if_empty)

    # ------------------------------------------------------------------ exchanges, bindings

    async def put_exchange(self, name: str, kind: str = "direct", vhost: str = "/", *,
                           durable: bool = True) -> None:
        await asyncio.to_thread(self._blocking.put_exchange, name, kind, vhost, durable=durable)

    async def delete_exchange(self, name: str, vhost: str = "/") -> None:
        await asyncio.to_thread(self._blocking.delete_exchange, name, vhost)

    async def bind_queue(self, queue: str, exchange: str, routing_key: str,
                         arguments: Mapping[str, Any] | None = None, vhost: str = "/") -> None:
        """Bind ``queue`` to ``exchange`` (binding the same twice is one binding)."""
        await asyncio.to_thread(self._blocking.bind_queue, queue, exchange, routing_key,
                                arguments, vhost)

    async def unbind_queue(self, queue: str, binding: BindingInfo, vhost: str = "/") -> None:
        """Remove one of the bindings ``queue_bindings`` listed."""
        await asyncio.to_thread(self._blocking.unbind_queue, queue, binding, vhost)

    # ------------------------------------------------------------------ policies, parameters

    async def policies(self, vhost: str | None = None) -> list[PolicyInfo]:
        return await asyncio.to_thread(self._blocking.policies, vhost)

    async def put_policy(self, name: str, pattern: str, definition: Mapping[str, Any], *,
                         vhost: str = "/", priority: int = 0, apply_to: str = "queues") -> None:
        """Create or replace a policy."""
        await asyncio.to_thread(self._blocking.put_policy, name, pattern, definition,
                                vhost=vhost, priority=priority, apply_to=apply_to)

    async def delete_policy(self, name: str, vhost: str = "/") -> None:
        await asyncio.to_thread(self._blocking.delete_policy, name, vhost)

    async def put_parameter(self, component: str, name: str, value: Any,
                            vhost: str = "/") -> None:
        """Create or replace a runtime parameter (``federation-upstream``, ``shovel``...)."""
        await asyncio.to_thread(self._blocking.put_parameter, component, name, value, vhost)

    async def delete_parameter(self, component: str, name: str, vhost: str = "/") -> None:
        await asyncio.to_thread(self._blocking.delete_parameter, component, name, vhost)

    async def parameters(self, component: str, vhost: str | None = None
                         ) -> list[ParameterInfo]:
        """As ``Management.parameters``: the runtime parameters of ``component``."""
        return await asyncio.to_thread(self._blocking.parameters, component, vhost)

    # ------------------------------------------------------------------ federation, shovels

    async def federation_links(self, vhost: str | None = "/") -> list[FederationLinkInfo]:
        """As ``Management.federation_links``."""
        return await asyncio.to_thread(self._blocking.federation_links, vhost)

    async def shovels(self, vhost: str | None = "/") -> list[ShovelInfo]:
        """As ``Management.shovels``."""
        return await asyncio.to_thread(self._blocking.shovels, vhost)

    async def restart_shovel(self, name: str, vhost: str = "/") -> None:
        """As ``Management.restart_shovel``."""
        await asyncio.to_thread(self._blocking.restart_shovel, name, vhost)

    # ------------------------------------------------------------------ the cluster

    async def overview(self) -> OverviewInfo:
        """As ``Management.overview``."""
        return await asyncio.to_thread(self._blocking.overview)

    async def feature_flags(self) -> list[FeatureFlagInfo]:
        """As ``Management.feature_flags``."""
        return await asyncio.to_thread(self._blocking.feature_flags)

    async def nodes(self) -> list[NodeInfo]:
        """As ``Management.nodes``."""
        return await asyncio.to_thread(self._blocking.nodes)

    async def get(self, path: str, query: Mapping[str, str] | None = None) -> Any:
        """As ``Management.get``: the escape hatch, ``GET /api/<path>``'s decoded JSON."""
        return await asyncio.to_thread(self._blocking.get, path, query)

    # ------------------------------------------------------------------ connections, channels

    async def connections(self) -> list[ConnectionInfo]:
        return await asyncio.to_thread(self._blocking.connections)

    async def close_connections(self, client_name: str, reason: str) -> ConnectionsClosed:
        """As ``Management.close_connections``: every connection of that client name."""
        return await asyncio.to_thread(self._blocking.close_connections, client_name, reason)

    async def close_connection(self, name: str, reason: str) -> bool:
        """As ``Management.close_connection``; False when it was gone already."""
        return await asyncio.to_thread(self._blocking.close_connection, name, reason)

    async def channels(self) -> list[ChannelInfo]:
        """Every channel: its prefetch, global prefetch (a global QoS), unacked deliveries."""
        return await asyncio.to_thread(self._blocking.channels)


def _gave_up(failures: int, elapsed: float, last: BaseException) -> BaseException:
    assert isinstance(last, ManagementUnreachable)
    return ManagementUnreachable(
        last.call, last.method, last.path, last.node, last.status,
        f"{last.answer} (gave up after {failures} attempts over {elapsed:.1f} s, every node)")


__all__ = [
    "AsyncManagement",
    "BindingInfo",
    "ChannelInfo",
    "ConnectionInfo",
    "ConnectionsClosed",
    "ConsumerInfo",
    "FeatureFlagInfo",
    "FederationLinkInfo",
    "Management",
    "ManagementError",
    "ManagementNotFound",
    "ManagementRefused",
    "ManagementSettings",
    "ManagementUnreachable",
    "NodeInfo",
    "OverviewInfo",
    "ParameterInfo",
    "PolicyInfo",
    "QueueInfo",
    "ShovelInfo",
]
