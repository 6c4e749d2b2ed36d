"""A local RabbitMQ cluster's settings and the files it runs on, as pure functions.

``ClusterSpec`` is what to start and ``Node`` where each node lives; ``cluster_files`` gives
every config file (``rabbitmq.conf``, ``advanced.config``, ``enabled_plugins``, the Erlang
cookie, the credentials) as contents, each with the mode it must have from its first byte.
``sac/server/rabbitmq.py`` writes them and runs the processes; ``sac/server/_tls.py`` makes the
certificates that ``rabbitmq.conf`` names.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs

from sac.sdk.management import FeatureFlagInfo
from ._files import Credentials, default_home, validate_name
from ._ports import MAX_NODES
from ._rootfs import DEFAULT_SERIES, SERIES

RABBITMQ_DIR = Path("/usr/lib/rabbitmq")
PLUGINS = ("rabbitmq_management", "rabbitmq_federation", "rabbitmq_federation_management",
           "rabbitmq_shovel", "rabbitmq_shovel_management")
NETWORKS = ("loopback", "netns")
PARTITION_HANDLING = ("ignore", "pause_minority", "autoheal")
METADATA_STORES = ("mnesia", "khepri")
"""Where a cluster keeps its metadata (queues, bindings, users): Mnesia, or Khepri (Raft),
which 4.0 offers as an opt-in (the default from 4.2, the only one in 4.3)."""
KHEPRI_SERIES = ("4.0",)
KHEPRI_FLAG = "khepri_db"
ENABLE_KHEPRI = ("enable_feature_flag", "--experimental", KHEPRI_FLAG)
"""How 4.0.5 switches a formed cluster to Khepri: its CLI calls ``khepri_db`` an experimental
flag and refuses it without ``--experimental`` ("requires the user to explicitly opt-in"),
although RabbitMQ supports Khepri from 4.0 on."""
LOOPBACK = "127.0.0.1"


def _positive(_inst: object, attribute: attrs.Attribute[float], value: float) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name} must be positive, got {value!r}")


def _resolved(path: Path | str) -> Path:
    return Path(path).resolve()


def _one_of(choices: tuple[str, ...]) -> Any:
    def check(_inst: object, attribute: attrs.Attribute[str], value: str) -> None:
        if value not in choices:
            raise ValueError(
                f"{attribute.name} must be one of {', '.join(choices)}; got {value!r}")

    return check


def _series(_inst: object, attribute: attrs.Attribute[str], value: str) -> None:
    if value not in SERIES or not isinstance(value, str):
        kind = "" if isinstance(value, str) else f" (a {type(value).__name__}; give a string)"
        raise ValueError(
            f"{attribute.name} must be one of {', '.join(map(repr, SERIES))}; "
            f"got {value!r}{kind}")


def _metadata_store(inst: ClusterSpec, attribute: attrs.Attribute[str], value: str) -> None:
    _one_of(METADATA_STORES)(inst, attribute, value)
    if value == "khepri" and inst.rabbitmq not in KHEPRI_SERIES:
        raise ValueError(
            f"{attribute.name}='khepri' needs rabbitmq='4.0': RabbitMQ {inst.rabbitmq} keeps "
            "its metadata in Mnesia only")


def metadata_store_of(feature_flags: Iterable[FeatureFlagInfo]) -> str:
    """``khepri`` when the management API's feature flags list ``khepri_db`` enabled, else
    ``mnesia`` (3.10 has no such flag)."""
    enabled = any(f.name == KHEPRI_FLAG and f.state == "enabled" for f in feature_flags)
    return "khepri" if enabled else "mnesia"


def _ticktime(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 3600:
        raise ValueError(
            f"{attribute.name} must be a whole number of seconds from 1 to 3600; got {value!r}")


def _statistics_interval(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 100 <= value <= 3_600_000:
        raise ValueError(
            f"{attribute.name} must be a whole number of milliseconds from 100 to 3600000; "
            f"got {value!r}")


DEFAULT_STATISTICS_INTERVAL_MS = 1000
"""Our clusters' ``collect_statistics_interval`` and finest sample retention step (RabbitMQ's
own: 5000 ms and 5 s): how often each node refreshes what the management API reports
(consumers, the single active one), so how late a consumer may learn its role from the API
(measured here: 0.1-1.0 s after the broker's change)."""


def _default_ticktime(spec: ClusterSpec) -> int:
    # Erlang's 60 s would make a partition take a minute to be noticed; 5 s: 5 to 6.25 s.
    return 5 if spec.network == "netns" else 60


def _default_partition_handling(spec: ClusterSpec) -> str:
    # pause_minority is the production recommendation for 3 nodes; loopback keeps RabbitMQ's
    # own default, so that killing two of three nodes there does not pause the third.
    return "pause_minority" if spec.network == "netns" else "ignore"


@attrs.frozen
class ClusterSpec:
    """What to start. Ports come from ``base_port`` or, when None, from a free block.

    ``rabbitmq``: the series, ``3.10`` (the host's Debian 12 package, from ``rabbitmq_dir``)
    or ``4.0`` (Debian 13's, from a root filesystem of its own: ``sac/server/_rootfs.py``;
    ``rabbitmq_dir`` does not apply). ``network``: ``loopback`` or ``netns`` (a namespace
    per node; root). ``net_ticktime`` (seconds; Erlang's 60 on loopback, 5 in netns) bounds
    how long a cut link goes unnoticed;
    ``cluster_partition_handling`` is RabbitMQ's (``ignore`` on loopback, ``pause_minority``
    in netns; ``autoheal`` allowed). ``statistics_interval_ms`` is RabbitMQ's
    ``collect_statistics_interval`` and the management agent's finest sample step (1000 ms
    here, 5000 ms in RabbitMQ's defaults): the management API's lag. ``metadata_store``:
    ``mnesia`` (the default) or ``khepri`` (4.0 only: ``up`` enables the ``khepri_db`` feature
    flag once the cluster has formed, and returns once the broker reports it enabled).
    """

    name: str = attrs.field(default="sac", validator=validate_name)
    nodes: int = attrs.field(
        default=3,
        validator=[attrs.validators.instance_of(int), attrs.validators.ge(1),
                   attrs.validators.le(MAX_NODES)],
    )
    base_port: int | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(
            [attrs.validators.instance_of(int), attrs.validators.ge(1024),
             attrs.validators.le(65435)]
        ),
    )
    zookeeper: bool = False
    start_timeout: float = attrs.field(default=120.0, validator=_positive)
    home: Path = attrs.field(factory=default_home, converter=_resolved)
    rabbitmq_dir: Path = attrs.field(default=RABBITMQ_DIR, converter=Path)
    rabbitmq: str = attrs.field(default=DEFAULT_SERIES, validator=_series)
    network: str = attrs.field(default="loopback", validator=_one_of(NETWORKS))
    net_ticktime: int = attrs.field(
        default=attrs.Factory(_default_ticktime, takes_self=True), validator=_ticktime)
    cluster_partition_handling: str = attrs.field(
        default=attrs.Factory(_default_partition_handling, takes_self=True),
        validator=_one_of(PARTITION_HANDLING),
    )
    statistics_interval_ms: int = attrs.field(
        default=DEFAULT_STATISTICS_INTERVAL_MS, validator=_statistics_interval)
    metadata_store: str = attrs.field(default="mnesia", validator=_metadata_store)


@attrs.frozen
class Node:
    """One RabbitMQ node of a local cluster. ``index`` counts from 1."""

    index: int
    name: str
    amqp_port: int
    amqps_port: int
    management_port: int
    dist_port: int
    dir: Path
    host: str = LOOPBACK
    namespace: str | None = None

    @property
    def pid_file(self) -> Path:
        return self.dir / "rabbitmq.pid"

    @property
    def log_file(self) -> Path:
        """RabbitMQ's own log: the one to read when the node misbehaves."""
        return self.dir / "log" / f"{self.name}.log"

    @property
    def console_log(self) -> Path:
        """What the node printed on stdout/stderr (boot failures land here)."""
        return self.dir / "console.log"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.amqp_port}"


@attrs.frozen
class File:
    """One file's contents; ``mode`` (owner-only) when it holds a secret, else None."""

    text: str
    mode: int | None = None


SECRET = 0o600
COOKIE = 0o400  # Erlang refuses a cookie that others may read


def rabbitmq_conf(spec: ClusterSpec, node: Node, creds: Credentials, tls_dir: Path) -> str:
    """A node's ``rabbitmq.conf``: its listeners on its own address, TLS with the cluster's
    certificates, the one user (never guest), the cluster's partition handling."""
    return "\n".join(
        [
            f"listeners.tcp.1 = {node.host}:{node.amqp_port}",
            f"listeners.ssl.1 = {node.host}:{node.amqps_port}",
            f"ssl_options.cacertfile = {tls_dir / 'ca.pem'}",
            f"ssl_options.certfile = {tls_dir / 'server.pem'}",
            f"ssl_options.keyfile = {tls_dir / 'server.key'}",
            "ssl_options.verify = verify_none",
            "ssl_options.fail_if_no_peer_cert = false",
            f"management.tcp.ip = {node.host}",
            f"management.tcp.port = {node.management_port}",
            f"distribution.listener.interface = {node.host}",
            f"distribution.listener.port_range.min = {node.dist_port}",
            f"distribution.listener.port_range.max = {node.dist_port}",
            "loopback_users = none",
            # Created instead of guest on the first boot: guest never exists.
            f"default_user = {creds.user}",
            f"default_pass = {creds.password}",
            "default_user_tags.administrator = true",
            "default_permissions.configure = .*",
            "default_permissions.read = .*",
            "default_permissions.write = .*",
            # Consumer activity in the management API sooner than RabbitMQ's 5 s.
            f"collect_statistics_interval = {spec.statistics_interval_ms}",
            *sample_retention(spec.statistics_interval_ms),
            f"net_ticktime = {spec.net_ticktime}",
            f"cluster_partition_handling = {spec.cluster_partition_handling}",
            "log.console = false",
            "log.file.level = info",
            "",
        ]
    )


def sample_retention(statistics_interval_ms: int) -> list[str]:
    """The management agent's sample retention policies, their finest step matching the
    statistics interval (whole seconds, at least 1).

    The agent's collectors, which move what queues and channels report (consumers, the single
    active one) into what the HTTP API answers, run at the finest step of these policies,
    not at ``collect_statistics_interval``: with RabbitMQ's policies (5 s steps) the API lags
    up to 5 s whatever that interval (measured on 3.10.8: 4-5 s at 250 ms and at 1000 ms).
    The coarser steps are RabbitMQ's own."""
    step = max(1, -(-statistics_interval_ms // 1000))
    policies = {"global": ((605, step), (3660, 60), (29400, 600), (86400, 1800)),
                "basic": ((605, step), (3600, 60)),
                "detailed": ((605, step),)}
    return [f"management.sample_retention_policies.{kind}.{age} = {every}"
            for kind, steps in policies.items() for age, every in steps]


def advanced_config() -> str:
    return "[].\n"


def enabled_plugins(plugins: Sequence[str] = PLUGINS) -> str:
    return "[" + ",".join(plugins) + "].\n"


def cluster_files(
    spec: ClusterSpec,
    nodes: Sequence[Node],
    creds: Credentials,
    cookie: str,
    cluster_dir: Path,
    seen_as: Path | None = None,
) -> dict[Path, File]:
    """Every config file of a cluster, by path. The password is in ``credentials.json`` and
    in each ``rabbitmq.conf``: both are owner-only, like the cookie. ``seen_as``: where the
    nodes see ``cluster_dir`` (``/sac`` inside a root filesystem), for the paths the files
    name."""
    files = {
        cluster_dir / ".erlang.cookie": File(cookie, COOKIE),
        cluster_dir / "rabbitmq-env.conf": File(""),
        cluster_dir / "credentials.json": File(
            json.dumps({"user": creds.user, "password": creds.password}) + "\n", SECRET),
    }
    for node in nodes:
        files[node.dir / "rabbitmq.conf"] = File(
            rabbitmq_conf(spec, node, creds, (seen_as or cluster_dir) / "tls"), SECRET)
        files[node.dir / "advanced.config"] = File(advanced_config())
        files[node.dir / "enabled_plugins"] = File(enabled_plugins())
    return files
