"""A command's expected failures as one line on stderr and an exit status, never a traceback:
what a script checks and a person reads."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable

Action = Callable[[argparse.Namespace], int]


def one_line(prog: str, errors: type[Exception] | tuple[type[Exception], ...],
             status: int) -> Callable[[Action], Action]:
    """Wrap a command so that ``errors`` print as ``PROG: message`` and exit ``status``."""
    def wrap(action: Action) -> Action:
        @functools.wraps(action)
        def run(args: argparse.Namespace) -> int:
            try:
                return action(args)
            except errors as exc:
                print(f"{prog}: {exc}", file=sys.stderr)
                return status

        return run

    return wrap
