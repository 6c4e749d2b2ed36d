"""The ``sac`` command line: servers, the demo, chaos runs and campaigns, checks and reports.

Built on argparse (standard library) so that the SDK's light install still has a working
``sac``. Errors from ``server`` are printed as one line naming the cause, exit status 1; bad
arguments exit 2 as argparse does.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import sac
from sac.sdk._core.urls import mask_url
from sac.server import HOME_HELP, LocalCluster, ServerError
from sac.server._rabbitmq_config import METADATA_STORES, NETWORKS, PARTITION_HANDLING
from sac.server._rootfs import DEFAULT_SERIES, SERIES


def _add_name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", default="sac", help="cluster name (default: sac)")
    parser.add_argument(
        "--home", type=Path, default=None, help=HOME_HELP
    )


def _server_up(args: argparse.Namespace) -> int:
    cluster = LocalCluster(
        name=args.name,
        nodes=args.nodes,
        base_port=args.base_port,
        zookeeper=args.zookeeper,
        start_timeout=args.timeout,
        home=args.home,
        network=args.network,
        rabbitmq=args.rabbitmq,
        net_ticktime=args.net_ticktime,
        cluster_partition_handling=args.partition_handling,
        statistics_interval_ms=args.statistics_interval,
        metadata_store=args.metadata_store,
    )
    cluster.up()
    broker = cluster.broker()
    print(f"cluster {cluster.name!r} is up: {len(cluster.nodes)} nodes of {broker['product']} "
          f"{broker['version']}, metadata in {broker['metadata_store']}")
    if args.network == "netns":
        plan = cluster.netns
        print(f"network: namespaces {', '.join(plan.namespaces)} on bridge {plan.bridge} "
              f"({plan.subnet}, host {plan.host_address}); net_ticktime "
              f"{cluster.spec.net_ticktime} s, {cluster.spec.cluster_partition_handling}")
    print(f"statistics interval: {cluster.spec.statistics_interval_ms} ms (the management "
          "API's lag)")
    for node, url in zip(cluster.nodes, cluster.display_urls(), strict=True):
        print(f"  {node.name}  {url}  management http://{node.host}:{node.management_port}/")
    if args.zookeeper:
        print(f"  zookeeper  {cluster.zookeeper().hosts}")
    print(f"credentials: {cluster.credentials_file} (mode 0600)")
    named = "" if args.name == "sac" else f" --name {args.name}"
    if args.home is not None:
        named += f" --home {shlex.quote(str(args.home))}"
    print(f"for your shell: eval \"$(sac server env{named} --show-password)\" sets "
          "SAC_AMQP_URLS and SAC_MANAGEMENT_URLS")
    return 0


def _server_status(args: argparse.Namespace) -> int:
    try:
        cluster = LocalCluster.attach(args.name, home=args.home)
    except ServerError as exc:
        print(json.dumps({"name": args.name, "running": False, "nodes": []}, indent=2))
        print(f"sac: {exc}", file=sys.stderr)  # where it looked: state is per directory
        return 1
    status = cluster.status()
    print(json.dumps(status, indent=2))
    return 0 if status["running"] else 1


def env_lines(variables: dict[str, str], secret: dict[str, str] | None) -> list[str]:
    """Shell lines exporting ``variables``. With ``secret`` (the same names, passwords in
    clear) the lines are ``export`` lines for ``eval``; without, each is a comment with the
    password masked, so an ``eval`` of the masked output sets nothing that would then fail
    to log in."""
    if secret is None:
        return [f"# export {name}={shlex.quote(value)}" for name, value in variables.items()]
    return [f"export {name}={shlex.quote(secret[name])}" for name in variables]


def _server_env(args: argparse.Namespace) -> int:
    cluster = LocalCluster.attach(args.name, home=args.home)
    if not cluster.status()["running"]:
        raise ServerError(f"cluster {args.name!r} in {cluster.dir} is not running "
                          f"(start it with `sac server up --name {args.name}`)")
    masked = {"SAC_AMQP_URLS": ",".join(cluster.display_urls()),
              "SAC_MANAGEMENT_URLS": ",".join(mask_url(u) for u in cluster.management_urls())}
    clear = {"SAC_AMQP_URLS": ",".join(cluster.urls()),
             "SAC_MANAGEMENT_URLS": ",".join(cluster.management_urls())}
    interval = f"{cluster.spec.statistics_interval_ms / 1000:g}"
    masked["SAC_MANAGEMENT_STATISTICS_INTERVAL"] = interval
    clear["SAC_MANAGEMENT_STATISTICS_INTERVAL"] = interval
    if cluster.spec.zookeeper:
        masked["SAC_ZOOKEEPER_HOSTS"] = clear["SAC_ZOOKEEPER_HOSTS"] = cluster.zookeeper().hosts
    for line in env_lines(masked, clear if args.show_password else None):
        print(line)
    if not args.show_password:
        print(f"sac: passwords masked; to set these in your shell: "
              f"eval \"$(sac server env --name {args.name} --show-password)\"", file=sys.stderr)
    return 0


def _server_down(args: argparse.Namespace) -> int:
    cluster = LocalCluster.attach(args.name, home=args.home)
    cluster.down()
    print(f"cluster {args.name!r} is down; logs stay in {cluster.dir}")
    return 0


def _node_action(action: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        cluster = LocalCluster.attach(args.name, home=args.home)
        node = getattr(cluster, action)(args.node)
        print(f"{action}: {node.name}")
        return 0

    return run


EXTRAS = {
    "toxiproxy": "chaos", "tqdm": "chaos", "psycopg": "postgres", "kazoo": "zk",
    "pyspark": "checker", "py4j": "checker", "matplotlib": "checker", "jinja2": "checker",
    "aio_pika": "bench",
}
"""The optional dependencies a command may import, and the extra that installs each: the
core install (``pip install sac``) is the SDK's, and a command that needs more says which
extra, rather than failing on an import."""


def missing_extra(exc: ImportError) -> str | None:
    """The one line for a command that needs a package an extra installs; None when the
    missing module is not one of those (a bug, or a broken install: its traceback helps)."""
    top = (exc.name or "").split(".")[0]
    extra = EXTRAS.get(top)
    if extra is None:
        return None
    return (f"this command needs the Python package {top!r}, which the {extra!r} extra "
            f"installs: pip install 'sac[{extra}]' (or 'sac[all]')")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sac", description="sac: local RabbitMQ servers, the demo, chaos runs and "
        "campaigns, checks, audits and reports.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {sac.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    srv = commands.add_parser("server", help="start, inspect and stop local servers")
    sub = srv.add_subparsers(dest="action", required=True)

    up = sub.add_parser("up", help="start a fresh RabbitMQ cluster (and ZooKeeper)")
    _add_name(up)
    up.add_argument("--nodes", type=int, default=3, help="number of RabbitMQ nodes (1-9)")
    up.add_argument("--zookeeper", action="store_true", help="also start a ZooKeeper")
    up.add_argument("--base-port", type=int, default=None,
                    help="first port of the cluster's block of 100 (default: a free block)")
    up.add_argument("--timeout", type=float, default=120.0,
                    help="seconds each node may take to start (default: 120)")
    up.add_argument("--rabbitmq", choices=SERIES, default=DEFAULT_SERIES,
                    help=f"RabbitMQ series (default: {DEFAULT_SERIES}): 4.0 runs Debian 13's "
                         "from a root filesystem built once (20-90 s, 240 MB in "
                         "/var/cache/sac) and each node in chroot (root); 3.10 is the host's "
                         "Debian package (classic mirrored queues)")
    up.add_argument("--metadata-store", choices=METADATA_STORES, default="mnesia",
                    help="where the cluster keeps its metadata (default: mnesia); khepri "
                         "(4.0 only) enables the khepri_db feature flag once it has formed")
    up.add_argument("--network", choices=NETWORKS, default="loopback",
                    help="loopback (default), or netns: each node in a network namespace of "
                         "its own on a bridge, so that links between nodes can be cut (root)")
    up.add_argument("--net-ticktime", type=int, default=None,
                    help="Erlang net_ticktime in seconds (default: 60 on loopback, 5 in netns)")
    up.add_argument("--partition-handling", choices=PARTITION_HANDLING, default=None,
                    help="RabbitMQ's cluster_partition_handling (default: ignore on loopback, "
                         "pause_minority in netns)")
    up.add_argument("--statistics-interval", type=int, default=None, metavar="MS",
                    help="RabbitMQ's collect_statistics_interval in milliseconds: how fresh the "
                         "management API's consumers are (default: 1000; RabbitMQ's own: 5000)")
    up.set_defaults(func=_server_up)

    status = sub.add_parser("status", help="print the cluster's state as JSON")
    _add_name(status)
    status.set_defaults(func=_server_status)

    env = sub.add_parser(
        "env", help="print the cluster's URLs as shell exports (passwords masked unless asked)",
        description="Print SAC_AMQP_URLS, SAC_MANAGEMENT_URLS and "
        "SAC_MANAGEMENT_STATISTICS_INTERVAL (and SAC_ZOOKEEPER_HOSTS when the cluster has a "
        "ZooKeeper), which ConnectionSettings.from_env() and "
        "ManagementSettings.from_env() read. Masked, the lines are comments; with "
        "--show-password they are exports: eval \"$(sac server env --show-password)\".")
    _add_name(env)
    env.add_argument("--show-password", action="store_true",
                     help="print the passwords in clear, as export lines for eval")
    env.set_defaults(func=_server_env)

    down = sub.add_parser("down", help="stop every process of the cluster")
    _add_name(down)
    down.set_defaults(func=_server_down)

    for action, text in (
        ("kill", "SIGKILL a node (a crash)"),
        ("stop", "stop a node gracefully"),
        ("start", "start a stopped or killed node; it rejoins"),
    ):
        cmd = sub.add_parser(action, help=text)
        cmd.add_argument("node", help="node index (1..N) or Erlang node name")
        _add_name(cmd)
        cmd.set_defaults(func=_node_action(action))

    from sac import audit, chaos_commands, check, dlq, proxy, sim_command

    chaos_commands.add_demo_parser(commands)
    chaos_commands.add_parser(commands)
    check.add_parser(commands)
    audit.add_parser(commands)
    dlq.add_parser(commands)
    proxy.add_parser(commands)
    sim_command.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], Any] = args.func
    try:
        code = int(func(args))
        sys.stdout.flush()  # a closed pipe is found here, not at the interpreter's exit
        return code
    except ImportError as exc:
        line = missing_extra(exc)
        if line is None:
            raise
        print(f"sac: error: {line}", file=sys.stderr)
        return 1
    except ServerError as exc:
        print(f"sac: error: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"sac: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`sac server status | head`): not an error of the command.
        # Python would report the pipe again when it flushes stdout at exit; point stdout
        # at /dev/null so that it does not.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a command a closed pipe ended


if __name__ == "__main__":
    sys.exit(main())
