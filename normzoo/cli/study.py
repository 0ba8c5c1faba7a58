"""``normzoo study``: a study file's cells trained (``run``) and its verdict page written
(``report``). Training code loads inside the commands, never at import."""

from __future__ import annotations

from pathlib import Path

import typer

from normzoo.cli.common import (
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

app = typer.Typer(help="Run a study file's grid over seeds, and write its verdict page.",
                  no_args_is_help=True)


@app.command("run")
@user_errors
def run(
    study: Path = typer.Argument(..., help="Study YAML file; its recipe may be a file or a "
                                 "recipe shipped with normzoo (normzoo recipe list)."),
    out: Path = typer.Option(None, metavar="DIR", help="Where the cells train (default: the "
                             "study's `out`, else runs/study-NAME)."),
    jobs: int = jobs_option(),
    launcher: Launcher = launcher_option(),
    slurm_partition: str = slurm_partition_option(),
    slurm_time: int = slurm_time_option(),
    slurm_gpus: int = slurm_gpus_option(),
    slurm_cpus: int = slurm_cpus_option(),
) -> None:
    """Train every cell of the study (every part, setting and seed); finished cells are kept
    and interrupted ones resume, so run it again any number of times."""
    from normzoo.study.running import run_study
    from normzoo.study.spec import load_study
    from normzoo.sweep.slurm import Slurm

    found = load_study(study, echo=lambda line: typer.echo(line, err=True))
    if out is not None:
        check_output_folder(out, "--out")
    slurm = Slurm(partition=slurm_partition, time_min=slurm_time, gpus=slurm_gpus,
                  cpus=slurm_cpus)
    with file_system_failures():
        run_study(found, jobs=jobs, launcher=launcher.value, slurm=slurm, out=out,
                  echo=typer.echo)
    typer.echo(f"every cell of {study} has run; its page: normzoo study report {study}")


@app.command("report")
@user_errors
def report(
    study: Path = typer.Argument(..., help="Study YAML file."),
    runs: Path = typer.Option(None, "--from", metavar="DIR", help="Where the cells are "
                              "(default: where `study run` trains them)."),
    out: Path = typer.Option(None, metavar="DIR", help="Where the page goes (default: the "
                             "runs' folder): index.md, its figures, verdicts.json."),
    data_dir: Path = typer.Option(None, metavar="DIR", help="Where the recipes' data files "
                                  "are now (references for translation)."),
    samples: int = typer.Option(1000, min=100, metavar="N",
                                help="Resamples of the example-level test."),
) -> None:
    """Judge every comparison of the study over the seeds that have finished, and write the
    page (index.md), its figures and verdicts.json; unfinished cells are listed as missing."""
    from normzoo.study.report import PAGE, VERDICTS
    from normzoo.study.report import report as write_report
    from normzoo.study.spec import load_study

    found = load_study(study)
    if out is not None:
        check_output_folder(out, "--out")
    with file_system_failures():
        parts = write_report(found, runs, out, data_dir, samples)
    folder = out or runs or found.out
    for part in parts:
        for row in part.rows:
            where = "" if row["across_parts"] else f"{row['part']}: "
            typer.echo(f"{where}{row['system_setting']} vs {row['baseline_setting']} "
                       f"({row['score']}): "
                       f"{row['verdict']}")
    typer.echo(f"wrote {folder / PAGE} and {folder / VERDICTS}")
