"""A command started as a shell starts a foreground program, and a wait for what it leaves.

Shared by the tests that signal a running ``normzoo`` (``test_interrupt.py``,
``test_command_endings.py``). SIGINT is set back to its default in the child: a test runner
started in the background has SIGINT ignored, which the child would inherit (and rightly keep).
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from typing import IO


def start_foreground(command: list[str], cwd, env: dict[str, str], stdout: IO | int,
                     stderr: IO | int) -> subprocess.Popen:
    """``command`` in ``cwd`` with no standard input, SIGINT at its default."""
    return subprocess.Popen(
        command, cwd=cwd, env=env, text=True, stdin=subprocess.DEVNULL, stdout=stdout,
        stderr=stderr, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def wait_for(condition: Callable[[], bool], process: subprocess.Popen,
             timeout: float = 240) -> None:
    """Poll ``condition`` until it holds; fail if ``process`` ends first or time runs out."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, f"ended early, exit {process.returncode}"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
