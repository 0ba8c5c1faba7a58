"""``normzoo study run``: every cell of every part trained, as ``normzoo sweep`` trains a grid.

A part is one sweep in ``OUT/<part>/`` with the seeds as its first axis, so a cell is an
ordinary run directory (``seed-1_residual-pre``) that the sweep machinery keeps when finished
and resumes from its newest checkpoint when interrupted: the study may be stopped and started
any number of times, and ``--jobs`` and SLURM work as for a sweep.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from normzoo.study.spec import SEED, Part, Study, value_text


def part_folder(study: Study, part: str, out: Path | None = None) -> Path:
    return (out or study.out) / (study.parts[part].folder or part)


def sweep_axes(part: Part) -> list[str]:
    """The part's grid as ``normzoo sweep --set`` axes, the seeds first (cells are named
    ``seed-1_residual-pre``)."""
    axes = [f"{SEED}={','.join(str(s) for s in part.seeds)}"]
    return [*axes, *(f"{key}={','.join(value_text(v) for v in values)}"
                     for key, values in part.grid.items())]


def part_overrides(part: Part) -> list[str]:
    return [f"{key}={value_text(value)}" for key, value in part.overrides.items()]


def run_study(study: Study, *, jobs: int = 1, launcher: str = "local", slurm: Any = None,
              out: Path | None = None, echo: Any = print) -> dict[str, list[dict[str, Any]]]:
    """Train every part's cells (finished ones kept); a part's failed cells do not stop the
    parts after it, and are raised together at the end (their exit code, as the sweep's)."""
    from normzoo.sweep.runner import SweepFailed, sweep

    rows, failures = {}, []
    for name, part in study.parts.items():
        folder = part_folder(study, name, out)
        echo(f"part {name}: {len(part.seeds)} seeds x {len(part.settings())} settings "
             f"of {part.recipe} in {folder}")
        try:
            rows[name] = sweep(part.recipe, sweep_axes(part), part_overrides(part), folder,
                               None, part.diagnose, jobs=jobs, launcher=launcher, slurm=slurm)
        except SweepFailed as failed:
            failures.append(failed)
    if failures:
        raise failures[0] if len(failures) == 1 else SweepFailed(
            [row for f in failures for row in f.rows], sum(f.total for f in failures))
    return rows
