"""What every command shares: the guard that turns a user's mistake into a one-line message, and
the small checks several commands make on their inputs and outputs.

Kept apart from the command modules so that each of those holds one command and nothing else;
like them, it imports only typer and the standard library at module level (plus the light
:mod:`normzoo.errors`), so ``normzoo --help`` stays quick.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from pathlib import Path

import typer

from normzoo.errors import NormzooError

try:  # recent typer releases carry their own copy of click, with its own context stack
    from typer._click.globals import get_current_context
except ImportError:  # older ones run on click itself
    from click import get_current_context

OVERRIDES_HELP = "key=value settings applied on top of the recipe, e.g. optim.lr=3e-4"


def fail(error: NormzooError) -> typer.Exit:
    """Print a user error without a traceback and return the exit to raise."""
    typer.secho(f"error: {error}", fg=typer.colors.RED, err=True)
    return typer.Exit(error.exit_code)


def debug_requested() -> bool:
    """Whether ``normzoo --debug`` was given: read from the root command's parsed options, so
    no module-level state carries it from the root callback to the commands."""
    context = get_current_context(silent=True)
    return context is not None and bool(context.find_root().params.get("debug"))


def user_errors(command: Callable[..., None]) -> Callable[..., None]:
    """Run ``command``, turning a user mistake into a message and exit code 2, no traceback."""

    @functools.wraps(command)
    def guarded(*args, **kwargs) -> None:
        try:
            command(*args, **kwargs)
        except NormzooError as error:
            if debug_requested():
                raise
            raise fail(error) from None

    return guarded


@contextlib.contextmanager
def file_system_failures() -> Iterator[None]:
    """An OS error from the file system (a read-only folder, a full disk, a path through a
    file) as :class:`~normzoo.errors.RuntimeFailure`: exit 1 and the path, not a traceback."""
    try:
        yield
    except OSError as error:
        from normzoo.atomic import os_reason
        from normzoo.errors import RuntimeFailure

        where = f" {error.filename}" if error.filename else ""
        raise RuntimeFailure(f"could not write{where}: {os_reason(error)}") from None


def read_inputs(path: Path | None) -> list[str]:
    """Input sentences from ``path``, or from standard input when it is None; none is an error."""
    import sys

    from normzoo.data.sources import decode_lines, read_lines
    from normzoo.errors import NormzooError

    if path is not None:
        lines = read_lines(path)
    else:  # bytes, checked as a file's are: the text layer would pass on undecodable ones
        stdin = getattr(sys.stdin, "buffer", None)
        lines = (decode_lines(stdin.read(), "standard input") if stdin is not None
                 else sys.stdin.read().splitlines())
    if not lines or not any(line.strip() for line in lines):
        raise NormzooError("no input sentences (the input is empty)")
    return lines


def check_output_file(path: Path, option: str) -> None:
    """Refuse, before any work, an output file that is a directory or whose folder is missing."""
    from normzoo.errors import NormzooError

    if path.is_dir():
        raise NormzooError(f"{option} {path} is a directory; give a file name")
    folder = path.absolute().parent
    if not folder.is_dir():
        state = "is not a directory" if folder.exists() else "does not exist"
        raise NormzooError(f"{option} {path}: its folder {folder} {state}")
