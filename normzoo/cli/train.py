"""``normzoo train``: one module for the command people run most, so it is found by its name.

Torch and Lightning load inside the command, never at import, to keep ``normzoo --help`` quick.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import typer

from normzoo.cli.common import OVERRIDES_HELP, file_system_failures, user_errors
from normzoo.cli.ending import work_done
from normzoo.run.preemption import StopSignal


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
    from normzoo.recipe.paths import run_directory
    from normzoo.run.training import run

    started = time.time()
    loaded = None  # the recipe, once read: a stop before then leaves no run to report on
    late = 0  # a stop signal that came once the summary said completed
    try:
        try:
            with file_system_failures():
                summary = run(loaded := recipes.load(recipe, overrides or []), recipe,
                              force=force, resume=resume, overrides=overrides or [])
        except SystemExit as ended:  # Lightning ends a Ctrl-C it caught (before training) so
            if isinstance(ended.__context__, KeyboardInterrupt):
                raise ended.__context__ from None
            raise
    except (KeyboardInterrupt, StopSignal) as stop:
        if loaded is None:
            raise
        run_dir = run_directory(loaded, recipe)
        # Stopped as the run let go of its loggers and lock, after its summary said completed?
        summary = _completed(run_dir / "summary.json", started)
        if summary is None:
            stop.note = _stopped(run_dir, started, recipe, overrides or [], force, resume)
            raise
        late = getattr(stop, "signum", signal.SIGINT)
    if summary is None:  # another process of a multi-process run: rank 0 reports
        return
    path = Path(summary["run_dir"]) / "summary.json"
    with work_done(f"the run had completed ({path})", late):
        _report(summary)


def _report(summary: dict[str, Any]) -> None:
    """The lines a completed run ends with: its summary, its test score, its folder."""
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
    elif "loss" in test:  # a language model: its loss, and perplexity or MLM accuracy
        scores = [f"loss {test['loss']:.4f}"]
        if "ppl" in test:
            scores.append(f"perplexity {test['ppl']:.2f}")
        if "mlm_acc" in test:
            scores.append(f"MLM accuracy {test['mlm_acc']:.4f}")
        typer.secho(f"test {', '.join(scores)} on {test['split']}", bold=True)
    typer.echo(f"run directory: {summary['run_dir']}")


def _completed(path: Path, since: float) -> dict[str, Any] | None:
    """The summary at ``path`` if this command wrote it (after ``since``) and it says the run
    completed; else None."""
    try:
        if path.stat().st_mtime < since:
            return None
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) and summary.get("status") == "completed" \
        else None


def _stopped(run_dir: Path, since: float, recipe: Path, overrides: list[str], force: bool,
             resume: str | None) -> str | None:
    """What a stop outside training leaves, when the guard's line (before training started, run
    the same command) is not all: training ended in this command (it wrote checkpoints after
    ``since``), or a new run's folder was started without any."""
    from normzoo.run.directory import refuse_existing_run
    from normzoo.run.resume import resume_command

    folder = run_dir / "checkpoints"
    try:
        fresh = any(p.stat().st_mtime >= since for p in folder.glob("*.ckpt"))
        started = resume is None and not force and refuse_existing_run(run_dir, force=True)
    except OSError:
        return None
    if fresh:
        return (f"after training, before the run's summary was written; its checkpoints are "
                f"in {folder}: continue with: {resume_command(recipe, run_dir, overrides)}")
    if started:
        return (f"before training started; {run_dir} holds no checkpoint: run the same "
                "command again with --force")
    return None
