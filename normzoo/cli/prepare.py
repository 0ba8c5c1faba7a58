"""``normzoo prepare``: encoding a recipe's data once, apart from training, so that every
process of a run maps the same cache.

The data pipeline (tokenizers, numpy) loads inside the command, never at import.
"""

from __future__ import annotations

from pathlib import Path

import typer

from normzoo.cli.common import OVERRIDES_HELP, file_system_failures, user_errors


@user_errors
def prepare(
    recipe: Path = typer.Argument(..., help="Recipe YAML file."),
    overrides: list[str] = typer.Argument(None, metavar="[KEY=VALUE]...", help=OVERRIDES_HELP,
                                          show_default=False),
) -> None:
    """Encode RECIPE's data once into the memory-mapped cache that `train` reads: trains or
    loads the tokenizer, encodes every split, and prints what it wrote."""
    import sys

    from normzoo import recipe as recipes

    resolved = recipes.load(recipe, overrides or [])
    if resolved.data.streaming:
        from normzoo.errors import NormzooError

        raise NormzooError("data.streaming is set: the training split is streamed while "
                           "training, not prepared; train directly")
    from normzoo.data.prepare import describe
    from normzoo.data.prepare import prepare as build

    with file_system_failures():
        prepared, _, report = build(resolved, show=sys.stderr.isatty())
    for line in describe(prepared, report):
        typer.echo(line)
