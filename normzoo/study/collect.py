"""A study's cells copied beside its page, so that the page can be rebuilt without the runs.

``normzoo study report --out DIR`` (a folder other than the runs') copies what it reads of each
cell into ``DIR/data/<part>/<cell>/`` and reports from that copy: the sweep's record
(``cell.json`` or ``failed.json``), ``summary.json``, ``recipe.yaml``, ``diagnose.csv``, the
per-example test outputs (``hyps.*.txt``, ``examples.*.tsv``) and the loss columns of
``metrics.csv`` (``loss.csv``): a few hundred kilobytes a cell, never its checkpoints. Reporting
again with ``--from DIR/data`` gives the same page.
"""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

from normzoo.io.atomic import atomic_write_text
from normzoo.study.cells import LOSS_COPY, METRICS, rows_of

KEPT = ("cell.json", "failed.json", "summary.json", "recipe.yaml", "diagnose.csv")
OUTPUTS = ("hyps.*.txt", "examples.*.tsv")
LOSS_FIELDS = ["step", "train_loss", "val_loss", "train_time"]


def copy_part(source: Path, target: Path) -> list[str]:
    """Copy every cell of ``source`` that has a record (finished or failed) into ``target``;
    the names of the cells copied. A cell already copied is copied again (it may have been
    re-run since)."""
    if not source.is_dir():
        return []
    copied = []
    for cell in sorted(p for p in source.iterdir() if p.is_dir()):
        if not any((cell / name).is_file() for name in ("cell.json", "failed.json")):
            continue
        out = target / cell.name
        out.mkdir(parents=True, exist_ok=True)
        names = [n for n in KEPT if (cell / n).is_file()]
        names += [p.name for pattern in OUTPUTS for p in cell.glob(pattern)]
        for name in names:
            shutil.copyfile(cell / name, out / name)
        if (cell / METRICS).is_file():
            atomic_write_text(out / LOSS_COPY, loss_table(cell / METRICS), "cell losses")
        elif (cell / LOSS_COPY).is_file():
            shutil.copyfile(cell / LOSS_COPY, out / LOSS_COPY)
        copied.append(cell.name)
    return copied


def loss_table(metrics: Path) -> str:
    """The rows of a run's ``metrics.csv`` that log a loss or the training clock."""
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=LOSS_FIELDS)
    writer.writeheader()
    for row in rows_of(metrics):
        kept = {"step": row.get("step", ""), "train_loss": row.get("train/loss", ""),
                "val_loss": row.get("val/loss", ""), "train_time": row.get("train/time", "")}
        if kept["train_loss"] or kept["val_loss"] or kept["train_time"]:
            writer.writerow(kept)
    return table.getvalue()
