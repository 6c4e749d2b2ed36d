"""The report's two figures, drawn from a verdict alone and returned as inline SVG.

Inline SVG keeps ``report.html`` one self-contained file that stays sharp at any zoom, and with
``svg.fonttype = none`` its labels are text the page's fonts draw (and a reader can search).
Each figure gets its own ``svg.hashsalt``, because matplotlib names its clip paths by hash and
several figures share one HTML document. Figures are built with ``matplotlib.figure.Figure``,
not pyplot: no global figure registry, nothing left open between runs.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import matplotlib as mpl
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator
from matplotlib.typing import RcKeyType

from .verdict import Verdict

# The SPEC's latency bin edges (ms); bin i holds edges[i] <= x < edges[i+1], the last x >= 60000.
LATENCY_EDGES_MS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000)
PERCENTILES = (("p50", "#2563eb"), ("p95", "#d97706"), ("p99", "#dc2626"))
# Actor colours: distinguishable, and none of them the red of concurrency or the amber of faults.
ACTOR_COLOURS = ("#2563eb", "#059669", "#7c3aed", "#0891b2", "#4d7c0f", "#be185d", "#475569",
                 "#0d9488", "#6d28d9", "#1d4ed8")
FAULT_COLOUR = "#f59e0b"
CONCURRENT_COLOUR = "#dc2626"
HANDOVER_COLOUR = "#111827"
EN_DASH = "\u2013"  # ranges and "no value", as typeset text has them
MAX_HANDOVER_ARROWS = 60  # per queue; beyond that arrows hide the bars they connect
STYLE: dict[RcKeyType, Any] = {
    "svg.fonttype": "none",
    "font.family": "sans-serif",
    "font.sans-serif": ["Inter", "Segoe UI", "Helvetica Neue", "Arial", "DejaVu Sans"],
    "font.size": 10,
    "axes.edgecolor": "#cbd5e1",
    "axes.labelcolor": "#334155",
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
    "axes.titlelocation": "left",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "xtick.color": "#475569",
    "ytick.color": "#334155",
    "grid.color": "#e2e8f0",
}


def _svg(fig: Figure, salt: str) -> str:
    """The figure as an ``<svg>`` element (no XML prolog or DOCTYPE: it goes inside HTML)."""
    buf = io.StringIO()
    # The SVG backend writes a text's font list from rcParams when it saves: STYLE again.
    with mpl.rc_context({**STYLE, "svg.hashsalt": salt}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]


def time_origin(verdict: Verdict) -> float | None:
    """The earliest time the timeline shows: axes count seconds from it."""
    times = [a["start"] for a in verdict.activity]
    times += [r["start"] for r in verdict.recovery]
    times += [h["last_commit"] for h in verdict.handovers]
    return min(times) if times else None


def clock(ts: float) -> str:
    """An epoch time as a UTC wall clock with milliseconds, for axis captions and tables."""
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M:%S.%f")[:-3] + " UTC"


def _queues(verdict: Verdict) -> list[tuple[str, list[str]]]:
    """Each queue with its actors (rows), in name order."""
    actors: dict[str, set[str]] = {}
    for a in verdict.activity:
        actors.setdefault(a["queue"], set()).add(a["actor"])
    for h in verdict.handovers:
        actors.setdefault(h["queue"], set()).update((h["from"], h["to"]))
    return [(q, sorted(actors[q])) for q in sorted(actors)]


def timeline_svg(verdict: Verdict, salt: str) -> str | None:
    """One panel per queue, a row per actor: activity islands as bars (labelled with their
    effect count), fault windows shaded over every panel, concurrent overlaps in red, and each
    handover as an arrow from the last commit of one actor to the first of the next.

    None when the run has no activity, handover or fault to draw.
    """
    queues = _queues(verdict)
    t0 = time_origin(verdict)
    if t0 is None or not (queues or verdict.recovery):
        return None
    queues = queues or [("", [])]
    ends = [a["end"] for a in verdict.activity] + [h["first_commit"] for h in
                                                       verdict.handovers]
    ends += [r["end"] for r in verdict.recovery if r["end"] is not None]
    ends += [r["start"] for r in verdict.recovery]
    span = max(max(ends) - t0, 1e-3)
    colour = {actor: ACTOR_COLOURS[i % len(ACTOR_COLOURS)]
              for i, actor in enumerate(sorted({a for _, rows in queues for a in rows}))}

    with mpl.rc_context(STYLE):
        heights = [max(len(rows), 1) * 0.55 + 0.9 for _, rows in queues]
        fig = Figure(figsize=(11, sum(heights) + 0.9), layout="constrained")
        axes = fig.subplots(len(queues), 1, sharex=True, squeeze=False,
                            height_ratios=heights)[:, 0]
        for ax, (queue, rows) in zip(axes, queues, strict=True):
            _draw_queue(ax, verdict, queue, rows, t0, span, colour)
        for ax in axes:
            for fault in verdict.recovery:
                end = fault["end"] if fault["end"] is not None else t0 + span
                ax.axvspan(fault["start"] - t0, end - t0, color=FAULT_COLOUR, alpha=0.16,
                           lw=0, zorder=0)
                ax.axvline(fault["start"] - t0, color=FAULT_COLOUR, lw=1.2, zorder=1)
        top = axes[0]
        labels = [_fault_label(fault) for fault in verdict.recovery]
        starts = [fault["start"] - t0 for fault in verdict.recovery]
        per_char = span * 1.02 * LABEL_CHAR_PT / LABEL_AXES_PT  # seconds per character
        # A label runs right from its fault's line, or left of it where it would leave the
        # axes on the right.
        right_side = [s + len(t) * per_char <= span * 1.01 for s, t in zip(starts, labels,
                                                                        strict=True)]
        spans = [(s, s + len(t) * per_char) if r else (s - len(t) * per_char, s)
                 for s, t, r in zip(starts, labels, right_side, strict=True)]
        lanes = label_lanes(spans, gap=per_char)
        for text, start, lane, right in zip(labels, starts, lanes, right_side, strict=True):
            top.annotate(text, xy=(start, 1.0), xycoords=("data", "axes fraction"),
                         xytext=(4 if right else -4, 3 + lane * LABEL_LANE_PT),
                         textcoords="offset points", ha="left" if right else "right",
                         fontsize=8.5, color="#92400e", va="bottom", annotation_clip=False)
        axes[-1].set_xlim(-span * 0.01, span * 1.01)
        axes[-1].set_xlabel(f"seconds since {clock(t0)}")
        fig.legend(handles=_legend(verdict), loc="outside lower right", ncols=4, frameon=False,
                   fontsize=9)
    return _svg(fig, salt)


LABEL_CHAR_PT = 5.2
"""Width of one character of a fault label (8.5 pt sans-serif), on average."""
LABEL_AXES_PT = 700.0
"""Width of the timeline's axes on the 11-inch figure, in points, roughly."""
LABEL_LANE_PT = 11.0


def _fault_label(fault: Mapping[str, Any]) -> str:
    rec = fault["recovery_s"]
    note = f" · effects again after {rec:.2f} s" if rec is not None else " · no recovery"
    if fault["end"] is None:
        note += " · never healed"
    return f"{fault['fault']} {fault['target']}".strip() + note


def label_lanes(spans: Sequence[tuple[float, float]], gap: float = 0.0) -> list[int]:
    """A lane (0 = lowest) for each label occupying ``spans[i] = (left, right)``, so that no
    two labels in one lane overlap: faults close in time get their labels stacked instead of
    printed over each other. Greedy in order of the left edge, lowest free lane."""
    ends: list[float] = []  # per lane, where its last label ends
    lanes = [0] * len(spans)
    for i in sorted(range(len(spans)), key=lambda k: (spans[k][0], k)):
        left, right = spans[i]
        free = [n for n, end in enumerate(ends) if left >= end + gap]
        lane = free[0] if free else len(ends)
        if not free:
            ends.append(left)
        ends[lane] = right
        lanes[i] = lane
    return lanes


def _draw_queue(ax: Any, verdict: Verdict, queue: str, rows: list[str], t0: float,
                span: float, colour: Mapping[str, str]) -> None:
    y = {actor: i for i, actor in enumerate(rows)}
    min_width = span * 0.003  # an island of one instant stays visible
    for island in verdict.activity:
        if island["queue"] != queue:
            continue
        start, width = island["start"] - t0, max(island["end"] - island["start"], min_width)
        row = y[island["actor"]]
        ax.broken_barh([(start, width)], (row - 0.32, 0.64), facecolors=colour[island["actor"]],
                       edgecolor="none", zorder=2)
        if width > span * 0.05:
            ax.text(start + width / 2, row, f"{island['effects']}", ha="center", va="center",
                    color="white", fontsize=8.5, fontweight="bold", zorder=3)
    for pair in verdict.concurrent:
        if pair["queue"] == queue:
            lo = pair["second"]["start"] - t0
            hi = min(pair["first"]["end"], pair["second"]["end"]) - t0
            ax.axvspan(lo, max(hi, lo + span * 0.004), color=CONCURRENT_COLOUR, alpha=0.28,
                       lw=0, zorder=1)
    handovers = [h for h in verdict.handovers if h["queue"] == queue]
    for h in handovers[:MAX_HANDOVER_ARROWS]:
        ax.annotate("", xy=(h["first_commit"] - t0, y[h["to"]]),
                    xytext=(h["last_commit"] - t0, y[h["from"]]),
                    arrowprops={"arrowstyle": "-|>", "color": HANDOVER_COLOUR, "lw": 1.1,
                                "shrinkA": 0, "shrinkB": 0, "mutation_scale": 9}, zorder=4)
    ax.set_yticks(range(len(rows)), rows)
    ax.set_ylim(len(rows) - 0.4, -0.6)
    ax.grid(axis="x", zorder=0)
    ax.tick_params(axis="y", length=0)
    shown = f"{len(handovers)} handover{'s' if len(handovers) != 1 else ''}"
    if len(handovers) > MAX_HANDOVER_ARROWS:
        shown += f", first {MAX_HANDOVER_ARROWS} drawn"
    # The count goes with the title, on the left: the space above the axes is the faults'.
    ax.set_title(f"queue {queue or '(unknown)'}", pad=16)
    ax.set_title(shown, loc="right", pad=16, fontsize=8.5, color="#64748b")


def _legend(verdict: Verdict) -> list[Any]:
    handles: list[Any] = [Patch(color="#94a3b8", label="active (number = effects)")]
    if verdict.recovery:
        handles.append(Patch(color=FAULT_COLOUR, alpha=0.3, label="fault window"))
    if verdict.concurrent:
        handles.append(Patch(color=CONCURRENT_COLOUR, alpha=0.4, label="concurrent processing"))
    if verdict.handovers:
        handles.append(Line2D([], [], color=HANDOVER_COLOUR, marker=">", markersize=5,
                              label="handover"))
    return handles


def bin_label(i: int, edges: Sequence[int] = LATENCY_EDGES_MS) -> str:
    """``"20-50 ms"``, ``"1-2 s"``, ``"≥ 60 s"`` (with en dashes): ms below a second, seconds
    above."""
    if i == len(edges) - 1:
        return f"≥ {edges[i] / 1000:g} s"
    lo, hi = edges[i], edges[i + 1]
    unit = "s" if hi >= 1000 else "ms"
    if unit == "s":
        return f"{lo / 1000:g}{EN_DASH}{hi / 1000:g} s"
    return f"{lo}{EN_DASH}{hi} ms"


def bin_position(ms: float, edges: Sequence[int] = LATENCY_EDGES_MS) -> float:
    """Where ``ms`` falls on the histogram's axis of equal-width bins (bin i spans i ± 0.5),
    interpolated inside its bin so that a percentile line sits where its value is."""
    if ms < edges[0]:
        return -0.5
    i = max(k for k, edge in enumerate(edges) if edge <= ms)
    if i == len(edges) - 1:
        return float(i)
    return i - 0.5 + (ms - edges[i]) / (edges[i + 1] - edges[i])


def latency_svg(latency: Mapping[str, Any], salt: str) -> str:
    """The SPEC's 16-bin histogram of publish-to-effect latency, p50/p95/p99 as lines."""
    counts = list(latency["histogram"])
    if len(counts) != len(LATENCY_EDGES_MS):
        raise ValueError(
            f"latency_ms.histogram has {len(counts)} bins; SPEC.md defines "
            f"{len(LATENCY_EDGES_MS)}"
        )
    with mpl.rc_context(STYLE):
        fig = Figure(figsize=(7.2, 3.5), layout="constrained")
        ax = fig.add_subplot()
        xs = range(len(counts))
        bars = ax.bar(xs, counts, width=0.78, color="#93c5fd", edgecolor="#3b82f6", lw=0.8,
                      zorder=2)
        labels = ax.bar_label(bars, labels=[str(c) if c else "" for c in counts], fontsize=8,
                              color="#334155", padding=2)
        for label in labels:  # readable where a percentile line crosses it
            label.set(zorder=4, bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.6})
        ax.set_xticks(list(xs), [bin_label(i) for i in xs], rotation=40, ha="right",
                      rotation_mode="anchor", fontsize=8.5)
        ax.set_xlim(-0.7, len(counts) - 0.3)
        ax.set_ylim(0, max(max(counts), 1) * 1.22)
        ax.set_xlabel("publish → effect latency")
        ax.set_ylabel("effects")
        ax.grid(axis="y", zorder=0)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        if latency["count"]:
            # Percentiles often fall in one bin: their values go in a legend, not next to the
            # lines, where they would overlap each other and the bar labels.
            for name, colour in PERCENTILES:
                ax.axvline(bin_position(latency[name]), color=colour, lw=1.6, ls="--", zorder=3,
                           label=f"{name}  {_ms(latency[name])}")
            ax.legend(loc="upper right", frameon=False, fontsize=9, handlelength=1.8,
                      title=f"max {_ms(latency['max'])}", title_fontsize=8.5)
        else:
            ax.text(0.5, 0.5, "no effect of a published message", transform=ax.transAxes,
                    ha="center", va="center", color="#64748b")
    return _svg(fig, salt)


def _ms(value: float) -> str:
    """A latency for people: three significant digits, seconds from 10 s up."""
    if value >= 1000:
        return f"{value / 1000:.3g} s"
    if value >= 100 or value == 0:
        return f"{value:.0f} ms"
    return f"{value:.3g} ms" if value >= 1 else f"{value:.2f} ms"


def format_ms(value: float | None) -> str:
    """``_ms`` for tables: a dash when the run has no latency."""
    return EN_DASH if value is None or math.isnan(value) else _ms(value)
