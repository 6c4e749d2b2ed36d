"""SIGTERM and SIGINT start a graceful stop while a blocking ``run()`` owns the main thread.

A service manager stops a service with SIGTERM (systemd, Docker, Kubernetes), a terminal
with Ctrl-C (SIGINT). Without a handler SIGTERM ends the process at once: the running
handler's work may be half done and its message comes again to the next consumer. With one,
the consumer finishes the running handler, acks it, gives back what it had prefetched, and
``run()`` returns, so the program exits 0 like any stopped service.

Only the first signal is restorable: its handler puts back the handlers that were there before, so
a second signal does what it would have done without the consumer (a second Ctrl-C raises
``KeyboardInterrupt``, a second SIGTERM under the default disposition ends the process):
the usual way out of a stop that takes too long. Python runs signal handlers only in the
main thread and lets only the main thread install them, so nothing is touched elsewhere.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def stop_on_signals(
    stop: Callable[[signal.Signals], None], enabled: bool = True
) -> Iterator[bool]:
    """Inside: the first SIGTERM or SIGINT calls ``stop`` (from the signal handler: it must
    not block) and restores the previous handlers; on leaving they are restored in any case.
    Yields whether handlers were installed (not outside the main thread, not when
    ``enabled`` is false, and not over a handler installed by C code, which could not be put
    back)."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield False
        return
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    restorable = {sig: handler for sig, handler in previous.items() if handler is not None}

    def restore() -> None:
        for sig, handler in restorable.items():
            signal.signal(sig, handler)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        restore()
        stop(signal.Signals(signum))

    for sig in restorable:
        signal.signal(sig, on_signal)
    try:
        yield bool(restorable)
    finally:
        restore()
