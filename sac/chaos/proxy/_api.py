"""The Toxiproxy 2.x HTTP API: routes requests to the proxies this process holds.

``Api.handle(method, path, body)`` returns ``(status, payload)``; errors are ``ApiError``
rendered as ``{"error", "status"}``.
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

from ._model import ApiError, ProxySpec, parse_proxy, parse_toxic, update_proxy
from ._model import update_toxic as apply_toxic_update
from ._relay import Proxy

VERSION = "2.9.0-sac"

Answer = tuple[int, Any]


def _proxy_json(proxy: Proxy) -> dict[str, Any]:
    return {
        "name": proxy.spec.name,
        "listen": proxy.listen,
        "upstream": proxy.spec.upstream,
        "enabled": proxy.spec.enabled,
        "toxics": [t.to_json() for t in proxy.toxic_list()],
    }


MAX_DEPTH = 16
"""How deeply a body's arrays and objects may nest: the API's own bodies nest three deep
(``/populate``: a list of proxies, each with toxics' attributes)."""


def _depth(value: Any) -> int:
    """How deeply ``value``'s lists and dicts nest (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item \
            if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth + 1)
        if deepest > MAX_DEPTH:
            break
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _decode(body: bytes) -> Any:
    if not body.strip():
        return {}
    try:
        value = json.loads(body)
    except RecursionError:  # the parser's own limit, far below what a body may hold
        raise ApiError(400, f"body is not JSON this API takes: nested over {MAX_DEPTH} "
                            "deep") from None
    except ValueError as exc:  # UnicodeDecodeError too
        raise ApiError(400, f"body is not JSON: {exc}") from exc
    if _depth(value) > MAX_DEPTH:
        raise ApiError(400, f"body is not JSON this API takes: nested over {MAX_DEPTH} deep")
    return value


class Api:
    def __init__(self, rng: random.Random | None = None) -> None:
        self.proxies: dict[str, Proxy] = {}
        self._rng = rng or random.Random()
        self._lock = asyncio.Lock()  # one change at a time: listeners start and stop

    async def handle(self, method: str, path: str, body: bytes) -> Answer:
        parts = [p for p in path.split("/") if p]
        async with self._lock:
            return await self._route(method, parts, body)

    async def _route(self, method: str, parts: list[str], body: bytes) -> Answer:
        match method, parts:
            case "GET", ["version"]:
                return 200, {"version": VERSION}
            case "POST", ["reset"]:
                await self.reset()
                return 204, None
            case "GET", ["proxies"]:
                return 200, {name: _proxy_json(p) for name, p in self.proxies.items()}
            case "POST", ["proxies"]:
                proxy = await self.create(parse_proxy(_decode(body)))
                return 201, _proxy_json(proxy)
            case "POST", ["populate"]:
                return 201, {"proxies": await self.populate(_decode(body))}
            case "GET", ["proxies", name]:
                return 200, _proxy_json(self._proxy(name))
            case ("POST" | "PATCH"), ["proxies", name]:
                return 200, _proxy_json(await self.update(name, _decode(body)))
            case "DELETE", ["proxies", name]:
                await self.delete(name)
                return 204, None
            case "GET", ["proxies", name, "toxics"]:
                return 200, [t.to_json() for t in self._proxy(name).toxic_list()]
            case "POST", ["proxies", name, "toxics"]:
                return 200, self.add_toxic(name, _decode(body))
            case "GET", ["proxies", name, "toxics", toxic]:
                return 200, self._toxic(name, toxic).to_json()
            case ("POST" | "PATCH"), ["proxies", name, "toxics", toxic]:
                return 200, self.update_toxic(name, toxic, _decode(body))
            case "DELETE", ["proxies", name, "toxics", toxic]:
                self.delete_toxic(name, toxic)
                return 204, None
        raise ApiError(404, f"no route for {method} /{'/'.join(parts)}")

    def _proxy(self, name: str) -> Proxy:
        try:
            return self.proxies[name]
        except KeyError:
            raise ApiError(404, "proxy not found") from None

    def _toxic(self, proxy: str, name: str) -> Any:
        try:
            return self._proxy(proxy).toxics[name]
        except KeyError:
            raise ApiError(404, "toxic not found") from None

    async def _start(self, proxy: Proxy) -> None:
        try:
            await proxy.start()
        except OSError as exc:
            raise ApiError(500, f"proxy {proxy.spec.name}: cannot listen on {proxy.listen}: {exc}"
                           ) from exc

    async def create(self, spec: ProxySpec) -> Proxy:
        if spec.name in self.proxies:
            raise ApiError(409, "proxy already exists")
        proxy = Proxy(spec, self._rng)
        await self._start(proxy)
        self.proxies[spec.name] = proxy
        return proxy

    async def populate(self, body: Any) -> list[dict[str, Any]]:
        if not isinstance(body, list):
            raise ApiError(400, "populate: expected a JSON list of proxies")
        specs = [parse_proxy(item) for item in body]  # all valid before any change
        answer = []
        for spec in specs:
            existing = self.proxies.get(spec.name)
            if existing is not None and existing.spec != spec:
                await self.delete(spec.name)
                existing = None
            proxy = existing or await self.create(spec)
            answer.append(_proxy_json(proxy))
        return answer

    async def update(self, name: str, body: Any) -> Proxy:
        proxy = self._proxy(name)
        spec = update_proxy(proxy.spec, body)
        if spec == proxy.spec:
            return proxy
        address_changed = (spec.listen, spec.upstream) != (proxy.spec.listen, proxy.spec.upstream)
        if address_changed or not spec.enabled:
            await proxy.stop()
        if spec.listen != proxy.spec.listen:
            proxy.bound = None
        proxy.spec = spec
        await self._start(proxy)
        return proxy

    async def delete(self, name: str) -> None:
        proxy = self._proxy(name)
        await proxy.stop()
        del self.proxies[name]

    async def reset(self) -> None:
        for proxy in self.proxies.values():
            removed = proxy.toxic_list()
            proxy.toxics.clear()
            for toxic in removed:
                proxy.toxics_changed(removed=toxic)
            if not proxy.spec.enabled:
                await self.update(proxy.spec.name, {"enabled": True})

    def add_toxic(self, name: str, body: Any) -> dict[str, Any]:
        proxy = self._proxy(name)
        toxic = parse_toxic(body)
        if toxic.name in proxy.toxics:
            raise ApiError(409, "toxic already exists")
        proxy.toxics[toxic.name] = toxic
        proxy.toxics_changed()
        return toxic.to_json()

    def update_toxic(self, name: str, toxic_name: str, body: Any) -> dict[str, Any]:
        proxy = self._proxy(name)
        old = self._toxic(name, toxic_name)
        new = apply_toxic_update(old, body)
        proxy.toxics[toxic_name] = new
        proxy.toxics_changed(removed=old)
        return new.to_json()

    def delete_toxic(self, name: str, toxic_name: str) -> None:
        proxy = self._proxy(name)
        removed = self._toxic(name, toxic_name)
        del proxy.toxics[toxic_name]
        proxy.toxics_changed(removed=removed)

    async def close(self) -> None:
        for proxy in list(self.proxies.values()):
            await proxy.stop()
