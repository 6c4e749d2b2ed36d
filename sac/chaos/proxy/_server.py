"""The process: the HTTP API on loopback, served with asyncio streams, and ``serve()``.

``serve()`` blocks; ``start()`` is for an event loop of one's own; ``ProxyThread`` runs the
whole thing in a background thread (tests, scenarios) and knows its bound port.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Self

from ._api import Api
from ._http import (
    MAX_HEAD,
    ApiLimits,
    HttpError,
    Request,
    read_request,
    refusal,
    render_error,
    render_response,
)
from ._model import ApiError, is_loopback

DEFAULT_LIMITS = ApiLimits()
log = logging.getLogger(__name__)


class ApiServer:
    """The running API: ``port`` is the port actually bound."""

    def __init__(self, api: Api, server: asyncio.Server,
                 sessions: set[asyncio.Task[None]]) -> None:
        self.api = api
        self._server = server
        self._sessions = sessions
        self.port: int = server.sockets[0].getsockname()[1]

    async def aclose(self) -> None:
        """Stop listening, end the open sessions (a keep-alive client may hold one), stop
        every proxy: each socket closed before this returns."""
        self._server.close()
        for task in list(self._sessions):
            task.cancel()
        await asyncio.gather(*self._sessions, return_exceptions=True)
        await self.api.close()
        await self._server.wait_closed()


async def _answer(writer: asyncio.StreamWriter, response: bytes, limits: ApiLimits) -> None:
    writer.write(response)
    async with asyncio.timeout(limits.request_timeout):  # a client that never reads
        await writer.drain()


async def _next_request(reader: asyncio.StreamReader, limits: ApiLimits) -> Request | None:
    """The next request, or None when the client closed or stayed silent for
    ``idle_timeout`` between requests; HttpError 408 when it began one and did not
    finish it within ``request_timeout``."""
    try:
        async with asyncio.timeout(limits.idle_timeout):
            first = await reader.read(1)
    except TimeoutError:
        return None
    if not first:
        return None
    try:
        async with asyncio.timeout(limits.request_timeout):
            return await read_request(reader, first, limits.max_body)
    except TimeoutError:
        raise HttpError(408, f"the request did not arrive within {limits.request_timeout:g} s"
                        ) from None


async def _session(api: Api, limits: ApiLimits, reader: asyncio.StreamReader,
                   writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            try:
                request = await _next_request(reader, limits)
                if request is None:
                    return
                error = refusal(request)
                if error is not None:
                    raise error
            except HttpError as exc:
                await _answer(writer, render_error(exc), limits)
                await _linger(reader, writer, limits)
                return
            try:
                status, payload = await api.handle(request.method, request.path, request.body)
            except ApiError as exc:
                status, payload = exc.status, exc.to_json()
            except Exception as exc:  # a bug of ours: the client hears of it, the API lives on
                log.exception("fault proxy API: %s %s failed", request.method, request.path)
                status, payload = 500, {"error": f"internal error: {type(exc).__name__}",
                                        "status": 500}
            await _answer(writer, render_response(status, payload, request.keep_alive), limits)
            if not request.keep_alive:
                return
    except TimeoutError:  # an answer not taken: close() would wait to flush it for ever
        writer.transport.abort()
    except (OSError, asyncio.IncompleteReadError):
        return
    finally:
        with contextlib.suppress(OSError):
            writer.close()
            await writer.wait_closed()


LINGER = 2.0


async def _turn_away(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     limits: ApiLimits) -> None:
    """503 to a connection over the cap. What the client sends meanwhile is read and
    dropped (for at most ``LINGER`` s) so that closing does not reset the connection
    before the client has read why."""
    error = HttpError(503, f"the fault proxy API serves {limits.max_connections} connections "
                           "at once; try again when one has closed")
    try:
        await _answer(writer, render_error(error), limits)
    except TimeoutError:
        writer.transport.abort()
    except OSError:
        pass
    else:
        await _linger(reader, writer, limits)
    with contextlib.suppress(OSError):
        writer.close()
        await writer.wait_closed()


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                  limits: ApiLimits) -> None:
    """After an error answer, end our side and read what the client still sends (for at
    most ``LINGER`` s): closing with unread bytes would reset the connection, and a reset
    can discard the answer before the client has read why (a client trickling a request
    byte by byte is still sending when its 408 goes out)."""
    try:
        writer.write_eof()
        async with asyncio.timeout(min(LINGER, limits.request_timeout)):
            while await reader.read(65536):
                pass
    except TimeoutError:
        writer.transport.abort()
    except OSError:
        pass


async def start(host: str = "127.0.0.1", port: int = 8474,
                limits: ApiLimits = DEFAULT_LIMITS) -> ApiServer:
    """Start the API on the running loop; only loopback addresses are accepted."""
    if not is_loopback(host):
        raise ValueError(f"the fault proxy listens on loopback only, not {host!r}")
    api = Api()
    open_sessions = 0
    tasks: set[asyncio.Task[None]] = set()

    async def session(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal open_sessions
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        try:
            if open_sessions >= limits.max_connections:
                await _turn_away(reader, writer, limits)
                return
            open_sessions += 1
            try:
                await _session(api, limits, reader, writer)
            finally:
                open_sessions -= 1
        finally:
            tasks.discard(task)

    server = await asyncio.start_server(session, host, port, limit=MAX_HEAD)
    return ApiServer(api, server, tasks)


def serve(host: str = "127.0.0.1", port: int = 8474, limits: ApiLimits = DEFAULT_LIMITS,
          ready: Callable[[int], None] | None = None) -> None:
    """Serve the Toxiproxy API at ``host:port`` until interrupted; ``ready(port)`` is
    called once the port (a free one for 0) is bound.

    >>> serve(port=8474)  # doctest: +SKIP
    """

    async def main() -> None:
        running = await start(host, port, limits)
        try:
            if ready is not None:
                ready(running.port)
            await asyncio.Event().wait()
        finally:
            await running.aclose()

    asyncio.run(main())


class ProxyThread:
    """The fault proxy in a background thread: ``with ProxyThread() as proxy: proxy.port``.

    ``port=0`` (the default) binds a free port.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, start_timeout: float = 10.0,
                 limits: ApiLimits = DEFAULT_LIMITS):
        self.host = host
        self._port = port
        self._limits = limits
        self._timeout = start_timeout
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._server: ApiServer | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="sac-fault-proxy", daemon=True)

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the proxy thread is not running")
        return self._server.port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            try:
                self._server = await start(self.host, self._port, self._limits)
            except (OSError, ValueError) as exc:
                self._error = exc
                self._ready.set()
                return
            self._ready.set()
            await self._stop.wait()
            await self._server.aclose()

        asyncio.run(main())

    def start(self) -> Self:
        self._thread.start()
        if not self._ready.wait(self._timeout):
            raise RuntimeError(f"the fault proxy did not start within {self._timeout} s")
        if self._error is not None:
            raise RuntimeError(f"the fault proxy could not start: {self._error}") from self._error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(self._timeout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
