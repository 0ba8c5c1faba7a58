"""The commands behind ``normzoo train`` and ``normzoo recipe``; :mod:`normzoo.cli` wires them.

Each imports torch and Lightning only when it runs. User mistakes (a bad recipe, missing data)
raise :class:`~normzoo.errors.NormzooError`, which the CLI prints without a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

OVERRIDES_HELP = "key=value settings applied on top of the recipe, e.g. optim.lr=3e-4"


def train(
    recipe: Path = typer.Argument(..., help="Recipe YAML file."),
    overrides: list[str] = typer.Argument(None, help=OVERRIDES_HELP, show_default=False),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing run directory."),
) -> None:
    """Train a model from RECIPE; writes a run directory with checkpoints, logs and a summary."""
    from normzoo import recipe as recipes

    resolved = recipes.load(recipe, overrides or [])
    from normzoo.train import run

    summary = run(resolved, recipe, force=force)
    typer.echo(json.dumps(summary, indent=2))
    test = summary.get("test", {})
    if "bleu" in test:
        typer.secho(
            f"test BLEU {test['bleu']:.2f} on {test['split']} ({test['sentences']} sentences; "
            f"copying the source scores {test['copy_source_bleu']:.2f})  {test['signature']}",
            bold=True,
        )
    typer.echo(f"run directory: {summary['run_dir']}")


recipe_app = typer.Typer(help="Inspect recipes: print them resolved, or validate them.",
                         no_args_is_help=True)


@recipe_app.command("show")
def recipe_show(
    recipe: Path = typer.Argument(..., help="Recipe YAML file."),
    overrides: list[str] = typer.Argument(None, help=OVERRIDES_HELP, show_default=False),
) -> None:
    """Print the resolved recipe (defaults filled in, overrides applied) as YAML."""
    from normzoo import recipe as recipes

    typer.echo(recipes.load(recipe, overrides or []).to_yaml(), nl=False)


@recipe_app.command("validate")
def recipe_validate(
    recipe: Path = typer.Argument(..., help="Recipe YAML file."),
    overrides: list[str] = typer.Argument(None, help=OVERRIDES_HELP, show_default=False),
) -> None:
    """Check a recipe against the schema and the installed plugins; exit 2 with every error."""
    from normzoo import recipe as recipes

    recipes.load(recipe, overrides or [])
    typer.echo(f"{recipe}: ok")
