"""The Llama-style study's own sections (``studies/llama.yaml``): each setting's diagnostics
beside its test loss, and what each scheme costs per training step (the benchmark's table)."""

from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path
from typing import Any

from normzoo.study.cells import Cell, number
from normzoo.study.spec import setting_text

COSTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "scheme_cost-cpu.json"


def _stat(values: list[float | None], digits: int) -> str:
    kept = [v for v in values if v is not None]
    if len(kept) < 2:
        return f"{kept[0]:.{digits}f}" if kept else "–"
    return f"{statistics.fmean(kept):.{digits}f} ± {statistics.stdev(kept):.{digits}f}"


def _layers(cell: Cell, column: str, when: str) -> list[float | None]:
    rows = sorted((r for r in cell.diagnose() if r.get("when") == when),
                  key=lambda r: int(r.get("layer") or 0))
    return [number(r.get(column)) for r in rows]


def _ratio(cell: Cell, column: str, when: str) -> float | None:
    """``column`` after the last layer over after the first."""
    values = _layers(cell, column, when)
    if len(values) < 2 or not values[0] or values[-1] is None:
        return None
    return values[-1] / values[0]


def _mean(cell: Cell, column: str, when: str) -> float | None:
    values = [v for v in _layers(cell, column, when) if v is not None]
    return statistics.fmean(values) if values else None


def _minutes(cell: Cell) -> float | None:
    """Training time (the trainer's clock, validation left out), summed over the processes of
    a cell that was stopped and resumed (each starts its clock at 0)."""
    times = [t for _, t in cell.curve("train_time")]
    if not times:
        return None
    resumed = sum(before for before, after in itertools.pairwise(times) if after < before)
    return (resumed + times[-1]) / 60


def _last_train_loss(cell: Cell) -> float | None:
    losses = cell.curve("train_loss")
    return losses[-1][1] if losses else None


def diagnostics(study: Any, parts: list[Any], out: Path) -> str:
    """Per setting (over its seeds): test perplexity, last training loss, the gradient norm's
    growth through the stack at initialisation, the stream norm's at the end, how far a layer
    turns the state at the end, and the training minutes."""
    lines = ["## Diagnostics beside the scores", "",
             "Mean ± sd over each setting's seeds, from the cells' `summary.json`, `loss.csv` "
             "and `diagnose.csv` (the decoder's layers; `normzoo diagnose`'s measures): the "
             "norm after the last layer over that after the first, at initialisation for the "
             "gradient and at the end for the stream; the cosine between a layer's input and "
             "output, averaged over the layers; training minutes by the trainer's clock.", "",
             "| part | setting | test perplexity | last train loss | grad norm last/first, "
             "init | stream norm last/first, end | cos(in, out) mean, end | training min |",
             "|---|---|---|---|---|---|---|---|"]
    for part in parts:
        for index, setting in enumerate(part.cells.settings):
            cells = part.cells.finished(index)
            ppl = [number((c.summary.get("test") or {}).get("ppl")) for c in cells]
            lines.append(
                f"| {part.name} | {setting_text(setting)} | {_stat(ppl, 2)} | "
                f"{_stat([_last_train_loss(c) for c in cells], 3)} | "
                f"{_stat([_ratio(c, 'grad_norm', 'init') for c in cells], 2)} | "
                f"{_stat([_ratio(c, 'stream_norm', 'final') for c in cells], 2)} | "
                f"{_stat([_mean(c, 'layer_cosine', 'final') for c in cells], 3)} | "
                f"{_stat([_minutes(c) for c in cells], 1)} |")
    hours = {p.name: sum(_minutes(c) or 0.0 for i in range(len(p.cells.settings))
                         for c in p.cells.finished(i)) / 60 for p in parts}
    lines += ["", "Training time in all, by the same clock: " + ", ".join(
        f"{name} {h:.1f} h" for name, h in hours.items()) + f"; {sum(hours.values()):.1f} h."]
    return "\n".join(lines)


def costs(study: Any, parts: list[Any], out: Path) -> str:
    """Each scheme's time and memory per training step against Pre-LN's, from
    ``benchmarks/scheme_cost.py``'s last run (``benchmarks/results/scheme_cost-cpu.json``)."""
    lines = ["## What each scheme costs per step", ""]
    if not COSTS.is_file():
        return "\n".join([*lines, "Not measured yet (`python benchmarks/scheme_cost.py`)."])
    found = json.loads(COSTS.read_text(encoding="utf-8"))
    schemes, machine = found["schemes"], found["machine"]
    base = statistics.median(schemes["Pre-LN"]["ms_per_step"])
    lines += [f"`python benchmarks/scheme_cost.py --rounds 3 --steps 8 --threads 1` "
              f"([results](../../benchmarks/results/scheme_cost-cpu.md)), on the "
              f"{machine['cpu']} with nothing else running, "
              f"{machine['date'][:16].replace('T', ' ')} UTC: one training step (forward, "
              "backward, AdamW) of the 6-layer model on 16 × 128 tokens, "
              f"{found['precision']}, one thread; median of 8 steps a round, 3 rounds taking "
              "turns. Ratios under about 1.25 move by ±0.2 between runs of the benchmark.", "",
              "| scheme | parameters | ms per step (range over rounds) | / Pre-LN | peak RSS, "
              "MiB |", "|---|---|---|---|---|"]
    for label, one in schemes.items():
        ms = one["ms_per_step"]
        lines.append(f"| {label} | {one['params']:,} | {statistics.median(ms):.0f} "
                     f"({min(ms):.0f}–{max(ms):.0f}) | {statistics.median(ms) / base:.2f} | "
                     f"{one['maxrss_mib']:,.0f} |")
    return "\n".join(lines)
