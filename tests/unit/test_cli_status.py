"""``sac server status`` for a cluster it cannot find says where it looked: state lives in a
directory (``--home``, ``$SAC_HOME``, or the default place: ``default_home()``), and the same
command run from elsewhere finds nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sac.cli import main


def test_a_cluster_not_found_names_where_it_looked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["server", "status", "--name", "nc", "--home", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out) == {"name": "nc", "running": False, "nodes": []}
    assert err == (f"sac: cluster 'nc' is not running: no state in {tmp_path / 'nc'} "
                   "(start it with `sac server up --name nc`)\n")
