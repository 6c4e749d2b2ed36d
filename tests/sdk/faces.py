"""Both faces of the SDK behind one synchronous test interface.

The same test body runs against ``Publisher`` (blocking) and ``AsyncPublisher`` (driven on an
event loop of its own in a background thread), so every test checks both.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Protocol, TypeVar

from sac.sdk import (
    AsyncConsumer,
    AsyncPublisher,
    Consumer,
    ConsumerSettings,
    ConsumerStats,
    Delivery,
    HistoryRecorder,
    Publisher,
    PublisherSettings,
    PublisherStats,
    Role,
)
from sac.sdk.dedup import Inbox

T = TypeVar("T")
FACES = ["blocking", "asyncio"]


class PublisherFace(Protocol):
    def start(self) -> object: ...
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


class ConsumerFace:
    """A consumer of either face, handling in the background; records what it handled."""

    def __init__(
        self,
        face: str,
        settings: ConsumerSettings,
        work: Callable[[Delivery], None] | None = None,
        recorder: HistoryRecorder | None = None,
        inbox: Inbox | None = None,
    ) -> None:
        self.face = face
        self.handled: list[str] = []
        self.roles: list[Role] = []
        self.role_times: list[tuple[float, Role]] = []
        """Each role change with when it came (``time.monotonic()``)."""
        self._work = work
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._ended = threading.Event()
        if face == "blocking":
            self.blocking: Consumer | None = Consumer(
                settings, inbox or self._handle, recorder=recorder,
                on_role_change=self._role,
            )
            self.inner: AsyncConsumer | None = None
        else:
            self.blocking = None
            self._loop = asyncio.new_event_loop()
            self._loop_thread = threading.Thread(target=self._loop.run_forever, daemon=True)
            self._loop_thread.start()
            self.inner = AsyncConsumer(
                settings, inbox or self._ahandle, recorder=recorder,
                on_role_change=self._role,
            )
        self._runner: threading.Thread | None = None

    def _role(self, role: Role) -> None:
        self.roles.append(role)
        self.role_times.append((time.monotonic(), role))

    def _handle(self, delivery: Delivery) -> None:
        if self._work is not None:
            self._work(delivery)
        with self._lock:
            self.handled.append(str(delivery.message_id))

    async def _ahandle(self, delivery: Delivery) -> None:
        if self._work is not None:
            await asyncio.to_thread(self._work, delivery)
        with self._lock:
            self.handled.append(str(delivery.message_id))

    def start(self) -> ConsumerFace:
        if self.blocking is not None:
            self.blocking.start()
            self._runner = threading.Thread(target=self._run_blocking, daemon=True)
            self._runner.start()
        else:
            assert self.inner is not None
            try:
                asyncio.run_coroutine_threadsafe(self.inner.start(), self._loop).result(60)
            except BaseException:
                self._stop_loop()
                raise
            asyncio.run_coroutine_threadsafe(self._await_end(), self._loop)
        return self

    async def _await_end(self) -> None:
        assert self.inner is not None
        try:
            await self.inner.wait()
        except Exception as exc:  # noqa: BLE001 - kept for the test to assert on
            self._error = exc
        self._ended.set()

    def ended(self, timeout: float) -> BaseException | None:
        """Wait until the consumer stopped by itself; what stopped it (None: a clean stop)."""
        if not self._ended.wait(timeout):
            raise AssertionError(f"the {self.face} consumer did not stop within {timeout} s")
        return self._error

    def _run_blocking(self) -> None:
        assert self.blocking is not None
        try:
            self.blocking.run()
        except Exception as exc:  # noqa: BLE001 - kept for the test to assert on
            self._error = exc
        self._ended.set()

    def stop(self) -> None:
        if self.blocking is not None:
            self.blocking.stop()
            if self._runner is not None:
                self._runner.join(30)
        elif not self._loop.is_closed():
            assert self.inner is not None
            try:
                asyncio.run_coroutine_threadsafe(self.inner.stop(), self._loop).result(60)
            finally:
                self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop_thread.join(10)
        self._loop.close()

    @property
    def role(self) -> Role:
        return self.blocking.role if self.blocking is not None else self._async().role

    @property
    def stats(self) -> ConsumerStats:
        return self.blocking.stats if self.blocking is not None else self._async().stats

    def _async(self) -> AsyncConsumer:
        assert self.inner is not None
        return self.inner

    def count(self) -> int:
        with self._lock:
            return len(self.handled)
