"""A recipe is a file a user copies into a project where sac is installed: it runs there alone
(``run_recipe`` runs every recipe of these tests that way), ``--help`` starts nothing, and a
broker it cannot use is bad input, said in one line, with nothing to tidy up."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

from sac.server import LocalCluster
from tests.recipes.conftest import ROOT, run_recipe

RECIPES = sorted(path.stem for path in (ROOT / "recipes").glob("[!_]*.py"))


def test_every_recipe_is_listed() -> None:
    assert {"takeover", "idempotent_consumer", "mirrored_to_quorum", "federated_queue",
            "blue_green", "demo"} <= set(RECIPES)


@pytest.mark.parametrize("name", RECIPES)
def test_help_copied_alone_prints_and_starts_nothing(name: str, tmp_path: Path) -> None:
    """``--home`` comes first, so a recipe that went on past ``--help`` would write there."""
    home = tmp_path / "home"
    home.mkdir()
    done = run_recipe(name, "--home", str(home), "--help")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.startswith(f"usage: {name}.py ")
    assert "exit status: 0" in " ".join(done.stdout.split())
    assert list(home.iterdir()) == []


@pytest.mark.parametrize("command", [["-m", "recipes.takeover"], ["recipes/takeover.py"]])
def test_in_the_checkout_both_forms_run(command: list[str]) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, *command, "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "--handover-at N" in done.stdout


def with_password(url: str, password: str) -> str:
    parts = urllib.parse.urlsplit(url)
    netloc = f"{parts.username}:{password}@{parts.hostname}:{parts.port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


@pytest.mark.parametrize("name", ["takeover", "idempotent_consumer"])
def test_a_refused_password_is_bad_input_with_nothing_left(name: str,
                                                          cluster: LocalCluster) -> None:
    urls = [f"--url={with_password(url, 'not-the-password')}" for url in cluster.urls()]
    done = run_recipe(name, *urls)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: the broker refused the login: ")
    assert "wrong user name or password" in done.stderr
    assert "left on the broker" not in done.stderr
    assert "not-the-password" not in done.stderr
    names = {q.name for q in cluster.management().queues("/")}
    assert not [n for n in names if n.startswith(("takeover-", "idempotent-"))]


def test_a_broker_that_does_not_answer_is_bad_input() -> None:
    done = run_recipe("takeover", "--url", "amqp://u:p@127.0.0.1:1/%2F")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: no broker answers: ")
    assert "127.0.0.1:1" in done.stderr


def test_the_management_api_with_a_refused_password_is_bad_input(cluster: LocalCluster) -> None:
    done = run_recipe("mirrored_to_quorum",
                      *(f"--url={with_password(u, 'nope')}" for u in cluster.urls()),
                      *(f"--management-url={u}" for u in cluster.management_urls()))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "refused the login" in done.stderr
