"""``normzoo sweep``: training a grid of recipe variants and tabulating which ones diverge.

Training code loads inside the command, never at import.
"""

from __future__ import annotations

import enum
from pathlib import Path

import typer

from normzoo.cli.common import (
    OVERRIDES_HELP,
    check_output_folder,
    file_system_failures,
    user_errors,
)


class Launcher(str, enum.Enum):
    local = "local"
    slurm = "slurm"


@user_errors
def sweep(
    recipe: Path = typer.Argument(..., help="Recipe YAML file."),
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
    jobs: int = typer.Option(1, "--jobs", "-j", min=1, metavar="N", help="Cells running at "
                             "once (local: the CPU cores shared among them, and one GPU each where "
                             "there are GPUs; slurm: the array's parallelism)."),
    launcher: Launcher = typer.Option(Launcher.local, help="Where cells run: this machine, or "
                                      "SLURM jobs (through submitit)."),
    slurm_partition: str = typer.Option(None, metavar="NAME",
                                        help="SLURM partition of each cell's job."),
    slurm_time: int = typer.Option(24 * 60, min=1, metavar="MINUTES",
                                   help="SLURM time limit per cell."),
    slurm_gpus: int = typer.Option(0, min=0, metavar="N", help="GPUs per cell's SLURM job."),
    slurm_cpus: int = typer.Option(4, min=1, metavar="N", help="CPUs per cell's SLURM job."),
) -> None:
    """Train every combination of the --set values; finished cells are skipped on a re-run.
    Writes results.csv/.md (final loss, metric, diverged and when) and loss/stability plots."""
    from normzoo.sweep.runner import sweep as run_sweep
    from normzoo.sweep.slurm import Slurm

    folder = out or Path("runs") / f"sweep-{recipe.stem}"
    check_output_folder(folder, "--out")
    slurm = Slurm(partition=slurm_partition, time_min=slurm_time, gpus=slurm_gpus,
                  cpus=slurm_cpus)
    with file_system_failures():
        rows = run_sweep(recipe, set_, overrides or [], folder, steps, diagnose, jobs=jobs,
                         launcher=launcher.value, slurm=slurm)
    typer.echo((folder / "results.md").read_text(encoding="utf-8"))
    diverged = sum(r["status"] == "diverged" for r in rows)
    typer.echo(f"{len(rows)} cells, {diverged} diverged; results in {folder}")
