"""The honesty test's driver for a real cluster: each script step done with pika's
``BlockingConnection`` (no SDK engine), what the clients hear fed to the same ``Observer``
the simulator's driver feeds.

Waiting: after a step the driver pumps every connection until the step has as many events
as the simulator predicted (the wait ends on the events, bounded by a timeout), then for a
short quiet window, which catches events the model did not predict. A model that predicts
too few or too many events fails either way: too few leaves extras to the quiet window or
the next step, too many runs into the timeout.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

import attrs
import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel

from sac.sdk._wire.pika_hooks import keep_subscriptions_at_close
from sac.server import LocalCluster
from sac.sim.script import (
    Ack,
    Cancel,
    Case,
    CloseChannel,
    CloseConnection,
    Consume,
    Declare,
    Delete,
    Drop,
    Nack,
    Observer,
    Open,
    Publish,
    Qos,
    Reject,
    SetAlarm,
    Step,
)


@attrs.define(eq=False, kw_only=True)
class _Link:
    connection: pika.BlockingConnection
    channel: BlockingChannel


class RealDriver:
    def __init__(self, urls: list[str], prefix: str, observer: Observer, name: str,
                 alarm: Callable[[bool], None]) -> None:
        self.urls = urls
        self.alarm = alarm
        self.prefix = prefix
        self.observer = observer
        self.name = name
        self.links: dict[str, _Link] = {}

    # ------------------------------------------------------------------ names

    def real(self, queue: str) -> str:
        return self.prefix + queue

    def logical(self, queue: str) -> str:
        return queue.removeprefix(self.prefix)

    def _arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        mapped = dict(arguments)
        if "x-dead-letter-routing-key" in mapped:
            mapped["x-dead-letter-routing-key"] = self.real(mapped["x-dead-letter-routing-key"])
        return mapped

    # ------------------------------------------------------------------ steps

    def perform(self, step: Step) -> None:
        obs = self.observer
        if isinstance(step, Open):
            self._open(step)
            return
        if isinstance(step, SetAlarm):
            self.alarm(step.on)
            return
        link = self.links[step.link]
        ch = link.channel
        if isinstance(step, Declare):
            try:
                ok = ch.queue_declare(self.real(step.queue), passive=step.passive, durable=True,
                                      arguments=self._arguments(step.arguments))
            except pika.exceptions.ChannelClosedByBroker:
                return  # recorded by the close callback
            obs.declared(step.link, self.logical(ok.method.queue), ok.method.message_count,
                         ok.method.consumer_count)
        elif isinstance(step, Publish):
            obs.published(step.link)
            ch.basic_publish("", self.real(step.queue), step.body.encode(),
                             pika.BasicProperties(message_id=step.message_id,
                                                  headers=step.headers, delivery_mode=2),
                             mandatory=step.mandatory)
        elif isinstance(step, Qos):
            ch.basic_qos(prefetch_count=step.prefetch)
        elif isinstance(step, Consume):
            try:
                ch.basic_consume(self.real(step.queue), self._on_delivery(step.link),
                                 consumer_tag=step.tag,
                                 arguments=None if step.priority is None
                                 else {"x-priority": step.priority})
            except pika.exceptions.ChannelClosedByBroker:
                return  # recorded by the close callback
        elif isinstance(step, Cancel):
            ch.basic_cancel(step.tag)
        elif isinstance(step, Ack):
            ch.basic_ack(step.tag, multiple=step.multiple)
        elif isinstance(step, Nack):
            ch.basic_nack(step.tag, multiple=step.multiple, requeue=step.requeue)
        elif isinstance(step, Reject):
            ch.basic_reject(step.tag, requeue=step.requeue)
        elif isinstance(step, CloseChannel):
            # As the script means it (and the SDK's Release does it): no basic.cancel
            # first, which pika's close would send for each consumer.
            keep_subscriptions_at_close(ch._impl)
            ch._impl.close()
            self._pump_until(lambda: ch._impl.is_closed, 10.0, [link.connection])
        elif isinstance(step, CloseConnection):
            keep_subscriptions_at_close(ch._impl)
            link.connection._impl.close()
            self._pump_until(lambda: link.connection._impl.is_closed, 10.0, [link.connection])
        elif isinstance(step, Delete):
            ch.queue_delete(self.real(step.queue))
        elif isinstance(step, Drop):
            raise NotImplementedError("the real driver cannot drop a socket: use CloseConnection")
        else:
            raise TypeError(f"unknown step {step!r}")

    def _open(self, step: Open) -> None:
        params = pika.URLParameters(self.urls[step.node])
        params.client_properties = {"connection_name": f"{self.name}:{step.link}"}
        connection = pika.BlockingConnection(params)
        ch = connection.channel()
        name, obs = step.link, self.observer
        connection.add_on_connection_blocked_callback(lambda _c, _f: obs.blocked(name, True))
        connection.add_on_connection_unblocked_callback(
            lambda _c, _f: obs.blocked(name, False))

        def closed(_channel: Any, reason: Exception) -> None:
            if isinstance(reason, pika.exceptions.ChannelClosedByBroker):
                obs.channel_closed(name, reason.reply_code)

        ch._impl.add_on_close_callback(closed)
        ch.add_on_return_callback(
            lambda _ch, method, _props, body: obs.returned(
                name, method.reply_code, self.logical(method.routing_key), body))
        ch.add_on_cancel_callback(lambda frame: obs.cancelled(name, frame.method.consumer_tag))
        if step.confirm:
            obs.confirm_mode(name)
            ready: list[bool] = []

            def confirm(frame: Any) -> None:
                method = frame.method
                obs.confirmed(name, method.delivery_tag, method.multiple,
                              ack=isinstance(method, pika.spec.Basic.Ack))

            # The blocking face's own confirm mode waits for each publish; the channel
            # underneath reports every frame as it comes, ``multiple`` included.
            ch._impl.confirm_delivery(ack_nack_callback=confirm,
                                      callback=lambda _frame: ready.append(True))
            self._pump_until(lambda: bool(ready), 10.0, [connection])
        self.links[name] = _Link(connection=connection, channel=ch)

    def _on_delivery(self, link: str) -> Callable[..., None]:
        def deliver(_ch: Any, method: Any, properties: Any, body: bytes) -> None:
            self.observer.delivered(link, method.consumer_tag, method.delivery_tag, body,
                                    method.redelivered, properties.headers)
        return deliver

    # ------------------------------------------------------------------ waiting

    def _open_connections(self) -> list[pika.BlockingConnection]:
        return [link.connection for link in self.links.values() if link.connection.is_open]

    def _pump_until(self, done: Callable[[], bool], timeout: float,
                    connections: list[pika.BlockingConnection] | None = None) -> bool:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                return False
            open_now = connections or self._open_connections()
            if not open_now:
                return done()  # nothing can arrive
            for connection in open_now:
                connection.process_data_events(time_limit=0.005)
        return True

    def settle(self, expected: int, *, timeout: float = 5.0, quiet: float = 0.15) -> None:
        step = self.observer.steps[-1]
        self._pump_until(lambda: len(step) >= expected, timeout)
        end = time.monotonic() + quiet
        self._pump_until(lambda: time.monotonic() > end, quiet + 1.0)

    def close(self) -> None:
        """Close every client, also after the broker closed one as it was closing (3.10
        answered the cancel of a deleted queue's consumer with 541 INTERNAL_ERROR once):
        a client left open would leak its socket into a later test."""
        for link in self.links.values():
            if link.connection.is_open:
                with contextlib.suppress(pika.exceptions.AMQPError):
                    link.connection.close()


def heard_on(cluster: LocalCluster, case: Case, expected: list[list[tuple[Any, ...]]],
             name: str) -> list[list[tuple[Any, ...]]]:
    """What the clients of ``case`` hear on ``cluster``, normalised, each step waited on for
    as many events as ``expected`` (the model's prediction) says, under queue names of their
    own (deleted after)."""
    prefix = f"honesty-{os.urandom(4).hex()}-"
    observer = Observer()

    def alarm(on: bool) -> None:
        # A memory alarm on one node blocks publishers cluster-wide; 0.4 is the default.
        cluster.ctl(cluster.nodes[0], "set_vm_memory_high_watermark",
                    "0.0000001" if on else "0.4")

    driver = RealDriver(cluster.urls(), prefix, observer, name, alarm)
    try:
        for step, predicted in zip(case.steps, expected, strict=True):
            observer.next_step()
            for action in step:
                driver.perform(action)
            driver.settle(len(predicted))
    finally:
        if any(isinstance(s, SetAlarm) for step in case.steps for s in step):
            alarm(False)
        driver.close()
        with pika.BlockingConnection(pika.URLParameters(cluster.urls()[0])) as connection:
            channel = connection.channel()
            for queue in ("q", "q.dlq"):
                channel.queue_delete(prefix + queue)
    return observer.normalised()
