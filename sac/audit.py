"""``sac audit PATH... [--inbox-jdbc URL [--inbox-user U] [--inbox-password-env VAR]
[--inbox-table T]] [--single-active QUEUE...] [--settle SECONDS] [--master URL] [--out DIR]``:
a production fleet's histories audited per queue and UTC day (``sac.checker.audit``).

Writes ``audit.json`` in ``--out`` and prints one table line per queue and day, those with
an anomaly first. Exit status: 0 clean, 1 some anomaly (or a malformed line), 2 the input
could not be audited (among others a history without events, or whose events name no
queue): one line naming the problem, never a stack trace as the only output, and no
``audit.json``.

The password is never an argument (it would be in the shell history and ``ps``): it is read
from the environment variable ``--inbox-password-env`` names, and never printed. Spark's JVM
writes its banner and log to ``audit-spark.log`` in ``--out``, not to the terminal, so that a
failure is the one line this command prints.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sac._oneline import one_line
from sac._reach import check_master, check_tcp
from sac._spark import session
from sac.checker.errors import CheckerError, InputError

if TYPE_CHECKING:

    from sac.checker.audit import AuditResult

SHOWN = 5
"""Ids printed per anomaly on a table line; ``audit.json`` lists up to 100."""
MALFORMED_SHOWN = 10
RESULT_FILE = "audit.json"
SPARK_LOG = "audit-spark.log"
POSTGRES_PORT = 5432
COLUMNS: tuple[tuple[str, Callable[[dict[str, Any]], object]], ...] = (
    ("QUEUE", lambda r: r["queue"] or '""'),
    ("DAY", lambda r: r["day"]),
    ("PUBLISHED", lambda r: r["published"]),
    ("CONFIRMED", lambda r: r["confirmed"]),
    ("COMMITTED", lambda r: r["committed"]),
    ("LOST", lambda r: r["lost"]["count"]),
    ("PENDING", lambda r: r["pending"]["count"]),
    ("DUPLICATED", lambda r: r["duplicated"]["count"]),
    ("UNEXPECTED", lambda r: r["unexpected"]["count"]),
    ("CONCURRENT", lambda r: r["concurrent"]["pairs"]),
    ("HANDOVERS", lambda r: r["handovers"]["count"]),
    ("GAP_P50_S", lambda r: _seconds(r["handovers"]["p50_gap_s"])),
    ("GAP_MAX_S", lambda r: _seconds(r["handovers"]["max_gap_s"])),
)


def add_parser(commands: Any) -> None:
    audit = commands.add_parser(
        "audit",
        help="audit a fleet's histories: lost, duplicated, concurrent per queue and day",
        description="Audit production histories (the SDK's HistoryRecorder files) per queue "
        "and UTC day. Put --single-active after the paths, or end its list with --.",
    )
    audit.add_argument("paths", nargs="+", metavar="PATH",
                       help="a *.jsonl file or a directory searched recursively for them "
                            "(local, hdfs://, s3a://...)")
    audit.add_argument("--inbox-jdbc", metavar="URL", default=None,
                       help="read the committed effects from the SDK's inbox table, e.g. "
                            "jdbc:postgresql://db:5432/app (default: the commit events)")
    audit.add_argument("--inbox-user", metavar="U", default=None)
    audit.add_argument("--inbox-password-env", metavar="VAR", default=None,
                       help="the environment variable holding the password")
    audit.add_argument("--inbox-table", metavar="T", default=None,
                       help="the inbox table (default: sac_dedup_records)")
    audit.add_argument("--single-active", metavar="QUEUE", nargs="+", action="extend",
                       default=None,
                       help="queues checked for concurrent processing (default: every queue)")
    audit.add_argument("--settle", metavar="SECONDS", type=float, default=300.0,
                       help="a message confirmed this close to the history's end without an "
                            "effect is pending, not lost (default: 300)")
    audit.add_argument("--master", metavar="URL", default=None,
                       help="a Spark master URL, e.g. spark://10.0.0.5:7077 (default: local[*])")
    audit.add_argument("--out", metavar="DIR", type=Path, default=Path("."),
                       help=f"where {RESULT_FILE} and {SPARK_LOG} go (default: .)")
    audit.set_defaults(func=run)


@one_line("sac audit", CheckerError, 2)
def run(args: argparse.Namespace) -> int:
    if not math.isfinite(args.settle) or args.settle < 0:
        raise InputError(f"--settle {args.settle}: expected a number of seconds >= 0")
    inbox = _inbox(args)
    for path in args.paths:
        if "://" not in path and not os.path.exists(path):
            raise InputError(f"{path}: no such file or directory")
    _require_bytes(args.paths)
    if args.master is not None:
        check_master(args.master)
    args.out.mkdir(parents=True, exist_ok=True)
    from sac.checker.audit import audit

    spark, owned = session(args.master, args.out / SPARK_LOG, app="sac-audit")
    try:
        result = audit(spark, args.paths, inbox=inbox, single_active=args.single_active,
                       settle_s=args.settle)
    finally:
        if owned:
            spark.stop()
    written = args.out / RESULT_FILE
    written.write_text(json.dumps(result.as_json(), indent=2, sort_keys=True) + "\n")
    _print(result, written)
    return 0 if result.clean else 1


def _require_bytes(paths: list[str]) -> None:
    """Refuse, before Spark starts, local paths whose ``*.jsonl`` files are all empty: a
    history without events is not clean, it is not there. Remote paths (``hdfs://``...)
    are left to Spark's listing; hidden names are skipped as Spark skips them, but every
    directory is searched, so this never refuses what Spark would read."""
    if any("://" in path for path in paths):
        return
    for path in paths:
        if os.path.isfile(path):
            if os.path.getsize(path):
                return
            continue
        for parent, _dirs, names in os.walk(path):
            for name in names:
                if (name.endswith(".jsonl") and not name.startswith((".", "_"))
                        and os.path.getsize(os.path.join(parent, name))):
                    return
    raise InputError(f"{', '.join(paths)}: no history events (no non-empty *.jsonl file)")


def _inbox(args: argparse.Namespace) -> dict[str, str] | None:
    """The JDBC options, checked before Spark starts: the driver jar is there, the password
    variable is set, the host answers."""
    given = [flag for flag, value in (("--inbox-user", args.inbox_user),
                                      ("--inbox-password-env", args.inbox_password_env),
                                      ("--inbox-table", args.inbox_table)) if value is not None]
    if args.inbox_jdbc is None:
        if given:
            raise InputError(f"{', '.join(given)} needs --inbox-jdbc")
        return None
    from sac.checker.inbox import PACKAGE, InboxSource
    from sac.checker.spark_engine import POSTGRESQL_JDBC_JAR

    if not POSTGRESQL_JDBC_JAR.is_file():
        raise InputError(f"--inbox-jdbc needs the PostgreSQL JDBC driver {POSTGRESQL_JDBC_JAR}: "
                         f"apt-get install {PACKAGE}")
    options = {"url": args.inbox_jdbc}
    if args.inbox_user is not None:
        options["user"] = args.inbox_user
    if args.inbox_table is not None:
        options["table"] = args.inbox_table
    if args.inbox_password_env is not None:
        password = os.environ.get(args.inbox_password_env)
        if password is None:
            raise InputError(f"--inbox-password-env {args.inbox_password_env}: "
                             "no such environment variable")
        options["password"] = password
    source = InboxSource.from_options(options)  # refuses a URL that is not PostgreSQL's
    address = _jdbc_address(source.url)
    if address is not None:
        check_tcp(*address, f"--inbox-jdbc {source.display_url}")
    return options


def _jdbc_address(url: str) -> tuple[str, int] | None:
    """(host, port) of a one-host ``jdbc:postgresql:`` URL; ``None`` for several hosts
    (the driver tries them in turn) or a form this does not read."""
    rest = url.split(":", 2)[2]
    if not rest.startswith("//"):
        return ("localhost", POSTGRES_PORT)  # jdbc:postgresql:database
    netloc = urllib.parse.urlsplit(rest).netloc
    if "," in netloc:
        return None
    try:
        parts = urllib.parse.urlsplit(f"//{netloc}")
        return (parts.hostname or "localhost", parts.port or POSTGRES_PORT)
    except ValueError:
        return None


def _print(result: AuditResult, written: Path) -> None:
    anomalous = result.anomalous
    rows = anomalous + [row for row in result.rows if not row["anomalies"]]
    table = [[name for name, _ in COLUMNS]] + [[str(cell(row)) for _, cell in COLUMNS]
                                               for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    for line, row in zip(table, [None, *rows], strict=True):
        text = "  ".join(cell.rjust(w) if i > 1 else cell.ljust(w)
                         for i, (cell, w) in enumerate(zip(line, widths, strict=True)))
        print((text + _offenders(row)).rstrip())
    malformed = result.malformed
    for line in malformed["lines"][:MALFORMED_SHOWN]:
        print(f"{line['file']}:{line['line']}: malformed line: {line['error']}")
    if malformed["count"] > MALFORMED_SHOWN:
        print(f"... and {malformed['count'] - MALFORMED_SHOWN} more malformed line(s)")
    source = result.effects["source"]
    if source == "inbox":
        source = f"{result.effects['table']} at {result.effects['url']}"
    print(f"{len(anomalous)} of {len(result.rows)} queue-day(s) with anomalies, "
          f"{malformed['count']} malformed line(s); effects from {source}; {written}")


def _offenders(row: dict[str, Any] | None) -> str:
    """``  lost: m-1, m-2 (+3); concurrent: ...`` for a row with anomalies."""
    if row is None or not row["anomalies"]:
        return ""
    found = []
    for name in row["anomalies"]:
        listed = row[name]
        ids = listed["ids"][:SHOWN]
        rest = listed["count"] - len(ids)
        found.append(f"{name}: {', '.join(ids)}" + (f" (+{rest})" if rest else ""))
    return "  " + "; ".join(found)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
