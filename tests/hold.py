"""Run the ``normzoo`` CLI standing still inside a chosen function, so that a test can send it a
signal at a known point of its work, as a person at the terminal would.

    python tests/hold.py MODULE:NAME normzoo-args...   # e.g. normzoo.data.prepare:_encode_role
    python tests/hold.py MODULE:CLASS.NAME normzoo-args...  # a method

On the first call of that function the process writes ``./held`` and waits there, sleeping in
Python as a long computation would, until ``./go`` appears (or a signal ends it); the function
then runs as usual. Used by tests/test_interrupted_commands.py.
"""

from __future__ import annotations

import functools
import importlib
import sys
import time
from pathlib import Path


def hold_in(target: str) -> None:
    module_name, _, name = target.partition(":")
    *path, attribute = name.split(".")
    owner = importlib.import_module(module_name)
    for part in path:
        owner = getattr(owner, part)
    function = getattr(owner, attribute)
    held = []

    @functools.wraps(function)
    def hold_then_call(*args, **kwargs):
        if not held:
            held.append(True)
            Path("held").write_text(target)
            while not Path("go").exists():
                time.sleep(0.02)
        return function(*args, **kwargs)

    setattr(owner, attribute, hold_then_call)


if __name__ == "__main__":
    target, *args = sys.argv[1:]
    hold_in(target)
    from normzoo.cli import main

    sys.argv = ["normzoo", *args]
    main()
