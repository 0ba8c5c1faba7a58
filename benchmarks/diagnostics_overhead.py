"""What the diagnostics cost: wall time per training step with them off, every 50 steps, and
every step, on the quick-start recipe (built-in corpus, no network).

    python benchmarks/diagnostics_overhead.py [--steps 300]

Writes benchmarks/results/diagnostics_overhead.md. Each setting trains the same steps from the
same seed; throughput is the harmonic mean of the per-step rates (train/device/items_per_sec,
Lightning's ThroughputMonitor, logged every step), i.e. tokens over time with the occasional
measured step's cost spread over all of them; start-up and validation are left out.
"""

from __future__ import annotations

import argparse
import csv
import platform
import statistics
import tempfile
from pathlib import Path

from normzoo import recipe
from normzoo.run import training as train

SETTINGS = {"off (guard only)": ["diagnostics.every_steps=0"],
            "every 50 steps": ["diagnostics.every_steps=50"],
            "every step": ["diagnostics.every_steps=1"],
            "guard off too": ["diagnostics.every_steps=0", "diagnostics.guard=false"]}


def tokens_per_second(run_dir: Path) -> float:
    with open(run_dir / "logs" / "csv" / "metrics.csv", newline="") as f:
        rates = [float(r["train/device/items_per_sec"]) for r in csv.DictReader(f)
                 if r.get("train/device/items_per_sec")]
    return statistics.harmonic_mean(rates[5:])  # skip warm-up steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, overrides in SETTINGS.items():
            run_dir = Path(tmp) / label.replace(" ", "_")
            resolved = recipe.load("recipes/quickstart.yaml", [
                *overrides, f"run.dir={run_dir}", f"trainer.max_steps={args.steps}",
                f"trainer.val_every_steps={args.steps}", "trainer.log_every_steps=1",
                "trainer.progress_bar=false", "eval.valid_bleu=false", "data.valid_limit=50"])
            train.run(resolved, "quickstart.yaml")
            rows.append((label, tokens_per_second(run_dir)))
    base = rows[0][1]
    lines = [f"# Diagnostics overhead ({args.steps} steps of recipes/quickstart.yaml)", "",
             f"Machine: {platform.processor() or platform.machine()}, "
             f"{__import__('os').cpu_count()} CPU cores, torch "
             f"{__import__('torch').__version__}.", "",
             "| diagnostics | target tokens/s | relative to guard only |",
             "|---|---|---|"]
    lines += [f"| {label} | {rate:,.0f} | {rate / base:.3f} |" for label, rate in rows]
    out = Path("benchmarks/results/diagnostics_overhead.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
