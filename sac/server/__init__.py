"""Real servers on loopback (or, for RabbitMQ, in network namespaces), started and stopped by
the project itself.

``LocalCluster`` runs RabbitMQ nodes from Debian's ``rabbitmq-server`` (3.10 from the host's
Debian 12, or 4.0 from a Debian 13 root filesystem, ``_rootfs``); ``LocalZooKeeper`` runs
Debian's ``zookeeper``; ``LocalPostgres`` Debian's ``postgresql``; ``LocalSpark`` a standalone
Spark master and worker from the pip ``pyspark`` package. All four are a ``LocalServer`` (up,
down, kill, status, log_files), on one lifecycle (``_lifecycle``). Of the SDK, only its
management API client is used (``LocalCluster.management()``): one client of that API in the
project, not one per package.
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
from ._files import HOME_HELP, Credentials, default_home
from ._netns import NetnsPlan
from ._netns import run_in as run_in_namespace
from ._netns import tool as require_tool
from ._ports import PortLayout
from ._protocol import LocalServer
from ._rabbitmq_config import ClusterSpec, Node
from .postgres import LocalPostgres
from .rabbitmq import LocalCluster, amqp_ready
from .spark import LocalSpark
from .zookeeper import LocalZooKeeper

__all__ = [
    "HOME_HELP",
    "AlreadyRunningError",
    "ClusterSpec",
    "CommandError",
    "Credentials",
    "LocalCluster",
    "LocalPostgres",
    "LocalServer",
    "LocalSpark",
    "LocalZooKeeper",
    "NetnsPlan",
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
    "require_tool",
    "run_in_namespace",
]
