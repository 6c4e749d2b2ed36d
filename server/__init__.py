"""Real servers on loopback, started and stopped by the project itself.

``LocalCluster`` runs RabbitMQ nodes from Debian's ``rabbitmq-server``; ``LocalZooKeeper`` runs
Debian's ``zookeeper``. Nothing here knows about the SDK.
"""

from ._errors import (
    AlreadyRunningError,
    CommandError,
    NotRunningError,
    PackageMissingError,
    PortBusyError,
    ServerError,
    ServerExitedError,
    StartTimeoutError,
)
from ._files import Credentials, default_home
from ._ports import PortLayout
from .postgres import LocalPostgres
from .rabbitmq import ClusterSpec, LocalCluster, Node, amqp_ready
from .zookeeper import LocalZooKeeper

__all__ = [
    "AlreadyRunningError",
    "ClusterSpec",
    "CommandError",
    "Credentials",
    "LocalCluster",
    "LocalPostgres",
    "LocalZooKeeper",
    "Node",
    "NotRunningError",
    "PackageMissingError",
    "PortBusyError",
    "PortLayout",
    "ServerError",
    "ServerExitedError",
    "StartTimeoutError",
    "amqp_ready",
    "default_home",
]
