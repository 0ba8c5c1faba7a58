"""What a report has judged of one part, as its page and figures read it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from normzoo.study.cells import Cell, PartCells
from normzoo.study.spec import Part, Score, setting_text


@dataclass(frozen=True)
class ScoreView:
    """A score as a part's task reads it: what, its name in words, ``min`` or ``max``, unit."""

    score: Score
    name: str
    better: str
    unit: str

    @property
    def resampled(self) -> bool:
        """Only the task's score has per-example outputs to resample."""
        return self.score.source == "task"


@dataclass
class PartResult:
    """One part as the page shows it."""

    name: str
    part: Part
    cells: PartCells
    task: Any
    scores: list[ScoreView]
    rows: list[dict[str, Any]] = field(default_factory=list)


def missing_cells(part: PartResult) -> list[str]:
    """The (setting, seed) pairs without a finished cell, in words."""
    return [f"{setting_text(part.cells.settings[i])}, seed {seed}"
            for i, seed in part.cells.missing]


def stopped_reasons(cells: list[Cell]) -> Counter[str]:
    """Why each finished cell's training stopped, counted (a step cap, early stopping, ...)."""
    return Counter(str(c.summary.get("stopped") or c.record.get("stopped") or "not recorded")
                   .split(":")[0] for c in cells)
