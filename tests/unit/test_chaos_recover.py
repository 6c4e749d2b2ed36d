"""Which nodes a chaos run restarts after a heal, from what each node lists as running."""

from __future__ import annotations

from sac.chaos.world import kept_split, outcasts


def test_a_node_the_others_list_as_down_is_restarted_even_if_it_serves() -> None:
    # Seen on 4.0.5 with Mnesia: node 2 serves alone and thinks itself fine; 1 and 3 agree.
    assert outcasts({1: {1, 3}, 2: {1, 2, 3}, 3: {1, 3}}) == [2]
    assert outcasts({1: {1, 3}, 2: {2}, 3: {1, 3}}) == [2]


def test_a_whole_cluster_or_one_dissenting_view_restarts_nothing() -> None:
    assert outcasts({1: {1, 2, 3}, 2: {1, 2, 3}, 3: {1, 2, 3}}) == []
    assert outcasts({1: {1, 2, 3}, 2: {2}, 3: {1, 2, 3}}) == []
    # A node that does not answer has no say (whether it serves is checked on its own):
    # one view of three is no majority.
    assert outcasts({1: {1, 3}, 2: None, 3: None}) == []
    assert outcasts({1: None, 2: None, 3: None}) == []


def test_an_outcast_that_serves_is_kept_split_one_that_does_not_may_be_rejoining() -> None:
    # Node 2 never paused: it serves, unseen by 1 and 3. Restarted without the long wait.
    views = {1: {1, 3}, 2: {1, 2, 3}, 3: {1, 3}}
    assert kept_split(views, serving={1, 2, 3}) == [2]
    # Node 2 paused and is starting again: it serves only once it has rejoined.
    assert kept_split({1: {1, 3}, 2: None, 3: {1, 3}}, serving={1, 3}) == []
    assert kept_split({1: {1, 2, 3}, 2: {1, 2, 3}, 3: {1, 2, 3}}, serving={1, 2, 3}) == []
