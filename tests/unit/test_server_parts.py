"""sac/server/ pieces that need no running server: ports, names, secrets, processes."""

from __future__ import annotations

import json
import signal
import socket
import stat
import sys
from pathlib import Path

import pytest

from sac.server import Credentials, LocalCluster, PortBusyError, PortLayout, _proc
from sac.server._files import write_secret
from sac.server._ports import BLOCK, allocate_base, check_free, port_is_free


def test_layout_keeps_every_port_inside_its_block() -> None:
    layout = PortLayout(21000)
    ports = layout.listening_ports(nodes=9, zookeeper=True)
    low, high = layout.ctl_dist_range
    assert len(ports) == 9 * 4 + 2  # no two services share a port
    assert all(21000 <= p < 21000 + BLOCK for p in [*ports, low, high])
    assert not set(ports) & set(range(low, high + 1))


def test_busy_port_is_detected_and_named() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert not port_is_free(port)
        with pytest.raises(PortBusyError, match=f"127.0.0.1:{port} \\(epmd\\)"):
            check_free({port: "epmd"})
    assert port_is_free(port)


def test_allocation_is_stable_and_skips_claimed_blocks(tmp_path: Path) -> None:
    first = allocate_base(tmp_path, "alpha")
    assert allocate_base(tmp_path, "alpha") == first
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "state.json").write_text(json.dumps({"base_port": first}))
    assert allocate_base(tmp_path, "alpha") != first


def test_password_never_in_repr() -> None:
    creds = Credentials.generate("x")
    assert creds.password not in repr(creds)
    assert creds.user in repr(creds)
    assert len(creds.password) >= 24


def test_secret_file_is_private_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    write_secret(path, "s3cret")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    write_secret(path, "again", mode=0o400)
    assert path.read_text() == "again"
    assert stat.S_IMODE(path.stat().st_mode) == 0o400


def test_node_lookup_by_index_or_name(tmp_path: Path) -> None:
    local = LocalCluster(name="lookup", nodes=3, base_port=21000, home=tmp_path)
    local._layout = PortLayout(21000)
    assert local.node(2).name == "sac-lookup-2@localhost"
    assert local.node("sac-lookup-3@localhost").index == 3
    with pytest.raises(ValueError, match="no node '7'"):
        local.node("7")


def test_processes_are_found_by_marker_and_reaped(tmp_path: Path) -> None:
    pid = _proc.spawn(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        {_proc.MARKER: str(tmp_path), "PATH": "/usr/bin:/bin"},
        tmp_path / "out.log",
        tmp_path,
    )
    assert _proc.is_ours(pid, tmp_path)
    assert not _proc.is_ours(pid, tmp_path / "elsewhere")
    assert _proc.find_marked(tmp_path) == [pid]
    _proc.signal_group(pid, signal.SIGKILL)
    assert _proc.wait_dead([pid], 5) == []
    assert _proc.find_marked(tmp_path) == []
