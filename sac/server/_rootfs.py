"""RabbitMQ 4.0 from a minimal Debian 13 root filesystem, built once, cached, checked.

Why a root filesystem: the newest RabbitMQ installable here is Debian 13's 4.0.5, which
needs Erlang 27; Debian 12 (the host) has neither. ``mmdebstrap --variant=minbase`` makes a
240 MB Debian 13 tree holding ``rabbitmq-server`` in about 30 s, and each process of a node
(epmd, the node, each CLI call) runs inside it through ``chroot``, in a mount namespace of its
own (``unshare --mount``) where ``/proc`` is mounted privately, the tree itself is read-only,
``/tmp`` is a private tmpfs and the cluster's directory is bound at ``/sac``. The network
namespace stays the host's (or the node's own in netns mode): nodes listen on their ports
as 3.10 nodes do, and no process sees any other pid namespace than the host's, so the pids in
pid files are the host's pids.

Where the tree lives: ``$SAC_CACHE_DIR`` or ``/var/cache/sac`` (``rootfs-rabbitmq-4.0``).
``/var/cache`` is where the FHS puts data a program can build again; one machine-wide tree
serves every state home (each pytest session has a temporary one) and every cluster, so it
is built once per machine, not once per run.

Never half-used: a build goes into a temporary directory beside the cache, is checked
(``problems``: the server, CLI, epmd and Erlang present, the version the series names), gets a
stamp, and only then is renamed into place, atomically. A tree that fails the check (an
interrupted build of an older layout, a removed binary) is moved aside and built again. An
exclusive ``flock`` on a lock file beside it makes concurrent ``up``s wait for one build.

Pure: ``mmdebstrap_argv``, ``chroot_argv``, ``problems``' rules; the rest is a thin shell.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs

from ._errors import CommandError, PackageMissingError, ServerError
from ._netns import CAP_SYS_ADMIN, effective_capabilities, missing_capabilities

SERIES = ("3.10", "4.0")
"""The RabbitMQ series ``LocalCluster(rabbitmq=...)`` runs: 3.10 from the host's Debian 12
package, 4.0 from a Debian 13 root filesystem."""
DEFAULT_SERIES = "4.0"
"""What a cluster runs unless told otherwise: 4.0, the series our users run (3.10 reached its
end of life in 2023; it stays for what 4.0 removed, classic mirrored queues)."""
SUITE = {"4.0": "trixie"}
"""The Debian suite whose ``rabbitmq-server`` is each series that needs a tree of its own."""
PACKAGES = ("rabbitmq-server", "ca-certificates")
RABBITMQ_DIR = Path("/usr/lib/rabbitmq")
EPMD = Path("/usr/lib/erlang/bin/epmd")
MOUNT_POINT = Path("/sac")
"""Where a node sees its cluster's directory (bound there in its private mount namespace)."""
STAMP = ".sac-rootfs.json"
DEFAULT_CACHE = Path("/var/cache/sac")
BUILD_TIMEOUT = 900.0
"""mmdebstrap downloads about 70 MB: 30 s here, minutes on a slow mirror."""


CAP_SYS_CHROOT = 18
CAPABILITIES = {"CAP_SYS_ADMIN": CAP_SYS_ADMIN, "CAP_SYS_CHROOT": CAP_SYS_CHROOT}
"""``unshare --mount`` and ``mount`` need the first, ``chroot`` the second."""


def check_privileges(series: str) -> None:
    """Raise ServerError unless this process may run a node inside a root filesystem."""
    missing = missing_capabilities(effective_capabilities(), CAPABILITIES)
    if missing:
        raise ServerError(
            f"RabbitMQ {series} runs in a Debian {SUITE[series]} root filesystem through "
            "unshare --mount and chroot, which need root (CAP_SYS_ADMIN and CAP_SYS_CHROOT); "
            f"this process lacks {', '.join(missing)}. Run as root, or use rabbitmq='3.10'.")


def cache_dir() -> Path:
    """``$SAC_CACHE_DIR`` or ``/var/cache/sac``: where built trees are kept."""
    return Path(os.environ.get("SAC_CACHE_DIR") or DEFAULT_CACHE)


def tree_name(series: str) -> str:
    return f"rootfs-rabbitmq-{series}"


def server_version(rabbitmq_dir: Path) -> str | None:
    """The RabbitMQ version installed under ``rabbitmq_dir`` (``lib/rabbitmq_server-X``)."""
    found = sorted(rabbitmq_dir.glob("lib/rabbitmq_server-*"))
    if not found:
        return None
    return found[-1].name.removeprefix("rabbitmq_server-")


def in_series(version: str, series: str) -> bool:
    """True if ``version`` (``4.0.5``) belongs to ``series`` (``4.0``)."""
    return re.fullmatch(re.escape(series) + r"(\.\d+)*", version) is not None


def problems(root: Path, series: str) -> list[str]:
    """What keeps ``root`` from running RabbitMQ ``series`` (empty: it can)."""
    found = []
    for program in (RABBITMQ_DIR / "bin" / "rabbitmq-server", RABBITMQ_DIR / "bin" / "rabbitmqctl",
                    EPMD, Path("/usr/bin/erl"), Path("/bin/sh"), Path("/usr/bin/df")):
        if not os.access(root / program.relative_to("/"), os.X_OK):
            found.append(f"{program} is missing")
    for directory in (MOUNT_POINT, Path("/proc"), Path("/tmp")):
        if not (root / directory.relative_to("/")).is_dir():
            found.append(f"{directory} is not a directory")
    version = server_version(root / RABBITMQ_DIR.relative_to("/"))
    if version is None or not in_series(version, series):
        found.append(f"RabbitMQ there is {version or 'absent'}, not {series}")
    stamp = _read_stamp(root)
    if stamp is None or stamp.get("version") != version:
        found.append(f"no build stamp {STAMP} for this version (an interrupted build?)")
    return found


def _read_stamp(root: Path) -> dict[str, object] | None:
    try:
        data = json.loads((root / STAMP).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def mmdebstrap_argv(mmdebstrap: str, suite: str, target: Path) -> list[str]:
    return [mmdebstrap, "--variant=minbase", "--include=" + ",".join(PACKAGES), suite,
            str(target)]


def chroot_argv(unshare: str, root: Path, state_dir: Path, argv: Sequence[str]) -> list[str]:
    """``argv`` run inside ``root``, in a mount namespace of its own: the tree read-only,
    ``/proc`` and ``/tmp`` its own, ``state_dir`` bound read-write at ``/sac``.

    ``unshare`` without ``--fork`` and ``sh``'s ``exec``: the pid we spawn stays the pid of
    ``argv``, so pid records and process groups hold as for a host process."""
    script = ('mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" '
              '&& mount -t proc proc "$1/proc" && mount -t tmpfs -o mode=1777 tmpfs "$1/tmp" '
              f'&& mount --bind "$2" "$1{MOUNT_POINT}" && root="$1" && shift 2 '
              '&& exec chroot "$root" "$@"')
    return [unshare, "--mount", "--propagation", "private", "sh", "-c", script, "sh",
            str(root), str(state_dir), *argv]


@attrs.frozen
class Rootfs:
    """A checked tree: where it is, the RabbitMQ version it holds, whether this call built it."""

    path: Path
    version: str
    built: bool = False


def ensure(series: str, cache: Path | None = None) -> Rootfs:
    """The tree for ``series`` under ``cache`` (``cache_dir()``), built first if it is missing
    or fails the check; one build at a time per tree (a lock), never a half-built one used."""
    if series not in SUITE:
        raise ValueError(f"RabbitMQ {series} needs no root filesystem of its own")
    # Absolute: nodes are spawned in their cluster's directory, and mount reads it from there.
    base = (cache_dir() if cache is None else cache).resolve()
    base.mkdir(parents=True, exist_ok=True)
    final = base / tree_name(series)
    with _locked(base / (tree_name(series) + ".lock")):
        if not problems(final, series):
            return Rootfs(final, _version(final))
        _build(series, base, final)
        return Rootfs(final, _version(final), built=True)


def _version(root: Path) -> str:
    version = server_version(root / RABBITMQ_DIR.relative_to("/"))
    assert version is not None  # problems() checked it
    return version


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _build(series: str, base: Path, final: Path) -> None:
    mmdebstrap = shutil.which("mmdebstrap")
    if mmdebstrap is None:
        raise PackageMissingError(
            f"RabbitMQ {series} runs from a Debian {SUITE[series]} root filesystem that "
            "mmdebstrap builds, and mmdebstrap is missing: install the Debian package "
            "mmdebstrap (`apt-get install -y mmdebstrap`, or `make deps`)")
    # Leftovers of interrupted builds (killed mid-way, the lock released with the process).
    for stale in base.glob(f".{tree_name(series)}.*"):
        shutil.rmtree(stale, ignore_errors=True)
    work = Path(tempfile.mkdtemp(prefix=f".{tree_name(series)}.build-", dir=base))
    work.chmod(0o755)  # apt downloads as _apt, who must reach the tree's lists
    target = work / "root"
    log = base / (tree_name(series) + ".build.log")  # kept: the last build's, for reading
    started = time.monotonic()
    try:
        with open(log, "w") as out:
            done = subprocess.run(mmdebstrap_argv(mmdebstrap, SUITE[series], target),
                                  stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=BUILD_TIMEOUT, check=False)
        if done.returncode != 0:
            last = log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
            raise CommandError(
                f"mmdebstrap (Debian {SUITE[series]} for RabbitMQ {series}) failed "
                f"(exit {done.returncode}): {last[0][-300:]}")
        for directory in (MOUNT_POINT, Path("/proc"), Path("/tmp")):
            (target / directory.relative_to("/")).mkdir(exist_ok=True)
        version = server_version(target / RABBITMQ_DIR.relative_to("/"))
        (target / STAMP).write_text(json.dumps({
            "series": series, "version": version, "suite": SUITE[series],
            "packages": list(PACKAGES), "seconds": round(time.monotonic() - started, 1),
        }) + "\n")
        wrong = problems(target, series)
        if wrong:
            raise ServerError(
                f"the Debian {SUITE[series]} root filesystem just built cannot run RabbitMQ "
                f"{series}: {'; '.join(wrong)}")
        if final.exists() or final.is_symlink():
            final.rename(work / "replaced")
        target.rename(final)
    except subprocess.TimeoutExpired as exc:
        raise CommandError(
            f"mmdebstrap (Debian {SUITE[series]}) did not finish within {BUILD_TIMEOUT:g} s; "
            f"see {log}") from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)
