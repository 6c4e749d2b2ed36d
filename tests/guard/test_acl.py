"""The guard's ZooKeeper credentials (``GuardSettings.auth``) against the real ZooKeeper: a
group's nodes carry an ACL that gives its user everything and nobody else anything, so a
client without the credentials (or with a wrong password) can neither read the leader
record, nor forge it, nor join or disturb the election; nodes made before without
credentials are restricted when a guard with them starts; another user is refused in one
line. Every wait is on a condition, with a timeout."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from sac.sdk import ConfigurationError, GuardSettings, LeaderRecord, Leadership
from sac.server import LocalZooKeeper

WAIT = 30.0
AUTH = ("sac-app", "s3cret:with colon")


@pytest.fixture
def plain_client(zookeeper: LocalZooKeeper) -> Iterator[Callable[..., KazooClient]]:
    """ZooKeeper clients as anyone may make them: without credentials, or with some."""
    made: list[KazooClient] = []

    def make(auth: tuple[str, str] | None = None) -> KazooClient:
        client = KazooClient(hosts=zookeeper.hosts, auth_data=None if auth is None else [
            ("digest", f"{auth[0]}:{auth[1]}")])
        client.start(timeout=WAIT)
        made.append(client)
        return client

    yield make
    for client in made:
        client.stop()
        client.close()


@contextlib.contextmanager
def leading(settings: GuardSettings) -> Iterator[Leadership]:
    """A guard of ``settings`` that leads its group, until the block ends."""
    from sac.sdk.guard import ZooKeeperGuard, identity

    won = threading.Event()
    leaderships: list[Leadership] = []

    def on_won(_attempt: int, leadership: Leadership) -> None:
        leaderships.append(leadership)
        won.set()

    guard = ZooKeeperGuard(settings, identity("a", "conn-a#sac-0123456789abcdef"),
                           on_session=lambda _s: None, on_won=on_won,
                           on_failed=lambda _a, exc: pytest.fail(f"the election failed: {exc}"))
    guard.connect()
    try:
        guard.contend(1)
        assert won.wait(WAIT), "the guard did not lead"
        yield leaderships[0]
    finally:
        guard.close()


def test_without_the_credentials_nobody_reads_or_writes_the_groups_nodes(
    zookeeper: LocalZooKeeper, group: str, plain_client: Callable[..., KazooClient],
) -> None:
    anyone = plain_client()
    # Made open before, as a guard without credentials (or an older version) leaves them.
    anyone.create(f"{group}/leader", LeaderRecord(
        token=1, consumer="old", connection="old-conn").encode(),
                  makepath=True)
    settings = GuardSettings(zookeeper.hosts, group, auth=AUTH)
    with leading(settings) as leadership:
        forged = LeaderRecord(token=leadership.token - 1, consumer="x",
                              connection="stranger#sac-0123456789abcdef")
        for client in (anyone, plain_client(("sac-app", "wrong")), plain_client(("other", "x"))):
            with pytest.raises(NoAuthError):
                client.set(f"{group}/leader", forged.encode())
            with pytest.raises(NoAuthError):
                client.get(f"{group}/leader")
            with pytest.raises(NoAuthError):
                client.create(f"{group}/election/forged-", b"", ephemeral=True, sequence=True)
            with pytest.raises(NoAuthError):
                client.delete(leadership.node)
            with pytest.raises(NoAuthError):
                client.delete(f"{group}/leader")
        # The credentials' owner reads the record its leader wrote.
        data, _ = plain_client(AUTH).get(f"{group}/leader")
        record = LeaderRecord.decode(data)
        assert record is not None
        assert record.token == leadership.token


def test_a_group_of_other_credentials_is_refused_in_one_line(
    zookeeper: LocalZooKeeper, group: str,
) -> None:
    with leading(GuardSettings(zookeeper.hosts, group, auth=AUTH)):
        pass
    from sac.sdk.guard import ZooKeeperGuard, identity

    intruder = GuardSettings(zookeeper.hosts, group, auth=("intruder", "intruder-secret"))
    guard = ZooKeeperGuard(intruder, identity("b", None), on_session=lambda _s: None,
                           on_won=lambda _a, _l: None, on_failed=lambda _a, _e: None)
    with pytest.raises(ConfigurationError) as refused:
        guard.connect()
    text = str(refused.value)
    assert "refuses user 'intruder' on group" in text
    assert "\n" not in text
    assert "intruder-secret" not in text


def test_auth_is_a_pair_and_its_password_is_never_shown() -> None:
    settings = GuardSettings("zk:2181", "/g", auth=["app", "hunter2"])  # type: ignore[arg-type]
    assert settings.auth == ("app", "hunter2")
    assert "hunter2" not in repr(settings)
    assert "('app', '***')" in repr(settings)
    for bad, told in [(("app",), "a tuple of 1"), (("", "pw"), "whose user"),
                      (("app", ""), "whose password"), ("app:pw", "a str"),
                      (("a:b", "pw"), "must not contain ':'")]:
        with pytest.raises(ConfigurationError, match=r"GuardSettings\.auth") as caught:
            GuardSettings("zk:2181", "/g", auth=bad)  # type: ignore[arg-type]
        assert told in str(caught.value)
