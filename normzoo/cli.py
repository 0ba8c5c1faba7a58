"""The ``normzoo`` command line. Commands import heavy modules (torch, Lightning) inside their
bodies, so ``normzoo --help`` answers at once.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable

import typer

from normzoo import __version__
from normzoo.errors import NormzooError

app = typer.Typer(
    name="normzoo",
    help="Train Transformers with any residual scheme and norm, and measure what the choice does.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def fail(error: NormzooError) -> typer.Exit:
    """Print a user error without a traceback and return the exit to raise."""
    typer.secho(f"error: {error}", fg=typer.colors.RED, err=True)
    return typer.Exit(error.exit_code)


_debug = {"on": False}


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", help="Print the version and exit."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for user errors too."),
) -> None:
    _debug["on"] = debug
    if version:
        typer.echo(f"normzoo {__version__}")
        raise typer.Exit()


@app.command("list")
def list_plugins(
    kind: str = typer.Argument("all", help="What to list: all, norms or residuals."),
    check: bool = typer.Option(
        False, "--check",
        help="Exit 1 if any entry is BROKEN or CONFLICT (for a plugin's CI, like pip check)."),
) -> None:
    """List every registered norm and residual scheme, with its distribution and version.

    Plugins that fail to import (BROKEN), and names that two distributions claim or that a plugin
    takes from a built-in (CONFLICT), are flagged; with --check they make the exit code 1.
    """
    from normzoo import registry
    from normzoo.options import close_match
    from normzoo.registry import first_doc_line

    groups = {"norms": [registry.norms], "residuals": [registry.residuals]}
    groups["all"] = groups["norms"] + groups["residuals"]
    aliases = {"norm": "norms", "residual": "residuals"}
    kind = aliases.get(kind, kind)
    if kind not in groups:
        hint = close_match(kind, list(groups))
        raise fail(NormzooError(f"unknown kind '{kind}'{hint}; use all, norms or residuals"))
    broken = 0
    for reg in groups[kind]:
        # A refused entry (a plugin taking a built-in's name) is listed below the built-in.
        entries = sorted([*reg.entries(load=True), *reg.refused()],
                         key=lambda e: (e.info.name, e.reserved is not None))
        typer.secho(f"{reg.kind}s ({reg.group})", bold=True)
        width = max((len(e.info.name) for e in entries), default=4)
        sources = [f"{e.info.distribution} {e.info.version}" for e in entries]
        source_width = max((len(source) for source in sources), default=4)
        for e, source in zip(entries, sources, strict=True):
            if e.conflict is not None:
                broken += 1
                status = typer.style(f"CONFLICT: {e.conflict}", fg="red")
            elif e.error is not None:
                broken += 1
                status = typer.style(f"BROKEN: {e.error}", fg="red")
            else:
                status = first_doc_line(e.obj)
            typer.echo(f"  {e.info.name:<{width}}  {source:<{source_width}}  {status}")
        typer.echo("")
    if broken:
        typer.echo(f"{broken} plugin(s) cannot be used until fixed; the others work.")
        if check:
            raise typer.Exit(1)


def user_errors(command: Callable[..., None]) -> Callable[..., None]:
    """Run ``command``, turning a user mistake into a message and exit code 2, no traceback."""

    @functools.wraps(command)
    def guarded(*args, **kwargs) -> None:
        try:
            command(*args, **kwargs)
        except NormzooError as error:
            if _debug["on"]:
                raise
            raise fail(error) from None

    return guarded


from normzoo import commands  # noqa: E402  (typer needs the app defined first)

for _name, _command in (("train", commands.train), ("prepare", commands.prepare),
                        ("evaluate", commands.evaluate),
                        ("translate", commands.translate), ("export", commands.export),
                        ("diagnose", commands.diagnose), ("sweep", commands.sweep)):
    app.command(_name)(user_errors(_command))
for _name, _command in (("show", commands.recipe_show), ("validate", commands.recipe_validate)):
    commands.recipe_app.command(_name)(user_errors(_command))
app.add_typer(commands.recipe_app, name="recipe")


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except NormzooError as error:  # raised outside a command's own handling
        if _debug["on"]:
            raise
        typer.secho(f"error: {error}", fg=typer.colors.RED, err=True)
        sys.exit(error.exit_code)


if __name__ == "__main__":
    main()
