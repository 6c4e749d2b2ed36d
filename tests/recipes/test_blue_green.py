"""``recipes/blue_green.py``: its decisions, and the script end to end in a process of its own
against two clusters of its own (blue: two nodes of RabbitMQ 3.10, whose queue is mirrored;
green: one node of 4.0) and the session's ZooKeeper, as a user runs it; each run's history
then checked by ``sac check`` as a user checks it."""

from __future__ import annotations

import contextlib
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
from sac.history import Confirm, Publish
from sac.server import LocalCluster, LocalPostgres, LocalZooKeeper, ServerError
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
    history.record(Publish(msg="m000001", seq=1, queue="q"))
    history.offset = 1
    history.resent.add("m000001")
    history.record(Publish(msg="m000001", seq=1, queue="q"))  # sent again on green
    history.record(Publish(msg="m000002", seq=2, queue="q"))
    history.record(Confirm(msg="m000002"))
    history.close()
    events = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(e["type"], e["msg"], e.get("seq")) for e in events] == [
        ("publish", "m000001", 1), ("retransmit", "m000001", 2), ("publish", "m000002", 3),
        ("confirm", "m000002", None)]


# ---------------------------------------------------------------- the script, as users run it


@attrs.frozen
class Servers:
    blue: LocalCluster
    green: LocalCluster
    zookeeper: LocalZooKeeper


@pytest.fixture(scope="module")
def servers(sac_home: Path) -> Iterator[Servers]:
    """Blue: two nodes of 3.10 (a mirrored queue needs a second node); green: one of 4.0; a
    ZooKeeper whose 250 ms tick grants the 3 s lease the runs use (a crashed blue consumer's
    session expires that soon). Started side by side: about 20 s here rather than 30."""
    pid = os.getpid()
    started = Servers(
        LocalCluster(name=f"blue-{pid}", nodes=2, home=sac_home, rabbitmq="3.10"),
        LocalCluster(name=f"green-{pid}", nodes=1, home=sac_home, rabbitmq="4.0"),
        LocalZooKeeper(name=f"zk-bluegreen-{pid}", home=sac_home, tick_time_ms=250))
    every = (started.blue, started.green, started.zookeeper)
    with ThreadPoolExecutor(len(every)) as pool:
        ups = [pool.submit(server.up) for server in every]
    try:
        for up in ups:
            up.result()  # a server that did not start fails every test here
        yield started
    finally:
        for server in every:
            with contextlib.suppress(ServerError):  # one that never came up: the others go
                server.down()


@attrs.frozen
class Run:
    code: int
    out: str
    history: Path
    checked: int
    """``sac check``'s exit status on the run's history."""
    verdict: dict[str, Any]


RUNS = {
    "graceful": (),
    "crash": ("--crash-blue", "--restart-shovel", "--dsn"),  # the inbox on PostgreSQL
    "crash-no-inbox": ("--crash-blue", "--no-inbox"),
    # 10 ms of work (at most 100/s) against 150/s, and the switch at the 150th: blue's queue
    # holds some 30 messages beyond what its consumer prefetched when it stops
    "switch-first": ("--switch-first", "--work-ms", "10", "--handover-at", "150"),
}
"""The recipe's runs: as meant (the blue consumer stopped, or crashed), and weakened. A
``--dsn`` is followed by the session PostgreSQL's DSN; the others use a SQLite file each.
Each publishes 300 messages at 150/s; the blue consumer goes at the 80th (unless said), the
last 80 go to green."""


def blue_green(servers: Servers, history: Path, *args: str) -> Run:
    """The recipe run as a user runs it, then ``sac check`` on its history, as a user runs
    it (the Python engine)."""
    done = run_recipe(
        "blue_green", "--blue", servers.blue.name, "--green", servers.green.name,
        "--home", str(servers.blue.spec.home), "--zookeeper", servers.zookeeper.hosts,
        "--lease", "3", "--history", str(history), "--messages", "300", "--rate", "150",
        "--handover-at", "80", "--to-green", "80", "--work-ms", "5", *args)
    out = done.stdout + done.stderr
    checked = subprocess.run(
        [sys.executable, "-m", "sac", "check", str(history), "--engine", "python", "--out",
         str(history.parent / f"{history.name}-check")],
        capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    out += f"\n$ sac check\n{checked.stdout}{checked.stderr}"
    verdict_file = history / "verdict.json"
    verdict = json.loads(verdict_file.read_text()) if verdict_file.exists() else {}
    return Run(done.returncode, out, history, checked.returncode, verdict)


@pytest.fixture(scope="module")
def runs(servers: Servers, postgres: LocalPostgres,
         tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Every run at once, each with a queue, a guard group and an inbox of its own: they
    wait mostly (on the publisher's rate, the consumers' work, a lease), so side by side
    they take the time of one rather than of four."""
    base = tmp_path_factory.mktemp("blue-green")
    dsn = postgres.create_database("recipe_blue_green")
    with ThreadPoolExecutor(len(RUNS)) as pool:
        started = {name: pool.submit(blue_green, servers, base / name,
                                     *(part for arg in args
                                       for part in ((arg, dsn) if arg == "--dsn" else (arg,))))
                   for name, args in RUNS.items()}
        return {name: future.result() for name, future in started.items()}


def anomalies(verdict: dict[str, Any]) -> dict[str, int]:
    names = ("lost", "duplicated", "unexpected", "concurrent", "reordered", "malformed")
    return {name: verdict[name]["count"] for name in names if verdict[name]["count"]}


def left_behind(servers: Servers, run: Run) -> list[str]:
    """What of the run's queue, policy and shovel is still on either cluster."""
    queue = json.loads((run.history / "run.json").read_text())["queue"]
    found = []
    for side in (servers.blue, servers.green):
        api = side.management()
        found += [q.name for q in api.queues("/") if q.name.startswith(queue)]
        found += [p.name for p in api.policies("/") if p.name.startswith(queue)]
        found += [p.name for p in api.parameters("shovel", "/") if p.name.startswith(queue)]
    return found


def moved_and_switched(out: str) -> tuple[int, int]:
    """How many messages green handled that were published to blue (the shovel moved them),
    and how many the publisher sent to blue before its switch."""
    moved = re.search(r"^handled by green\s+\d+, of which (\d+) published to blue", out, re.M)
    switched = re.search(r"^4\. publisher switched to green after (\d+) message", out, re.M)
    assert moved is not None, out
    assert switched is not None, out
    return int(moved.group(1)), int(switched.group(1))


def test_a_graceful_move_keeps_one_consumer_every_message_once_and_the_order(
        runs: dict[str, Run], servers: Servers) -> None:
    run = runs["graceful"]
    print(run.out)
    assert run.code == 0, run.out
    assert "PROVED:" in run.out
    assert number(run.out, "published and confirmed") == 300
    handled_blue = number(run.out, "handled by blue (then stopped)")
    handled_green = number(run.out, "handled by green")
    assert handled_blue > 0
    assert handled_blue + handled_green == 300
    moved, to_blue = moved_and_switched(run.out)
    assert moved > 0  # crossed by the shovel
    assert 80 < to_blue <= 220  # to blue past the consumers' handover; the rest to green
    assert number(run.out, "missing") == 0
    assert number(run.out, "done twice") == 0
    assert number(run.out, "out of publish order") == 0
    assert "blue:  RabbitMQ 3.10.8" in run.out
    assert "green: RabbitMQ 4.0.5" in run.out
    assert left_behind(servers, run) == []
    assert run.checked == 0, run.out
    assert run.verdict["valid"] is True
    assert anomalies(run.verdict) == {}
    assert (run.verdict["confirmed"], run.verdict["effects"]) == (300, 300)
    assert [(h["from"], h["to"]) for h in run.verdict["handovers"]] == [
        ("consumer-blue", "consumer-green")]


def test_a_crashed_blue_consumer_s_unacked_work_and_a_restarted_shovel_s_copies_are_skipped(
        runs: dict[str, Run]) -> None:
    run = runs["crash"]
    print(run.out)
    assert run.code == 0, run.out
    assert "inbox shared by both consumers: PostgreSQL database recipe_blue_green" in run.out
    assert number(run.out, "handled by blue (then crashed)") >= 80
    assert "shovel restarted mid-move" in run.out
    # committed on blue, not acked: given back, moved, skipped by the shared inbox (and any
    # copy the restarted shovel sent)
    assert number(run.out, "duplicates skipped by the inbox") > 0
    assert number(run.out, "missing") == 0
    assert number(run.out, "done twice") == 0
    assert number(run.out, "out of publish order") == 0
    assert run.checked == 0, run.out
    assert anomalies(run.verdict) == {}
    assert (run.verdict["confirmed"], run.verdict["effects"]) == (300, 300)


def test_without_the_inbox_the_checker_finds_the_crashed_consumer_s_work_done_twice(
        runs: dict[str, Run]) -> None:
    run = runs["crash-no-inbox"]
    print(run.out)
    assert run.code == 1, run.out
    assert "NOT PROVED: nothing done twice" in run.out
    twice = number(run.out, "done twice")
    assert twice > 0
    assert run.checked == 1, run.out
    assert anomalies(run.verdict) == {"duplicated": twice}


def test_switching_the_publisher_first_the_checker_finds_the_order_broken(
        runs: dict[str, Run]) -> None:
    run = runs["switch-first"]
    print(run.out)
    assert run.code == 1, run.out
    assert "NOT PROVED: effects in the publisher's order, across the switch" in run.out
    assert number(run.out, "out of publish order") > 0
    assert number(run.out, "missing") == 0
    assert number(run.out, "done twice") == 0
    assert run.checked == 1, run.out
    found = anomalies(run.verdict)
    assert list(found) == ["reordered"]
    assert found["reordered"] <= number(run.out, "out of publish order")


def test_bad_input_is_one_line_and_status_2(servers: Servers) -> None:
    home = str(servers.blue.spec.home)
    cases = [
        (["--blue", "x", "--green", "x"], "--blue and --green name the same cluster (x)"),
        (["--blue", servers.green.name, "--green", servers.blue.name, "--home", home,
          "--zookeeper", "127.0.0.1:1"],
         f"cluster {servers.green.name!r} runs RabbitMQ 4.0, which has no mirrored queues"),
        (["--blue", servers.blue.name, "--green", servers.green.name, "--home", home],
         "no ZooKeeper: give --zookeeper HOSTS"),
        (["--blue", "nope", "--home", home], "cluster 'nope' is not running"),
    ]
    for args, said in cases:
        done = run_recipe("blue_green", *args)
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stdout == ""
        assert done.stderr.count("\n") == 1, done.stderr
        assert said in done.stderr


def test_help_names_the_steps_and_the_weakened_runs() -> None:
    done = run_recipe("blue_green", "--help")
    assert done.returncode == 0, done.stderr
    for option in ("--blue NAME", "--green NAME", "--crash-blue", "--restart-shovel",
                   "--no-inbox", "--switch-first", "--history DIR", "--dsn"):
        assert option in done.stdout
