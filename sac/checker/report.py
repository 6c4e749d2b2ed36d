"""``report.html``: every run's verdict for people, in one static file.

The file is self-contained (figures are inline SVG, the style sheet is inline, no URL points
outside it) so that it can be attached to an issue, mailed or opened from a CI artefact without
a server. The page starts with the summary over all runs, then one section per run: its verdict
and the anomalies with their offending message ids, the timeline of consumers per queue and the
latency histogram.

This module turns verdicts (``sac/checker/SPEC.md``) into plain values for the template; the
figures are ``sac.checker.plots``; the layout is ``templates/report.html``. A verdict is typed
(``sac.checker.verdict.Verdict``), so none lacks a field the report shows, and the template
fails on a missing value instead of rendering a blank: the report is how people judge a run.

Example::

    render_report(verdicts, summary, Path("out"))  # -> out/report.html
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import jinja2

from sac.history import ANOMALIES, MALFORMED, MESSAGE_ANOMALIES
from . import plots
from .verdict import Verdict

TEMPLATES = Path(__file__).parent / "templates"
IDS_SHOWN = 12  # offending ids listed per anomaly before "and N more"
LINES_SHOWN = 10  # malformed lines listed
ROWS_SHOWN = 15  # concurrent pairs, handovers
MSGS_PER_PAIR = 6  # ids listed per concurrent pair


@attrs.frozen
class Shown:
    """The first items of a list and how many were left out."""

    items: tuple[Any, ...]
    more: int

    @classmethod
    def of(cls, items: Sequence[Any], limit: int) -> Shown:
        return cls(tuple(items[:limit]), max(len(items) - limit, 0))


@attrs.frozen
class AnomalyRow:
    """One line of a run's verdict table."""

    name: str
    meaning: str
    count: int
    status: str  # "ok", "tolerated" or "failed"
    reason: str | None
    ids: Shown


def _status(count: int, reason: str | None) -> str:
    if count == 0:
        return "ok"
    return "tolerated" if reason else "failed"


def anomaly_rows(verdict: Verdict) -> list[AnomalyRow]:
    """Lost, duplicated, unexpected, concurrent and reordered with their ids, then malformed
    with its ``file:line``s."""
    rows = []
    for name in MESSAGE_ANOMALIES:
        count = verdict.count(name)
        reason = verdict.tolerated.get(name)
        rows.append(AnomalyRow(name, ANOMALIES[name], count, _status(count, reason), reason,
                               Shown.of(verdict.ids(name), IDS_SHOWN)))
    lines = [(f"{m['file']}:{m['line']}", m["error"]) for m in verdict.malformed]
    count = verdict.count(MALFORMED)
    reason = verdict.tolerated.get(MALFORMED)
    rows.append(AnomalyRow(MALFORMED, ANOMALIES[MALFORMED], count, _status(count, reason),
                           reason, Shown.of(lines, LINES_SHOWN)))
    return rows


def _relative(verdict: Verdict) -> dict[str, Any]:
    """Faults, handovers and concurrent pairs with times relative to the timeline's origin."""
    t0 = plots.time_origin(verdict) or 0.0

    def rel(ts: float | None) -> str:
        return plots.EN_DASH if ts is None else f"{ts - t0:.3f}"

    faults = [{**r, "start_rel": rel(r["start"]), "end_rel": rel(r["end"]),
               "recovery": plots.EN_DASH if r["recovery_s"] is None else f"{r['recovery_s']:.3f} s"}
              for r in verdict.recovery]
    handovers = [{**h, "at": rel(h["first_commit"]), "gap": plots.format_ms(h["gap_s"] * 1000)}
                 for h in verdict.handovers]
    pairs = [{**p, "at": rel(p["second"]["start"]),
              "overlap": plots.format_ms(p["overlap_s"] * 1000),
              "msgs_shown": Shown.of(p["msgs"], MSGS_PER_PAIR)}
             for p in verdict.concurrent]
    gaps = [h["gap_s"] for h in verdict.handovers]
    return {
        "t0": plots.clock(t0) if verdict.activity or verdict.recovery else None,
        "faults": faults,
        "handovers": Shown.of(handovers, ROWS_SHOWN),
        "max_gap": plots.format_ms(max(gaps) * 1000) if gaps else plots.EN_DASH,
        "pairs": Shown.of(pairs, ROWS_SHOWN),
    }


def broker_label(broker: Mapping[str, str] | None) -> str | None:
    """``RabbitMQ 4.0.5, metadata in khepri``; None when unknown."""
    if broker is None:
        return None
    return f"{broker['product']} {broker['version']}, metadata in {broker['metadata_store']}"


def run_view(verdict: Verdict, index: int,
             broker: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What the template shows of one run (``broker``: what it ran on, if known)."""
    latency = verdict.latency_ms
    salt = f"run{index}"
    return {
        "anchor": f"run-{index}",
        "v": verdict,
        "rows": anomaly_rows(verdict),
        "latency": {k: plots.format_ms(latency[k]) for k in ("p50", "p95", "p99", "max")},
        "timeline": plots.timeline_svg(verdict, salt + "t"),
        "histogram": plots.latency_svg(latency, salt + "h"),
        "broker": broker_label(broker),
        **_relative(verdict),
    }


def render_html(verdicts: Sequence[Verdict], summary: Mapping[str, Any],
                brokers: Sequence[Mapping[str, str] | None] | None = None) -> str:
    """The report as a string (``render_report`` writes it). ``brokers``: per run, what it
    ran on (``RunConfig.broker``), shown beside its name and, all of them, in the header."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,  # a missing value fails loudly, never renders blank
        trim_blocks=True,
        lstrip_blocks=True,
    )
    known = list(brokers) if brokers is not None else [None] * len(verdicts)
    if len(known) != len(verdicts):
        raise ValueError(f"{len(known)} brokers for {len(verdicts)} verdicts")
    runs = [run_view(v, i, b) for i, (v, b) in enumerate(zip(verdicts, known, strict=True),
                                                         start=1)]
    labels = [r["broker"] for r in runs if r["broker"] is not None]
    return env.get_template("report.html").render(summary=summary, runs=runs,
                                                  brokers=list(dict.fromkeys(labels)))


def render_report(verdicts: Sequence[Verdict], summary: dict[str, Any], out: Path,
                  brokers: Sequence[Mapping[str, str] | None] | None = None) -> Path:
    """Write ``report.html`` into the directory ``out`` (created if missing), or to ``out``
    itself when it names an ``.html`` file; return the file written."""
    path = out if out.suffix == ".html" else out / "report.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(render_html(verdicts, summary, brokers), encoding="utf-8")
    tmp.replace(path)  # a reader never sees half a report
    return path
