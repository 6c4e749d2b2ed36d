"""What a consumer tells its log about failing messages and halts, within a budget: a
poison message retried for hours must not fill the disk (``_core/poison.LogBudget``)."""

from __future__ import annotations

import logging
import time

from .._core.consuming import Halt, Why
from .._core.poison import LogBudget, describe_failure
from .._delivery import Delivery
from .._errors import ConsumerError, ParkingFailed, SacError, StaleEpoch

log = logging.getLogger("sac.consumer")


class ConsumerLog:
    """The log lines of one consumer of ``queue``."""

    def __init__(self, queue: str) -> None:
        self._queue = queue
        self._budget = LogBudget()

    def failure(
        self, delivery: Delivery, exc: Exception, attempts: int, delay: float | None
    ) -> None:
        """The traceback with a message's first failure, one line per further attempt,
        within the log budget."""
        allowed, held = self._budget.allow(time.monotonic())
        if not allowed:
            return
        more = f" ({held} similar lines held back)" if held else ""
        mid = delivery.message_id or "(no id)"
        if delay is not None and attempts == 1:
            log.error("handler failed for message %s on queue %r (attempt 1); retrying in "
                      "%.2f s, the message unacked%s", mid, self._queue, delay, more,
                      exc_info=exc)
        elif delay is not None:
            log.warning("handler failed again for message %s on queue %r (attempt %d): %s; "
                        "retrying in %.2f s%s", mid, self._queue, attempts,
                        describe_failure(exc), delay, more)
        else:
            log.error("message %s on queue %r failed (%d attempt(s)): %s; parking it%s", mid,
                      self._queue, attempts, describe_failure(exc), more,
                      exc_info=exc if attempts == 1 and exc.__traceback__ is not None else None)

    def error_of(self, halt: Halt[Delivery]) -> SacError:
        """The error ``wait``/``run`` raise for ``halt``."""
        error = halt.error
        if halt.why is Why.NOWHERE_TO_PARK:
            assert halt.delivery is not None
            return ParkingFailed(self._queue, halt.delivery.message_id,
                                 "the queue has no parking queue and no dead-letter exchange "
                                 "(QueueSettings.parking_queue is None)")
        if halt.why is Why.NOT_RESUBSCRIBED:
            return ConsumerError(f"could not consume {self._queue!r} again after "
                                 f"{halt.attempts} attempts")
        assert isinstance(error, SacError)
        return error

    def halting(self, exc: SacError) -> None:
        """A newer consumer holds the queue, the store is gone, there is nowhere to park, or
        the queue cannot be consumed again."""
        if isinstance(exc, ConsumerError) and not isinstance(exc, StaleEpoch | ParkingFailed):
            log.error("consumer of %r gives up: %s", self._queue, exc)
        else:
            log.warning("%s; stopping without acking the messages in hand", exc)
