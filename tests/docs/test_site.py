"""The documentation site builds as a reader gets it: ``mkdocs build --strict`` (every page in
the nav, every link and anchor resolved, every snippet found, the API reference rendered from
the docstrings, the CLI reference from the parsers), into a directory of the test's own."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import types
from pathlib import Path

from sac.cli import build_parser
from .blocks import ROOT


def _hook() -> types.ModuleType:
    """The site's CLI hook, loaded from its file (docs/ is no package)."""
    spec = importlib.util.spec_from_file_location("cli_reference",
                                                  ROOT / "docs" / "hooks" / "cli_reference.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_site_builds_strictly_with_every_command_in_its_cli_reference(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    missing = [" ".join(path) for path, _ in _hook().commands(build_parser())
               if f'id="{"-".join(path)}"' not in cli]
    assert missing == []
    api = (tmp_path / "site" / "reference" / "api" / "sdk" / "index.html").read_text()
    assert 'id="sac.sdk.Consumer"' in api
    changelog = (tmp_path / "site" / "changelog" / "index.html").read_text()
    assert "Keep a Changelog" in changelog
