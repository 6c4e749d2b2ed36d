"""Errors raised by ``sac.server``.

Every error says what went wrong and what to read or do next, so that an operator who sees
only the message can act on it::

    ServerError
    ├── PackageMissingError   a Debian package we need is not installed
    ├── PortBusyError         a port we were told (or chose) to use is taken
    ├── StartTimeoutError     a server did not answer within its timeout (names its log)
    ├── ServerExitedError     a server process died while starting (names its log)
    ├── CommandError          a RabbitMQ CLI call failed (names the command, not secrets)
    ├── NotRunningError       an operation on a cluster/node that is not running
    └── AlreadyRunningError   ``up`` of a cluster that is already up
"""

from __future__ import annotations


class ServerError(Exception):
    """Base of every error raised while managing local servers."""


class PackageMissingError(ServerError):
    """A program that a Debian package provides is missing."""


class PortBusyError(ServerError):
    """A port is already bound by another process."""


class StartTimeoutError(ServerError):
    """A server did not become ready within its timeout."""


class ServerExitedError(ServerError):
    """A server process exited while we waited for it to become ready."""


class CommandError(ServerError):
    """A management command (rabbitmqctl and friends) failed."""


class NotRunningError(ServerError):
    """The cluster or node is not running."""


class AlreadyRunningError(ServerError):
    """The cluster is already running."""
