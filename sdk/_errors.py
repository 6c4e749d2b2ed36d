"""The SDK's one exception tree.

Every error raised by ``sdk`` derives from ``SacError``; errors of the AMQP library underneath
are translated in one place (the transport) with ``raise ... from exc``, so callers never need
to import pika. All of them survive pickling (Spark and worker processes carry them), which is
why every constructor passes all its arguments on to ``Exception.__init__``::

    SacError
    ├── ConfigurationError (also ValueError)  a setting or URL is malformed
    ├── ConnectError                          could not (re)connect to any node
    │   └── AuthenticationError               the broker refused the credentials
    ├── QueueError
    │   ├── QueueNotFound                     passive check of a queue that does not exist
    │   └── QueueMismatch                     the queue exists with other arguments
    ├── PublishError                          a message could not be published safely
    │   ├── MessageNacked                     the broker nacked it, retries exhausted
    │   ├── MessageReturned                   unroutable with mandatory on
    │   ├── MessageTooLarge                   over the broker's max message size
    │   ├── ConfirmTimeout                    no confirm within the timeout
    │   ├── BlockedTimeout                    connection.blocked outlasted its timeout
    │   └── Unconfirmed                       close() left messages unconfirmed
    ├── ConsumerError
    │   └── StaleEpoch                        a fenced consumer tried to commit (sdk.dedup)
    └── ClosedError                           use after close()
"""

from __future__ import annotations

from collections.abc import Sequence


class SacError(Exception):
    """Base of every error the SDK raises."""


class ConfigurationError(SacError, ValueError):
    """A setting, URL or environment variable is malformed; names which and why."""


class ConnectError(SacError):
    """No node of the cluster accepted a connection within the reconnect policy."""


class AuthenticationError(ConnectError):
    """The broker refused the user or password (never retried: it will not get better)."""


class QueueError(SacError):
    """A queue is not as the settings say."""


class QueueNotFound(QueueError):
    def __init__(self, queue: str, vhost: str = "/") -> None:
        super().__init__(queue, vhost)
        self.queue = queue
        self.vhost = vhost

    def __str__(self) -> str:
        return f"queue {self.queue!r} does not exist in vhost {self.vhost!r}"


class QueueMismatch(QueueError):
    """The queue exists with an argument that differs from the settings."""

    def __init__(self, queue: str, argument: str, wanted: object, current: object) -> None:
        super().__init__(queue, argument, wanted, current)
        self.queue = queue
        self.argument = argument
        self.wanted = wanted
        self.current = current

    def __str__(self) -> str:
        return (
            f"queue {self.queue!r} exists with {self.argument}={self.current!r} but the settings "
            f"ask for {self.argument}={self.wanted!r}; delete the queue or change the settings"
        )


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
    pass


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


class ClosedError(SacError):
    """The publisher or consumer was used after ``close()``."""
