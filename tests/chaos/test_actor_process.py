"""An actor process as the runner starts it, against the session's cluster: its settings (URLs
with the cluster's password) reach it on stdin, and no other local user can read them from its
command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pika
import pytest

from sac.chaos._process import ActorProcess
from sac.chaos.actors import ConsumerActor
from sac.chaos.errors import ChaosError
from sac.server import LocalCluster


def test_a_running_actor_shows_no_password_in_its_command_line(
    cluster: LocalCluster, queue_name: str, tmp_path: Path
) -> None:
    password = cluster.credentials.password
    urls = cluster.urls()
    assert all(password in url for url in urls)
    spec = ConsumerActor(actor="a", run_dir=str(tmp_path), queue=queue_name, urls=urls,
                         dedup="off", sink=f"file:{tmp_path / 'effects.jsonl'}",
                         management_urls=tuple(cluster.management_urls()))
    with ActorProcess.start(spec) as actor:
        actor.wait_for("subscription", lambda p: p.role in ("waiting", "active"), 60)
        cmdline = Path(f"/proc/{actor.pid}/cmdline").read_bytes()
        assert cmdline.split(b"\0")[1:3] == [b"-m", b"sac.chaos.actors.consumer"]
        assert password.encode() not in cmdline
        listed = subprocess.run(["ps", "-ww", "-o", "args=", "-p", str(actor.pid)],
                                capture_output=True, text=True, check=True).stdout
        assert "sac.chaos.actors.consumer" in listed
        assert password not in listed
        assert actor.stop(30) == 0


def test_an_actor_without_settings_says_so_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "sac.chaos.actors.consumer"],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode != 0
    assert done.stderr.strip() == ("ConsumerActor: expected the actor's settings as one JSON "
                                   "line on stdin, got nothing")


def test_a_held_actor_subscribes_only_once_released(
    cluster: LocalCluster, queue_name: str, tmp_path: Path
) -> None:
    """The runner starts every actor of a run at once, held, and releases them in order:
    a consumer started first but released second is the waiting one, not the active one."""
    def spec(actor: str) -> ConsumerActor:
        return ConsumerActor(actor=actor, run_dir=str(tmp_path), queue=queue_name,
                             urls=cluster.urls(), dedup="off",
                             sink=f"file:{tmp_path / 'effects.jsonl'}")

    def subscribed(process: ActorProcess) -> bool:
        return process.role in ("waiting", "active")

    with ActorProcess.start(spec("held"), held=True) as held, \
            ActorProcess.start(spec("first")) as first:
        first.wait_for("subscription", subscribed, 60)
        assert held.alive
        assert held.role is None  # said nothing: it has not even connected
        held.release()
        held.wait_for("subscription", subscribed, 60)
        with pytest.raises(ChaosError, match="not held"):
            held.release()
        # The broker names the active one with its first delivery: the one released first.
        with pika.BlockingConnection(pika.URLParameters(cluster.urls()[0])) as connection:
            connection.channel().basic_publish("", queue_name, b"m")
        first.wait_for("the delivery", lambda p: p.role == "active", 60)
        assert held.role == "waiting"
        assert held.stop(30) == 0
        assert first.stop(30) == 0
