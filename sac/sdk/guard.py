"""The ZooKeeper guard's shell: kazoo underneath, the guard machine's events out (extra ``zk``).

A consumer given ``ConsumerSettings(guard=GuardSettings(...))`` builds one of these. It holds
one kazoo session, joins its group's election with kazoo's ``Lock`` recipe (ephemeral
sequential nodes under ``<group>/election``; the lowest leads), and reports three things,
each from one of kazoo's threads, through the callbacks it was given (which must not block:
the consumer's hand the event to its loop, where ``_core/guarding.py`` decides):

- the session's state (kazoo's connection thread calls the listener: never block there);
- an attempt won: its fencing token (its node's ``czxid``) and the record of the leader
  before it, read from ``<group>/leader`` just before this leader writes its own there
  (only while its election node still exists: a check in the same ZooKeeper transaction);
- an attempt failed (it is given up; the machine decides whether and when to contend again).

Every decision is the machine's; this module only does what it is told.

With ``GuardSettings.auth`` the session authenticates (ZooKeeper's ``digest`` scheme) and
every node it creates carries an ACL giving that user all permissions and nobody else any
(kazoo's ``make_digest_acl``; the client's default ACL, which the ``Lock`` recipe's nodes
get too). ``connect()`` makes sure the group's own nodes (the group, ``election``,
``leader``) carry it, restricting those made before without it: a leader record nobody
else can write cannot be forged, nor read.

The one reach into kazoo's internals: kazoo negotiates the session timeout with the server
(which clamps it to its own bounds) and keeps the result to itself, so ``_Negotiation``
wraps the client's connection handler's ``_connect`` (checked when a guard is built) to read
it, and ``connect()`` refuses a lease other than the one asked for.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from ._core.guarding import (
    GroupPaths,
    LeaderRecord,
    Leadership,
    SessionState,
    fencing_token,
    lease_mismatch,
)
from ._errors import ConfigurationError, ConnectError
from ._settings import GuardSettings

ZK_EXTRA = ("ConsumerSettings.guard needs kazoo, which is not installed: install the SDK's "
            "`zk` extra (pip install 'sac[zk]')")

try:
    from kazoo.client import KazooClient
    from kazoo.exceptions import CancelledError, KazooException, NoAuthError
    from kazoo.retry import KazooRetry
    from kazoo.security import make_digest_acl
except ImportError as _missing:
    raise ConfigurationError(ZK_EXTRA) from _missing

log = logging.getLogger("sac.guard")


def connection_retry(session_timeout: float) -> Any:
    """kazoo's retry of a lost connection: for as long as the client lives (a member waits
    for ZooKeeper as it waits for the broker), each wait jittered and short enough that a
    suspended session is resumed well within its lease."""
    return KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_jitter=0.5,
                      max_delay=max(0.1, min(2.0, session_timeout / 4)))


def stop_client(client: Any, listener: Callable[[str], None]) -> None:
    """End a kazoo client's session and free it (blocking)."""
    client.remove_listener(listener)
    try:
        client.stop()
    finally:
        client.close()

SessionCallback = Callable[[SessionState], None]
WonCallback = Callable[[int, Leadership], None]
FailedCallback = Callable[[int, Exception], None]


class _Negotiation:
    """The session timeout the server granted, read off kazoo's handshake: its connection
    handler's ``_connect`` returns ``(read_timeout, connect_timeout)`` in ms, and the read
    timeout is two thirds of the negotiated session timeout."""

    def __init__(self, client: Any) -> None:
        handler = getattr(client, "_connection", None)
        original = getattr(handler, "_connect", None)
        if not callable(original):
            raise RuntimeError(
                "kazoo's connection handler has no _connect any more: sac cannot check the "
                "negotiated session timeout with this kazoo version")
        self.granted_ms: int | None = None
        self.known = threading.Event()

        def connect(*args: Any, **kwargs: Any) -> Any:
            timeouts = original(*args, **kwargs)
            self.granted_ms = round(float(timeouts[0]) * 3 / 2)
            self.known.set()
            return timeouts

        handler._connect = connect  # type: ignore[union-attr]


class _Contender:
    """One election attempt: its kazoo ``Lock``, and whether it was given up."""

    def __init__(self, lock: Any) -> None:
        self.lock = lock
        self.withdrawn = False
        self.node: str | None = None
        self.thread: threading.Thread | None = None


class ZooKeeperGuard:
    """One consumer's kazoo session and election attempts."""

    def __init__(
        self,
        settings: GuardSettings,
        identity: LeaderRecord,
        *,
        on_session: SessionCallback,
        on_won: WonCallback,
        on_failed: FailedCallback,
    ) -> None:
        self.settings = settings
        self.paths = GroupPaths(group=settings.group)
        self._identity = identity
        self._on_session = on_session
        self._on_won = on_won
        self._on_failed = on_failed
        self._asked_ms = round(settings.session_timeout * 1000)
        retry = connection_retry(settings.session_timeout)
        self._acl: list[Any] | None = None
        auth_data = None
        if settings.auth is not None:
            user, password = settings.auth
            self._acl = [make_digest_acl(user, password, all=True)]
            auth_data = [("digest", f"{user}:{password}")]
        self.client = KazooClient(hosts=settings.hosts, timeout=settings.session_timeout,
                                  connection_retry=retry, logger=logging.getLogger("sac.kazoo"),
                                  auth_data=auth_data, default_acl=self._acl)
        self._negotiation = _Negotiation(self.client)
        self._contenders: dict[int, _Contender] = {}
        self._mutex = threading.Lock()
        self._closing = False

    # ------------------------------------------------------------------ blocking calls

    def connect(self) -> None:
        """Open the session (blocking): ``ConnectError`` if no server answers within
        ``connect_timeout``, ``ConfigurationError`` if the server grants another lease."""
        settings = self.settings
        self.client.add_listener(self._listener)  # before: no state change goes unseen
        try:
            self.client.start(timeout=settings.connect_timeout)
        except self.client.handler.timeout_exception:
            raise ConnectError(f"ZooKeeper at {settings.hosts}: no session within "
                               f"{settings.connect_timeout:g} s") from None
        if not self._negotiation.known.wait(settings.connect_timeout):
            self._stop_client()
            raise ConnectError(f"ZooKeeper at {settings.hosts}: the session's handshake did "
                               "not end")
        granted = self._negotiation.granted_ms
        assert granted is not None
        why = lease_mismatch(self._asked_ms, granted, settings.hosts)
        if why is not None:
            self._stop_client()
            raise ConfigurationError(why)
        try:
            self.client.ensure_path(self.paths.election)
            if self._acl is not None:
                self._restrict()
        except NoAuthError:
            self._stop_client()
            assert settings.auth is not None
            raise ConfigurationError(
                f"GuardSettings.auth: ZooKeeper at {settings.hosts} refuses user "
                f"{settings.auth[0]!r} on group {settings.group}: its nodes belong to other "
                "credentials (every consumer of a group gives the same auth)") from None
        except KazooException as exc:
            self._stop_client()
            raise ConnectError(f"ZooKeeper at {settings.hosts}: cannot create "
                               f"{self.paths.election}: {exc!r}") from exc

    def _restrict(self) -> None:
        """Give the group's nodes this guard's ACL where they lack it (made before without
        ``auth``, so open to anyone); ``NoAuthError`` when this user may not."""
        for path in (self.settings.group, self.paths.election, self.paths.leader):
            self.client.ensure_path(path)
            acls, _ = self.client.get_acls(path)
            if list(acls) != self._acl:
                self.client.set_acls(path, self._acl)
                had = [f"{a.id.scheme}:{a.id.id.partition(':')[0]}" for a in acls]
                log.warning("ZooKeeper node %s had ACL %s: restricted to GuardSettings.auth's "
                            "user", path, had)

    def close(self) -> None:
        """End the session (blocking): the server deletes this consumer's election node at
        once, so the next contender leads without waiting for the lease to run out."""
        with self._mutex:
            self._closing = True
            contenders = list(self._contenders.values())
            self._contenders.clear()
        for contender in contenders:
            contender.withdrawn = True
            contender.lock.cancel()
        self._stop_client()
        for contender in contenders:
            if contender.thread is not None:
                contender.thread.join(5)

    def _stop_client(self) -> None:
        stop_client(self.client, self._listener)

    # ------------------------------------------------------------------ from the loop

    def contend(self, attempt: int) -> None:
        """Start election attempt ``attempt`` in a thread of its own (never blocks)."""
        lock = self.client.Lock(self.paths.election, self._identity.encode().decode())
        contender = _Contender(lock)
        with self._mutex:
            if self._closing:
                return
            self._contenders[attempt] = contender
        contender.thread = threading.Thread(target=self._contend, args=(attempt, contender),
                                            name=f"sac-guard-{attempt}", daemon=True)
        contender.thread.start()

    def withdraw(self, attempt: int) -> None:
        """Give attempt ``attempt`` up (never blocks): a waiting one is cancelled, a won
        one's node is deleted (a node of a lost session is gone already)."""
        with self._mutex:
            contender = self._contenders.pop(attempt, None)
        if contender is None:
            return
        contender.withdrawn = True
        contender.lock.cancel()
        if contender.node is not None:
            self._delete(contender.node)

    # ------------------------------------------------------------------ kazoo's threads

    def _listener(self, state: str) -> None:
        """kazoo's connection thread: hand the state on, never block."""
        if not self._closing:
            self._on_session(SessionState(state))

    def _contend(self, attempt: int, contender: _Contender) -> None:
        lock = contender.lock
        try:
            lock.acquire()  # until it leads; kazoo retries lost connections itself
            contender.node = f"{lock.path}/{lock.node}"
            if contender.withdrawn:
                self._delete(contender.node)
                return
            stat = self.client.exists(contender.node)
            if stat is None:
                raise KazooException(f"the election node {contender.node} is gone: the "
                                     "session was lost")
            token = fencing_token(stat.czxid)
            previous = self._take_record(contender.node, token)
            leadership = Leadership(token=token, node=contender.node, previous=previous)
        except CancelledError:
            return  # withdrawn while it waited; kazoo deleted its node
        except Exception as exc:  # noqa: BLE001 - any failure ends this attempt; the machine decides
            if contender.node is not None:
                self._delete(contender.node)
            if not (contender.withdrawn or self._closing):
                self._on_failed(attempt, exc)
            return
        if not (contender.withdrawn or self._closing):
            log.info("leads group %s with token %d (node %s; before: %s)", self.settings.group,
                     token, contender.node, previous)
            self._on_won(attempt, leadership)

    def _take_record(self, node: str, token: int) -> LeaderRecord | None:
        """Read the previous leader's record and write ours, while ``node`` (our election
        node) exists: a leader whose session was lost meanwhile writes nothing."""
        path = self.paths.leader
        record = LeaderRecord(token=token, consumer=self._identity.consumer,
                              connection=self._identity.connection,
                              host=self._identity.host, pid=self._identity.pid)
        client = self.client
        client.ensure_path(path)
        data, stat = client.get(path)
        previous = LeaderRecord.decode(data)
        transaction = client.transaction()
        transaction.check(node, -1)
        transaction.set_data(path, record.encode(), version=stat.version)
        results = transaction.commit()
        failures = [r for r in results if isinstance(r, Exception)]
        if failures:
            raise KazooException(f"writing the leader record failed: {failures!r}")
        if previous is not None and previous.token >= token:
            log.warning("the leader record of %s holds token %d, not older than ours (%d): "
                        "it is not our predecessor's", self.settings.group, previous.token,
                        token)
            return None
        return previous

    def _delete(self, node: str) -> None:
        """Delete ``node`` without waiting (never blocks); a failure is only logged: the
        node goes with the session anyway."""
        try:
            result = self.client.delete_async(node)
        except KazooException as exc:
            log.debug("could not delete %s: %r", node, exc)
            return

        def done(outcome: Any) -> None:
            try:
                outcome.get_nowait()
            except Exception as exc:  # noqa: BLE001 - best effort, see above
                log.debug("could not delete %s: %r", node, exc)

        result.rawlink(done)


def identity(consumer: str | None, connection: str | None) -> LeaderRecord:
    """Who this consumer is, as its election node and leader record say (token 0: not
    elected yet)."""
    return LeaderRecord(token=0, consumer=consumer, connection=connection,
                        host=socket.gethostname(), pid=os.getpid())
