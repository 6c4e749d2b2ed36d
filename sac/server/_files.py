"""Where a server set keeps its state, and how secrets are written.

One directory per cluster (``<home>/<name>/``, the home being ``default_home()``) holds config,
data, logs, pid records and credentials, so ``rm -r`` of it is a complete reset and two
clusters never share a file.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path
from typing import Any

import attrs

NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,23}$")


ROOT_HOME = Path("/var/lib/sac")
HOME_HELP = ("servers' state directory (default: $SAC_HOME; else /var/lib/sac as root, "
             "$XDG_STATE_HOME/sac or ~/.local/state/sac otherwise)")


def default_home() -> Path:
    """Where servers keep their state when no ``home`` is given: ``$SAC_HOME``; else
    ``/var/lib/sac`` for root; else ``$XDG_STATE_HOME/sac`` (``~/.local/state/sac``).

    Why one place, whatever the working directory: ``sac server status`` run from anywhere
    must find the cluster ``sac server up`` started. Why not under root's home: the servers
    drop to their own users (PostgreSQL runs as ``postgres``) and ``/root`` is mode 0700, so
    nothing under it could be theirs."""
    env = os.environ.get("SAC_HOME")
    if env:
        return Path(env).expanduser().resolve()
    if os.geteuid() == 0:
        return ROOT_HOME
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "state"
    return (base / "sac").resolve()


def check_name(value: object, what: str = "name") -> str:
    """``value`` if it can name a server's state directory (``home/<name>``), else ValueError.

    Why: ``up()`` wipes ``home/<name>`` with ``rmtree`` before it starts afresh, so a name
    like ``../x`` or ``/etc`` would reach outside the home. The same short alphabet also keeps
    names within the kernel's limits where they end up in interface and namespace names."""
    if not isinstance(value, str) or not NAME_RE.fullmatch(value):
        raise ValueError(
            f"{what} {value!r} is not valid: use 1-24 characters, lower-case letters, "
            "digits and '-', starting with a letter"
        )
    return value


def validate_name(_inst: object, attribute: attrs.Attribute[str], value: str) -> None:
    """``check_name`` as an attrs validator."""
    check_name(value, attribute.name)


@attrs.frozen
class Credentials:
    """The one user a cluster has (guest is never created). The password never shows in repr."""

    user: str
    password: str = attrs.field(repr=lambda _: "'***'")

    @classmethod
    def generate(cls, cluster: str) -> Credentials:
        return cls(user=f"sac-{cluster}", password=secrets.token_urlsafe(24))


def write_secret(path: Path, text: str, mode: int = 0o600) -> None:
    """Create ``path`` with ``mode`` before any byte is written, so no reader sees it open."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.chmod(0o600)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    path.chmod(mode)


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write atomically: a concurrent ``status`` never reads half a file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    if not isinstance(data, dict):
        raise ValueError(f"{path} does not hold a JSON object")
    return data


def tail(path: Path, lines: int = 20) -> str:
    """The last lines of a log, for error messages."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
