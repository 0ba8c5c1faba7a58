"""The precision study's own section (``sections: [precision/sections.py:speed]``): what bf16-mixed
costs and saves. Per setting, the training time, the greedy BLEU, the final training loss and the
lowest validation loss logged (none of them compared); the training-time ratio per depth; and
the throughput and decoding measured by ``benchmarks/precision.py``
(``benchmarks/results/precision*-cpu.json``)."""

from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path
from typing import Any

from normzoo.study.cells import number
from normzoo.study.spec import setting_text

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
DETAILS = "[details](../../benchmarks/results/precision-cpu.md)"
PRECISION = "trainer.precision"


def minutes(cell: Any) -> float | None:
    """Lightning's ThroughputMonitor clock (validation and start-up left out), summed over the
    processes of a cell that was stopped and resumed (each restarts its clock at 0)."""
    times = [t for _, t in cell.curve("train_time")]
    if not times:
        return None
    return (sum(a for a, b in itertools.pairwise(times) if b < a) + times[-1]) / 60


def _ms(values: list[float | None], digits: int) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    sd = f" ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else ""
    return f"{statistics.fmean(values):.{digits}f}{sd}"


def _part_lines(part: Any) -> list[str]:
    lines = [f"{part.part.title or part.name}:", "",
             "| setting | seeds | training (min) | greedy BLEU | final train loss | lowest "
             "val loss logged |", "|---|---|---|---|---|---|"]
    by_precision: dict[str, list[float]] = {}
    for index, setting in enumerate(part.cells.settings):
        cells = part.cells.finished(index)
        times = [minutes(c) for c in cells]
        by_precision.setdefault(setting[PRECISION], []).extend(t for t in times if t)
        greedy = [number((c.summary.get("test") or {}).get("greedy_bleu")) for c in cells]
        final = [number(c.record.get("final_train_loss")) for c in cells]
        lowest = [min((v for _, v in c.curve("val_loss")), default=None) for c in cells]
        lines.append(f"| {setting_text(setting)} | {', '.join(c.seed for c in cells) or '–'} | "
                     f"{_ms(times, 1)} | {_ms(greedy, 2)} | {_ms(final, 3)} | "
                     f"{_ms(lowest, 3)} |")
    fp32, bf16 = by_precision.get("32-true"), by_precision.get("bf16-mixed")
    if fp32 and bf16:
        slow, fast = statistics.fmean(fp32), statistics.fmean(bf16)
        lines += ["", f"Training per cell: {slow:.1f} min in fp32 and {fast:.1f} min in "
                  f"bf16-mixed on average, {slow / fast:.2f}x."]
    return [*lines, ""]


def _benchmarks() -> list[str]:
    lines = []
    speed = RESULTS / "precision-cpu.json"
    if speed.is_file():
        data = json.loads(speed.read_text(encoding="utf-8"))
        s, tps = data["summary"], data["summary"]["tokens_per_s"]
        lines.append(
            f"- Training through `normzoo train` (`python benchmarks/precision.py`, "
            f"{data['steps']} steps, one thread, {len(s['ratios'])} pairs taking turns, on "
            f"{data['machine']['cpu']}, {data['machine']['date'][:10]}): bf16-mixed "
            f"{tps['bf16-mixed']:,.0f} against fp32 {tps['32-true']:,.0f} target tokens/s, "
            f"**{s['ratio_median']:.2f}x** (pairs {s['ratio_min']:.2f}-{s['ratio_max']:.2f}); "
            f"validation loss at the last step {s['val_loss_diff_pct']:+.2f}% ({DETAILS}).")
    decode = RESULTS / "precision-decode-cpu.json"
    if decode.is_file():
        data = json.loads(decode.read_text(encoding="utf-8"))
        checkpoint = data["checkpoint"]
        checkpoint = checkpoint[checkpoint.find("runs/"):] if "runs/" in checkpoint else checkpoint
        lines.append(f"- Decoding test2016 with `normzoo evaluate --bf16` (`python "
                     f"benchmarks/precision.py --decode CKPT`, `{checkpoint}`; each command's "
                     "wall time, start-up included):")
        fp32 = {r["beam"]: r for r in data["rows"] if r["precision"] == "fp32"}
        lines += [f"  beam {r['beam']}: BLEU {r['bleu']:.2f} against fp32's "
                  f"{fp32[r['beam']]['bleu']:.2f}, {r['differing_sentences']} of 1,000 "
                  f"sentences translated differently, {r['wall_s']:.0f} s against "
                  f"{fp32[r['beam']]['wall_s']:.0f} s." for r in data["rows"]
                  if r["precision"] == "bf16"]
    return lines or ["- Not measured yet (`python benchmarks/precision.py`)."]


def speed(study: Any, parts: list[Any], out: Path) -> str:
    """The section: one table per cell folder (parts that share one are shown once)."""
    lines = ["## What bf16-mixed costs and saves", "",
             "Not compared (no verdict rests on them): per setting, the mean ± sd over its seeds "
             "of the training time (Lightning's `ThroughputMonitor` clock, validation and "
             "start-up left out, summed over the processes of a resumed cell; one thread, with "
             "the other sweep on the other core), the greedy BLEU on test2016, the training "
             "loss at the last update and the lowest validation loss the run logged.", ""]
    shown = set()
    for part in parts:
        folder = part.part.folder or part.name
        if folder not in shown:
            shown.add(folder)
            lines += _part_lines(part)
    return "\n".join([*lines, "Measured apart, on an otherwise idle machine:", "",
                      *_benchmarks()])
