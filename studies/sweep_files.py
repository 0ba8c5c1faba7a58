"""What the study reports share: copying a sweep's cells into the repository and reading them back.

A study report (``depth/report.py``, ``llama/report.py``, ``precision/report.py``) works in two
steps. **Collect** copies, from each sweep folder, what the report reads into
``docs/<study>/data/``: per cell its ``cell.json`` (the sweep's row), ``summary.json``,
``diagnose.csv``, the test translations, and the loss columns of ``metrics.csv``
(``loss.csv``). **Render** reads those files alone, so every number in a report is in a file in
the repository and a report can be rebuilt without the runs.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import shutil
import statistics
from pathlib import Path
from typing import Any

LOSS_FIELDS = ["step", "train_loss", "val_loss", "train_time"]
COPIED = ("cell.json", "summary.json", "diagnose.csv")


def copy_cells(source: Path, target: Path, translations: bool = False,
               extra: tuple[str, ...] = (), unfinished: bool = False) -> list[str]:
    """Copy every cell of the sweep folder ``source`` that has a ``cell.json`` (the sweep wrote
    its row: the cell finished, or failed and says so) into ``target``; returns their names.

    ``translations``: also the test hypotheses (``hyps.*.txt``), which paired bootstrap needs.
    ``extra``: more of the cell's files by name (``recipe.yaml``: the settings that ran).
    ``unfinished``: also the cells that trained but have no row (stopped before their final
    test), with what they have, unless ``target`` already holds a finished copy of the cell.
    """
    if not source.is_dir():
        return []
    copied = []
    for cell in sorted(p for p in source.iterdir() if p.is_dir()):
        out, metrics = target / cell.name, cell / "logs" / "csv" / "metrics.csv"
        finished = (cell / "cell.json").is_file()
        if not finished and not (unfinished and metrics.is_file()
                                 and not (out / "cell.json").is_file()):
            continue
        out.mkdir(parents=True, exist_ok=True)
        names = [*COPIED, *extra, *(p.name for p in cell.glob("hyps.*.txt") if translations)]
        for name in names:
            if (cell / name).is_file():
                shutil.copyfile(cell / name, out / name)
        if metrics.is_file():
            write_csv(out / "loss.csv", loss_rows(metrics), LOSS_FIELDS)
        copied.append(cell.name)
    return copied


def loss_rows(metrics: Path) -> list[dict[str, str]]:
    """The rows of a run's ``metrics.csv`` that log a loss or the training clock."""
    return [{"step": r["step"], "train_loss": r.get("train/loss", ""),
             "val_loss": r.get("val/loss", ""), "train_time": r.get("train/time", "")}
            for r in read_csv(metrics)
            if r.get("train/loss") or r.get("val/loss") or r.get("train/time")]


def read_csv(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def write_csv(path: Path, rows: list[dict[str, Any]], fields: list[str]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def as_float(value: Any) -> float | None:
    """A finite number, or None (empty cells, ``nan``, text)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def mean_sd(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    mean = statistics.fmean(values)
    return mean, statistics.stdev(values) if len(values) > 1 else 0.0


def fmt(value: float | None, digits: int = 2, missing: str = "–") -> str:
    """A figure as the reports print it, or ``missing`` for one not (yet) measured."""
    return missing if value is None else f"{value:.{digits}f}"


def curve(losses: list[dict[str, str]], column: str) -> list[tuple[int, float]]:
    """(step, value) of ``column`` where it was logged and finite."""
    return [(int(r["step"]), v) for r in losses if (v := as_float(r.get(column))) is not None]


def training_minutes(losses: list[dict[str, str]]) -> tuple[float | None, int]:
    """Training time (Lightning's ThroughputMonitor: validation and start-up left out), summed
    over the processes of a cell that was killed and resumed (each starts its clock at 0), and
    how many processes it took. Steps redone after a kill are not in the log, so the time they
    took is not counted."""
    times = [t for _, t in curve(losses, "train_time")]
    if not times:
        return None, 0
    total, processes = 0.0, 1
    for before, after in itertools.pairwise(times):
        if after < before:  # a resumed process
            total, processes = total + before, processes + 1
    return (total + times[-1]) / 60, processes


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (files only, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
