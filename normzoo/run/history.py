"""``metrics.csv`` across a resume: Lightning's CSV logger starts the file afresh in each
process, so the rows logged before a resume are kept aside and put back in front, each once.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from normzoo.atomic import atomic_write_text


def read_metrics(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def write_metrics(path: Path, rows: list[dict[str, str]]) -> None:
    fields = sorted({key for row in rows for key in row})
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, text.getvalue(), "metrics log")


def trim_history(rows: list[dict[str, str]], resumed_step: int) -> list[dict[str, str]]:
    """The logged rows up to the checkpoint, each once; rows after it are redone by the resumed
    run (a row can appear twice if a process died before Lightning replaced metrics.csv)."""
    kept = {}
    for row in rows:
        if not row.get("step") or int(row["step"]) < resumed_step:
            kept.setdefault(tuple(sorted((k, v) for k, v in row.items() if v)), row)
    return list(kept.values())


def merge_history(metrics_file: Path, earlier: Path, history: list[dict[str, str]]) -> None:
    """Put the rows logged before a resume back in front of this process's rows."""
    if history:
        write_metrics(metrics_file, history + read_metrics(metrics_file))
        earlier.unlink()
