"""The management API of the session cluster, and the SDK fixtures its role tests share."""

from __future__ import annotations

import pytest

from sac.sdk import Management, ManagementSettings
from sac.server import LocalCluster
from tests.sdk.conftest import conn, consumers, face, queue  # noqa: F401 - shared fixtures


@pytest.fixture
def management_settings(cluster: LocalCluster) -> ManagementSettings:
    """Every node's API, and the cluster's own statistics interval (its answers' age)."""
    return ManagementSettings(cluster.management_urls(),
                              statistics_interval=cluster.spec.statistics_interval_ms / 1000)


@pytest.fixture
def management(management_settings: ManagementSettings) -> Management:
    return Management(management_settings)
