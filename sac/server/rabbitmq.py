"""Local RabbitMQ clusters from Debian's ``rabbitmq-server``, without systemd.

We call the scripts in ``/usr/lib/rabbitmq/bin`` directly: the ``/usr/sbin`` wrappers switch
to the ``rabbitmq`` user and ``/var/lib/rabbitmq``. Each cluster gets its own epmd port, its own
Erlang cookie and its own CLI distribution ports, so several clusters run side by side and
``down`` of one never touches another.

Two series: ``rabbitmq="4.0"`` (the default) runs Debian 13's 4.0.5 from a root filesystem
built once and cached, each process in a private mount namespace and ``chroot`` (see
``sac/server/_rootfs.py``); ``rabbitmq="3.10"`` runs the host's Debian 12 package, with the same
environment, ports and config keys (inside the tree the cluster's directory is ``/sac``).
A 4.0 cluster keeps its metadata in Mnesia, or (``metadata_store="khepri"``) in Khepri.

Two networks: ``loopback`` (the default) runs every node on 127.0.0.1; ``netns`` (root only)
runs node i in a network namespace of its own at 198.18.X.i, joined by a bridge, so that the
links between nodes can be cut (``sac.chaos.partition``). See ``sac/server/_netns.py``.

Example::

    with LocalCluster(name="demo", nodes=3) as cluster:
        urls = cluster.urls()          # with credentials, for code
        print(cluster.display_urls())  # password masked, for people
"""

from __future__ import annotations

import concurrent.futures
import os
import secrets
import shutil
import socket
import subprocess
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any, overload

import attrs

from sac.sdk.management import Management, ManagementError, ManagementSettings
from . import _netns, _proc, _rootfs, _tls
from ._errors import (
    AlreadyRunningError,
    CommandError,
    NotRunningError,
    PackageMissingError,
    ServerError,
    ServerExitedError,
    StartTimeoutError,
)
from ._files import (
    Credentials,
    default_home,
    read_json,
    tail,
    write_secret,
)
from ._lifecycle import ServerBase
from ._netns import NetnsPlan
from ._ports import PortLayout, allocate_base, check_free
from ._rabbitmq_config import (
    ENABLE_KHEPRI,
    LOOPBACK,
    RABBITMQ_DIR,
    ClusterSpec,
    Node,
    cluster_files,
    metadata_store_of,
)

AMQP_HEADER = b"AMQP\x00\x00\x09\x01"
_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
SLEEPING_SCHEDULERS = "+sbwt none +sbwtdcpu none +sbwtdio none"


def amqp_ready(port: int, timeout: float = 1.0, host: str = LOOPBACK) -> bool:
    """True if host:port answers the AMQP 0-9-1 header with a method frame."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(AMQP_HEADER)
            data = sock.recv(8)
    except OSError:
        return False
    return len(data) >= 1 and data[0] == 1


class LocalCluster(ServerBase):
    """A RabbitMQ cluster of ``nodes`` nodes, started and stopped by us: on 127.0.0.1, or
    (``network="netns"``) each node in a network namespace of its own.

    ``up()`` wipes any earlier state of the same name and boots a fresh cluster; ``attach()``
    finds a running one again (as the CLI does between calls).
    """

    KIND = "RabbitMQ cluster"
    STATE_FILE = "state.json"

    def __init__(
        self,
        name: str = "sac",
        nodes: int = 3,
        *,
        base_port: int | None = None,
        zookeeper: bool = False,
        start_timeout: float = 120.0,
        home: Path | str | None = None,
        rabbitmq_dir: Path | str = RABBITMQ_DIR,
        network: str = "loopback",
        rabbitmq: str = _rootfs.DEFAULT_SERIES,
        net_ticktime: int | None = None,
        cluster_partition_handling: str | None = None,
        statistics_interval_ms: int | None = None,
        metadata_store: str = "mnesia",
    ) -> None:
        # None: the network's default (see ClusterSpec).
        tuning: dict[str, Any] = {
            key: value
            for key, value in (("net_ticktime", net_ticktime),
                               ("cluster_partition_handling", cluster_partition_handling),
                               ("statistics_interval_ms", statistics_interval_ms))
            if value is not None
        }
        self.spec = ClusterSpec(
            name=name,
            nodes=nodes,
            base_port=base_port,
            zookeeper=zookeeper,
            start_timeout=start_timeout,
            home=default_home() if home is None else Path(home),
            rabbitmq_dir=Path(rabbitmq_dir),
            network=network,
            rabbitmq=rabbitmq,
            metadata_store=metadata_store,
            **tuning,
        )
        self.dir = self.spec.home / self.spec.name
        self._layout: PortLayout | None = None
        self._plan: NetnsPlan | None = None
        self._credentials: Credentials | None = None
        self._rootfs: _rootfs.Rootfs | None = None
        """4.0's root filesystem, once ``up`` checked (or built) it or ``attach`` read it."""

    # ------------------------------------------------------------------ lookup

    @classmethod
    def attach(cls, name: str = "sac", home: Path | str | None = None) -> LocalCluster:
        """The cluster ``name`` as recorded by an earlier ``up``; NotRunningError if none."""
        probe = cls(name=name, home=home)
        state = read_json(probe.dir / "state.json")
        if state is None:
            raise NotRunningError(
                f"cluster {name!r} is not running: no state in {probe.dir} "
                f"(start it with `sac server up --name {name}`)"
            )
        cluster = cls(
            name=name,
            nodes=int(state["nodes"]),
            base_port=int(state["base_port"]),
            zookeeper=bool(state.get("zookeeper", False)),
            home=home,
            rabbitmq_dir=state.get("rabbitmq_dir", RABBITMQ_DIR),
            network=state.get("network", "loopback"),
            rabbitmq=state.get("rabbitmq", _rootfs.DEFAULT_SERIES),
            net_ticktime=state.get("net_ticktime"),
            cluster_partition_handling=state.get("cluster_partition_handling"),
            statistics_interval_ms=state.get("statistics_interval_ms"),
            metadata_store=state.get("metadata_store", "mnesia"),
        )
        cluster._layout = PortLayout(int(state["base_port"]))
        if state.get("rootfs") is not None:
            cluster._rootfs = _rootfs.Rootfs(Path(state["rootfs"]), str(state["rabbitmq_version"]))
        if state.get("subnet") is not None:
            cluster._plan = NetnsPlan(name, cluster.spec.nodes, str(state["subnet"]))
        return cluster

    def describe(self) -> str:
        return f"cluster {self.name!r}"

    def __repr__(self) -> str:
        network = "" if self.spec.network == "loopback" else f", network={self.spec.network!r}"
        store = ("" if self.spec.metadata_store == "mnesia"
                 else f", metadata_store={self.spec.metadata_store!r}")
        return (f"LocalCluster(name={self.spec.name!r}, nodes={self.spec.nodes}, "
                f"rabbitmq={self.spec.rabbitmq!r}{store}{network}, dir={self.dir})")

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def layout(self) -> PortLayout:
        if self._layout is None:
            raise NotRunningError(f"cluster {self.name!r} has no ports yet: call up() first")
        return self._layout

    @property
    def netns(self) -> NetnsPlan:
        """The namespaces, bridge and addresses of a netns cluster (what partitions cut)."""
        if self.spec.network != "netns":
            raise ServerError(
                f"cluster {self.name!r} runs on loopback: namespaces (and partitions) need "
                "network='netns'"
            )
        if self._plan is None:
            raise NotRunningError(f"cluster {self.name!r} has no network yet: call up() first")
        return self._plan

    @property
    def nodes(self) -> list[Node]:
        layout = self.layout
        plan = self.netns if self.spec.network == "netns" else None
        nodes = []
        for i in range(self.spec.nodes):
            # Long names with the address as host in netns mode: each node's name must lead
            # to its own namespace, and no name service knows 198.18 addresses.
            host = LOOPBACK if plan is None else plan.address(i + 1)
            nodes.append(Node(
                index=i + 1,
                name=f"sac-{self.name}-{i + 1}@{'localhost' if plan is None else host}",
                amqp_port=layout.amqp(i),
                amqps_port=layout.amqps(i),
                management_port=layout.management(i),
                dist_port=layout.dist(i),
                dir=self.dir / f"node{i + 1}",
                host=host,
                namespace=None if plan is None else plan.namespace(i + 1),
            ))
        return nodes

    def node(self, ref: int | str) -> Node:
        """A node by 1-based index (``2``, ``"2"``) or by Erlang name."""
        for node in self.nodes:
            if str(ref) in (str(node.index), node.name, node.name.split("@")[0]):
                return node
        names = ", ".join(n.name for n in self.nodes)
        raise ValueError(
            f"no node {ref!r} in cluster {self.name!r}; nodes are 1..{self.spec.nodes} ({names})"
        )

    @property
    def credentials(self) -> Credentials:
        if self._credentials is None:
            data = read_json(self.dir / "credentials.json")
            if data is None:
                raise NotRunningError(f"cluster {self.name!r} has no credentials in {self.dir}")
            self._credentials = Credentials(user=data["user"], password=data["password"])
        return self._credentials

    @property
    def credentials_file(self) -> Path:
        return self.dir / "credentials.json"

    def urls(self) -> list[str]:
        """AMQP URLs with the password, one per node: for code, never for printing."""
        creds = self.credentials
        user = urllib.parse.quote(creds.user, safe="")
        password = urllib.parse.quote(creds.password, safe="")
        return [f"amqp://{user}:{password}@{n.address}/%2F" for n in self.nodes]

    def management_urls(self) -> list[str]:
        """Management HTTP API URLs with the password, one per node (``http://user:pass@host:port``,
        what ``sac.sdk.ManagementSettings`` takes): for code, never for printing."""
        creds = self.credentials
        user = urllib.parse.quote(creds.user, safe="")
        password = urllib.parse.quote(creds.password, safe="")
        return [f"http://{user}:{password}@{n.host}:{n.management_port}" for n in self.nodes]

    def tls_urls(self) -> list[str]:
        """``amqps://`` URLs with the password, one per node; verify them with ``ca_file``."""
        return [url.replace("amqp://", "amqps://", 1).replace(
            f"@{n.address}/", f"@{n.host}:{n.amqps_port}/", 1)
            for url, n in zip(self.urls(), self.nodes, strict=True)]

    @property
    def ca_file(self) -> Path:
        """The cluster's own CA certificate, which signed every node's TLS certificate."""
        return self.dir / "tls" / "ca.pem"

    def display_urls(self) -> list[str]:
        """The same URLs with the password masked: safe to print and log."""
        user = urllib.parse.quote(self.credentials.user, safe="")
        return [f"amqp://{user}:***@{n.address}/%2F" for n in self.nodes]

    def log_files(self) -> list[Path]:
        """The nodes' logs (RabbitMQ's own, then what each printed), epmd's, ZooKeeper's:
        those that exist, none before ports are known (``up`` or ``attach``)."""
        if self._layout is None:
            return []
        files = []
        for node in self.nodes:
            files += [node.log_file, node.console_log]
        files += [self.dir / "epmd.log"] + [n.dir / "epmd.log" for n in self.nodes]
        if self.spec.zookeeper:
            files += [self.dir / "zookeeper" / "zookeeper.log"]
        return [f for f in files if f.exists()]

    # ------------------------------------------------------------------ state

    def _state(self) -> dict[str, Any]:
        state = self._read_state()
        if state is None:
            raise NotRunningError(f"cluster {self.name!r} is not running (no state in {self.dir})")
        return state

    def _record_pid(self, key: str, pid: int | None) -> None:
        state = self._state()
        state.setdefault("pids", {})[key] = pid
        self._write_state(state)

    def _pid(self, key: str) -> int | None:
        value = self._state().get("pids", {}).get(key)
        return int(value) if value is not None else None

    def _beam_pid(self, node: Node) -> int | None:
        """The Erlang VM's pid, from the node's pid file (the group leader is a shell script)."""
        try:
            pid = int(node.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _proc.is_ours(pid, self.dir) else None

    def is_running(self, node: Node) -> bool:
        pid = self._pid(f"node{node.index}")
        group_alive = pid is not None and _proc.is_ours(pid, self.dir)
        return group_alive or self._beam_pid(node) is not None

    # ------------------------------------------------------------------ environment

    def _check_installed(self) -> None:
        """Raise unless this cluster's RabbitMQ can run (4.0's tree is ``_rootfs.ensure``'s)."""
        if self.spec.network == "netns":
            _netns.check_privileges()
            _netns.ip_binary()
        if self.spec.rabbitmq in _rootfs.SUITE:
            _rootfs.check_privileges(self.spec.rabbitmq)
            _netns.tool("unshare", "util-linux")
            return
        server = self.spec.rabbitmq_dir / "bin" / "rabbitmq-server"
        if not server.exists():
            raise PackageMissingError(
                f"RabbitMQ is not installed: {server} is missing. Install the Debian package "
                "rabbitmq-server (`apt-get install -y rabbitmq-server`, or `make deps`)."
            )
        if self._epmd_binary() is None:
            raise PackageMissingError(
                "epmd is missing: install the Debian package erlang-base "
                "(it comes with rabbitmq-server)."
            )
        version = _rootfs.server_version(self.spec.rabbitmq_dir)
        if version is None or not _rootfs.in_series(version, self.spec.rabbitmq):
            raise PackageMissingError(
                f"rabbitmq={self.spec.rabbitmq!r} runs the host's package, and "
                f"{self.spec.rabbitmq_dir} holds RabbitMQ {version or 'of no known version'}; "
                f"use rabbitmq='4.0' or install RabbitMQ {self.spec.rabbitmq}")

    @staticmethod
    def _epmd_binary() -> str | None:
        return shutil.which("epmd") or shutil.which("epmd", path="/usr/lib/erlang/bin")

    def _env(self, node: Node | None = None, *, inside: Node | None = None) -> dict[str, str]:
        """The environment of a node (``node``), or of epmd or the CLI running where
        ``inside`` runs: its namespace's address for epmd and the CLI's distribution."""
        layout = self.layout
        ctl_min, ctl_max = layout.ctl_dist_range
        where = node or inside
        host = LOOPBACK if where is None else where.host
        ctl_args = f"-kernel inet_dist_use_interface {{{host.replace('.', ',')}}}"
        if self.spec.net_ticktime != 60:
            # The CLI must tick at the node's pace, or the node drops it mid-call.
            ctl_args += f" -kernel net_ticktime {self.spec.net_ticktime}"
        seen = self._seen
        env = {
            # Inside a root filesystem the host's PATH means nothing.
            "PATH": (os.environ.get("PATH", _PATH) if self._rootfs is None else _PATH),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            # The Erlang cookie is read from $HOME by the server and the CLI alike.
            "HOME": seen(self.dir),
            _proc.MARKER: str(self.dir),
            "ERL_EPMD_ADDRESS": host,
            "ERL_EPMD_PORT": str(layout.epmd),
            "RABBITMQ_CONF_ENV_FILE": seen(self.dir / "rabbitmq-env.conf"),
            "RABBITMQ_CTL_ERL_ARGS": ctl_args,
            "RABBITMQ_CTL_DIST_PORT_MIN": str(ctl_min),
            "RABBITMQ_CTL_DIST_PORT_MAX": str(ctl_max),
        }
        if self.spec.network == "netns":
            env["RABBITMQ_USE_LONGNAME"] = "true"
        if node is not None:
            env.update(
                {
                    "RABBITMQ_NODENAME": node.name,
                    "RABBITMQ_NODE_IP_ADDRESS": node.host,
                    "RABBITMQ_NODE_PORT": str(node.amqp_port),
                    "RABBITMQ_DIST_PORT": str(node.dist_port),
                    "RABBITMQ_CONFIG_FILE": seen(node.dir / "rabbitmq.conf"),
                    "RABBITMQ_ADVANCED_CONFIG_FILE": seen(node.dir / "advanced.config"),
                    "RABBITMQ_ENABLED_PLUGINS_FILE": seen(node.dir / "enabled_plugins"),
                    "RABBITMQ_MNESIA_BASE": seen(node.dir / "mnesia"),
                    "RABBITMQ_LOG_BASE": seen(node.dir / "log"),
                    "RABBITMQ_PID_FILE": seen(node.pid_file),
                }
            )
            if self._rootfs is not None:
                # Schedulers that sleep at once instead of busy-waiting when idle, so that
                # nodes sharing a machine's few cores leave them to each other and to clients
                # (no difference measured here at idle or in confirmed publishing).
                env["RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS"] = SLEEPING_SCHEDULERS
        return env

    def _seen(self, path: Path) -> str:
        """``path`` (in the cluster's directory) as this cluster's processes see it: the same
        on the host, under ``/sac`` inside a root filesystem."""
        if self._rootfs is None:
            return str(path)
        return str(_rootfs.MOUNT_POINT / path.relative_to(self.dir))

    def _program(self, *parts: str) -> str:
        """A RabbitMQ program (``bin/rabbitmqctl``) as this cluster's processes see it."""
        base = self.spec.rabbitmq_dir if self._rootfs is None else _rootfs.RABBITMQ_DIR
        return str(base.joinpath(*parts))

    def _write_config(self, creds: Credentials) -> None:
        """The cluster's certificates and config files (``_rabbitmq_config``, ``_tls``)."""
        _tls.make_certificates(self.dir / "tls", self.name, [n.host for n in self.nodes])
        files = cluster_files(self.spec, self.nodes, creds, secrets.token_hex(20), self.dir,
                              seen_as=Path(self._seen(self.dir)))
        for node in self.nodes:
            (node.dir / "log").mkdir(parents=True, exist_ok=True)
            (node.dir / "mnesia").mkdir(parents=True, exist_ok=True)
        for path, file in files.items():
            if file.mode is None:
                path.write_text(file.text)
            else:
                write_secret(path, file.text, mode=file.mode)

    # ------------------------------------------------------------------ processes

    def _inside(self, node: Node | None, argv: list[str]) -> list[str]:
        """``argv`` run inside the root filesystem (4.0), in ``node``'s namespace (netns
        mode): each process of a node, epmd and the CLI alike."""
        if self._rootfs is not None:
            unshare = _netns.tool("unshare", "util-linux")
            argv = _rootfs.chroot_argv(unshare, self._rootfs.path, self.dir, argv)
        if node is None or node.namespace is None:
            return argv
        return _netns.exec_argv(node.namespace, argv)

    def _epmds(self) -> dict[str, Node | None]:
        """epmd's pid keys in state.json: one epmd on loopback, one per namespace in netns
        (each namespace is a host of its own, and node names are looked up on their host)."""
        if self.spec.network == "netns":
            return {f"epmd{n.index}": n for n in self.nodes}
        return {"epmd": None}

    def _start_epmd(self, node: Node | None = None) -> None:
        epmd = self._epmd_binary() if self._rootfs is None else str(_rootfs.EPMD)
        assert epmd is not None
        port = self.layout.epmd
        host = LOOPBACK if node is None else node.host
        log = self.dir / "epmd.log" if node is None else node.dir / "epmd.log"
        pid = _proc.spawn(
            self._inside(node, [epmd, "-address", host, "-port", str(port)]),
            self._env(inside=node),
            log,
            self.dir,
        )
        self._record_pid("epmd" if node is None else f"epmd{node.index}", pid)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if not _proc.is_alive(pid):
                raise ServerExitedError(
                    f"epmd on port {port} exited at once; see {log}:\n" + tail(log)
                )
            try:
                socket.create_connection((host, port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise StartTimeoutError(f"epmd did not listen on {host}:{port} within 10 s")

    def _spawn_node(self, node: Node) -> int:
        node.pid_file.unlink(missing_ok=True)
        pid = _proc.spawn(
            self._inside(node, [self._program("bin", "rabbitmq-server")]),
            self._env(node),
            node.console_log,
            node.dir,
        )
        self._record_pid(f"node{node.index}", pid)
        return pid

    def _wait_node(self, node: Node, pid: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if not _proc.is_alive(pid):
                raise ServerExitedError(
                    f"node {node.name} exited while starting; read {node.log_file} and "
                    f"{node.console_log}. Last lines:\n{tail(node.console_log)}"
                )
            if amqp_ready(node.amqp_port, host=node.host):
                return
            if time.monotonic() >= deadline:
                raise StartTimeoutError(
                    f"node {node.name} did not accept AMQP on {node.address} within "
                    f"{timeout:g} s; read {node.log_file}"
                )
            time.sleep(0.2)

    def ctl(self, node: Node, *args: str, timeout: float = 60.0) -> str:
        """Run ``rabbitmqctl -n <node> args`` for this cluster; raise CommandError on failure."""
        return self._cli("rabbitmqctl", node, *args, timeout=timeout)

    def _cli(self, tool: str, node: Node, *args: str, timeout: float = 60.0) -> str:
        # In netns mode the CLI runs inside the node's namespace: it registers with that
        # namespace's epmd and reaches the node locally, so no epmd is needed on the host,
        # and a partition never cuts the CLI from the node it asks (it sees what that node sees).
        argv = self._inside(node, [self._program("bin", tool), "-n", node.name, *args])
        try:
            done = subprocess.run(
                argv,
                env=self._env(inside=node),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise CommandError(
                f"`{tool} {' '.join(args)}` on {node.name} did not finish within {timeout:g} s"
            ) from exc
        if done.returncode != 0:
            detail = (done.stderr.strip() or done.stdout.strip())[-2000:]
            raise CommandError(
                f"`{tool} {' '.join(args)}` on {node.name} failed (exit {done.returncode}): "
                f"{detail}"
            )
        return done.stdout

    def _enable_khepri(self, seed: Node) -> None:
        """Move the formed cluster's metadata to Khepri, and wait until the broker says so
        (the CLI returns once the migration is done; the flag is then listed enabled)."""
        self.ctl(seed, *ENABLE_KHEPRI, timeout=self.spec.start_timeout)
        deadline = time.monotonic() + self.spec.start_timeout
        while (store := self.broker()["metadata_store"]) != "khepri":
            if time.monotonic() >= deadline:
                raise StartTimeoutError(
                    f"cluster {self.name!r}: the khepri_db feature flag was enabled but the "
                    f"broker reports {store} after {self.spec.start_timeout:g} s; read "
                    f"{seed.log_file}")
            time.sleep(0.25)
        self.wait_members(self.nodes, self.spec.start_timeout)

    def broker(self, node: Node | None = None) -> dict[str, str]:
        """What the broker says it is (``node``, or the first that answers): ``product``
        and ``version`` (``/api/overview``), and ``metadata_store`` (``/api/feature-flags``:
        ``khepri`` once ``khepri_db`` is enabled, else ``mnesia``)."""
        api = self.management(node)
        overview = api.overview()
        return {"product": overview.product, "version": overview.version,
                "metadata_store": metadata_store_of(api.feature_flags())}

    def _join(self, node: Node, seed: Node) -> None:
        self.ctl(node, "stop_app")
        self.ctl(node, "join_cluster", seed.name)
        self.ctl(node, "start_app")

    # ------------------------------------------------------------------ management API

    def management(self, node: Node | int | str | None = None) -> Management:
        """A client of this cluster's management API (``sac.sdk.Management``): every node,
        tried in turn, reads retried under the SDK's policy; or only ``node`` (a ``Node``, or
        what ``node()`` takes), asked once, so that a probe of a node gets that node's answer
        or its silence and never another's."""
        urls = self.management_urls()
        if node is not None:
            urls = [urls[(node if isinstance(node, Node) else self.node(node)).index - 1]]
        settings = ManagementSettings(
            urls=tuple(urls), statistics_interval=self.spec.statistics_interval_ms / 1000)
        if node is not None:
            settings = attrs.evolve(settings, retry=attrs.evolve(settings.retry,
                                                                 max_attempts=1))
        return Management(settings)

    def members(self, node: Node | None = None) -> list[dict[str, Any]]:
        """Cluster members as the management API (of ``node``, or of the first that
        answers) sees them: ``[{"name", "running"}]``."""
        return [{"name": n.name, "running": n.running} for n in self.management(node).nodes()]

    def wait_members(self, running: Sequence[Node], timeout: float) -> None:
        """Wait until the management API lists exactly ``running`` as running members."""
        want = sorted(n.name for n in running)
        deadline = time.monotonic() + timeout
        seen: Any = None
        while time.monotonic() < deadline:
            try:
                seen = sorted(m["name"] for m in self.members() if m["running"])
                if seen == want:
                    return
            except (ServerError, ManagementError) as exc:
                seen = str(exc)
            time.sleep(0.25)
        raise StartTimeoutError(
            f"cluster {self.name!r}: running members should be {want} but are {seen} after "
            f"{timeout:g} s; read the node logs under {self.dir}"
        )

    # ------------------------------------------------------------------ lifecycle

    def _running_pids(self) -> list[int]:
        state = self._read_state()
        pids = [] if state is None else [int(p) for p in state.get("pids", {}).values() if p]
        return [p for p in pids if _proc.is_ours(p, self.dir)]

    def _any_running(self) -> bool:
        return bool(self._running_pids())

    def _already_running(self) -> str:
        return (f"cluster {self.name!r} is already running (state in {self.dir}); "
                f"`sac server down --name {self.name}` first")

    def _prepare(self) -> None:
        """Ports, the network plan (netns), fresh credentials and state; nothing runs yet."""
        # 4.0's tree, checked, and built first when missing or broken.
        rootfs = (_rootfs.ensure(self.spec.rabbitmq) if self.spec.rabbitmq in _rootfs.SUITE
                  else None)
        base = self.spec.base_port
        if base is None:
            base = allocate_base(self.spec.home, self.name, self._port_offsets())
        layout = PortLayout(base)
        check_free(self._host_ports(layout))
        self._layout = layout
        self._rootfs = rootfs
        version = (rootfs.version if rootfs is not None
                   else _rootfs.server_version(self.spec.rabbitmq_dir))
        netns = self.spec.network == "netns"
        if netns:
            # Leftovers of a crashed run of this name go first (their bridge's route would
            # hold the subnet); another cluster's namespaces are never touched.
            with _netns.signals_deferred():
                _netns.remove(self.name, self.dir)
            subnet = _netns.choose_subnet(self.name, _netns.routed_networks())
            self._plan = NetnsPlan(self.name, self.spec.nodes, str(subnet))
        self._fresh_dir()
        self._credentials = Credentials.generate(self.name)
        state: dict[str, Any] = {
            "name": self.name,
            "nodes": self.spec.nodes,
            "base_port": layout.base,
            "zookeeper": self.spec.zookeeper,
            "rabbitmq_dir": str(self.spec.rabbitmq_dir),
            "rabbitmq": self.spec.rabbitmq,
            "rabbitmq_version": version,
            "rootfs": None if rootfs is None else str(rootfs.path),
            "network": self.spec.network,
            "net_ticktime": self.spec.net_ticktime,
            "cluster_partition_handling": self.spec.cluster_partition_handling,
            "statistics_interval_ms": self.spec.statistics_interval_ms,
            "metadata_store": self.spec.metadata_store,
            "pids": {},
        }
        if self._plan is not None:
            state["subnet"] = self._plan.subnet
        self._write_state(state)

    def _boot(self) -> None:
        """The network (netns), config files, epmd, every node; the nodes joined to the first
        one, Khepri if asked, and ZooKeeper if asked."""
        if self._plan is not None:
            _netns.create(self._plan)
        self._write_config(self.credentials)
        for where in self._epmds().values():
            self._start_epmd(where)
        pids = {node.index: self._spawn_node(node) for node in self.nodes}
        with concurrent.futures.ThreadPoolExecutor(len(pids)) as pool:
            futures = [
                pool.submit(self._wait_node, node, pids[node.index], self.spec.start_timeout)
                for node in self.nodes
            ]
            for future in futures:
                future.result()
        seed, *rest = self.nodes
        for node in rest:
            self._join(node, seed)
        self.wait_members(self.nodes, self.spec.start_timeout)
        if self.spec.metadata_store == "khepri":
            self._enable_khepri(seed)
        if self.spec.zookeeper:
            self.zookeeper().up()

    def zookeeper(self) -> Any:
        """This cluster's ZooKeeper (started by ``up`` when ``zookeeper=True``)."""
        from .zookeeper import LocalZooKeeper

        return LocalZooKeeper.inside(self.dir / "zookeeper", self.layout.zookeeper)

    def _host_ports(self, layout: PortLayout) -> dict[int, str]:
        """The ports bound on the host's 127.0.0.1 (in netns mode, only ZooKeeper's)."""
        ports = layout.listening_ports(self.spec.nodes, self.spec.zookeeper)
        if self.spec.network == "netns":
            return {p: role for p, role in ports.items() if p == layout.zookeeper}
        return ports

    def _port_offsets(self) -> dict[int, str]:
        probe = PortLayout(1024)
        ports = probe.listening_ports(self.spec.nodes, self.spec.zookeeper)
        return {port - probe.base: role for port, role in ports.items()}

    def _teardown(self) -> list[int]:
        """Stop every process of this cluster (and, in netns mode, delete its namespaces,
        veths and bridge); return the pids that were running."""
        if self.spec.network != "netns":
            return self._stop_processes()
        # Ctrl-C must not stop the cleanup halfway: it is held and delivered afterwards.
        with _netns.signals_deferred():
            pids = self._stop_processes()
            _netns.remove(self.name, self.dir)
            return pids

    def _stop_processes(self) -> list[int]:
        pids = sorted(set(self._running_pids()) | set(_proc.find_marked(self.dir)))
        state = self._read_state() or {}
        epmds = {int(p) for key, p in state.get("pids", {}).items()
                 if key.startswith("epmd") and p}
        servers = [p for p in pids if p not in epmds]
        # SIGTERM is RabbitMQ's graceful stop; nodes stopping together need no ordering.
        _proc.terminate(servers, grace=20.0)
        _proc.terminate([p for p in pids if p in epmds], grace=2.0)
        left = _proc.find_marked(self.dir)
        if left:
            _proc.terminate(left, grace=1.0)
            left = _proc.find_marked(self.dir)
        if left:
            raise ServerError(f"cluster {self.name!r}: processes {left} survived SIGKILL")
        self._forget_state()
        return pids

    def down(self) -> None:
        """Stop every process this cluster started (epmd included) and forget its state.

        Logs stay under the cluster directory for reading afterwards.
        """
        network_left = self.spec.network == "netns" and _netns.leftovers(self.name)
        if (self._read_state() is None and not _proc.find_marked(self.dir)
                and not network_left):
            raise NotRunningError(
                f"cluster {self.name!r} is not running (no state in {self.dir})"
            )
        if not self._teardown():
            raise NotRunningError(
                f"cluster {self.name!r} was not running: its processes had already exited "
                f"(stale state in {self.dir} removed)"
            )

    # ------------------------------------------------------------------ faults

    @overload
    def kill(self) -> None: ...

    @overload
    def kill(self, ref: int | str) -> Node: ...

    def kill(self, ref: int | str | None = None) -> Node | None:
        """SIGKILL a node's whole process group (``ref``: see ``node``), as a crash would;
        without ``ref``, every node and epmd at once, as a power cut would. Data and state
        stay: ``start(ref)`` boots a node again, ``down()`` cleans up."""
        if ref is not None:
            node = self.node(ref)
            self._kill_node(node, self._require_running(node))
            return node
        self._state()
        running = [n for n in self.nodes if self.is_running(n)]
        if not running:
            raise NotRunningError(f"cluster {self.name!r} has no node running")
        for node in running:
            self._kill_node(node, self._pid(f"node{node.index}"))
        epmds = [pid for key in self._epmds()
                 if (pid := self._pid(key)) is not None and _proc.is_ours(pid, self.dir)]
        _proc.kill_all(epmds, f"cluster {self.name!r}: epmd")
        return None

    def _kill_node(self, node: Node, pid: int | None) -> None:
        beam = self._beam_pid(node)
        pids = [p for p in (pid, beam) if p is not None and _proc.is_ours(p, self.dir)]
        _proc.kill_all(pids, f"node {node.name}")

    def stop(self, ref: int | str, timeout: float = 60.0) -> Node:
        """Stop a node gracefully (SIGTERM), SIGKILL if it takes longer than ``timeout``."""
        node = self.node(ref)
        pid = self._require_running(node)
        beam = self._beam_pid(node)
        # The VM stops gracefully on SIGTERM; the launcher script exits with it.
        _proc.terminate([pid] if beam is None else [beam, pid], grace=timeout)
        return node

    def start(self, ref: int | str, timeout: float | None = None) -> Node:
        """Start a stopped or killed node again; it rejoins from its data directory."""
        node = self.node(ref)
        self._state()
        if self.is_running(node):
            raise AlreadyRunningError(f"node {node.name} is already running")
        key, where = next((k, n) for k, n in self._epmds().items() if n in (None, node))
        epmd = self._pid(key)
        if epmd is None or not _proc.is_ours(epmd, self.dir):
            self._start_epmd(where)
        wait = self.spec.start_timeout if timeout is None else timeout
        pid = self._spawn_node(node)
        self._wait_node(node, pid, wait)
        self.wait_members([n for n in self.nodes if self.is_running(n)], wait)
        return node

    def _require_running(self, node: Node) -> int:
        pid = self._pid(f"node{node.index}")
        if pid is None or not self.is_running(node):
            raise NotRunningError(f"node {node.name} is not running")
        return pid

    # ------------------------------------------------------------------ status

    def status(self) -> dict[str, Any]:
        """What runs, where: JSON-ready, without secrets."""
        state = self._read_state()
        if state is None:
            return {"name": self.name, "dir": str(self.dir), "running": False, "nodes": [],
                    "logs": [str(p) for p in self.log_files()]}
        pids = state.get("pids", {})
        nodes = []
        for node in self.nodes:
            running = self.is_running(node)
            nodes.append(
                {
                    "index": node.index,
                    "name": node.name,
                    "amqp_port": node.amqp_port,
                    "amqps_port": node.amqps_port,
                    "management_port": node.management_port,
                    "dist_port": node.dist_port,
                    "pid": self._beam_pid(node),
                    "pgid": pids.get(f"node{node.index}"),
                    "running": running,
                    "log": str(node.log_file),
                }
            )
            if node.namespace is not None:
                nodes[-1].update({"host": node.host, "namespace": node.namespace})
        try:
            members: list[dict[str, Any]] | None = self.members()
        except (ServerError, ManagementError):
            members = None
        epmds = {key: pids.get(key) for key in self._epmds()}
        epmd: dict[str, Any] = {
            "port": self.layout.epmd,
            "running": all(p is not None and _proc.is_ours(int(p), self.dir)
                           for p in epmds.values()),
        }
        if self.spec.network == "netns":
            epmd["pids"] = epmds
        else:
            epmd["pid"] = epmds["epmd"]
        result: dict[str, Any] = {
            "name": self.name,
            "dir": str(self.dir),
            "running": any(n["running"] for n in nodes),
            "rabbitmq": self.spec.rabbitmq,
            "rabbitmq_version": state.get("rabbitmq_version"),
            "rootfs": state.get("rootfs"),
            "metadata_store": self.spec.metadata_store,
            "nodes": nodes,
            "members": members,
            "epmd": epmd,
            "urls": self.display_urls(),
            "statistics_interval_ms": self.spec.statistics_interval_ms,
            "credentials_file": str(self.credentials_file),
            "logs": [str(p) for p in self.log_files()],
        }
        if self.spec.network == "netns":
            result["network"] = {
                "mode": "netns",
                "net_ticktime": self.spec.net_ticktime,
                "cluster_partition_handling": self.spec.cluster_partition_handling,
                **self.netns.as_json(),
            }
        if self.spec.zookeeper:
            result["zookeeper"] = self.zookeeper().status()
        return result
