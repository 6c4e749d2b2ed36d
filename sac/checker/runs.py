"""Reading a run directory (``SPEC.md``) for the Python engine, as ``SPEC.md`` says.

Files are streamed line by line: a run of tens of millions of events is never held as text.
Each line is parsed and checked against the required fields; a line that fails is recorded in
``Findings.malformed`` (file relative to the run, 1-based line) and skipped, so one torn write
never hides the rest of the run. Events of a type the spec does not know are counted in
``Findings.unknown_events`` and not yielded.

Lines end at ``\\n``, ``\\r\\n`` or ``\\r`` (Python's universal newlines, which is also how
Hadoop's line reader under Spark splits them), so both engines number lines the same way.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import attrs

from . import spec
from .errors import InputError

Event = dict[str, Any]
"""A parsed event line whose required fields are present with the right JSON types; its
``ts`` is made a float (a JSON ``5`` and ``5.0`` are one time, and Spark reads both as a
double)."""

_JSON_WHITESPACE = " \t\r\n"


@dataclass(frozen=True)
class RunConfig:
    """The settings of ``run.json`` that the verdict depends on."""

    single_active_queues: frozenset[str] | None = None
    """Queues checked for concurrent processing; ``None``: every queue."""
    tolerates: dict[str, str] = field(default_factory=dict)
    activity_gap_s: float = spec.DEFAULT_ACTIVITY_GAP_S
    ordered_queues: frozenset[str] | None = None
    """Queues checked for ``reordered``: ``run.json``'s ``ordered_queues``, else the
    ``single_active_queues``; ``None``: every queue."""
    broker: dict[str, str] | None = None
    """What the run ran on (``broker``: product, version, metadata store), for the report
    only; None when ``run.json`` does not say, or says it in another shape (a history from
    elsewhere): the verdict does not depend on it, so it is never a reason to refuse a run."""


@dataclass(frozen=True)
class Run:
    """A run directory that exists, with its settings read."""

    path: Path
    name: str
    config: RunConfig

    @property
    def has_effects_file(self) -> bool:
        return (self.path / spec.EFFECTS_FILE).is_file()


@attrs.frozen(kw_only=True)
class Malformed:
    """A line that was skipped, and why."""

    file: str
    """Relative to the run directory, with ``/`` separators."""
    line: int
    """1-based."""
    error: str


@attrs.frozen(kw_only=True)
class Effect:
    """One effect row: ``actor`` committed ``msg`` at ``ts``.

    A frozen attrs value like every other (built by field name): a run of a million events
    builds about 200 000 of these and as many ``Interval``s, and each costs about 0.3 µs
    more to build than a ``NamedTuple`` would (about 1% of the Python engine's time), while
    its fields read faster (slots), which the sorts by time use."""

    msg: str
    actor: str
    ts: float


@dataclass
class Findings:
    """What reading found besides the events: filled in as the files are streamed."""

    malformed: list[Malformed] = field(default_factory=list)
    unknown_events: Counter[str] = field(default_factory=Counter)


def open_run(path: Path) -> Run:
    """The run at ``path`` with its ``run.json`` read and checked.

    Raises ``InputError`` when ``path`` is not a directory, has no ``run.json`` or no
    non-empty event file (not a run: checking it would pass for want of evidence), or its
    ``run.json`` is unreadable or has a setting of the wrong shape: a verdict computed on a
    misread setting would be wrong without saying so. These are decided from the listing
    alone, before any engine starts.
    """
    if not path.is_dir():
        raise InputError(f"run directory not found: {path}")
    if not (path / spec.RUN_FILE).is_file():
        raise InputError(f"{path}: not a run: no {spec.RUN_FILE}")
    run = Run(path=path, name=path.resolve().name, config=_read_config(path / spec.RUN_FILE))
    files = event_files(run)
    if not any(p.stat().st_size for p in files):
        where = "empty" if files else "none"
        raise InputError(f"{path}: not a run: no history events ({spec.EVENTS_DIR}/"
                         f"{spec.EVENTS_GLOB}: {where})")
    return run


def require_checkable(where: object, events: int, queued: int) -> None:
    """Refuse a history that was read but holds nothing to check: no well-formed event, or
    no event naming a queue (a ``publish`` or ``active`` with ``queue``).

    A verdict on such input would be "valid" for want of evidence, which is how a checker
    pointed at the wrong directory passes; it is an input error instead (``SPEC.md``).
    """
    if not events:
        raise InputError(f"{where}: no history events (no well-formed event line)")
    if not queued:
        raise InputError(f"{where}: no event names a queue (no publish or active event with a "
                         "queue): nothing to check")


def event_files(run: Run) -> list[Path]:
    """``events/*.jsonl``, sorted by name, without hidden files (names starting with ``.`` or
    ``_``, which Spark's file listing skips too: editor swap files, ``_SUCCESS`` markers)."""
    events_dir = run.path / spec.EVENTS_DIR
    if not events_dir.is_dir():
        return []
    return sorted(
        (
            p
            for p in events_dir.glob(spec.EVENTS_GLOB)
            if p.is_file() and not p.name.startswith(spec.HIDDEN_PREFIXES)
        ),
        key=lambda p: p.name,
    )


def read_events(run: Run, findings: Findings) -> Iterator[Event]:
    """Every well-formed event of a known type, file by file, in line order."""
    for path in event_files(run):
        for line_no, obj in _objects(run, path, findings):
            error = _event_error(obj)
            if error:
                findings.malformed.append(_malformed(run, path, line_no, error))
            elif obj["type"] in spec.KNOWN_EVENT_TYPES:
                obj["ts"] = float(obj["ts"]) + 0.0  # -0.0 reads as 0.0 (SPEC.md)
                yield obj
            else:
                findings.unknown_events[obj["type"]] += 1


def read_effects(run: Run, findings: Findings) -> Iterator[Effect]:
    """The rows of ``effects.jsonl`` that are well-formed (none when there is no file)."""
    path = run.path / spec.EFFECTS_FILE
    if not path.is_file():
        return
    for line_no, obj in _objects(run, path, findings):
        error = _effect_error(obj)
        if error:
            findings.malformed.append(_malformed(run, path, line_no, error))
        else:
            yield Effect(msg=obj["msg"], actor=obj["actor"], ts=float(obj["ts"]) + 0.0)


def _objects(run: Run, path: Path, findings: Findings) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based line, object) of each line of ``path`` that parses as a JSON object."""
    try:
        # utf-8-sig: a byte order mark opening the file is skipped, as Hadoop skips it.
        with path.open(encoding="utf-8-sig", errors="replace") as lines:
            for line_no, line in enumerate(lines, start=1):
                if not line.strip(_JSON_WHITESPACE):
                    continue
                try:
                    obj = _DECODER.decode(line)
                except ValueError as exc:
                    findings.malformed.append(_malformed(run, path, line_no, f"not JSON: {exc}"))
                    continue
                if "\\u" in line and _lone_surrogate(obj):
                    findings.malformed.append(_malformed(
                        run, path, line_no, "not JSON: an unpaired UTF-16 surrogate escape"))
                    continue
                if isinstance(obj, dict):
                    yield line_no, obj
                else:
                    findings.malformed.append(
                        _malformed(run, path, line_no, f"not an object: {type(obj).__name__}")
                    )
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _lone_surrogate(value: object) -> bool:
    """Whether a decoded string (key or value, at any depth) holds a code point of the
    surrogate range: Python's parser lets an unpaired ``\\ud800`` through, which is not
    valid Unicode (Spark refuses the line; SPEC.md)."""
    if isinstance(value, str):
        return any("\ud800" <= ch <= "\udfff" for ch in value)
    if isinstance(value, dict):
        return any(_lone_surrogate(k) or _lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_lone_surrogate(v) for v in value)
    return False


def _reject_constant(name: str) -> float:
    """``NaN`` and ``Infinity`` are not JSON; Python's parser accepts them unless told not to."""
    raise ValueError(f"{name} is not a JSON number")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
"""One decoder for every line (``json.loads`` with an option builds a new one per call)."""


def _malformed(run: Run, path: Path, line_no: int, error: str) -> Malformed:
    return Malformed(file=path.relative_to(run.path).as_posix(), line=line_no, error=error)


def _is_number(value: object) -> TypeGuard[int | float]:
    """A JSON number that is a finite double (``1e400`` parses as infinity, and a time that
    is not finite would make the verdict itself not JSON)."""
    # bool is an int in Python but not a number in JSON.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a double
        return False


_INT64 = range(-(2**63), 2**63)


def is_integer(value: object) -> TypeGuard[int]:
    """A JSON integer that fits 64 bits (what Spark reads as a long)."""
    return isinstance(value, int) and not isinstance(value, bool) and value in _INT64


def _event_error(obj: dict[str, Any]) -> str | None:
    """Why ``obj`` is not a well-formed event, or ``None``."""
    if not _is_number(obj.get("ts")):
        return "ts: missing or not a number"
    if not isinstance(obj.get("actor"), str):
        return "actor: missing or not a string"
    kind = obj.get("type")
    if not isinstance(kind, str):
        return "type: missing or not a string"
    if kind in spec.MESSAGE_EVENT_TYPES and not isinstance(obj.get("msg"), str):
        return "msg: missing or not a string"
    return None


def _effect_error(obj: dict[str, Any]) -> str | None:
    """Why ``obj`` is not a well-formed effect row, or ``None``."""
    if not isinstance(obj.get("msg"), str):
        return "msg: missing or not a string"
    if not isinstance(obj.get("actor"), str):
        return "actor: missing or not a string"
    if not _is_number(obj.get("ts")):
        return "ts: missing or not a number"
    epoch = obj.get("epoch")
    if epoch is not None and not is_integer(epoch):
        return "epoch: not an integer or null"
    return None


def _read_config(path: Path) -> RunConfig:
    try:
        raw = _DECODER.decode(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise InputError(f"{path}: not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise InputError(f"{path}: not a JSON object")
    single_active = _queues(path, raw.get("single_active_queues"), "single_active_queues")
    return RunConfig(
        single_active_queues=single_active,
        tolerates=_tolerates(path, raw.get("tolerates")),
        activity_gap_s=_gap(path, raw.get("activity_gap_s")),
        ordered_queues=(
            _queues(path, raw["ordered_queues"], "ordered_queues")
            if raw.get("ordered_queues") is not None
            else single_active
        ),
        broker=_broker(raw.get("broker")),
    )


BROKER_FIELDS = ("product", "version", "metadata_store")


def _broker(value: object) -> dict[str, str] | None:
    if not isinstance(value, dict) or not all(
            isinstance(value.get(f), str) for f in BROKER_FIELDS):
        return None
    return {f: value[f] for f in BROKER_FIELDS}


def _queues(path: Path, value: object, name: str) -> frozenset[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(q, str) for q in value):
        raise InputError(f"{path}: {name} must be a list of queue names or null")
    return frozenset(value)


def _tolerates(path: Path, value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"{path}: tolerates must be an object {{anomaly: reason}}")
    for anomaly, reason in value.items():
        if anomaly not in spec.TOLERABLE:
            raise InputError(
                f"{path}: tolerates names {anomaly!r}, not one of {', '.join(spec.TOLERABLE)}"
            )
        if not isinstance(reason, str) or not reason:
            raise InputError(f"{path}: tolerates[{anomaly!r}] needs a reason (non-empty string)")
    return dict(value)


def _gap(path: Path, value: object) -> float:
    if value is None:
        return spec.DEFAULT_ACTIVITY_GAP_S
    if not _is_number(value) or value < 0:
        raise InputError(f"{path}: activity_gap_s must be a number >= 0")
    return float(value)
