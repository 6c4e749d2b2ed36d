"""sac.sdk._errors: one exception tree, every exception picklable."""

from __future__ import annotations

import importlib
import pickle

import pytest

from sac.sdk import _errors
from sac.sdk._errors import (
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

EXAMPLES: list[SacError] = [
    SacError("boom"),
    ConfigurationError("heartbeat must be an integer >= 1, got 0"),
    ConnectError("no node answered"),
    ConnectError("could not connect after 2 attempt(s)",
                 ["attempt 1, a:5672: refused", "attempt 2, b:5672: reset (at channel.open)"]),
    AuthenticationError("ACCESS_REFUSED"),
    QueueError("odd queue"),
    QueueNotFound("orders"),
    QueueNotFound("orders.parked", "/", "orders"),
    QueueNotFound("orders", vhost="prod"),
    QueueMismatch("orders", "x-queue-type", "quorum", None),
    QueueMismatch("orders", "x-delivery-limit", 5, 3),
    PublishError("m-1", "broken"),
    MessageNacked("m-2", "nacked 5 times"),
    MessageReturned("m-3", "NO_ROUTE"),
    MessageTooLarge("m-4", "200 MiB > 128 MiB"),
    ConfirmTimeout("m-5", "no confirm within 60 s"),
    BlockedTimeout("m-6", "blocked for 60 s"),
    Unconfirmed(["m-7", "m-8"]),
    Unconfirmed([f"m-{n}" for n in range(12)]),
    ConsumerError("stop"),
    StaleEpoch("orders", 3, 4),
    MissingMessageId("orders", 7),
    Poison("body is not JSON"),
    UnfitMessage("orders", 8, "its headers cannot be decoded: tables nested deeper than 64"),
    ParkingFailed("orders", "m-9", "the queue has no parking queue and no dead-letter exchange"),
    ParkingFailed("orders", None, "parking queue 'orders.parked' refused it: unroutable"),
    StoreError("odd store"),
    StoreUnavailable("cannot open /nope/dedup.db: directory does not exist"),
    SchemaMismatch("sqlite:/tmp/d.db", 0, 1),
    ManagementError("queue", "GET", "/api/queues/%2F/q", "http://h:15672", 400, "bad"),
    ManagementUnreachable("queue", "GET", "/api/queues/%2F/q", "http://h:15672", None,
                          "[Errno 111] Connection refused"),
    ManagementRefused("policies", "GET", "/api/policies", "http://h:15672", 401,
                      "not_authorised: Login failed"),
    ManagementNotFound("queue", "GET", "/api/queues/%2F/nope", "http://h:15672", 404,
                       "Object Not Found: Not Found"),
    LifecycleError("this publisher was already started (running)"),
    ClosedError("closed"),
]


def _every_exception_class() -> set[type[BaseException]]:
    return {
        value
        for value in vars(_errors).values()
        if isinstance(value, type) and issubclass(value, BaseException)
    }


def test_examples_cover_every_exception_class() -> None:
    assert {type(e) for e in EXAMPLES} == _every_exception_class()


@pytest.mark.parametrize("error", EXAMPLES, ids=lambda e: type(e).__name__)
def test_pickle_round_trip_keeps_type_attributes_and_text(error: SacError) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert copy.args == error.args
    assert vars(copy) == vars(error)
    assert str(copy) == str(error)


@pytest.mark.parametrize("error", EXAMPLES, ids=lambda e: type(e).__name__)
def test_everything_is_a_sac_error(error: SacError) -> None:
    assert isinstance(error, SacError)


@pytest.mark.parametrize(
    ("child", "parent"),
    [
        (ConfigurationError, ValueError),
        (AuthenticationError, ConnectError),
        (QueueNotFound, QueueError),
        (QueueMismatch, QueueError),
        (MessageNacked, PublishError),
        (MessageReturned, PublishError),
        (MessageTooLarge, PublishError),
        (ConfirmTimeout, PublishError),
        (BlockedTimeout, PublishError),
        (StaleEpoch, ConsumerError),
        (MissingMessageId, ConsumerError),
        (StoreUnavailable, StoreError),
        (SchemaMismatch, StoreError),
        (ManagementUnreachable, ManagementError),
        (ManagementRefused, ManagementError),
        (ManagementNotFound, ManagementError),
    ],
)
def test_tree(child: type[Exception], parent: type[Exception]) -> None:
    assert issubclass(child, parent)


def test_messages_name_what_went_wrong() -> None:
    assert str(QueueNotFound("orders")) == "queue 'orders' does not exist in vhost '/'"
    # A parking queue missing names the queue the caller asked about, too.
    assert str(QueueNotFound("orders.parked", parking_of="orders")) == (
        "queue 'orders' has no parking queue: 'orders.parked' does not exist in vhost '/' "
        "(nothing was parked for it yet, or 'orders' is not the queue's name)")
    mismatch = str(QueueMismatch("orders", "x-delivery-limit", 5, 3))
    assert "x-delivery-limit=3" in mismatch
    assert "x-delivery-limit=5" in mismatch
    assert str(MessageReturned("m-3", "NO_ROUTE")) == "message m-3: NO_ROUTE"
    stale = str(StaleEpoch("orders", 3, 4))
    assert "epoch 3" in stale
    assert "is 4" in stale
    schema = str(SchemaMismatch("sqlite:/tmp/d.db", 0, 1))
    assert "schema version 0" in schema
    assert "version 1" in schema
    assert "message_id" in str(MissingMessageId("orders", 7))
    missing = str(ManagementNotFound("queue", "GET", "/api/queues/%2F/nope", "http://h:15672",
                                     404, "Object Not Found: Not Found"))
    assert missing == ("management API queue(): GET /api/queues/%2F/nope on http://h:15672 "
                       "answered 404: Object Not Found: Not Found")
    refused = str(ManagementUnreachable("queue", "GET", "/api/x", "http://h:1", None, "refused"))
    assert refused.endswith("on http://h:1 gave no answer: refused")


def test_publish_error_attributes() -> None:
    error = MessageNacked("m-2", "nacked")
    assert (error.message_id, error.reason) == ("m-2", "nacked")


def test_unconfirmed_shows_at_most_ten_ids() -> None:
    few = Unconfirmed(("a", "b"))
    assert few.message_ids == ["a", "b"]
    assert str(few) == "2 message(s) stayed unconfirmed: a, b"
    many = Unconfirmed([f"m-{n}" for n in range(12)])
    assert str(many).startswith("12 message(s) stayed unconfirmed: m-0, ")
    assert "m-9 and 2 more" in str(many)
    assert "m-10" not in str(many)


def _subclasses(cls: type[BaseException]) -> set[type[BaseException]]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= _subclasses(sub)
    return found


def test_every_error_a_user_can_meet_is_exported() -> None:
    """Users catch what they can import from ``sac.sdk``: every error class anywhere in the SDK
    is exported, but the transport's internal ``LinkLost``, which the reconnect logic turns
    into a failed attempt and never lets out (tests/sdk/test_reconnect.py shows it)."""
    from sac import sdk
    from sac.sdk._transport import LinkLost

    for module in ("consumer", "dedup", "management", "moving", "publisher"):  # with errors
        importlib.import_module(f"sac.sdk.{module}")
    ours = {c for c in _subclasses(SacError) if c.__module__.startswith("sac.sdk")} | {SacError}
    exported = {getattr(sdk, name) for name in sdk.__all__}
    assert ours - exported == {LinkLost}


def _all_sdk_modules() -> None:
    """Import every module of the SDK, so that every error class it defines exists."""
    import importlib
    import pkgutil

    from sac import sdk

    for module in pkgutil.walk_packages(sdk.__path__, "sac.sdk."):
        importlib.import_module(module.name)


def docstring_tree(doc: str) -> dict[str, str | None]:
    """The tree drawn in a docstring: each class name and the name of its parent (None for
    the root). A line is ``<indent><branch>Name ...`` where every level is 4 columns wide."""
    drawn: dict[str, str | None] = {}
    stack: list[str] = []
    lines = [line for line in doc.splitlines() if line.strip()]
    start = next(i for i, line in enumerate(lines) if line.strip() == "SacError")
    base = len(lines[start]) - len(lines[start].lstrip())
    for line in lines[start:]:
        body = line[base:]
        if not body or not (body[0].isalpha() or body[0] in "│├└ "):
            break
        name_at = next(i for i, ch in enumerate(body) if ch.isalpha())
        if name_at == 0 and drawn:
            break  # text after the tree
        level = name_at // 4
        name = body[name_at:].split()[0]
        assert name not in drawn, f"{name} appears twice in the tree"
        del stack[level:]
        drawn[name] = stack[-1] if stack else None
        stack.append(name)
    return drawn


def test_the_docstring_tree_is_the_class_tree() -> None:
    """Every ``SacError`` subclass in the SDK appears once in ``_errors.py``'s tree, under
    its real parent, and nothing else does."""
    _all_sdk_modules()
    assert _errors.__doc__ is not None
    drawn = docstring_tree(_errors.__doc__)
    real: dict[str, str | None] = {"SacError": None}
    for cls in _subclasses(SacError):
        if not cls.__module__.startswith("sac.sdk"):
            continue
        parents = [base for base in cls.__bases__ if issubclass(base, SacError)]
        assert len(parents) == 1, f"{cls.__name__} has SacError parents {parents}"
        assert cls.__name__ not in real, f"two SDK errors are named {cls.__name__}"
        real[cls.__name__] = parents[0].__name__
    assert drawn == real


def test_the_tree_reader_reads_levels_and_catches_a_twin() -> None:
    tree = """
    SacError
    ├── A (also ValueError)  why
    │   └── B                 why
    └── C
        └── D
    Not part of it.
    """
    assert docstring_tree(tree) == {"SacError": None, "A": "SacError", "B": "A",
                                    "C": "SacError", "D": "C"}
    with pytest.raises(AssertionError, match="twice"):
        docstring_tree(tree.replace("D", "B"))


def test_an_error_prints_with_the_name_users_import() -> None:
    """A traceback's last line names the class as ``sac.sdk.X``: the private module that
    defines it is nothing a user can import from, and a copy pickled across processes
    comes back as the same class."""
    import pickle
    import traceback

    from sac import sdk

    error = sdk.ConfigurationError("ConsumerSettings.prefetch must be at least 1")
    last = traceback.format_exception_only(error)[-1]
    assert last == ("sac.sdk.ConfigurationError: ConsumerSettings.prefetch must be at "
                    "least 1\n")
    assert type(pickle.loads(pickle.dumps(error))) is sdk.ConfigurationError
    errors = [getattr(sdk, n) for n in sdk.__all__ if isinstance(getattr(sdk, n), type)
              and issubclass(getattr(sdk, n), BaseException)]
    assert len(errors) > 20
    assert [e for e in errors if e.__module__ != "sac.sdk"] == []
