"""The simulation tests' common ground."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def quiet_inbox() -> Iterator[None]:
    """The inbox logs each store retry: thousands of lines in a simulated campaign."""
    logger = logging.getLogger("sac.dedup")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)
