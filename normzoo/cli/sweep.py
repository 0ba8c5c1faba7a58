"""``normzoo sweep``: training a grid of recipe variants and tabulating which ones diverge.

Training code loads inside the command, never at import.
"""

from __future__ import annotations

from pathlib import Path

import typer

from normzoo.cli.common import OVERRIDES_HELP, file_system_failures, user_errors


@user_errors
def sweep(
    recipe: Path = typer.Argument(..., help="Recipe YAML file."),
    overrides: list[str] = typer.Argument(None, help=OVERRIDES_HELP, show_default=False),
    set_: list[str] = typer.Option(..., "--set", help="A grid axis KEY=V1,V2,... (repeatable)."),
    steps: int = typer.Option(None, min=1, help="trainer.max_steps for every cell."),
    out: Path = typer.Option(None, help="Sweep folder (default runs/sweep-<recipe>)."),
    diagnose: bool = typer.Option(
        False, "--diagnose", help="Also measure every cell at initialisation and at its last "
        "checkpoint (gradient and stream norms, branch ratios, layer cosine by layer): "
        "diagnose.csv and diagnose.md in the cell's folder."),
) -> None:
    """Train every combination of the --set values; finished cells are skipped on a re-run.
    Writes results.csv/.md (final loss, metric, diverged and when) and loss/stability plots."""
    from normzoo.diagnostics.sweep import sweep as run_sweep

    folder = out or Path("runs") / f"sweep-{recipe.stem}"
    with file_system_failures():
        rows = run_sweep(recipe, set_, overrides or [], folder, steps, diagnose)
    typer.echo((folder / "results.md").read_text(encoding="utf-8"))
    diverged = sum(r["status"] == "diverged" for r in rows)
    typer.echo(f"{len(rows)} cells, {diverged} diverged; results in {folder}")
