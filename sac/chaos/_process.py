"""An actor's OS process as the runner (or a test, or a benchmark) sees it: started in a
session of its own (so a signal reaches it and nothing else), its stdout read as JSON lines
on a thread, its stderr in ``RUN/logs/<actor>.log``. Waiting is always on a condition with a
deadline.

    with ActorProcess.start(ConsumerActor(actor="a", run_dir=..., ...)) as a:
        a.expect("paused", 60, at="effect")
        a.tell("continue")
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Self

from .errors import ActorFailed, ChaosError, ChaosTimeout

if TYPE_CHECKING:
    from .actors import ConsumerActor, PublisherActor

Message = dict[str, Any]


class ActorProcess:
    def __init__(self, name: str, argv: Sequence[str], log_dir: Path,
                 settings: str | None = None, *, held: bool = False) -> None:
        """Start ``argv``; ``settings``, when given, is written as the first line of its stdin
        (an actor's JSON settings, which hold passwords: never on the command line), at once,
        or with ``held`` only on ``release()``: an actor imports everything before it reads
        its settings, so a held one is ready to work the moment it is released, and one
        that must wait for another (a second consumer, the publisher) costs no start-up."""
        self.name = name
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{name}.log"
        self._log: IO[bytes] = self.log_path.open("ab")
        self.messages: list[Message] = []
        self.role: str | None = None
        self.frozen = False
        self._cond = threading.Condition()
        self._proc = subprocess.Popen(
            list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
            start_new_session=True, text=True, bufsize=1)
        self.pid = self._proc.pid
        self._held = settings if held else None
        if settings is not None and not held:
            self.tell(settings)
        self._reader = threading.Thread(target=self._read, name=f"chaos-{name}", daemon=True)
        self._reader.start()

    @classmethod
    def start(cls, spec: ConsumerActor | PublisherActor, log_dir: Path | None = None, *,
              held: bool = False) -> Self:
        """The process of ``spec``, its stderr in ``log_dir`` (default: ``RUN/logs``); with
        ``held``, its settings wait for ``release()``."""
        logs = Path(spec.run_dir) / "logs" if log_dir is None else log_dir
        return cls(spec.actor, spec.argv(), logs, settings=spec.to_json(), held=held)

    def release(self) -> None:
        """Give a held process its settings: it connects and works from now on."""
        if self._held is None:
            raise ChaosError(f"{self.name} is not held: it had its settings at its start")
        settings, self._held = self._held, None
        self.tell(settings)

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if not isinstance(message, dict):
                continue
            with self._cond:
                self.messages.append(message)
                if message.get("event") == "role":
                    self.role = str(message.get("role"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self._proc.poll()

    def wait_for(self, what: str, predicate: Callable[[ActorProcess], bool],
                 timeout: float) -> None:
        """Until ``predicate(self)`` holds; ``ChaosTimeout`` naming ``what`` otherwise, or
        ``ActorFailed`` when the process ended first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self):
                if not self.alive and not self._reader.is_alive():
                    raise ActorFailed(self.name, f"exited ({self.returncode}) before {what}; "
                                      f"read {self.log_path}: {self.log_tail()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ChaosTimeout(f"{self.name}: no {what} within {timeout:g} s")
                self._cond.wait(min(left, 0.5))

    def expect(self, event: str, timeout: float, **fields: Any) -> Message:
        """The first message ``event`` whose ``fields`` have these values, waiting for it
        (``wait_for``)."""
        found: list[Message] = []

        def said(process: ActorProcess) -> bool:
            found[:] = [m for m in process.messages if m.get("event") == event
                        and all(m.get(k) == v for k, v in fields.items())][:1]
            return bool(found)

        self.wait_for(" ".join([event, *(f"{k}={v}" for k, v in fields.items())]), said,
                      timeout)
        return found[0]

    def last(self, event: str) -> Message | None:
        with self._cond:
            for message in reversed(self.messages):
                if message.get("event") == event:
                    return message
        return None

    def count(self, event: str) -> int:
        with self._cond:
            return sum(1 for m in self.messages if m.get("event") == event)

    def tell(self, command: str) -> None:
        assert self._proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError):
            self._proc.stdin.write(command + "\n")
            self._proc.stdin.flush()

    def signal(self, sig: signal.Signals) -> None:
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)
        if sig == signal.SIGSTOP:
            self.frozen = True
        elif sig in (signal.SIGCONT, signal.SIGKILL):
            self.frozen = False

    def stop(self, timeout: float) -> int:
        """Graceful: SIGTERM (a consumer hands over and acks what it finished), SIGKILL if
        it has not exited within ``timeout``. A frozen process is thawed first."""
        if self.frozen:
            self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return self.kill()

    def kill(self) -> int:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.frozen = False
        return self._proc.wait(10)

    def wait(self, timeout: float) -> int:
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise ChaosTimeout(f"{self.name}: still running after {timeout:g} s") from None

    def log_tail(self, lines: int = 5) -> str:
        """The last ``lines`` lines of the process's stderr, on one line."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return " | ".join(text.strip().splitlines()[-lines:])

    def close(self) -> None:
        if self.alive:
            self.kill()
        self._reader.join(5)
        for stream in (self._proc.stdin, self._proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._log.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
