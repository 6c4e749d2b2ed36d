"""``sac dlq list`` and ``Parking.messages`` on a parking queue holding what anyone could have
published to it, on the real 3-node cluster: every message is listed, a forged field shows as
invalid for its own message only, nothing a publisher wrote reaches the terminal raw, and a
listing leaves the parking queue as it found it (the order, every message there to list or
replay at once)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pika
import pytest

from sac.dlq import printable
from sac.sdk import ConnectionSettings, Parking, QueueSettings
from sac.server import LocalCluster
from tests.sdk.test_poison import declare

NOW_MS = int(time.time() * 1000)
ATTACK = "\x1b]0;pwned\x07\x1b[2J\x1b[31m\x9b31m\u202egnp.exe\r\n"
"""A window title, a cleared screen, red, a C1 CSI, a right-to-left override, a new line."""

FORGED: list[tuple[str, dict[str, object], bytes]] = [
    ("good", {"x-sac-parked-reason": "ValueError: no", "x-sac-parked-error": "ValueError",
              "x-sac-parked-from": "orders", "x-sac-parked-attempts": 4,
              "x-sac-parked-at": NOW_MS}, b"fine"),
    ("at-text", {"x-sac-parked-reason": "Poison: a", "x-sac-parked-at": "yesterday"}, b"1"),
    ("at-huge", {"x-sac-parked-reason": "Poison: b", "x-sac-parked-at": 10**18}, b"2"),
    ("at-table", {"x-sac-parked-at": {"ms": 1}, "x-sac-parked-reason": {"why": "x"},
                  "x-sac-parked-attempts": "four", "x-sac-parked-from": [1, 2]}, b"3"),
    ("at-negative", {"x-sac-parked-reason": "Poison: c", "x-sac-parked-at": -5,
                     "x-sac-parked-attempts": True}, b"4"),
    ("escape" + ATTACK, {"x-sac-parked-reason": "Poison: " + ATTACK,
                         "x-sac-parked-error": ATTACK}, ATTACK.encode()),
]


def park_raw(cluster: LocalCluster, parking: str,
             messages: list[tuple[str, dict[str, object], bytes]]) -> None:
    """Straight into the parking queue, as any client with access could."""
    with pika.BlockingConnection(pika.URLParameters(cluster.urls()[0])) as raw:
        channel = raw.channel()
        channel.confirm_delivery()
        for message_id, headers, body in messages:
            props = pika.BasicProperties(delivery_mode=2, message_id=message_id, headers=headers)
            channel.basic_publish("", parking, body, props, mandatory=True)


def test_forged_parked_messages_are_each_listed_escaped(
    cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
) -> None:
    declare(cluster, conn, queue)
    assert queue.parking_queue is not None
    park_raw(cluster, queue.parking_queue, FORGED)
    url = ",".join(cluster.urls())
    sac = [sys.executable, "-m", "sac", "dlq", "list", queue.name, "--url", url]
    listed = subprocess.run(sac, capture_output=True, timeout=60, check=False)
    assert listed.returncode == 0, listed.stderr.decode(errors="replace")
    out = listed.stdout.decode()
    assert "6 parked message(s) shown" in out
    assert not [c for c in out if not c.isprintable() and c != "\n"], "a control reached stdout"
    assert out.count("\n") == 13  # two lines a message and the count: no new line smuggled
    lines = out.splitlines()
    assert lines[0].startswith("good  ")
    assert "4 attempt(s)  ValueError: no" in lines[0]
    assert "[invalid" not in lines[0]
    assert lines[2].startswith("at-text  (invalid time)  -  Poison: a  [invalid header: parked_at]")
    assert lines[4].startswith("at-huge  (invalid time)  -  Poison: b  [invalid header: parked_at]")
    assert lines[6] == ("at-table  (invalid time)  (invalid attempts)  unknown "
                        "(x-sac-parked-reason is not text)  "
                        "[invalid header: reason, origin, attempts, parked_at]")
    assert "(invalid time)  (invalid attempts)  Poison: c" in lines[8]
    shown = printable(ATTACK)
    assert lines[10].startswith(f"escape{shown}  -  -  Poison: {shown}")
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\x1b[31m\\x9b31m\\u202egnp.exe\\r\\n" in lines[10]
    assert lines[11] == f'    {len(ATTACK.encode())} bytes: "{printable(ATTACK)}"'

    as_json = subprocess.run([*sac, "--json"], capture_output=True, timeout=60, check=False)
    assert as_json.returncode == 0, as_json.stderr.decode(errors="replace")
    assert as_json.stdout.isascii()
    rows = [json.loads(line) for line in as_json.stdout.decode().splitlines()]
    assert [row["message_id"] for row in rows] == [m[0] for m in FORGED]
    assert [row["invalid"] for row in rows] == [
        [], ["parked_at"], ["parked_at"], ["reason", "origin", "attempts", "parked_at"],
        ["attempts", "parked_at"], []]
    assert rows[0]["parked_at"].startswith(time.strftime("%Y-", time.gmtime()))
    assert rows[5]["reason"] == "Poison: " + ATTACK


def test_the_library_reads_each_forged_field_on_its_own(
    cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
) -> None:
    declare(cluster, conn, queue)
    assert queue.parking_queue is not None
    park_raw(cluster, queue.parking_queue, FORGED[:4])
    good, text, huge, table = Parking(conn).messages(queue)
    assert (good.attempts, good.origin, good.error, good.invalid) == (4, "orders", "ValueError", ())
    assert good.parked_at is not None
    assert good.parked_at.timestamp() == pytest.approx(NOW_MS / 1000)
    assert (text.parked_at, text.reason, text.invalid) == (None, "Poison: a", ("parked_at",))
    assert (huge.parked_at, huge.invalid) == (None, ("parked_at",))
    assert (table.attempts, table.origin, table.parked_at) == (None, None, None)
    assert table.headers["x-sac-parked-reason"] == {"why": "x"}  # left as it came


def _raw_order(cluster: LocalCluster, queue: str) -> list[tuple[bytes, bool, object]]:
    """Each message as a consumer would see it next: body, redelivered, x-delivery-count."""
    with pika.BlockingConnection(pika.URLParameters(cluster.urls()[0])) as raw:
        channel = raw.channel()
        seen = []
        while True:
            method, props, body = channel.basic_get(queue, auto_ack=False)
            if method is None:
                return seen
            seen.append((body, method.redelivered, (props.headers or {}).get("x-delivery-count")))


def test_a_listing_leaves_the_parking_queue_in_its_order(
    cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
) -> None:
    """RabbitMQ 3.10 puts a message given back at the end of a quorum queue: a listing of
    the first five of thirty used to move those five behind the rest. And whatever one
    listing shows, the next one, at once, shows it too."""
    declare(cluster, conn, queue)
    assert queue.parking_queue is not None
    bodies = [f"m{i:02}".encode() for i in range(30)]
    park_raw(cluster, queue.parking_queue, [(f"id{i}", {}, body) for i, body in enumerate(bodies)])
    assert [m.body for m in Parking(conn).messages(queue, limit=5)] == bodies[:5]
    assert [m.body for m in Parking(conn).messages(queue, limit=100)] == bodies
    assert [m.body for m in Parking(conn).messages(queue, limit=7)] == bodies[:7]
    seen = _raw_order(cluster, queue.parking_queue)
    assert [body for body, _, _ in seen] == bodies
    # The cost docs/guides/poison.md states: each listing marks every message redelivered and adds
    # one to its delivery count (three listings; nothing else took them).
    assert {(redelivered, count) for _, redelivered, count in seen} == {(True, 3)}


def test_a_forged_replay_count_does_not_stop_a_replay(
    cluster: LocalCluster, conn: ConnectionSettings, queue: QueueSettings,
) -> None:
    """``x-sac-replayed`` at 2**63 - 1 used to become 2**63, which AMQP cannot carry: the
    replay stopped there ("the connection was lost"), every time, and held back every
    message behind it."""
    declare(cluster, conn, queue)
    assert queue.parking_queue is not None
    counts: list[object] = [2, 2**63 - 1, "seven", -3]
    park_raw(cluster, queue.parking_queue,
             [(f"r{i}", {"x-sac-replayed": count}, b"r") for i, count in enumerate(counts)])
    assert Parking(conn).replay(queue) == 4
    with pika.BlockingConnection(pika.URLParameters(cluster.urls()[0])) as raw:
        channel = raw.channel()
        replayed = []
        for method, props, _body in channel.consume(queue.name, inactivity_timeout=10):
            assert method is not None, "a replayed message is missing"
            replayed.append((props.message_id, props.headers["x-sac-replayed"]))
            channel.basic_ack(method.delivery_tag)
            if len(replayed) == len(counts):
                break
        channel.cancel()
    assert replayed == [("r0", 3), ("r1", 1), ("r2", 1), ("r3", 1)]
    assert Parking(conn).messages(queue) == []
