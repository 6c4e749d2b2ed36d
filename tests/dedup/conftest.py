"""Every dedup test runs against each store: memory, SQLite (a file in the test's tmp dir) and
PostgreSQL (a database of its own on the session's real server)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sac.sdk.dedup import MemoryStore, PostgresStore, SQLiteStore, Store

if TYPE_CHECKING:
    from sac.server import LocalPostgres

STORES = ["memory", "sqlite", "postgres"]
SQL_STORES = ["sqlite", "postgres"]

StoreFactory = Callable[[], Store]


def new_database(postgres: LocalPostgres, label: str) -> str:
    return postgres.create_database(f"t_{label[:30].lower()}_{os.urandom(3).hex()}")


def store_factory(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> StoreFactory:
    """Builds stores of ``kind`` that share one place (file, database, or memory object), the
    way several consumers of one queue share it."""
    if kind == "memory":
        shared = MemoryStore()
        return lambda: shared
    if kind == "sqlite":
        path = tmp_path / "dedup.db"
        return lambda: SQLiteStore(path)
    postgres: LocalPostgres = request.getfixturevalue("postgres")
    dsn = new_database(postgres, "d")
    return lambda: PostgresStore(dsn)


@pytest.fixture(params=STORES)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_store(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[StoreFactory]:
    made: list[Store] = []
    factory = store_factory(store_kind, tmp_path, request)

    def make() -> Store:
        store = factory()
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


@pytest.fixture
def store(make_store: StoreFactory) -> Store:
    opened = make_store()
    opened.open()
    return opened
