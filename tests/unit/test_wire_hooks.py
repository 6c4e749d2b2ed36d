"""sdk/_wire/pika_hooks.py refuses, at import, a pika that lacks a hook it uses, naming it."""

from __future__ import annotations

import pika
import pytest

from sac.sdk._wire.pika_hooks import HOOKS, Hook, require


class Base:
    def __init__(self) -> None:
        self._kept = 1

    def _method(self) -> None:
        pass


class Derived(Base):
    def __init__(self) -> None:
        super().__init__()


def test_every_hook_is_in_the_installed_pika() -> None:
    assert [hook.describe() for hook in HOOKS if not hook.present()] == []


def test_a_missing_method_is_named_with_the_pika_version() -> None:
    hooks = [Hook(Base, "_method", "calls"), Hook(Base, "_gone", "overrides to do X")]
    with pytest.raises(ImportError, match=r"pika 9\.9\.9 has no .*Base\._gone.*overrides to do X"):
        require(hooks, "9.9.9")


def test_an_instance_attribute_is_looked_for_where_it_is_set_bases_included() -> None:
    require([Hook(Derived, "_kept", "reads", set_in="__init__")], pika.__version__)
    with pytest.raises(ImportError, match=r"Derived\._other \(set in Derived\.__init__\)"):
        require([Hook(Derived, "_other", "reads", set_in="__init__")], "1.0")
    with pytest.raises(ImportError, match="_kept"):
        require([Hook(Derived, "_kept", "reads", set_in="_nowhere")], "1.0")
