"""Every scenario once at a small size against the session's real netns cluster of RabbitMQ
4.0 (the partition scenarios need its namespaces; the others run through its bridge), or of
3.10 for a scenario that needs it (mirrored-failover), in its real configuration (the checker
must find nothing) and in its weakened one (the checker must find what the weakening lets
through): a suite that cannot fail proves nothing.

The verdicts come from the pure-Python engine, as ``make test`` promises; the campaign in
``make demo`` checks on Spark.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sac.chaos.errors import ChaosError
from sac.chaos.partition import Partitions
from sac.chaos.runner import delete_run_queue, run
from sac.chaos.scenarios import SCENARIOS
from sac.chaos.settings import ANOMALIES, RunSettings
from sac.server import LocalCluster, LocalPostgres

MESSAGES = 200


@pytest.mark.parametrize("weakened", [False, True], ids=["default", "weakened"])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario(name: str, weakened: bool, postgres: LocalPostgres, tmp_path: Path,
                  request: pytest.FixtureRequest) -> None:
    scenario = SCENARIOS[name]
    series = scenario.rabbitmq or "4.0"
    cluster: LocalCluster = request.getfixturevalue(
        "netns_cluster4" if series == "4.0" else "netns_cluster310")
    # A federated queue: its other side is a one-node loopback cluster of the same series.
    other = (request.getfixturevalue("cluster_b" if series == "4.0" else "cluster_b310")
             if scenario.federated else None)
    for side in [cluster] if other is None else [cluster, other]:
        _reset(side)
    settings = RunSettings(name, seed=1, messages=MESSAGES,
                           weakened=scenario.weakened if weakened else None)
    # Guarded consumers: the session's short-tick ZooKeeper (a run would start its own).
    zookeeper = request.getfixturevalue("zookeeper_short_tick") if scenario.guard else None
    result = run(settings, cluster, tmp_path, postgres=postgres, zookeeper=zookeeper,
                 other=other)
    verdict = result.verdict.to_json()
    found = {a: verdict[a]["count"] for a in ANOMALIES}
    # The fault went as planned (no wait of the scenario ran out): else the verdict would
    # be blamed for a run that never did what it meant to.
    assert result.error is None, (result.error, result.path)
    # The workload ran in full through the fault: every message published was confirmed.
    assert verdict["published"] >= MESSAGES
    assert verdict["confirmed"] == verdict["published"], found
    assert verdict["lost"]["count"] == 0, found
    assert verdict["counts"]["fault_start"] >= 1
    if not weakened or not scenario.expect:
        assert verdict["valid"], (found, result.path)
        assert result.outcome == "pass"
    else:
        assert any(found[a] for a in scenario.expect), (found, result.path)
        assert result.outcome == "caught"
    # What the checker read is what the run wrote: the sink's rows, one per effect.
    effects = (result.path / "effects.jsonl").read_text().splitlines()
    assert len(effects) == verdict["effects"]
    run_json = json.loads((result.path / "run.json").read_text())
    assert run_json["scenario"] == name
    assert run_json["single_active_queues"] == [run_json["queue"]]
    # It names what it ran on, as the broker said.
    assert run_json["broker"] == {"product": "RabbitMQ",
                                  "version": "4.0.5" if series == "4.0" else "3.10.8",
                                  "metadata_store": "mnesia"}
    # Nothing of the run is left: no actor process, no proxy, no queue, no cut.
    assert not _actors_of(tmp_path)
    for side in [cluster] if other is None else [cluster, other]:
        api = side.management()
        assert run_json["queue"] not in [q.name for q in api.queues()]
        assert not [p for p in api.policies() if run_json["queue"] in p.name]
    if cluster.spec.network == "netns":
        parts = Partitions(cluster)
        assert all(parts.rules(i) == "" for i in parts.nodes)


def _reset(cluster: LocalCluster) -> None:
    """The session's clusters serve every scenario in turn: whatever an earlier one left,
    had it failed half-way (a cut, a chaos queue or policy), goes before the next run, and
    is checked gone, so that no run's verdict depends on the one before it. (A run makes
    its nodes whole itself before it starts: ``World.ensure_whole``.)"""
    if cluster.spec.network == "netns":
        parts = Partitions(cluster)
        parts.heal()
        assert all(parts.rules(i) == "" for i in parts.nodes)
    api = cluster.management()
    for queue in api.queues():
        if queue.name.startswith("chaos-") and not queue.name.endswith(".parked"):
            delete_run_queue(cluster, queue.name)  # tried again while a node recovers
    for queue in api.queues():
        if queue.name.startswith("chaos-"):
            api.delete_queue(queue.name, if_empty=False)
    for policy in api.policies():
        if policy.name.startswith("chaos-"):
            api.delete_policy(policy.name)
    assert not [q.name for q in api.queues() if q.name.startswith("chaos-")]
    assert not [p.name for p in api.policies() if p.name.startswith("chaos-")]


def test_an_interrupted_run_leaves_no_process(netns_cluster4: LocalCluster,
                                              tmp_path: Path) -> None:
    cluster = netns_cluster4
    """Ctrl-C in the middle of a run: the command ends, every actor with it."""
    command = [sys.executable, "-m", "sac.cli", "chaos", "run", "consumer-blackhole",
               "--cluster", cluster.name, "--home", str(cluster.spec.home),
               "--out", str(tmp_path)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    events = tmp_path / "consumer-blackhole-s1" / "events" / "nemesis.jsonl"
    deadline = time.monotonic() + 120
    while not (events.exists() and events.read_text()):  # the fault is in place
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run never reached its fault"
        time.sleep(0.05)
    actors = _actors_of(tmp_path)
    assert actors, "no actor process found"
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 30
    while _actors_of(tmp_path):
        assert time.monotonic() < deadline, f"actors left running: {_actors_of(tmp_path)}"
        time.sleep(0.1)


def _actors_of(run_root: Path) -> list[int]:
    """The actor processes of runs under ``run_root``: their settings are on stdin, not on
    their command line; their stderr is ``RUN/logs/<actor>.log``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
                stderr = os.readlink(entry / "fd" / "2")
            except OSError:
                continue
            if b"sac.chaos.actors" in cmdline and stderr.startswith(f"{run_root}/"):
                pids.append(int(entry.name))
    return pids


def test_cli_list_and_a_bad_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    from sac.cli import main

    assert main(["chaos", "list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in SCENARIOS)
    assert main(["chaos", "run", "earthquake", "--cluster", "none-such"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "earthquake" in err[0]
    assert "consumer-reset" in err[0]


def test_a_partition_needs_a_netns_cluster(cluster: LocalCluster, tmp_path: Path) -> None:
    with pytest.raises(ChaosError, match="netns"):
        run(RunSettings("partition-leader"), cluster, tmp_path)
    assert not list(tmp_path.iterdir())  # refused before anything was made


def test_a_scenario_that_needs_3_10_is_refused_on_4_0_in_one_line(
        netns_cluster4: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sac.cli import main

    why = ("scenario mirrored-failover needs RabbitMQ 3.10, not 4.0: RabbitMQ 4.0 removed "
           "classic queue mirroring (it refuses ha-mode policies)")
    with pytest.raises(ChaosError, match=re.escape(why)):
        run(RunSettings("mirrored-failover"), netns_cluster4, tmp_path)
    assert not list(tmp_path.iterdir())  # refused before anything was made
    # Asked for on 4.0, or on a running 4.0 cluster: refused before anything starts.
    for where in (["--rabbitmq", "4.0"],
                  ["--cluster", netns_cluster4.name, "--home", str(netns_cluster4.spec.home)]):
        argv = ["chaos", "campaign", "--scenarios", "consumer-reset,mirrored-failover",
                "--out", str(tmp_path), *where]
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        assert why in err[0]
    assert not list(tmp_path.iterdir())


def test_cli_run_prints_the_table(netns_cluster4: LocalCluster, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    from sac.cli import main

    argv = ["chaos", "run", "rolling-handover", "--weakened", "--messages", "100",
            "--engine", "python", "--cluster", netns_cluster4.name,
            "--home", str(netns_cluster4.spec.home), "--out", str(tmp_path)]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["scenario", "seed", "config"]
    assert lines[1].split()[:3] == ["rolling-handover", "1", "dedup-off"]
    assert lines[1].split()[-1] == "pass"  # a graceful handover redelivers nothing
    assert "RabbitMQ 4.0.5, metadata in mnesia" in (tmp_path / "report.html").read_text()
    assert (tmp_path / "rolling-handover-s1-dedup-off" / "verdict.json").is_file()


def test_a_degraded_link_scenario_meets_messages_in_flight_at_a_small_size(
        netns_cluster4: LocalCluster, tmp_path: Path) -> None:
    """100 messages are handled on 4.0 before bandwidth's throttle has lasted its while: the
    consumer reset that follows must still find one inside an effect (another publisher)."""
    result = run(RunSettings("bandwidth", seed=1, messages=100), netns_cluster4, tmp_path)
    assert result.error is None
    assert result.outcome == "pass"


def test_a_consumer_frozen_with_a_backlog_still_has_work_behind_its_held_batch(
        netns_cluster4: LocalCluster, postgres: LocalPostgres, tmp_path: Path) -> None:
    """Published ten times faster than the consumer handles: its prefetch is full when its
    effect is held, so nothing is delivered after the hold. The fault must still find the
    messages waiting behind the held batch (the weakened run is then caught), not give up."""
    _reset(netns_cluster4)
    settings = RunSettings("consumer-freeze", seed=1, messages=300, rate=1000,
                           weakened="fencing-off")
    result = run(settings, netns_cluster4, tmp_path, postgres=postgres)
    assert result.error is None
    assert result.outcome == "caught", result.path


def test_the_active_consumers_node_partitioned_on_khepri(
        netns_cluster_khepri: LocalCluster, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """With Khepri the isolated node is not paused (it answers nothing that needs a
    majority): the run must still hand over and lose nothing, and say what it ran on."""
    from sac.cli import main

    cluster = netns_cluster_khepri
    where = ["--cluster", cluster.name, "--home", str(cluster.spec.home)]
    # A running cluster is used as it is: asking for another store is refused.
    assert main(["chaos", "run", "consumer-reset", "--metadata-store", "mnesia", *where,
                 "--out", str(tmp_path)]) == 2
    assert "runs RabbitMQ 4.0 with khepri" in capsys.readouterr().err
    result = run(RunSettings("partition-consumer-node", seed=1, messages=MESSAGES), cluster,
                 tmp_path)
    assert result.error is None
    assert result.outcome == "pass", result.path
    run_json = json.loads((result.path / "run.json").read_text())
    assert run_json["broker"]["metadata_store"] == "khepri"
