"""``normzoo train``: one module for the command people run most, so it is found by its name.

Torch and Lightning load inside the command, never at import, to keep ``normzoo --help`` quick.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from normzoo.cli.common import OVERRIDES_HELP, file_system_failures, user_errors
from normzoo.cli.ending import work_done
from normzoo.cli.recipe import RECIPE_HELP, chosen


@user_errors
def train(
    recipe: Path = typer.Argument(..., metavar="RECIPE", help=RECIPE_HELP),
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
    from normzoo.run.training import TrainingRun

    # A shipped recipe is read from normzoo's folder but named as given: the run directory
    # (runs/NAME), the summary and a resume command name it as the user did.
    path = chosen(recipe).path
    # The run records how it ended, and what a stop leaves (normzoo.run.endings): a stop is
    # raised with its note for the guard's line (normzoo.cli.ending), and one that came once
    # the summary said completed is answered here, the exit code unchanged.
    with file_system_failures():
        training = TrainingRun(recipes.load(path, overrides or []), recipe, force=force,
                               resume=resume, overrides=overrides or [])
        summary = training.run(note_late_stops=True)
    if summary is None and not training.late_signal:  # another process of a multi-process
        return  # run: rank 0 reports
    path = Path(summary["run_dir"]) / "summary.json" if summary else \
        training.run_dir / "summary.json"
    with work_done(f"the run had completed ({path})", training.late_signal):
        if summary is not None:
            _report(summary, training.recipe.task)


def _report(summary: dict[str, Any], task: str) -> None:
    """The lines a completed run ends with: its summary, its test score (as ``task`` words
    it), its folder. A summary written before it recorded its task is reported alike."""
    if sys.stdout.isatty():
        typer.echo(json.dumps(summary, indent=2))
    else:  # a log file keeps to plain lines; the summary is one file away
        typer.echo(f"summary: {Path(summary['run_dir']) / 'summary.json'} "
                   f"({summary.get('status', '')}, {summary.get('steps', '?')} steps)")
    if summary.get("test"):  # the task says its own scores (Task.report)
        from normzoo.contract import task_of

        typer.secho(task_of(task).report(summary["test"]), bold=True)
    typer.echo(f"run directory: {summary['run_dir']}")
