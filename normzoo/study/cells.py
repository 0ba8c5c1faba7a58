"""A part's cells as the report reads them, from a live sweep folder or from a copy of it.

A cell is a run directory with the sweep's record of it (``cell.json``; ``failed.json`` for a
cell that failed), its ``summary.json`` and ``recipe.yaml``, its losses (``logs/csv/metrics.csv``
in a live run, ``loss.csv`` in a copy), ``diagnose.csv`` where the study diagnosed, and its
per-example test outputs. Which setting and seed a cell ran is read from its record and recipe,
not from its folder's name, so cells named by older sweeps (no seed axis: seed 1) are found too.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from normzoo.study.spec import SEED, Part, Score, Setting, value_text

LOSS_COPY = "loss.csv"  # a copied cell's loss columns: step, train_loss, val_loss, train_time
METRICS = Path("logs") / "csv" / "metrics.csv"


def _json(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def rows_of(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def number(value: Any) -> float | None:
    """A finite number, or None (an empty cell, ``nan``, text)."""
    try:
        found = float(value)
    except (TypeError, ValueError):
        return None
    return found if math.isfinite(found) else None


def _name(value: Any) -> str:
    from normzoo.recipe.grid import value_name

    return value_name(value_text(value))


@dataclass
class Cell:
    """One finished (or failed) cell of a part."""

    folder: Path
    record: dict[str, Any]
    seed: str
    status: str  # ok, diverged or failed
    outputs_cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @cached_property
    def summary(self) -> dict[str, Any]:
        return _json(self.folder / "summary.json")

    @cached_property
    def recipe(self) -> dict[str, Any]:
        import yaml

        try:
            found = yaml.safe_load((self.folder / "recipe.yaml").read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            return {}
        return found if isinstance(found, dict) else {}

    @property
    def device(self) -> str:
        """The device kind the cell trained on; empty where its summary records none."""
        machine = self.summary.get("machine")
        return str(machine.get("device") or "") if isinstance(machine, dict) else ""

    @property
    def precision(self) -> str:
        """The precision it trained in (its saved recipe's, else its record's where the sweep
        set it); empty where none is recorded."""
        return str((self.recipe.get("trainer") or {}).get("precision")
                   or self.record.get("trainer.precision") or "")

    @property
    def identity(self) -> str | None:
        """Its training's identity (``summary.json``'s), where recorded."""
        from normzoo.run.identity import identity_key

        return identity_key(self.summary.get("identity"))

    def losses(self) -> list[dict[str, str]]:
        """Rows with ``step``, ``train_loss``, ``val_loss``, ``train_time``."""
        if (self.folder / LOSS_COPY).is_file():
            return rows_of(self.folder / LOSS_COPY)
        return [{"step": r.get("step", ""), "train_loss": r.get("train/loss", ""),
                 "val_loss": r.get("val/loss", ""), "train_time": r.get("train/time", "")}
                for r in rows_of(self.folder / METRICS)]

    def curve(self, column: str) -> list[tuple[int, float]]:
        return [(int(float(r["step"])), v) for r in self.losses()
                if r.get("step") and (v := number(r.get(column))) is not None]

    def diagnose(self) -> list[dict[str, str]]:
        return rows_of(self.folder / "diagnose.csv")

    def score(self, score: Score, task: Any) -> float | None:
        """The cell's value of ``score`` (None: not recorded, or the cell did not finish)."""
        if self.status != "ok":
            return None
        if score.source == "task":
            return number((self.summary.get("test") or {}).get(task.compared_score[0]))
        if score.source in ("validation", "test"):
            return number((self.summary.get(score.source) or {}).get(score.name))
        rows = [r for r in self.diagnose() if r.get("when") != "init"]
        last = max(((r.get("stack", ""), int(r.get("layer") or 0)) for r in rows), default=None)
        return next((number(r.get(score.name)) for r in rows
                     if (r.get("stack", ""), int(r.get("layer") or 0)) == last), None)

    def outputs(self, task: Any, data_dir: Path | None) -> Any:
        """Its per-example test outputs (None: kept none); read once."""
        if "found" not in self.outputs_cache:
            self.outputs_cache["found"] = task.example_outputs(self.folder, self.recipe,
                                                               data_dir)
        return self.outputs_cache["found"]


@dataclass
class PartCells:
    """What a part's folder holds: its cells by setting (in the grid's order), and the
    (setting, seed) pairs still missing."""

    settings: list[Setting]
    cells: dict[int, list[Cell]]
    missing: list[tuple[int, str]]
    stray: list[Path]

    def finished(self, index: int) -> list[Cell]:
        return [c for c in self.cells.get(index, []) if c.status == "ok"]


# Where a cell ran, not what it trained, and paths (saved resolved, given relative): a copied or
# moved cell may record them otherwise.
WHERE = ("run.", "data.dir", "data.num_workers", "init.from", "trainer.accelerator",
         "trainer.devices", "trainer.num_nodes", "trainer.strategy", "trainer.progress_bar")


def saved(recipe: dict[str, Any], key: str) -> Any:
    """A dotted key's value in a saved recipe (None where it has none)."""
    found: Any = recipe
    for name in key.split("."):
        found = found.get(name) if isinstance(found, dict) else None
    return found


def contradicts(cell: Cell, overrides: dict[str, Any]) -> bool:
    """Whether the cell's saved recipe sets one of the part's overrides otherwise: another
    sweep's cell in a shared folder (the same setting and seed in another precision)."""
    return any(not key.startswith(WHERE) and (value := saved(cell.recipe, key)) is not None
               and value_text(value) != value_text(wanted)
               for key, wanted in overrides.items())


def read_part(part: Part, folder: Path, recipe_seed: int | None = None) -> PartCells:
    """Every cell of ``folder`` matched to the part's settings and seeds (``recipe_seed``: the
    seed of a cell whose record and recipe name none, that of the part's recipe)."""
    settings = part.settings()
    wanted = [tuple(_name(s[k]) for k in part.grid) for s in settings]
    by_setting: dict[int, list[Cell]] = {}
    stray = []
    folders = sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
    for cell_dir in folders:
        record = _json(cell_dir / "cell.json")
        status = str(record.get("status") or "")
        if not record:
            record = _json(cell_dir / "failed.json")
            status = "failed" if record else ""
        if not record:
            continue
        key = tuple(_name(record.get(k, "")) for k in part.grid)
        # A cell of another sweep in the same folder sets other axes (recipe keys are dotted).
        if key not in wanted or {k for k in record if "." in k} != set(part.grid):
            stray.append(cell_dir)
            continue
        cell = Cell(cell_dir, record, "", status)
        cell.seed = str(record.get(SEED) or cell.recipe.get(SEED) or recipe_seed or "")
        if cell.seed not in {str(s) for s in part.seeds} or contradicts(cell, part.overrides):
            stray.append(cell_dir)
            continue
        by_setting.setdefault(wanted.index(key), []).append(cell)
    for cells in by_setting.values():
        cells.sort(key=lambda c: (int(c.seed) if c.seed.isdigit() else math.inf, c.seed))
    missing = [(i, str(seed)) for i in range(len(settings)) for seed in part.seeds
               if str(seed) not in {c.seed for c in by_setting.get(i, []) if c.status != "failed"}]
    return PartCells(settings, by_setting, missing, stray)
