"""The ``normzoo`` command line: the Typer app, its root options, and one line per command.

Each command lives in the module named after it (``normzoo train`` in :mod:`normzoo.cli.train`,
the ``recipe`` group in :mod:`normzoo.cli.recipe`), and what they share in
:mod:`normzoo.cli.common`; this file only wires them, so the list below is the whole command
set. Commands import heavy modules (torch, Lightning) inside their bodies, so
``normzoo --help`` answers at once.
"""

from __future__ import annotations

import atexit
import itertools
import sys
from collections.abc import Sequence

import typer
from typer.core import TyperCommand

from normzoo import __version__
from normzoo.cli import (
    compare,
    diagnose,
    evaluate,
    export,
    generate,
    prepare,
    recipe,
    study,
    sweep,
    train,
    translate,
)
from normzoo.cli import list as listing
from normzoo.cli.ending import Ending
from normzoo.cli.help import ReadableCommand, ReadableGroup
from normzoo.errors import NormzooError

__all__ = ["app", "main"]

app = typer.Typer(
    name="normzoo",
    help="Train Transformers with any residual scheme and norm, and measure what the choice does.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion for the user's shell
    pretty_exceptions_enable=False,
    cls=ReadableGroup,
)


def version_line() -> str:
    """``normzoo 0.2.0 (torch 2.13.0, lightning 2.5.0, Python 3.11.9)``: what a bug report
    needs, as ``pip --version`` says its Python; read from the installed distributions'
    metadata, so neither torch nor Lightning is imported."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    return (f"normzoo {__version__} (torch {installed('torch')}, lightning "
            f"{installed('lightning')}, Python {platform.python_version()})")


@app.callback(invoke_without_command=True)
def _root(
    context: typer.Context,
    version: bool = typer.Option(False, "--version", help="Print the version and exit."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for user errors too."),
) -> None:
    # --debug is not stored anywhere: the guard in normzoo.cli.common reads it from this
    # command's parsed parameters (the root context), so nothing outlives one invocation.
    if version:
        typer.echo(version_line())
        raise typer.Exit()
    if context.invoked_subcommand is None:  # `normzoo --debug` alone: what there is to run
        typer.echo(context.get_help())
        raise typer.Exit()


# In the order `normzoo --help` lists them. Importing normzoo.cli.list also binds `list` in this
# namespace to that module, hiding the builtin here: nothing in this file uses the builtin.
# Every command's help reads as git's and pip's does (normzoo.cli.help).
app.command("list", cls=ReadableCommand)(listing.list_plugins)
app.command("train", cls=ReadableCommand)(train.train)
app.command("prepare", cls=ReadableCommand)(prepare.prepare)
app.command("evaluate", cls=ReadableCommand)(evaluate.evaluate)
app.command("translate", cls=ReadableCommand)(translate.translate)
app.command("generate", cls=ReadableCommand)(generate.generate)
app.command("export", cls=ReadableCommand)(export.export)
app.command("diagnose", cls=ReadableCommand)(diagnose.diagnose)
app.command("sweep", cls=ReadableCommand)(sweep.sweep)
app.command("compare", cls=ReadableCommand)(compare.compare)
for _command in recipe.app.registered_commands:  # the recipe group's, as they are registered
    if _command.cls in (None, TyperCommand):
        _command.cls = ReadableCommand
app.add_typer(recipe.app, name="recipe", cls=ReadableGroup)
for _command in study.app.registered_commands:
    if _command.cls in (None, TyperCommand):
        _command.cls = ReadableCommand
app.add_typer(study.app, name="study", cls=ReadableGroup)


def _debug_in_argv(argv: Sequence[str]) -> bool:
    """Whether ``--debug`` is among the root options, which come before the command's name."""
    return "--debug" in itertools.takewhile(lambda arg: arg.startswith("-"), argv)


def main() -> None:
    """Console-script entry point."""
    # Called by a program's top level (the console script, python -m normzoo), main
    # ends the process: then a stop signal once the command's work is done is its Ending's, to
    # the process's last moment. Called from other code (a test), it leaves the signal handlers
    # as it found them.
    ending = Ending(owned=sys._getframe(1).f_globals.get("__name__") == "__main__")
    if ending.owned:
        atexit.register(ending.ignore_signals)  # registered first, so run last of the hooks
    try:
        app(obj=ending)
    except NormzooError as error:  # raised outside a command's own handling
        if _debug_in_argv(sys.argv[1:]):
            raise
        typer.secho(f"error: {error}", fg=typer.colors.RED, err=True)
        sys.exit(error.exit_code)
    except SystemExit as exit_:  # how the app always ends: the command has returned
        code = exit_.code
        if ending.owned:
            ending.exiting(code if isinstance(code, int) else 0 if code is None else 1)
        raise
