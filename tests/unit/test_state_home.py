"""Servers keep their state in one place whatever the working directory, so that `sac server
status` run from anywhere finds what `sac server up` started."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sac.cli import main
from sac.server import default_home


def test_sac_home_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SAC_HOME", str(tmp_path / "state"))
    assert default_home() == tmp_path / "state"


def test_root_keeps_state_in_var_lib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SAC_HOME", raising=False)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert default_home() == Path("/var/lib/sac")


def test_a_user_keeps_state_under_xdg_state_home(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SAC_HOME", raising=False)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_home() == tmp_path / "sac"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_home() == tmp_path / "home" / ".local" / "state" / "sac"


def test_status_from_another_directory_names_the_one_place(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("SAC_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["server", "status", "--name", "nowhere-to-be-found"]) == 1
    err = capsys.readouterr().err
    assert f"no state in {default_home() / 'nowhere-to-be-found'}" in err
