"""Validators of the SDK's frozen settings classes (attrs ``validator=``).

Each rejects a bad value with ``ConfigurationError`` (a ``ValueError`` too) naming the field
and the value, so that a wrong setting is reported where it is made, never silently replaced.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from .._errors import ConfigurationError

Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def positive(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    """A number above zero (not a bool)."""
    if not _number(value) or not value > 0:
        raise ConfigurationError(f"{attribute.name} must be a positive number, got {value!r}")


def at_least(minimum: int) -> Validator:
    """An integer (not a bool) of at least ``minimum``."""

    def check(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ConfigurationError(
                f"{attribute.name} must be an integer >= {minimum}, got {value!r}"
            )

    return check


def no_less_than(minimum: float) -> Validator:
    """A number (not a bool) of at least ``minimum``."""

    def check(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not _number(value) or not value >= minimum:
            raise ConfigurationError(f"{attribute.name} must be >= {minimum}, got {value!r}")

    return check


def kind(cls: type) -> Validator:
    """An instance of ``cls``."""

    def check(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not isinstance(value, cls):
            raise ConfigurationError(
                f"{attribute.name} must be a {cls.__name__}, got {value!r}")

    return check


def flag(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, bool):
        raise ConfigurationError(f"{attribute.name} must be True or False, got {value!r}")


def optional(check: Validator) -> Validator:
    """``check``, or None."""

    def run(inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is not None:
            check(inst, attribute, value)

    return run
