"""The four local servers are one ``LocalServer``: same method names, signatures and meaning
(mypy checks it too, in ``sac/server/_protocol.py``); checked here without starting anything."""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable
from pathlib import Path

import pytest

from sac.server import (
    LocalCluster,
    LocalPostgres,
    LocalServer,
    LocalSpark,
    LocalZooKeeper,
    NotRunningError,
)

MAKE: dict[str, Callable[[Path], LocalServer]] = {
    "rabbitmq": lambda home: LocalCluster(name="proto", home=home),
    "zookeeper": lambda home: LocalZooKeeper(name="proto", home=home),
    "postgres": lambda home: LocalPostgres(name="proto", home=home),
    "spark": lambda home: LocalSpark(name="proto", home=home),
}
CLASSES = [LocalCluster, LocalZooKeeper, LocalPostgres, LocalSpark]
MEMBERS = ["up", "down", "kill", "status", "log_files", "__enter__", "__exit__"]


def _shape(sig: inspect.Signature) -> tuple[object, ...]:
    return tuple((p.name, p.kind, p.annotation) for p in sig.parameters.values()), \
        sig.return_annotation


def accepts(impl: inspect.Signature, proto: inspect.Signature) -> bool:
    """``impl`` can be called as ``proto`` says and returns what it says: the protocol's
    parameters in order, with their kinds and annotations, and any more only with defaults."""
    ours, theirs = list(impl.parameters.values()), list(proto.parameters.values())
    if len(ours) < len(theirs) or impl.return_annotation != proto.return_annotation:
        return False
    head = ours[:len(theirs)]
    same = [(p.name, p.kind, p.annotation) for p in head] == \
        [(p.name, p.kind, p.annotation) for p in theirs]
    return same and all(p.default is not inspect.Parameter.empty for p in ours[len(theirs):])


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("member", MEMBERS)
def test_each_server_has_the_protocols_signatures(cls: type, member: str) -> None:
    proto = inspect.signature(getattr(LocalServer, member))
    impl = getattr(cls, member)
    candidates = typing.get_overloads(impl) or [impl]  # kill() and kill(ref) on the cluster
    shapes = [_shape(inspect.signature(c)) for c in candidates]
    assert any(accepts(inspect.signature(c), proto) for c in candidates), (
        f"{cls.__name__}.{member}{shapes} is not {_shape(proto)}")


def test_the_signature_check_can_fail() -> None:
    def proto(self: object) -> None: ...
    def extra_required(self: object, ref: int) -> None: ...
    def extra_optional(self: object, ref: int | None = None) -> None: ...
    def returns(self: object) -> int: ...

    want = inspect.signature(proto)
    assert accepts(inspect.signature(extra_optional), want)
    assert not accepts(inspect.signature(extra_required), want)
    assert not accepts(inspect.signature(returns), want)


@pytest.mark.parametrize("kind", MAKE)
def test_a_server_that_never_ran(kind: str, tmp_path: Path) -> None:
    """Not started: it is a LocalServer, its status says so (name, dir, running, logs), and
    down and kill say it is not running."""
    server = MAKE[kind](tmp_path)
    assert isinstance(server, LocalServer)
    status = server.status()
    assert status["name"] == server.name == "proto"
    assert status["dir"] == str(server.dir) == str(tmp_path.resolve() / "proto")
    assert status["running"] is False
    assert status["logs"] == [] == server.log_files()
    with pytest.raises(NotRunningError):
        server.kill()
    with pytest.raises(NotRunningError):
        server.down()


NAMED: dict[str, Callable[[str, Path], object]] = {
    "rabbitmq": lambda name, home: LocalCluster(name=name, home=home),
    "zookeeper": lambda name, home: LocalZooKeeper(name=name, home=home),
    "postgres": lambda name, home: LocalPostgres(name=name, home=home),
    "spark": lambda name, home: LocalSpark(name=name, home=home),
}


@pytest.mark.parametrize("kind", NAMED)
@pytest.mark.parametrize("name", ["../victim", "/tmp", "a/b", "", "..", "Upper"])
def test_a_name_that_leaves_the_home_is_refused(kind: str, name: str, tmp_path: Path) -> None:
    """``up()`` wipes ``home/<name>``: a name must never point outside the home, for any
    server; refused in one line naming it, before anything is touched."""
    home = tmp_path / "home"
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("mine")
    with pytest.raises(ValueError, match=rf"name {re.escape(repr(name))} is not valid"):
        NAMED[kind](name, home)
    assert (victim / "keep").read_text() == "mine"
    assert not home.exists()
