"""sdk._core.consuming: a delivery no handler may see (``refuse``) is parked at once, unrun,
in its turn: what came before it is handled first, what comes after it only once its copy is
confirmed; it is acked only after that confirm, and never when the park fails."""

from __future__ import annotations

from sac.sdk import UnfitMessage
from sac.sdk._core.acks import Ack, Reject
from sac.sdk._core.consuming import Halt, Park, Parking, Run, Why, permanent_failure
from tests.unit.test_core_consuming import Msg, machine, of, running, tags


class Unfit(Exception):
    pass


def test_an_unfit_delivery_waits_for_those_before_it_and_is_parked_unrun() -> None:
    m = running(machine(batch=10))
    m.deliver(Msg(1))
    m.deliver(Msg(2))
    m.refuse(Msg(3), Unfit("headers nested too deep"))
    m.deliver(Msg(4))
    [run] = m.dispatch(0.0)
    assert tags(run) == [1, 2], "the unfit one and what follows it must not run yet"
    actions = m.done(2, None, 0.0)
    assert actions[0] == Ack(tag=2, multiple=True)
    [park] = of(actions, Park)
    assert park.delivery == Msg(3)
    assert park.attempts == 0, "its handler never ran"
    assert str(park.error) == "headers nested too deep"
    assert of(actions, Run) == [], "nothing behind it runs while it is being parked"
    assert m.busy
    after = m.parked(1.0)
    [next_run] = of(after, Run)
    assert tags(next_run) == [4]
    assert of(m.done(1, None, 1.0), Ack) == [Ack(tag=4, multiple=True)], "3 acked once parked"
    assert m.counts.parked == 1
    assert m.counts.handler_errors == 0


def test_an_unfit_delivery_first_in_line_is_parked_at_the_first_dispatch() -> None:
    m = running(machine())
    m.refuse(Msg(1), Unfit("x"))
    [park] = m.dispatch(0.0)
    assert isinstance(park, Park)
    assert park.delivery == Msg(1)


def test_two_unfit_in_a_row_are_parked_one_after_the_other() -> None:
    m = running(machine(batch=10))
    m.refuse(Msg(1), Unfit("a"))
    m.refuse(Msg(2), Unfit("b"))
    m.deliver(Msg(3))
    [first] = m.dispatch(0.0)
    assert isinstance(first, Park)
    assert first.delivery == Msg(1)
    actions = m.parked(0.0)
    [second] = of(actions, Park)
    assert second.delivery == Msg(2)
    actions = m.parked(0.0)
    assert tags(of(actions, Run)[0]) == [3]


def test_without_a_parking_queue_an_unfit_delivery_is_dead_lettered() -> None:
    m = running(machine(batch=10, parking=Parking.DEAD_LETTER))
    m.refuse(Msg(1), Unfit("x"))
    m.deliver(Msg(2))
    actions = m.dispatch(0.0)
    assert [type(a) for a in actions] == [Park, Reject, Run]
    assert actions[1] == Reject(tag=1, requeue=False)
    assert tags(actions[2]) == [2]


def test_with_nowhere_to_park_an_unfit_delivery_halts_the_consumer() -> None:
    m = running(machine(parking=Parking.NONE))
    m.deliver(Msg(1))
    m.refuse(Msg(2), Unfit("x"))
    m.dispatch(0.0)
    actions = m.done(1, None, 0.0)
    [halt] = of(actions, Halt)
    assert halt.why is Why.NOWHERE_TO_PARK
    assert of(actions, Ack) == [Ack(tag=1, multiple=False)], "only what was done is acked"


def test_a_park_that_fails_halts_and_the_unfit_delivery_is_never_acked() -> None:
    m = running(machine())
    m.refuse(Msg(1), Unfit("x"))
    m.dispatch(0.0)
    actions = m.park_failed(0.0, RuntimeError("refused"))
    [halt] = of(actions, Halt)
    assert halt.why is Why.PARKING_FAILED
    assert of(actions, Ack) == []


def test_a_lost_channel_forgets_which_tags_were_unfit() -> None:
    """Tags start again at 1 on a new channel: the redelivered message is judged again (the
    wire refuses it again), and a fit message with an old unfit tag runs."""
    m = running(machine())
    m.refuse(Msg(1), Unfit("x"))
    m.dispatch(0.0)
    m.channel_lost(0.0)
    assert m.parked(0.0) == ()
    m.subscribed(0.0)
    m.deliver(Msg(1, "fit"))
    [run] = m.dispatch(0.0)
    assert isinstance(run, Run)
    assert tags(run) == [1]


def test_an_unfit_message_found_while_running_is_parked_at_once_too() -> None:
    """The other way in: a run (an inbox's store, say) that finds its message unfit reports
    ``UnfitMessage`` as the failure; no retry cures it."""
    assert permanent_failure(UnfitMessage("q", 1, "its id cannot be stored"))
