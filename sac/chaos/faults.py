"""The nemesis: every fault a scenario injects, recorded as ``fault_start``/``fault_end`` in
``events/nemesis.jsonl`` so the checker can measure recovery from it.

Network faults go through ``toxiproxy-python`` only, so a run works unchanged against a real
Toxiproxy: with ``TOXIPROXY_URL`` set (``http://host:8474``) that server is used, otherwise
our own (``sac.chaos.proxy``) runs in this process. Process faults are signals to actor processes;
node faults go through ``sac.server.LocalCluster``.
"""

from __future__ import annotations

import contextlib
import os
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from toxiproxy import Toxiproxy
from toxiproxy.proxy import Proxy

from sac.history import FaultEnd, FaultStart
from sac.sdk import HistoryRecorder
from .errors import ChaosError
from .proxy import ProxyThread


class FaultProxy:
    """One Toxiproxy proxy per (client actor, broker node), named ``<run>-<actor>-n<i>``."""

    def __init__(self, prefix: str, url: str | None = None) -> None:
        self.prefix = prefix
        url = url if url is not None else os.environ.get("TOXIPROXY_URL")
        self._thread: ProxyThread | None = None
        if url:
            parts = urllib.parse.urlsplit(url)
            if not parts.hostname or not parts.port:
                raise ChaosError(f"TOXIPROXY_URL must be http://host:port, got {url!r}")
            host, port = parts.hostname, parts.port
        else:
            self._thread = ProxyThread().start()
            host, port = "127.0.0.1", self._thread.port
        self.url = f"http://{host}:{port}"
        self.client = Toxiproxy()
        self.client.update_api_consumer(host, port)
        if not self.client.running():
            raise ChaosError(f"no Toxiproxy API answers at {self.url}")
        self._proxies: dict[tuple[str, int], Proxy] = {}

    def route(self, actor: str, node: int, upstream: str, host: str = "127.0.0.1") -> str:
        """The ``host:port`` through which ``actor`` reaches ``node`` at ``upstream``;
        ``host``: where the proxy listens (a broker in a network namespace reaches the host
        at its bridge address only)."""
        proxy = self.client.create(upstream=upstream, name=f"{self.prefix}-{actor}-n{node}",
                                   listen=f"{host}:0")
        self._proxies[(actor, node)] = proxy
        return str(proxy.listen)

    def node_of(self, actor: str, listen: str) -> int | None:
        """The node ``actor`` reaches through its proxy at ``listen`` (``host:port``, as its
        ``connected`` events name it)."""
        for (name, node), proxy in self._proxies.items():
            if name == actor and str(proxy.listen) == listen:
                return node
        return None

    def routes(self) -> dict[str, dict[str, int]]:
        """Per actor, which node each of its proxy addresses leads to (its events name the
        proxy's address as the ``node`` of a connection)."""
        found: dict[str, dict[str, int]] = {}
        for (actor, node), proxy in sorted(self._proxies.items()):
            found.setdefault(actor, {})[str(proxy.listen)] = node
        return found

    def of(self, actor: str) -> list[Proxy]:
        return [p for (a, _), p in sorted(self._proxies.items()) if a == actor]

    def add(self, actor: str, toxic: str, *, stream: str = "downstream",
            attributes: dict[str, Any] | None = None, name: str | None = None) -> str:
        label = name or f"{toxic}_{stream}"
        for proxy in self.of(actor):
            proxy.add_toxic(type=toxic, stream=stream, name=label, toxicity=1.0,
                            attributes=attributes or {})
        return label

    def remove(self, actor: str, name: str) -> None:
        for proxy in self.of(actor):
            with contextlib.suppress(Exception):
                proxy.destroy_toxic(name)

    def close(self) -> None:
        for proxy in self._proxies.values():
            with contextlib.suppress(Exception):
                proxy.destroy()
        self._proxies.clear()
        if self._thread is not None:
            self._thread.stop()
            self._thread = None


class Nemesis:
    """Records faults; the fault itself is done by the caller inside ``fault(...)``, which
    records ``fault_end`` when the block exits, also on error (the heal runs first)."""

    def __init__(self, run_dir: Path) -> None:
        self.recorder = HistoryRecorder(run_dir / "events" / "nemesis.jsonl", "nemesis",
                                        flush_every=1)
        self.faults = 0

    @contextlib.contextmanager
    def fault(self, fault: str, target: str, **params: Any) -> Iterator[None]:
        self.faults += 1
        self.recorder.record(FaultStart(fault=fault, target=target, params=params))
        try:
            yield
        finally:
            self.recorder.record(FaultEnd(fault=fault, target=target, params=params))

    def close(self) -> None:
        self.recorder.close()
