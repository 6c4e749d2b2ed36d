"""The data path of one proxy: a listener, and per accepted client a connection to the
upstream with two links (``upstream``: client to server, ``downstream``: server to client).

Each chunk read on a link goes through the link's current toxic chain (looked up per chunk,
so a toxic added or removed applies to open connections at once). Toxicity is drawn once per
connection per toxic. A removed ``timeout`` toxic closes the connections it held, as
Toxiproxy's does.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
import socket
import struct
from collections.abc import Callable
from typing import Any

from ._model import ProxySpec, Toxic, split_address
from ._pacing import bandwidth_plan, draws_toxic, latency_delay, slice_sizes

READ_SIZE = 32 * 1024
PIPELINE = 64
"""Chunks read ahead of the toxics per direction (at most ``PIPELINE * READ_SIZE`` bytes)."""
_LINGER_RESET = struct.pack("ii", 1, 0)
STOP_GRACE = 2.0
"""Seconds a stopping proxy lets its connections close cleanly before it drops them."""
ABORT_GRACE = 0.5
"""Seconds a dropped connection's tasks get to see their sockets gone before they are
cancelled."""
log = logging.getLogger(__name__)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST: linger 0, then an immediate close."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    writer.transport.abort()


async def _closed(*writers: asyncio.StreamWriter) -> None:
    """Until each of ``writers`` (closing) has closed its socket, however it ended."""
    for writer in writers:
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def _where(task: asyncio.Task[Any]) -> str:
    """The coroutine lines a suspended task waits at, outermost first."""
    coro: Any = task.get_coro()
    lines = []
    while coro is not None and getattr(coro, "cr_frame", None) is not None:
        lines.append(f"{coro.cr_frame.f_code.co_name}:{coro.cr_frame.f_lineno}")
        coro = coro.cr_await
    return " > ".join(lines) or "?"


class Connection:
    """One client connection and its upstream connection."""

    def __init__(
        self,
        toxics: Callable[[], list[Toxic]],
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        server: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        rng: random.Random,
    ) -> None:
        self._toxics = toxics
        self._client = client
        self._server = server
        self._rng = rng
        self._draws: dict[int, bool] = {}
        self._sent: dict[int, int] = {}  # limit_data: bytes forwarded, per toxic serial
        self._timers: dict[int, asyncio.Task[None]] = {}
        self._closed = False
        self._pumps: list[asyncio.Task[None]] = []

    def active(self, stream: str) -> list[Toxic]:
        chain = []
        for toxic in self._toxics():
            if toxic.stream != stream:
                continue
            if toxic.serial not in self._draws:
                self._draws[toxic.serial] = draws_toxic(toxic.toxicity, self._rng)
            if self._draws[toxic.serial]:
                chain.append(toxic)
        return chain

    def refresh(self, removed: Toxic | None = None) -> None:
        """The toxics changed: arm the timers of timeout toxics; a removed timeout toxic that
        applied to this connection closes it."""
        if removed is not None and removed.type == "timeout" and self._draws.get(removed.serial):
            self.close()
            return
        for stream in ("upstream", "downstream"):
            for toxic in self.active(stream):
                delay = toxic.attributes.get("timeout", 0)
                if toxic.type == "timeout" and delay > 0 and toxic.serial not in self._timers:
                    self._timers[toxic.serial] = asyncio.create_task(self._close_after(delay))

    async def _close_after(self, delay_ms: int) -> None:
        await asyncio.sleep(delay_ms / 1000)
        self.close()

    def waits(self) -> list[str]:
        """Where its pumps still running wait (what keeps the connection from ending)."""
        return [_where(pump) for pump in self._pumps if not pump.done()]

    def close(self) -> None:
        """Close both sides cleanly (FIN)."""
        self._shut(asyncio.StreamWriter.close)

    def reset(self) -> None:
        """Close both sides with a TCP RST, as a crashed peer does."""
        self._shut(_reset)

    def abort(self) -> None:
        """Drop both sides at once, even after a clean close began: a clean close waits to
        flush what is buffered, for ever if a peer stopped reading (a frozen process), and
        so does a pump waiting to hand it more."""
        self._closed = True
        for _, writer in (self._client, self._server):
            writer.transport.abort()
        for timer in self._timers.values():
            timer.cancel()

    def _shut(self, how: Callable[[asyncio.StreamWriter], None]) -> None:
        if self._closed:
            return
        self._closed = True
        for _, writer in (self._client, self._server):
            how(writer)
        for timer in self._timers.values():
            timer.cancel()

    async def run(self) -> None:
        self.refresh()
        try:
            self._pumps = [
                asyncio.create_task(self._pump("upstream", self._client[0], self._server[1])),
                asyncio.create_task(self._pump("downstream", self._server[0], self._client[1])),
            ]
            await asyncio.gather(*self._pumps)
        finally:
            self.close()
            await self.closed()

    async def closed(self) -> None:
        """Until both sockets are closed: a clean close still flushing to a peer that
        stopped reading is dropped after ``STOP_GRACE``. Why: a socket closes on a later
        turn of the loop, and one left open when the loop ends leaks."""
        try:
            async with asyncio.timeout(STOP_GRACE):
                await _closed(self._client[1], self._server[1])
        except TimeoutError:
            self.abort()
            await _closed(self._client[1], self._server[1])

    async def _pump(
        self, stream: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Read on, while what was read goes through the toxics: each chunk is stamped when
        it arrives, so a latency delays every chunk by its own time since arrival (as
        Toxiproxy's does), not by the delays of the chunks before it as well. The queue
        between them is bounded: a slow writer still pushes back on the sender."""
        chunks: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(PIPELINE)
        loop = asyncio.get_running_loop()

        async def read() -> None:
            try:
                while not self._closed:
                    chunk = await reader.read(READ_SIZE)
                    await chunks.put((loop.time(), chunk))
                    if not chunk:
                        return
            except OSError:
                self.close()
                await chunks.put((loop.time(), b""))

        reading = asyncio.create_task(read())
        try:
            while not self._closed:
                stamp, chunk = await chunks.get()
                chain = self.active(stream)
                if not chunk:
                    delays = [t.attributes["delay"] for t in chain if t.type == "slow_close"]
                    if delays:
                        await asyncio.sleep(max(delays) / 1000)
                    if writer.can_write_eof() and not writer.is_closing():
                        writer.write_eof()
                    return
                await self._through(chain, chunk, writer, stamp)
        except OSError:
            self.close()
        finally:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading

    async def _through(
        self, chain: list[Toxic], chunk: bytes, writer: asyncio.StreamWriter, stamp: float
    ) -> None:
        """Send ``chunk`` (arrived at loop time ``stamp``) through the toxics of ``chain`` in
        order, then to ``writer``."""
        if self._closed or not chunk:
            return
        if not chain:
            writer.write(chunk)
            await writer.drain()
            return
        toxic, rest = chain[0], chain[1:]
        attrs = toxic.attributes
        if toxic.type == "latency":
            delay = latency_delay(attrs["latency"], attrs["jitter"], self._rng)
            await asyncio.sleep(max(0.0, stamp + delay - asyncio.get_running_loop().time()))
            await self._through(rest, chunk, writer, stamp)
        elif toxic.type == "timeout":
            return  # dropped; the timer armed in refresh() closes the connection, if any
        elif toxic.type == "reset_peer":
            await asyncio.sleep(attrs["timeout"] / 1000)
            self.reset()
        elif toxic.type == "bandwidth":
            offset = 0
            for size, wait in bandwidth_plan(len(chunk), attrs["rate"]):
                await asyncio.sleep(wait)
                await self._through(rest, chunk[offset:offset + size], writer, stamp)
                offset += size
        elif toxic.type == "slicer":
            offset = 0
            sizes = slice_sizes(
                len(chunk), attrs["average_size"], attrs["size_variation"], self._rng
            )
            for index, size in enumerate(sizes):
                if index:
                    await asyncio.sleep(attrs["delay"] / 1_000_000)
                await self._through(rest, chunk[offset:offset + size], writer, stamp)
                offset += size
        elif toxic.type == "limit_data":
            sent = self._sent.get(toxic.serial, 0)
            allowed = max(0, attrs["bytes"] - sent)
            self._sent[toxic.serial] = sent + min(allowed, len(chunk))
            await self._through(rest, chunk[:allowed], writer, stamp)
            if self._sent[toxic.serial] >= attrs["bytes"]:
                if not writer.is_closing():
                    await writer.drain()
                self.close()
        else:  # noop, slow_close (acts at end of input)
            await self._through(rest, chunk, writer, stamp)


class Proxy:
    """A named proxy: its spec, its toxics in insertion order, its listener and connections."""

    def __init__(self, spec: ProxySpec, rng: random.Random) -> None:
        self.spec = spec
        self.toxics: dict[str, Toxic] = {}
        self.bound: str | None = None  # the address actually listened on, port resolved
        self._rng = rng
        self._server: asyncio.Server | None = None
        self._connections: set[Connection] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._dialing: set[asyncio.Task[None]] = set()

    @property
    def listen(self) -> str:
        return self.bound or self.spec.listen

    def toxic_list(self) -> list[Toxic]:
        return list(self.toxics.values())

    async def start(self) -> None:
        """Listen (if enabled); ``OSError`` if the address cannot be bound."""
        if not self.spec.enabled or self._server is not None:
            return
        host, port = split_address(self.listen)
        self._server = await asyncio.start_server(self._accept, host, port)
        sockname = self._server.sockets[0].getsockname()
        self.bound = f"{host}:{sockname[1]}" if ":" not in host else f"[{host}]:{sockname[1]}"

    async def stop(self) -> None:
        """Stop listening and close every open connection, and those still dialing the
        upstream (a dial to an upstream that drops SYNs can take minutes)."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._dialing):
            task.cancel()
        for connection in list(self._connections):
            connection.close()
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=STOP_GRACE)
            if pending:  # a peer that reads nothing more: its close would never finish
                for connection in list(self._connections):
                    connection.abort()
                _, stuck = await asyncio.wait(pending, timeout=ABORT_GRACE)
                if stuck:  # a toxic in the middle of its wait (a latency, a delayed close)
                    waits = collections.Counter(
                        where for connection in self._connections for where in connection.waits())
                    log.warning("fault proxy %s: %d connection(s) still busy once dropped, "
                                "cancelled; their pumps waited at %s", self.spec.name,
                                len(stuck), ", ".join(f"{where} x{count}" for where, count
                                                      in sorted(waits.items())) or "-")
                    for task in stuck:
                        task.cancel()
                    await asyncio.gather(*stuck, return_exceptions=True)

    def toxics_changed(self, removed: Toxic | None = None) -> None:
        for connection in list(self._connections):
            connection.refresh(removed)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        host, port = split_address(self.spec.upstream)
        self._tasks.add(task)
        self._dialing.add(task)
        try:
            try:
                server = await asyncio.open_connection(host, port)
            except (OSError, asyncio.CancelledError):
                writer.close()  # upstream unreachable, or the proxy stopped meanwhile
                await _closed(writer)
                return
            finally:
                self._dialing.discard(task)
            connection = Connection(self.toxic_list, (reader, writer), server, self._rng)
            self._connections.add(connection)
            try:
                await connection.run()
            finally:
                self._connections.discard(connection)
        finally:
            self._tasks.discard(task)
