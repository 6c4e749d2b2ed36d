"""Exactly-once effects on top of at-least-once delivery: deduplication by message id, the
idempotent inbox (effect and dedup record in one transaction, ack after commit) and fencing of
replaced consumers by epoch.

Stores: ``MemoryStore`` (one process, bounded), ``SQLiteStore`` (one host, the embedded
default), ``PostgresStore`` (several hosts; the ``postgres`` extra). See ``Inbox`` for how a
consumer uses them and ``LookupPolicy`` for when a message id is looked up, and ``id_key`` for
the text under which any message id is recorded.
"""

from .._core.ids import id_key
from ._store import SCHEMA_VERSION, Retention, Store, Transaction
from .inbox import Effect, Inbox, InboxStats, LookupPolicy, Outcome
from .memory import MemoryStore
from .postgres import PostgresStore
from .sqlite import SQLiteStore

__all__ = [
    "SCHEMA_VERSION",
    "Effect",
    "Inbox",
    "InboxStats",
    "LookupPolicy",
    "MemoryStore",
    "Outcome",
    "PostgresStore",
    "Retention",
    "SQLiteStore",
    "Store",
    "Transaction",
    "id_key",
]
