"""Recipes are what users copy: they use the SDK's public face (``sac.sdk`` and its public
modules, such as ``sac.sdk.dedup``), ``sac.server`` to find a local cluster, ``sac.history``
(the history format) and the harness they share, ``sac.recipe_kit``, which is installed with
sac; nothing private, nothing of the chaos suite, and nothing of the checkout (no relative
import, no ``recipes``): a recipe runs copied alone."""

from __future__ import annotations

import ast
import sys

from tests.recipes.conftest import ROOT

LIBRARIES = {"attrs", "psycopg"}
KIT = "sac.recipe_kit"


def allowed(module: str) -> bool:
    parts = module.split(".")
    if parts[0] in LIBRARIES:
        return True
    public = not any(part.startswith("_") for part in parts)
    return public and (parts[:2] == ["sac", "sdk"] or module in ("sac.server", "sac.history", KIT))


def imports(path: str) -> set[str]:
    tree = ast.parse((ROOT / path).read_text(), path)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add("." * node.level + (node.module or ""))
    return found


def test_the_rule_refuses_what_it_should() -> None:
    assert allowed("sac.sdk.dedup")
    assert not allowed("sac.sdk._settings")
    assert not allowed("sac.chaos.actors")
    assert allowed("sac.history")  # the history contract a recorder writes
    assert not allowed("sac.server._rabbitmq_config")
    assert not allowed("pika")
    assert not allowed("._common")
    assert not allowed("recipes.takeover")
    assert allowed(KIT)


def test_recipes_import_only_the_public_face() -> None:
    paths = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "recipes").glob("*.py"))
    assert "recipes/takeover.py" in paths
    assert "recipes/idempotent_consumer.py" in paths
    offenders = {}
    for path in paths:
        ours = {name for name in imports(path)
                if name.split(".")[0] not in sys.stdlib_module_names and name != "__future__"}
        if refused := sorted(name for name in ours if not allowed(name)):
            offenders[path] = refused
    assert offenders == {}


def test_the_kit_imports_only_the_public_face() -> None:
    ours = {name for name in imports("sac/recipe_kit.py")
            if name.split(".")[0] not in sys.stdlib_module_names and name != "__future__"}
    assert ours
    assert sorted(name for name in ours if not allowed(name)) == []
