"""A sweep's cells summarised over their seeds: mean ± standard deviation of each result per
setting of the other axes, so a difference between settings can be read against the spread
that the seed alone makes."""

from __future__ import annotations

import shlex
import statistics
from pathlib import Path
from typing import Any

SEED_AXIS = "seed"
# After the test scores the task recorded (test_bleu, test_accuracy, test_loss, ...: whatever
# its summary holds, so no task's score is named here), these.
MEASURES = (("metric_value", "validation metric", 4), ("final_train_loss", "final train loss", 4),
            ("steps", "steps", 0))


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def mean_sd(values: list[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (None for a single value)."""
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else None)


def _by_setting(rows: list[dict[str, Any]], keys: list[str]
                ) -> tuple[list[str], dict[tuple[str, ...], list[dict[str, Any]]]]:
    """The axes other than ``seed`` and the rows grouped by their setting of them, in the
    order the settings first appear."""
    others = [k for k in keys if k != SEED_AXIS]
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(str(row.get(k, "")) for k in others), []).append(row)
    return others, groups


def over_seeds(rows: list[dict[str, Any]], keys: list[str]) -> list[str]:
    """Markdown lines: one row per setting of the axes other than ``seed``, with the seeds
    finished and mean ± sd of each measure over them; no lines without a seed axis."""
    if SEED_AXIS not in keys:
        return []
    others, groups = _by_setting(rows, keys)
    tests = sorted({k for r in rows for k in r if k.startswith("test_")})
    measures = [*((field, field.replace("_", " "), _digits(rows, field)) for field in tests),
                *MEASURES]
    header = [*others, "seeds", "diverged", "failed", *(name for _, name, _ in measures)]
    lines = ["", "Over seeds (mean ± standard deviation of the finished, undiverged cells):", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for setting, members in groups.items():
        ok = [r for r in members if r.get("status") == "ok"]
        cells = [*setting, ", ".join(str(r.get(SEED_AXIS, "")) for r in ok),
                 *(str(sum(r.get("status") == status for r in members))
                   for status in ("diverged", "failed"))]
        for field, _, digits in measures:
            values = [v for v in (_number(r.get(field)) for r in ok) if v is not None]
            if not values:
                cells.append("")
                continue
            mean, sd = mean_sd(values)
            cells.append(f"{mean:.{digits}f}" + ("" if sd is None else f" ± {sd:.{digits}f}"))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _digits(rows: list[dict[str, Any]], field: str) -> int:
    """Two decimals for scores in the tens (BLEU, chrF), four for losses and fractions."""
    values = [abs(v) for r in rows if (v := _number(r.get(field))) is not None]
    return 2 if values and max(values) >= 10 else 4


def compare_commands(rows: list[dict[str, Any]], keys: list[str], out: Path) -> list[str]:
    """Markdown lines: the ``normzoo compare`` command that judges each setting against the
    first one over their finished seeds (the means above are not a test); no lines without a
    seed axis or with a single setting."""
    if SEED_AXIS not in keys:
        return []
    groups = {setting: [r["cell"] for r in members if r.get("status") == "ok"]
              for setting, members in _by_setting(rows, keys)[1].items()}
    if len(groups) < 2:
        return []
    (first, baseline), *rest = groups.items()

    def side(flag: str, cells: list[str]) -> str:
        return " ".join(f"{flag} {shlex.quote(str(out / cell))}" for cell in cells)

    lines = ["", "Whether a setting differs from the first beyond its seeds' spread "
             "(one command each; three seeds a side to show it):", "", "```bash"]
    for setting, cells in rest:
        if baseline and cells:
            lines.append(f"# {', '.join(setting)} against {', '.join(first)}")
            lines.append(f"normzoo compare {side('-b', baseline)} {side('-s', cells)}")
    return [*lines, "```"] if len(lines) > 4 else []
