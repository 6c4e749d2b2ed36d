"""What every local server does, whatever it runs: ``LocalServer``.

``LocalCluster`` (RabbitMQ), ``LocalZooKeeper``, ``LocalPostgres`` and ``LocalSpark`` implement
it, so that fixtures, the CLI and the chaos suite start, stop, crash and inspect any of them
the same way; ``up``, ``down`` and the ``with`` block are one code for all four
(``_lifecycle.ServerBase``). Each adds what only it has (a cluster kills or starts one node:
``kill(2)``, ``start(2)``; PostgreSQL boots again on its data: ``start()``).
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self, runtime_checkable


@runtime_checkable
class LocalServer(Protocol):
    """A server started and stopped by us, its state, data and logs under ``dir``.

    - ``up()``: a fresh server (any earlier state of the same name wiped), ready when it
      returns; on failure whatever it started is stopped. ``AlreadyRunningError`` if running.
    - ``down()``: stop every process (gracefully, SIGKILL past a grace) and forget the run's
      state; logs stay for reading. ``NotRunningError`` if nothing was running.
    - ``kill()``: SIGKILL every process at once, as a crash would; data and state stay.
      ``NotRunningError`` if nothing was running.
    - ``status()``: JSON-ready and never a secret; at least ``name``, ``dir``, ``running``
      (bool) and ``logs`` (the paths of ``log_files()``).
    - ``log_files()``: the logs that exist, the most useful first.
    - ``with``: ``up()`` on entry; on exit, every process stopped (a server already down
      is no error).
    """

    @property
    def name(self) -> str: ...

    @property
    def dir(self) -> Path: ...

    def up(self) -> Self: ...

    def down(self) -> None: ...

    def kill(self) -> None: ...

    def status(self) -> dict[str, Any]: ...

    def log_files(self) -> list[Path]: ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


if TYPE_CHECKING:
    from .postgres import LocalPostgres
    from .rabbitmq import LocalCluster
    from .spark import LocalSpark
    from .zookeeper import LocalZooKeeper

    def _every_server_is_one(
        cluster: LocalCluster, zk: LocalZooKeeper, pg: LocalPostgres, spark: LocalSpark
    ) -> list[LocalServer]:
        """Never run: mypy checks each class against the protocol, signatures included."""
        return [cluster, zk, pg, spark]
