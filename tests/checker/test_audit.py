"""``sac audit`` against real servers: generated fleet histories over a UTC midnight, their
effects in a real PostgreSQL ``sac_dedup_records`` table read through Spark's JDBC source,
the shared local Spark session, and the command as a user runs it.

Each full audit costs a few dozen small Spark stages, so the module audits each history
once (module fixtures) and the tests read those results; what a test owns is the oracle it
checks them against, computed here in plain Python from the generator's ``injected.json``
and the events, or taken from the reference engine (``sac/checker/python_engine.py``).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql import DataFrame, SparkSession

from sac import cli
from sac.checker import audit as audit_module
from sac.checker import audit_rules, python_engine, spark_rules
from sac.checker.audit import AuditResult, audit
from sac.checker.errors import InputError
from sac.checker.generate import generate_run
from sac.checker.spark_read import list_history
from sac.sdk.dedup._sql import RECORDS, SCHEMA
from sac.server import LocalPostgres

ROOT = Path(__file__).parents[2]
MIDNIGHT = 1_700_006_400.0
"""2023-11-15 00:00:00 UTC: runs start just before it and end just after."""
START = MIDNIGHT - 0.3
DATABASE = "sac_audit"
PASSWORD_ENV = "SAC_AUDIT_TEST_PASSWORD"
RECORDS_DDL = next(ddl for ddl in SCHEMA if ddl.startswith(f"CREATE TABLE {RECORDS} "))
"""The SDK's own DDL of the inbox table (``PostgresStore`` creates it so)."""

Key = tuple[str, str]
"""(queue, day) of an audit row."""


# ------------------------------------------------------------------ oracles


def utc_day(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).date().isoformat()


def events_of(run: Path) -> list[dict[str, Any]]:
    """Every event line of ``run`` that parses (the oracle's view; tiny runs only)."""
    found = []
    for path in sorted((run / "events").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and isinstance(event.get("ts"), float | int):
                found.append(event)
    return found


class Oracle:
    """What a run's events say about its messages, for the expected rows."""

    def __init__(self, run: Path) -> None:
        self.events = events_of(run)
        self.end = max(e["ts"] for e in self.events)
        self.first_publish: dict[str, tuple[float, str]] = {}
        self.first_confirm: dict[str, float] = {}
        for e in self.events:
            if e["type"] == "publish":
                seen = self.first_publish.get(e["msg"])
                if seen is None or (e["ts"], e["queue"]) < seen:
                    self.first_publish[e["msg"]] = (e["ts"], e["queue"])
            elif e["type"] == "confirm":
                seen_ts = self.first_confirm.get(e["msg"], e["ts"])
                self.first_confirm[e["msg"]] = min(e["ts"], seen_ts)
        topology = json.loads((run / "run.json").read_text())["topology"]
        self.queue_of_consumer = {c: q for q, consumers in topology.items() for c in consumers}

    def row_of(self, msg: str) -> Key:
        ts, queue = self.first_publish[msg]
        return queue, utc_day(ts)

    def by_row(self, msgs: list[str]) -> dict[Key, list[str]]:
        rows: dict[Key, list[str]] = defaultdict(list)
        for msg in sorted(msgs):
            rows[self.row_of(msg)].append(msg)
        return dict(rows)

    def effect_rows(self, run: Path) -> list[tuple[str, str, int, str, float]]:
        """``effects.jsonl`` as inbox rows (queue, message_id, epoch, consumer, committed_at):
        the queue of the id's publish, else the committing consumer's queue."""
        rows = []
        for line in (run / "effects.jsonl").read_text().splitlines():
            e = json.loads(line)
            published = self.first_publish.get(e["msg"])
            queue = published[1] if published else self.queue_of_consumer[e["actor"]]
            rows.append((queue, e["msg"], e["epoch"], e["actor"], e["ts"]))
        return rows


def listed(result: AuditResult, name: str) -> dict[Key, list[str]]:
    """{row: ids} of one id list, rows without any left out."""
    return {
        (row["queue"], row["day"]): row[name]["ids"] for row in result.rows if row[name]["ids"]
    }


# ------------------------------------------------------------------ servers and histories


def load_table(dsn: str, table: str, rows: list[tuple[str, str, int, str, float]]) -> None:
    """A fresh inbox ``table`` in the SDK's shape holding ``rows`` (a second effect of an
    id is refused by the key, as the SDK's insert does)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(RECORDS_DDL.replace(f"CREATE TABLE {RECORDS} ", f"CREATE TABLE {table} ", 1))
        with conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {table} (queue, message_id, epoch, consumer, committed_at) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                rows,
            )


@pytest.fixture(scope="module")
def database(postgres: LocalPostgres) -> str:
    return postgres.create_database(DATABASE)


@pytest.fixture(scope="module")
def jdbc(postgres: LocalPostgres) -> dict[str, str]:
    """The inbox options of the module's database (table added per use)."""
    return {
        "url": f"jdbc:postgresql://127.0.0.1:{postgres.port}/{DATABASE}",
        "user": postgres.credentials.user,
        "password": postgres.credentials.password,
    }


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two queues, four consumers, no nemesis, over midnight: four lost messages, a ghost
    commit (unexpected), one concurrent pair; its effects go into the inbox table."""
    path = tmp_path_factory.mktemp("audit") / "fleet"
    generate_run(path, events=3000, seed=21, queues=2, consumers=4, faults=0, start=START,
                 inject=["lost"] * 4 + ["unexpected", "concurrent"])
    return path


@pytest.fixture(scope="module")
def fleet_oracle(fleet: Path) -> Oracle:
    return Oracle(fleet)


@pytest.fixture(scope="module")
def settle(fleet: Path, fleet_oracle: Oracle) -> float:
    """A settle window that holds the last-confirmed lost message and no other: halfway
    between its confirm and the one before it."""
    lost = json.loads((fleet / "injected.json").read_text())["lost"]
    confirms = sorted(fleet_oracle.first_confirm[m] for m in lost)
    return fleet_oracle.end - (confirms[-1] + confirms[-2]) / 2


@pytest.fixture(scope="module")
def fleet_table(fleet: Path, fleet_oracle: Oracle, database: str) -> str:
    load_table(database, RECORDS, fleet_oracle.effect_rows(fleet))
    return RECORDS


@pytest.fixture(scope="module")
def from_table(
    spark: SparkSession, fleet: Path, fleet_table: str, jdbc: dict[str, str], settle: float
) -> AuditResult:
    return audit(spark, [str(fleet / "events")], inbox={**jdbc, "table": fleet_table},
                 settle_s=settle)


@pytest.fixture(scope="module")
def messy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Events only (no effects.jsonl), with duplicates, concurrent pairs, a lost, a ghost
    commit and a torn line."""
    path = tmp_path_factory.mktemp("audit") / "messy"
    generate_run(path, events=3000, seed=4, queues=2, consumers=4, faults=0, start=START,
                 inject=["duplicated", "duplicated", "concurrent", "concurrent", "lost",
                         "unexpected", "truncated", "no_effects"])
    return path


CLAIMED_QUEUES = ("serial", "late")


def claims(path: Path) -> Path:
    """A ledger for ``test_an_old_commit_before_the_new_consumers_claim_is_not_concurrent``:
    on each queue of ``CLAIMED_QUEUES`` the old consumer commits its last message at +3 s, the
    new one is delivered its first at +2 s and claims the queue (``active``) at +4 s on
    ``serial``, at +2.5 s on ``late``."""
    t0 = MIDNIGHT + 100.0

    def ev(ts: float, actor: str, kind: str, **fields: Any) -> str:
        return json.dumps({"ts": t0 + ts, "actor": actor, "type": kind, **fields})

    lines = []
    for queue, claimed in zip(CLAIMED_QUEUES, (4.0, 2.5), strict=True):
        a, b = f"{queue}-a", f"{queue}-b"
        lines += [ev(0, "p", "publish", msg=m, queue=queue) for m in (a, b)]
        lines += [ev(0.5, "p", "confirm", msg=m) for m in (a, b)]
        lines += [ev(0, "old", "active", queue=queue, epoch=1), ev(1, "old", "deliver", msg=a),
                  ev(3, "old", "commit", msg=a, epoch=1), ev(2, "new", "deliver", msg=b),
                  ev(claimed, "new", "active", queue=queue, epoch=2),
                  ev(5, "new", "commit", msg=b, epoch=2)]
    path.mkdir(parents=True)
    (path / "fleet.jsonl").write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def events_only(spark: SparkSession, messy: Path,
                tmp_path_factory: pytest.TempPathFactory) -> AuditResult:
    """One events-only audit (a Spark call costs seconds) of ``messy`` and ``claims``: their
    queues differ, and with a settle window of 0 the later end changes nothing of ``messy``."""
    ledger = claims(tmp_path_factory.mktemp("audit") / "claims")
    return audit(spark, [str(messy / "events"), str(ledger)], settle_s=0.0)


@pytest.fixture(scope="module")
def messy_audit(events_only: AuditResult) -> AuditResult:
    """The audit's rows of ``messy``'s queues."""
    rows = [row for row in events_only.rows if row["queue"] not in CLAIMED_QUEUES]
    assert rows
    return dataclasses.replace(events_only, rows=rows)


# ------------------------------------------------------------------ the inbox table


def test_the_table_audit_finds_exactly_the_lost_messages_per_queue_and_day(
    fleet: Path, fleet_oracle: Oracle, from_table: AuditResult,
) -> None:
    """Each in the row of its queue and the UTC day of its publish; the one confirmed last,
    inside the settle window, is pending instead (the history was cut before its consumer
    could be expected to have committed it)."""
    injected = json.loads((fleet / "injected.json").read_text())["lost"]
    late = max(injected, key=lambda m: fleet_oracle.first_confirm[m])
    expected = fleet_oracle.by_row([m for m in injected if m != late])
    assert len(expected) >= 2, "the lost messages should fall in more than one row"
    assert listed(from_table, "lost") == expected
    assert listed(from_table, "pending") == fleet_oracle.by_row([late])
    assert from_table.effects["source"] == "inbox"
    assert {row["day"] for row in from_table.rows} == {utc_day(START), utc_day(MIDNIGHT)}
    for row in from_table.rows:
        assert row["lost"]["count"] == len(row["lost"]["ids"])
        assert row["confirmed"] == row["published"]  # every generated message is confirmed


def test_a_table_row_never_published_is_unexpected_and_a_missing_row_is_lost(
    spark: SparkSession, fleet: Path, fleet_oracle: Oracle, database: str,
    jdbc: dict[str, str], settle: float, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """And every job of the audit is planned without a cross join, and what reaches the
    driver is the rows' figures, not events (ids are capped: here at 2 per list)."""
    rows = fleet_oracle.effect_rows(fleet)
    injected = json.loads((fleet / "injected.json").read_text())
    published = sorted(m for m in fleet_oracle.first_publish
                       if m not in injected["lost"] and fleet_oracle.row_of(m)[0] == "queue-1")
    dropped = published[10:13]  # committed, but the table lost their rows
    during = (START + fleet_oracle.end) / 2
    kept = [r for r in rows if r[1] not in dropped]
    extra = [("queue-1", "stranger-1", 9, "consumer-1", during),
             ("queue-1", "before-the-history", 1, "consumer-1", START - 3600.0)]
    load_table(database, "audit_variant", kept + extra)

    plans: list[str] = []
    collected: list[int] = []
    classic = type(spark.range(1))
    collect = classic.collect

    def recording(frame: DataFrame) -> list[Any]:
        plans.append(frame._jdf.queryExecution().executedPlan().toString())
        found = collect(frame)
        collected.append(len(found))
        return found

    monkeypatch.setattr(classic, "collect", recording)
    monkeypatch.setattr(audit_module, "ID_CAP", 2)
    result = audit(spark, [str(fleet / "events")],
                   inbox={**jdbc, "table": "audit_variant"}, settle_s=settle)
    monkeypatch.undo()

    row_key = fleet_oracle.row_of(dropped[0])
    assert {fleet_oracle.row_of(m) for m in dropped} == {row_key}
    late = max(injected["lost"], key=lambda m: fleet_oracle.first_confirm[m])
    lost_there = sorted([*dropped, *fleet_oracle.by_row(
        [m for m in injected["lost"] if m != late]).get(row_key, [])])
    row = next(r for r in result.rows if (r["queue"], r["day"]) == row_key)
    assert row["lost"] == {"count": len(lost_there), "ids": lost_there[:2],
                           "more": len(lost_there) - 2}
    stranger = next(r for r in result.rows
                    if (r["queue"], r["day"]) == ("queue-1", utc_day(during)))
    assert "stranger-1" in stranger["unexpected"]["ids"]
    assert sum(r["unexpected"]["count"] for r in result.rows) == len(injected["unexpected"]) + 1
    assert result.outside_history == 1  # before the history: not an anomaly of it
    assert result.totals()["lost"] == sum(r["lost"]["count"] for r in result.rows)

    assert plans
    for plan in plans:
        assert "CartesianProduct" not in plan
        assert "NestedLoopJoin" not in plan
    assert max(collected) < len(fleet_oracle.events) / 10, collected


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"password": "not-the-password-7c1f"}, "password authentication failed"),
        ({"url": "jdbc:postgresql://127.0.0.1:1/x"}, "refused"),
        ({"table": "no_such_table"}, 'relation "no_such_table" does not exist'),
        ({"url": "jdbc:mysql://127.0.0.1/x"}, "not a PostgreSQL JDBC URL"),
    ],
)
def test_an_unreadable_inbox_is_one_input_error_without_the_password(
    spark: SparkSession, fleet: Path, jdbc: dict[str, str], fleet_table: str,
    change: dict[str, str], message: str,
) -> None:
    options = {**jdbc, "table": fleet_table, **change}
    with pytest.raises(InputError) as caught:
        audit(spark, [str(fleet / "events")], inbox=options)
    text = str(caught.value)
    assert message in text
    assert len(text.splitlines()) == 1
    assert options["password"] not in text


# ------------------------------------------------------------------ events only


def test_duplicates_and_concurrent_processing_in_the_events_are_found(
    messy: Path, messy_audit: AuditResult,
) -> None:
    injected = json.loads((messy / "injected.json").read_text())
    oracle = Oracle(messy)
    assert listed(messy_audit, "duplicated") == oracle.by_row(injected["duplicated"])
    pairs = [(pair["queue"], sorted(pair["msgs"])) for pair in injected["concurrent"]]
    found = [(row["queue"], row["concurrent"]["ids"]) for row in messy_audit.rows
             if row["concurrent"]["pairs"]]
    assert sorted(m for _, ids in found for m in ids) == sorted(m for _, ms in pairs for m in ms)
    assert sum(row["concurrent"]["pairs"] for row in messy_audit.rows) == len(pairs)
    assert {q for q, _ in found} == {q for q, _ in pairs}
    assert all("concurrent" in row["anomalies"] for row in messy_audit.rows
               if row["concurrent"]["pairs"])


def test_the_events_only_audit_agrees_with_the_reference_engine(
    messy: Path, messy_audit: AuditResult,
) -> None:
    """Where the definitions coincide (settle 0: every confirmed message without an effect
    is lost), the id sets are the verdict's, and each lands in its row: the queue and day
    of its publish, of its effect when never published, of its overlap's start. (The
    verdict puts an unpublished id in queue ""; the audit, in its consumer's queue. Here the
    ghost is committed between its consumer's own commits, so no handover differs.)"""
    verdict = python_engine.check_run(messy).to_json()
    oracle = Oracle(messy)
    assert verdict["effects_source"] == "events"
    for name in ("lost", "duplicated"):
        assert listed(messy_audit, name) == oracle.by_row(verdict[name]["ids"]), name
    effects_day = {}
    for e in oracle.events:
        if e["type"] == "commit" and e["msg"] in verdict["unexpected"]["ids"]:
            effects_day[e["msg"]] = (oracle.queue_of_consumer[e["actor"]], utc_day(e["ts"]))
    assert listed(messy_audit, "unexpected") == {
        key: [m] for m, key in effects_day.items()}
    by_pair: dict[Key, set[str]] = defaultdict(set)
    for pair in verdict["concurrent"]["pairs"]:
        by_pair[(pair["queue"], utc_day(pair["second"]["start"]))] |= set(pair["msgs"])
    assert {k: set(v) for k, v in listed(messy_audit, "concurrent").items()} == by_pair
    assert sum(r["pending"]["count"] for r in messy_audit.rows) == 0
    handovers = defaultdict(list)
    for h in verdict["handovers"]:
        handovers[(h["queue"], utc_day(h["last_commit"]))].append(h["gap_s"])
    assert {
        (r["queue"], r["day"]): tuple(r["handovers"].values())
        for r in messy_audit.rows if r["handovers"]["count"]
    } == {
        key: (len(gaps), sorted(gaps)[(50 * len(gaps) + 99) // 100 - 1], max(gaps))
        for key, gaps in handovers.items()
    }


def test_a_malformed_line_is_counted_and_named_and_the_rest_is_audited(
    messy: Path, messy_audit: AuditResult,
) -> None:
    torn = json.loads((messy / "injected.json").read_text())["malformed"]
    assert messy_audit.malformed["count"] == len(torn) == 1
    [line] = messy_audit.malformed["lines"]
    assert (line["file"], line["line"]) == (str(messy / torn[0]["file"]), torn[0]["line"])
    assert not messy_audit.clean
    assert messy_audit.totals()["published"] > 0


def test_an_old_commit_before_the_new_consumers_claim_is_not_concurrent(
    events_only: AuditResult,
) -> None:
    """The verdict's intervals: on ``serial`` the new consumer is delivered its first message
    before the old one's last commit but claims the queue (``active``) after it; on ``late``
    it claims before that commit: a pair (the ``claims`` ledger)."""
    rows = [row for row in events_only.rows if row["queue"] in CLAIMED_QUEUES]
    assert {row["queue"]: row["concurrent"]["ids"] for row in rows} == {
        "serial": [], "late": ["late-a", "late-b"]}
    assert [row["anomalies"] for row in rows] == [["concurrent"], []]  # late, serial


def test_the_settle_window_makes_a_recent_confirm_pending(spark: SparkSession) -> None:
    """At the cutoff (the end minus the window) a message is lost; just after it, pending;
    with an effect, neither."""
    events = spark.createDataFrame(
        [(0, 10.0, "p", "publish", m, "q") for m in ("early", "edge", "late", "done")]
        + [(0, 20.0, "p", "confirm", "early", None), (0, 50.0, "p", "confirm", "edge", None),
           (0, 50.5, "p", "confirm", "late", None), (0, 60.0, "p", "confirm", "done", None)],
        "run int, ts double, actor string, type string, msg string, queue string",
    )
    effects = spark.createDataFrame([(0, "done", "c", 61.0)], "run int, msg string, "
                                    "actor string, ts double")
    published = spark_rules.first_publishes(events)
    found = {r["msg"]: (r["lost"], r["pending"]) for r in
             audit_rules.message_side(events, published, effects, cutoff=50.0).collect()}
    assert found == {"early": (True, False), "edge": (True, False), "late": (False, True),
                     "done": (False, False)}


def test_listing_reads_each_jsonl_file_once_and_refuses_a_path_without_one(
    spark: SparkSession, tmp_path: Path,
) -> None:
    (tmp_path / "host-1" / "deep").mkdir(parents=True)
    for name in ("host-1/a.jsonl", "host-1/deep/b.jsonl", "host-1/.swp.jsonl",
                 "host-1/_tmp.jsonl", "host-1/notes.txt"):
        (tmp_path / name).write_text("{}\n")
    files = list_history(spark, [str(tmp_path / "host-1"), str(tmp_path / "host-1/a.jsonl")])
    assert [f.rsplit("/", 2)[-2:] for f in files] == [["host-1", "a.jsonl"], ["deep", "b.jsonl"]]
    for path, message in ((tmp_path / "nope", "no such file"),
                          (tmp_path / "host-1/notes.txt", "no *.jsonl file")):
        with pytest.raises(InputError, match=re.escape(message)):
            list_history(spark, [str(path)])


# ------------------------------------------------------------------ the command


def sac(*args: str | Path, env: dict[str, str] | None = None,
        timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sac", *map(str, args)], capture_output=True, text=True,
        timeout=timeout, cwd=ROOT, env={**os.environ, **(env or {})},
    )


def test_the_command_from_the_commit_events_agrees_with_the_table_audit(
    fleet: Path, settle: float, from_table: AuditResult, tmp_path: Path,
) -> None:
    """``sac audit`` as a user runs it, on the commit events alone: both sources hold the
    same effects (the generator's effects.jsonl is its commit events), so every row agrees
    with the table's audit: counts, ids, the concurrency (delivers with the table's commit
    times) and the handover gaps."""
    done = sac("audit", fleet / "events", "--settle", repr(settle), "--out", tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr == ""
    written = json.loads((tmp_path / "audit.json").read_text())
    assert written["effects"] == {"source": "events"}
    assert written["rows"] == from_table.rows
    assert written["totals"] == from_table.totals()
    assert written["totals"]["concurrent_pairs"] == 1
    assert written["totals"]["handovers"] >= 1
    assert written["clean"] is False
    lines = done.stdout.splitlines()
    assert lines[0].split()[:3] == ["QUEUE", "DAY", "PUBLISHED"]
    anomalous = [(r["queue"], r["day"]) for r in from_table.anomalous]
    assert [tuple(line.split()[:2]) for line in lines[1:1 + len(anomalous)]] == anomalous
    assert len(lines) == 2 + len(from_table.rows)
    for line, row in zip(lines[1:], from_table.anomalous, strict=False):
        assert all(f"{name}: " in line for name in row["anomalies"]), line


def test_the_command_exits_0_on_a_clean_inbox(
    spark: SparkSession, database: str, jdbc: dict[str, str], tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In this process (``sac.cli.main``), on the session the tests share, which the command
    uses and leaves running: the inbox options as flags, the password from the environment."""
    run = generate_run(tmp_path / "clean", events=600, seed=2, faults=0,
                       start=MIDNIGHT - 0.05).path
    load_table(database, "audit_clean", Oracle(run).effect_rows(run))
    monkeypatch.setenv(PASSWORD_ENV, jdbc["password"])
    status = cli.main(["audit", str(run / "events"), "--inbox-jdbc", jdbc["url"],
                       "--inbox-user", jdbc["user"], "--inbox-password-env", PASSWORD_ENV,
                       "--inbox-table", "audit_clean", "--settle", "0",
                       "--out", str(tmp_path / "out"), "--single-active", "queue-0"])
    out = capsys.readouterr().out
    assert status == 0, out
    written = json.loads((tmp_path / "out" / "audit.json").read_text())
    assert written["clean"] is True
    assert written["effects"] == {"source": "inbox", "url": jdbc["url"], "table": "audit_clean"}
    assert written["settings"]["single_active"] == ["queue-0"]
    assert written["totals"]["committed"] == written["totals"]["published"] > 0
    assert out.splitlines()[-1].startswith("0 of 2 queue-day(s) with anomalies")
    assert jdbc["password"] not in out + (tmp_path / "out" / "audit.json").read_text()
    assert spark.range(1).count() == 1  # still running


def test_a_wrong_password_is_one_line_and_exit_2(
    spark: SparkSession, fleet: Path, jdbc: dict[str, str], tmp_path: Path,
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only the database can tell a wrong password, once Spark reads the table: in this
    process (``sac.cli.main``) on the session the tests share. What this process's file
    descriptors 1 and 2 receive meanwhile, the command's and the JVM's output alike, is the
    one line, without the password."""
    wrong = "wrong-8d2b-password"
    monkeypatch.setenv(PASSWORD_ENV, wrong)
    status = cli.main(["audit", str(fleet / "events"), "--inbox-jdbc", jdbc["url"],
                       "--inbox-user", jdbc["user"], "--inbox-password-env", PASSWORD_ENV,
                       "--out", str(tmp_path)])
    out, err = capfd.readouterr()
    assert status == 2
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert err.startswith("sac audit: ")
    assert "password authentication failed" in err
    assert wrong not in err
    assert not (tmp_path / "audit.json").exists()
    assert spark.range(1).count() == 1  # still running


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--inbox-jdbc", "jdbc:postgresql://127.0.0.1:1/x"], "cannot reach 127.0.0.1:1"),
        (["--inbox-jdbc", "postgresql://127.0.0.1/x"], "not a PostgreSQL JDBC URL"),
        (["--inbox-jdbc", "jdbc:postgresql://127.0.0.1:1/x?password=s3cr3t-in-url"],
         "password=***"),
        (["--inbox-user", "u"], "--inbox-user needs --inbox-jdbc"),
        (["--inbox-jdbc", "jdbc:postgresql://127.0.0.1/x", "--inbox-password-env",
          "SAC_AUDIT_NOT_SET"], "SAC_AUDIT_NOT_SET: no such environment variable"),
        (["--settle", "-1"], "--settle -1.0"),
        (["--master", "spark://127.0.0.1:9"], "cannot reach 127.0.0.1:9"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_before_spark_starts(
    fleet: Path, args: list[str], message: str, tmp_path: Path,
) -> None:
    done = sac("audit", fleet / "events", *args, "--out", tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("sac audit: "), done.stderr
    assert message in done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert "s3cr3t" not in done.stderr
    assert not (tmp_path / "audit-spark.log").exists()


def test_a_missing_path_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = sac("audit", tmp_path / "nope", "--out", tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == f"sac audit: {tmp_path / 'nope'}: no such file or directory"


def test_a_missing_jdbc_driver_names_the_package(
    fleet: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    monkeypatch.setattr("sac.checker.spark_engine.POSTGRESQL_JDBC_JAR", tmp_path / "postgresql.jar")
    status = cli.main(["audit", str(fleet / "events"), "--inbox-jdbc",
                       "jdbc:postgresql://127.0.0.1/x", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 2
    assert len(err.splitlines()) == 1
    assert "apt-get install libpostgresql-jdbc-java" in err


def test_a_history_of_empty_files_is_one_line_and_exit_2_before_spark_starts(
    tmp_path: Path,
) -> None:
    """An audit of nothing is not clean: empty ledgers are refused from the listing alone."""
    (tmp_path / "fleet" / "host-1").mkdir(parents=True)
    (tmp_path / "fleet" / "host-1" / "consumer.jsonl").write_text("")
    (tmp_path / "fleet" / "publisher.jsonl").write_text("")
    done = sac("audit", tmp_path / "fleet", "--out", tmp_path / "out")
    assert done.returncode == 2, done.stdout
    assert done.stderr.strip() == (
        f"sac audit: {tmp_path / 'fleet'}: no history events (no non-empty *.jsonl file)")
    assert not (tmp_path / "out" / "audit-spark.log").exists()
    assert not (tmp_path / "out" / "audit.json").exists()


@pytest.mark.parametrize(
    ("lines", "missing"),
    [
        (['{"ts": "soon"}', "not json", ""], "no history events (no well-formed event line)"),
        ([json.dumps({"ts": 1.0, "actor": "p", "type": "publish", "msg": "m-1", "seq": 1}),
          json.dumps({"ts": 1.1, "actor": "p", "type": "confirm", "msg": "m-1"}),
          json.dumps({"ts": 2.0, "actor": "c", "type": "commit", "msg": "m-1", "epoch": None}),
          json.dumps({"ts": 3.0, "actor": "c", "type": "evict", "queue": "q"})],
         "no event names a queue"),
    ],
)
def test_a_history_with_nothing_to_audit_is_one_line_and_exit_2(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    lines: list[str], missing: str,
) -> None:
    """Files with no well-formed event, or whose events name no queue, are not a clean
    fleet: they could not be audited (in this process, on the shared Spark session)."""
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text("\n".join(lines) + "\n")
    status = cli.main(["audit", str(ledger), "--out", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert status == 2, captured.out
    assert captured.err.startswith(f"sac audit: {ledger}: {missing}")
    assert len(captured.err.splitlines()) == 1
    assert not (tmp_path / "out" / "audit.json").exists()
