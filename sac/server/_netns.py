"""Network namespaces for a local cluster: one namespace per node, joined by a bridge.

Why: a TCP proxy sits between a client and a node, but it cannot cut the Erlang distribution
links *between* nodes, and partitions are where single-active consumption gets interesting.
With every node in a network namespace of its own, a packet filter inside a namespace cuts
exactly the links we choose, one way or both (see ``sac.chaos.partition``).

The layout of a cluster named ``<c>`` with N nodes::

    host namespace                          namespace sac-<c>-i (i = 1..N)
    bridge sacb<key>  198.18.X.254/24  <->  veth sac<key>v<i>  ==  eth0  198.18.X.i/24, lo up

``<key>`` is a short hash of the cluster name, so that interface names stay within the
kernel's 15 characters whatever the name. The /24 comes from the benchmarking range
198.18.0.0/15 (RFC 2544, never routed on the internet), chosen from a hash of the name and
skipped while any route of the host overlaps it. Nothing is routed or NATed beyond the bridge:
the namespaces have no default route and ``ip_forward`` is left alone, so the nodes' traffic
never leaves the namespaces and the bridge that the run created. The bridge carries the
alias ``sac-cluster:<c>``: cleanup deletes a bridge only when that alias says it is ours.

The names, addresses and commands are computed by pure code (``NetnsPlan``, ``choose_subnet``,
``setup_commands``); the rest is a thin shell around ``ip``.

Namespace names are machine-wide: two clusters of one name (under two state homes) cannot
both run in netns mode; ``up`` refuses when the namespaces hold another state home's
processes.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import re
import select
import shutil
import signal
import subprocess
import threading
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import attrs

from . import _proc
from ._errors import CommandError, PackageMissingError, ServerError

RANGE = ipaddress.IPv4Network("198.18.0.0/15")
SUBNETS = 2 ** (24 - RANGE.prefixlen)  # 512 /24s
HOST_OCTET = 254
ALIAS_PREFIX = "sac-cluster:"
# CAP_NET_ADMIN (links, addresses, packet filters) and CAP_SYS_ADMIN (``ip netns add`` mounts).
CAP_NET_ADMIN = 12
CAP_SYS_ADMIN = 21


def key_of(cluster: str) -> str:
    """Seven hex digits of the name's SHA-1: short enough for interface names."""
    return hashlib.sha1(cluster.encode()).hexdigest()[:7]


def namespace_of(cluster: str, index: int) -> str:
    return f"sac-{cluster}-{index}"


def bridge_of(cluster: str) -> str:
    return f"sacb{key_of(cluster)}"


def subnet_of(index: int) -> ipaddress.IPv4Network:
    """The ``index``-th /24 of 198.18.0.0/15 (0..511)."""
    if not 0 <= index < SUBNETS:
        raise ValueError(f"subnet index {index} is outside 0..{SUBNETS - 1}")
    first = int(RANGE.network_address) + index * 256
    return ipaddress.IPv4Network((first, 24))


def choose_subnet(cluster: str, taken: Iterable[ipaddress.IPv4Network]) -> ipaddress.IPv4Network:
    """The first /24 from a hash of ``cluster`` onwards that overlaps none of ``taken``.

    Stable for a name while nothing else is in the way, so that addresses recur between runs.
    """
    busy = list(taken)
    start = zlib.crc32(cluster.encode()) % SUBNETS
    for step in range(SUBNETS):
        net = subnet_of((start + step) % SUBNETS)
        if not any(net.overlaps(other) for other in busy):
            return net
    raise ServerError(f"every /24 of {RANGE} overlaps a route of this host: none left")


def _valid_subnet(_inst: object, attribute: attrs.Attribute[str], value: str) -> None:
    net = ipaddress.IPv4Network(value)
    if net.prefixlen != 24 or not net.subnet_of(RANGE):
        raise ValueError(f"{attribute.name} must be a /24 inside {RANGE}, got {value!r}")


@attrs.frozen
class NetnsPlan:
    """Names and addresses of one cluster's namespaces: all derived from name, size, subnet."""

    cluster: str
    nodes: int = attrs.field(validator=[attrs.validators.ge(1), attrs.validators.le(9)])
    subnet: str = attrs.field(validator=_valid_subnet)

    @property
    def key(self) -> str:
        return key_of(self.cluster)

    @property
    def bridge(self) -> str:
        return bridge_of(self.cluster)

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(self.subnet)

    @property
    def host_address(self) -> str:
        """The host's side of the bridge: clients connect from here, partitions never cut it."""
        return str(self.network.network_address + HOST_OCTET)

    def address(self, index: int) -> str:
        """Node ``index``'s address (1-based)."""
        self._check(index)
        return str(self.network.network_address + index)

    def namespace(self, index: int) -> str:
        self._check(index)
        return namespace_of(self.cluster, index)

    def veth(self, index: int) -> str:
        """The host end of node ``index``'s veth pair (its other end is ``eth0`` inside)."""
        self._check(index)
        return f"sac{self.key}v{index}"

    @property
    def indices(self) -> range:
        return range(1, self.nodes + 1)

    @property
    def namespaces(self) -> list[str]:
        return [self.namespace(i) for i in self.indices]

    def _check(self, index: int) -> None:
        if not 1 <= index <= self.nodes:
            raise ValueError(f"node {index} is outside 1..{self.nodes} of {self.cluster!r}")

    def as_json(self) -> dict[str, object]:
        return {
            "subnet": self.subnet,
            "bridge": self.bridge,
            "host_address": self.host_address,
            "namespaces": {self.namespace(i): self.address(i) for i in self.indices},
        }


def setup_commands(plan: NetnsPlan) -> list[list[str]]:
    """The ``ip`` argument lists (without ``ip``) that build the plan's network, in order.

    ``addrgenmode none`` keeps IPv6 link-local addresses (and their chatter) off our links.
    """
    prefix = plan.network.prefixlen
    cmds = [
        ["link", "add", plan.bridge, "type", "bridge"],
        ["link", "set", "dev", plan.bridge, "alias", ALIAS_PREFIX + plan.cluster],
        ["link", "set", "dev", plan.bridge, "addrgenmode", "none"],
        ["addr", "add", f"{plan.host_address}/{prefix}", "dev", plan.bridge],
        ["link", "set", "dev", plan.bridge, "up"],
    ]
    for i in plan.indices:
        ns, veth = plan.namespace(i), plan.veth(i)
        cmds += [
            ["netns", "add", ns],
            ["-n", ns, "link", "set", "dev", "lo", "up"],
            ["link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns],
            ["link", "set", "dev", veth, "addrgenmode", "none"],
            ["link", "set", "dev", veth, "master", plan.bridge],
            ["link", "set", "dev", veth, "up"],
            ["-n", ns, "link", "set", "dev", "eth0", "addrgenmode", "none"],
            ["-n", ns, "addr", "add", f"{plan.address(i)}/{prefix}", "dev", "eth0"],
            ["-n", ns, "link", "set", "dev", "eth0", "up"],
        ]
    return cmds


def namespace_pattern(cluster: str) -> re.Pattern[str]:
    """Every namespace a cluster of this name may have left, whatever its size was."""
    return re.compile(rf"^{re.escape(namespace_of(cluster, 0)[:-1])}[1-9]$")


NETNS_CAPABILITIES = {"CAP_NET_ADMIN": CAP_NET_ADMIN, "CAP_SYS_ADMIN": CAP_SYS_ADMIN}


def missing_capabilities(capeff: int, wanted: Mapping[str, int] = NETNS_CAPABILITIES
                         ) -> list[str]:
    """The capabilities of ``wanted`` (netns mode's by default) that the effective set
    ``capeff`` lacks."""
    return [name for name, bit in wanted.items() if not capeff >> bit & 1]


# ---------------------------------------------------------------------- the shell


def tool(name: str, package: str) -> str:
    """The path of ``name`` on PATH; PackageMissingError naming ``package`` otherwise."""
    found = shutil.which(name, path=os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"))
    if found is None:
        raise PackageMissingError(
            f"{name} is missing: install the Debian package {package} "
            f"(`apt-get install -y {package}`, or `make deps`)"
        )
    return found


def ip_binary() -> str:
    return tool("ip", "iproute2")


def effective_capabilities() -> int:
    """This process's effective capability set (0 when ``/proc`` does not say)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


def check_privileges() -> None:
    """Raise ServerError unless this process may create namespaces and links."""
    missing = missing_capabilities(effective_capabilities())
    if missing:
        raise ServerError(
            "netns mode needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN, to create network "
            f"namespaces, a bridge and veth pairs); this process lacks {', '.join(missing)}. "
            "Run as root, or use network='loopback'."
        )


def run(argv: Sequence[str], *, stdin: str | None = None, timeout: float = 30.0) -> str:
    """Run a command; CommandError with its stderr when it fails."""
    try:
        done = subprocess.run(
            list(argv), input=stdin, capture_output=True, text=True, timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise CommandError(f"`{' '.join(argv)}` did not finish within {timeout:g} s") from exc
    if done.returncode != 0:
        raise CommandError(
            f"`{' '.join(argv)}` failed (exit {done.returncode}): {done.stderr.strip()[-500:]}"
        )
    return done.stdout


def ip(*args: str) -> str:
    return run([ip_binary(), *args])


def exec_argv(namespace: str, argv: Sequence[str]) -> list[str]:
    """``argv`` run inside ``namespace`` (``ip netns exec`` execs: the pid stays the same)."""
    return [ip_binary(), "netns", "exec", namespace, *argv]


def run_in(namespace: str, argv: Sequence[str], *, stdin: str | None = None,
           timeout: float = 30.0) -> str:
    """Run ``argv`` inside ``namespace`` and return its output; CommandError on failure."""
    return run(exec_argv(namespace, argv), stdin=stdin, timeout=timeout)


def _json(text: str) -> list[dict[str, object]]:
    # ``ip -j netns list`` prints nothing at all when there is no namespace.
    data = json.loads(text) if text.strip() else []
    return data if isinstance(data, list) else []


def namespaces() -> set[str]:
    return {str(n["name"]) for n in _json(ip("-j", "netns", "list"))}


def links() -> dict[str, str]:
    """Every link of the host namespace, by name, with its alias ('' when none)."""
    return {str(n["ifname"]): str(n.get("ifalias", "")) for n in _json(ip("-j", "link", "show"))}


def routed_networks() -> list[ipaddress.IPv4Network]:
    """The destinations of the host's IPv4 routes (the default route aside)."""
    nets = []
    for route in _json(ip("-j", "-4", "route", "show", "table", "all")):
        dst = str(route.get("dst", "default"))
        if dst == "default":
            continue
        with contextlib.suppress(ValueError):
            nets.append(ipaddress.IPv4Network(dst, strict=False))
    return nets


def namespace_pids(namespace: str) -> list[int]:
    try:
        out = ip("netns", "pids", namespace)
    except CommandError:
        return []
    return [int(p) for p in out.split()]


NETNS_DIR = Path("/run/netns")  # where ``ip netns add`` mounts a named namespace
Identity = tuple[int, int]
"""A network namespace as the kernel tells it apart: (device, inode) of its nsfs file."""


def _identity(path: str | Path) -> Identity | None:
    try:
        st = os.stat(path)
    except OSError:  # gone meanwhile, or a process that exited
        return None
    return st.st_dev, st.st_ino


def check_not_host(namespace: str, host: Iterable[Identity | None]) -> None:
    """Raise unless ``namespace`` is a namespace of its own, none of ``host`` (init's and our
    own): a name is only a mount point, and ``ip netns attach <name> 1`` makes it the host's,
    whose processes (the whole machine) we must never signal."""
    ident = _identity(NETNS_DIR / namespace)
    if ident is not None and ident in set(host):
        raise ServerError(
            f"network namespace {namespace} is the host's network namespace (same inode as "
            f"/proc/1/ns/net or ours), not one a cluster made: refusing to stop its processes; "
            f"remove the name with `ip netns del {namespace}`"
        )


def host_identities() -> list[Identity | None]:
    return [_identity("/proc/1/ns/net"), _identity("/proc/self/ns/net")]


def _members(namespace: str) -> list[int]:
    """pidfds of the processes inside ``namespace``, each checked to be inside it once its
    pidfd was open: a pid listed by ``ip netns pids`` may have ended and been reused by a
    process elsewhere before we open it; a pidfd keeps naming the process it was opened on.
    The caller has checked that ``namespace`` is not the host's (``check_not_host``)."""
    ident = _identity(NETNS_DIR / namespace)
    fds: list[int] = []
    for pid in namespace_pids(namespace):
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # ended meanwhile
            continue
        if ident is not None and _identity(f"/proc/{pid}/ns/net") == ident:
            fds.append(fd)
        else:
            os.close(fd)
    return fds


def _stop_members(fds: list[int], grace: float) -> None:
    """SIGTERM each process, SIGKILL what is left after ``grace``; waits on the pidfds (one
    becomes readable when its process exits), bounded."""
    left = list(fds)
    try:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for fd in left:
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(fd, sig)
            left = _wait_exited(left, grace)
    finally:
        for fd in fds:
            os.close(fd)


def _wait_exited(fds: list[int], timeout: float) -> list[int]:
    """The pidfds whose process still runs after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    left = set(fds)
    poller = select.poll()
    for fd in left:
        poller.register(fd, select.POLLIN)
    while left and (remaining := deadline - time.monotonic()) > 0:
        for fd, _event in poller.poll(remaining * 1000):
            poller.unregister(fd)
            left.discard(fd)
    return [fd for fd in fds if fd in left]


@attrs.frozen
class Leftovers:
    """What of a cluster's network exists right now, in the host's view."""

    namespaces: tuple[str, ...]
    links: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.namespaces or self.links)


def leftovers(cluster: str) -> Leftovers:
    pattern = namespace_pattern(cluster)
    key = key_of(cluster)
    ours = re.compile(rf"^sac(b{key}|{key}v[1-9])$")
    return Leftovers(
        namespaces=tuple(sorted(n for n in namespaces() if pattern.match(n))),
        links=tuple(sorted(n for n in links() if ours.match(n))),
    )


def create(plan: NetnsPlan) -> None:
    """Build the plan's bridge, namespaces and veth pairs (``remove`` undoes a partial one)."""
    exe = ip_binary()
    for args in setup_commands(plan):
        run([exe, *args])


def _foreign_pids(namespace: str, state_dir: Path) -> list[tuple[int, str | None]]:
    return [
        (pid, mark)
        for pid in namespace_pids(namespace)
        if _proc.is_alive(pid) and (mark := _proc.marker_of(pid)) != str(state_dir)
        and not (mark or "").startswith(str(state_dir) + os.sep)
    ]


def check_unused(cluster: str, state_dir: Path) -> None:
    """Raise if a namespace of this name holds processes another state home started, or the
    bridge's name is taken by a link that is not ours: removing them would hurt another run."""
    for ns in leftovers(cluster).namespaces:
        foreign = [(pid, mark) for pid, mark in _foreign_pids(ns, state_dir) if mark]
        if foreign:
            raise ServerError(
                f"network namespace {ns} is in use by processes {[p for p, _ in foreign]} of "
                f"the cluster in {foreign[0][1]}: stop that cluster first (cluster names are "
                "machine-wide in netns mode)"
            )
    bridge = bridge_of(cluster)
    alias = links().get(bridge)
    if alias is not None and alias != ALIAS_PREFIX + cluster:
        raise ServerError(
            f"link {bridge} exists and is not the bridge of cluster {cluster!r} "
            f"(alias {alias!r}); delete it or choose another cluster name"
        )


def remove(cluster: str, state_dir: Path) -> None:
    """Delete every namespace, veth and the bridge of ``cluster``; verify nothing is left.

    Processes still inside a namespace keep it alive: those of ``state_dir`` or without a
    marker (a stray ``ip netns exec``) are killed first, through pidfds; another state
    home's are never touched (``check_unused`` refuses before), nor a namespace that is the
    host's under one of our names (``check_not_host``).
    """
    found = leftovers(cluster)
    host = host_identities()
    for ns in found.namespaces:
        check_not_host(ns, host)
    check_unused(cluster, state_dir)
    # Signalled one by one, not by group: a stray process need not lead a group, and its
    # group may reach outside the namespace.
    fds: list[int] = []
    try:
        for ns in found.namespaces:
            fds += _members(ns)
    except BaseException:
        for fd in fds:  # listing a later namespace failed: nothing is signalled
            os.close(fd)
        raise
    _stop_members(fds, 5.0)
    exe = ip_binary()
    # Deleting the host end of a veth deletes its peer; the bridge goes last.
    for link in sorted(found.links, key=lambda name: name.startswith("sacb")):
        with contextlib.suppress(CommandError):
            run([exe, "link", "del", "dev", link])
    for ns in found.namespaces:
        with contextlib.suppress(CommandError):
            run([exe, "netns", "del", ns])
    # The kernel frees a namespace (and links in it) asynchronously: wait, bounded.
    deadline = time.monotonic() + 10.0
    while (left := leftovers(cluster)) and time.monotonic() < deadline:
        time.sleep(0.05)
    if left:
        raise ServerError(
            f"cluster {cluster!r}: could not remove namespaces {list(left.namespaces)} and "
            f"links {list(left.links)}; delete them with `ip netns del` / `ip link del`"
        )


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM while cleanup runs, then deliver them: a second Ctrl-C must not
    leave namespaces half deleted. Only the main thread may set handlers; elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {sig: signal.getsignal(sig) or signal.SIG_DFL
                for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda signum, _frame: caught.append(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if caught:
            signal.raise_signal(caught[0])
