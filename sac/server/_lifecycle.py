"""The lifecycle every local server shares: ``ServerBase``.

A server's ``up()`` is always the same three steps: refuse when it already runs, prepare
(check its packages, choose its ports, a fresh state directory, its state file written), then
boot its processes. Booting may fail halfway (a node that exits, a port that never answers,
Ctrl-C): whatever was started is stopped again, and the error names the server, so that a
failed ``up()`` leaves nothing running and says which server failed. Stopping is idempotent
(``__exit__`` after a failed ``up()``, or after ``down()``, is no error); ``down()`` says
when nothing was running, which the CLI reports.

Each server says only what is its own: what it needs installed (``_check_installed``), how
to tell that it runs (``_any_running``), prepare (``_prepare``), boot (``_boot``), and stop
every process it started (``_teardown``).
"""

from __future__ import annotations

import contextlib
import shutil
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Self

from ._errors import AlreadyRunningError, NotRunningError, ServerError
from ._files import read_json, write_json


class ServerBase(ABC):
    """Start, stop and the ``with`` block of a server whose state lives under ``dir``
    (``sac.server.LocalServer`` is what callers see of it)."""

    KIND: ClassVar[str]
    """What the server is, in messages: ``ZooKeeper``, ``PostgreSQL``..."""
    STATE_FILE: ClassVar[str]
    """The file in ``dir`` that records a run (ports, pids): there while the server runs."""

    dir: Path

    # ------------------------------------------------------------------ what each server says

    @abstractmethod
    def _check_installed(self) -> None:
        """Raise ``PackageMissingError`` unless the server's programs are there (before the
        running check: a missing package is the first thing to fix)."""

    @abstractmethod
    def _any_running(self) -> bool:
        """Whether any process of an earlier ``up()`` of this server still runs."""

    @abstractmethod
    def _prepare(self) -> None:
        """Everything before the first process: packages checked, ports chosen and free, the
        state directory fresh, the state file written. Nothing to undo when it fails."""

    @abstractmethod
    def _boot(self) -> None:
        """Start the processes and wait until the server serves (stopped on failure)."""

    @abstractmethod
    def _teardown(self) -> list[int]:
        """Stop every process of this server and forget the run's state (logs stay); the
        pids that were running. Idempotent: nothing running is no error."""

    # ------------------------------------------------------------------ lifecycle

    def describe(self) -> str:
        """The server in a message: its kind and where its state lives."""
        return f"{self.KIND} in {self.dir}"

    def up(self) -> Self:
        """A fresh server (any earlier state of the same name wiped), ready when it returns;
        on failure every process it started is stopped and the error names the server."""
        self._check_installed()
        if self._any_running():
            raise AlreadyRunningError(self._already_running())
        self._prepare()
        with self._starting():
            self._boot()
        return self

    def down(self) -> None:
        """Stop every process (gracefully, SIGKILL past a grace) and forget the run's state;
        logs stay for reading. ``NotRunningError`` when nothing was running."""
        if not self._teardown():
            raise NotRunningError(f"{self.describe()} is not running")

    def __enter__(self) -> Self:
        return self.up()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._teardown()

    # ------------------------------------------------------------------ for the servers

    def _already_running(self) -> str:
        return f"{self.describe()} is already running"

    @contextlib.contextmanager
    def _starting(self) -> Iterator[None]:
        """Whatever the block starts is stopped again when it fails, and a ``ServerError``
        from it is raised again naming this server. A failure of that stop is added to the
        error as a note, never in its place: the first failure is what to read."""
        try:
            yield
        except BaseException as exc:
            try:
                self._teardown()
            except Exception as cleanup:  # noqa: BLE001 - reported on the error that matters
                exc.add_note(f"stopping {self.describe()} after that failed too: {cleanup}")
            if isinstance(exc, ServerError) and not str(exc).startswith(self.describe()):
                named = type(exc)(f"{self.describe()} failed to start: {exc}")
                named.__notes__ = list(getattr(exc, "__notes__", []))
                raise named.with_traceback(exc.__traceback__) from exc.__cause__
            raise

    @property
    def _state_path(self) -> Path:
        return self.dir / self.STATE_FILE

    def _read_state(self) -> dict[str, Any] | None:
        return read_json(self._state_path)

    def _write_state(self, state: dict[str, Any]) -> None:
        write_json(self._state_path, state)

    def _forget_state(self) -> None:
        self._state_path.unlink(missing_ok=True)

    def _fresh_dir(self) -> None:
        """The state directory, empty: what an earlier run of this name left is wiped."""
        if self.dir.exists():
            shutil.rmtree(self.dir)
        self.dir.mkdir(parents=True)
