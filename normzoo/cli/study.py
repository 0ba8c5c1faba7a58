"""``normzoo study``: a study file's cells trained (``run``), its verdict page written
(``report``), and the studies shipped with normzoo listed (``list``; ``run`` and ``report`` take
their names as ``train`` takes a shipped recipe's). Training code loads inside the commands,
never at import."""

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

#: The help of the STUDY argument.
STUDY_HELP = ("Study YAML file, or the name of a study shipped with normzoo (normzoo study "
              "list); a file of that name wins. Its recipe may be a file or a shipped recipe.")


def _chosen(study: Path) -> Path:
    """The file the STUDY argument names (a file, else a shipped study: exit 2 for neither),
    saying so first on stderr where a shipped study is read or a file hides one."""
    from normzoo.recipe.shipped import STUDIES, resolve

    resolved = resolve(study, STUDIES)
    if resolved.note is not None:
        typer.echo(resolved.note, err=True)
    return resolved.path


@app.command("list")
@user_errors
def list_studies() -> None:
    """List the studies shipped with normzoo: name, cells (settings x seeds over its parts)
    and its question. normzoo study run NAME trains one's cells under ./runs/, normzoo study
    report NAME writes its page there."""
    from normzoo.errors import NormzooError
    from normzoo.recipe.shipped import STUDIES, SUFFIX, folder, names, version
    from normzoo.study.spec import load_study

    shipped = names(STUDIES)
    if not shipped:
        raise NormzooError(f"no studies are installed with normzoo (looked in "
                           f"{folder(STUDIES)})")
    width = max(len(name) for name in shipped)
    typer.secho(f"{'NAME':<{width}}  CELLS  QUESTION", bold=True)
    for name in shipped:
        study = load_study(folder(STUDIES) / f"{name}{SUFFIX}")
        cells = sum(len(part.settings()) * len(part.seeds) for part in study.parts.values())
        typer.echo(f"{name:<{width}}  {cells:>5}  {study.question}")
    typer.echo(f"\n{len(shipped)} studies shipped with normzoo {version()} "
               f"({folder(STUDIES)}): normzoo study run NAME trains one's cells, normzoo study "
               "report NAME writes its page.")


@app.command("run")
@user_errors
def run(
    study: Path = typer.Argument(..., help=STUDY_HELP),
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

    found = load_study(_chosen(study), echo=lambda line: typer.echo(line, err=True))
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
    study: Path = typer.Argument(..., help=STUDY_HELP),
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

    found = load_study(_chosen(study))
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
