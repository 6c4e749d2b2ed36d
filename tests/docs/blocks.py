"""The code blocks of the documentation, read from Markdown (pure: no I/O beyond the file).

The convention the tests hold the pages to (also in ``docs/architecture.md``, "Writing docs"):

- ```` ```python ```` blocks of one page run in order in one fresh namespace, as a user pasting
  them into one Python session would, against a real broker whose URLs are in
  ``SAC_AMQP_URLS`` (and ``SAC_MANAGEMENT_URLS``), in a fresh working directory;
- a Python block that shows only a fragment (names it does not define, a server the tests do
  not start) has ``<!-- fragment -->`` on the line before its fence: it is only compiled;
- ```` ```sh ```` blocks: every ``sac ...`` command must parse with the real CLI, and every
  ``python recipes/NAME.py ...`` or ``python -m MODULE ...`` line must name options its
  ``--help`` lists; ``make TARGET`` must name a target of the Makefile;
- anything else (```` ```text ````, ```` ```json ````, output samples, diagrams) is not run.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).parents[2]
FRAGMENT = "<!-- fragment -->"
_SNIPPET = re.compile(r'^--8<-- "(?P<path>[^":]+)(?::[\w-]+)?"\s*$', re.MULTILINE)
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)(?P<rest>.*)$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    fragment: bool

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, its indentation removed."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        before = [line.strip() for line in lines[:i] if line.strip()]
        fragment = bool(before) and before[-1] == FRAGMENT
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            line = lines[j]
            body.append(line[indent:] if line[:indent].strip() == "" else line.lstrip())
            j += 1
        found.append(Block(path, i + 1, opening["lang"].lower(), "\n".join(body) + "\n",
                           fragment))
        i = j + 1
    return found


def shell_commands(code: str) -> list[list[str]]:
    """The simple commands of a shell block: continuations joined, comments dropped, split at
    ``&&``, ``||``, ``;`` and ``|``, leading ``VAR=value`` assignments removed."""
    joined = re.sub(r"\\\n", " ", code)
    commands: list[list[str]] = []
    for line in joined.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        current: list[str] = []
        for token in lexer:
            if token and set(token) <= set(";&|"):
                commands.append(current)
                current = []
            else:
                current.append(token)
        commands.append(current)
    result = []
    for words in commands:
        while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
            words = words[1:]
        if words:
            result.append(words)
    return result


def options(words: list[str]) -> list[str]:
    """The long options a command line uses (``--name`` of ``--name=value`` too)."""
    return [word.split("=", 1)[0] for word in words if word.startswith("--") and word != "--"]


def pages() -> list[Path]:
    """Every Markdown file a reader sees: the README, the site's pages, and the files they
    include whole or in part (``--8<--``), relative to the repository's root."""
    found = [Path("README.md"), *sorted(p.relative_to(ROOT) for p in (ROOT / "docs").rglob("*.md")
                                        if "hooks" not in p.parts)]
    for page in list(found):
        for match in _SNIPPET.finditer((ROOT / page).read_text(encoding="utf-8")):
            included = Path(match["path"])
            if included not in found:
                found.append(included)
    return found
