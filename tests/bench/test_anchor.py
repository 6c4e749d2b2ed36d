"""The Go anchor benchmark at a tiny size, on a real cluster: the Go program builds from
Debian's packages and publishes and consumes, an SDK face runs beside it, and the report
holds each SDK face's ratios to Go. No timing is asserted: the machine is shared."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import anchor
from sac.server import LocalCluster


def test_the_anchor_report_compares_an_sdk_face_with_go(cluster: LocalCluster) -> None:
    options = anchor.Options(messages=200, repeat=1, stores=(), only=(
        "go-publish", "sdk-blocking-publish", "go-consume", "sdk-blocking-consume"))
    report = json.loads(json.dumps(anchor.run(cluster, None, options)))
    rows = report["contenders"]
    assert list(rows) == list(options.only)
    for name in options.only:
        assert rows[name]["msg_per_s"] > 0
        assert rows[name]["client_cpu_us_per_msg"] > 0
        assert rows[name]["notes"] == []  # every message published, every one consumed
    for name, target in (("sdk-blocking-publish", 0.95), ("sdk-blocking-consume", 0.9)):
        vs_go = rows[name]["vs_go"]
        assert vs_go["throughput_ratio"] > 0
        assert vs_go["cpu_ratio"] > 0
        assert vs_go["target"] == target
        assert isinstance(vs_go["meets_target"], bool)
    assert "vs_go" not in rows["go-publish"]
    assert report["messages"] == 200
    assert report["go"]["packages"]["golang-github-rabbitmq-amqp091-go-dev"]
    assert "vs go" in anchor.table(rows).lower()


def test_without_go_the_anchor_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no `go` on it
    with pytest.raises(anchor.AnchorUnavailable) as caught:
        anchor.go_binary(tmp_path / "cache")
    message = str(caught.value)
    assert "\n" not in message
    assert "golang-go" in message
    assert "golang-github-rabbitmq-amqp091-go-dev" in message
