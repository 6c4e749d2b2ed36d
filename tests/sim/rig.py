"""A scripted client in a simulated world, for the model's own tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from sac.sim.harness import Received
from sac.sim.script import Observer, ScriptClient, Step
from sac.sim.world import World


class Rig:
    def __init__(self, seed: int = 1, **world: Any) -> None:
        self.observer = Observer()
        self.world = World(seed, **world)
        self.client = ScriptClient(self.observer)
        self.world.add(self.client)
        self.observer.next_step()

    @property
    def now(self) -> float:
        return self.world.events.now

    def do(self, *steps: Step, settle: float = 5.0) -> list[Any]:
        """Carry out the steps, run until idle; what the observer saw meanwhile."""
        self.observer.next_step()
        self.world.inject(self.client, [a for s in steps for a in self.client.actions(s)])
        self.world.run_until_idle(self.now + settle)
        return self.observer.normalised()[-1]

    def run(self, seconds: float) -> list[Any]:
        self.observer.next_step()
        self.world.run(self.now + seconds)
        return self.observer.normalised()[-1]

    def heard(self, link: str, kind: type) -> list[Any]:
        """Every method of ``kind`` ``link`` received so far."""
        return [e.method for e in self.client.events
                if isinstance(e, Received) and e.link == link and isinstance(e.method, kind)]

    def lost(self, link: str) -> list[Any]:
        return [e for e in self.client.events
                if getattr(e, "link", None) == link and not isinstance(e, Received)]


ROOT = Path(__file__).parents[2]


def printed_under_other_hash_seeds(code: str) -> list[list[str]]:
    """The words ``code`` prints in a fresh interpreter, once per ``PYTHONHASHSEED`` tried:
    a replay must not depend on the order of a set of strings."""
    printed = []
    for hash_seed in ("0", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, check=True,
                             capture_output=True, text=True, timeout=120)
        printed.append(out.stdout.split())
    return printed
