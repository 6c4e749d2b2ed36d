"""The process: the HTTP API on loopback, served with asyncio streams, and ``serve()``.

``serve()`` blocks; ``start()`` is for an event loop of one's own; ``ProxyThread`` runs the
whole thing in a background thread (tests, scenarios) and knows its bound port.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType
from typing import Self

from sac.chaos.proxy._api import Api
from sac.chaos.proxy._http import HttpError, read_request, render_response
from sac.chaos.proxy._model import ApiError, is_loopback


class ApiServer:
    """The running API: ``port`` is the port actually bound."""

    def __init__(self, api: Api, server: asyncio.Server) -> None:
        self.api = api
        self._server = server
        self.port: int = server.sockets[0].getsockname()[1]

    async def aclose(self) -> None:
        self._server.close()
        await self.api.close()
        await self._server.wait_closed()


async def _session(api: Api, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            try:
                request = await read_request(reader)
            except HttpError as exc:
                error = {"error": exc.message, "status": exc.status}
                writer.write(render_response(exc.status, error, keep_alive=False))
                return
            if request is None:
                return
            try:
                status, payload = await api.handle(request.method, request.path, request.body)
            except ApiError as exc:
                status, payload = exc.status, exc.to_json()
            writer.write(render_response(status, payload, request.keep_alive))
            await writer.drain()
            if not request.keep_alive:
                return
    except (OSError, asyncio.IncompleteReadError):
        return
    finally:
        with contextlib.suppress(OSError):
            writer.close()


async def start(host: str = "127.0.0.1", port: int = 8474) -> ApiServer:
    """Start the API on the running loop; only loopback addresses are accepted."""
    if not is_loopback(host):
        raise ValueError(f"the fault proxy listens on loopback only, not {host!r}")
    api = Api()

    async def session(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _session(api, reader, writer)

    server = await asyncio.start_server(session, host, port)
    return ApiServer(api, server)


def serve(host: str = "127.0.0.1", port: int = 8474) -> None:
    """Serve the Toxiproxy API at ``host:port`` until interrupted.

    >>> serve(port=8474)  # doctest: +SKIP
    """

    async def main() -> None:
        running = await start(host, port)
        try:
            await asyncio.Event().wait()
        finally:
            await running.aclose()

    asyncio.run(main())


class ProxyThread:
    """The fault proxy in a background thread: ``with ProxyThread() as proxy: proxy.port``.

    ``port=0`` (the default) binds a free port.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, start_timeout: float = 10.0):
        self.host = host
        self._port = port
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
                self._server = await start(self.host, self._port)
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
