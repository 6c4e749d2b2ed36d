"""The simulated clients' link keeping (``sac/sim/shell.py``) decides as the SDK's recovery does:
the same ``sdk._core.reconnects`` says which node comes next and how long to wait."""

from __future__ import annotations

import random
from collections.abc import Sequence

from sac.sdk._core.backoff import Backoff
from sac.sdk._errors import ConnectError
from sac.sdk._settings import ConnectionSettings
from sac.sim.harness import Connect, ConnectionLost, Received
from sac.sim.methods import ConnectionOpenOk
from sac.sim.shell import Shell

HEARTBEAT = 2
SETTINGS = ConnectionSettings(
    urls=("amqp://a/", "amqp://b/", "amqp://c/"), heartbeat=HEARTBEAT,
    reconnect=Backoff(initial=1.0, maximum=8.0, max_attempts=20, max_elapsed=600.0))


class Client(Shell):
    """A shell whose setup is done at once: only the link keeping is under test."""

    def setup(self, now: float) -> None:
        self.ready(now)

    def dropped(self, now: float, why: str) -> None:
        pass

    def failed(self, now: float, error: ConnectError) -> None:
        raise AssertionError(error)

    def closed(self, now: float) -> None:
        pass


def connects(actions: Sequence[object]) -> list[Connect]:
    return [a for a in actions if isinstance(a, Connect)]


def up(client: Client, now: float) -> str:
    """Open the link the client just asked for; its name."""
    assert client.link is not None
    client.receive(now, Received(link=client.link, channel=0, method=ConnectionOpenOk()))
    assert client.up
    return client.link


def test_a_link_lost_after_it_proved_itself_is_reconnected_at_once_at_the_next_node() -> None:
    client = Client("c", SETTINGS, random.Random(1))
    client.open(0.0, retry=False)
    assert [c.node for c in connects(client.out)] == [0]
    link = up(client, 0.0)
    out = client.receive(60.0, ConnectionLost(link=link, reason="reset"))
    assert [c.node for c in connects(out)] == [1]
    assert client.reconnects == 1


def test_links_that_die_at_once_are_reconnected_after_a_growing_wait() -> None:
    """No reconnect storm: a link lost before two heartbeat intervals is followed by a wait
    of up to the reconnect backoff's next cap, as the SDK waits (``Flaps``)."""
    client = Client("c", SETTINGS, random.Random(7))
    client.open(0.0, retry=False)
    now, caps = 0.0, []
    for _ in range(4):
        link = up(client, now)
        now += 0.5  # well under 2 x HEARTBEAT
        lost = ConnectionLost(link=link, reason="reset")
        assert connects(client.receive(now, lost)) == [], "waits"
        due = client.next_tick()
        assert due is not None
        assert due > now
        caps.append(due - now)
        assert not client.idle(), "a pending reconnect is work: the world must not go idle"
        out = client.tick(due)
        assert len(connects(out)) == 1, "the reconnect begins when the wait is over"
        now = due
    assert all(0 < wait <= cap for wait, cap in zip(caps, [1.0, 2.0, 4.0, 8.0], strict=True))
    assert client.reconnects == 4


def test_a_client_closed_while_it_waits_to_reconnect_does_not_reconnect() -> None:
    client = Client("c", SETTINGS, random.Random(3))
    client.open(0.0, retry=False)
    link = up(client, 0.0)
    client.receive(0.5, ConnectionLost(link=link, reason="reset"))
    client.close(0.6)
    assert client.next_tick() is None
    assert connects(client.tick(100.0)) == []
