"""The consumer's role poll: which consumer does the broker say is active?

With ``ConsumerSettings.management``, a consumer of a single-active queue asks the management
API every ``role_poll`` seconds (jittered, so that a fleet does not ask in step) which
consumer the broker made active, and hands the answer to ``RoleWatch`` (pure, in
``_core/roles.py``), which decides what it means. This is the I/O around it: the question
(in a thread, through ``Management``), and a bounded complaint when the API does not answer.
A failing API never stops a consumer: its role then comes from deliveries, as without a URL.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import random
from collections.abc import Callable

import attrs

from .._core.backoff import Backoff
from .._core.consuming import Actions, ConsumerMachine
from .._core.roles import Role, RoleWatch, Sighting, Verdict
from .._delivery import Delivery
from .._errors import ManagementError, ManagementNotFound
from .._settings import ConsumerSettings
from ..management import Management
from .link import ConsumerLink

log = logging.getLogger("sac.consumer")

POLLED = (Role.WAITING, Role.ACTIVE)
"""Only a subscribed consumer has a tag the broker could name."""
ONE_RETRY = Backoff(initial=0.05, maximum=0.05, max_attempts=1, max_elapsed=1.0)
"""A poll tries every node, once more after a moment; then it waits for the next poll."""


class RolePoller:
    """Polls on the consumer's loop; ``verdict`` is called there with what an answer meant."""

    def __init__(
        self,
        settings: ConsumerSettings,
        tag: Callable[[], str | None],
        role: Callable[[], Role],
        verdict: Callable[[Verdict, str | None], None],
    ) -> None:
        management = settings.management
        interval = settings.role_poll
        assert management is not None
        assert interval is not None
        self.client = Management(attrs.evolve(management, retry=ONE_RETRY))
        self.interval = interval
        self.watch = RoleWatch(lag=2 * management.statistics_interval)
        self._vhost = settings.connection.vhost
        self._queue = settings.queue.name
        self._tag = tag
        self._role = role
        self._verdict = verdict
        self._task: asyncio.Task[None] | None = None
        self._failing = 0
        # Its own thread: a question under way (up to the API's timeout) never holds up the
        # shutdown of the application's loop.
        self._executor = concurrent.futures.ThreadPoolExecutor(1, "sac-role-poll")

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sac-role-poll")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._executor.shutdown(wait=False, cancel_futures=True)

    def changed(self, role: Role, now: float) -> None:
        self.watch.changed(role, now)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.interval * random.uniform(0.8, 1.2))
            tag = self._tag()
            if tag is None or self._role() not in POLLED:
                continue
            asked_at = loop.time()
            try:
                queue = await loop.run_in_executor(self._executor, self.client.queue,
                                                   self._queue, self._vhost)
            except ManagementNotFound as exc:
                gone = self.watch.missing(tag, self._tag())
                if gone is not None:
                    self._verdict(gone, None)
                else:
                    self._complain(exc)
                continue
            except ManagementError as exc:
                self._complain(exc)
                continue
            if self._failing:
                log.info("the management API answers again (role poll of %r)", self._queue)
                self._failing = 0
            others = tuple(t for t in queue.active_tags if t != tag)
            seen = Sighting(asked_at, tag, queue.activity_of(tag), others,
                            by_queue_tag=queue.settled_by_queue_tag)
            verdict = self.watch.judge(seen, self._role(), self._tag())
            if verdict is not None:
                self._verdict(verdict, others[0] if others else None)

    def _complain(self, exc: ManagementError) -> None:
        """One warning when the API stops answering, then one every 100 failed polls."""
        if self._failing % 100 == 0:
            log.warning("role poll of queue %r failed (%d in a row): %s; the role comes from "
                        "deliveries meanwhile", self._queue, self._failing + 1, exc)
        self._failing += 1


def role_seen(verdict: Verdict, active_tag: str | None, link: ConsumerLink,
              machine: ConsumerMachine[Delivery],
              carry_out: Callable[[Actions[Delivery]], None]) -> None:
    """The management API named the queue's active consumer: this one (it is active,
    delivery or not), or another while this one thought itself active; or said the queue
    is gone while this consumer is subscribed to it."""
    now, tag, queue = link.now(), link.consumer_tag, link.settings.queue.name
    if verdict is Verdict.GONE:
        log.warning("queue %r does not exist, yet this consumer (%s) is subscribed to it "
                    "(management API): consuming again", queue, tag)
        link.server_cancel(None)  # as if the broker had cancelled the orphan
    elif verdict is Verdict.ACTIVE:
        log.info("the broker names this consumer (%s) active on %r (management API)",
                 tag, queue)
        carry_out(machine.confirmed_active(now))
    else:
        log.warning("the broker names consumer %s active on %r, not this one (%s): "
                    "waiting again", active_tag, queue, tag)
        carry_out(machine.demoted(now))
