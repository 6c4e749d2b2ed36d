"""What ``sac sim`` found in the SDK's engines, and what became of it: each test shows the
finding on its shrunk schedule.

Unflagged copy (fixed by making ``LookupPolicy.ALWAYS`` the default). The publisher's link
goes silent (a frozen network path) with a publish in flight; after two heartbeat intervals
the publisher gives the link up, reconnects and sends the message again, marked
``x-sac-retransmit``. The broker, which waits two to three intervals before it gives up on a
silent connection, still has the old one when the path heals: the original, unmarked publish
arrives after its retransmission and is enqueued behind it. The consumer gets the marked copy
first and the unmarked original second, with ``redelivered`` false and no delivery count, so
an inbox that looks up only flagged messages (``LookupPolicy.FLAGGED``, the default until
then) does not look it up: a SQL store's unique key rolls a transactional effect back, but an
effect outside the store's transaction (a call to another system) runs twice.
"""

from __future__ import annotations

from sac.sdk.dedup import Inbox, LookupPolicy
from sac.sim.campaign import run_one
from sac.sim.faults import Silence
from sac.sim.workload import EnginesWorkload

SCHEDULE = (Silence(at=0.954, link="pub", duration=1.438),)


def test_a_publish_held_by_a_silent_link_arrives_after_its_retransmission_unflagged() -> None:
    outcome = run_one(1625, EnginesWorkload(lookup=LookupPolicy.FLAGGED), SCHEDULE)
    assert outcome.violations == (
        "pub-0000 was delivered again to c1#1 at t=2.4894 without a flag (uid 21): an inbox "
        "would not look it up",)


def test_the_default_lookup_looks_every_copy_up() -> None:
    assert LookupPolicy.DEFAULT is LookupPolicy.ALWAYS
    assert Inbox.__init__.__kwdefaults__["policy"] is LookupPolicy.ALWAYS
    assert not run_one(1625, EnginesWorkload(), SCHEDULE).failed
