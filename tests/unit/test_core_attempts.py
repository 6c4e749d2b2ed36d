"""sac.sdk._core.attempts: one decision for the attempts of a (re)connect."""

from __future__ import annotations

import pickle

import pytest

from sac.sdk import ConnectError
from sac.sdk._core.attempts import Attempts, Flaps
from sac.sdk._core.backoff import Backoff

NODES = ["a:5672", "b:5672", "c:5672"]


def test_a_first_connect_tries_each_node_once_from_the_start_without_waiting() -> None:
    plan = Attempts(NODES, start=1, policy=Backoff(), retry=False)
    tried = []
    while True:
        tried.append(NODES[plan.index])
        if plan.failed("refused", elapsed=0.0) is None:
            break
    assert tried == ["b:5672", "c:5672", "a:5672"]


def test_a_reconnect_goes_round_the_nodes_until_the_backoff_is_spent() -> None:
    policy = Backoff(initial=0.1, maximum=1.0, max_attempts=4, max_elapsed=None)
    plan = Attempts(NODES, start=2, policy=policy, retry=True)
    delays = []
    tried = []
    while True:
        tried.append(NODES[plan.index])
        delay = plan.failed(f"reset at step {len(tried)}", elapsed=0.0, rng=lambda: 1.0)
        if delay is None:
            break
        delays.append(delay)
    assert tried == ["c:5672", "a:5672", "b:5672", "c:5672", "a:5672"]
    assert delays == pytest.approx([0.1, 0.2, 0.4, 0.8])


def test_the_elapsed_bound_ends_a_reconnect() -> None:
    policy = Backoff(initial=0.1, maximum=1.0, max_attempts=None, max_elapsed=5.0)
    plan = Attempts(NODES, start=0, policy=policy, retry=True)
    assert plan.failed("reset", elapsed=1.0) is not None
    assert plan.failed("reset", elapsed=5.0) is None


def test_the_summary_names_every_attempt_and_folds_runs_on_one_node() -> None:
    plan = Attempts(["a:5672"], start=0, policy=Backoff(), retry=True)
    for cause in ["reset (at channel.open)"] * 3 + ["refused", "reset (at basic.qos)"]:
        plan.failed(cause, elapsed=0.0)
    text = plan.summary(elapsed=2.34)
    assert text == (
        "could not connect to any of 1 node(s) after 5 attempt(s) in 2.3 s: "
        "attempts 1-3, a:5672: reset (at channel.open); attempt 4, a:5672: refused; "
        "attempt 5, a:5672: reset (at basic.qos)"
    )
    assert plan.causes()[0] == "attempt 1, a:5672: reset (at channel.open)"
    assert len(plan.causes()) == 5


def test_the_error_carries_the_attempts_and_survives_pickling() -> None:
    plan = Attempts(NODES, start=0, policy=Backoff(), retry=False)
    for _ in NODES:
        plan.failed("refused", elapsed=0.0)
    error = ConnectError(plan.summary(0.5), plan.causes())
    again = pickle.loads(pickle.dumps(error))
    assert str(again) == str(error)
    assert again.attempts == error.attempts
    assert [c.split(",")[1].strip() for c in again.attempts] == [
        "a:5672: refused", "b:5672: refused", "c:5672: refused"]


def test_no_node_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one node"):
        Attempts([], start=0, policy=Backoff(), retry=False)


def test_links_that_die_at_once_in_a_row_are_reconnected_under_the_backoff() -> None:
    """A reconnect that "succeeds" but whose link dies at once must not be made again at
    once: the n-th such loss in a row waits up to the backoff's n-th cap (full jitter)."""
    policy = Backoff(initial=0.1, maximum=2.0, max_attempts=3, max_elapsed=1.0)
    flaps = Flaps(policy, steady=4.0)
    assert flaps.lost(60.0, rng=lambda: 1.0) == 0.0  # a working link lost: at once
    waits = [flaps.lost(0.03, rng=lambda: 1.0) for _ in range(8)]
    assert waits == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0]  # capped, never given up
    assert flaps.lost(0.03, rng=lambda: 0.25) == 0.5  # jittered below the cap
    assert flaps.lost(4.0, rng=lambda: 1.0) == 0.0  # one steady link ends the streak
    assert flaps.lost(0.03, rng=lambda: 1.0) == 0.1
