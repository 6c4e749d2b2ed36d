"""A consumer process: ``python -m sac.chaos.actors.consumer``, its ``ConsumerActor`` on stdin.

A single-active consumer of either SDK face whose effect writes one row to the run's sink,
through the inbox's transaction (``dedup="inbox"``) or on its own (the weakened modes). It
records its history, reports role changes on stdout, stops gracefully on SIGTERM (unless
``handle_signals`` is off), and takes commands on stdin from the runner (below). With
``guard_hosts`` it is guarded by a ZooKeeper election (``ConsumerSettings.guard``): it
subscribes only while it leads, and when a newer leader fences it off it steps down and
contends again instead of exiting.

``freeze``
    The next effect this process starts prints ``{"event": "in_effect", "msg": ...}`` and
    then waits for a ``continue`` line, so the nemesis can SIGSTOP it exactly inside an
    effect (the line is read only after SIGCONT).
``continue``
    Lets that effect go on, or a pause point (``ConsumerActor.pause_*``: the process printed
    ``{"event": "paused", ...}``) go on.
``disarm``
    Forget an earlier ``freeze`` that no effect took up yet.

Exit status: 0 after a graceful stop, 3 when fenced off (``StaleEpoch``: a newer consumer
holds the queue), 4 when it crashed on purpose (``crash_on_body``), 1 on any other error
(printed on stderr and in the ``done`` line).
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from sac.history import Commit, DuplicateSkipped
from sac.sdk import (
    AsyncConsumer,
    ConnectionSettings,
    Consumer,
    ConsumerSettings,
    Delivery,
    Handover,
    HistoryRecorder,
    Inbox,
    Role,
    StaleEpoch,
    Transaction,
)
from sac.sdk.dedup import id_key
from . import ConsumerActor, end_with_runner, say
from ._sink import holding_locks

FENCED = 3
"""The exit status when a newer consumer holds the queue (``StaleEpoch``)."""
CRASHED = 4
"""The exit status of a crash on ``crash_on_body`` (``os._exit``)."""
SHARED_EPOCH = 1
"""The epoch every consumer adopts when fencing is off: no commit is ever refused as stale."""
CONTINUE_TIMEOUT = 600.0
"""A frozen effect waits at most this long for ``continue`` (a runner that died)."""
LINGER_S = 0.01
MAX_LINGER = 200


class UnfencedInbox(Inbox):
    """The inbox of the weakening ``fencing-off``: each activation adopts ``SHARED_EPOCH``
    instead of claiming a new epoch, or of adopting the one its consumer hands it with the
    batch (a guarded consumer's election token, which also refuses a batch of a channel it
    gave up). A replaced consumer's late commit is then never refused. The consumer still
    gives it its queue, name and recorder (``Inbox.session``), as any inbox; only the
    epoch is taken away, which is what the weakening is about."""

    def activate(self, epoch_source: Callable[[], int] | None = None) -> int:
        return super().activate(lambda: SHARED_EPOCH)


class Controls:
    """The runner's commands, read from stdin on a thread of their own."""

    def __init__(self) -> None:
        self.armed = threading.Event()
        self.go = threading.Event()
        self.lingered = 0
        end_with_runner(self._command)

    def _command(self, command: str) -> None:
        if command == "freeze":
            self.go.clear()
            self.armed.set()
        elif command == "continue":
            self.go.set()
        elif command == "disarm":
            self.armed.clear()

    def hold(self, event: str, **fields: Any) -> None:
        """Say ``event`` and wait for ``continue`` (sent only after the line was read)."""
        self.go.clear()
        say(event, **fields)
        self.go.wait(CONTINUE_TIMEOUT)

    def checkpoint(self, msg: str, holding: bool) -> None:
        """Stop here if armed, once the store transaction holds locks (``holding``): a
        consumer frozen with nothing written holds nothing a successor waits for. Until then
        each effect lingers a little, so that deliveries pile up and the next batch has
        several messages."""
        if not self.armed.is_set():
            return
        self.lingered += 1
        if holding or self.lingered > MAX_LINGER:
            self.armed.clear()
            self.lingered = 0
            self.hold("in_effect", msg=msg)
        else:
            time.sleep(LINGER_S)


class Pauses:
    """The pause points a test asks for (``ConsumerActor.pause_*``), each taken once."""

    def __init__(self, spec: ConsumerActor, controls: Controls) -> None:
        self.spec = spec
        self.controls = controls
        self.taken: set[str] = set()
        self.batch: list[str] = []
        """The ids whose effects wrote in the open store transaction, in order."""

    def _take(self, at: str, msg: str, **fields: Any) -> None:
        self.taken.add(at)
        self.controls.hold("paused", at=at, msg=msg, **fields)

    def before_effect(self, msg: str) -> None:
        want = self.spec.pause_in_effect
        if want and "effect" not in self.taken and want in ("*", msg):
            self._take("effect", msg)

    def written(self, msg: str, tx: Transaction) -> None:
        """After the effect of ``msg`` wrote in the inbox's transaction ``tx``."""
        if self.spec.pause_after_commit == msg and "committed" not in self.taken:
            tx.on_commit(functools.partial(self._take, "committed", msg))
        wanted = self.spec.pause_after_writes
        if not wanted or "written" in self.taken:
            return
        if msg in self.batch:  # the batch is tried again, in a new transaction
            self.batch = []
        earlier = self.batch
        self.batch = [*earlier, msg]
        tx.on_commit(self._committed)
        if len(self.batch) >= wanted:
            self._take("written", msg, batch=earlier)

    def _committed(self) -> None:
        self.batch = []


class Work:
    """The effect of one message, in each dedup mode."""

    def __init__(self, spec: ConsumerActor, recorder: HistoryRecorder) -> None:
        self.spec = spec
        self.recorder = recorder
        self.sink = spec.open_sink()
        self.controls = Controls()
        self.pauses = Pauses(spec, self.controls)
        self.crash_on = None if spec.crash_on_body is None else spec.crash_on_body.encode()

    def _work(self, delivery: Delivery, holding: bool = True) -> None:
        msg = str(delivery.message_id)
        if delivery.body == self.crash_on:
            os._exit(CRASHED)
        self.pauses.before_effect(msg)
        self.controls.checkpoint(msg, holding)
        if self.spec.effect_ms:
            time.sleep(self.spec.effect_ms / 1000)  # the effect's own cost (simulated work)

    def effect(self, delivery: Delivery, tx: Transaction) -> None:
        """With the inbox: the row commits with the dedup record, or not at all."""
        msg = str(delivery.message_id)
        self._work(delivery, self.controls.armed.is_set() and holding_locks(tx.connection))
        self.sink.write_in(tx, msg, self.spec.actor)
        self.pauses.written(msg, tx)

    def handle(self, delivery: Delivery) -> None:
        """Without the inbox: the weakened modes, each commit recorded here."""
        msg = str(delivery.message_id)
        if self.spec.dedup == "redelivered-only" and delivery.redelivered \
                and self.sink.seen(msg):
            self.recorder.record(DuplicateSkipped(msg=id_key(msg), why="redelivered-seen"))
            return
        self._work(delivery)
        self.sink.write(msg, self.spec.actor, None, time.time())
        self.recorder.record(Commit(msg=id_key(msg), epoch=None))

    async def ahandle(self, delivery: Delivery) -> None:
        await asyncio.to_thread(self.handle, delivery)

    def target(self) -> Inbox | None:
        if self.spec.dedup != "inbox":
            return None
        store = self.sink.store(evict_frozen_holder=self.spec.fencing)
        return (Inbox if self.spec.fencing else UnfencedInbox)(store, self.effect)


def announce(role: Role) -> None:
    """A role change, with when it happened (the clock every process of the host shares)."""
    say("role", role=role.value, monotonic=time.monotonic())


def run_blocking(settings: ConsumerSettings, work: Work) -> None:
    inbox = work.target()
    consumer = Consumer(settings, inbox if inbox is not None else work.handle,
                        recorder=work.recorder, on_role_change=announce)
    consumer.run(handle_signals=work.spec.handle_signals)


async def run_async(settings: ConsumerSettings, work: Work) -> None:
    inbox = work.target()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT) if work.spec.handle_signals else ():
        loop.add_signal_handler(sig, stop.set)
    handler = inbox if inbox is not None else work.ahandle
    consumer = AsyncConsumer(settings, handler, recorder=work.recorder,
                             on_role_change=announce)
    async with consumer:
        stopped = asyncio.ensure_future(stop.wait())
        ended = asyncio.ensure_future(consumer.wait())
        await asyncio.wait({stopped, ended}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if ended.done():
            ended.result()
        else:
            ended.cancel()


def main(spec: ConsumerActor) -> int:
    events = Path(spec.run_dir) / "events" / f"{spec.actor}.jsonl"
    recorder = HistoryRecorder(events, spec.actor, flush_every=1)
    connection = ConnectionSettings(urls=spec.urls, heartbeat=spec.heartbeat,
                                    name=f"sac-chaos-{spec.actor}")
    queue = spec.queue_settings()
    if spec.delivery_limit is not None:
        queue = attrs.evolve(queue, delivery_limit=spec.delivery_limit)
    settings = ConsumerSettings(connection, queue, prefetch=spec.prefetch,
                                ack_batch=spec.ack_batch, consumer_name=spec.actor,
                                guard=spec.guard(), management=spec.management(),
                                handover=Handover(spec.handover))
    work = Work(spec, recorder)
    code = 0
    error = None
    try:
        if spec.face == "blocking":
            run_blocking(settings, work)
        else:
            asyncio.run(run_async(settings, work))
    except StaleEpoch as exc:
        code, error = FENCED, f"StaleEpoch: {exc}"
    except Exception as exc:  # noqa: BLE001 - the runner reports it with the run
        code, error = 1, f"{type(exc).__name__}: {exc}"
        print(f"{spec.actor}: {error}", file=sys.stderr)
    finally:
        recorder.close()
    say("done", code=code, error=error)
    return code


if __name__ == "__main__":
    sys.exit(main(ConsumerActor.from_stdin()))
