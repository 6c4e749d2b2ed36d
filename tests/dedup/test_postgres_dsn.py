"""What ``PostgresStore`` does with the user's DSN: keeps its ``options`` (a ``search_path``
puts the tables in the user's schema), and never shows its password, in any form libpq
reads, nor fails to describe itself (an error message built during a failover must not raise).
"""

from __future__ import annotations

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from sac.sdk import ConfigurationError, StoreUnavailable
from sac.sdk.dedup import PostgresStore
from sac.server import LocalPostgres
from tests.dedup.conftest import new_database


@pytest.mark.parametrize("dsn", [
    "host=db.example user=app password=s3cret dbname=orders",
    "host=db.example user=app password='not s3cret' dbname=orders",
    "postgresql://app:s3cret@db.example:5432/orders",
    "postgresql://app:s3cret@db1.example:5432,db2.example:5433/orders?sslmode=require",
    "postgresql:///orders?host=db.example&password=s3cret",
])
def test_the_description_never_shows_the_password(dsn: str) -> None:
    store = PostgresStore(dsn)
    assert "s3cret" not in store.description
    assert "s3cret" not in repr(store)
    assert "password=***" in store.description
    assert "db.example" in store.description or "db1.example" in store.description


def test_a_dsn_that_does_not_parse_is_refused_in_one_line_without_its_secret() -> None:
    with pytest.raises(ConfigurationError) as caught:
        PostgresStore("host=db.example password = s3cret tail")
    message = str(caught.value)
    assert "does not parse" in message
    assert "s3cret" not in message
    assert "tail" not in message
    assert "\n" not in message


def test_a_multi_host_dsn_whose_servers_are_down_is_an_outage_not_an_error() -> None:
    """A failover's error path builds a message from ``description``: it must not raise, so
    the inbox retries instead of treating the failure as the message's."""
    store = PostgresStore("postgresql://app:s3cret@127.0.0.1:1,127.0.0.1:2/orders",
                          connect_timeout=1)
    with pytest.raises(StoreUnavailable) as caught:
        store.open()
    assert "does not connect" in str(caught.value)
    assert "s3cret" not in str(caught.value)


def test_options_are_the_users_then_ours(monkeypatch: pytest.MonkeyPatch) -> None:
    from sac.sdk.dedup.postgres import merged_options

    ours = "-c idle_in_transaction_session_timeout=60000"
    assert merged_options("-c search_path=app", ours) == f"-c search_path=app {ours}"
    monkeypatch.setenv("PGOPTIONS", "-c role=app")
    assert merged_options(None, ours) == f"-c role=app {ours}"  # libpq's own default
    assert merged_options("", ours) == ours  # an empty options= in the DSN overrides it


def test_the_tables_land_in_the_schema_of_the_dsns_search_path(postgres: LocalPostgres) -> None:
    dsn = new_database(postgres, "schema")
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("CREATE SCHEMA app_dedup")
    user_options = "-csearch_path=app_dedup -c statement_timeout=12345"
    store = PostgresStore(make_conninfo(dsn, options=user_options))
    with store:
        epoch = store.claim_epoch("q")
        with store.transaction("q", "m1", epoch) as tx:
            settings = tx.execute("SELECT current_setting('search_path'), "
                                  "current_setting('statement_timeout'), "
                                  "current_setting('idle_in_transaction_session_timeout')"
                                  ).fetchone()
    assert settings == ("app_dedup", "12345ms", "1min")
    with psycopg.connect(dsn, autocommit=True) as admin:
        tables = {row[0]: row[1] for row in admin.execute(
            "SELECT table_name, table_schema FROM information_schema.tables "
            "WHERE table_name LIKE 'sac_dedup_%'").fetchall()}
    assert tables == {"sac_dedup_meta": "app_dedup", "sac_dedup_epochs": "app_dedup",
                      "sac_dedup_records": "app_dedup"}
