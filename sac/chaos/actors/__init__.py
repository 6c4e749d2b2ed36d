"""The workload of a chaos run: SDK publishers and single-active consumers, each in a process
of its own so the nemesis can freeze or kill it, and the sink they write their effects to.

A process is described by a frozen settings class (``PublisherActor``, ``ConsumerActor``) and
started as ``python -m sac.chaos.actors.publisher|consumer``, its settings as JSON on the first
line of its stdin: one definition of what an actor takes, used by the runner, the tests and the
benchmarks alike. The settings hold the brokers' and the management API's URLs with their
password, so they never go on the command line, which every local user can read (``ps``,
``/proc/<pid>/cmdline``); stdin is a pipe only the runner holds. Each process
records its history (``events/<actor>.jsonl``, ``docs/history.md``) through the SDK's own
recorder and tells the runner what it needs to steer the run as JSON lines on stdout:
``{"event": "role", "role": "active", "monotonic": ...}``, ``{"event": "in_effect", "msg": ...}``,
``{"event": "paused", "at": ..., "msg": ...}`` and ``{"event": "done", ...}``; it takes
commands on stdin (``freeze``, ``continue``: ``consumer.py`` here). ``sac.chaos._process``
starts and drives such a process.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any, Literal, Self

import attrs

from sac.sdk import GuardSettings, ManagementSettings, QueueSettings
from ._sink import Sink

Dedup = Literal["inbox", "off", "redelivered-only"]
DEDUP_MODES: tuple[Dedup, ...] = ("inbox", "off", "redelivered-only")
Face = Literal["blocking", "asyncio"]


def _strings(values: Iterable[str]) -> tuple[str, ...]:
    """A converter typed for its callers (``converter=tuple`` types the field's argument as
    an unsolved ``Iterable[_T_co]`` for mypy)."""
    return tuple(values)


def _positive(_inst: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"{attribute.name} must be a positive number, got {value!r}")


def _not_negative(_inst: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"{attribute.name} must be zero or more, got {value!r}")


def _as_tuple(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _count(_inst: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{attribute.name} must be a whole number, zero or more, got {value!r}")


def _optional_limit(_inst: object, attribute: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or value < 1):
        raise ValueError(f"{attribute.name} must be a whole number, 1 or more, got {value!r}")


def _urls(_inst: object, attribute: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    if not value or not all(isinstance(u, str) and u.startswith("amqp") for u in value):
        raise ValueError(f"{attribute.name} must be one or more amqp:// URLs")


@attrs.frozen
class _Actor:
    actor: str = attrs.field(validator=attrs.validators.matches_re(r"[a-z][a-z0-9.-]{0,63}"))
    run_dir: str
    queue: str
    urls: tuple[str, ...] = attrs.field(converter=_as_tuple, validator=_urls)
    queue_type: Literal["quorum", "classic"] = attrs.field(
        default="quorum", validator=attrs.validators.in_(("quorum", "classic")))
    heartbeat: int = attrs.field(default=2, validator=_positive)
    single_active: bool = True
    """The queue's native single active consumer (``x-single-active-consumer``); False for a
    plain queue, where only a guard keeps a second consumer off it. Publishers and consumers
    of one queue must agree: each declares it."""

    def queue_settings(self) -> QueueSettings:
        """The queue as this actor declares it."""
        return QueueSettings(self.queue, type=self.queue_type,
                             single_active_consumer=self.single_active)

    def to_json(self) -> str:
        return json.dumps(attrs.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Self:
        return cls(**json.loads(text))

    @classmethod
    def from_stdin(cls) -> Self:
        """The settings the runner wrote as the first line of stdin (``ActorProcess``); the
        lines after it are the runner's commands (``end_with_runner``)."""
        line = sys.stdin.readline()
        if not line.strip():
            raise SystemExit(f"{cls.__name__}: expected the actor's settings as one JSON line "
                             "on stdin, got nothing")
        return cls.from_json(line)

    def argv(self) -> list[str]:
        """The command that runs this actor; its settings go on stdin (``to_json``), never
        here."""
        module = "publisher" if isinstance(self, PublisherActor) else "consumer"
        return [sys.executable, "-m", f"sac.chaos.actors.{module}"]


@attrs.frozen
class PublisherActor(_Actor):
    """Publishes ``messages`` messages with ids ``<actor>-000001``... at ``rate`` per second,
    pipelined in the SDK's confirm window, then waits for every confirm and exits."""

    messages: int = attrs.field(default=100, validator=_positive)
    rate: float = attrs.field(default=200.0, validator=_positive)
    window: int = attrs.field(default=100, validator=_positive)


def default_ack_batch(prefetch: int) -> int:
    """A chaos consumer's ack batch unless its scenario asks for less: the whole prefetch,
    up to 50."""
    return min(prefetch, 50)


@attrs.frozen
class ConsumerActor(_Actor):
    """A single-active consumer writing one effect row per message to the run's sink.

    ``dedup``: ``inbox`` (the SDK's ``Inbox`` over ``SQLiteStore``, the configuration users
    run), ``off`` (a plain handler writing every delivery) or ``redelivered-only`` (the naive
    check users write first: look the id up only when the broker flags a redelivery, which
    misses a publisher's retransmission). ``fencing=False`` turns off both ways a replaced
    consumer is kept from committing: every consumer adopts the same epoch (no commit is
    refused as stale; a guarded one's inbox drops its election's token for it), and a
    successor no longer evicts a frozen SQLite lock holder.

    The options after ``sink`` serve tests and benchmarks that stop a consumer at a precise
    point; their defaults are the chaos workload's. Each ``pause_*`` point is taken once: the
    process prints ``{"event": "paused", "at": <point>, "msg": <id>}`` and waits for a
    ``continue`` line on stdin (``Controls``)."""

    face: Face = attrs.field(default="blocking",
                             validator=attrs.validators.in_(("blocking", "asyncio")))
    dedup: Dedup = attrs.field(default="inbox", validator=attrs.validators.in_(DEDUP_MODES))
    fencing: bool = True
    effect_ms: float = attrs.field(default=2.0, validator=_not_negative)
    prefetch: int = attrs.field(default=20, validator=_positive)
    ack_batch: int = attrs.field(
        default=attrs.Factory(lambda spec: default_ack_batch(spec.prefetch), takes_self=True),
        validator=_positive)
    """Messages acked (and committed by the inbox) together, at most; by default the
    prefetch (up to 50)."""
    sink: str = ""
    """Where effects go (``Sink``): ``sqlite:<path>`` or a ``postgresql://`` DSN (either can
    back the inbox), or ``file:<path>`` (dedup off only); empty means ``RUN/sink.db``."""
    delivery_limit: int | None = attrs.field(default=None, validator=_optional_limit)
    """The queue's ``x-delivery-limit``; None: the SDK's default."""
    handle_signals: bool = True
    """False: the blocking face runs ``run(handle_signals=False)`` and the asyncio face
    installs no handlers, so SIGTERM and SIGINT keep Python's default."""
    crash_on_body: str | None = None
    """The process ends at once (``os._exit(CRASHED)``, a crash: nothing flushed, nothing
    acked) when it is handed a message with this body."""
    handover: Literal["close", "cancel"] = attrs.field(
        default="close", validator=attrs.validators.in_(("close", "cancel")))
    """How a graceful stop hands over (``sac.sdk.Handover``): ``cancel`` is the order that
    breaks the queue's order (``basic.cancel`` first), the ``cancel-first`` weakening."""
    pause_in_effect: str = ""
    """Pause (``at: "effect"``) before the effect of this message id writes (``*``: of the
    first message handled); a batch tried again does not pause again."""
    pause_after_writes: int = attrs.field(default=0, validator=_count)
    """Pause (``at: "written"``, with ``batch``: the ids whose effects wrote before it in the
    same store transaction) in the first batch of at least this many messages, right after
    the effect of the last of them wrote, so that the open transaction holds their locks.
    Inbox only."""
    pause_after_commit: str = ""
    """Pause (``at: "committed"``) after the batch holding this message id committed, before
    its ack goes out. Inbox only."""
    guard_hosts: str = ""
    """ZooKeeper's connection string: the consumer is guarded (``ConsumerSettings.guard``:
    it subscribes only while it leads ``guard_group``, and its inbox takes the election's
    token as its epoch). Empty: no guard."""
    guard_group: str = ""
    guard_lease: float = attrs.field(default=1.0, validator=_positive)
    """The guard's ``session_timeout`` (s); the ZooKeeper server must grant it."""
    management_urls: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    """The management API of the queue's cluster (``ConsumerSettings.management``): with a
    guard on a native single-active queue, a new leader evicts its frozen predecessor's
    connection through it. Empty: none."""

    def __attrs_post_init__(self) -> None:
        if self.dedup != "inbox" and (self.pause_after_writes or self.pause_after_commit):
            raise ValueError("pause_after_writes and pause_after_commit need dedup='inbox'")
        self.guard()  # a guard that names no group, or a bad one, is refused here
        sink = self.open_sink()  # a location that names no sink is refused here
        if self.dedup == "inbox" and not sink.transactional:
            raise ValueError(f"dedup={self.dedup!r} needs a database sink, not {self.sink}")

    def open_sink(self) -> Sink:
        return Sink(self.sink or f"sqlite:{self.run_dir}/sink.db")

    def management(self) -> ManagementSettings | None:
        """``ConsumerSettings.management`` of this consumer (None: no API)."""
        return ManagementSettings(self.management_urls) if self.management_urls else None

    def guard(self) -> GuardSettings | None:
        """``ConsumerSettings.guard`` of this consumer (None: unguarded)."""
        if not self.guard_hosts and not self.guard_group:
            return None
        return GuardSettings(self.guard_hosts, self.guard_group,
                             session_timeout=self.guard_lease)


def end_with_runner(on_line: Callable[[str], None] | None = None) -> None:
    """Read the runner's commands from stdin on a thread; when stdin closes (the runner
    ended, even by SIGKILL) stop this process with SIGTERM, which actors treat as a
    graceful stop: no actor outlives the run that started it."""

    def read() -> None:
        for line in sys.stdin:
            if on_line is not None:
                on_line(line.strip())
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=read, name="chaos-runner-link", daemon=True).start()


def say(event: str, **fields: Any) -> None:
    """One line to the runner (stdout is the control channel; logs go to stderr)."""
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


__all__ = ["DEDUP_MODES", "ConsumerActor", "Dedup", "Face", "PublisherActor", "Sink",
           "end_with_runner", "say"]
