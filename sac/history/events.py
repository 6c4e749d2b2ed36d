"""The events of a history, one class per kind: what the SDK's recorder, the chaos actors and
the nemesis write, and what the checker reads (``docs/history.md``).

Each class knows its ``KIND`` (the ``type`` of its JSON line), who writes it (``WRITER``) and
its fields, each with a one-line meaning; the JSON Schema (``schema``) and the table of
``docs/history.md`` (``markdown``) are generated from them, so the format has one source.

A line is ``{"ts": ..., "actor": ..., "type": KIND, **fields}``: ``ts`` and ``actor`` belong to
the recorder (its clock and its actor), the rest to the event. An optional field (``None`` by
default) is left out of the line when it is ``None``; every other field is always written,
``null`` included.

Message ids are strings here, already in their canonical text: the SDK turns an id a publisher
sent as octets into that text (``sac.sdk.dedup.id_key``) where it builds the event, since the
rule is the dedup stores' and this module imports nothing of the SDK.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal

Cancelling = Literal["server", "client"]
Skipping = Literal["redelivered-seen", "id-seen"]
Refusal = Literal["stale-epoch", "duplicate"]
Eviction = Literal["closed", "none", "failed"]

DOC: Final = "doc"
OPTIONAL: Final = "optional"


def _doc(text: str) -> dict[str, Any]:
    """A field's metadata: its meaning, for the schema and the docs."""
    return {DOC: text}


def _optional(text: str) -> dict[str, Any]:
    """An optional field's metadata: left out of the line when ``None``."""
    return {DOC: text, OPTIONAL: True}


_MSG = "the message id (the publisher's, kept across retransmissions)"
_MSG_OR_NULL = ("the message id; `null` when the message carried none (the checker reads such a "
                "line as malformed)")
_MSG_OF_TAG = ("the message id; `null` when the consumer did not know it (the checker reads "
               "such a line as malformed)")
_QUEUE = "the queue"
_EPOCH = "the fencing epoch the inbox claimed; `null` without an inbox"


@dataclass(frozen=True, slots=True, kw_only=True)
class Publish:
    """A first `basic.publish` of this message."""

    KIND: ClassVar[str] = "publish"
    WRITER: ClassVar[str] = "publisher"
    msg: str = field(metadata=_doc(_MSG))
    seq: int = field(metadata=_doc("per publisher, increasing: the order it wrote its messages"))
    queue: str = field(metadata=_doc("the routing key: the queue, on the default exchange"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Retransmit:
    """Published again after a reconnect, same id."""

    KIND: ClassVar[str] = "retransmit"
    WRITER: ClassVar[str] = "publisher"
    msg: str = field(metadata=_doc(_MSG))
    seq: int = field(metadata=_doc("the `seq` of its first publish"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Confirm:
    """The broker confirmed it (`basic.ack` on the confirm channel)."""

    KIND: ClassVar[str] = "confirm"
    WRITER: ClassVar[str] = "publisher"
    msg: str = field(metadata=_doc(_MSG))


@dataclass(frozen=True, slots=True, kw_only=True)
class Nack:
    """The broker refused it (`basic.nack`)."""

    KIND: ClassVar[str] = "nack"
    WRITER: ClassVar[str] = "publisher"
    msg: str = field(metadata=_doc(_MSG))


@dataclass(frozen=True, slots=True, kw_only=True)
class Return:
    """Unroutable (`basic.return`)."""

    KIND: ClassVar[str] = "return"
    WRITER: ClassVar[str] = "publisher"
    msg: str = field(metadata=_doc(_MSG))


@dataclass(frozen=True, slots=True, kw_only=True)
class Connected:
    """A connection opened."""

    KIND: ClassVar[str] = "connected"
    WRITER: ClassVar[str] = "any client"
    node: str = field(metadata=_doc("host:port"))
    reason: str = field(metadata=_doc("why: the SDK writes `start` or `retry`"))


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionLost:
    """A connection was found dead."""

    KIND: ClassVar[str] = "connection_lost"
    WRITER: ClassVar[str] = "any client"
    node: str = field(metadata=_doc("host:port"))
    reason: str = field(metadata=_doc("why, as the client saw it"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscribed:
    """`basic.consume-ok`: the consumer is subscribed."""

    KIND: ClassVar[str] = "subscribed"
    WRITER: ClassVar[str] = "consumer"
    queue: str = field(metadata=_doc(_QUEUE))
    by: Cancelling = field(metadata=_doc("who subscribed: always `client`"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Cancelled:
    """The subscription ended: a cancel, or a graceful stop's close (which ends it without
    one)."""

    KIND: ClassVar[str] = "cancelled"
    WRITER: ClassVar[str] = "consumer"
    queue: str = field(metadata=_doc(_QUEUE))
    by: Cancelling = field(metadata=_doc(
        "`server` (the broker cancelled) or `client` (a graceful hand-back)"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Active:
    """This consumer started receiving as the single active one."""

    KIND: ClassVar[str] = "active"
    WRITER: ClassVar[str] = "consumer"
    queue: str = field(metadata=_doc(_QUEUE))
    epoch: int | None = field(metadata=_doc(_EPOCH))


@dataclass(frozen=True, slots=True, kw_only=True)
class Deliver:
    """A `basic.deliver` reached the handler."""

    KIND: ClassVar[str] = "deliver"
    WRITER: ClassVar[str] = "consumer"
    msg: str | None = field(metadata=_doc(_MSG_OR_NULL))
    redelivered: bool = field(metadata=_doc("the broker's redelivered flag"))
    delivery_count: int | None = field(metadata=_doc(
        "the quorum queue's `x-delivery-count`, if any"))


@dataclass(frozen=True, slots=True, kw_only=True)
class DuplicateSkipped:
    """Dedup decided not to run the handler."""

    KIND: ClassVar[str] = "duplicate_skipped"
    WRITER: ClassVar[str] = "consumer"
    msg: str | None = field(metadata=_doc(_MSG_OR_NULL))
    why: Skipping = field(metadata=_doc(
        "`redelivered-seen`: redelivered, and the sink has it; `id-seen`: the inbox has the id"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Commit:
    """The handler's effect was committed to the sink."""

    KIND: ClassVar[str] = "commit"
    WRITER: ClassVar[str] = "consumer"
    msg: str | None = field(metadata=_doc(_MSG_OR_NULL))
    epoch: int | None = field(metadata=_doc(_EPOCH))


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitRejected:
    """The sink refused the effect."""

    KIND: ClassVar[str] = "commit_rejected"
    WRITER: ClassVar[str] = "consumer"
    msg: str | None = field(metadata=_doc(_MSG_OR_NULL))
    epoch: int | None = field(metadata=_doc(_EPOCH))
    why: Refusal = field(metadata=_doc(
        "`stale-epoch`: a newer consumer claimed the queue; `duplicate`: another commit of the "
        "id came first"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Ack:
    """An acknowledgement was sent."""

    KIND: ClassVar[str] = "ack"
    WRITER: ClassVar[str] = "consumer"
    msg: str | None = field(metadata=_doc(_MSG_OF_TAG))


@dataclass(frozen=True, slots=True, kw_only=True)
class Reject:
    """A `basic.reject` was sent: given back (`requeue`) or dropped, or parked."""

    KIND: ClassVar[str] = "reject"
    WRITER: ClassVar[str] = "consumer"
    msg: str | None = field(metadata=_doc(_MSG_OF_TAG))
    requeue: bool = field(metadata=_doc("given back to the queue"))
    parked: str | None = field(default=None,
                               metadata=_optional("the parking queue it was moved to"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Evict:
    """A frozen predecessor's connection was closed (a guarded consumer's; counted under
    `unknown_events` by the checker)."""

    KIND: ClassVar[str] = "evict"
    WRITER: ClassVar[str] = "guarded consumer"
    outcome: Eviction = field(metadata=_doc("`none`: nothing to close"))
    connection: str = field(metadata=_doc("the predecessor's connection name"))
    token: int = field(metadata=_doc("this leader's fencing token"))
    previous_token: int = field(metadata=_doc("the predecessor's token"))
    closed: int | None = field(default=None, metadata=_optional("connections closed"))
    gone: int | None = field(default=None, metadata=_optional("connections already gone"))
    error: str | None = field(default=None, metadata=_optional("why it failed"))


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultStart:
    """A fault was injected."""

    KIND: ClassVar[str] = "fault_start"
    WRITER: ClassVar[str] = "nemesis"
    fault: str = field(metadata=_doc("e.g. `reset_peer`, `timeout`, `latency`, `kill_node`"))
    target: str = field(metadata=_doc("what it hit: a node, a proxy, an actor"))
    params: Mapping[str, Any] = field(metadata=_doc("the fault's parameters"))


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultEnd:
    """A fault was healed."""

    KIND: ClassVar[str] = "fault_end"
    WRITER: ClassVar[str] = "nemesis"
    fault: str = field(metadata=_doc("as its `fault_start`"))
    target: str = field(metadata=_doc("as its `fault_start`"))
    params: Mapping[str, Any] = field(metadata=_doc("as its `fault_start`"))


HistoryEvent = (
    Publish | Retransmit | Confirm | Nack | Return | Connected | ConnectionLost | Subscribed
    | Cancelled | Active | Deliver | DuplicateSkipped | Commit | CommitRejected | Ack | Reject
    | Evict | FaultStart | FaultEnd
)
"""Any event; a ``match`` over it ends in ``case _: assert_never(event)``."""

EVENTS: Final[tuple[type[HistoryEvent], ...]] = (
    Publish, Retransmit, Confirm, Nack, Return, Connected, ConnectionLost, Subscribed,
    Cancelled, Active, Deliver, DuplicateSkipped, Commit, CommitRejected, Ack, Reject, Evict,
    FaultStart, FaultEnd,
)
"""Every event class, in the order the documentation lists them."""

BY_KIND: Final[Mapping[str, type[HistoryEvent]]] = {cls.KIND: cls for cls in EVENTS}
KINDS: Final[tuple[str, ...]] = tuple(BY_KIND)
"""Every ``type`` a history line may have; the checker counts any other in
``unknown_events``."""

MESSAGE_KINDS: Final = frozenset(
    cls.KIND for cls in EVENTS if "msg" in {f.name for f in dataclasses.fields(cls)})
"""Kinds that carry a message id (``msg``); the checker refuses such a line without one."""

ENVELOPE: Final = ("ts", "actor", "type")
"""The fields every line has besides its event's: set by the recorder."""

_SHAPE: Final[Mapping[type[HistoryEvent], tuple[tuple[str, bool], ...]]] = {
    cls: tuple((f.name, bool(f.metadata.get(OPTIONAL))) for f in dataclasses.fields(cls))
    for cls in EVENTS
}


class UnknownEvent(ValueError):
    """A kind or a field the contract does not have."""


def event_of(kind: str, fields: Mapping[str, Any]) -> HistoryEvent:
    """The event of ``kind`` with ``fields``: ``UnknownEvent`` for a kind or a field the
    contract does not have, or a required field missing."""
    try:
        cls = BY_KIND[kind]
    except KeyError:
        raise UnknownEvent(f"history event kind {kind!r} is not one of {', '.join(KINDS)}"
                           ) from None
    try:
        return cls(**fields)
    except TypeError as exc:  # an unexpected or a missing keyword
        names = ", ".join(name for name, _ in _SHAPE[cls])
        raise UnknownEvent(f"history event {kind!r} takes {names}: {exc}") from None


def fields_of(event: HistoryEvent) -> dict[str, Any]:
    """``event``'s fields as its line holds them: optional ones only when set."""
    found = {}
    for name, optional in _SHAPE[type(event)]:
        value = getattr(event, name)
        if value is not None or not optional:
            found[name] = value
    return found


def to_line(event: HistoryEvent, *, ts: float, actor: str) -> dict[str, Any]:
    """The JSON object of ``event``'s line (``json.dumps`` it): the envelope, then its
    fields."""
    return {"ts": ts, "actor": actor, "type": event.KIND, **fields_of(event)}
