"""The simulator can fail: each deliberately broken engine (``sac.sim.variants``) is caught
by the invariant it breaks within its budget of schedules, while the real engines pass
``FAST_RUN`` schedules, more than any budget (``test_engines``)."""

from __future__ import annotations

import pytest

from sac.sim.campaign import campaign
from sac.sim.variants import VARIANTS
from sac.sim.workload import EnginesWorkload
from .test_engines import FAST_RUN

BUDGET = 500
CAUGHT_BY = {
    "no-retransmit": "left unconfirmed on",
    "no-mark": "with mark None, expected",
    "lost-nack-retry": "was nacked on",
    "ack-before-commit": "before its effect was committed",
    "no-idle-flush": "done but unacked",
    "cancel-at-stop": "became active at",
    "stale-generation-ack": "unknown delivery tag",
    "no-fencing": "committed by 2 consumers",
}


def test_every_variant_is_named_here() -> None:
    assert set(VARIANTS) - {"real"} == set(CAUGHT_BY)
    assert BUDGET <= FAST_RUN


@pytest.mark.parametrize("name", sorted(CAUGHT_BY))
def test_a_broken_variant_is_caught_within_its_budget(name: str) -> None:
    summary = campaign(EnginesWorkload(engines=VARIANTS[name]), 0, BUDGET)
    found = summary.found
    assert found is not None, f"{name} passed {BUDGET} schedules"
    assert any(CAUGHT_BY[name] in v for v in found.outcome.violations), found.outcome.violations
    assert found.shrunk_violations, "the shrunk schedule must still fail"
    assert len(found.shrunk) <= len(found.outcome.schedule)
    print(f"\n{name}: caught at schedule {found.index + 1} (seed {found.outcome.seed}), "
          f"shrunk from {len(found.outcome.schedule)} to {len(found.shrunk)} fault(s): "
          f"{found.shrunk}")
