"""The checker's errors.

::

    CheckerError            anything the checker refuses to do; the CLI prints it as one line
     └── InputError         a run directory or file it cannot read or make sense of

A malformed *line* is not an error: it is part of the verdict (``malformed``) and the rest of
the run is still checked. An ``InputError`` is for what leaves nothing sensible to check: a
missing run directory, an unreadable file, a ``run.json`` whose settings cannot be trusted.

Both carry only a message, so they pickle (Spark carries exceptions between processes).
"""

from __future__ import annotations


class CheckerError(Exception):
    """Base of the checker's errors."""


class InputError(CheckerError):
    """A run directory or one of its files cannot be read or understood; the message names it."""
