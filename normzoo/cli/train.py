"""``normzoo train``: one module for the command people run most, so it is found by its name.

Torch and Lightning load inside the command, never at import, to keep ``normzoo --help`` quick.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from normzoo.cli.common import OVERRIDES_HELP, file_system_failures, user_errors


@user_errors
def train(
    recipe: Path = typer.Argument(..., metavar="RECIPE", help="Recipe YAML file."),
    overrides: list[str] = typer.Argument(None, metavar="[KEY=VALUE]...", help=OVERRIDES_HELP,
                                          show_default=False),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing run directory."),
    resume: str = typer.Option(
        None, metavar="auto|CKPT",
        help="Continue a run: 'auto' (its checkpoints/last.ckpt) or a checkpoint path."
    ),
) -> None:
    """Train a model from RECIPE; writes a run directory with checkpoints, logs and a summary.

    init.from=CKPT starts a new run from a checkpoint's weights (step 0, a fresh optimizer and
    schedule); --resume continues a run where it stopped."""
    from normzoo import recipe as recipes
    from normzoo.recipe.paths import check_inputs
    from normzoo.run.machine import check_machine

    # The data is read minutes later (after the tokenizer): a missing file fails now.
    resolved = check_inputs(check_machine(recipes.load(recipe, overrides or [])),
                            resuming=resume is not None)
    from normzoo.run.training import run

    with file_system_failures():
        summary = run(resolved, recipe, force=force, resume=resume, overrides=overrides or [])
    if summary is None:  # another process of a multi-process run: rank 0 reports
        return
    if sys.stdout.isatty():
        typer.echo(json.dumps(summary, indent=2))
    else:  # a log file keeps to plain lines; the summary is one file away
        typer.echo(f"summary: {Path(summary['run_dir']) / 'summary.json'} "
                   f"({summary.get('status', '')}, {summary.get('steps', '?')} steps)")
    test = summary.get("test", {})
    if "bleu" in test:
        typer.secho(
            f"test BLEU {test['bleu']:.2f} on {test['split']} ({test['sentences']} sentences; "
            f"copying the source scores {test['copy_source_bleu']:.2f})  {test['signature']}",
            bold=True,
        )
    typer.echo(f"run directory: {summary['run_dir']}")
