"""``report.html`` for two hand-made verdicts (SPEC.md), opened in headless Chromium: the page
loads, shows each run's verdict and offending ids, its figures are drawn, and the screenshot is
a real picture (not a blank page)."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from sac.checker import plots
from sac.checker.report import IDS_SHOWN, render_html, render_report
from sac.checker.runs import open_run
from sac.checker.verdict import Verdict

CHROMIUM = "/usr/bin/chromium"
T0 = 1_795_355_000.0
WINDOW = (1400, 2400)


def _counts(**some: int) -> dict[str, int]:
    names = ("publish", "retransmit", "confirm", "nack", "return", "deliver", "redelivered",
             "duplicate_skipped", "commit", "commit_rejected_stale", "commit_rejected_duplicate",
             "ack", "reject", "connection_lost", "fault_start")
    return {name: some.get(name, 0) for name in names}


def _latency(values: list[float]) -> dict[str, Any]:
    """``latency_ms`` exactly as SPEC.md computes it from the values."""
    v = sorted(values)
    n = len(v)
    hist = [0] * len(plots.LATENCY_EDGES_MS)
    for x in v:
        hist[max((i for i, e in enumerate(plots.LATENCY_EDGES_MS) if e <= x), default=0)] += 1

    def rank(p: int) -> float:
        return v[(p * n + 99) // 100 - 1]

    return {"count": n, "p50": rank(50), "p95": rank(95), "p99": rank(99), "max": v[-1],
            "histogram": hist}


def _island(queue: str, actor: str, start: float, end: float, effects: int) -> dict[str, Any]:
    """An ``activity`` entry, times in seconds after ``T0``."""
    return {"queue": queue, "actor": actor, "start": T0 + start, "end": T0 + end,
            "effects": effects}


def _handover(queue: str, old: str, new: str, last: float, first: float) -> dict[str, Any]:
    return {"queue": queue, "from": old, "to": new, "last_commit": T0 + last,
            "first_commit": T0 + first, "gap_s": first - last}


def valid_verdict() -> dict[str, Any]:
    """A node of the cluster is killed under the active consumer; another one takes over."""
    latencies = [3 + (i % 40) * 0.9 for i in range(2180)] + [4200, 5100, 5600, 7400]
    return {
        "run": "kill-node-under-active-consumer",
        "engine": "python",
        "effects_source": "effects.jsonl",
        "published": 2200, "confirmed": 2184, "effects": 2184,
        "lost": {"count": 0, "ids": []},
        "duplicated": {"count": 0, "ids": []},
        "unexpected": {"count": 0, "ids": []},
        "concurrent": {"count": 0, "pairs": []},
        "reordered": {"count": 0, "ids": []},
        "malformed": {"count": 0, "lines": []},
        "unknown_events": {},
        "counts": _counts(publish=2200, retransmit=16, confirm=2184, deliver=2190, redelivered=6,
                          duplicate_skipped=6, commit=2184, ack=2190, connection_lost=3,
                          fault_start=1),
        "anomalies": {},
        "activity": [
            _island("orders", "consumer-a", 0.2, 12.4, 610),
            _island("orders", "consumer-b", 17.8, 30.1, 574),
            _island("payments", "consumer-x", 0.1, 9.0, 311),
            _island("payments", "consumer-y", 10.2, 29.7, 689),
        ],
        "handovers": [
            _handover("orders", "consumer-a", "consumer-b", 12.4, 17.8),
            _handover("payments", "consumer-x", "consumer-y", 9.0, 10.2),
        ],
        "recovery": [
            {"fault": "kill_node", "target": "rabbit-2", "start": T0 + 12.5, "end": T0 + 14.0,
             "recovery_s": 5.3},
        ],
        "latency_ms": _latency(latencies),
        "valid": True,
        "tolerated": {},
    }


LOST = ["m-000417", "m-000418", "m-000951"]
DUPLICATED = [f"m-{i:06d}" for i in range(200, 227)]  # 27: more than the report lists
UNEXPECTED = ["zz-foreign-1", "zz-foreign-2"]
CONCURRENT = ["m-000203", "m-000204", "m-000205"]
REORDERED = ["m-000550", "m-000551"]


def invalid_verdict() -> dict[str, Any]:
    """A partition makes two consumers work on one queue at once; the redelivered-only dedup
    mode lets duplicates through; two lines of a log were cut."""
    anomalies: dict[str, list[str]] = {}
    for name, ids in (("lost", LOST), ("duplicated", DUPLICATED), ("unexpected", UNEXPECTED),
                      ("concurrent", CONCURRENT), ("reordered", REORDERED)):
        for msg in ids:
            anomalies.setdefault(msg, []).append(name)
    anomalies = {m: sorted(names) for m, names in anomalies.items()}
    latencies = [8 + (i % 25) * 3.7 for i in range(950)] + [40 + i for i in range(60)]
    return {
        "run": "partition-redelivered-only",
        "engine": "python",
        "effects_source": "events",
        "published": 1000, "confirmed": 998, "effects": 1022,
        "lost": {"count": len(LOST), "ids": LOST},
        "duplicated": {"count": len(DUPLICATED), "ids": DUPLICATED},
        "unexpected": {"count": len(UNEXPECTED), "ids": UNEXPECTED},
        "concurrent": {"count": 1, "pairs": [{
            "queue": "orders",
            "first": {"actor": "consumer-a", "start": T0 + 0.3, "end": T0 + 9.2},
            "second": {"actor": "consumer-b", "start": T0 + 8.1, "end": T0 + 21.5},
            "overlap_s": 1.1, "msgs": CONCURRENT,
        }]},
        "reordered": {"count": len(REORDERED), "ids": REORDERED},
        "malformed": {"count": 2, "lines": [
            {"file": "events/consumer-a.jsonl", "line": 812, "error": "not valid JSON"},
            {"file": "events/publisher-0.jsonl", "line": 77, "error": "ts is not a number"},
        ]},
        "unknown_events": {"heartbeat": 4},
        "counts": _counts(publish=1000, retransmit=31, confirm=998, nack=2, deliver=1060,
                          redelivered=38, commit=1022, ack=1055, reject=5, connection_lost=2,
                          fault_start=1),
        "anomalies": anomalies,
        "activity": [
            _island("orders", "consumer-a", 0.3, 9.2, 540),
            _island("orders", "consumer-b", 8.1, 21.5, 482),
        ],
        "handovers": [
            _handover("orders", "consumer-a", "consumer-b", 8.4, 8.6),
            _handover("orders", "consumer-b", "consumer-a", 8.6, 8.9),
        ],
        "recovery": [
            {"fault": "partition", "target": "consumer-a", "start": T0 + 7.5, "end": None,
             "recovery_s": 0.4},
        ],
        "latency_ms": _latency(latencies),
        "valid": False,
        "tolerated": {"unexpected": "ids of a previous run left in the shared sink"},
    }


def typed(verdicts: list[dict[str, Any]]) -> list[Verdict]:
    """The hand-made ``verdict.json`` contents as the report takes them."""
    return [Verdict.from_json(v) for v in verdicts]


def summary_of(verdicts: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("published", "confirmed", "effects")
    totals = {k: sum(v[k] for v in verdicts) for k in keys}
    for k in ("lost", "duplicated", "unexpected", "concurrent", "reordered", "malformed"):
        totals[k] = sum(v[k]["count"] for v in verdicts)
    return {"runs": len(verdicts), "valid": sum(v["valid"] for v in verdicts),
            "invalid": [v["run"] for v in verdicts if not v["valid"]], "engine": "python",
            "totals": totals}


def chromium(url: str, profile: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """Headless Chromium with nothing that reaches the network; it must be installed
    (``scripts/deps.sh``): a report nobody can look at is a failure, not a skip."""
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: run scripts/deps.sh as root"
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--disable-dev-shm-usage", "--hide-scrollbars",
            f"--user-data-dir={profile}", f"--window-size={WINDOW[0]},{WINDOW[1]}", *args, url]
    done = subprocess.run(argv, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    return done


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The report, its DOM after Chromium loaded it, and a screenshot of it."""
    out = tmp_path_factory.mktemp("report")
    verdicts = [valid_verdict(), invalid_verdict()]
    path = render_report(typed(verdicts), summary_of(verdicts), out)
    url = path.resolve().as_uri()
    dom = chromium(url, out / "profile-dom", "--dump-dom").stdout.decode()
    png = out / "report.png"
    chromium(url, out / "profile-shot", f"--screenshot={png}")
    shutil.rmtree(out / "profile-dom", ignore_errors=True)
    shutil.rmtree(out / "profile-shot", ignore_errors=True)
    return {"path": path, "out": out, "dom": dom, "png": png}


def section(dom: str, anchor: str) -> str:
    found = re.search(rf'<section class="run [a-z]+" id="{anchor}">(.*?)</section>', dom, re.S)
    assert found, f"no section {anchor} in the DOM"
    return found.group(1)


def test_one_self_contained_file(rendered: dict[str, Any]) -> None:
    path: Path = rendered["path"]
    assert path.name == "report.html"
    assert sorted(p.name for p in rendered["out"].iterdir() if p.is_file()) == [
        "report.html", "report.png"]
    html = path.read_text()
    # Every reference stays inside the file: anchors and the SVGs' own ids. (The SVG
    # namespace URIs are names, never fetched.)
    refs = re.findall(r'(?:src|href)="([^"]*)"', html)
    assert refs
    assert [r for r in refs if not r.startswith("#")] == []
    assert "<link" not in html
    assert "<script" not in html


def test_page_loads_with_each_verdict_and_its_ids(rendered: dict[str, Any]) -> None:
    dom: str = rendered["dom"]
    assert "<h1>Checker report</h1>" in dom
    ok = section(dom, "run-1")
    assert "kill-node-under-active-consumer" in ok
    assert '<span class="badge valid">valid</span>' in ok
    assert "and 0 more" not in ok

    bad = section(dom, "run-2")
    assert "partition-redelivered-only" in bad
    assert '<span class="badge invalid">invalid</span>' in bad
    for msg in LOST + UNEXPECTED + CONCURRENT + REORDERED:
        assert f"<code>{msg}</code>" in bad
    shown = [m for m in DUPLICATED if f"<code>{m}</code>" in bad]
    assert shown == DUPLICATED[:IDS_SHOWN]
    assert f"and {len(DUPLICATED) - IDS_SHOWN} more" in bad
    assert "events/consumer-a.jsonl:812" in bad
    assert "events/publisher-0.jsonl:77" in bad
    assert "ids of a previous run left in the shared sink" in bad  # the tolerated reason
    assert '<span class="pill tolerated">tolerated</span>' in bad
    assert '<span class="pill failed">failed</span>' in bad

    summary = dom.split('id="summary"', 1)[1].split("</section>", 1)[0]
    assert summary.count('class="badge valid"') == 1
    assert summary.count('class="badge invalid"') == 1


def test_figures_are_drawn(rendered: dict[str, Any]) -> None:
    dom: str = rendered["dom"]
    for anchor in ("run-1", "run-2"):
        run = section(dom, anchor)
        for figure in ("timeline", "histogram"):
            found = re.search(rf'<figure class="{figure}">(.*?)</figure>', run, re.S)
            assert found, f"{anchor} has no {figure}"
            svg = found.group(1)
            assert svg.lstrip().startswith("<svg")
            assert svg.count("<path") >= 10, f"{anchor}'s {figure} is empty"
        assert "p50" in run
        assert "p99" in run
    timeline = section(dom, "run-1")
    assert "consumer-a" in timeline
    assert "kill_node rabbit-2" in timeline


def test_screenshot_is_a_picture(rendered: dict[str, Any]) -> None:
    with Image.open(rendered["png"]) as img:
        assert img.size == WINDOW
        rgb = img.convert("RGB")
    colours = rgb.getcolors(maxcolors=1_000_000)
    assert colours is not None
    assert len(colours) > 50
    # The green and red badges, the blue bars: the page is styled, not raw text.
    pixels = {c for _, c in colours}
    assert any(g > 120 and r < 60 and b < 90 for r, g, b in pixels)
    assert any(r > 150 and g < 60 and b < 60 for r, g, b in pixels)
    assert any(b > 180 and r < 120 for r, g, b in pixels)


def test_a_verdict_without_a_field_is_refused() -> None:
    broken = valid_verdict()
    del broken["latency_ms"]
    with pytest.raises(ValueError, match=r"kill-node-under-active-consumer.*latency_ms"):
        render_html(typed([broken]), summary_of([valid_verdict()]))


def test_a_run_without_effects_still_renders() -> None:
    quiet = copy.deepcopy(valid_verdict())
    quiet.update(activity=[], handovers=[], recovery=[], effects=0,
                 latency_ms={"count": 0, "p50": None, "p95": None, "p99": None, "max": None,
                             "histogram": [0] * 16})
    html = render_html(typed([quiet]), summary_of([quiet]))
    assert "No activity, handover or fault to draw." in html
    assert "no effect of a published message" in html


def test_each_run_names_the_broker_and_metadata_store_it_ran_on(tmp_path: Path) -> None:
    runs = {}
    for name, broker in (("on-4", {"product": "RabbitMQ", "version": "4.0.5",
                                   "metadata_store": "khepri"}),
                         ("on-3", {"product": "RabbitMQ", "version": "3.10.8",
                                   "metadata_store": "mnesia"}),
                         ("elsewhere", None), ("torn", {"version": 4})):
        (tmp_path / name / "events").mkdir(parents=True)
        (tmp_path / name / "events" / "a.jsonl").write_text("{}\n")
        (tmp_path / name / "run.json").write_text(json.dumps(
            {"scenario": "x"} if broker is None else {"broker": broker}))
        runs[name] = open_run(tmp_path / name).config.broker
    assert runs["elsewhere"] is None
    assert runs["torn"] is None
    verdicts = [valid_verdict(), invalid_verdict(), copy.deepcopy(valid_verdict())]
    html = render_html(typed(verdicts), summary_of(verdicts),
                       [runs["on-4"], runs["on-3"], runs["elsewhere"]])
    header = html.split("<section", 1)[0]
    assert "RabbitMQ 4.0.5, metadata in khepri" in header
    assert "RabbitMQ 3.10.8, metadata in mnesia" in header
    assert "RabbitMQ 4.0.5, metadata in khepri" in section(html, "run-1")
    assert "RabbitMQ 3.10.8, metadata in mnesia" in section(html, "run-2")
    assert "RabbitMQ" not in section(html, "run-3")  # unknown: nothing claimed


def test_latency_positions_follow_the_bins() -> None:
    assert plots.bin_position(0) == -0.5
    assert plots.bin_position(1.5) == pytest.approx(1.0)  # middle of bin 1 (1-2 ms)
    assert plots.bin_position(75_000) == 15.0
    assert plots.bin_label(0) == "0\u20131 ms"
    assert plots.bin_label(10) == "1\u20132 s"
    assert plots.bin_label(9) == "0.5\u20131 s"
    assert plots.bin_label(15) == "≥ 60 s"


def test_label_lanes_stack_only_what_would_overlap() -> None:
    assert plots.label_lanes([]) == []
    assert plots.label_lanes([(0, 1), (2, 3), (4, 5)]) == [0, 0, 0]
    assert plots.label_lanes([(0, 10), (1, 2), (3, 4), (11, 12)]) == [0, 1, 1, 0]
    assert plots.label_lanes([(5, 6), (0, 10)]) == [1, 0], "lanes follow the left edges"
    assert plots.label_lanes([(0, 1), (1.5, 2)], gap=1.0) == [0, 1]


def test_fault_labels_close_in_time_are_not_drawn_over_each_other() -> None:
    """Four faults within a few seconds, the last near the end of the run: each label is
    drawn where no other label is (same height, overlapping extent), none past the right."""
    verdict = valid_verdict()
    verdict["recovery"] = [
        {"fault": "kill_node", "target": "rabbit-2", "start": T0 + 12.5, "end": T0 + 14.0,
         "recovery_s": 5.3},
        {"fault": "reset_peer", "target": "consumer-b", "start": T0 + 13.0, "end": T0 + 13.2,
         "recovery_s": 0.4},
        {"fault": "latency", "target": "publisher", "start": T0 + 14.0, "end": T0 + 20.0,
         "recovery_s": None},
        {"fault": "pause", "target": "consumer-a", "start": T0 + 25.0, "end": None,
         "recovery_s": None},
    ]
    svg = plots.timeline_svg(Verdict.from_json(verdict), "t")
    assert svg is not None
    found = re.findall(r'text-anchor: (start|end); fill: #92400e" x="([\d.]+)" y="([\d.]+)"[^>]*>'
                       r"([^<]+)</text>", svg)
    assert len(found) == 4
    px_per_char = 8.5 * 0.62  # generous: a wide sans-serif
    boxes = []
    for anchor, x, y, text in found:
        width = len(text) * px_per_char
        left = float(x) if anchor == "start" else float(x) - width
        boxes.append((round(float(y)), left, left + width, text))
    for i, (y1, l1, r1, t1) in enumerate(boxes):
        for y2, l2, r2, t2 in boxes[i + 1:]:
            assert y1 != y2 or r1 <= l2 or r2 <= l1, f"{t1!r} is drawn over {t2!r}"
    width = float(re.search(r'<svg[^>]*width="([\d.]+)pt"', svg)[1])  # type: ignore[index]
    assert all(r <= width * 4 / 3 for _, _, r, _ in boxes), "a label runs off the figure"
