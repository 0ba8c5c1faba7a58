"""``normzoo sweep``: train every cell of a grid of overrides, one after another, resumably.

Each cell is an ordinary run in ``OUT/<cell>/``; a finished cell leaves ``cell.json`` and is
skipped when the sweep is started again. A cell that diverges is recorded (with the step) and
the sweep goes on. Results: ``results.csv``, ``results.md``, ``loss_curves.png`` and
``stability_map.png`` (drawn by :mod:`.sweep_plots`) in ``OUT``.
"""

from __future__ import annotations

import csv
import functools
import io
import json
from pathlib import Path
from typing import Any

from normzoo.errors import RuntimeFailure
from normzoo.io.atomic import atomic_write_text
from normzoo.recipe.grid import (  # noqa: F401  (cells' names and overrides: public here too)
    cell_name,
    cell_overrides,
    cells,
    label,
    parse_grid,
    split_values,
    value_name,
)
from normzoo.sweep.launch import run_cells
from normzoo.sweep.seeds import compare_commands, over_seeds
from normzoo.sweep.slurm import Slurm

FAILED = "failed.json"  # a cell's failure record; cell.json is the record of a finished cell
FIELDS = ["cell", "status", "diverged_at_step", "steps", "stopped", "final_train_loss", "metric",
          "metric_value"]
# Every score a task's final test records follows as its own column (test_bleu, test_accuracy,
# test_loss, ...): the sweep reports whatever the task measures (test_scores), naming none.


def test_scores(summary: dict[str, Any]) -> dict[str, Any]:
    """The numbers of a summary's ``test``, as ``test_<name>`` columns."""
    test = summary.get("test") or {}
    return {f"test_{key}": value for key, value in test.items()
            if isinstance(value, int | float) and not isinstance(value, bool)}


def score_columns(rows: list[dict[str, Any]]) -> list[str]:
    """The ``test_*`` columns of ``rows`` beyond :data:`FIELDS`, sorted."""
    return sorted({key for row in rows for key in row
                   if key.startswith("test_") and key not in FIELDS})


def final_train_loss(run_dir: Path) -> float | None:
    """The last ``train/loss`` logged: the token mean over the last logging interval."""
    from normzoo.run.history import metrics_path, read_metrics

    losses = [float(row["train/loss"]) for row in read_metrics(metrics_path(run_dir))
              if row.get("train/loss")]
    return losses[-1] if losses else None


def run_cell(recipe_path: Path, base_overrides: list[str], cell: dict[str, str], out: Path,
             steps: int | None, diagnose: bool = False) -> dict[str, Any]:
    """Train one cell (unless it already finished) and return its result row; with
    ``diagnose``, also measure it at initialisation and at the end (``diagnose.csv``).

    A cell that fails (out of memory, a full disk, a bug) is recorded in ``failed.json`` and
    returned as a ``failed`` row rather than raised, so the other cells still run, however
    many run at once; no ``cell.json`` is written, so running the sweep again retries it.
    """
    name = cell_name(cell)
    run_dir = out / name
    record = run_dir / "cell.json"
    if record.is_file():
        return json.loads(record.read_text(encoding="utf-8"))
    (run_dir / FAILED).unlink(missing_ok=True)  # a failure of an earlier try is retried
    from normzoo.errors import NormzooError
    from normzoo.run.preemption import Preempted

    try:
        return _train_cell(recipe_path, base_overrides, cell, run_dir, steps, diagnose)
    except Preempted as stop:  # stopped by a signal with a checkpoint: the sweep stops
        # The cell's own advice (its `normzoo train ... --resume auto`) would finish this cell
        # alone: never the cells after it, nor results.csv. The sweep's command does both.
        raise Preempted(f"{stop.what}; the sweep stopped at cell {name}: run the same normzoo "
                        "sweep command again to continue it (finished cells are kept, this one "
                        "resumes from its checkpoint)", stop.signum) from None
    except Exception as error:  # the sweep goes on; sweep() reports every failed cell at the end

        row = {"cell": name, **cell, "status": "failed", "stopped": f"failed: {error}",
               "exit_code": error.exit_code if isinstance(error, NormzooError) else 1}
        if record.is_file():  # finished meanwhile by another sweep, which held it (in use)
            return json.loads(record.read_text(encoding="utf-8"))
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(run_dir / FAILED, json.dumps(row, indent=2), "sweep failure record")
        return row


def _train_cell(recipe_path: Path, base_overrides: list[str], cell: dict[str, str],
                run_dir: Path, steps: int | None, diagnose: bool) -> dict[str, Any]:
    from normzoo import recipe as recipes
    from normzoo.checkpoints.rolling import newest_checkpoint
    from normzoo.contract import task_of
    from normzoo.diagnostics.callbacks import DivergenceError
    from normzoo.run.training import run

    name, record = run_dir.name, run_dir / "cell.json"
    overrides = [*base_overrides, *cell_overrides(cell), f"run.dir={run_dir}"]
    if steps is not None:
        overrides.append(f"trainer.max_steps={steps}")
    resolved = recipes.load(recipe_path, overrides)
    metric, _ = task_of(resolved).monitor(resolved)
    row: dict[str, Any] = {"cell": name, **cell, "metric": metric}
    # A cell that was killed or pre-empted continues from its newest checkpoint.
    resume = "auto" if newest_checkpoint(run_dir / "checkpoints") else None
    try:
        summary = run(resolved, recipe_path, force=resume is None, resume=resume,
                      overrides=overrides)
        row.update({"status": "ok", "diverged_at_step": "", "steps": summary["steps"],
                    "stopped": summary.get("stopped", ""),
                    "metric_value": summary["validation"].get(metric, "")} | test_scores(summary))
    except DivergenceError as error:  # the step it carries, as the run's summary records it
        step = error.step if error.step is not None else ""
        row.update(status="diverged", stopped="diverged", diverged_at_step=step, steps=step,
                   metric_value="")
    row["final_train_loss"] = final_train_loss(run_dir)
    if diagnose:
        from normzoo.diagnostics.diagnose import diagnose_run

        diagnose_run(run_dir)
    atomic_write_text(record, json.dumps(row, indent=2), "sweep cell record")
    # A failure recorded while this try ran goes too: that of a second sweep that found the
    # cell's run directory in use by this one (the unlink before this try came too early).
    (run_dir / FAILED).unlink(missing_ok=True)
    return row


def write_results(rows: list[dict[str, Any]], keys: list[str], out: Path) -> None:
    fields = ["cell", *keys, *FIELDS[1:], *score_columns(rows)]
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(out / "results.csv", table.getvalue(), "sweep results")
    lines = ["| " + " | ".join(fields[1:]) + " |", "|" + "---|" * (len(fields) - 1)]
    for row in rows:
        cells_ = [row.get(k, "") for k in fields[1:]]
        lines.append("| " + " | ".join(f"{c:.4g}" if isinstance(c, float) else str(c)
                                       for c in cells_) + " |")
    lines += over_seeds(rows, keys) + compare_commands(rows, keys, out)
    atomic_write_text(out / "results.md", "\n".join(lines) + "\n", "sweep results")


def plot(rows: list[dict[str, Any]], keys: list[str], out: Path) -> None:
    """``loss_curves.png`` and ``stability_map.png`` (drawn by :mod:`.sweep_plots`, imported
    here and not at the top: it reads this module's names, and matplotlib is slow to import)."""
    from normzoo.sweep import plots as sweep_plots

    sweep_plots.plot(rows, keys, out)


def sweep(recipe_path: Path, settings: list[str], overrides: list[str], out: Path,
          steps: int | None, diagnose: bool = False, *, jobs: int = 1, launcher: str = "local",
          slurm: Slurm | None = None) -> list[dict[str, Any]]:
    """Run the grid (skipping finished cells) and write the results and plots. The results
    are rewritten as each cell finishes, with every finished cell of the grid, so a sweep in
    progress can be read (and committed). ``jobs`` cells run at once (:mod:`.launch`)."""
    from normzoo import recipe as recipes
    from normzoo.run.machine import check_machine

    grid = parse_grid(settings)
    keys = [k for k, _ in grid]
    all_cells = cells(grid)
    for cell in all_cells:  # validate every cell (on this machine) before training any of them
        check_machine(recipes.load(recipe_path, [*overrides, *cell_overrides(cell)]))
    out.mkdir(parents=True, exist_ok=True)
    work = functools.partial(_cell_work, recipe_path=recipe_path, overrides=overrides, out=out,
                             steps=steps, diagnose=diagnose)
    todo = [cell for cell in all_cells if not (out / cell_name(cell) / "cell.json").is_file()]

    def collect() -> None:
        if rows := finished(all_cells, out):
            write_results(rows, keys, out)

    collect()
    run_cells(todo, work, out, jobs=jobs, launcher=launcher, slurm=slurm, after_each=collect)
    rows = finished(all_cells, out)
    write_results(rows, keys, out)
    plot(rows, keys, out)
    if failed := [row for row in rows if row.get("status") == "failed"]:
        raise SweepFailed(failed, len(rows))
    return rows


class SweepFailed(RuntimeFailure):
    """Some cells failed; the others ran and are in the results. Exit code: the failures' own
    when they share one (2 for a user error), else 1."""

    def __init__(self, failed: list[dict[str, Any]], total: int) -> None:
        self.rows, self.total = failed, total
        codes = {row.get("exit_code", 1) for row in failed}
        self.exit_code = codes.pop() if len(codes) == 1 else 1
        lines = [f"{row['cell']}: {row['stopped'].removeprefix('failed: ')}" for row in failed]
        super().__init__(f"{len(failed)} of {total} sweep cells failed (the others are in the "
                         "results; run the same command again to retry these):\n  "
                         + "\n  ".join(lines))


def _cell_work(cell: dict[str, str], *, recipe_path: Path, overrides: list[str], out: Path,
               steps: int | None, diagnose: bool) -> dict[str, Any]:
    """:func:`run_cell` with the cell first: what a launcher calls (picklable for submitit)."""
    return run_cell(recipe_path, overrides, cell, out, steps, diagnose)


def finished(all_cells: list[dict[str, str]], out: Path) -> list[dict[str, Any]]:
    """The rows of every finished cell (or failed one: ``failed.json``), in the grid's order.
    Not only those this process has reached: a cell may have been finished by an earlier sweep
    that listed the values in another order (or by a second sweep over part of the grid), and
    the results should show it as soon as it is there."""
    rows = []
    for cell in all_cells:
        for name in ("cell.json", FAILED):
            record = out / cell_name(cell) / name
            if record.is_file():
                rows.append(json.loads(record.read_text(encoding="utf-8")))
                break
    return rows
