"""A guarded consumer's leadership: the ZooKeeper guard, the guard machine, eviction.

With ``ConsumerSettings.guard`` the consumer subscribes only while it leads its group in
ZooKeeper: the guard's shell (``guard.py``, kazoo) reports here on the loop, the guard
machine (``_core/guarding.py``) decides, and this room carries its actions out
(``GuardShell``): it subscribes as the leader (``Lead``), after asking the broker to close
the predecessor's connection when the rules allow (``_core/eviction.py``); pauses and
resumes the consumer machine; gives the channel up (``Abandon``). The leadership's token is
the inbox's epoch (``_core/fencing.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sac.history import Evict as Evicted
from .._core.consuming import Actions, ConsumerMachine
from .._core.dispatch import carry_out_guard
from .._core.eviction import Evict, decide_eviction
from .._core.fencing import Fencing
from .._core.guarding import (
    Abandon,
    Contend,
    ContendLater,
    GiveUp,
    GuardAction,
    GuardMachine,
    GuardStatus,
    Lead,
    Leadership,
    Pause,
    Resume,
    SessionState,
    Withdraw,
)
from .._delivery import Delivery
from .._errors import ConsumerError, ManagementError, SacError
from .._settings import ConsumerSettings, GuardSettings
from .._transport import Link, LinkLost
from .link import ConsumerLink

if TYPE_CHECKING:
    from .._evictor import Evictor
    from ..guard import ZooKeeperGuard

log = logging.getLogger("sac.consumer")


class GuardRoom:
    """The guard of one consumer, on its loop."""

    def __init__(
        self, settings: ConsumerSettings, guard: GuardSettings, link: ConsumerLink,
        machine: ConsumerMachine[Delivery], *,
        carry_out: Callable[[Actions[Delivery]], None],
        halt: Callable[[SacError], None],
        cut: Callable[[], None],
        refence: Callable[[bool], None],
    ) -> None:
        from .. import guard as zk  # kazoo, or a ConfigurationError naming the `zk` extra

        self.settings = settings
        self._queue_name = settings.queue.name
        self._link = link
        self._consumer = machine
        self._carry_out = carry_out
        self._halt = halt
        self._cut = cut
        """Runs under way end after the delivery in hand."""
        self._refence = refence
        """The fencing changed: runs handed out from now on carry the new token; with
        True, those of the old one are refused."""
        self.machine = GuardMachine(guard.retry)
        self.fencing = Fencing()
        self._evictor: Evictor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.guard: ZooKeeperGuard = zk.ZooKeeperGuard(
            guard, zk.identity(settings.consumer_name, link.connection_name),
            on_session=lambda state: self._post(self._session, state),
            on_won=lambda attempt, leadership: self._post(self._won, attempt, leadership),
            on_failed=lambda attempt, error: self._post(self._failed, attempt, error))

    @property
    def status(self) -> GuardStatus:
        return self.machine.status

    @property
    def leading(self) -> bool:
        return self.machine.leading

    async def connect(self) -> None:
        """A ZooKeeper session, or the error (another lease than asked for): at start."""
        self._loop = loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.guard.connect)

    def start(self) -> None:
        self._carry_out_guard(self.machine.start(self._now()))

    def subscribed(self, generation: int) -> None:
        """The link subscribed on channel ``generation``: under the leadership, if any."""
        leadership = self.machine.leadership
        self.fencing.subscribed(generation, None if leadership is None else leadership.token)
        self._refence(False)

    def link_lost(self, reason: LinkLost) -> None:
        """The broker closed this link: if a newer leader evicted it, whatever the ZooKeeper
        session still says (a process that froze hears of its expiry only now), a newer
        token exists, so this consumer steps down and contends again."""
        token = self.fencing.steps_down(reason.reason)
        if token is None:
            return
        log.warning("consumer of %r was evicted by the leader with token %d: stepping down",
                    self._queue_name, token)
        self.replaced()

    def replaced(self) -> None:
        """A newer leader fenced this one (its run refused, or its link evicted)."""
        self._carry_out_guard(self.machine.fenced(self._now()))

    async def close(self) -> None:
        """End the ZooKeeper session (blocking work in a thread)."""
        self.machine.stop(self._now())  # its Withdraw: the session's end does it
        await asyncio.get_running_loop().run_in_executor(None, self.guard.close)

    # ------------------------------------------------------------------ kazoo's reports

    def _post(self, callback: Callable[..., None], *args: Any) -> None:
        """From kazoo's threads (never blocks): ``callback(*args)`` on the loop."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop is closing: stopping anyway
                loop.call_soon_threadsafe(callback, *args)

    def _session(self, state: SessionState) -> None:
        if self._link.shutting_down:
            return
        log.log(logging.INFO if state is SessionState.CONNECTED else logging.WARNING,
                "consumer of %r: ZooKeeper session %s", self._queue_name, state.value)
        self._carry_out_guard(self.machine.session_changed(state, self._now()))

    def _won(self, attempt: int, leadership: Leadership) -> None:
        if self._link.shutting_down:
            return  # the session ends with the stop, and the node with it
        self._carry_out_guard(self.machine.won(attempt, leadership, self._now()))

    def _failed(self, attempt: int, error: Exception) -> None:
        if self._link.shutting_down:
            return
        log.warning("consumer of %r: joining the election failed: %r", self._queue_name, error)
        self._carry_out_guard(self.machine.failed(attempt, error, self._now()))

    def _tick(self) -> None:
        if not self._link.shutting_down:
            self._carry_out_guard(self.machine.tick(self._now()))

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _carry_out_guard(self, actions: Sequence[GuardAction]) -> None:
        carry_out_guard(actions, self)

    # ------------------------------------------------------------------ GuardShell

    def lead(self, lead: Lead) -> None:
        leadership = lead.leadership
        previous = leadership.previous
        log.info("consumer of %r leads with token %d (before it: %s); subscribing",
                 self._queue_name, leadership.token,
                 "nobody" if previous is None else f"token {previous.token}, connection "
                 f"{previous.connection!r}")
        self._evict_previous(leadership)
        link = self._link.link
        if (self._link.opening or link is None or not link.usable
                or self._link.consumer_tag is not None):
            return  # the link being set up subscribes at its end (``_setup``)
        self._link.spawn(self._subscribe_leader(link))

    def pause(self, pause: Pause) -> None:
        self._carry_out(self._consumer.pause(self._now()))
        self._cut()

    def resume(self, resume: Resume) -> None:
        self._carry_out(self._consumer.resume(self._now()))

    def abandon(self, abandon: Abandon) -> None:
        """Give the channel up: the subscription goes, and the broker requeues every
        unacked delivery, those in flight too (their runs end unacked: a new generation)."""
        log.warning("consumer of %r gives its channel up, acking nothing in hand: %s",
                    self._queue_name, abandon.why)
        self.fencing.abandoned()
        self._refence(True)
        link = self._link.link
        if link is not None and not link.closing:
            link.abandon(abandon.why)

    def contend(self, contend: Contend) -> None:
        self.guard.contend(contend.attempt)

    def contend_later(self, later: ContendLater) -> None:
        asyncio.get_running_loop().call_at(later.at, self._tick)

    def withdraw(self, withdraw: Withdraw) -> None:
        self.guard.withdraw(withdraw.attempt)

    def give_up(self, give_up: GiveUp) -> None:
        self._halt(ConsumerError(
            f"could not join the election of {self.guard.settings.group!r} in ZooKeeper "
            f"({give_up.attempts} attempts): {give_up.error!r}"))

    # ------------------------------------------------------------------ leading

    async def _subscribe_leader(self, link: Link) -> None:
        try:
            await self._link.subscribe(link)
        except LinkLost:
            return  # the reconnect subscribes
        except SacError as exc:
            if self._link.link is link and not link.closing:
                link.abandon(f"subscribing as the leader failed: {exc}")

    def _evict_previous(self, leadership: Leadership) -> None:
        """Ask the broker to close the predecessor's connection, if the rules allow
        (``_core/eviction.py``); in the background: the subscription does not wait."""
        own = self._link.connection_name
        assert own is not None
        guard = self.guard.settings
        decision = decide_eviction(
            leadership, own, guard.group,
            single_active=self.settings.queue.single_active_consumer,
            management=self.settings.management is not None, enabled=guard.evict)
        if isinstance(decision, Evict):
            self._link.spawn(self._evict(decision))
        elif leadership.previous is not None:
            log.info("consumer of %r evicts nobody: %s", self._queue_name, decision.why)

    async def _evict(self, decision: Evict) -> None:
        from .._evictor import Evictor

        if self._evictor is None:
            self._evictor = Evictor(self.settings)
        try:
            done = await self._evictor.evict(decision)
        except (ManagementError, TimeoutError) as exc:
            log.warning("consumer of %r could not evict the previous leader's connection %r "
                        "(token %d): %s; the broker hands the queue over once its heartbeats "
                        "go unanswered", self._queue_name, decision.connection,
                        decision.previous.token, exc or type(exc).__name__)
            self._link.record(Evicted(
                outcome="failed", error=str(exc) or type(exc).__name__,
                connection=decision.connection, token=decision.token,
                previous_token=decision.previous.token))
            return
        log.info("consumer of %r evicted the previous leader (token %d): %d connection(s) "
                 "named %r closed, %d gone already", self._queue_name, decision.previous.token,
                 len(done.closed), decision.connection, len(done.gone))
        # "none": the predecessor stopped cleanly (or its connection is on another cluster
        # of a federated group), nothing to hand over.
        self._link.record(Evicted(
            outcome="closed" if done.closed else "none", closed=len(done.closed),
            gone=len(done.gone), connection=decision.connection, token=decision.token,
            previous_token=decision.previous.token))
