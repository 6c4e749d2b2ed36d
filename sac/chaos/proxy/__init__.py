"""A fault proxy that speaks the Toxiproxy 2.x HTTP API (docs/guides/chaos.md, "The fault
proxy"): one asyncio process on loopback, driven by any Toxiproxy client
(``toxiproxy-python``).

>>> with ProxyThread() as proxy:  # doctest: +SKIP
...     Toxiproxy().update_api_consumer("127.0.0.1", proxy.port)
"""

from ._api import VERSION, Api
from ._http import ApiLimits
from ._model import TOXIC_TYPES, ApiError, ProxySpec, Toxic, is_loopback
from ._server import ApiServer, ProxyThread, serve, start

__all__ = [
    "TOXIC_TYPES",
    "VERSION",
    "Api",
    "ApiError",
    "ApiLimits",
    "ApiServer",
    "ProxySpec",
    "ProxyThread",
    "Toxic",
    "is_loopback",
    "serve",
    "start",
]
