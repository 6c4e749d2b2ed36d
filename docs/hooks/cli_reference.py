"""A MkDocs hook that writes the CLI reference from the ``sac`` command's own argparse parsers.

argparse has no MkDocs plugin, and a page copied from ``--help`` by hand drifts from the code;
so ``docs/reference/cli.md`` holds one marker, ``<!-- sac-cli -->``, and this hook replaces it
with every command's ``--help`` (``sac``, ``sac server``, ``sac server up``, ...), walked from
``sac.cli.build_parser()`` at build time. The width is fixed so the page does not depend on
the terminal that builds it.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from typing import Any

MARKER = "<!-- sac-cli -->"
WIDTH = "100"


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("sac",)
             ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every (command path, parser) under ``parser``, depth first, in declaration order."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*path, name))


def render() -> str:
    """The reference as Markdown: a heading and the help text per command."""
    from sac.cli import build_parser

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        parts = []
        for path, parser in commands(build_parser()):
            level = "#" * min(len(path) + 1, 4)
            parts.append(f"{level} `{' '.join(path)}`\n\n```text\n{parser.format_help()}```\n")
        return "\n".join(parts)
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """MkDocs' hook: fill the marker on the page that has it, leave every other page alone."""
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render())
