"""``normzoo recipe``: the sub-app that reads recipes without training, created and filled here
so that the group and its commands (``show``, ``validate``) are found in one place.
"""

from __future__ import annotations

from pathlib import Path

import typer

from normzoo.cli.common import OVERRIDES_HELP, user_errors

app = typer.Typer(help="Inspect recipes: print them resolved, or validate them.",
                  no_args_is_help=True)


@app.command("show")
@user_errors
def show(
    recipe: Path = typer.Argument(..., help="Recipe YAML file."),
    overrides: list[str] = typer.Argument(None, metavar="[KEY=VALUE]...", help=OVERRIDES_HELP,
                                          show_default=False),
) -> None:
    """Print the resolved recipe (its bases merged in, defaults filled in, overrides applied)
    as YAML."""
    from normzoo import recipe as recipes

    # Not checked against this machine: a recipe for a bigger one is shown as well.
    typer.echo(recipes.load(recipe, overrides or []).to_yaml(), nl=False)


@app.command("validate")
@user_errors
def validate(
    recipe: Path = typer.Argument(..., help="Recipe YAML file."),
    overrides: list[str] = typer.Argument(None, metavar="[KEY=VALUE]...", help=OVERRIDES_HELP,
                                          show_default=False),
) -> None:
    """Check a recipe (its bases merged in) against the schema, the installed plugins, what
    this machine can run (memory, CPU cores) and the inputs it names (data files, init.from);
    exit 2 with every error."""
    from normzoo import recipe as recipes
    from normzoo.recipe.bases import read_recipe_with_bases
    from normzoo.run.inputs import check_inputs, unread_data_keys
    from normzoo.run.machine import check_machine

    checked = check_inputs(check_machine(recipes.load(recipe, overrides or [])))
    for line in unread_data_keys(checked):
        typer.echo(f"warning: {line}", err=True)
    _, bases = read_recipe_with_bases(recipe)
    typer.echo(f"{recipe}: ok" + (f" (built on {', '.join(map(str, bases))})" if bases else ""))
