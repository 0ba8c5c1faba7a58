"""``normzoo sweep``: training a grid of recipe variants and tabulating which ones diverge.

Training code loads inside the command, never at import.
"""

from __future__ import annotations

from pathlib import Path

import typer

from normzoo.cli.common import (
    OVERRIDES_HELP,
    Launcher,
    check_output_folder,
    file_system_failures,
    jobs_option,
    launcher_option,
    slurm_cpus_option,
    slurm_gpus_option,
    slurm_partition_option,
    slurm_time_option,
    user_errors,
)
from normzoo.cli.recipe import RECIPE_HELP, chosen


@user_errors
def sweep(
    recipe: Path = typer.Argument(..., metavar="RECIPE", help=RECIPE_HELP),
    overrides: list[str] = typer.Argument(None, metavar="[KEY=VALUE]...", help=OVERRIDES_HELP,
                                          show_default=False),
    set_: list[str] = typer.Option(..., "--set", metavar="KEY=V1,V2,...",
                                   help="A grid axis (repeat for more axes); a value may be a "
                                   "mapping, e.g. {name: admin, init: profiled}."),
    steps: int = typer.Option(None, min=1, metavar="N",
                              help="trainer.max_steps for every cell (default: the recipe's)."),
    out: Path = typer.Option(None, metavar="DIR",
                             help="Sweep folder (default: runs/sweep-RECIPE)."),
    diagnose: bool = typer.Option(
        False, "--diagnose", help="Also measure every cell at initialisation and at its last "
        "checkpoint (gradient and stream norms, branch ratios, layer cosine by layer): "
        "diagnose.csv and diagnose.md in the cell's folder."),
    jobs: int = jobs_option(),
    launcher: Launcher = launcher_option(),
    slurm_partition: str = slurm_partition_option(),
    slurm_time: int = slurm_time_option(),
    slurm_gpus: int = slurm_gpus_option(),
    slurm_cpus: int = slurm_cpus_option(),
) -> None:
    """Train every combination of the --set values; finished cells are skipped on a re-run.
    Writes results.csv/.md (final loss, metric, diverged and when) and loss/stability plots."""
    from normzoo.sweep.runner import sweep as run_sweep
    from normzoo.sweep.slurm import Slurm

    path = chosen(recipe).path  # a shipped recipe's file: the cells read it
    folder = out or Path("runs") / f"sweep-{path.stem}"
    check_output_folder(folder, "--out")
    slurm = Slurm(partition=slurm_partition, time_min=slurm_time, gpus=slurm_gpus,
                  cpus=slurm_cpus)
    with file_system_failures():
        rows = run_sweep(path, set_, overrides or [], folder, steps, diagnose, jobs=jobs,
                         launcher=launcher.value, slurm=slurm)
    typer.echo((folder / "results.md").read_text(encoding="utf-8"))
    diverged = sum(r["status"] == "diverged" for r in rows)
    typer.echo(f"{len(rows)} cells, {diverged} diverged; results in {folder}")
