"""Key placement (``_core/partitioning.py``): every key in range, a grown count moves keys
only into the new partition, keys spread evenly, and a Go publisher written from the docs
places every key where the SDK does."""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sac.sdk._core.partitioning import jump, key_digest, partition_of

GO_PROGRAM = Path(__file__).resolve().parent / "go" / "jump_hash.go"

@given(key=st.text(st.characters(exclude_categories=["Cs"])) | st.binary(),
       count=st.integers(1, 5000))
def test_a_key_lands_in_range_and_a_grown_count_moves_it_only_to_the_new_partition(
        key: str | bytes, count: int) -> None:
    before = partition_of(key, count)
    assert 0 <= before < count
    assert partition_of(key, count + 1) in (before, count)


@given(key=st.text(st.characters(exclude_categories=["Cs"])))
def test_a_text_key_and_its_utf8_octets_are_one_key(key: str) -> None:
    assert key_digest(key) == key_digest(key.encode("utf-8"))


def test_keys_spread_evenly() -> None:
    counts = collections.Counter(partition_of(f"customer-{n}", 16) for n in range(160_000))
    assert sorted(counts) == list(range(16))
    assert max(counts.values()) / min(counts.values()) < 1.06


def test_growing_sixteen_partitions_to_seventeen_moves_a_seventeenth_of_the_keys() -> None:
    keys = [f"customer-{n}" for n in range(50_000)]
    moved = sum(1 for k in keys if partition_of(k, 17) != partition_of(k, 16))
    assert abs(moved / len(keys) - 1 / 17) < 0.01


def test_bad_counts_and_digests_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        partition_of("k", 0)
    with pytest.raises(ValueError, match="64-bit"):
        jump(1 << 64, 4)
    with pytest.raises(UnicodeEncodeError):
        key_digest("\ud800")


def test_a_go_publisher_written_from_the_docs_places_every_key_alike(tmp_path: Path) -> None:
    go = shutil.which("go") or "/usr/lib/go/bin/go"
    assert Path(go).exists(), "Go is needed (scripts/deps.sh installs golang-go)"
    keys = [f"k{n}" for n in range(3000)] + ["", "ü-ñ", "order-1", "a" * 300]
    counts = [1, 2, 3, 7, 16, 100, 1000, 65_536]
    env = {**os.environ, "GO111MODULE": "off", "GOCACHE": str(tmp_path / "cache"),
           "GOPATH": str(tmp_path / "gopath"), "GOFLAGS": ""}
    done = subprocess.run([go, "run", str(GO_PROGRAM)], env=env, text=True, check=True,
                          capture_output=True, timeout=300,
                          input=" ".join(map(str, counts)) + "\n" + "\n".join(keys) + "\n")
    theirs = [list(map(int, line.split())) for line in done.stdout.splitlines()]
    ours = [[partition_of(k, n) for n in counts] for k in keys]
    assert theirs == ours
