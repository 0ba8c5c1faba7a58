"""``trainer.compile`` against eager, both in bf16-mixed, through ``normzoo train`` on the depth
study's model (``python benchmarks/precision.py --compile`` writes ``precision-compile-cpu.md``).

The runs are ``precision.py``'s: a process each, the same seed and batches, ``--pairs`` pairs
taking turns at going first, target tokens/s from Lightning's ``ThroughputMonitor`` between
step 10 and the last. Compiling happens at the first step (and at validation), so the tokens/s
leave it out, and the process wall time, which the table also shows, keeps it in: the two
say how fast a compiled run trains and how long it must be before compiling pays. Each
compiled run's ``compile/compiles`` (TorchDynamo's compiles in the run) is read from its log.
"""

from __future__ import annotations

import argparse
import os
import statistics
from typing import Any

from common import machine_lines, table

TARGET = 1.3  # issue 38: trainer.compile at least 1.3x eager in bf16 on the CPU

# Each arm: its precision, the overrides that make it and its environment.
ARMS: dict[str, tuple[str, tuple[str, ...], dict[str, str]]] = {
    "eager": ("bf16-mixed", (), {}),
    "compiled": ("bf16-mixed", ("trainer.compile=true",), {}),
}


def load_average() -> float:
    """The 1-minute load average when a run starts: what else the machine was doing."""
    return os.getloadavg()[0]


def summarise_compile(runs: list[dict]) -> dict[str, Any]:
    by = {arm: {r["pair"]: r for r in runs if r["arm"] == arm} for arm in ARMS}
    ratios = [by["compiled"][p]["tokens_per_s"] / by["eager"][p]["tokens_per_s"]
              for p in sorted(by["eager"])]
    walls = [by["compiled"][p]["wall_s"] / by["eager"][p]["wall_s"] for p in sorted(by["eager"])]
    val = {arm: statistics.mean(r["val_loss"] for r in by[arm].values()) for arm in ARMS}
    return {
        "tokens_per_s": {arm: statistics.median(r["tokens_per_s"] for r in by[arm].values())
                         for arm in ARMS},
        "ratio_median": statistics.median(ratios), "ratio_min": min(ratios),
        "ratio_max": max(ratios), "ratios": ratios, "wall_ratio_median": statistics.median(walls),
        "compiles_max": max(r["compiles"] or 0 for r in by["compiled"].values()),
        "val_loss": val,
        "val_loss_diff_pct": 100 * (val["compiled"] - val["eager"]) / val["eager"],
    }


def compile_report(args: argparse.Namespace, info: dict, runs: list[dict],
                   summary: dict) -> list[str]:
    met = "met" if summary["ratio_min"] >= TARGET else (
        "met at the median, not in every pair" if summary["ratio_median"] >= TARGET
        else "not met")
    tps = summary["tokens_per_s"]
    lines = [f"# trainer.compile against eager, bf16-mixed, through `normzoo train` "
             f"({args.steps} steps)", "", *machine_lines(info), "",
             f"`python benchmarks/precision.py --compile --steps {args.steps} --pairs "
             f"{args.pairs} --threads {args.threads}`: `recipes/studies/multi30k_depth.yaml` "
             f"on Multi30k, {args.threads} torch thread(s), the same seed and batches in both; "
             "target tokens/s over steps 10 to the last (training time only: the first "
             "compile is left out, the process wall time keeps it).", "",
             "## Training", ""]
    lines += table(["pair", "arm", "target tokens/s", f"val loss at step {args.steps}",
                    "compiles", "process wall (s)", "load average at start"],
                   [[str(r["pair"]), r["arm"], f"{r['tokens_per_s']:,.0f}",
                     f"{r['val_loss']:.4f}", "-" if r["compiles"] is None else str(r["compiles"]),
                     f"{r['wall_s']:.0f}", f"{r.get('load', float('nan')):.1f}"] for r in runs])
    lines += ["", f"- **compiled / eager: {summary['ratio_median']:.2f}x** (median of "
              f"{len(summary['ratios'])} pairs; min {summary['ratio_min']:.2f}, max "
              f"{summary['ratio_max']:.2f}); median {tps['compiled']:,.0f} against "
              f"{tps['eager']:,.0f} target tokens/s. Target {TARGET}x: **{met}**.",
              f"- Process wall time, compiling included: compiled / eager "
              f"{summary['wall_ratio_median']:.2f}x (median).",
              f"- TorchDynamo compiles in a compiled run: at most {summary['compiles_max']} "
              "(training's graph, validation's, and any batch of one sentence).",
              f"- Validation loss at step {args.steps}: compiled "
              f"{summary['val_loss']['compiled']:.4f}, eager {summary['val_loss']['eager']:.4f} "
              f"({summary['val_loss_diff_pct']:+.2f}%; both bf16; inductor draws the compiled "
              "run's dropout masks with its own generator)."]
    return lines
