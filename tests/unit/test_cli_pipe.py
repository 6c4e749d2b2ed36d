"""`sac ... | head`: a reader that goes away early is not a traceback."""

from __future__ import annotations

import subprocess
import sys

CLOSED_STDOUT = """
import os, sys
read, write = os.pipe()
os.close(read)             # the reader is gone before anything is written
os.dup2(write, 1)
from sac.cli import main
sys.exit(main(["chaos", "list"]))
"""


def test_a_closed_pipe_ends_the_command_without_a_traceback() -> None:
    done = subprocess.run([sys.executable, "-c", CLOSED_STDOUT], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.stderr == ""
    assert done.returncode == 141
