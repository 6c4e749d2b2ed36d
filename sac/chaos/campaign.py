"""Many runs, one table: which scenarios held, and which weakened configurations were caught.

``plan`` lists the runs (each scenario and seed, in its real configuration and, unless told
otherwise, in the weakened one it must catch); ``carry_out`` does them one after another on
one cluster, calling back after each (a progress bar); ``rows`` and ``table`` make the text
table from the verdicts. Pure except ``carry_out``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from sac.checker.verdict import Verdict
from sac.history import CONCURRENT, DUPLICATED, LOST, REORDERED
from sac.server import LocalCluster, LocalPostgres
from .errors import ChaosError
from .runner import RunResult, run
from .scenario import Scenario
from .scenarios import SCENARIOS
from .settings import RunSettings

COLUMNS = ("scenario", "seed", "config", "messages", "lost", "duplicated", "concurrent",
           "reordered", "recovery", "verdict")


def plan(scenarios: Sequence[str], seeds: int, *, weakened: bool = True, first_seed: int = 1,
         **settings: Any) -> list[RunSettings]:
    """The runs of a campaign, in order: per scenario, per seed, the real configuration and
    then (``weakened``) the scenario's weakening. ``settings`` go to every ``RunSettings``."""
    runs = []
    for name in scenarios:
        scenario = SCENARIOS[name]
        for seed in range(first_seed, first_seed + seeds):
            runs.append(RunSettings(name, seed=seed, **settings))
            if weakened:
                runs.append(RunSettings(name, seed=seed, weakened=scenario.weakened, **settings))
    return runs


def series_of(scenarios: Iterable[Scenario], asked: str | None, default: str
              ) -> dict[str, str]:
    """The RabbitMQ series each scenario runs on, by name: ``asked`` (``--rabbitmq``), or
    ``default`` when not asked, except where a scenario needs another (which it then gets,
    unless another was asked: ChaosError, naming why)."""
    return {s.name: s.series(asked, default) for s in scenarios}


def cluster_for(scenario: Scenario, cluster: LocalCluster,
                others: Mapping[str, LocalCluster]) -> LocalCluster:
    """``cluster``, or for a scenario that needs another RabbitMQ series, the one of
    ``others`` (by series) that runs it."""
    if scenario.rabbitmq in (None, cluster.spec.rabbitmq):
        return cluster
    if scenario.rabbitmq not in others:
        raise ChaosError(f"{scenario.refusal(cluster.spec.rabbitmq)}; no cluster of "
                         f"{scenario.rabbitmq} was given")
    return others[scenario.rabbitmq]


def carry_out(runs: Iterable[RunSettings], cluster: LocalCluster, out: Path, *,
              postgres: LocalPostgres | None = None,
              on_done: Callable[[RunResult], None] | None = None,
              others: Mapping[str, LocalCluster] | None = None) -> list[RunResult]:
    """Each run on ``cluster``, or on the cluster of ``others`` (keyed by series) that runs
    the series its scenario needs (``mirrored-failover``: 3.10)."""
    results = []
    for settings in runs:
        where = cluster_for(SCENARIOS[settings.scenario], cluster, others or {})
        result = run(settings, where, out, postgres=postgres)
        results.append(result)
        if on_done is not None:
            on_done(result)
    return results


@attrs.frozen
class Row:
    scenario: str
    seed: int
    config: str
    messages: int
    lost: int
    duplicated: int
    concurrent: int
    reordered: int
    recovery_s: float | None
    """The slowest recovery of the run: from a fault's start to the next effect."""
    verdict: str

    def cells(self) -> tuple[str, ...]:
        recovery = "-" if self.recovery_s is None else f"{self.recovery_s:.2f} s"
        return (self.scenario, str(self.seed), self.config, str(self.messages), str(self.lost),
                str(self.duplicated), str(self.concurrent), str(self.reordered), recovery,
                self.verdict)


def row(result: RunResult, verdict: Verdict | None = None) -> Row:
    """``verdict``: another engine's verdict of the same run (default: the run's own)."""
    v = verdict if verdict is not None else result.verdict
    checked = attrs.evolve(result, verdict=v)
    recoveries = [r["recovery_s"] for r in v.recovery if r["recovery_s"] is not None]
    s = result.settings
    return Row(s.scenario, s.seed, s.weakened or "default", v.published,
               v.count(LOST), v.count(DUPLICATED), v.count(CONCURRENT),
               v.count(REORDERED), max(recoveries) if recoveries else None, checked.outcome)


def table(rows: Sequence[Row]) -> str:
    """A plain text table, columns aligned, one line per run."""
    lines = [COLUMNS, *(r.cells() for r in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True))
                     .rstrip() for line in lines)


def failed(rows: Sequence[Row]) -> list[Row]:
    return [r for r in rows if r.verdict in ("FAIL", "ERROR")]
