"""Where the fault proxy may listen: loopback, or the host's side of a local netns bridge (a
broker in a namespace opens its federation links there); never an address other machines
reach."""

from __future__ import annotations

import pytest

from sac.chaos.proxy._model import ApiError, may_listen, parse_proxy


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "::1",
                                  "198.18.0.254", "198.19.29.254"])
def test_loopback_and_netns_bridges(host: str) -> None:
    assert may_listen(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.1", "192.168.1.2", "198.20.0.1",
                                  "example.org", "::"])
def test_anything_else_is_refused(host: str) -> None:
    assert not may_listen(host)


def test_a_proxy_on_a_lan_address_is_refused() -> None:
    with pytest.raises(ApiError, match="neither loopback nor a local netns bridge"):
        parse_proxy({"name": "p", "upstream": "127.0.0.1:1", "listen": "10.0.0.1:0"})
