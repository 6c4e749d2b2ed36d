"""A consumer group's membership and assignment in ZooKeeper (extra ``zk``): the shell
around ``_core/grouping.py``, which decides everything.

The group's nodes, under ``GroupSettings.group``:

- ``members/<name>``: ephemeral, one per member session, holding that member's report
  (``Report``: the newest record it carried out, the partitions it holds). The name is the
  instance's followed by a random token of the session, so a member that lost its session
  joins again as a new member: records that named its old self are not its own.
- ``assignment``: the published record (``Published``), created with the group and only
  ever written with a version check.

Who decides: the live member whose name sorts first. A decision is a pure function of the
record and the live members' reports, written only if the record did not change since it
was read. So two members that both believe they decide (one of them with an old view of the
members) cannot write conflicting records, and a decider that died is replaced by the next
name as soon as its node goes. A record that does not decode is never overwritten: nobody
decides until someone repairs it (the error is logged), and every member keeps what it
holds meanwhile.

Threads. kazoo's watchers and the caller's ``let_go_done`` only put an event on a queue; one
thread of the membership (``sac-group``) carries everything out: reads, decisions, writes,
and the ``on_take``/``on_let_go``/``on_lost`` callbacks, so that the member's state has one
owner. The callbacks must return soon; a let-go reports its end through ``let_go_done``.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import secrets
import threading
from collections.abc import Callable
from typing import Any, assert_never

from ._core.grouping import Action, LetGo, Member, Published, Report, Take, Write, decide
from ._errors import ConfigurationError, ConnectError
from ._settings import GroupSettings
from .guard import ZK_EXTRA, connection_retry, stop_client

try:
    from kazoo.client import KazooClient
    from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
except ImportError as _missing:
    raise ConfigurationError(ZK_EXTRA) from _missing

log = logging.getLogger("sac.group")

PartitionCallback = Callable[[int], None]


class _Stop:
    """Ends the membership's thread."""


class GroupMembership:
    """This instance's membership of a consumer group: joins at ``start``, takes and lets go
    of partitions as the group's record says, leaves at ``close``."""

    def __init__(self, settings: GroupSettings, instance: str, *,
                 on_take: PartitionCallback, on_let_go: PartitionCallback,
                 on_lost: Callable[[frozenset[int]], None] | None = None) -> None:
        if not isinstance(instance, str) or not instance or "/" in instance:
            raise ConfigurationError(
                f"a group member's instance name must be a non-empty string without '/', "
                f"got {instance!r}")
        self.settings = settings
        self.instance = instance
        self._on_take = on_take
        self._on_let_go = on_let_go
        self._on_lost = on_lost
        self._members = f"{settings.group}/members"
        self._record = f"{settings.group}/assignment"
        self._events: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._member: Member | None = None
        self._unwritten: Report | None = None
        self._names: list[str] = []
        """The group's members, as the last children watch gave them."""
        self._published: Published | None = None
        self._thread: threading.Thread | None = None
        self._watched: set[str] = set()
        self._closing = False
        self.changed = threading.Condition()
        """Notified after each event the membership's thread carried out: a caller can wait
        for a state it expects (``held``, ``published``) without polling blindly."""
        self.client = KazooClient(hosts=settings.hosts, timeout=settings.session_timeout,
                                  connection_retry=connection_retry(settings.session_timeout),
                                  logger=logging.getLogger("sac.kazoo"))

    # ------------------------------------------------------------------ what callers see

    @property
    def name(self) -> str | None:
        """This member's name in the group (its session's); None before ``start``."""
        return None if self._member is None else self._member.name

    @property
    def held(self) -> frozenset[int]:
        return frozenset() if self._member is None else self._member.held()

    @property
    def published(self) -> Published | None:
        """The newest record this member carried out."""
        return self._published

    def start(self) -> None:
        """Connect, create the group's nodes if missing, check the partition count, join
        (blocking); ``ConnectError`` or ``ConfigurationError`` say why not."""
        settings = self.settings
        self.client.add_listener(self._listener)
        try:
            self.client.start(timeout=settings.connect_timeout)
        except self.client.handler.timeout_exception:
            raise ConnectError(f"ZooKeeper at {settings.hosts}: no session within "
                               f"{settings.connect_timeout:g} s") from None
        try:
            self.client.ensure_path(self._members)
            with contextlib.suppress(NodeExistsError):  # another member made it first
                self.client.create(self._record, Published.empty(settings.partitions).encode())
            data, _ = self.client.get(self._record)
            self._check_count(data)
            self._join()
        except (KazooException, ConfigurationError) as exc:
            self._stop_client()
            if isinstance(exc, ConfigurationError):
                raise
            raise ConnectError(f"ZooKeeper at {settings.hosts}: cannot join group "
                               f"{settings.group}: {exc!r}") from exc
        self._thread = threading.Thread(target=self._run, name="sac-group", daemon=True)
        self._thread.start()
        self.client.ChildrenWatch(self._members, self._children_changed)
        self.client.DataWatch(self._record, lambda *_: self._events.put("record"))

    def let_go_done(self, partition: int) -> None:
        """The consumer of ``partition`` stopped after ``on_let_go`` (any thread)."""
        self._events.put(("let-go", partition))

    def close(self) -> None:
        """Leave the group: the session ends, and this member's node with it."""
        self._closing = True
        self._events.put(_Stop())
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(10)
        self._stop_client()

    # ------------------------------------------------------------------ the one thread

    def _run(self) -> None:
        """Everything waiting is carried out together, then the report written once and
        the decision taken once: a member letting go of hundreds of partitions at a
        rebalance writes one report, not one a partition."""
        self._events.put("record")
        while True:
            events = [self._events.get()]
            with contextlib.suppress(queue.Empty):
                while True:
                    events.append(self._events.get_nowait())
            try:
                for event in events:
                    if isinstance(event, _Stop):
                        return
                    self._carry_out(event)
                if self._member is not None:
                    self._write_report()
                    self._decide()
            except KazooException as exc:
                # A lost connection: kazoo reconnects, and "connected" reads everything
                # again (a report not written yet is written then).
                log.warning("group %s: %r; waiting for ZooKeeper", self.settings.group, exc)
            except Exception:
                log.exception("group %s: handling %r failed", self.settings.group, events)
            with self.changed:
                self.changed.notify_all()

    def _write_report(self) -> None:
        report = self._unwritten
        member = self._member
        if report is not None and member is not None:
            self.client.set(f"{self._members}/{member.name}", report.encode())
            self._unwritten = None

    def _carry_out(self, event: Any) -> None:
        member = self._member
        if event == "lost":
            self._lost()
            return
        if event == "connected" and member is None and not self._closing:
            self._join()  # a new session after the old one was lost: a new member
            self._events.put("record")
            return
        if isinstance(event, tuple) and event[0] == "members":
            self._names = event[1]
            return
        if member is None:
            return
        if event in ("record", "connected"):
            data, _ = self.client.get(self._record)
            try:
                published = Published.decode(data)
            except ValueError as exc:
                log.error("group %s: %s; nothing changes until it is repaired",
                          self.settings.group, exc)
                return
            self._perform(member.read(published))
            if published.generation >= member.seen:
                self._published = published
        elif isinstance(event, tuple) and event[0] == "let-go":
            self._perform(member.let_go(event[1]))

    def _perform(self, actions: list[Action]) -> None:
        for action in actions:
            match action:
                case Take(partition=partition):
                    self._on_take(partition)
                case LetGo(partition=partition):
                    self._on_let_go(partition)
                case Write(report=report):
                    self._unwritten = report  # written once the batch is carried out
                case _:
                    assert_never(action)

    def _decide(self) -> None:
        """When this member's name sorts first: the next record, if any, written only over
        the one it was computed from."""
        member = self._member
        assert member is not None
        names = self._names  # from the watch: a member that only reads decides nothing
        if not names or min(names) != member.name:
            return
        count = self.settings.partitions
        reports: dict[str, Report] = {}
        for name in names:
            try:
                data, _ = self.client.get(f"{self._members}/{name}")
            except NoNodeError:
                continue  # gone meanwhile: not a member
            try:
                reports[name] = Report.decode(data)
            except ValueError as exc:
                # Not ours to read: count it as holding everything, granting nothing.
                log.error("group %s: member %s: %s", self.settings.group, name, exc)
                reports[name] = Report(seen=0, holding=frozenset(range(count)))
        data, stat = self.client.get(self._record)
        try:
            published = Published.decode(data)
        except ValueError:
            return  # logged where the record is read
        new = decide(published, reports)
        if new is None:
            return
        try:
            self.client.set(self._record, new.encode(), version=stat.version)
        except BadVersionError:
            self._events.put("record")  # someone wrote first: read theirs, decide again

    def _lost(self) -> None:
        """The session ended: what this member held no longer counts (``on_lost``); it
        joins again as a new member once kazoo has a new session (``connected``)."""
        member = self._member
        self._member = None
        self._published = None
        self._unwritten = None
        if member is not None and member.held() and self._on_lost is not None:
            self._on_lost(member.held())

    # ------------------------------------------------------------------ helpers

    def _join(self) -> None:
        member = Member(f"{self.instance}.{secrets.token_hex(4)}")
        self.client.create(f"{self._members}/{member.name}", Report().encode(), ephemeral=True)
        self._member = member

    def _check_count(self, data: bytes) -> None:
        try:
            count = Published.decode(data).count
        except ValueError as exc:
            raise ConfigurationError(f"group {self.settings.group}: {exc}") from None
        if count != self.settings.partitions:
            raise ConfigurationError(
                f"group {self.settings.group} has {count} partitions; this member was "
                f"given GroupSettings(partitions={self.settings.partitions})")

    def _children_changed(self, names: list[str]) -> None:
        """kazoo's thread: watch each member's report, and decide again."""
        for name in names:
            if name not in self._watched:
                self._watched.add(name)
                self.client.DataWatch(f"{self._members}/{name}", self._report_changed)
        self._watched &= set(names)
        self._events.put(("members", list(names)))

    def _report_changed(self, data: bytes | None, _stat: Any) -> bool:
        """kazoo's thread: a member's report changed; its node gone ends the watch."""
        self._events.put("reports")
        return data is not None

    def _listener(self, state: str) -> None:
        """kazoo's connection thread: never block."""
        if not self._closing and state in ("LOST", "CONNECTED"):
            self._events.put(state.lower())

    def _stop_client(self) -> None:
        stop_client(self.client, self._listener)
