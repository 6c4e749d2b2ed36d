"""The SDK's hot paths against the anchor: RabbitMQ's official Go client, amqp091-go, doing
the same work on the same cluster in the same minutes.

Why Go: a compiled client whose per-message cost is small next to the broker's, so its
msg/s is close to what this machine and this cluster allow; the SDK's ratio to it says how
much of that the SDK leaves on the table. The program is ``bench/go/anchor.go``, built on
first use from Debian's ``golang-go`` and ``golang-github-rabbitmq-amqp091-go-dev`` (GOPATH
mode, offline) into a cache directory (``$XDG_CACHE_HOME/sac/bench-go``, else
``~/.cache/sac/bench-go``), one binary per version of the source.

Contenders (30 000 persistent messages of 256 bytes by default):

``go-publish``
    amqp091-go, publisher confirms, at most ``--window`` (1 000) unconfirmed, mandatory, a
    36-character message id per message (as the SDK sends).
``sdk-blocking-publish`` / ``sdk-async-publish-many``
    ``Publisher.publish_many`` and ``AsyncPublisher.publish_many`` of all the messages, the
    same window.
``go-consume``
    amqp091-go, prefetch 1 000, ``basic.ack(multiple)`` every 100.
``sdk-blocking-consume`` / ``sdk-async-consume``
    ``Consumer`` and ``AsyncConsumer`` with a handler that counts, prefetch 1 000,
    ``ack_batch=100``.
``sdk-{blocking,async}-consume-inbox-{memory,sqlite,postgres}``
    the same consumers with an ``Inbox`` (default lookup policy) over each store, whose
    effect counts: what exactly-once itself costs. ``bench/dedup.py`` measures effects that
    write a row.

Every consumer drains a queue filled (untimed) by the SDK's blocking publisher, so that every
message carries a message id, as an inbox needs. Each run is a fresh process (Python:
``multiprocessing`` "spawn"; Go: its binary) on a fresh quorum queue with single active
consumer, declared as the SDK declares it, deleted after; rounds are interleaved (A B C, A B
C, ...) so that drift and the other work on the machine hit every contender alike, and the
median of the rounds is reported. Client CPU is the process's user + system CPU over the
timed interval (Go: getrusage; Python: ``time.process_time``), per message.

Run ``python -m bench.anchor --help``; ``--quick`` is a smoke test (2 000 messages, one
round). Results go to ``bench/results/anchor-<UTC>.json`` and a table is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import attrs

from sac.server import LocalCluster, LocalPostgres
from . import throughput
from ._report import broker_cpu_s, choices, positive_int, save, sdk_revision
from .throughput import CHILD_GRACE, MESSAGE_SIZE, Job, Measurement

GO_SOURCE = Path(__file__).resolve().parent / "go" / "anchor.go"
GOPATH = Path("/usr/share/gocode")
"""Where Debian's Go library packages put their sources (GOPATH mode)."""
AMQP091 = GOPATH / "src" / "github.com" / "rabbitmq" / "amqp091-go"
DEBIAN_PACKAGES = ("golang-go", "golang-github-rabbitmq-amqp091-go-dev")
RESULTS_PREFIX = "anchor"

DEFAULT_MESSAGES = 30_000
QUICK_MESSAGES = 2_000
DEFAULT_REPEAT = 3
STORES = ("memory", "sqlite", "postgres")

TARGETS = {"publish": 0.95, "consume": 0.9}
"""The SDK's faces against Go's msg/s (issue 23)."""
INBOX_TARGET = {"postgres": 0.5}
"""An inbox consumer against the same face without one, msg/s."""

Kind = Literal["publish", "consume"]
Face = Literal["go", "blocking", "asyncio"]


class AnchorUnavailable(Exception):
    """The Go anchor cannot be built here (one line, naming what to install)."""


# --------------------------------------------------------------------------- the Go binary


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sac" / "bench-go"


def _go_env(cache: Path) -> dict[str, str]:
    """GOPATH mode on Debian's library sources: no module download, no network."""
    return {**os.environ, "GO111MODULE": "off", "GOPATH": str(GOPATH), "GOFLAGS": "",
            "GOPROXY": "off", "GOCACHE": str(cache / "gocache")}


def go_binary(cache: Path | None = None) -> Path:
    """The anchor's binary, built first if this version of the source has none yet."""
    go = shutil.which("go")
    missing = " and ".join(DEBIAN_PACKAGES)
    if go is None:
        raise AnchorUnavailable(
            f"bench.anchor needs Go to build its anchor: install the Debian packages {missing} "
            "(make deps)")
    if not AMQP091.is_dir():
        raise AnchorUnavailable(
            f"bench.anchor needs amqp091-go in {AMQP091}: install the Debian package "
            f"{DEBIAN_PACKAGES[1]} (make deps)")
    cache = cache_dir() if cache is None else cache
    key = hashlib.sha256(GO_SOURCE.read_bytes()).hexdigest()[:16]
    binary = cache / f"anchor-{key}"
    if binary.exists():
        return binary
    cache.mkdir(parents=True, exist_ok=True)
    building = cache / f".anchor-{key}-{os.getpid()}"
    done = subprocess.run([go, "build", "-o", str(building), str(GO_SOURCE)],
                          env=_go_env(cache), capture_output=True, text=True, timeout=600,
                          check=False)
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["(no output)"])[0]
        raise AnchorUnavailable(f"building {GO_SOURCE.name} failed: {first}")
    building.replace(binary)  # atomic: a concurrent build yields the same file
    return binary


def go_version() -> str | None:
    go = shutil.which("go")
    if go is None:
        return None
    done = subprocess.run([go, "version"], capture_output=True, text=True, check=False)
    return done.stdout.strip() or None


def debian_version(package: str) -> str | None:
    done = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package],
                          capture_output=True, text=True, check=False)
    return done.stdout.strip() or None


def run_go(binary: Path, mode: Kind, job: Job) -> Measurement:
    """One run of the anchor; its JSON line as a ``Measurement``."""
    args = [str(binary), "-mode", mode, "-url", job.url, "-queue", job.queue,
            "-n", str(job.messages), "-size", str(MESSAGE_SIZE), "-window", str(job.window),
            "-prefetch", str(job.prefetch), "-ack-every", str(job.ack_every)]
    try:
        done = subprocess.run(args, capture_output=True, text=True, check=False,
                              timeout=job.timeout + CHILD_GRACE)
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"{job.variant}: no result after {job.timeout:g} s") from None
    if done.returncode != 0:
        raise RuntimeError(f"{job.variant} failed: {done.stderr.strip()}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return Measurement(messages=int(result["msgs"]), wall_s=float(result["seconds"]),
                       cpu_s=float(result["cpu_s"]), nacks=int(result["nacks"]))


# --------------------------------------------------------------------------- contenders


@attrs.frozen(kw_only=True)
class Contender:
    name: str
    kind: Kind
    face: Face
    store: str | None = None
    """The consumer's inbox store (``STORES``), None for none."""

    @property
    def baseline(self) -> str:
        """The Go contender of the same kind."""
        return f"go-{self.kind}"

    @property
    def without_inbox(self) -> str | None:
        """The same face's consumer without an inbox (for an inbox contender)."""
        if self.store is None:
            return None
        return "sdk-blocking-consume" if self.face == "blocking" else "sdk-async-consume"


def contenders(stores: Sequence[str]) -> list[Contender]:
    found = [
        Contender(name="go-publish", kind="publish", face="go"),
        Contender(name="sdk-blocking-publish", kind="publish", face="blocking"),
        Contender(name="sdk-async-publish-many", kind="publish", face="asyncio"),
        Contender(name="go-consume", kind="consume", face="go"),
        Contender(name="sdk-blocking-consume", kind="consume", face="blocking"),
        Contender(name="sdk-async-consume", kind="consume", face="asyncio"),
    ]
    for store in stores:
        found += [
            Contender(name=f"sdk-blocking-consume-inbox-{store}", kind="consume",
                      face="blocking", store=store),
            Contender(name=f"sdk-async-consume-inbox-{store}", kind="consume", face="asyncio",
                      store=store),
        ]
    return found


def _sdk_run(contender: Contender) -> Callable[[Job], Measurement]:
    match contender.face, contender.kind:
        case "blocking", "publish":
            return throughput.sdk_blocking_publish
        case "asyncio", "publish":
            return throughput.sdk_async_publish_many
        case "blocking", "consume":
            return throughput.sdk_blocking_consume
        case "asyncio", "consume":
            return throughput.sdk_async_consume
        case _:
            raise ValueError(f"{contender.name}: no SDK run for it")


@attrs.frozen(kw_only=True)
class Options:
    messages: int = DEFAULT_MESSAGES
    repeat: int = DEFAULT_REPEAT
    window: int = throughput.DEFAULT_WINDOW
    timeout: float = throughput.DEFAULT_TIMEOUT
    only: tuple[str, ...] = ()
    """Contender names to run (all when empty)."""
    stores: tuple[str, ...] = STORES


# --------------------------------------------------------------------------- the runs


@attrs.define
class Outcome:
    contender: Contender
    runs: list[Measurement] = attrs.Factory(list)
    notes: list[str] = attrs.Factory(list)

    def median(self, attr: str) -> float:
        return float(statistics.median(getattr(m, attr) for m in self.runs))


class Bench:
    """Interleaved rounds of every contender on one cluster (and one PostgreSQL)."""

    def __init__(self, cluster: LocalCluster, postgres: LocalPostgres | None, tmp: Path,
                 options: Options, binary: Path) -> None:
        self.urls = tuple(cluster.urls())
        self.cluster = cluster
        self.postgres = postgres
        self.tmp = tmp
        self.options = options
        self.binary = binary
        self.outcomes: dict[str, Outcome] = {}
        self._stores = 0

    def _job(self, name: str, queue: str, store: str = "") -> Job:
        return Job(variant=name, url=self.urls[0], queue=queue,
                   messages=self.options.messages, window=self.options.window,
                   prefetch=throughput.PREFETCH, ack_every=throughput.ACK_EVERY,
                   timeout=self.options.timeout, urls=self.urls, store=store)

    def _store(self, kind: str) -> str:
        """A fresh store of ``kind`` for one run, as ``Job.store`` names it."""
        self._stores += 1
        match kind:
            case "memory":
                return "memory"
            case "sqlite":
                return f"sqlite:{self.tmp / f'anchor-{self._stores}.db'}"
            case "postgres":
                if self.postgres is None:
                    raise RuntimeError("an inbox over PostgreSQL needs the bench's PostgreSQL")
                return f"postgres:{self.postgres.create_database(f'anchor_{self._stores}')}"
            case _:
                raise ValueError(f"unknown store {kind!r}")

    def run_once(self, contender: Contender, round_: int) -> None:
        outcome = self.outcomes.setdefault(contender.name, Outcome(contender))
        n = self.options.messages
        url = self.urls[0]
        queue = f"anchor-{contender.name}-{round_}-{uuid.uuid4().hex[:8]}"
        throughput.declare_queue(url, queue)
        try:
            if contender.kind == "consume":
                fill = throughput.run_isolated(self._job("fill", queue),
                                               throughput.sdk_blocking_publish)
                depth = throughput.queue_depth(url, queue)
                if fill.nacks or depth != n:
                    raise RuntimeError(f"filling {queue}: {fill.nacks} nacks, depth {depth}")
            job = self._job(contender.name, queue,
                            "" if contender.store is None else self._store(contender.store))
            broker_before = broker_cpu_s(self.cluster)
            if contender.face == "go":
                measurement = run_go(self.binary, contender.kind, job)
            else:
                measurement = throughput.run_isolated(job, _sdk_run(contender))
            measurement = replace(measurement,
                                  broker_cpu_s=broker_cpu_s(self.cluster) - broker_before)
            outcome.runs.append(measurement)
            left = throughput.queue_depth(url, queue)
            expected = n if contender.kind == "publish" else 0
            if left != expected:
                outcome.notes.append(f"round {round_ + 1}: {left} messages left, not {expected}")
            if measurement.nacks:
                outcome.notes.append(f"round {round_ + 1}: {measurement.nacks} nacks")
            print(f"  {contender.name:<34} round {round_ + 1}: "
                  f"{measurement.msg_per_s:>8.0f} msg/s {measurement.cpu_us_per_msg:>7.1f} us/msg",
                  file=sys.stderr, flush=True)
        finally:
            throughput.delete_queue(url, queue)

    def run(self, chosen: Sequence[Contender]) -> None:
        for round_ in range(self.options.repeat):
            for contender in chosen:
                self.run_once(contender, round_)


# --------------------------------------------------------------------------- the report


def _ratio(a: Outcome, b: Outcome | None) -> dict[str, float] | None:
    """``a`` against ``b``: the median over the rounds of each round's ratio (the two ran
    minutes apart at most, so the machine's drift between rounds cancels out), and the
    ratio of the medians."""
    if b is None or not a.runs or not b.runs:
        return None
    rounds = list(zip(a.runs, b.runs, strict=False))
    return {
        "throughput_ratio": round(statistics.median(
            x.msg_per_s / y.msg_per_s for x, y in rounds), 3),
        "cpu_ratio": round(statistics.median(
            x.cpu_us_per_msg / y.cpu_us_per_msg for x, y in rounds), 3),
        "throughput_ratio_of_medians": round(a.median("msg_per_s") / b.median("msg_per_s"), 3),
        "cpu_ratio_of_medians": round(
            a.median("cpu_us_per_msg") / b.median("cpu_us_per_msg"), 3),
    }


def summary(outcomes: dict[str, Outcome]) -> dict[str, Any]:
    """Per contender: medians, every run, and its ratios to Go (and, for an inbox, to the
    same face without one), with the target it is held to."""
    found: dict[str, Any] = {}
    for name, o in outcomes.items():
        c = o.contender
        row: dict[str, Any] = {
            "kind": c.kind, "face": c.face, "store": c.store,
            "msg_per_s": round(o.median("msg_per_s"), 1),
            "client_cpu_us_per_msg": round(o.median("cpu_us_per_msg"), 2),
            "broker_cpu_us_per_msg": round(statistics.median(
                m.broker_cpu_us_per_msg or 0.0 for m in o.runs), 2),
            "runs": [{"msg_per_s": round(m.msg_per_s, 1),
                      "client_cpu_us_per_msg": round(m.cpu_us_per_msg, 2),
                      "wall_s": round(m.wall_s, 4)} for m in o.runs],
            "notes": o.notes,
        }
        if c.face != "go":
            vs_go = _ratio(o, outcomes.get(c.baseline))
            target = TARGETS[c.kind] if c.store is None else None
            row["vs_go"] = None if vs_go is None else {
                **vs_go, "target": target,
                "meets_target": None if target is None else vs_go["throughput_ratio"] >= target}
        if c.without_inbox is not None:
            plain = _ratio(o, outcomes.get(c.without_inbox))
            target = INBOX_TARGET.get(str(c.store))
            row["vs_no_inbox"] = None if plain is None else {
                **plain, "baseline": c.without_inbox, "target": target,
                "meets_target": None if target is None else plain["throughput_ratio"] >= target}
        found[name] = row
    return found


def table(rows: dict[str, Any]) -> str:
    lines = [f"{'contender':<34} {'msg/s':>8} {'CPU us/msg':>10} {'vs Go':>6} {'CPU vs Go':>9} "
             f"{'vs no inbox':>11}  target"]
    for name, row in rows.items():
        go = row.get("vs_go") or {}
        plain = row.get("vs_no_inbox") or {}
        judged = plain if plain.get("target") is not None else go
        verdict = {True: "met", False: "MISSED", None: ""}[judged.get("meets_target")]
        target = f"{verdict} (>= {judged['target']})" if judged.get("target") else ""

        def x(value: float | None) -> str:
            return "" if value is None else f"{value:.2f}x"

        lines.append(
            f"{name:<34} {row['msg_per_s']:>8.0f} {row['client_cpu_us_per_msg']:>10.1f} "
            f"{x(go.get('throughput_ratio')):>6} {x(go.get('cpu_ratio')):>9} "
            f"{x(plain.get('throughput_ratio')):>11}  {target}")
    return "\n".join(lines)


def report(bench: Bench, started: dt.datetime, load_before: Sequence[float]) -> dict[str, Any]:
    options = bench.options
    return {
        "timestamp": started.isoformat(timespec="seconds"),
        "messages": options.messages,
        "message_size": MESSAGE_SIZE,
        "delivery_mode": throughput.PERSISTENT,
        "window": options.window,
        "prefetch": throughput.PREFETCH,
        "ack_every": throughput.ACK_EVERY,
        "queue_type": "quorum",
        "repeat": options.repeat,
        "order": "interleaved rounds: every contender once per round",
        "statistic": "median",
        "nodes": len(bench.cluster.nodes),
        "rabbitmq_series": bench.cluster.spec.rabbitmq,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "loadavg_1_5_15_before": [round(v, 2) for v in load_before],
        "loadavg_1_5_15_after": [round(v, 2) for v in os.getloadavg()],
        "go": {"version": go_version(), "binary": str(bench.binary),
               "packages": {p: debian_version(p) for p in DEBIAN_PACKAGES}},
        "sdk": sdk_revision(),
        "contenders": summary(bench.outcomes),
    }


def chosen_contenders(options: Options) -> list[Contender]:
    every = contenders(options.stores)
    if not options.only:
        return every
    names = {c.name for c in every}
    unknown = [n for n in options.only if n not in names]
    if unknown:
        raise ValueError(f"unknown contenders {unknown}; choose from {', '.join(sorted(names))}")
    return [c for c in every if c.name in options.only]


@contextlib.contextmanager
def _postgres(needed: bool) -> Iterator[LocalPostgres | None]:
    if not needed:
        yield None
        return
    with LocalPostgres(name="bench-anchor-pg") as postgres:
        yield postgres


def run(cluster: LocalCluster, postgres: LocalPostgres | None, options: Options,
        binary: Path | None = None) -> dict[str, Any]:
    """Every chosen contender, interleaved, on ``cluster``: the report (not yet saved)."""
    started = dt.datetime.now(dt.UTC)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="sac-anchor-") as tmp:
        bench = Bench(cluster, postgres, Path(tmp), options,
                      go_binary() if binary is None else binary)
        bench.run(chosen_contenders(options))
    return report(bench, started, load_before)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.anchor", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=positive_int, default=None,
                        help=f"per run (default {DEFAULT_MESSAGES}; --quick: {QUICK_MESSAGES})")
    parser.add_argument("--repeat", type=positive_int, default=None,
                        help=f"interleaved rounds, the median reported (default {DEFAULT_REPEAT}; "
                        "--quick: 1)")
    parser.add_argument("--quick", action="store_true", help="a smoke test: small and once")
    parser.add_argument("--window", type=positive_int, default=throughput.DEFAULT_WINDOW)
    parser.add_argument("--stores", type=choices(STORES), default=list(STORES),
                        help="inbox stores measured (comma list)")
    parser.add_argument("--no-inbox", action="store_true", help="no inbox contenders")
    parser.add_argument("--only", default="", help="comma list of contender names")
    parser.add_argument("--timeout", type=float, default=throughput.DEFAULT_TIMEOUT,
                        help="seconds allowed per run")
    parser.add_argument("--cluster-name", default="bench-anchor")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    options = Options(
        messages=args.messages or (QUICK_MESSAGES if args.quick else DEFAULT_MESSAGES),
        repeat=args.repeat or (1 if args.quick else DEFAULT_REPEAT),
        window=args.window, timeout=args.timeout,
        only=tuple(n.strip() for n in args.only.split(",") if n.strip()),
        stores=() if args.no_inbox else tuple(args.stores))
    try:
        chosen = chosen_contenders(options)
        binary = go_binary()
    except (AnchorUnavailable, ValueError) as exc:
        print(f"bench.anchor: {exc}", file=sys.stderr)
        return 2
    started = dt.datetime.now(dt.UTC)
    print("booting a 3-node RabbitMQ cluster ...", file=sys.stderr, flush=True)
    with LocalCluster(name=args.cluster_name, nodes=3) as cluster, \
            _postgres(any(c.store == "postgres" for c in chosen)) as postgres:
        result = run(cluster, postgres, options, binary)
    save(RESULTS_PREFIX, started, result, table(result["contenders"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
