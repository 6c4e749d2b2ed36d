"""sac.sdk._core.reconnects: which node a client's next link goes to, and when; the SDK's
recovery and the simulator's clients both decide with it."""

from __future__ import annotations

from sac.sdk._core.backoff import Backoff
from sac.sdk._core.reconnects import Reconnect, Reconnects

NODES = ["node0", "node1", "node2"]
POLICY = Backoff(initial=0.1, maximum=2.0, max_attempts=5, max_elapsed=30.0)


def test_a_first_connect_tries_each_node_once_from_the_first() -> None:
    keeper = Reconnects(POLICY, heartbeat=2.0)
    plan = keeper.attempts(NODES, retry=False)
    assert plan.index == 0
    assert [plan.failed("refused", 0.0) for _ in NODES] == [0.0, 0.0, None]  # fails fast


def test_after_a_loss_the_reconnect_begins_at_the_node_after_the_lost_one() -> None:
    """The node that just dropped the link is tried last."""
    keeper = Reconnects(POLICY, heartbeat=2.0)
    keeper.up(2, now=0.0)
    assert keeper.attempts(NODES, retry=False).index == 2, "a connect goes to the last node"
    step = keeper.lost(60.0, rng=lambda: 1.0)
    assert step == Reconnect(wait=0.0, lived=60.0, streak=0), "a working link: at once"
    plan = keeper.attempts(NODES, retry=True)
    assert plan.index == 0  # round the nodes: after node2 comes node0
    assert plan.failed("refused", 0.0, rng=lambda: 1.0) == 0.1  # under the reconnect backoff
    assert keeper.reconnects == 1


def test_links_that_die_before_two_heartbeats_are_reconnected_after_a_growing_wait() -> None:
    """A link that comes up and dies at once, again and again, must not be reconnected at
    once for ever: each loss in a row waits up to the next cap of the reconnect backoff."""
    keeper = Reconnects(POLICY, heartbeat=2.0)
    waits = []
    for n in range(4):
        keeper.up(n, now=10.0 * n)
        waits.append(keeper.lost(10.0 * n + 3.9, rng=lambda: 1.0))  # under 2 x 2 s
    assert [w.wait for w in waits] == [0.1, 0.2, 0.4, 0.8]
    assert [w.streak for w in waits] == [1, 2, 3, 4]
    keeper.up(0, now=100.0)
    assert keeper.lost(104.0, rng=lambda: 1.0).wait == 0.0, "a link that proved itself"
    assert keeper.reconnects == 5
