"""The chaos suite: faults injected while SDK publishers and single-active consumers work,
each run judged by the checker from the history every actor recorded.

    from sac.chaos import RunSettings, run
    result = run(RunSettings("consumer-freeze", seed=2), cluster, Path("runs"),
                 postgres=postgres)
    result.outcome   # "pass", "caught" (a weakened run whose anomaly was found), "FAIL", "ERROR"

Rooms: ``proxy`` (the Toxiproxy-API fault proxy), ``partition`` (nftables cuts between the
nodes of a netns cluster), ``faults`` (the nemesis, driven through toxiproxy-python),
``actors`` (the workload processes and their sink), ``world`` (what a scenario acts on),
``scenarios``, ``runner`` (one run), ``campaign`` (many runs and their table).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .campaign import Row, carry_out, plan, row, table
    from .errors import ActorFailed, ChaosError, ChaosTimeout, UnknownScenario
    from .runner import RunResult, run
    from .scenario import Scenario
    from .scenarios import SCENARIOS
    from .settings import WEAKENINGS, RunSettings, Weakening
    from .world import World

_HOMES = {
    "sac.chaos.campaign": ("Row", "carry_out", "plan", "row", "table"),
    "sac.chaos.errors": ("ActorFailed", "ChaosError", "ChaosTimeout", "UnknownScenario"),
    "sac.chaos.runner": ("RunResult", "run"),
    "sac.chaos.scenario": ("Scenario",),
    "sac.chaos.scenarios": ("SCENARIOS",),
    "sac.chaos.settings": ("WEAKENINGS", "RunSettings", "Weakening"),
    "sac.chaos.world": ("World",),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    """The face loads its modules on first use: an actor process or ``sac proxy serve``
    imports a room of the package without paying for the runner's imports."""
    if name not in _HOME:
        raise AttributeError(f"module 'sac.chaos' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME[name]), name)


__all__ = [
    "SCENARIOS",
    "WEAKENINGS",
    "ActorFailed",
    "ChaosError",
    "ChaosTimeout",
    "Row",
    "RunResult",
    "RunSettings",
    "Scenario",
    "UnknownScenario",
    "Weakening",
    "World",
    "carry_out",
    "plan",
    "row",
    "run",
    "table",
]
