"""What a chaos run can fail with, apart from the verdict itself (a run that found anomalies
did not fail: it reports them)."""

from __future__ import annotations


class ChaosError(Exception):
    """A run could not be carried out (set-up, a missing server, an actor that died)."""


class ChaosTimeout(ChaosError):
    """Something a scenario waits for did not happen within its bound."""


class ActorFailed(ChaosError):
    def __init__(self, actor: str, why: str) -> None:
        super().__init__(f"actor {actor} {why}")
        self.actor = actor


class UnknownScenario(ChaosError):
    pass
