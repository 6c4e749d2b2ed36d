"""Only one consumer works on a queue, and another takes over without losing a message.

Several instances of a service consume one queue, but the work must be done by one at a time,
in order, and when that one is stopped (a deploy, a scale-down) the next must carry on with
no message lost or done twice. RabbitMQ's single active consumer on a quorum queue does it,
and the SDK's defaults ask for it (``QueueSettings(name)``). The pattern is ``consume()``
below: run it in every instance; stop an instance with SIGTERM (``run()`` turns it into a
graceful stop: the running handler finishes and is acked, then the channel closes and the
prefetched messages go back to the head of the queue) and the broker makes a standby the
active one.

The proof (below the pattern): consumers ``a`` then ``b``, each in a process of its own (``a``
subscribed first is the active one, ``b`` waits); a steady publish (``--rate``, ``--messages``);
halfway (``--handover-at``) ``a`` gets SIGTERM and ``b`` takes over. Each effect is a JSON line
in the consumer's file, written before the handler returns (so before the ack). Proved when
nothing is missing, nothing is done twice, both worked, and every effect of ``a`` came before
the first of ``b``; it prints the gap from ``a``'s last effect to ``b``'s first.

    python recipes/takeover.py                   # against `sac server up` (cluster "sac")
    python recipes/takeover.py --rate 500 --messages 3000
    python recipes/takeover.py --url amqp://u:p@host1/%2F --url amqp://u:p@host2/%2F
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

# The proof's harness (finding the broker, consumer processes, the verdict): sac.recipe_kit.
# The pattern itself needs sac.sdk alone.
from sac.recipe_kit import (
    Broker,
    ConsumerProcess,
    Parser,
    Reporter,
    SteadyPublisher,
    add_broker_arguments,
    attempt,
    find_broker,
    poll,
    positive,
    run,
    sample,
    verdict,
)
from sac.sdk import (
    ConnectionSettings,
    Consumer,
    ConsumerSettings,
    Delivery,
    PublisherSettings,
    QueueSettings,
    Role,
    SacError,
)

# --------------------------------------------------------------------------- the pattern


def consume(connection: ConnectionSettings, queue: QueueSettings, effects: str,
            on_role_change: Callable[[Role], None] | None = None) -> None:
    """One instance of the service. The queue's defaults (quorum, single active consumer)
    make the broker deliver to one instance at a time; the others wait as standbys.

    The effect here is a line in the file ``effects``, written before the handler returns:
    returning acks the message. ``run()`` blocks until SIGTERM or
    Ctrl-C, then stops gracefully."""
    with open(effects, "a", encoding="utf-8") as out:

        def handle(delivery: Delivery) -> None:
            line = {"msg": delivery.message_id, "t": time.monotonic(),
                    "redelivered": delivery.redelivered}
            out.write(json.dumps(line) + "\n")
            out.flush()

        Consumer(ConsumerSettings(connection, queue), handle,
                 on_role_change=on_role_change).run()


# A publisher needs nothing special: each message confirmed, with a message id.
#
#     with Publisher(PublisherSettings(connection, queue=queue)) as publisher:
#         publisher.publish(b"order 1")


# --------------------------------------------------------------------------- the proof
# Everything below runs the pattern and measures it; none of it is needed to use it.


def consumer_process(report: Reporter, connection: ConnectionSettings, queue: QueueSettings,
                     effects: str) -> None:
    """``consume()`` in a process of its own, saying its role changes to the proof."""
    consume(connection, queue, effects,
            on_role_change=lambda role: report.say("role", role=role.value))


@attrs.frozen
class Effect:
    msg: str
    t: float
    redelivered: bool


def read_effects(path: Path) -> list[Effect]:
    """The effects a consumer wrote so far (a line still being written is left out)."""
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as lines:
        return [Effect(**json.loads(line)) for line in lines if line.endswith("\n")]


def parse_args(argv: Sequence[str] | None) -> Any:
    parser = Parser(description="Single active consumer: one consumer works, another takes "
                    "over after a graceful stop, nothing lost or done twice.")
    add_broker_arguments(parser)
    parser.add_argument("--messages", type=positive(int), default=600,
                        help="messages to publish in all (default: 600)")
    parser.add_argument("--rate", type=positive(float), default=200.0,
                        help="messages published per second (default: 200)")
    parser.add_argument("--handover-at", type=positive(int), default=None, metavar="N",
                        help="ask the active consumer to hand over once N messages are "
                        "confirmed (default: half of --messages)")
    parser.add_argument("--timeout", type=positive(float), default=60.0,
                        help="seconds allowed for each step (default: 60)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the consumers' effect files (their directory is printed)")
    args = parser.parse_args(argv)
    if args.handover_at is None:
        args.handover_at = max(1, args.messages // 2)
    if args.handover_at >= args.messages:
        parser.error(f"--handover-at ({args.handover_at}) must be below --messages "
                     f"({args.messages}): some messages must be left for the standby")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    broker = find_broker(args)
    queue = QueueSettings(f"takeover-{uuid.uuid4().hex[:8]}")
    work = Path(tempfile.mkdtemp(prefix="sac-takeover-"))
    print(f"broker: {broker.description}")
    print(f"queue {queue.name}: {queue.type}, single active consumer "
          f"{'on' if queue.single_active_consumer else 'off'} (the SDK's defaults)")
    try:
        return attempt(broker, queue, Takeover(args, broker, queue, work).run)
    finally:
        if args.keep:
            print(f"effect files kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


class Takeover:
    def __init__(self, args: Any, broker: Broker, queue: QueueSettings, work: Path) -> None:
        self.args = args
        self.broker = broker
        self.queue = queue
        self.files = {name: work / f"{name}.jsonl" for name in ("a", "b")}
        self.consumers: dict[str, ConsumerProcess] = {}

    def start(self, name: str, node: int) -> ConsumerProcess:
        conn = self.broker.connection(f"recipe-takeover-{name}", first=node)
        process = ConsumerProcess(name, consumer_process, conn, self.queue,
                                  str(self.files[name]))
        self.consumers[name] = process
        process.wait("role", self.args.timeout, role=Role.WAITING.value)
        return process

    def run(self) -> int:
        args = self.args
        publisher = SteadyPublisher(
            PublisherSettings(self.broker.connection("recipe-takeover-publisher"),
                              queue=self.queue), args.rate, args.messages)
        try:
            publisher.connect()
            a = self.start("a", node=1)
            print(f"consumer a subscribed first (pid {a.pid}): the broker makes it the "
                  "active one")
            b = self.start("b", node=2)
            print(f"consumer b subscribed (pid {b.pid}): it waits as the standby")
            print(f"publishing {args.messages} messages at {args.rate:g}/s ...")
            publisher.start()
            a.wait("role", args.timeout, role=Role.ACTIVE.value)
            if not publisher.wait_confirmed(args.handover_at, args.timeout):
                raise TimeoutError(f"{args.handover_at} messages not confirmed within "
                                   f"{args.timeout:g} s: {publisher.failed[:1]}")
            b_before = len(read_effects(self.files["b"]))
            print(f"{args.handover_at} confirmed; asking a to hand over (SIGTERM: a "
                  "graceful stop) ...")
            asked = time.monotonic()
            a_status = a.stop(args.timeout)
            stopped = time.monotonic() - asked
            print(f"a stopped in {stopped:.3f} s (exit status {a_status})")
            b.wait("role", args.timeout, role=Role.ACTIVE.value)
            print("b is the active one now")
            publisher.finish(args.timeout + args.messages / args.rate)
            confirmed = set(publisher.confirmed)
            self.drain(confirmed)
            b_status = b.stop(args.timeout)
        finally:
            with contextlib.suppress(SacError):
                publisher.close(1.0)  # a no-op after finish(); after an error, at once
            for process in self.consumers.values():
                process.kill()  # those still running after an error
        return self.verdict(confirmed, publisher.failed, asked, b_before,
                            a_status, b_status)

    def drain(self, confirmed: set[str]) -> None:
        """Until every confirmed message has an effect, or the timeout: what is still
        missing then is reported as missing."""
        poll(lambda: confirmed <= {e.msg for path in self.files.values()
                                   for e in read_effects(path)}, self.args.timeout)

    def verdict(self, confirmed: set[str], failed: list[str], asked: float, b_before: int,
                a_status: int | None, b_status: int | None) -> int:
        a = read_effects(self.files["a"])
        b = read_effects(self.files["b"])
        counts = Counter(e.msg for e in a + b)
        missing = sorted(confirmed - set(counts))
        twice = sorted(m for m, n in counts.items() if n > 1)
        gap = b[0].t - a[-1].t if a and b else None
        takeover = b[0].t - asked if b else None
        redelivered = sum(e.redelivered for e in b)
        print()
        print(f"published and confirmed       {len(confirmed)}"
              + (f" ({len(failed)} failed: {failed[0]})" if failed else ""))
        print(f"handled by a (then stopped)   {len(a)}")
        print(f"handled by b (the standby)    {len(b)}, of which {redelivered} redelivered "
              "(prefetched by a, given back at its stop)")
        print(f"missing                       {len(missing)}" + sample(missing))
        print(f"done twice                    {len(twice)}" + sample(twice))
        if gap is not None and takeover is not None:
            print(f"gap: a's last effect -> b's first effect     {gap:.3f} s")
            print(f"takeover: stop asked -> b's first effect     {takeover:.3f} s")
        checks = {
            "nothing missing": not missing and not failed,
            "nothing done twice": not twice,
            "a worked before the handover, alone": bool(a) and b_before == 0,
            "b took over": bool(b),
            "one at a time: every effect of a before the first of b": gap is not None
            and gap > 0,
            "both stopped gracefully (exit 0)": a_status == 0 and b_status == 0,
        }
        return verdict(checks, "only one consumer worked at a time; the standby took over "
                       "after a graceful stop; no message was lost or done twice.")


if __name__ == "__main__":
    raise SystemExit(run(main))
