"""Both faces of the SDK behind one synchronous test interface.

The same test body runs against ``Publisher`` (blocking) and ``AsyncPublisher`` (driven on an
event loop of its own in a background thread), so every test checks both.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable
from typing import Any, Protocol, TypeVar

from sdk import AsyncPublisher, HistoryRecorder, Publisher, PublisherSettings, PublisherStats

T = TypeVar("T")
FACES = ["blocking", "asyncio"]


class PublisherFace(Protocol):
    def start(self) -> None: ...
    def publish(self, body: bytes, **options: Any) -> str: ...
    def publish_many(self, bodies: Iterable[bytes], **options: Any) -> list[str]: ...
    def close(self, timeout: float | None = None) -> None: ...
    @property
    def stats(self) -> PublisherStats: ...


class _AsyncPublisherFace:
    def __init__(self, settings: PublisherSettings, recorder: HistoryRecorder | None) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.inner = AsyncPublisher(settings, recorder=recorder)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(120)

    def start(self) -> None:
        try:
            self._run(self.inner.start())
        except BaseException:
            self._stop_loop()
            raise

    def publish(self, body: bytes, **options: Any) -> str:
        return self._run(self.inner.publish(body, **options))

    def publish_many(self, bodies: Iterable[bytes], **options: Any) -> list[str]:
        async def many() -> list[str]:
            futures = [await self.inner.send(b, **options) for b in bodies]
            return list(await asyncio.gather(*futures))

        return self._run(many())

    def close(self, timeout: float | None = None) -> None:
        if self._loop.is_closed():
            return
        try:
            self._run(self.inner.close(timeout))
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    @property
    def stats(self) -> PublisherStats:
        return self.inner.stats


def make_publisher(
    face: str, settings: PublisherSettings, recorder: HistoryRecorder | None = None
) -> PublisherFace:
    if face == "blocking":
        pub: PublisherFace = Publisher(settings, recorder=recorder)
    else:
        pub = _AsyncPublisherFace(settings, recorder)
    return pub
