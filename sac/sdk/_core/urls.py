"""URLs as the SDK takes them: checked, and shown without their password.

An AMQP URL and a management API URL are checked alike (scheme, host, port) and never
shown with their password, not even in the error that refuses them.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence

from .._errors import ConfigurationError


def split_url(url: str, schemes: Sequence[str], what: str) -> urllib.parse.SplitResult:
    """``url``'s parts if it has one of ``schemes``, a host and a valid port; otherwise a
    ConfigurationError naming ``what`` and the URL with its password masked."""
    if not isinstance(url, str) or not url.strip():
        raise ConfigurationError(f"{what} must be a non-empty string, got {type(url).__name__}")
    parts = urllib.parse.urlsplit(url.strip())
    shown = mask_url(url)
    if parts.scheme not in schemes:
        ways = " or ".join(f"{s}://" for s in schemes)
        raise ConfigurationError(f"{what} {shown!r} must start with {ways}, not {parts.scheme!r}")
    if not parts.hostname:
        raise ConfigurationError(f"{what} {shown!r} has no host")
    try:
        port = parts.port
    except ValueError:
        # not chained: urllib's message quotes the port text, which is part of the password
        # when the password holds an unescaped '/'
        raise ConfigurationError(f"{what} {shown!r} has an invalid port") from None
    if port == 0:
        raise ConfigurationError(f"{what} {shown!r} has an invalid port 0")
    return parts


def mask_url(url: str) -> str:
    """The URL with its password replaced by ``***``: safe to log."""
    try:
        parts = urllib.parse.urlsplit(url)
        if parts.password is None:
            if "@" in url and "@" not in parts.netloc:
                # user info the parser did not see as such (no scheme, an unescaped '/' in
                # the password, ...): hide everything before the last '@'
                head, _, tail = url.rpartition("@")
                scheme = head.partition("://")[0] + "://" if "://" in head else ""
                return f"{scheme}***@{tail}"
            return url
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = f"{parts.username}:***@{host}"
        if parts.port is not None:
            netloc += f":{parts.port}"
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        return "<unparseable URL>"
