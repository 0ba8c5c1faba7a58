"""``metrics.csv`` across a resume: one file, every row once, a header that covers them all.

Lightning's ``CSVLogger`` deletes ``metrics.csv`` when it starts, remembers the header it wrote
itself, and rewrites the file in place (truncate, then write) when a new metric appears. So
rewriting the file beside it, as a resume must, breaks it: rows with fields the logger never saw
make its next rewrite fail (``dict contains fields not in fieldnames``) half-way, after it has
truncated the file. Here the resumed run's file is settled *before* the logger starts
(:func:`resume_history`: the earlier rows up to the checkpoint, written atomically), and the
logger (:class:`~normzoo.run.callbacks.logs.HistoryCSVLogger`) keeps it: it appends under the
header the file has, and when a new metric appears it rewrites the whole file atomically with
the wider header. A kill at any moment leaves the old file or the new one, never a shorter one.
This module reads and writes the file without Lightning (a sweep's plots read it too).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from normzoo.io.atomic import atomic_write_text


def metrics_path(run_dir: Path) -> Path:
    """A run's ``metrics.csv``, where its CSV logger writes it
    (:class:`~normzoo.run.callbacks.logs.HistoryCSVLogger` under ``logs/``)."""
    return run_dir / "logs" / "csv" / "metrics.csv"


def read_metrics(path: Path) -> list[dict[str, str]]:
    """The rows of a ``metrics.csv``, as text; a missing file has none. Cells a torn last line
    lacks are empty, and the cells beyond the header (which only a torn file has) are dropped."""
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return [{k: v or "" for k, v in row.items() if k is not None}
                for row in csv.DictReader(f)]


def read_header(path: Path) -> list[str] | None:
    """The fields of ``path``'s header line, in the file's order; None if there is no file or
    no header yet (appending needs the file's own order, not a sorted one)."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return next(csv.reader(f), None) or None
    except FileNotFoundError:
        return None


def write_metrics(path: Path, rows: list[dict[str, Any]],
                  fields: list[str] | None = None) -> None:
    """Write ``rows`` under a header of ``fields`` (default: every field of every row, sorted,
    as Lightning orders them) in one atomic step: the old file stays whole until the new one
    is complete."""
    if fields is None:
        fields = sorted({key for row in rows for key in row})
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, text.getvalue(), "metrics log")


def _step(row: dict[str, str]) -> int | None:
    try:
        return int(row.get("step") or "")
    except ValueError:
        return None


def _whole_rows(path: Path) -> list[dict[str, str]]:
    """:func:`read_metrics` without a last line that has no line end: one torn by a kill
    mid-write, whose cut-off number would read as a value it never had."""
    if not path.is_file():
        return []
    text = path.read_text(encoding="utf-8")
    if not text.endswith("\n"):
        text = text[:text.rfind("\n") + 1]
    return [{k: v or "" for k, v in row.items() if k is not None}
            for row in csv.DictReader(io.StringIO(text, newline=""))]


def trim_history(rows: list[dict[str, str]], resumed_step: int) -> list[dict[str, str]]:
    """The logged rows before the checkpoint's step, each once, in order.

    Rows at or after it are redone by the resumed run: the steps after the checkpoint, and the
    earlier process's final validation and test, which the resumed run's own replace. A row
    written twice is kept once; a row without a readable step is damaged.
    """
    kept: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
    for row in rows:
        step = _step(row)
        if step is not None and step < resumed_step:
            kept.setdefault(tuple(sorted((k, v) for k, v in row.items() if v)), row)
    return list(kept.values())


def last_validation(path: Path) -> dict[str, float]:
    """The ``val/*`` metrics of the last validation logged in ``path`` (empty if none): what a
    run resumed at its last step, which validates nothing, reports as its validation."""
    rows = read_metrics(path)
    found: dict[str, float] = {}
    step = None
    for row in reversed(rows):
        values = {k: float(v) for k, v in row.items() if k.startswith("val/") and v}
        if values and step in (None, _step(row)):
            step = _step(row)
            found = values | found
        elif found and _step(row) != step:
            break
    return found


def resume_history(metrics_file: Path, resumed_step: int) -> int:
    """Settle ``metrics_file`` for a run resuming at ``resumed_step``, before its logger starts:
    the earlier rows before that step, written atomically; return how many.

    The header is the earlier rows' fields; the resumed run's logger widens it when it logs a
    metric the earlier process did not (:class:`~normzoo.run.callbacks.logs.HistoryCSVLogger`).
    """
    rows = trim_history(_whole_rows(metrics_file), resumed_step)
    if rows:
        write_metrics(metrics_file, rows)
    else:
        metrics_file.unlink(missing_ok=True)
    return len(rows)



def validation_of(trainer: Any) -> dict[str, float]:
    """The run's last validation metrics: this process's, or from its metrics file for a run
    resumed at its end (its test was stopped), which validated nothing in this process."""
    return {k: float(v) for k, v in trainer.callback_metrics.items()
            if k.startswith("val/")} or last_validation(
                metrics_path(Path(trainer.default_root_dir)))


def log_test_scores(trainer: Any, scores: dict[str, Any]) -> None:
    """Send test scores computed outside ``trainer.test`` (translation's BLEU) to every logger
    of the run, as ``test/KEY``, at the step at which a ``trainer.test`` logs its ``test/``
    metrics: the number of updates made. Without this they would reach ``summary.json`` only."""
    logged = {f"test/{key}": float(value) for key, value in scores.items()}
    for logger in trainer.loggers:
        logger.log_metrics(logged, step=trainer.global_step)
        logger.finalize("success")  # written out, as at the end of fit and test


def end_restored_fit(trainer: Any) -> None:
    """Leave Lightning's loop counters where an uninterrupted ``fit`` leaves them, after a
    ``fit`` that restored a checkpoint at the run's end and so trained nothing (its final test
    had been stopped, or a stop signal came at the last step).

    Checkpoints are saved inside a step (at its validation's end), before Lightning counts the
    step for its loggers (``_batches_that_stepped``) and before the fit loop ends the epoch in
    flight. A resumed run does both as it finishes that step (the epoch loop's restart), but
    one restored at ``max_steps`` runs no loop at all, so the final ``trainer.validate`` and
    ``trainer.test`` (:func:`~normzoo.tasks.testing.test_in_loops`) logged their rows one step
    and one epoch early (a classifier's at epoch 4, step 59 instead of 5, 60). In automatic
    optimization a finished step has stepped one batch, so the count is the run's step."""
    loop = trainer.fit_loop
    if getattr(trainer.lightning_module, "automatic_optimization", True):
        loop.epoch_loop._batches_that_stepped = max(loop.epoch_loop._batches_that_stepped,
                                                    trainer.global_step)
    epochs = loop.epoch_progress
    if epochs.current.ready > epochs.current.completed:  # ended, as fit's end ends it
        epochs.increment_processed()
        epochs.increment_completed()
