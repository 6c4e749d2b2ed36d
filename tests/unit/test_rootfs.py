"""The root filesystem's pure parts: which tree counts as whole, how a process enters it, and
which versions belong to a series."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sac.server import _rootfs

PROGRAMS = ("usr/lib/rabbitmq/bin/rabbitmq-server", "usr/lib/rabbitmq/bin/rabbitmqctl",
            "usr/lib/erlang/bin/epmd", "usr/bin/erl", "usr/bin/sh", "usr/bin/df")


def whole_tree(root: Path, version: str = "4.0.5") -> Path:
    for program in PROGRAMS:
        path = root / program
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    (root / "bin").symlink_to("usr/bin")
    for directory in ("sac", "proc", "tmp", f"usr/lib/rabbitmq/lib/rabbitmq_server-{version}"):
        (root / directory).mkdir(parents=True)
    (root / _rootfs.STAMP).write_text(json.dumps({"version": version}))
    return root


def test_a_whole_tree_has_no_problem(tmp_path: Path) -> None:
    assert _rootfs.problems(whole_tree(tmp_path / "root"), "4.0") == []


def test_a_tree_without_its_stamp_is_an_interrupted_build(tmp_path: Path) -> None:
    root = whole_tree(tmp_path / "root")
    (root / _rootfs.STAMP).unlink()
    assert _rootfs.problems(root, "4.0") == [
        f"no build stamp {_rootfs.STAMP} for this version (an interrupted build?)"]


def test_a_missing_program_or_mount_point_or_another_version_is_named(tmp_path: Path) -> None:
    root = whole_tree(tmp_path / "root")
    (root / "usr/lib/erlang/bin/epmd").unlink()
    (root / "sac").rmdir()
    assert _rootfs.problems(root, "4.0") == ["/usr/lib/erlang/bin/epmd is missing",
                                             "/sac is not a directory"]
    assert _rootfs.problems(whole_tree(tmp_path / "other", "3.13.7"), "4.0") == [
        "RabbitMQ there is 3.13.7, not 4.0"]
    assert "RabbitMQ there is absent, not 4.0" in _rootfs.problems(tmp_path / "none", "4.0")


@pytest.mark.parametrize(("version", "series", "inside"), [
    ("4.0.5", "4.0", True), ("4.0", "4.0", True), ("4.01.1", "4.0", False),
    ("4.1.0", "4.0", False), ("3.10.8", "3.10", True), ("3.1.0", "3.10", False),
])
def test_a_version_belongs_to_its_series_only(version: str, series: str, inside: bool) -> None:
    assert _rootfs.in_series(version, series) is inside


def test_a_process_enters_the_tree_read_only_with_its_own_proc_and_the_state_at_sac() -> None:
    argv = _rootfs.chroot_argv("/usr/bin/unshare", Path("/cache/tree"), Path("/state/c"),
                               ["/usr/lib/erlang/bin/epmd", "-port", "4369"])
    assert argv[:6] == ["/usr/bin/unshare", "--mount", "--propagation", "private", "sh", "-c"]
    assert argv[7:] == ["sh", "/cache/tree", "/state/c", "/usr/lib/erlang/bin/epmd", "-port",
                        "4369"]
    script = argv[6]
    assert 'mount -o remount,bind,ro "$1"' in script
    assert 'mount -t proc proc "$1/proc"' in script
    assert 'mount --bind "$2" "$1/sac"' in script
    assert script.endswith('exec chroot "$root" "$@"')


def test_the_mmdebstrap_call_builds_a_minimal_trixie_with_rabbitmq() -> None:
    assert _rootfs.mmdebstrap_argv("/usr/bin/mmdebstrap", "trixie", Path("/c/t")) == [
        "/usr/bin/mmdebstrap", "--variant=minbase", "--include=rabbitmq-server,ca-certificates",
        "trixie", "/c/t"]


def test_only_4_0_needs_a_tree() -> None:
    with pytest.raises(ValueError, match=r"RabbitMQ 3\.10 needs no root filesystem"):
        _rootfs.ensure("3.10")
