"""The SDK's one exception tree.

Every error raised by ``sac.sdk`` derives from ``SacError``; errors of the AMQP library underneath
are translated in one place (the transport) with ``raise ... from exc``, so callers never need
to import pika. All of them survive pickling (Spark and worker processes carry them), which is
why every constructor passes all its arguments on to ``Exception.__init__``::

    SacError
    ├── ConfigurationError (also ValueError)  a setting or URL is malformed
    ├── ConnectError                          could not (re)connect to any node
    │   └── AuthenticationError               the broker refused the credentials
    ├── QueueError
    │   ├── QueueNotFound                     passive check of a queue that does not exist
    │   ├── QueueMismatch                     the queue exists with other arguments
    │   ├── ReplayError                       a parked message could not be sent back
    │   └── MoveError                         a message could not be moved to another queue
    ├── PublishError                          a message could not be published safely
    │   ├── MessageNacked                     the broker nacked it, retries exhausted
    │   ├── MessageReturned                   unroutable with mandatory on
    │   ├── MessageTooLarge                   over the publisher's or broker's max size
    │   ├── ConfirmTimeout                    no confirm within the timeout
    │   └── BlockedTimeout                    connection.blocked outlasted its timeout
    ├── Unconfirmed                           close() left messages unconfirmed (their ids)
    ├── LinkLost                              internal: a connection or channel went away
    ├── ConsumerError
    │   ├── StaleEpoch                        a fenced consumer tried to commit (sac.sdk.dedup)
    │   ├── MissingMessageId                  an inbox got a message without a message id
    │   ├── Poison                            raised by a handler: park this message now
    │   ├── UnfitMessage                      no handler may see it: parked at once, unrun
    │   └── ParkingFailed                     a failed message could not be parked
    ├── StoreError                            a dedup store cannot be used (sac.sdk.dedup)
    │   ├── StoreUnavailable                  cannot open or reach it (path, DSN)
    │   └── SchemaMismatch                    its tables are from another SDK version
    ├── ManagementError                       a management API call failed (sac.sdk.management)
    │   ├── ManagementUnreachable             no node's API answered (refused, timeout, 5xx)
    │   ├── ManagementRefused                 401/403: wrong credentials or permissions
    │   └── ManagementNotFound                404: no such queue, vhost, policy, connection
    └── LifecycleError                        used out of order (start twice, before start)
        └── ClosedError                       use after close()
"""

from __future__ import annotations

from collections.abc import Sequence


class SacError(Exception):
    """Base of every error the SDK raises."""


class ConfigurationError(SacError, ValueError):
    """A setting, URL or environment variable is malformed; names which and why."""


class ConnectError(SacError):
    """No node of the cluster gave a working link within the reconnect policy (a first
    connect tries each node once). ``attempts`` names every attempt's cause, in order."""

    def __init__(self, message: str, attempts: Sequence[str] = ()) -> None:
        super().__init__(message, tuple(attempts))
        self.message = message
        self.attempts: tuple[str, ...] = tuple(attempts)

    def __str__(self) -> str:
        return self.message


class AuthenticationError(ConnectError):
    """The broker refused the user or password (never retried: it will not get better)."""


class QueueError(SacError):
    """A queue is not as the settings say."""


class QueueNotFound(QueueError):
    """``parking_of``: the queue named by the caller, when the one missing is its parking
    queue (the caller typed that name, not this one)."""

    def __init__(self, queue: str, vhost: str = "/", parking_of: str | None = None) -> None:
        super().__init__(queue, vhost, parking_of)
        self.queue = queue
        self.vhost = vhost
        self.parking_of = parking_of

    def __str__(self) -> str:
        if self.parking_of is not None:
            return (f"queue {self.parking_of!r} has no parking queue: {self.queue!r} does "
                    f"not exist in vhost {self.vhost!r} (nothing was parked for it yet, or "
                    f"{self.parking_of!r} is not the queue's name)")
        return f"queue {self.queue!r} does not exist in vhost {self.vhost!r}"


class QueueMismatch(QueueError):
    """The queue exists with an argument that differs from the settings."""

    def __init__(self, queue: str, argument: str, wanted: object, current: object,
                 hint: str | None = None) -> None:
        super().__init__(queue, argument, wanted, current, hint)
        self.queue = queue
        self.argument = argument
        self.wanted = wanted
        self.current = current
        self.hint = hint
        """What the mismatch says beyond the argument (the queue's type), or None."""

    def __str__(self) -> str:
        text = (
            f"queue {self.queue!r} exists with {self.argument}={self.current!r} but the settings "
            f"ask for {self.argument}={self.wanted!r}; delete the queue or change the settings"
        )
        if self.hint is not None:
            text += f" ({self.hint})"
        elif self.current is None and self.argument in _PARKING_ARGUMENTS:
            text += (" (a queue declared without a dead-letter target, e.g. by an SDK before "
                     "parking queues, or a queue of another type: RabbitMQ names the first "
                     "argument that differs; keep a queue without a dead-letter target as it "
                     "is with QueueSettings(parking_queue=None))")
        return text


_PARKING_ARGUMENTS = ("x-dead-letter-exchange", "x-dead-letter-routing-key", "x-delivery-limit",
                      "x-dead-letter-strategy", "x-overflow")


class PublishError(SacError):
    """A message was not confirmed by the broker; ``message_id`` says which."""

    def __init__(self, message_id: str, reason: str) -> None:
        super().__init__(message_id, reason)
        self.message_id = message_id
        self.reason = reason

    def __str__(self) -> str:
        return f"message {self.message_id}: {self.reason}"


class MessageNacked(PublishError):
    pass


class MessageReturned(PublishError):
    pass


class MessageTooLarge(PublishError):
    """Over ``PublisherSettings.max_message_size`` (refused before sending), or over the
    broker's ``max_message_size``: the broker's refusal (it closes the channel) fails that
    message alone, and the limit it names is kept, so later ones fail before sending. The
    reason names the size and the limit."""


class ConfirmTimeout(PublishError):
    pass


class BlockedTimeout(PublishError):
    pass


class Unconfirmed(SacError):
    """``close()`` ran out of time with messages still unconfirmed (they may or may not be in
    the queue: publish them again with the same ids and let the consumer deduplicate)."""

    def __init__(self, message_ids: Sequence[str]) -> None:
        super().__init__(list(message_ids))
        self.message_ids = list(message_ids)

    def __str__(self) -> str:
        shown = ", ".join(self.message_ids[:10])
        more = f" and {len(self.message_ids) - 10} more" if len(self.message_ids) > 10 else ""
        return f"{len(self.message_ids)} message(s) stayed unconfirmed: {shown}{more}"


class ConsumerError(SacError):
    """The consumer cannot go on."""


class StaleEpoch(ConsumerError):
    """A commit carried an epoch older than the queue's current one: this consumer was
    replaced, and its effect must not be applied."""

    def __init__(self, queue: str, epoch: int, current: int) -> None:
        super().__init__(queue, epoch, current)
        self.queue = queue
        self.epoch = epoch
        self.current = current

    def __str__(self) -> str:
        return (
            f"consumer of queue {self.queue!r} holds epoch {self.epoch} but the current epoch "
            f"is {self.current}: it was replaced and must stop"
        )


class MissingMessageId(ConsumerError):
    """An inbox cannot deduplicate a message that has no id. No retry can cure that: the
    message is parked at once (see ``ConsumerSettings.message_id_from``)."""

    def __init__(self, queue: str, delivery_tag: int) -> None:
        super().__init__(queue, delivery_tag)
        self.queue = queue
        self.delivery_tag = delivery_tag

    def __str__(self) -> str:
        return (
            f"a message on queue {self.queue!r} (delivery tag {self.delivery_tag}) has no "
            "message_id, so it cannot be deduplicated; publish it with a message id, or "
            "give the consumer ConsumerSettings.message_id_from"
        )


class Poison(ConsumerError):
    """Raise it from a handler or an inbox effect for a message that can never succeed (a
    body that does not decode, a request that is invalid): the message is parked at once,
    without the retries, with this exception's text as the reason. ``raise Poison("...")
    from exc`` keeps the cause."""


class UnfitMessage(ConsumerError):
    """A message no handler may see, for a reason in the message itself (its headers do not
    decode, for one): it is parked at once, in its turn, without running the handler, with
    ``reason`` in the parked copy's headers. What a publisher writes can never stop the
    consumer, nor loop."""

    def __init__(self, queue: str, delivery_tag: int, reason: str) -> None:
        super().__init__(queue, delivery_tag, reason)
        self.queue = queue
        self.delivery_tag = delivery_tag
        self.reason = reason

    def __str__(self) -> str:
        return (f"a message on queue {self.queue!r} (delivery tag {self.delivery_tag}) is "
                f"parked unhandled: {self.reason}")


class ParkingFailed(ConsumerError):
    """A message had to leave the queue (its handler kept failing) but there was nowhere to
    put it: no parking queue and no dead-letter exchange, or the parking queue refused it.
    The consumer stops; the message stays in its queue, unacked until the channel closes."""

    def __init__(self, queue: str, message_id: str | bytes | None, why: str) -> None:
        super().__init__(queue, message_id, why)
        self.queue = queue
        self.message_id = message_id
        self.why = why

    def __str__(self) -> str:
        shown = repr(self.message_id) if self.message_id else "without an id"
        return (f"message {shown} of queue {self.queue!r} failed and could not be parked: "
                f"{self.why}; the consumer stops and the message stays in {self.queue!r}")


class StoreError(SacError):
    """A dedup store cannot be used; the message names the store and the cause."""


class StoreUnavailable(StoreError):
    """The store could not be opened or reached (a path that is not writable, a DSN that does
    not connect)."""


class SchemaMismatch(StoreError):
    """The store's tables were made by another version of the SDK."""

    def __init__(self, store: str, found: int, wanted: int) -> None:
        super().__init__(store, found, wanted)
        self.store = store
        self.found = found
        self.wanted = wanted

    def __str__(self) -> str:
        return (
            f"dedup store {self.store} has schema version {self.found}, this SDK uses version "
            f"{self.wanted}; migrate it or point the store elsewhere (nothing was changed)"
        )


class ManagementError(SacError):
    """A management HTTP API call failed. It names the client's call, the method and path,
    the node, and the broker's answer (its status and text), never the password."""

    def __init__(self, call: str, method: str, path: str, node: str, status: int | None,
                 answer: str) -> None:
        super().__init__(call, method, path, node, status, answer)
        self.call = call
        self.method = method
        self.path = path
        self.node = node
        self.status = status
        """The HTTP status, or None when no answer came (refused, timed out)."""
        self.answer = answer

    def __str__(self) -> str:
        said = f"answered {self.status}" if self.status is not None else "gave no answer"
        return (f"management API {self.call}(): {self.method} {self.path} on {self.node} "
                f"{said}: {self.answer}")


class ManagementUnreachable(ManagementError):
    """No node's API answered usefully: connection refused, timed out, or a 5xx answer (a
    read was retried under ``ManagementSettings.retry`` first, on every node)."""


class ManagementRefused(ManagementError):
    """401 or 403: the user or password is wrong, or the user lacks the tag or permission
    the call needs (never retried)."""


class ManagementNotFound(ManagementError):
    """404: the queue, vhost, policy, parameter or connection does not exist."""


class LifecycleError(SacError):
    """A client was used out of order: started twice, or used before ``start()``."""


class ClosedError(LifecycleError):
    """The publisher or consumer was used after ``close()``."""
