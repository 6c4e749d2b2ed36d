"""Settings, as frozen attrs classes validated when built.

A bad value is refused at construction with a ``ConfigurationError`` that names the setting:
nothing falls back silently to a default. Passwords never show in a ``repr``. Variants are made
with ``attrs.evolve``; ``from_url`` and ``from_env`` are the named constructors.

Example::

    conn = ConnectionSettings.from_url("amqp://app:secret@10.0.0.1:5672/,amqp://app:secret@10.0.0.2/")
    queue = QueueSettings("orders", delivery_limit=5, dead_letter_exchange="orders.dlx")
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs

from ._core.backoff import Backoff
from ._core.checks import at_least as _at_least
from ._core.checks import flag as _flag
from ._core.checks import kind as _kind
from ._core.checks import optional as _optional
from ._core.checks import positive as _positive
from ._core.consuming import Handover, Parking
from ._core.management_api import parse_endpoint
from ._core.outbox import OutboxPolicy
from ._core.partitioning import partition_of
from ._core.poison import MessageIdFrom, worst_case
from ._core.queues import UNLIMITED, BrokerVersion, delivery_limit_argument
from ._core.urls import mask_url as mask_url  # re-exported: the transport and tests use it here
from ._core.urls import split_url
from ._errors import ConfigurationError

DEFAULT_MAX_MESSAGE_SIZE = 128 * 1024 * 1024  # RabbitMQ 3.10's default max_message_size


def parse_amqp_url(url: str) -> urllib.parse.SplitResult:
    """Validate one AMQP URL; raise ConfigurationError naming what is wrong (never the
    password)."""
    parts = split_url(url, ("amqp", "amqps"), "AMQP URL")
    if parts.path.count("/") > 1:
        raise ConfigurationError(
            f"AMQP URL {mask_url(url)!r}: the vhost must be one path segment (write '/' as %2F)"
        )
    return parts


def _urls(value: str | Sequence[str]) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else list(value)
    urls = tuple(u.strip() for u in items if u.strip())
    if not urls:
        raise ConfigurationError("at least one AMQP URL is needed")
    for url in urls:
        parse_amqp_url(url)
    return urls


@attrs.frozen
class ConnectionSettings:
    """How to reach the cluster: one URL per node, tried in order, round-robin on failure."""

    urls: tuple[str, ...] = attrs.field(converter=_urls, repr=lambda u: repr(
        tuple(mask_url(x) for x in u)))
    heartbeat: int = attrs.field(default=5, validator=_at_least(1))
    """Seconds. A dead peer is noticed within about two intervals."""
    connect_timeout: float = attrs.field(default=5.0, validator=_positive)
    blocked_timeout: float = attrs.field(default=60.0, validator=_positive)
    """How long publishing may stay paused by ``connection.blocked`` before it raises."""
    reconnect: Backoff = attrs.field(factory=Backoff, validator=_kind(Backoff))
    name: str | None = None
    """Shown as the connection name in the management UI."""
    ca_file: str | None = None
    """CA bundle for amqps:// (default: the system's trust store)."""

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> ConnectionSettings:
        """From one URL or a comma-separated list of URLs (one per cluster node)."""
        return cls(urls=url, **overrides)

    @classmethod
    def from_env(
        cls, prefix: str = "SAC_", environ: Mapping[str, str] | None = None
    ) -> ConnectionSettings:
        """From ``SAC_AMQP_URLS`` (comma-separated) and optional ``SAC_HEARTBEAT``,
        ``SAC_CONNECT_TIMEOUT``, ``SAC_BLOCKED_TIMEOUT``, ``SAC_CONNECTION_NAME``,
        ``SAC_CA_FILE``."""
        env = os.environ if environ is None else environ
        urls = env.get(f"{prefix}AMQP_URLS")
        if not urls:
            raise ConfigurationError(f"{prefix}AMQP_URLS is not set")
        try:
            _urls(urls)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{prefix}AMQP_URLS: {exc}") from None
        fields = attrs.fields_dict(cls)
        kwargs: dict[str, Any] = {}
        for key, field, kind in (
            ("HEARTBEAT", "heartbeat", int),
            ("CONNECT_TIMEOUT", "connect_timeout", float),
            ("BLOCKED_TIMEOUT", "blocked_timeout", float),
        ):
            raw = env.get(f"{prefix}{key}")
            if raw is not None:
                try:
                    kwargs[field] = kind(raw)
                except ValueError as exc:
                    raise ConfigurationError(
                        f"{prefix}{key}={raw!r} is not a valid {kind.__name__}"
                    ) from exc
                attribute = fields[field]
                if attribute.validator is not None:
                    try:  # name the variable, not only the field, when the value is refused
                        attribute.validator(None, attribute, kwargs[field])
                    except ConfigurationError as exc:
                        raise ConfigurationError(f"{prefix}{key}={raw!r}: {exc}") from None
        if name := env.get(f"{prefix}CONNECTION_NAME"):
            kwargs["name"] = name
        if ca_file := env.get(f"{prefix}CA_FILE"):
            kwargs["ca_file"] = ca_file
        return cls(urls=urls, **kwargs)

    def display_urls(self) -> list[str]:
        return [mask_url(u) for u in self.urls]

    @property
    def vhost(self) -> str:
        """The virtual host the (first) URL names: ``/`` when it names none."""
        return urllib.parse.unquote(urllib.parse.urlsplit(self.urls[0]).path[1:]) or "/"


QueueType = Literal["quorum", "classic"]


def _copy_mapping(value: Mapping[str, Any]) -> dict[str, Any]:
    # a typed converter: with ``converter=dict`` mypy's attrs plugin rejects a plain dict
    return dict(value)


def _queue_name(_inst: object, attribute: attrs.Attribute[str], value: str) -> None:
    what = "queue name" if attribute.name == "name" else attribute.name
    if not isinstance(value, str) or not value or len(value.encode()) > 255:
        raise ConfigurationError(f"{what} must be 1-255 bytes of UTF-8, got {value!r}")
    if value.startswith("amq."):
        raise ConfigurationError(f"{what} {value!r}: the 'amq.' prefix is reserved")


def _queue_type(_inst: object, attribute: attrs.Attribute[str], value: str) -> None:
    if value not in ("quorum", "classic"):
        raise ConfigurationError(f"queue type must be 'quorum' or 'classic', got {value!r}")


DEFAULT_DELIVERY_LIMIT = 20
"""Deliveries of one message before a quorum queue dead-letters it (into the parking queue):
the bound on a crash loop (a handler that kills its process). Handler failures are retried in
the consumer without a redelivery, so only crashes, lost connections and handovers count."""
PARKED_SUFFIX = ".parked"


def _default_parking(inst: QueueSettings) -> str | None:
    name = inst.name
    parking = f"{name}{PARKED_SUFFIX}" if isinstance(name, str) else ""
    if len(parking.encode()) <= 255 and not parking.startswith("amq."):
        return parking
    return None  # name it with parking_queue (a name over 248 bytes, or 'amq')


def _delivery_limit(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or (value < 1
                                                                 and value != UNLIMITED):
        raise ConfigurationError(
            f"{attribute.name} must be None, -1 (no limit) or an int >= 1, got {value!r}")


def _default_limit(inst: QueueSettings) -> int | None:
    has_target = inst.parking_queue is not None or inst.dead_letter_exchange is not None
    return DEFAULT_DELIVERY_LIMIT if inst.type == "quorum" and has_target else None


@attrs.frozen
class QueueSettings:
    """The queue a consumer reads (and a publisher may declare), and where its poison
    messages go.

    By default each queue gets a parking queue next to it (``<name>.parked``, declared with
    it): a message whose handler keeps failing is moved there, with the reason in its
    headers, and the broker dead-letters there too (at least once) what reached the delivery
    limit. Nothing is dropped, and ``sac dlq`` lists and replays what is parked.
    """

    name: str = attrs.field(validator=_queue_name)
    type: QueueType = attrs.field(default="quorum", validator=_queue_type)
    single_active_consumer: bool = True
    parking_queue: str | None = attrs.field(
        default=attrs.Factory(_default_parking, takes_self=True),
        validator=_optional(_queue_name))
    """Where failed messages are parked (declared, or checked when ``declare`` is False, with
    the queue). None: no parking; a message that must leave the queue is then rejected into
    ``dead_letter_exchange``, and without one the consumer stops rather than drop it."""
    dead_letter_exchange: str | None = None
    """The broker's dead-letter target. None with a parking queue: the parking queue (through
    the default exchange)."""
    dead_letter_routing_key: str | None = None
    delivery_limit: int | None = attrs.field(
        default=attrs.Factory(_default_limit, takes_self=True),
        validator=_delivery_limit)
    """Quorum queues: after this many deliveries the broker dead-letters a message. Default
    20 when there is a dead-letter target; a limit without one is refused (the broker would
    drop the message). ``-1``: no limit, declared as ``-1`` on RabbitMQ 4.0 and later (whose
    quorum queues otherwise have a limit of 20) and as no argument on 3.x (which has no
    default limit, and would read -1 as a limit below one delivery). None: no argument,
    which is the broker's default (none on 3.x, 20 on 4.0)."""
    declare: bool = True
    """False: only check, passively, that the queue (and its parking queue) exists
    (arguments are then not checked)."""
    extra_arguments: Mapping[str, Any] = attrs.field(factory=dict, converter=_copy_mapping)

    @property
    def parking_target(self) -> Parking:
        """Where a message that failed for good goes: the parking queue, else the
        dead-letter exchange, else nowhere (the consumer halts)."""
        if self.parking_queue is not None:
            return Parking.QUEUE
        return Parking.NONE if self.dead_letter_exchange is None else Parking.DEAD_LETTER

    def __attrs_post_init__(self) -> None:
        if self.delivery_limit is not None and self.type != "quorum":
            raise ConfigurationError(
                "delivery_limit needs a quorum queue (classic queues count no deliveries)"
            )
        if self.parking_queue == self.name:
            raise ConfigurationError(f"parking_queue must differ from the queue {self.name!r}")
        if self.delivery_limit not in (None, UNLIMITED) and not self.dead_lettered:
            raise ConfigurationError(
                f"delivery_limit={self.delivery_limit} without a dead-letter target: the broker "
                "would drop a message past the limit; set parking_queue or dead_letter_exchange"
            )

    @property
    def dead_lettered(self) -> bool:
        """Whether the broker has somewhere to dead-letter this queue's messages."""
        return self.dead_letter_exchange is not None or self.parking_queue is not None

    def arguments(self, broker: BrokerVersion | None = None) -> dict[str, Any]:
        """The x-arguments ``queue.declare`` sends to ``broker`` (None: not known, taken as
        RabbitMQ 4.0 or later)."""
        args: dict[str, Any] = {"x-queue-type": self.type}
        if self.single_active_consumer:
            args["x-single-active-consumer"] = True
        limit = delivery_limit_argument(self.delivery_limit, broker)
        if limit is not None:
            args["x-delivery-limit"] = limit
        exchange, key = self.dead_letter_exchange, self.dead_letter_routing_key
        if exchange is None and self.parking_queue is not None:
            exchange, key = "", self.parking_queue
        if exchange is not None:
            args["x-dead-letter-exchange"] = exchange
            if key is not None:
                args["x-dead-letter-routing-key"] = key
            if self.type == "quorum":
                # At most once (the default) drops a dead letter whose target is unavailable;
                # at least once keeps it in this queue until the target confirms it, and it
                # needs reject-publish overflow (else RabbitMQ falls back to at most once).
                args["x-dead-letter-strategy"] = "at-least-once"
                args["x-overflow"] = "reject-publish"
        args.update(self.extra_arguments)
        return args

    def parking(self) -> QueueSettings | None:
        """The parking queue's own settings: a quorum queue whatever this queue's type, same
        ``declare``, no single active consumer, no delivery limit (``UNLIMITED``: a 4.x
        quorum queue would otherwise take 20 and, with no dead-letter target, drop a parked
        message once it was listed, given back, 20 times), no dead-lettering.

        Quorum because it is declared with the queue on every start: a classic parking
        queue lives on one node, and while that node is down its declaration fails
        (``404 home node ... is down``), so the consumer of a mirrored classic queue, which
        fails over, could not start again until the node came back (the chaos suite's
        ``mirrored-failover`` found this)."""
        if self.parking_queue is None:
            return None
        return QueueSettings(self.parking_queue, type="quorum", single_active_consumer=False,
                             parking_queue=None, declare=self.declare,
                             delivery_limit=UNLIMITED)


MAX_PARTITIONS = 10_000
"""A group's partition count at most: each is a quorum queue (and its parking queue)."""


def _partition_count(inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PARTITIONS:
        raise ConfigurationError(
            f"{_field(inst, attribute)} must be an integer from 1 to {MAX_PARTITIONS}, "
            f"got {value!r}")


PARTITION_INFIX = ".p"
"""A partition's queue is ``<name>.p<index>``: ``orders.p0`` .. ``orders.p15``."""


def _partitioned_name(inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    _queue_name(inst, attribute, value)
    widest = f"{value}{PARTITION_INFIX}{MAX_PARTITIONS - 1}{PARKED_SUFFIX}"
    if len(widest.encode()) > 255:
        raise ConfigurationError(
            f"PartitionedQueue name {value!r} is too long: its partitions' parking queues "
            "(<name>.p<index>.parked) must fit in 255 bytes")


def _template(_inst: object, _attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, QueueSettings):
        raise ConfigurationError(
            f"PartitionedQueue.template must be a QueueSettings, got {type(value).__name__}")
    if not value.single_active_consumer:
        raise ConfigurationError(
            "PartitionedQueue.template: every partition needs single_active_consumer (one "
            "consumer at a time is what keeps a key's order)")


@attrs.frozen
class PartitionedQueue:
    """``partitions`` single-active queues that hold one stream split by key: a key's
    messages all go to one partition (``route``), in the order they were published, so one
    active consumer per partition keeps each key's order while partitions are consumed side
    by side.

    Partition ``i`` is the queue ``<name>.p<i>`` with the ``template``'s settings (by
    default the SDK's: quorum, single active consumer, a delivery limit) and its own parking
    queue ``<name>.p<i>.parked``. Which partition a key belongs to is
    ``sac.sdk._core.partitioning.partition_of``: the jump consistent hash of the key's
    SHA-256, the same in every language a publisher may be written in.
    """

    name: str = attrs.field(validator=_partitioned_name)
    partitions: int = attrs.field(validator=_partition_count)
    template: QueueSettings = attrs.field(
        factory=lambda: QueueSettings("partition"), validator=_template)
    """Settings every partition's queue takes (its ``name`` and ``parking_queue`` are
    replaced)."""

    def queue_name(self, partition: int) -> str:
        if isinstance(partition, bool) or not isinstance(partition, int) \
                or not 0 <= partition < self.partitions:
            raise ValueError(f"partition {partition!r} is not one of {self.name}'s "
                             f"0..{self.partitions - 1}")
        return f"{self.name}{PARTITION_INFIX}{partition}"

    def queue(self, partition: int) -> QueueSettings:
        """Partition ``partition``'s queue settings."""
        name = self.queue_name(partition)
        parking = None if self.template.parking_queue is None else f"{name}{PARKED_SUFFIX}"
        return attrs.evolve(self.template, name=name, parking_queue=parking)

    def queues(self) -> list[QueueSettings]:
        return [self.queue(p) for p in range(self.partitions)]

    def partition_of(self, key: str | bytes) -> int:
        """The partition ``key``'s messages go to."""
        if not isinstance(key, str | bytes) or not key:
            raise ValueError(f"a partition key is a non-empty str or bytes, got {key!r}")
        return partition_of(key, self.partitions)

    def route(self, key: str | bytes) -> str:
        """The queue ``key``'s messages go to (the routing key on the default exchange)."""
        return self.queue_name(self.partition_of(key))


@attrs.frozen
class PublisherSettings:
    """A publisher with confirms always on."""

    connection: ConnectionSettings
    window: int = attrs.field(default=1000, validator=_at_least(1))
    """At most this many messages unconfirmed at once."""
    mandatory: bool = True
    nack_backoff: Backoff = attrs.field(
        factory=lambda: Backoff(initial=0.05, maximum=1.0, max_attempts=50, max_elapsed=30.0),
        validator=_kind(Backoff),
    )
    """A nacked message is sent again under this policy (a quorum queue nacks while it
    elects a leader, for up to a few seconds); then its publish fails with MessageNacked."""
    nack_stall_timeout: float = attrs.field(default=2.0, validator=_positive)
    """A channel that gets only nacks for this long is replaced by a new connection.
    Seen with RabbitMQ 3.10: a channel that starts publishing to a quorum queue while the
    queue elects a new leader can go on nacking every message long after the election."""
    throttle_on_nack: bool = attrs.field(default=True, validator=_flag)
    """On a nack, halve how many messages may be in flight (down to one probe, the next probe
    paced by ``nack_backoff``'s caps with jitter), growing back by one per ack to ``window``:
    a quorum queue electing a leader then sees a probe at a time instead of the whole window,
    each one nacked and sent again. The window still bounds what ``send`` accepts. False refills
    every freed slot at once: only worth it when one publisher feeds
    several queues, since a nacking queue slows the publishes to every queue."""
    confirm_timeout: float = attrs.field(default=60.0, validator=_positive)
    """Longest wait for one message's confirm, reconnects included."""
    close_timeout: float = attrs.field(default=30.0, validator=_positive)
    max_message_size: int = attrs.field(default=DEFAULT_MAX_MESSAGE_SIZE, validator=_at_least(1))
    queue: QueueSettings | None = None
    """Declared (or checked) on every connect, so that messages are routable from the start."""

    def outbox_policy(self) -> OutboxPolicy:
        """What the outbox decides with: the one place a publisher (either face, or the
        simulator) turns these settings into its engine's policy."""
        return OutboxPolicy(
            window=self.window,
            nack_backoff=self.nack_backoff,
            throttle_on_nack=self.throttle_on_nack,
            nack_stall_timeout=self.nack_stall_timeout,
            blocked_timeout=self.connection.blocked_timeout,
            confirm_timeout=self.confirm_timeout,
        )


def _management_urls(value: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        items: list[Any] = [u for u in value.split(",") if u.strip()]
    elif isinstance(value, Sequence):
        items = list(value)
    else:
        raise ConfigurationError(f"management URLs must be a string or a list, got {value!r}")
    if not items:
        raise ConfigurationError("at least one management URL is needed")
    for url in items:
        parse_endpoint(url)
    return tuple(u.strip() for u in items)


MANAGEMENT_RETRY = Backoff(initial=0.1, maximum=1.0, max_attempts=3, max_elapsed=5.0)
"""A read (GET) that got no answer, or a 5xx, is tried again on the next node under this
policy; a write (PUT, DELETE) never is: it may have been applied."""


@attrs.frozen
class ManagementSettings:
    """How to reach the management HTTP API: one URL per node
    (``http(s)://user:password@host:15672``), tried in order while a node does not answer.

    Example::

        ManagementSettings.from_url("http://app:secret@10.0.0.1:15672,http://app:secret@10.0.0.2:15672")
    """

    urls: tuple[str, ...] = attrs.field(converter=_management_urls, repr=lambda u: repr(
        tuple(mask_url(x) for x in u)))
    timeout: float = attrs.field(default=5.0, validator=_positive)
    """Seconds per request (connect and answer)."""
    ca_file: str | None = attrs.field(default=None, validator=_optional(_kind(str)))
    """CA bundle for https:// (default: the system's trust store)."""
    statistics_interval: float = attrs.field(default=5.0, validator=_positive)
    """Seconds: how old the API's answers may be. The broker's ``collect_statistics_interval``
    and its management agent's finest sample step (``management.sample_retention_policies``):
    5 s in RabbitMQ's defaults, 1 s on ``sac server up`` clusters. A consumer polls its role
    at half this (``ConsumerSettings.role_poll_interval``)."""
    retry: Backoff = attrs.field(factory=lambda: MANAGEMENT_RETRY, validator=_kind(Backoff))

    def __attrs_post_init__(self) -> None:
        if self.ca_file is not None and not any(u.strip().startswith("https:")
                                                for u in self.urls):
            raise ConfigurationError("ca_file is only used with https:// management URLs")

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> ManagementSettings:
        """From one URL or a comma-separated list of URLs (one per node)."""
        return cls(urls=url, **overrides)

    @classmethod
    def from_env(cls, prefix: str = "SAC_",
                 environ: Mapping[str, str] | None = None) -> ManagementSettings:
        """From ``SAC_MANAGEMENT_URLS`` (comma-separated) and optional
        ``SAC_MANAGEMENT_CA_FILE`` and ``SAC_MANAGEMENT_STATISTICS_INTERVAL`` (seconds: the
        broker's statistics interval, which ``sac server env`` prints for its clusters)."""
        env = os.environ if environ is None else environ
        urls = env.get(f"{prefix}MANAGEMENT_URLS")
        if not urls:
            raise ConfigurationError(f"{prefix}MANAGEMENT_URLS is not set")
        kwargs: dict[str, Any] = {}
        raw = env.get(f"{prefix}MANAGEMENT_STATISTICS_INTERVAL")
        if raw is not None:
            try:
                kwargs["statistics_interval"] = float(raw)
            except ValueError:
                raise ConfigurationError(
                    f"{prefix}MANAGEMENT_STATISTICS_INTERVAL={raw!r} is not a number of "
                    "seconds") from None
        try:
            return cls(urls=urls, ca_file=env.get(f"{prefix}MANAGEMENT_CA_FILE") or None,
                       **kwargs)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{prefix}MANAGEMENT_URLS: {exc}") from None

    def display_urls(self) -> list[str]:
        return [mask_url(u) for u in self.urls]


HANDLER_RETRY = Backoff(initial=0.5, maximum=8.0, max_attempts=4, max_elapsed=60.0)
PARK_NACK_RETRY = Backoff(initial=0.05, maximum=1.0, max_attempts=40, max_elapsed=30.0)
"""A parked copy the broker nacks is sent again under this policy, then the park fails."""
"""Four retries after the first failure, up to 0.5, 1, 2 and 4 s apart (full jitter): about
4 s in all on average, 7.5 s at most, before the message is parked."""
MAX_RETRY_WAIT = 600.0
"""A message in retries stays unacked; the broker's consumer timeout (30 min by default)
closes the channel of a consumer that holds one longer."""


def _retry_bound(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, Backoff):
        raise ConfigurationError(f"{attribute.name} must be a Backoff, got {value!r}")
    if worst_case(value) > MAX_RETRY_WAIT:
        raise ConfigurationError(
            f"{attribute.name} may keep a message unacked for {worst_case(value):.0f} s; at most "
            f"{MAX_RETRY_WAIT:.0f} s (the broker's consumer timeout would close the channel)")


PRIORITY_BOUND = 2**31
"""``x-priority`` is a signed 32-bit integer on the wire."""


def _priority(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if (isinstance(value, bool) or not isinstance(value, int)
            or not -PRIORITY_BOUND <= value < PRIORITY_BOUND):
        raise ConfigurationError(
            f"{attribute.name} must be an int (a signed 32-bit x-priority), got {value!r}")


def _id_source(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not isinstance(value, MessageIdFrom):
        raise ConfigurationError(
            f"{attribute.name} must be MessageIdFrom.header(name) or MessageIdFrom.content(), "
            f"got {value!r}")


def _zk_path(what: str, value: Any) -> None:
    """An absolute ZooKeeper path, as ZooKeeper takes it (no trailing '/', no empty, '.' or
    '..' segment), outside ZooKeeper's own ``/zookeeper``."""
    segments = value.split("/")[1:] if isinstance(value, str) else []
    if (not isinstance(value, str) or not value.startswith("/") or value == "/"
            or any(seg in ("", ".", "..") for seg in segments)
            or segments[0] == "zookeeper" or "\0" in value):
        raise ConfigurationError(
            f"{what} must be an absolute ZooKeeper path such as '/sac/orders' (no trailing "
            f"'/', no empty, '.' or '..' part, not under /zookeeper), got {value!r}")


def _field(inst: object, attribute: attrs.Attribute[Any]) -> str:
    """``Class.field``, as an error names it."""
    return f"{type(inst).__name__}.{attribute.name}"


def _zk_group(inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    _zk_path(_field(inst, attribute), value)


def _zk_hosts(inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    """ZooKeeper's connection string: ``host:port,host:port[/chroot]``."""
    what = _field(inst, attribute)
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(
            f"{what} must be ZooKeeper's connection string ('host:port,host:port[/chroot]'), "
            f"got {value!r}")
    servers, slash, chroot = value.partition("/")
    for server in servers.split(","):
        server = server.strip()
        host, port = server, "2181"  # kazoo's default port
        if server.rfind(":") > server.rfind("]"):  # a port, not a colon of [IPv6]
            host, _, port = server.rpartition(":")
        if not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigurationError(f"{what}: {server!r} in {value!r} is not a host:port")
    if slash:
        _zk_path(f"{what}'s chroot", f"/{chroot}")


def _session_timeout(inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not 0.001 <= value <= 3600):
        raise ConfigurationError(
            f"{_field(inst, attribute)} must be a number of seconds in [0.001, 3600] (the "
            f"ZooKeeper server's bounds apply too), got {value!r}")


def _zk_auth(_inst: object, _attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if (not isinstance(value, tuple) or len(value) != 2
            or not all(isinstance(part, str) and part for part in value)):
        # Never the value itself: it may hold the password.
        got = f"a {type(value).__name__}"
        if isinstance(value, tuple):
            got = f"a tuple of {len(value)}"
            if len(value) == 2:
                bad = "user" if not (isinstance(value[0], str) and value[0]) else "password"
                got = f"a pair whose {bad} is not a non-empty string"
        raise ConfigurationError(
            "GuardSettings.auth must be None or a (user, password) pair of non-empty "
            f"strings, got {got}")
    if ":" in value[0]:
        raise ConfigurationError(
            f"GuardSettings.auth: the user {value[0]!r} must not contain ':' (ZooKeeper's "
            "digest scheme reads 'user:password')")


def _auth_pair(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _shown_auth(value: tuple[Any, ...] | None) -> str:
    """``auth`` without its password: safe to log."""
    if value is None:
        return "None"
    return repr(tuple(part if i == 0 else "***" for i, part in enumerate(value)))


GUARD_RETRY = Backoff(initial=0.1, maximum=5.0, max_attempts=None, max_elapsed=60.0)
"""How long a guarded consumer keeps joining its election while ZooKeeper is connected but
refuses (no permission on the group's path, a path that cannot exist): then it stops."""


@attrs.frozen
class GuardSettings:
    """One consumer of a group at a time, elected in ZooKeeper, fencing its inbox with the
    election's token (extra ``zk``: kazoo). Give it to ``ConsumerSettings.guard``.

    The consumer subscribes only while it leads ``group``. Its ZooKeeper session is the
    lease: a leader whose process freezes or whose host is lost is replaced once the session
    expires (``session_timeout``), never earlier; a leader cut off from ZooKeeper pauses
    (starts no new work) once kazoo notices, about two thirds of the lease later, and gives
    its channel up when told the session is gone.

    Example::

        guard = GuardSettings("zk1:2181,zk2:2181,zk3:2181", "/sac/orders", session_timeout=4)
        Consumer(ConsumerSettings(conn, QueueSettings("orders"), guard=guard), inbox).run()
    """

    hosts: str = attrs.field(validator=_zk_hosts)
    """ZooKeeper's connection string: ``host:port,host:port[/chroot]``."""
    group: str = attrs.field(validator=_zk_group)
    """The election's path: every consumer that must never work at the same time as another
    one (of one queue, or of a queue federated across clusters) names the same group."""
    session_timeout: float = attrs.field(default=10.0, validator=_session_timeout)
    """Seconds: the lease. Takeover after a leader froze takes about this long; too short and
    a GC pause or a slow network costs a leadership. The server must grant it exactly (it
    allows 2 to 20 x its tickTime by default): anything else fails ``start()`` with a
    ``ConfigurationError`` naming the server's bound."""
    connect_timeout: float = attrs.field(default=10.0, validator=_positive)
    """How long ``start()`` waits for a ZooKeeper session."""
    retry: Backoff = attrs.field(factory=lambda: GUARD_RETRY, validator=_kind(Backoff))
    """Joining the election again after a failure while connected (full jitter); spent,
    the consumer stops. (A lost connection is not a failure: kazoo reconnects.)"""
    evict: bool = attrs.field(default=True, validator=_flag)
    """A new leader asks the broker to close its predecessor's AMQP connection (the record
    of an older token; a frozen leader whose lease expired), so that a native single-active
    queue is handed over at once instead of after missed heartbeats. Needs
    ``ConsumerSettings.management`` (the API of the cluster the consumer's queue is on); a
    failing eviction is logged and the takeover waits for the heartbeats. Only a consumer
    of this queue, in this vhost, under this consumer's user is ever closed, whatever the
    record names."""
    auth: tuple[str, str] | None = attrs.field(default=None, converter=_auth_pair,
                                               validator=_zk_auth, repr=_shown_auth)
    """``(user, password)``: the session authenticates with ZooKeeper's ``digest`` scheme,
    and the group's nodes (the group, its election and its leader record) get an ACL giving
    that user every permission and nobody else any, so that nobody without the credentials
    can read the record, forge one, or join the election; nodes made before without it are
    restricted at ``start()``. Every consumer of a group gives the same pair. None: the
    nodes are open to anyone who reaches ZooKeeper (its default ACL)."""


@attrs.frozen
class GroupSettings:
    """A consumer group in ZooKeeper (extra ``zk``): its members, and which of them owns
    which of the ``partitions`` (``sac.sdk.group``). Every member of a group gives the same
    ``group`` and ``partitions``; a member whose count differs from the group's record is
    refused at start."""

    hosts: str = attrs.field(validator=_zk_hosts)
    """ZooKeeper's connection string: ``host:port,host:port[/chroot]``."""
    group: str = attrs.field(validator=_zk_group)
    """The group's path, e.g. ``/sac/groups/orders``."""
    partitions: int = attrs.field(validator=_partition_count)
    session_timeout: float = attrs.field(default=10.0, validator=_session_timeout)
    """Seconds: the lease. A member whose process froze or whose host is lost counts as
    gone once its session expires, and its partitions go to others then."""
    connect_timeout: float = attrs.field(default=10.0, validator=_positive)


@attrs.frozen
class ConsumerSettings:
    """A consumer with manual acks, sent only after the handler returned."""

    connection: ConnectionSettings
    queue: QueueSettings
    prefetch: int = attrs.field(default=100, validator=_at_least(1))
    ack_batch: int = attrs.field(default=50, validator=_at_least(1))
    """Acks go out as one ``multiple`` ack per this many handled messages, and at once
    whenever no further delivery is waiting, so batching never delays an idle consumer."""
    consumer_name: str | None = None
    stop_timeout: float = attrs.field(default=30.0, validator=_positive)
    """Graceful stop: how long in-flight handlers may take to finish."""
    retry: Backoff = attrs.field(factory=lambda: HANDLER_RETRY, validator=_retry_bound)
    """A handler (or inbox effect) that raises is run again for the same message, in this
    process, the message unacked, under this policy; then the message is parked. Nothing
    behind it on the queue is handled meanwhile (that keeps the order)."""
    message_id_from: MessageIdFrom | None = attrs.field(default=None, validator=_id_source)
    """Where a message published without a ``message_id`` gets one (for the inbox):
    ``MessageIdFrom.header(name)`` or ``MessageIdFrom.content(headers=...)``."""
    guard: GuardSettings | None = attrs.field(default=None,
                                              validator=_optional(_kind(GuardSettings)))
    """Subscribe only while leading a ZooKeeper election (extra ``zk``); its token becomes
    the inbox's epoch. A setting, not an object, so the consumer owns the session's life
    (joins after its link is up, leaves only after its graceful handover) and can wire the
    token into its inbox itself."""
    management: ManagementSettings | None = attrs.field(
        default=None, validator=_optional(_kind(ManagementSettings)))
    """With it, a consumer of a single-active queue asks the management API which consumer
    the broker made active, every ``role_poll_interval``: it becomes ``active`` without
    waiting for a delivery (an empty queue), and goes back to ``waiting`` when the broker
    names another consumer while it still thinks itself active. Late by up to the broker's
    statistics interval plus the poll interval. None: the role comes from deliveries only."""
    role_poll_interval: float | None = attrs.field(default=None, validator=_optional(_positive))
    """Seconds between two role polls; None: half ``management.statistics_interval``."""
    priority: int | None = attrs.field(default=None, validator=_optional(_priority))
    """The consumer's priority (``x-priority``), None for the broker's default (0). On a
    single-active quorum queue of RabbitMQ 4.0 or later, a consumer of higher priority
    becomes the active one once the current one has acked what it holds: a rolling deploy
    starts the new version one step higher and the old one hands over without a stop (see
    docs/guides/coordination.md, "Rolling deploy with priorities"). RabbitMQ 3.x ignores it
    for the single active consumer (the first subscribed stays active)."""
    handover: Handover = attrs.field(default=Handover.CLOSE, validator=_kind(Handover))
    """How a graceful stop hands the queue over: ``CLOSE`` (acks, then the channel closed
    with its subscription in place) keeps the queue's order; ``CANCEL`` (``basic.cancel``
    first, the SDK's order before) breaks it whenever messages were prefetched, and exists
    only so that the chaos suite can show the checker catching that."""

    @property
    def role_poll(self) -> float | None:
        """Seconds between two role polls, or None when the role is not polled."""
        if self.management is None or not self.queue.single_active_consumer:
            return None
        if self.role_poll_interval is not None:
            return self.role_poll_interval
        return self.management.statistics_interval / 2
