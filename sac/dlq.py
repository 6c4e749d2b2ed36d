"""``sac dlq list|replay QUEUE``: what is parked in the queue's parking queue, and sending it
back after a fix.

The broker is named by ``--url`` (comma-separated, one per node), else ``SAC_AMQP_URLS``,
else ``--cluster NAME`` for a cluster started with ``sac server up``. Exit status: 0 done,
1 the broker or a queue said no (one line naming it), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from sac._oneline import one_line
from sac.sdk import (
    ConnectionSettings,
    ParkedMessage,
    Parking,
    QueueSettings,
    SacError,
)

PREVIEW = 60


def add_parser(commands: Any) -> None:
    dlq = commands.add_parser("dlq", help="list or replay the messages parked for a queue")
    sub = dlq.add_subparsers(dest="action", required=True)
    listing = sub.add_parser("list", help="show parked messages (they stay parked)")
    _common(listing)
    listing.add_argument("--limit", type=int, default=100,
                         help="most messages shown (default: 100)")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    listing.set_defaults(func=_list)
    replay = sub.add_parser(
        "replay", help="move parked messages back to the queue (ids kept, each confirmed)")
    _common(replay)
    replay.add_argument("--limit", type=int, default=None,
                        help="most messages replayed (default: all parked now)")
    replay.set_defaults(func=_replay)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("queue", help="the queue whose parked messages these are")
    parser.add_argument("--parking-queue", default=None,
                        help="the parking queue, if not QUEUE.parked")
    parser.add_argument("--url", default=None,
                        help="AMQP URLs, comma-separated (default: $SAC_AMQP_URLS)")
    parser.add_argument("--cluster", default=None,
                        help="a local cluster started with 'sac server up --name NAME'")
    parser.add_argument("--home", default=None, help="its state directory root")


def _connection(args: argparse.Namespace) -> ConnectionSettings:
    if args.url:
        return ConnectionSettings.from_url(args.url, name="sac-dlq")
    if os.environ.get("SAC_AMQP_URLS") and args.cluster is None:
        return ConnectionSettings.from_env()
    if args.cluster is not None:
        from pathlib import Path

        from sac.server import LocalCluster

        home = Path(args.home) if args.home else None
        cluster = LocalCluster.attach(args.cluster, home=home)
        return ConnectionSettings.from_url(",".join(cluster.urls()), name="sac-dlq")
    raise ValueError("name the broker: --url, SAC_AMQP_URLS or --cluster")


def _queue(args: argparse.Namespace) -> QueueSettings:
    if args.parking_queue is not None:
        return QueueSettings(args.queue, parking_queue=args.parking_queue)
    return QueueSettings(args.queue)


MAX_SHOWN = 1000
"""Characters of a reason or an id shown (ours are cut at 1 000; a forged one may be any)."""


def printable(value: str, most: int = MAX_SHOWN) -> str:
    """``value`` as a terminal may show it: what ``repr`` would escape (C0 and C1 controls,
    ESC, DEL, bidirectional overrides and other format characters, line separators) is
    written as ``\\xNN``/``\\uNNNN``, a backslash as two, and past ``most`` characters
    cut with "…". What a publisher put in a message never drives the reader's terminal."""
    cut = value[:most]
    shown = "".join(c if c.isprintable() and c != "\\" else _escape(c) for c in cut)
    return shown + ("…" if len(value) > most else "")


_SHORT = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(char: str) -> str:
    code = ord(char)
    if char in _SHORT:
        return _SHORT[char]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _preview(body: bytes) -> str:
    text = body[:PREVIEW].decode("utf-8", "replace")
    return '"' + printable(text) + ("…" if len(body) > PREVIEW else "") + '"'


def _row(message: ParkedMessage) -> dict[str, Any]:
    return {
        "message_id": message.message_id,
        "reason": message.reason,
        "error": message.error,
        "from": message.origin,
        "attempts": message.attempts,
        "parked_at": message.parked_at.isoformat() if message.parked_at else None,
        "invalid": list(message.invalid),
        "undecodable": message.undecodable,
        "size": len(message.body),
        "body": message.body[:PREVIEW].decode("utf-8", "replace"),
    }


def _line(message: ParkedMessage) -> str:
    """One message for a person: each field escaped, a forged one said to be invalid."""
    if message.parked_at is not None:
        when = message.parked_at.strftime("%Y-%m-%d %H:%M:%S")
    else:
        when = "(invalid time)" if "parked_at" in message.invalid else "-"
    if message.attempts is not None:
        tries = f"{message.attempts} attempt(s)"
    else:
        tries = "(invalid attempts)" if "attempts" in message.invalid else "-"
    ident = printable(message.message_id) if message.message_id is not None else "(no id)"
    line = f"{ident}  {when}  {tries}  {printable(message.reason)}"
    if message.invalid:
        line += f"  [invalid header: {', '.join(message.invalid)}]"
    return line


@one_line("sac dlq", SacError, 1)  # the broker or a queue said no
def _list(args: argparse.Namespace) -> int:
    messages = Parking(_connection(args)).messages(_queue(args), limit=args.limit)
    for message in messages:
        if args.json:  # ASCII only: JSON escapes C1 controls and the like only then
            print(json.dumps(_row(message)))
            continue
        print(_line(message))
        print(f"    {len(message.body)} bytes: {_preview(message.body)}")
    if not args.json:
        print(f"{len(messages)} parked message(s) shown for '{printable(args.queue)}'")
    return 0


@one_line("sac dlq", SacError, 1)  # the broker or a queue said no
def _replay(args: argparse.Namespace) -> int:
    count = Parking(_connection(args)).replay(_queue(args), limit=args.limit)
    print(f"replayed {count} message(s) to {args.queue!r}")
    return 0
