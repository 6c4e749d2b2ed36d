"""sac.sdk._signals: SIGTERM/SIGINT start a stop once, then act as before; only in the main
thread."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from types import FrameType

import pytest

from sac.sdk._signals import stop_on_signals


@pytest.fixture
def app_handlers() -> Iterator[list[int]]:
    """Handlers of the application for SIGTERM and SIGINT, recording what they get."""
    got: list[int] = []

    def app(signum: int, _frame: FrameType | None) -> None:
        got.append(signum)

    before = {sig: signal.signal(sig, app) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield got
    for sig, handler in before.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_first_signal_stops_the_second_reaches_the_previous_handler(
    app_handlers: list[int], sig: signal.Signals
) -> None:
    stops: list[signal.Signals] = []
    with stop_on_signals(stops.append) as installed:
        assert installed
        signal.raise_signal(sig)
        assert stops == [sig]
        assert app_handlers == []
        signal.raise_signal(sig)
        assert stops == [sig]
        assert app_handlers == [sig]


def test_handlers_are_back_on_leaving_without_a_signal(app_handlers: list[int]) -> None:
    before = signal.getsignal(signal.SIGTERM)
    with stop_on_signals(lambda sig: None):
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before
    with pytest.raises(RuntimeError, match="boom"), stop_on_signals(lambda sig: None):
        raise RuntimeError("boom")
    assert signal.getsignal(signal.SIGTERM) is before


def test_opted_out_nothing_is_installed(app_handlers: list[int]) -> None:
    before = signal.getsignal(signal.SIGTERM)
    with stop_on_signals(lambda sig: None, enabled=False) as installed:
        assert not installed
        assert signal.getsignal(signal.SIGTERM) is before


def test_outside_the_main_thread_nothing_is_installed(app_handlers: list[int]) -> None:
    before = signal.getsignal(signal.SIGTERM)
    seen: list[object] = []

    def other() -> None:
        with stop_on_signals(lambda sig: None) as installed:
            seen.extend([installed, signal.getsignal(signal.SIGTERM)])

    thread = threading.Thread(target=other)
    thread.start()
    thread.join(10)
    assert seen == [False, before]
