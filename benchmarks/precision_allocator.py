"""Each precision with glibc's ``malloc`` as it is against freed memory kept for reuse
(``normzoo.run.allocator``), through ``normzoo train`` on the depth study's model
(``python benchmarks/precision.py --allocator`` writes ``precision-allocator-cpu.md``).

The runs are ``precision.py``'s: a process each, the same seed and batches, ``--pairs`` rounds
of the four arms, each arm taking its turn at going first; target tokens/s from Lightning's
``ThroughputMonitor`` between step 10 and the last, and each process's peak resident memory
(kept freed memory must not raise it). The allocator changes no arithmetic, so each
precision's validation loss must be identical under both.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from common import machine_lines, table

# Each arm: its precision, the overrides that make it and its environment.
ARMS: dict[str, tuple[str, tuple[str, ...], dict[str, str]]] = {
    "fp32 system": ("32-true", (), {"NORMZOO_CPU_MALLOC": "system"}),
    "fp32 reuse": ("32-true", (), {}),
    "bf16 system": ("bf16-mixed", (), {"NORMZOO_CPU_MALLOC": "system"}),
    "bf16 reuse": ("bf16-mixed", (), {}),
}
PRECISIONS = ("fp32", "bf16")


def summarise_allocator(runs: list[dict]) -> dict[str, Any]:
    by = {arm: {r["pair"]: r for r in runs if r["arm"] == arm} for arm in ARMS}
    rounds = sorted(by["fp32 reuse"])

    def ratios(top: str, bottom: str) -> list[float]:
        return [by[top][p]["tokens_per_s"] / by[bottom][p]["tokens_per_s"] for p in rounds]

    out: dict[str, Any] = {"tokens_per_s": {
        arm: statistics.median(r["tokens_per_s"] for r in by[arm].values()) for arm in ARMS}}
    for p in PRECISIONS:
        gain = ratios(f"{p} reuse", f"{p} system")
        out[f"{p}_reuse_over_system"] = {"median": statistics.median(gain), "min": min(gain),
                                        "max": max(gain), "all": gain}
        out[f"{p}_val_loss_equal"] = all(
            by[f"{p} reuse"][r]["val_loss"] == by[f"{p} system"][r]["val_loss"] for r in rounds)
        out[f"{p}_peak_rss_mb"] = {
            mode: max(r["peak_rss_mb"] for r in by[f"{p} {mode}"].values())
            for mode in ("system", "reuse")}
    for mode in ("system", "reuse"):
        out[f"bf16_over_fp32_{mode}"] = statistics.median(ratios(f"bf16 {mode}", f"fp32 {mode}"))
    return out


def allocator_report(args: argparse.Namespace, info: dict, runs: list[dict],
                     summary: dict) -> list[str]:
    lines = [f"# Freed memory kept for reuse against glibc's malloc as it is, through "
             f"`normzoo train` ({args.steps} steps)", "", *machine_lines(info), "",
             f"`python benchmarks/precision.py --allocator --steps {args.steps} --pairs "
             f"{args.pairs} --threads {args.threads}`: `recipes/studies/multi30k_depth.yaml` "
             f"on Multi30k, {args.threads} torch thread(s), the same seed and batches in every "
             "run; `system` is `NORMZOO_CPU_MALLOC=system`; target tokens/s over steps 10 to "
             "the last (training time only); peak memory is the process's maximum resident "
             "set.", "", "## Training", ""]
    lines += table(["round", "arm", "target tokens/s", f"val loss at step {args.steps}",
                    "peak memory (MB)", "process wall (s)", "load average at start"],
                   [[str(r["pair"]), r["arm"], f"{r['tokens_per_s']:,.0f}",
                     f"{r['val_loss']:.4f}", f"{r['peak_rss_mb']:,}", f"{r['wall_s']:.0f}",
                     f"{r.get('load', float('nan')):.1f}"] for r in runs])
    lines.append("")
    for p in PRECISIONS:
        gain, rss = summary[f"{p}_reuse_over_system"], summary[f"{p}_peak_rss_mb"]
        lines.append(
            f"- **{p}: reuse / system {gain['median']:.2f}x** (median of {len(gain['all'])} "
            f"rounds; min {gain['min']:.2f}, max {gain['max']:.2f}); peak memory "
            f"{rss['reuse']:,} against {rss['system']:,} MB; validation loss "
            + ("identical in every round." if summary[f"{p}_val_loss_equal"]
               else "**not identical** in every round."))
    lines.append(f"- bf16-mixed / fp32: {summary['bf16_over_fp32_system']:.2f}x with malloc as "
                 f"it is, {summary['bf16_over_fp32_reuse']:.2f}x with freed memory kept "
                 "(medians over rounds).")
    return lines
