"""The blocking face's worker reports how its runs ended: promptly enough that no ack waits
on it, and in few hops.

A handler's runs are handed out without waiting for reports (``Runner.pipelined``), so the
worker lets one report cover the runs of a moment (``REPORT_LINGER``); an inbox's next run
waits for the report, so the worker never holds that one back.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from sac.sdk._consumer.runs import Cut, Outcome, Runner, Ticket
from sac.sdk._consumer.workers import ThreadWorker
from sac.sdk._core.consuming import Run

WAIT = 10.0


class Tagged:
    def __init__(self, tag: int) -> None:
        self.delivery_tag = tag


class Reports:
    """What reached the loop, hop by hop."""

    def __init__(self) -> None:
        self.hops: list[list[tuple[Ticket, Outcome]]] = []
        self.arrived = threading.Condition()

    def report(self, ticket: Ticket, outcome: Outcome) -> None:
        raise AssertionError("the blocking face reports from its own thread")

    def report_threadsafe(self, ended: list[tuple[Ticket, Outcome]]) -> None:
        with self.arrived:
            self.hops.append(list(ended))
            self.arrived.notify_all()

    def settled(self) -> int:
        return sum(outcome[0] for hop in self.hops for _, outcome in hop)

    def wait_for(self, settled: int) -> None:
        with self.arrived:
            assert self.arrived.wait_for(lambda: self.settled() >= settled, WAIT), self.hops


def ticket(seq: int, size: int) -> Ticket:
    run: Run[Any] = Run(deliveries=[Tagged(seq * 100 + i) for i in range(size)],
                        generation=0, activation=1, seq=seq, barrier=0)
    return Ticket(run=run, cut=Cut())


def serve(worker: ThreadWorker, *, pipelined: bool, batch: int = 100,
          handler: Any = None) -> Reports:
    reports = Reports()
    runner = Runner(handler or (lambda _delivery: None), None, queue="q", batch=batch,
                    reports=reports, pipelined=pipelined)
    threading.Thread(target=worker.serve, args=(runner,), daemon=True).start()
    return reports


@pytest.mark.parametrize("pipelined", [True, False])
def test_the_last_run_is_reported_without_another_one_coming(pipelined: bool) -> None:
    """An idle consumer never sits on what it has done: the report comes with no further
    run, no stop, nothing else happening."""
    worker = ThreadWorker()
    reports = serve(worker, pipelined=pipelined)
    worker.submit(ticket(1, 3))
    reports.wait_for(3)
    asyncio.run(worker.finish())
    assert not worker.serving
    assert [[t.run.seq for t, _ in hop] for hop in reports.hops] == [[1]]


def test_runs_that_follow_each_other_closely_share_a_report() -> None:
    """Runs handed out while the worker lingers are reported together, in order."""
    worker = ThreadWorker()
    first_ran = threading.Event()
    go_on = threading.Event()

    def handler(delivery: Tagged) -> None:
        if delivery.delivery_tag == 100:
            first_ran.set()
            assert go_on.wait(WAIT)

    reports = serve(worker, pipelined=True, handler=handler)
    worker.submit(ticket(1, 1))
    assert first_ran.wait(WAIT)
    worker.submit(ticket(2, 2))  # queued while run 1 is in its handler
    go_on.set()
    reports.wait_for(3)
    asyncio.run(worker.finish())
    assert [[t.run.seq for t, _ in hop] for hop in reports.hops] == [[1, 2]]


def test_an_ack_batch_is_reported_at_once() -> None:
    worker = ThreadWorker()
    reports = serve(worker, pipelined=True, batch=4)
    worker.submit(ticket(1, 4))
    reports.wait_for(4)
    assert len(reports.hops) == 1
    asyncio.run(worker.finish())


def test_a_run_that_fails_is_reported_at_once() -> None:
    def handler(delivery: Tagged) -> None:
        raise ValueError(delivery.delivery_tag)

    worker = ThreadWorker()
    reports = serve(worker, pipelined=True, handler=handler)
    worker.submit(ticket(1, 2))
    with reports.arrived:
        assert reports.arrived.wait_for(lambda: bool(reports.hops), WAIT)
    [[(_, (done, failed, refused))]] = reports.hops
    assert (done, refused) == (0, None)
    assert isinstance(failed, ValueError)
    asyncio.run(worker.finish())
