"""Whether a new leader evicts its predecessor's AMQP connection, and which one: pure.

A frozen leader (a stopped process, a lost host) keeps its AMQP connection open as far as
the broker can tell until two heartbeats go unanswered (11-15 s at a heartbeat of 5 s), and a
native single-active queue stays with it until then. The guard replaces it sooner: its
ZooKeeper session (the lease) expires, the next contender wins with a newer token, reads the
old leader's record, and asks the management API to close exactly that leader's connection;
the broker then hands the queue over at once and requeues what the frozen one held.

What makes that safe:

- the record names one consumer instance: a guarded consumer's connection name carries an
  instance id (``instance_connection_name``), and a record whose name does not is never used
  (a name shared by two consumers would close the wrong one);
- only a predecessor: a record whose token is older than the new leader's. A live leader's
  lease is current, so nobody holds a newer token than it (a standby never evicts; a record
  with an equal or higher token is not a predecessor's);
- never its own connection (a consumer elected again after it lost its session);
- only where it helps: a native single-active queue (elsewhere the guard alone keeps the
  others off and the broker hands nothing over) and a management URL to ask;
- only a connection that is what a predecessor's would be (``targets``): one the broker
  lists as a consumer of this queue, in this vhost, under a user this consumer connects
  as. A record can be forged (anyone who may write the group's nodes in ZooKeeper: give the
  guard credentials, ``GuardSettings.auth``); whatever it names, a connection that consumes
  another queue, lives in another vhost or belongs to another user is never closed.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

import attrs

from .guarding import LeaderRecord, Leadership
from .management_api import ConnectionInfo

INSTANCE_MARK = "#sac-"
"""Between a connection's base name and its instance id."""
_INSTANCE = re.compile(re.escape(INSTANCE_MARK) + r"[0-9a-f]{16}$")


def instance_connection_name(base: str, instance: str) -> str:
    """``base`` made unique to one consumer instance (``instance``: 16 random hex digits,
    the same for its reconnects): what the broker shows as the connection's client-provided
    name and the leader record holds."""
    if not re.fullmatch(r"[0-9a-f]{16}", instance):
        raise ValueError(f"an instance id is 16 hex digits, got {instance!r}")
    return f"{base}{INSTANCE_MARK}{instance}"


def names_one_instance(connection: str) -> bool:
    """Whether ``connection`` is a name ``instance_connection_name`` made."""
    return _INSTANCE.search(connection) is not None


@attrs.frozen(kw_only=True)
class Evict:
    """Close every connection the client named ``connection`` (one consumer instance),
    telling it ``reason``."""

    connection: str
    reason: str
    token: int
    """The new leader's."""
    previous: LeaderRecord


@attrs.frozen(kw_only=True)
class Keep:
    """Close nothing, because ``why``."""

    why: str


def eviction_reason(token: int, previous: LeaderRecord, group: str) -> str:
    """What the evicted client reads in its connection.close (``CONNECTION_FORCED - ...``),
    an HTTP header's worth of ASCII."""
    text = (f"sac guard {group}: replaced by the leader with token {token}; the lease of "
            f"token {previous.token} expired")
    return text.encode("ascii", "replace").decode()


def decide_eviction(
    leadership: Leadership,
    own_connection: str,
    group: str,
    *,
    single_active: bool,
    management: bool,
    enabled: bool = True,
) -> Evict | Keep:
    """What a consumer that just won ``leadership`` does about its predecessor's
    connection (see the module docstring for why each rule holds)."""
    previous = leadership.previous
    if not enabled:
        return Keep(why="eviction is off (GuardSettings.evict)")
    if not management:
        return Keep(why="no management URL (ConsumerSettings.management): the broker hands the "
                    "queue over after missed heartbeats")
    if not single_active:
        return Keep(why="the queue has no native single active consumer: the broker hands "
                    "nothing over")
    if previous is None:
        return Keep(why="no previous leader on record")
    if previous.token >= leadership.token:
        return Keep(why=f"the record's token {previous.token} is not older than ours "
                    f"({leadership.token}): not our predecessor's")
    connection = previous.connection
    if connection is None:
        return Keep(why=f"the record of token {previous.token} names no connection")
    if connection == own_connection:
        return Keep(why="the previous leader was this consumer: its own connection stays")
    if not names_one_instance(connection):
        return Keep(why=f"the connection name {connection!r} may be shared by several "
                    "consumers: closing it could close a live one")
    return Evict(connection=connection,
                 reason=eviction_reason(leadership.token, previous, group),
                 token=leadership.token, previous=previous)


@attrs.frozen(kw_only=True)
class Spared:
    """A connection bearing the record's name that is not closed, because ``why``."""

    connection: ConnectionInfo
    why: str


def targets(
    named: Sequence[ConnectionInfo], consumers: Collection[str], queue: str, vhost: str,
    users: Collection[str],
) -> tuple[tuple[ConnectionInfo, ...], tuple[Spared, ...]]:
    """Of the connections whose client-provided name is the record's (``named``), those to
    close and those spared: only one in ``vhost``, under one of ``users`` (those this
    consumer connects as), that ``queue`` of ``vhost`` lists among its consumers
    (``consumers``: their connections' names, as the broker names them; none when the queue
    does not exist) is closed."""
    close: list[ConnectionInfo] = []
    spared: list[Spared] = []
    for connection in named:
        if connection.vhost != vhost:
            spared.append(Spared(connection=connection,
                                 why=f"it is in vhost {connection.vhost!r}, not {vhost!r}"))
        elif connection.user not in users:
            spared.append(Spared(connection=connection,
                                 why=f"it belongs to user {connection.user!r}, not "
                                     f"{' or '.join(map(repr, sorted(users)))}"))
        elif connection.name not in consumers:
            spared.append(Spared(connection=connection,
                                 why=f"it is not a consumer of queue {queue!r} in "
                                     f"vhost {vhost!r}"))
        else:
            close.append(connection)
    return tuple(close), tuple(spared)


_EVICTED_BY = re.compile(r"sac guard \S+: replaced by the leader with token (\d+)")


def evicted_by(close_reason: str) -> int | None:
    """The token of the leader that evicted this connection, read from the broker's
    connection.close text (``eviction_reason``), or None when it was closed for another
    reason."""
    found = _EVICTED_BY.search(close_reason)
    return int(found[1]) if found else None
