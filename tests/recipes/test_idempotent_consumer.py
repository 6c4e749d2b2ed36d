"""``recipes/idempotent_consumer.py`` end to end, on SQLite and on PostgreSQL."""

from __future__ import annotations

import re

import pytest

from sac.server import LocalCluster, LocalPostgres
from tests.recipes.conftest import Recipe, number, run_recipe


def test_duplicates_are_suppressed_on_sqlite(recipe: Recipe) -> None:
    done = recipe("idempotent_consumer", "--messages", "120", "--crash-at", "60",
                  "--retransmit", "5")
    check_report(done.returncode, done.stdout + done.stderr, published=122, copies=5)


def test_duplicates_are_suppressed_on_postgres(recipe: Recipe, postgres: LocalPostgres) -> None:
    dsn = postgres.create_database("recipe_idempotent")  # its rows are kept apart by queue
    done = recipe("idempotent_consumer", "--dsn", dsn, "--messages", "120", "--retransmit",
                  "5")
    check_report(done.returncode, done.stdout + done.stderr, published=122, copies=5)


def test_any_broker_by_url(cluster: LocalCluster) -> None:
    """With ``--url`` the recipe knows no management API: it leaves its queues and says so."""
    urls = [f"--url={url}" for url in cluster.urls()]
    done = run_recipe("idempotent_consumer", *urls, "--messages", "40", "--retransmit", "2")
    out = done.stdout + done.stderr
    left = re.search(r"left on the broker: queue\(s\) (\S+), (\S+) ", out)
    assert left is not None, out
    for name in left.groups():
        cluster.management().delete_queue(name, if_empty=False)
    check_report(done.returncode, out, published=42, copies=2)
    assert cluster.credentials.password not in out


def check_report(status: int, out: str, published: int, copies: int) -> None:
    assert status == 0, out
    assert "consumer-1 exited with status 3" in out
    redelivered = re.search(r"(\d+) already committed: suppressed", out)
    assert redelivered is not None, out
    assert int(redelivered.group(1)) > 0
    assert f"{2 * copies} copies (marked and unmarked) suppressed by lookup, 0 refused" in out
    assert number(out, "messages published") == published
    assert f"effects                {published} rows for {published} ids" in out
    assert number(out, "missing") == 0
    assert number(out, "done twice") == 0
    assert number(out, "duplicates suppressed") == int(redelivered.group(1)) + 2 * copies
    assert "PROVED:" in out


@pytest.mark.parametrize(("args", "said"), [
    (["--dsn", "not a dsn"], "cannot use PostgreSQL (--dsn)"),
    (["--messages", "5", "--crash-at", "6"], "--crash-at (6) is beyond --messages (5)"),
])
def test_bad_input_is_one_line_and_status_2(recipe: Recipe, args: list[str],
                                            said: str) -> None:
    done = recipe("idempotent_consumer", *args)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert said in done.stderr
