"""``recipes/blue_green.py``: its decisions, and the script end to end in a process of its own
against two clusters of its own (blue: two nodes of RabbitMQ 3.10, whose queue is mirrored;
green: one node of 4.0) and the session's ZooKeeper, as a user runs it; each run's history
then checked by ``sac check`` as a user checks it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs
import pytest

from recipes.blue_green import (
    OnePublisherHistory,
    messages_in,
    out_of_order,
    shovel_definition,
)
from sac.server import LocalCluster, LocalZooKeeper
from tests.recipes.conftest import ROOT, number, run_recipe

# ---------------------------------------------------------------- decisions


def test_the_shovel_confirms_before_it_acks_and_declares_nothing() -> None:
    found = shovel_definition(["amqp://u:p@b1:5672/%2F", "amqp://u:p@b2:5672/%2F"],
                              "amqp://u:p@g1:5672/%2F", "orders")
    assert found["ack-mode"] == "on-confirm"
    assert found["src-uri"] == ["amqp://u:p@b1:5672/%2F", "amqp://u:p@b2:5672/%2F"]
    assert (found["src-queue"], found["dest-queue"]) == ("orders", "orders")
    assert found["src-predeclared"] is True
    assert found["dest-predeclared"] is True


def test_the_backlog_is_read_from_rabbitmqctl_s_listing() -> None:
    listing = "orders.parked\t4\norders\t0\nother orders\t7\n"
    assert messages_in(listing, "orders") == 0
    assert messages_in(listing, "other orders") == 7
    assert messages_in(listing, "missing") is None


def test_out_of_order_names_the_late_ids() -> None:
    assert out_of_order(["m000001", "m000002", "m000003"]) == []
    assert out_of_order(["m000001", "m000004", "m000002", "m000005", "m000003"]) == [
        "m000002", "m000003"]


def test_one_publisher_s_history_continues_its_order_on_green(tmp_path: Path) -> None:
    path = tmp_path / "publisher-0.jsonl"
    history = OnePublisherHistory(path, "publisher-0")
    history.record("publish", msg="m000001", seq=1, queue="q")
    history.offset = 1
    history.resent.add("m000001")
    history.record("publish", msg="m000001", seq=1, queue="q")  # sent again on green
    history.record("publish", msg="m000002", seq=2, queue="q")
    history.record("confirm", msg="m000002")
    history.close()
    events = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(e["type"], e["msg"], e.get("seq")) for e in events] == [
        ("publish", "m000001", 1), ("retransmit", "m000001", 2), ("publish", "m000002", 3),
        ("confirm", "m000002", None)]


# ---------------------------------------------------------------- the script, as users run it


@attrs.frozen
class Clusters:
    blue: LocalCluster
    green: LocalCluster


@pytest.fixture(scope="module")
def clusters(sac_home: Path) -> Iterator[Clusters]:
    """Blue: two nodes of 3.10 (a mirrored queue needs a second node); green: one of 4.0.
    Started side by side (about 18 s here rather than 25)."""
    both = Clusters(
        LocalCluster(name=f"blue-{os.getpid()}", nodes=2, home=sac_home, rabbitmq="3.10"),
        LocalCluster(name=f"green-{os.getpid()}", nodes=1, home=sac_home, rabbitmq="4.0"))
    with ThreadPoolExecutor(2) as pool:
        started = [pool.submit(cluster.up) for cluster in (both.blue, both.green)]
    try:
        for future in started:
            future.result()
        yield both
    finally:
        for cluster in (both.blue, both.green):
            cluster.down()


@attrs.frozen
class Run:
    code: int
    out: str
    history: Path


def blue_green(clusters: Clusters, zookeeper: LocalZooKeeper, history: Path,
               *args: str) -> Run:
    done = run_recipe(
        "blue_green", "--blue", clusters.blue.name, "--green", clusters.green.name,
        "--home", str(clusters.blue.spec.home), "--zookeeper", zookeeper.hosts,
        "--lease", "2", "--history", str(history),
        "--messages", "400", "--rate", "150", "--handover-at", "100", *args)
    print(done.stdout + done.stderr)
    return Run(done.returncode, done.stdout + done.stderr, history)


def check(run: Run, out: Path) -> tuple[int, dict[str, Any]]:
    """``sac check`` on the run's history, as a user runs it: its status and verdict."""
    done = subprocess.run([sys.executable, "-m", "sac", "check", str(run.history), "--engine",
                           "python", "--out", str(out)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, check=False)
    print(done.stdout + done.stderr)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads((run.history / "verdict.json").read_text())


def anomalies(verdict: dict[str, Any]) -> dict[str, int]:
    names = ("lost", "duplicated", "unexpected", "concurrent", "reordered", "malformed")
    return {name: verdict[name]["count"] for name in names if verdict[name]["count"]}


def left_behind(clusters: Clusters, run: Run) -> list[str]:
    """What of the run's queue, policy and shovel is still on either cluster."""
    queue = json.loads((run.history / "run.json").read_text())["queue"]
    found = []
    for side in (clusters.blue, clusters.green):
        found += [q["name"] for q in side.management_api("queues/%2F?columns=name")
                  if q["name"].startswith(queue)]
        found += [p["name"] for p in side.management_api("policies/%2F")
                  if p["name"].startswith(queue)]
        found += [p["name"] for p in side.management_api("parameters/shovel/%2F")
                  if p["name"].startswith(queue)]
    return found


def moved_and_switched(out: str) -> tuple[int, int]:
    """How many messages green handled that were published to blue (the shovel moved them),
    and how many the publisher sent to blue before its switch."""
    moved = re.search(r"^handled by green\s+\d+, of which (\d+) published to blue", out, re.M)
    switched = re.search(r"^4\. publisher switched to green after (\d+) message", out, re.M)
    assert moved is not None and switched is not None, out
    return int(moved.group(1)), int(switched.group(1))


def test_a_graceful_move_keeps_one_consumer_every_message_once_and_the_order(
        clusters: Clusters, zookeeper_short_tick: LocalZooKeeper, tmp_path: Path) -> None:
    run = blue_green(clusters, zookeeper_short_tick, tmp_path / "run")
    assert run.code == 0, run.out
    assert "PROVED:" in run.out
    assert number(run.out, "published and confirmed") == 400
    handled_blue = number(run.out, "handled by blue (then stopped)")
    handled_green = number(run.out, "handled by green")
    assert handled_blue > 0
    assert handled_blue + handled_green == 400
    moved, to_blue = moved_and_switched(run.out)
    assert moved > 0  # the backlog crossed by the shovel
    assert 100 < to_blue < 400  # published to blue past the handover, to green after
    assert number(run.out, "missing") == 0
    assert number(run.out, "done twice") == 0
    assert number(run.out, "out of publish order") == 0
    assert "blue:  RabbitMQ 3.10.8" in run.out
    assert "green: RabbitMQ 4.0.5" in run.out
    assert left_behind(clusters, run) == []
    code, verdict = check(run, tmp_path / "check")
    assert code == 0
    assert verdict["valid"] is True
    assert anomalies(verdict) == {}
    assert (verdict["confirmed"], verdict["effects"]) == (400, 400)
    assert [(h["from"], h["to"]) for h in verdict["handovers"]] == [
        ("consumer-blue", "consumer-green")]


def test_a_crashed_blue_consumer_s_unacked_work_is_not_done_again_on_green(
        clusters: Clusters, zookeeper_short_tick: LocalZooKeeper, tmp_path: Path) -> None:
    run = blue_green(clusters, zookeeper_short_tick, tmp_path / "run", "--crash-blue")
    assert run.code == 0, run.out
    assert number(run.out, "handled by blue (then crashed)") >= 100
    # committed on blue, not acked: given back, moved, skipped by the shared inbox
    assert number(run.out, "duplicates skipped by the inbox") > 0
    assert number(run.out, "missing") == 0
    assert number(run.out, "done twice") == 0
    assert number(run.out, "out of publish order") == 0
    code, verdict = check(run, tmp_path / "check")
    assert code == 0
    assert anomalies(verdict) == {}
    assert (verdict["confirmed"], verdict["effects"]) == (400, 400)


def test_without_the_inbox_the_checker_finds_the_crashed_consumer_s_work_done_twice(
        clusters: Clusters, zookeeper_short_tick: LocalZooKeeper, tmp_path: Path) -> None:
    run = blue_green(clusters, zookeeper_short_tick, tmp_path / "run", "--crash-blue",
                     "--no-inbox")
    assert run.code == 1, run.out
    assert "NOT PROVED: nothing done twice" in run.out
    twice = number(run.out, "done twice")
    assert twice > 0
    code, verdict = check(run, tmp_path / "check")
    assert code == 1
    assert anomalies(verdict) == {"duplicated": twice}


def test_switching_the_publisher_first_the_checker_finds_the_order_broken(
        clusters: Clusters, zookeeper_short_tick: LocalZooKeeper, tmp_path: Path) -> None:
    run = blue_green(clusters, zookeeper_short_tick, tmp_path / "run", "--switch-first")
    assert run.code == 1, run.out
    assert "NOT PROVED: effects in the publisher's order, across the switch" in run.out
    assert number(run.out, "out of publish order") > 0
    assert number(run.out, "missing") == 0
    assert number(run.out, "done twice") == 0
    code, verdict = check(run, tmp_path / "check")
    assert code == 1
    found = anomalies(verdict)
    assert list(found) == ["reordered"]
    assert found["reordered"] <= number(run.out, "out of publish order")


def test_bad_input_is_one_line_and_status_2(clusters: Clusters, tmp_path: Path) -> None:
    home = str(clusters.blue.spec.home)
    cases = [
        (["--blue", "x", "--green", "x"], "--blue and --green name the same cluster (x)"),
        (["--blue", clusters.green.name, "--green", clusters.blue.name, "--home", home,
          "--zookeeper", "127.0.0.1:1"],
         f"cluster {clusters.green.name!r} runs RabbitMQ 4.0, which has no mirrored queues"),
        (["--blue", clusters.blue.name, "--green", clusters.green.name, "--home", home],
         "no ZooKeeper: give --zookeeper HOSTS"),
        (["--blue", "nope", "--home", home], "cluster 'nope' is not running"),
    ]
    for args, said in cases:
        done = run_recipe("blue_green", *args)
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stdout == ""
        assert done.stderr.count("\n") == 1, done.stderr
        assert said in done.stderr
