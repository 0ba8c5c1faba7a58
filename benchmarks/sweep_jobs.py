"""Wall time of a two-cell sweep, one cell at a time (``--jobs 1``) or both at once (``--jobs 2``),
for models from micro to the quick start's.

    python benchmarks/sweep_jobs.py [--repeats 3] [--models micro,tiny,quickstart]

Each sweep is ``recipes/quickstart.yaml`` with a seed axis (``--set seed=1,2``), every cell
trained from scratch in a fresh folder: ``micro`` shrinks the model to one layer a side at
d_model 32 with batches of 256 tokens (3,000 updates), ``tiny`` to one layer a side at d_model
64 (400 updates), ``quickstart`` keeps it (150 updates). ``--jobs 1`` runs the cells one
after the other in the sweep's process with all the machine's threads each; ``--jobs 2`` runs
them side by side as submitit jobs (processes of their own) with half the threads each.

Side by side wins by as much as a cell fails to use every core: the script also reports each
cell's own training time on all threads (from the ``--jobs 1`` cells' ``summary.json``) and on
its share (the ``--jobs 2`` cells'), whose ratio is the cell's thread scaling; with two cores,
``--jobs 2`` can be at most 2 / scaling faster, less the start of the job processes. Results go to
``benchmarks/results/sweep-jobs-cpu.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import machine, write_report

from normzoo.run.hardware import usable_cores

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
RECIPE = ROOT / "recipes" / "quickstart.yaml"
MODELS: dict[str, tuple[int, list[str]]] = {  # name: (updates, overrides)
    "micro": (3000, ["model.d_model=32", "model.ffn_dim=64", "model.heads=2",
                     "model.encoder_layers=1", "model.decoder_layers=1", "data.max_tokens=256"]),
    "tiny": (400, ["model.d_model=64", "model.ffn_dim=128", "model.heads=2",
                   "model.encoder_layers=1", "model.decoder_layers=1"]),
    "quickstart": (150, []),
}
COMMON = ["trainer.val_every_steps=1000000", "eval.valid_bleu=false"]


def run_sweep(jobs: int, steps: int, overrides: list[str],
              out: Path) -> tuple[float, list[float], list[int]]:
    """Seconds from launch to exit of one two-cell sweep, and each cell's training seconds and
    torch threads (as its ``summary.json`` records them)."""
    command = [sys.executable, "-m", "normzoo", "sweep", str(RECIPE), "--set", "seed=1,2",
               "--steps", str(steps), "--jobs", str(jobs), "--out", str(out),
               *COMMON, *overrides]
    # torch's own default (every core) in --jobs 1; the sweep divides them among its jobs
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"sweep --jobs {jobs} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    results = (out / "results.md").read_text(encoding="utf-8")
    if "±" not in results:
        raise SystemExit(f"{out / 'results.md'} has no mean ± sd over the seeds:\n{results}")
    cells = [json.loads((out / f"seed-{seed}" / "summary.json").read_text(encoding="utf-8"))
             for seed in (1, 2)]
    return (elapsed, [cell["train_wall_s"] for cell in cells],
            [cell["machine"]["torch_threads"] for cell in cells])


def measure(model: str, repeats: int, tmp: Path) -> dict:
    """``repeats`` pairs of sweeps (``--jobs 1`` then ``--jobs 2``) of one model."""
    steps, overrides = MODELS[model]
    wall: dict[int, list[float]] = {1: [], 2: []}
    cell: dict[int, list[float]] = {1: [], 2: []}
    threads: dict[int, set[int]] = {1: set(), 2: set()}
    for repeat in range(repeats):
        for jobs in (1, 2):
            out = tmp / f"{model}-jobs{jobs}-{repeat}"
            seconds, cells, cell_threads = run_sweep(jobs, steps, overrides, out)
            wall[jobs].append(seconds)
            cell[jobs] += cells
            threads[jobs] |= set(cell_threads)
            print(f"{model}, --jobs {jobs}, run {repeat + 1}: {seconds:.1f} s "
                  f"(cells {', '.join(f'{c:.1f}' for c in cells)} s)", flush=True)
    median = {jobs: statistics.median(values) for jobs, values in wall.items()}
    cell_median = {jobs: statistics.median(values) for jobs, values in cell.items()}
    scaling = cell_median[2] / cell_median[1]
    return {"steps": steps, "overrides": overrides, "wall_s": wall, "median_s": median,
            "cell_train_s": cell, "cell_median_s": cell_median, "thread_scaling": scaling,
            "threads": {jobs: sorted(values) for jobs, values in threads.items()},
            "speedup": median[1] / median[2], "bound": 2 / scaling,
            "results_md": (tmp / f"{model}-jobs2-{repeats - 1}" / "results.md").read_text("utf-8")}


def _threads(values: list[int]) -> str:
    """'1 thread', '2 threads' or '1-2 threads' (cells of one sweep may differ)."""
    text = "-".join(str(v) for v in sorted({min(values), max(values)}))
    return f"{text} thread{'s' * (max(values) > 1)}"


def render(record: dict) -> list[str]:
    """The report: a table of wall times per model and jobs, then what limits the speed-up."""
    lines = [
        "# Two-cell sweep: --jobs 1 against --jobs 2", "",
        f"`python benchmarks/sweep_jobs.py --repeats {record['repeats']}`: "
        f"`recipes/quickstart.yaml --set seed=1,2`, each sweep in a fresh folder, on "
        f"{record['cores']} usable cores ({record['machine']['cpu']}), nothing else running. "
        "`--jobs 1`: the cells one after the other, on torch's default threads; `--jobs 2`: "
        "side by side, the usable cores shared out between them (each cell's threads as its "
        "`summary.json` records them).", "",
        "| model | updates | jobs | sweep wall time per run (s) | median (s) | a cell's training, "
        "median (s) |", "|---|---|---|---|---|---|",
    ]
    for name, m in record["models"].items():
        for jobs in (1, 2):
            lines.append(
                f"| {name} | {m['steps']} | {jobs} | "
                f"{', '.join(f'{t:.1f}' for t in m['wall_s'][jobs])} | {m['median_s'][jobs]:.1f} "
                f"| {m['cell_median_s'][jobs]:.1f} ({_threads(m['threads'][jobs])}) |")
    lines.append("")
    for name, m in record["models"].items():
        verdict = (f"{m['speedup']:.2f}x faster" if m["speedup"] >= 1
                   else f"{1 / m['speedup']:.2f}x slower")
        outside = {1: m["median_s"][1] - 2 * m["cell_median_s"][1],
                   2: m["median_s"][2] - m["cell_median_s"][2]}
        lines.append(
            f"- **{name}** (`{' '.join(m['overrides']) or 'as shipped'}`): `--jobs 2` is "
            f"{verdict} than `--jobs 1` ({m['median_s'][2]:.1f} s against "
            f"{m['median_s'][1]:.1f} s). A cell's training takes {m['cell_median_s'][1]:.1f} s on "
            f"{_threads(m['threads'][1])} and {m['cell_median_s'][2]:.1f} s on "
            f"{_threads(m['threads'][2])} (a scaling of {m['thread_scaling']:.2f}x), so side by "
            f"side can gain at most {m['bound']:.2f}x, "
            f"less the start of the job processes: outside training, `--jobs 2` spends "
            f"{outside[2]:.1f} s (Python, torch and Lightning imported again in each job's "
            f"process, submitit's polling) where `--jobs 1` spends {outside[1]:.1f} s.")
    name = next(iter(record["models"]))
    lines += ["", f"The last `--jobs 2` sweep's `results.md` ({name}):", "",
              record["models"][name]["results_md"]]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="pairs of (jobs 1, jobs 2) runs")
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma-separated, of {', '.join(MODELS)}")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, not {args.repeats}")
    models = list(dict.fromkeys(args.models.split(",")))  # once each: folders are per model
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        parser.error(f"unknown model {unknown[0]!r}; known: {', '.join(MODELS)}")
    record: dict = {"repeats": args.repeats, "cores": usable_cores(),
                    "machine": machine(usable_cores()), "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            record["models"][model] = measure(model, args.repeats, Path(tmp))
    lines = render(record)
    for m in record["models"].values():
        del m["results_md"]
    write_report(RESULTS / "sweep-jobs-cpu.md", lines, record)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
