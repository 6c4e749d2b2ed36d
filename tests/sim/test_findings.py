"""What ``sac sim`` found in the SDK's engines and is not fixed yet: each test shows the
finding still there, on its shrunk schedule. When a fix lands, its test fails: then turn the
check on by default (``EnginesWorkload``) and drop the test.

Unflagged copy. The publisher's link goes silent (a frozen network path) with a publish in
flight; after two heartbeat intervals the publisher gives the link up, reconnects and sends
the message again, marked ``x-sac-retransmit``. The broker, which waits two to three
intervals before it gives up on a silent connection, still has the old one when the path
heals: the original, unmarked publish arrives after its retransmission and is enqueued
behind it. The consumer gets the marked copy first and the unmarked original second, with
``redelivered`` false and no delivery count, so the inbox's default lookup policy does not
look it up. The memory store checks every id before the effect anyway, and a SQL store's
unique key rolls a transactional effect back; an effect outside the store's transaction (a
call to another system) runs twice, which is what the default policy's lookup is meant to
prevent (``LookupPolicy.DEFAULT``'s docstring says an unflagged message "was never handed
to a consumer before").
"""

from __future__ import annotations

from sac.sim.campaign import run_one
from sac.sim.faults import Silence
from sac.sim.workload import EnginesWorkload


def test_a_publish_held_by_a_silent_link_arrives_after_its_retransmission_unflagged() -> None:
    strict = EnginesWorkload(flagged_copies=True)
    outcome = run_one(1625, strict, (Silence(at=0.954, link="pub", duration=1.438),))
    assert outcome.violations == (
        "pub-0000 was delivered again to c1#1 at t=2.4894 without a flag (uid 21): an inbox "
        "would not look it up",)
    # Everything else holds: the store refused the copy's second commit.
    assert not run_one(1625, EnginesWorkload(), outcome.schedule).failed
