"""sdk._core.guarding: the guard's decisions, and the consumer machine's part in them (pause,
resume, a fenced run of a guarded consumer), driven without ZooKeeper or a broker.

Scenario tests pin each decision; a property test drives random sequences of session
states, election results and fences, and checks what the consumer would be told."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sac.sdk import StaleEpoch
from sac.sdk._core.acks import Ack
from sac.sdk._core.backoff import Backoff
from sac.sdk._core.consuming import (
    WAKE,
    ConsumerMachine,
    Halt,
    Parking,
    Replaced,
    RetryLater,
    Run,
    Why,
)
from sac.sdk._core.guarding import (
    Abandon,
    Contend,
    ContendLater,
    GiveUp,
    GroupPaths,
    GuardAction,
    GuardMachine,
    Lead,
    LeaderRecord,
    Leadership,
    Pause,
    Resume,
    SessionState,
    Standing,
    Withdraw,
    fencing_token,
    lease_mismatch,
)
from sac.sdk._core.roles import Role

CONNECTED, SUSPENDED, LOST = SessionState.CONNECTED, SessionState.SUSPENDED, SessionState.LOST
RETRY = Backoff(initial=0.5, maximum=2.0, max_attempts=None, max_elapsed=10.0)


def lead(token: int) -> Leadership:
    return Leadership(token=token, node=f"/g/election/n{token}")


def kinds(actions: Sequence[GuardAction]) -> list[str]:
    return [type(a).__name__ for a in actions]


def started(rng: float = 1.0) -> GuardMachine:
    machine = GuardMachine(RETRY, rng=lambda: rng)
    assert machine.start(0.0) == [Contend(attempt=1)]
    return machine


# ------------------------------------------------------------------ values


def test_the_token_is_the_nodes_czxid() -> None:
    assert fencing_token(0x1_0000_0005) == 0x1_0000_0005
    for bad in (0, -3, True, 1.5, "7"):
        with pytest.raises(ValueError, match="czxid"):
            fencing_token(bad)  # type: ignore[arg-type]


def test_group_paths() -> None:
    paths = GroupPaths(group="/sac/orders")
    assert (paths.election, paths.leader) == ("/sac/orders/election", "/sac/orders/leader")


def test_a_leader_record_round_trips_and_foreign_data_is_no_record() -> None:
    record = LeaderRecord(token=42, consumer="c1", connection="conn-1", host="host-a", pid=1234)
    assert LeaderRecord.decode(record.encode()) == record
    assert LeaderRecord.decode(LeaderRecord(token=7).encode()) == LeaderRecord(token=7)
    for foreign in (None, b"", b"not json", b"[1, 2]", b'{"token": "7"}', b'{"token": true}',
                    b'{"consumer": "x"}'):
        assert LeaderRecord.decode(foreign) is None
    odd = LeaderRecord.decode(b'{"token": 3, "consumer": 5, "pid": "x", "host": "h"}')
    assert odd == LeaderRecord(token=3, host="h")


def test_a_lease_other_than_the_one_asked_for_is_refused_naming_the_bound() -> None:
    assert lease_mismatch(4000, 4000, "zk:2181") is None
    below = lease_mismatch(150, 200, "zk:2181")
    assert below is not None
    assert "GuardSettings.session_timeout=0.15 s" in below
    assert "granted 0.2 s" in below
    assert "minimum" in below
    assert "tickTime" in below
    above = lease_mismatch(90_000, 60_000, "zk:2181")
    assert above is not None
    assert "maximum" in above
    assert "granted 60 s" in above


# ------------------------------------------------------------------ the guard machine


def test_a_leader_pauses_while_suspended_and_resumes_on_the_same_session() -> None:
    m = started()
    assert m.won(1, lead(9), 0.1) == [Lead(leadership=lead(9))]
    assert m.leading
    assert m.status.leadership == lead(9)
    assert m.session_changed(SUSPENDED, 1.0) == [Pause()]
    assert m.status.paused
    assert m.leading
    assert m.session_changed(CONNECTED, 2.0) == [Resume()]
    assert not m.status.paused
    assert m.leading
    assert m.leadership == lead(9)


def test_a_lost_session_abandons_the_work_and_contends_again_on_a_new_session() -> None:
    m = started()
    m.won(1, lead(9), 0.1)
    m.session_changed(SUSPENDED, 1.0)
    actions = m.session_changed(LOST, 5.0)
    assert kinds(actions) == ["Abandon", "Withdraw"]
    assert actions[1] == Withdraw(attempt=1)
    assert not m.leading
    assert m.leadership is None
    assert m.status.paused
    assert m.session_changed(CONNECTED, 6.0) == [Resume(), Contend(attempt=2)]
    # the old attempt's late win is refused and its node given up
    assert m.won(1, lead(10), 6.1) == [Withdraw(attempt=1)]
    assert m.won(2, lead(12), 6.2) == [Lead(leadership=lead(12))]


def test_lost_straight_from_connected_pauses_too() -> None:
    m = started()
    m.won(1, lead(9), 0.1)
    assert kinds(m.session_changed(LOST, 1.0)) == ["Pause", "Abandon", "Withdraw"]


def test_a_contender_that_loses_its_session_joins_again_without_abandoning() -> None:
    m = started()
    assert m.session_changed(SUSPENDED, 1.0) == [Pause()]
    assert m.session_changed(LOST, 2.0) == [Withdraw(attempt=1)]
    assert m.session_changed(CONNECTED, 3.0) == [Resume(), Contend(attempt=2)]


def test_a_failed_attempt_is_retried_with_jitter_then_given_up() -> None:
    m = started(rng=0.5)
    error = RuntimeError("no permission")
    assert m.failed(1, error, 1.0) == [ContendLater(attempt=2, at=1.25)]  # 0.5 x cap 0.5
    assert m.deadline == 1.25
    assert m.tick(1.2) == ()
    assert m.tick(1.25) == [Contend(attempt=2)]
    assert m.failed(1, error, 1.3) == ()  # an older attempt's report
    later = m.failed(2, error, 2.0)
    assert later == [ContendLater(attempt=3, at=2.5)]  # 0.5 x cap 1.0
    m.tick(2.5)
    assert kinds(m.failed(3, error, 11.0)) == ["GiveUp"]  # 10 s since the first failure
    assert m.standing is Standing.STOPPED


def test_a_failure_while_disconnected_waits_for_the_connection() -> None:
    m = started()
    m.session_changed(SUSPENDED, 1.0)
    assert m.failed(1, RuntimeError("connection loss"), 1.5) == ()
    assert m.session_changed(CONNECTED, 2.0) == [Resume(), Contend(attempt=2)]


def test_a_retry_due_while_disconnected_waits_for_the_connection() -> None:
    m = started(rng=1.0)
    m.failed(1, RuntimeError("x"), 1.0)
    m.session_changed(SUSPENDED, 1.1)
    assert m.tick(2.0) == ()
    assert m.session_changed(CONNECTED, 3.0) == [Resume(), Contend(attempt=2)]


def test_a_fenced_leader_steps_down_and_contends_again() -> None:
    m = started()
    m.won(1, lead(9), 0.1)
    actions = m.fenced(1.0)
    assert kinds(actions) == ["Abandon", "Withdraw", "Contend"]
    assert actions[1:] == [Withdraw(attempt=1), Contend(attempt=2)]
    assert m.fenced(1.1) == ()  # not leading any more


def test_stop_withdraws_and_ends_everything() -> None:
    m = started()
    m.won(1, lead(9), 0.1)
    assert m.stop(1.0) == [Withdraw(attempt=1)]
    assert m.status.leadership is None
    assert m.session_changed(LOST, 2.0) == ()
    assert m.won(1, lead(9), 2.1) == [Withdraw(attempt=1)]
    assert m.stop(3.0) == ()


def test_a_session_that_changed_while_the_shell_started_is_taken_into_account() -> None:
    m = GuardMachine(RETRY)
    assert m.session_changed(SUSPENDED, 0.0) == ()  # not started: recorded only
    assert m.start(0.1) == [Pause(), Contend(attempt=1)]
    lost = GuardMachine(RETRY)
    lost.session_changed(LOST, 0.0)
    assert lost.start(0.1) == [Pause()]
    assert lost.session_changed(CONNECTED, 0.2) == [Resume(), Contend(attempt=1)]


EVENTS = st.lists(st.one_of(
    st.tuples(st.just("session"), st.sampled_from(list(SessionState))),
    st.tuples(st.just("won"), st.integers(0, 3)),  # how many attempts back
    st.tuples(st.just("failed"), st.integers(0, 3)),
    st.tuples(st.just("fenced"), st.none()),
    st.tuples(st.just("tick"), st.none()),
), max_size=40)


@settings(max_examples=300, deadline=None)
@given(events=EVENTS, stop_at=st.integers(0, 45))
def test_what_the_consumer_is_told_stays_consistent(
    events: list[tuple[str, object]], stop_at: int
) -> None:
    """Whatever happens: leading exactly while a Lead was not followed by an Abandon (or the
    stop); paused exactly while the session is not connected; Pause and Resume alternate;
    attempts only grow; a Lead only while contending on the current attempt; tokens only
    grow across leaderships."""
    m = GuardMachine(Backoff(0.1, 1.0, max_attempts=None, max_elapsed=5.0), rng=lambda: 0.5)
    told: list[GuardAction] = list(m.start(0.0))
    now, tokens = 0.0, 0
    for i, (kind, arg) in enumerate(events):
        now += 0.3
        if i == stop_at:
            told += m.stop(now)
        if kind == "session":
            assert isinstance(arg, SessionState)
            told += m.session_changed(arg, now)
        elif kind == "won":
            assert isinstance(arg, int)
            tokens += 1
            attempt = max(m.attempt - arg, 1)
            was = (m.standing, m.attempt)
            out = m.won(attempt, lead(tokens), now)
            if was == (Standing.CONTENDING, attempt):
                assert out == [Lead(leadership=lead(tokens))]
            else:
                assert out == [Withdraw(attempt=attempt)]
            told += out
        elif kind == "failed":
            assert isinstance(arg, int)
            told += m.failed(max(m.attempt - arg, 1), RuntimeError("x"), now)
        elif kind == "fenced":
            told += m.fenced(now)
        else:
            told += m.tick(now)
        if m.standing is not Standing.STOPPED:
            assert m.status.paused == (m.session is not CONNECTED)
            leads = sum(isinstance(a, Lead) for a in told)
            abandons = sum(isinstance(a, Abandon) for a in told)
            assert leads - abandons == (1 if m.leading else 0)
        switches = [a for a in told if isinstance(a, Pause | Resume)]
        assert all(type(a) is not type(b) for a, b in itertools.pairwise(switches))
        led = [a.leadership.token for a in told if isinstance(a, Lead)]
        assert led == sorted(led)
        if any(isinstance(a, GiveUp) for a in told):
            assert m.standing is Standing.STOPPED
    news = [a.attempt for a in told if isinstance(a, Contend | ContendLater)]
    assert all(a <= b for a, b in itertools.pairwise(news))


# ------------------------------------------------------------------ the consumer's part


@attrs.frozen
class Msg:
    delivery_tag: int


def machine(*, rejoins: bool = False, pipeline: int | None = 1) -> ConsumerMachine[Msg]:
    m: ConsumerMachine[Msg] = ConsumerMachine(
        batch=10, retry=Backoff(1.0, 4.0, max_attempts=3, max_elapsed=100.0),
        resubscribe=Backoff(0.5, 2.0, max_attempts=3, max_elapsed=60.0),
        parking=Parking.QUEUE, rng=lambda: 1.0, pipeline=pipeline, rejoins=rejoins)
    m.start(0.0)
    m.subscribed(0.0)
    return m


def runs(actions: Sequence[object]) -> list[Run[Msg]]:
    return [a for a in actions if isinstance(a, Run)]


def test_paused_nothing_new_starts_and_resume_hands_out_what_waited() -> None:
    m = machine()
    m.pause(1.0)
    assert m.deliver(Msg(1)) != [WAKE]
    assert WAKE not in m.deliver(Msg(2))
    assert m.dispatch(1.0) == ()
    assert m.waiting == 2
    [run] = runs(m.resume(2.0))
    assert [d.delivery_tag for d in run.deliveries] == [1, 2]


def test_a_run_under_way_when_paused_ends_after_the_delivery_in_hand() -> None:
    m = machine(pipeline=None)
    for tag in (1, 2, 3):
        m.deliver(Msg(tag))
    [run] = runs(m.dispatch(0.5))
    assert m.live(run.generation)
    m.pause(1.0)
    assert not m.live(run.generation)  # the worker stops before delivery 2
    after = m.ran(run, 1, None, 1.1)
    assert runs(after) == []
    assert after == [Ack(tag=1, multiple=False, count=1)]  # done is acked: it is durable
    assert m.waiting == 2
    [again] = runs(m.resume(2.0))
    assert [d.delivery_tag for d in again.deliveries] == [2, 3]


def test_a_retry_that_fell_due_while_paused_runs_on_resume() -> None:
    m = machine()
    m.deliver(Msg(1))
    [run] = runs(m.dispatch(0.1))
    [retry] = [a for a in m.ran(run, 0, RuntimeError("boom"), 0.2)
               if isinstance(a, RetryLater)]
    m.pause(0.3)
    assert runs(m.tick(retry.at)) == []
    [again] = runs(m.resume(retry.at + 1))
    assert again.attempt == 2


def test_a_guarded_consumer_fenced_is_replaced_not_halted() -> None:
    m = machine(rejoins=True)
    m.deliver(Msg(1))
    [run] = runs(m.dispatch(0.1))
    assert m.commit_failed(run, StaleEpoch("q", 1, 2), 0.2, fenced=True) == [Replaced()]
    # a fenced run of a channel given up already: nothing at all
    m.deliver(Msg(2))
    [late] = runs(m.dispatch(0.3))
    m.channel_lost(0.4)
    assert m.commit_failed(late, StaleEpoch("q", 1, 2), 0.5, fenced=True) == []
    # the store failing is still the end
    m.subscribed(0.6)
    m.deliver(Msg(1))
    [other] = runs(m.dispatch(0.7))
    [halt] = m.commit_failed(other, RuntimeError("down"), 0.8, fenced=False)
    assert isinstance(halt, Halt)
    assert halt.why is Why.STORE_UNAVAILABLE


def test_an_unguarded_consumer_fenced_halts_as_before() -> None:
    m = machine(rejoins=False)
    m.deliver(Msg(1))
    [run] = runs(m.dispatch(0.1))
    m.channel_lost(0.15)
    [halt] = m.commit_failed(run, RuntimeError("stale"), 0.2, fenced=True)
    assert isinstance(halt, Halt)
    assert halt.why is Why.FENCED


def test_standing_by_is_waiting() -> None:
    m: ConsumerMachine[Msg] = ConsumerMachine(
        batch=10, retry=Backoff(), resubscribe=Backoff(), parking=Parking.QUEUE)
    m.start(0.0)
    assert m.role is Role.CONNECTING
    m.standing_by(0.1)
    assert m.role is Role.WAITING
    m.subscribed(0.2)
    m.deliver(Msg(1))
    assert m.role is Role.ACTIVE
