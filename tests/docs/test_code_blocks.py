"""Every code block of the documentation does what it shows, by the convention of
``tests/docs/blocks.py`` (and ``docs/architecture.md``, "Writing docs"):

- the ```` ```python ```` blocks of one page run in order in one fresh namespace, as a user
  pasting them into one Python session would, in a fresh working directory, against the
  session's real cluster, whose URLs the blocks read from ``SAC_AMQP_URLS`` and
  ``SAC_MANAGEMENT_URLS`` as an application would; a page must delete the queues it declares;
- a block marked ``<!-- fragment -->`` is only compiled;
- in ```` ```sh ```` blocks every ``sac`` command parses with the real parser, every
  ``python recipes/NAME.py`` or ``python -m MODULE`` line uses only options its ``--help``
  lists, and every ``make`` target exists;
- ```` ```text ```` and other blocks are output samples: not run.
"""

from __future__ import annotations

import contextlib
import functools
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sac.chaos import SCENARIOS
from sac.cli import build_parser
from sac.sdk import Management, ManagementSettings
from sac.server import LocalCluster
from .blocks import ROOT, Block, blocks, options, pages, shell_commands

SHELLS = {"sh", "bash", "shell"}
IGNORED = {"pip", "export", "mkdocs", "cd"}
"""Commands of shell blocks that are not ours to check (installing, the environment)."""

PAGES = pages()
RUNNABLE = [page for page in PAGES
            if any(b.lang == "python" and not b.fragment for b in blocks(ROOT / page))]


def test_the_pages_hold_runnable_examples_and_the_readme_is_among_them() -> None:
    """The collection itself: a parsing slip would silently check nothing."""
    assert Path("README.md") in RUNNABLE
    assert len(RUNNABLE) >= 6
    assert sum(len([b for b in blocks(ROOT / p) if b.lang in SHELLS]) for p in PAGES) >= 8


@pytest.mark.parametrize("page", PAGES, ids=str)
def test_every_python_block_compiles(page: Path) -> None:
    for block in blocks(ROOT / page):
        if block.lang == "python":
            compile(block.code, block.where, "exec")


def _queues(api: Management) -> set[str]:
    return {queue.name for queue in api.queues("/")}


@pytest.mark.parametrize("page", RUNNABLE, ids=str)
def test_the_python_blocks_of_a_page_run_in_order_against_a_real_broker(
    page: Path, cluster: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAC_AMQP_URLS", ",".join(cluster.urls()))
    monkeypatch.setenv("SAC_MANAGEMENT_URLS", ",".join(cluster.management_urls()))
    monkeypatch.chdir(tmp_path)
    api = Management(ManagementSettings.from_env())
    before = _queues(api)
    namespace: dict[str, object] = {"__name__": "__main__"}
    try:
        for block in blocks(ROOT / page):
            if block.lang == "python" and not block.fragment:
                exec(compile(block.code, block.where, "exec"), namespace)
    finally:
        left = sorted(_queues(api) - before)
        for name in left:
            api.delete_queue(name, if_empty=False)
    assert left == [], f"{page} declares queues it does not delete"


@functools.cache
def _listed_options(*command: str) -> frozenset[str]:
    """The long options a program's ``--help`` lists (it must exit 0)."""
    done = subprocess.run([sys.executable, *command, "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=_env())
    assert done.returncode == 0, f"{' '.join(command)} --help: {done.stderr[-2000:]}"
    return frozenset(re.findall(r"--[A-Za-z0-9][\w-]*", done.stdout))


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _check_sac(words: list[str], where: str) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            parsed = build_parser().parse_args(words)
        except SystemExit as exc:  # --help exits 0; a bad command line 2, with the reason
            code = exc.code
        else:
            code = None
    assert code in (None, 0), f"{where}: sac {' '.join(words)}: {err.getvalue().strip()}"
    if code == 0:
        return
    # What the parser leaves to the command: a scenario's name.
    scenario = getattr(parsed, "scenario", None)
    assert scenario is None or scenario in SCENARIOS, f"{where}: no scenario {scenario!r}"


def _check(words: list[str], block: Block) -> None:
    where = block.where
    program = words[0]
    if program in IGNORED:
        return
    if program == "eval":  # eval "$(sac server env ...)": the command inside is checked
        inner = re.fullmatch(r"\$\((.*)\)", " ".join(words[1:]), re.DOTALL)
        assert inner is not None, f"{where}: eval of something other than $(command)"
        for command in shell_commands(inner[1]):
            _check(command, block)
        return
    if program == "sac":
        _check_sac(words[1:], where)
    elif program in {"python", "python3"} and words[1:3] == ["-m", "sac"]:
        _check_sac(words[3:], where)
    elif program in {"python", "python3"} and words[1] == "-m":
        unknown = set(options(words[3:])) - _listed_options("-m", words[2])
        assert not unknown, f"{where}: python -m {words[2]} has no {sorted(unknown)}"
    elif program in {"python", "python3"} and words[1].startswith("recipes/"):
        assert (ROOT / words[1]).is_file(), f"{where}: no {words[1]}"
        unknown = set(options(words[2:])) - _listed_options(words[1])
        assert not unknown, f"{where}: {words[1]} has no {sorted(unknown)}"
    elif program == "make":
        targets = re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE)
        assert set(words[1:]) <= set(targets), f"{where}: make {' '.join(words[1:])}"
    else:
        pytest.fail(f"{where}: {program}: a command the docs tests do not know how to check "
                    f"(teach tests/docs/test_code_blocks.py, or add it to IGNORED)")


@pytest.mark.parametrize("page", [p for p in PAGES if any(b.lang in SHELLS
                                                           for b in blocks(ROOT / p))], ids=str)
def test_every_command_of_a_shell_block_parses(page: Path) -> None:
    for block in blocks(ROOT / page):
        if block.lang in SHELLS:
            for words in shell_commands(block.code):
                _check(words, block)


def _table_names(text: str, column: int) -> set[str]:
    """The backticked names in one column of a Markdown table's rows."""
    names: set[str] = set()
    for line in text.splitlines():
        cells = line.strip().strip("|").split("|")
        if line.startswith("|") and len(cells) > abs(column) and not set(cells[0]) <= set("-: "):
            names |= set(re.findall(r"`([a-z0-9-]+)`", cells[column]))
    return names


def test_the_guarantee_table_cites_real_scenarios_and_the_chaos_guide_lists_every_one() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("[start:guarantees]")[1].split("[end:guarantees]")[0]
    cited = _table_names(table, -1)
    assert cited, "no scenario found in the guarantee table"
    assert cited <= set(SCENARIOS)
    guide = (ROOT / "docs" / "guides" / "chaos.md").read_text(encoding="utf-8")
    assert set(SCENARIOS) <= _table_names(guide, 0)
