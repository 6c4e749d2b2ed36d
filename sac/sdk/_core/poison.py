"""What happens to a message whose handler (or inbox effect) fails: retry it in place, or park it.

A message that failed is retried in the consumer's own process, unacked, under a bounded
backoff: requeueing it instead would put it back at the head of the queue at once (a single
active consumer gets it straight back), thousands of times a second, each time counted as a
delivery and logged. When the policy is spent, or at once for a failure that no retry can
cure (no message id for the inbox, a ``Poison`` raised on purpose), the message is parked:
moved, with why, to a queue a person can look at, and only then acked.

The log lines are decided here too: the traceback once per message, one line per further
attempt, and past a budget of lines per second a count instead of a line each, so that ten
thousand bad messages never become ten thousand lines in a second.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from .._errors import ConfigurationError
from .backoff import Backoff

PARKED_PREFIX = "x-sac-parked-"
REASON_HEADER = "x-sac-parked-reason"
"""Why it was parked: the exception's type and text (cut to ``MAX_REASON`` characters)."""
ERROR_HEADER = "x-sac-parked-error"
"""The exception's type name (``MissingMessageId``, ``Poison``, ``ValueError``...)."""
QUEUE_HEADER = "x-sac-parked-from"
"""The queue it was consumed from: where a replay sends it back."""
ATTEMPTS_HEADER = "x-sac-parked-attempts"
"""How many times the handler ran for it in the parking consumer."""
AT_HEADER = "x-sac-parked-at"
"""When it was parked: Unix time in milliseconds."""
BY_HEADER = "x-sac-parked-by"
"""The consumer that parked it (its ``consumer_name``, if set)."""
REPLAYED_HEADER = "x-sac-replayed"
"""Set on a message sent back from the parking queue (value: how many times): it may have
been done after all (parked twice, or handled on a redelivery), so an inbox looks it up."""
BROKER_HEADERS = ("x-death", "x-first-death-exchange", "x-first-death-queue",
                  "x-first-death-reason", "x-delivery-count")
"""Added by the broker on dead-lettering and redelivery; a replayed message starts afresh."""
MAX_REASON = 1000


@attrs.frozen(kw_only=True)
class Retry:
    """Run the handler again for the same message after ``delay`` s."""

    delay: float
    attempt: int
    """The attempt about to be made (2 for the first retry)."""


@attrs.frozen(kw_only=True)
class Park:
    """Move the message to the parking queue (or dead-letter it), then ack it."""

    attempts: int


Step = Retry | Park


def after_failure(
    policy: Backoff, attempts: int, elapsed: float, permanent: bool,
    rng: Callable[[], float] | None = None,
) -> Step:
    """The next step for a message whose handler failed ``attempts`` times, the first
    failure ``elapsed`` s ago. A ``permanent`` failure is parked at once."""
    if permanent:
        return Park(attempts=attempts)
    delay = policy.delay(attempts, elapsed) if rng is None else policy.delay(attempts, elapsed, rng)
    if delay is None:
        return Park(attempts=attempts)
    return Retry(delay=delay, attempt=attempts + 1)


def worst_case(policy: Backoff) -> float:
    """The longest a message can wait in retries under ``policy`` (handler time aside)."""
    if policy.max_attempts is None:
        assert policy.max_elapsed is not None
        return policy.max_elapsed
    total, n = 0.0, 1
    while n <= policy.max_attempts and policy.cap(n) < policy.maximum:
        total += policy.cap(n)
        n += 1
    total += (policy.max_attempts - n + 1) * policy.maximum  # the rest wait the maximum
    return total if policy.max_elapsed is None else min(total, policy.max_elapsed)


def describe_failure(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text if len(text) <= MAX_REASON else text[:MAX_REASON - 1] + "…"


def parking_headers(
    original: Mapping[str, Any] | None, exc: BaseException, queue: str, attempts: int,
    consumer: str | None, now: float | None = None,
) -> dict[str, Any]:
    """The parked copy's headers: the original ones, and why, from where, when, by whom."""
    headers = dict(original or {})
    headers[REASON_HEADER] = describe_failure(exc)
    headers[ERROR_HEADER] = type(exc).__name__
    headers[QUEUE_HEADER] = queue
    headers[ATTEMPTS_HEADER] = attempts
    headers[AT_HEADER] = int((time.time() if now is None else now) * 1000)
    if consumer:
        headers[BY_HEADER] = consumer
    return headers


def replay_headers(parked: Mapping[str, Any] | None) -> dict[str, Any]:
    """A parked message's headers as they were before it failed: what the replay sends."""
    return {k: v for k, v in (parked or {}).items()
            if not k.startswith(PARKED_PREFIX) and k not in BROKER_HEADERS}


def text(value: Any) -> str | None:
    """A header or property value as text: AMQP short strings that are not UTF-8 arrive as
    bytes (decoded with replacement); anything else that is not a string is None."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def origin_of(headers: Mapping[str, Any] | None) -> str | None:
    """The queue a parked message came from: our header, else the broker's dead-letter
    record (a message the delivery limit dead-lettered)."""
    headers = headers or {}
    for key in (QUEUE_HEADER, "x-first-death-queue"):
        value = text(headers.get(key))
        if value:
            return value
    return None


def reason_of(headers: Mapping[str, Any] | None) -> str:
    """Why a parked message is there, in words."""
    headers = headers or {}
    reason = text(headers.get(REASON_HEADER))
    if reason:
        return reason
    first = text(headers.get("x-first-death-reason"))
    if first == "delivery_limit":
        return "dead-lettered by the broker: the delivery limit was reached (a crash loop?)"
    if first:
        return f"dead-lettered by the broker: {first}"
    return "unknown (no reason recorded)"


# ---------------------------------------------------------------------- message ids


def _header_text(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    return repr(value).encode() if not isinstance(value, str) else value.encode()


def _names(value: Sequence[str]) -> tuple[str, ...]:
    return tuple(value)


@attrs.frozen(kw_only=True)
class MessageIdFrom:
    """Where a message without a ``message_id`` gets one, for publishers that set none.

    ``MessageIdFrom.header("x-order-id")`` takes a header's value. ``MessageIdFrom.content()``
    derives one from the body (and the named headers): two messages with equal bodies then
    become one message for the inbox, which is the trade-off to accept before choosing it.
    A message that has a ``message_id`` keeps it.
    """

    header_name: str | None = None
    body: bool = False
    headers: tuple[str, ...] = attrs.field(default=(), converter=_names)

    def __attrs_post_init__(self) -> None:
        if (self.header_name is None) == (not self.body):
            raise ConfigurationError(
                "MessageIdFrom takes either a header name (header_name) or the content "
                "(body): MessageIdFrom.header(name) or MessageIdFrom.content()")
        if self.header_name is not None and not self.header_name:
            raise ConfigurationError("MessageIdFrom.header needs a header name (header_name)")

    @classmethod
    def header(cls, name: str) -> MessageIdFrom:
        return cls(header_name=name)

    @classmethod
    def content(cls, headers: Sequence[str] = ()) -> MessageIdFrom:
        return cls(body=True, headers=tuple(headers))

    def derive(self, body: bytes, headers: Mapping[str, Any] | None) -> str | None:
        """The id for a message that has none, or None (the header is missing)."""
        headers = headers or {}
        if self.header_name is not None:
            value = headers.get(self.header_name)
            if value is None or value == b"" or value == "":
                return None
            return text(value) or str(value)
        digest = hashlib.sha256()
        for name in self.headers:  # each part length-prefixed: no part can run into the next
            value = _header_text(headers[name]) if name in headers else None
            digest.update(b"%d:%s" % (len(name.encode()), name.encode()))
            digest.update(b"-" if value is None else b"%d:%s" % (len(value), value))
        digest.update(b"%d:" % len(body))
        digest.update(body)
        return "sha256:" + digest.hexdigest()[:40]


# ---------------------------------------------------------------------- logs


class LogBudget:
    """At most ``rate`` lines a second (bursts up to ``burst``); what is over the budget is
    counted, and the count is said on the next line that fits."""

    def __init__(self, rate: float = 5.0, burst: int = 20) -> None:
        self.rate = rate
        self.burst = float(burst)
        self._tokens = float(burst)
        self._at: float | None = None
        self.suppressed = 0

    def allow(self, now: float) -> tuple[bool, int]:
        """Whether a line may be written now, and how many were held back before it (their
        count is then reset)."""
        if self._at is not None:
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            held, self.suppressed = self.suppressed, 0
            return True, held
        self.suppressed += 1
        return False, 0
