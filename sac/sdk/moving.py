"""Moving messages from one queue to another without losing one: each is confirmed in the
target before it is acked in the source.

The move a migration needs (a classic mirrored queue's messages into its quorum twin), made
the way parking and replaying are (``_forward.py``): a message is taken from the source with
``basic.get`` (manual ack), published to the target on a confirm-mode channel (mandatory,
persistent) with its body, id, headers and properties, and acked in the source only once the
target confirmed it. A failure half-way leaves the message in the source (and maybe a copy in
the target, with the same id, which an inbox deduplicates); never in neither.

Not carried over: ``user_id`` (the broker checks it against the moving connection's user) and
the message's age (a per-message ``expiration`` starts again in the target).

Two faces, as for every client of the SDK: ``Mover`` blocks, ``AsyncMover`` has the same
method, awaited.

Example::

    from sac.sdk import ConnectionSettings, Mover

    moved = Mover(ConnectionSettings.from_env()).move("orders", "orders-quorum")
    print(moved.moved, moved.source_after, moved.target_after)
"""

from __future__ import annotations

import asyncio

import attrs
import pika.exceptions
from pika.spec import BasicProperties

from ._delivery import OTHER_PROPERTIES
from ._errors import ConfigurationError, ConnectError, QueueError
from ._forward import Refused
from ._settings import ConnectionSettings
from ._transport import LinkLost, node_of
from .parking import _checked, _connect, _move, _passive

MOVED_PROPERTIES = frozenset(OTHER_PROPERTIES) - {"user_id"}
"""The properties a moved copy keeps besides its id, headers, content type, correlation id and
timestamp (``user_id`` would be refused: the broker checks it against our user)."""


class MoveError(QueueError):
    """A message could not be moved (the target refused it); those before it were, it
    stays in the source. Or, once the others were moved: some stay in the source whose
    headers cannot be decoded."""


@attrs.frozen
class Moved:
    """What a move did, with the queues' message counts (ready messages, as
    ``queue.declare`` reports them: live, not the management API's statistics)."""

    source: str
    target: str
    moved: int
    source_before: int
    source_after: int
    target_before: int
    target_after: int


async def _move_all(
    connection: ConnectionSettings, source: str, target: str, limit: int | None
) -> Moved:
    """What ``AsyncMover.move`` does (and ``Mover.move``, on a loop of its own)."""
    if limit is not None and limit < 1:
        raise ConfigurationError(f"limit must be >= 1, got {limit}")
    if source == target:
        raise ConfigurationError(f"source and target are the same queue {source!r}")
    link = await _connect(connection)
    try:
        source_before = await link.declare_queue(_passive(source))
        target_before = await link.declare_queue(_passive(target))

        def refused(props: BasicProperties, done: int, exc: Refused) -> Exception:
            return MoveError(f"moving message {props.message_id!r} to {target!r} failed after "
                             f"{done} moved: {exc}; it stays in {source!r}")

        done = await _move(link, source, target,
                           source_before if limit is None else min(source_before, limit),
                           lambda props: props.headers, MOVED_PROPERTIES, refused)
        error = done.error("moved", target, source)
        if error is not None:
            raise MoveError(error)
        return Moved(source, target, done.moved, source_before,
                     await link.declare_queue(_passive(source)), target_before,
                     await link.declare_queue(_passive(target)))
    except LinkLost as exc:
        cause = exc.__cause__
        if isinstance(cause, pika.exceptions.ChannelClosedByBroker) and cause.reply_code == 405:
            # RabbitMQ 3.10 refuses basic.get on a quorum queue with single active consumer
            raise MoveError(f"cannot take messages from {source!r}: {cause.reply_text}") from exc
        raise ConnectError(f"{node_of(link.url)}: the connection was lost during the move "
                           f"({exc}); what was not confirmed stays in {source!r}") from exc
    finally:
        await link.close()


class AsyncMover:
    """Moves messages between the queues of a cluster, from asyncio."""

    def __init__(self, connection: ConnectionSettings) -> None:
        self.connection = _checked(connection)

    async def move(self, source: str, target: str, limit: int | None = None) -> Moved:
        """Move what ``source`` holds when the move begins (up to ``limit``) to ``target``, in
        order, each confirmed in ``target`` before it is acked in ``source``. Both queues must
        exist. Messages that arrive in ``source`` meanwhile stay there: move again for them.
        Consumers of ``source`` would take messages from under the move: stop them first. A
        quorum queue with single active consumer cannot be a source (RabbitMQ 3.10 refuses
        ``basic.get`` on it: ``MoveError``). A message whose headers cannot be decoded stays in
        ``source``, headers and all (a copy would lose them), and the others are moved: then
        ``MoveError`` says how many were, and names those left."""
        return await _move_all(self.connection, source, target, limit)


class Mover:
    """The blocking face of ``AsyncMover``: the same method, run to completion on its own
    event loop (so not from a running one: use ``AsyncMover`` there)."""

    def __init__(self, connection: ConnectionSettings) -> None:
        self.connection = _checked(connection)

    def move(self, source: str, target: str, limit: int | None = None) -> Moved:
        """What ``source`` holds (up to ``limit``) into ``target``, each confirmed there
        before it is acked in ``source``."""
        return asyncio.run(_move_all(self.connection, source, target, limit))


__all__ = ["AsyncMover", "MoveError", "Moved", "Mover"]
