"""sac's client SDK: exactly one consumer working on a queue, nothing lost or done twice.

Everything an application needs is exported here; the modules behind it are private.

Example::

    from sac.sdk import ConnectionSettings, PublisherSettings, QueueSettings, Publisher

    conn = ConnectionSettings.from_env()      # SAC_AMQP_URLS=amqp://...,amqp://...
    with Publisher(PublisherSettings(conn, queue=QueueSettings("orders"))) as pub:
        pub.publish(b"order 1")

Every client has two faces with the same methods and the same typed parameters: ``X``
blocks, ``AsyncX`` is awaited (``Publisher``/``AsyncPublisher``, ``Consumer``/
``AsyncConsumer``, ``Management``/``AsyncManagement``, ``Parking``/``AsyncParking``,
``Mover``/``AsyncMover``).

Bodies other than bytes: ``Publisher(settings, serializer=JSON)`` publishes any JSON value as
``application/json``; ``Consumer(settings, handle, serializers=JSON)`` hands the handler the
decoded value in ``Delivery.value`` (``Serializer`` makes any other codec).
"""

from ._core.backoff import Backoff
from ._core.codecs import BYTES, JSON, Serializer
from ._core.consuming import Handover
from ._core.guarding import GuardStatus, LeaderRecord, Leadership, SessionState
from ._core.ids import new_message_id
from ._core.poison import MessageIdFrom
from ._core.roles import Role
from ._delivery import RETRANSMIT_HEADER, Delivery
from ._errors import (
    AuthenticationError,
    BlockedTimeout,
    ClosedError,
    ConfigurationError,
    ConfirmTimeout,
    ConnectError,
    ConsumerError,
    LifecycleError,
    ManagementError,
    ManagementNotFound,
    ManagementRefused,
    ManagementUnreachable,
    MessageNacked,
    MessageReturned,
    MessageTooLarge,
    MissingMessageId,
    ParkingFailed,
    Poison,
    PublishError,
    QueueError,
    QueueMismatch,
    QueueNotFound,
    SacError,
    SchemaMismatch,
    StaleEpoch,
    StoreError,
    StoreUnavailable,
    Unconfirmed,
    UnfitMessage,
)
from ._history import HistoryRecorder
from ._settings import (
    ConnectionSettings,
    ConsumerSettings,
    GuardSettings,
    ManagementSettings,
    PublisherSettings,
    QueueSettings,
)
from .consumer import AsyncConsumer, Consumer, ConsumerStats
from .dedup import (
    Inbox,
    InboxStats,
    LookupPolicy,
    MemoryStore,
    PostgresStore,
    Retention,
    SQLiteStore,
    Store,
    Transaction,
)
from .management import AsyncManagement, Management
from .moving import AsyncMover, Moved, MoveError, Mover
from .parking import AsyncParking, ParkedMessage, Parking, ReplayError
from .publisher import AsyncPublisher, Publisher, PublisherStats, PublishOptions

__all__ = [
    "BYTES",
    "JSON",
    "RETRANSMIT_HEADER",
    "AsyncConsumer",
    "AsyncManagement",
    "AsyncMover",
    "AsyncParking",
    "AsyncPublisher",
    "AuthenticationError",
    "Backoff",
    "BlockedTimeout",
    "ClosedError",
    "ConfigurationError",
    "ConfirmTimeout",
    "ConnectError",
    "ConnectionSettings",
    "Consumer",
    "ConsumerError",
    "ConsumerSettings",
    "ConsumerStats",
    "Delivery",
    "GuardSettings",
    "GuardStatus",
    "Handover",
    "HistoryRecorder",
    "Inbox",
    "InboxStats",
    "LeaderRecord",
    "Leadership",
    "LifecycleError",
    "LookupPolicy",
    "Management",
    "ManagementError",
    "ManagementNotFound",
    "ManagementRefused",
    "ManagementSettings",
    "ManagementUnreachable",
    "MemoryStore",
    "MessageIdFrom",
    "MessageNacked",
    "MessageReturned",
    "MessageTooLarge",
    "MissingMessageId",
    "MoveError",
    "Moved",
    "Mover",
    "ParkedMessage",
    "Parking",
    "ParkingFailed",
    "Poison",
    "PostgresStore",
    "PublishError",
    "PublishOptions",
    "Publisher",
    "PublisherSettings",
    "PublisherStats",
    "QueueError",
    "QueueMismatch",
    "QueueNotFound",
    "QueueSettings",
    "ReplayError",
    "Retention",
    "Role",
    "SQLiteStore",
    "SacError",
    "SchemaMismatch",
    "Serializer",
    "SessionState",
    "StaleEpoch",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "Transaction",
    "Unconfirmed",
    "UnfitMessage",
    "new_message_id",
]


def _named_as_imported() -> None:
    """Every exported error reports ``sac.sdk`` as its module, so that it prints as
    ``sac.sdk.ConfigurationError`` (the name users import and catch) rather than with the
    module that defines it; pickling finds each one under that name too."""
    for name in __all__:
        value = globals()[name]
        if isinstance(value, type) and issubclass(value, BaseException):
            value.__module__ = __name__


_named_as_imported()
