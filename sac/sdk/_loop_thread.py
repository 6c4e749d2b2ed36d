"""The blocking faces' engine room: a private asyncio loop on a daemon thread.

The blocking ``Publisher`` and ``Consumer`` run the asyncio implementation here, so both faces
share one implementation, and the connection's heartbeats keep flowing while the caller's
thread is busy in a long handler.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from ._errors import ClosedError

T = TypeVar("T")


def to_concurrent(inner: asyncio.Future[T]) -> concurrent.futures.Future[T]:
    """A thread-safe future that settles as ``inner`` does (call on ``inner``'s loop)."""
    outer: concurrent.futures.Future[T] = concurrent.futures.Future()

    def copy(done: asyncio.Future[T]) -> None:
        if done.cancelled():
            outer.cancel()
        elif (exc := done.exception()) is not None:
            outer.set_exception(exc)
        else:
            outer.set_result(done.result())

    inner.add_done_callback(copy)
    return outer


class LoopThread:
    def __init__(self, name: str) -> None:
        self.name = name
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self._thread is not None:
            raise ClosedError(f"{self.name} was already started")
        ready = threading.Event()
        loop = asyncio.new_event_loop()
        self.loop = loop

        def main() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()
            # Let cancelled tasks finish their cleanup before the loop goes away.
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=main, name=self.name, daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError(f"{self.name}: event loop thread did not start")

    def launch(self, coro: Coroutine[Any, Any, T]) -> T:
        """Start the thread and run ``coro`` on it; if that fails, the thread stops again."""
        self.start()
        try:
            return self.run(coro)
        except BaseException:
            self.stop()
            raise

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result in the calling thread."""
        if self.loop is None or not self.running:
            coro.close()
            raise ClosedError(f"{self.name} is not running")
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError(f"{self.name}: blocking call from inside its own loop")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call_soon(self, callback: Any, *args: Any) -> None:
        if self.loop is not None and self.running:
            self.loop.call_soon_threadsafe(callback, *args)

    def stop(self, timeout: float = 10.0) -> None:
        if self.loop is not None and self.running:
            self.loop.call_soon_threadsafe(self.loop.stop)
        if self._thread is not None:
            self._thread.join(timeout)
