"""This tree's ``normzoo train`` against an earlier commit's, in fp32 and in bf16-mixed, on the
depth study's model (``python benchmarks/precision.py --before DIR`` writes
``precision-before-cpu.md``): does a change to the training loop slow either precision?

``DIR`` is a clone of the repository at the earlier commit; its runs import normzoo from it
(``PYTHONPATH``), everything else (the recipe, the data, the interpreter and its packages) is
this tree's. The runs are ``precision.py``'s: a process each, the same seed and batches,
``--pairs`` pairs of four runs taking turns at going first, target tokens/s from Lightning's
``ThroughputMonitor`` between step 10 and the last. A precision is *slower* where every pair's
now / before ratio is below 1 - :data:`NOISE`; within noise where the pairs' ratios reach
1 - :data:`NOISE` or more.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
from pathlib import Path
from typing import Any

from common import machine_lines, table

PRECISIONS = ("32-true", "bf16-mixed")
NOISE = 0.03  # pair-to-pair spread of the same arm on this 2-core machine (precision-*.md)


def before_arms(before: Path) -> dict[str, tuple[str, tuple[str, ...], dict[str, str]]]:
    """Each arm: its precision, overrides and environment; ``before`` runs DIR's normzoo."""
    arms = {}
    for precision in PRECISIONS:
        arms[f"{precision} before"] = (precision, (), {"PYTHONPATH": str(before.resolve())})
        arms[f"{precision} now"] = (precision, (), {})
    return arms


def commit(folder: Path) -> str:
    """``folder``'s commit, short, or ``?`` where it is no checkout."""
    done = subprocess.run(["git", "-C", str(folder), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False)
    return done.stdout.strip() or "?"


def summarise_before(runs: list[dict]) -> dict[str, Any]:
    summary = {}
    for precision in PRECISIONS:
        by = {side: {r["pair"]: r for r in runs if r["arm"] == f"{precision} {side}"}
              for side in ("before", "now")}
        ratios = [by["now"][p]["tokens_per_s"] / by["before"][p]["tokens_per_s"]
                  for p in sorted(by["now"])]
        summary[precision] = {
            "tokens_per_s": {side: statistics.median(r["tokens_per_s"] for r in rows.values())
                             for side, rows in by.items()},
            "ratios": ratios, "ratio_median": statistics.median(ratios),
            "ratio_min": min(ratios), "ratio_max": max(ratios),
            "slower": max(ratios) < 1 - NOISE,
        }
    return summary


def bf16_line() -> str:
    """Whether this CPU trains bf16-mixed in bf16: where it has no bf16 instructions, normzoo
    trains it in float32 (``normzoo.run.machine``), so both precisions' arms train alike."""
    from normzoo.run.machine import cpu_supports_bf16

    if cpu_supports_bf16():
        return "- This CPU has bf16 in hardware: the bf16-mixed arms train in bf16."
    return ("- This CPU has no bf16 instructions: normzoo trains bf16-mixed in float32 here "
            "(`normzoo.run.machine`; `NORMZOO_CPU_BF16=1` forces bf16), so the bf16-mixed "
            "arms are float32 runs through the bf16-mixed setting (the same validation loss).")


def before_report(args: argparse.Namespace, info: dict, runs: list[dict],
                  summary: dict) -> list[str]:
    lines = [f"# normzoo train now against {commit(args.before)}, fp32 and bf16-mixed "
             f"({args.steps} steps)", "", *machine_lines(info), "",
             f"`python benchmarks/precision.py --before DIR --steps {args.steps} --pairs "
             f"{args.pairs} --threads {args.threads}` (DIR a clone at {commit(args.before)}; "
             f"now: {commit(Path(__file__).resolve().parent.parent)} and the working tree): "
             f"`recipes/studies/multi30k_depth.yaml` on Multi30k, {args.threads} torch "
             "thread(s), the same seed and batches in every run; target tokens/s over steps "
             "10 to the last (training time only).", "", "## Training", ""]
    lines += table(["pair", "arm", "target tokens/s", f"val loss at step {args.steps}",
                    "process wall (s)", "load average at start"],
                   [[str(r["pair"]), r["arm"], f"{r['tokens_per_s']:,.0f}",
                     f"{r['val_loss']:.4f}", f"{r['wall_s']:.0f}",
                     f"{r.get('load', float('nan')):.1f}"] for r in runs])
    lines.append("")
    for precision, s in summary.items():
        verdict = ("**slower** in every pair" if s["slower"]
                   else "**not slower** (within noise or faster)")
        lines.append(f"- {precision}: now / before **{s['ratio_median']:.2f}x** (median of "
                     f"{len(s['ratios'])} pairs; min {s['ratio_min']:.2f}, max "
                     f"{s['ratio_max']:.2f}); median {s['tokens_per_s']['now']:,.0f} against "
                     f"{s['tokens_per_s']['before']:,.0f} target tokens/s: {verdict} (noise "
                     f"band {NOISE:.0%}).")
    lines.append(bf16_line())
    return lines
