"""Wall time of a two-cell sweep, one cell at a time (``--jobs 1``) or both at once (``--jobs 2``).

    python benchmarks/sweep_jobs.py [--steps 150] [--repeats 2]

The sweep is the quick start's recipe with a seed axis (``--set seed=1,2``), each cell trained
for ``--steps`` updates from scratch in a fresh folder. ``--jobs 1`` runs the cells one after the
other with all the machine's threads each; ``--jobs 2`` runs them side by side with half the
threads each. On a CPU with few cores a small model does not scale to every core, so two cells
side by side finish sooner than one after the other. Results go to
``benchmarks/results/sweep-jobs-cpu.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
RECIPE = ROOT / "recipes" / "quickstart.yaml"


def run_sweep(jobs: int, steps: int, out: Path) -> float:
    """Seconds from launch to exit of one two-cell sweep."""
    command = [sys.executable, "-m", "normzoo.cli", "sweep", str(RECIPE), "--set", "seed=1,2",
               "--steps", str(steps), "--jobs", str(jobs), "--out", str(out),
               "trainer.val_every_steps=1000000", "eval.valid_bleu=false"]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"sweep --jobs {jobs} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    results = (out / "results.md").read_text(encoding="utf-8")
    if "±" not in results:
        raise SystemExit(f"{out / 'results.md'} has no mean ± sd over the seeds:\n{results}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=2, help="pairs of (jobs 1, jobs 2) runs")
    args = parser.parse_args(argv)
    times: dict[int, list[float]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for jobs in (1, 2):
                out = Path(tmp) / f"jobs{jobs}-{repeat}"
                times[jobs].append(run_sweep(jobs, args.steps, out))
                print(f"--jobs {jobs}, run {repeat + 1}: {times[jobs][-1]:.1f} s", flush=True)
            results_md = (Path(tmp) / f"jobs2-{repeat}" / "results.md").read_text("utf-8")
    median = {jobs: statistics.median(values) for jobs, values in times.items()}
    record = {"steps": args.steps, "repeats": args.repeats, "cores": os.cpu_count(),
              "machine": platform.processor() or platform.machine(), "seconds": times,
              "median_s": median, "speedup": median[1] / median[2]}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "sweep-jobs-cpu.json").write_text(json.dumps(record, indent=2) + "\n")
    lines = [
        "# Two-cell sweep: --jobs 1 against --jobs 2", "",
        f"`python benchmarks/sweep_jobs.py --steps {args.steps} --repeats {args.repeats}`: "
        f"`recipes/quickstart.yaml --set seed=1,2 --steps {args.steps}`, each run in a fresh "
        f"folder, on {os.cpu_count()} cores ({record['machine']}).", "",
        "| jobs | wall time per run (s) | median (s) |", "|---|---|---|",
        *[f"| {jobs} | {', '.join(f'{t:.1f}' for t in times[jobs])} | {median[jobs]:.1f} |"
          for jobs in (1, 2)], "",
        f"`--jobs 2` takes {median[2] / median[1]:.2f}x the wall time of `--jobs 1` "
        f"({record['speedup']:.2f}x faster).", "",
        "The last `--jobs 2` sweep's `results.md`:", "", results_md,
    ]
    (RESULTS / "sweep-jobs-cpu.md").write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
