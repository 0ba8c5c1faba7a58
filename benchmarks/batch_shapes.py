"""Batch shapes against padding: how many shapes an epoch has and how much of it is padding for
each ladder size (``data.buckets``), and what that costs or gains in training tokens/s.

    python benchmarks/batch_shapes.py [--data DIR] [--wmt DIR] [--train] [--compile]
                                      [--steps 60] [--skip 10] [--pairs 2] [--threads 1]

**Shapes**: Multi30k's training split (``--data``) at 2,048, 4,096 and 25,000 tokens a batch,
and the WMT14 sample (newstest2013 as a training split, ``--wmt``) at 4,096 and 25,000, each
with every batch padded to its longest (``null``) and with ladders of 8 to 16 rungs fitted to
the split. No training; a few seconds.

**Training** (``--train``): the depth study's model (``recipes/studies/multi30k_depth.yaml``)
through ``normzoo train`` in bf16-mixed, exact lengths against the 12-rung ladder, ``--pairs``
pairs of runs taking turns at going first (``precision.py``'s runs: target tokens/s from
Lightning's ``ThroughputMonitor`` after step ``--skip``). Padding is work a CPU in eager mode
pays for and gains nothing from, which is why ``data.buckets: auto`` has no ladder there.
``--compile`` pairs the two compiled: dynamic shapes on exact lengths against static shapes on
the ladder (what ``trainer.compile`` does now), their compiles counted, wall time included.

Writes ``benchmarks/results/batch-shapes-<device>.md`` and its ``.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package
import precision
from common import MULTI30K, REPO, RESULTS, device_slug, machine, machine_lines, table, write_report

WMT = MULTI30K.parent / "wmt14_ende"
RUNGS = (None, 8, 10, 12, 14, 16)
CORPORA = {  # name: recipe, overrides, token budgets
    "Multi30k": ("multi30k_prenorm.yaml", lambda d: [f"data.dir={d}"], (2048, 4096, 25000)),
    "WMT14 sample (newstest2013)": (
        "wmt_prenorm.yaml",
        lambda d: ["data.source=files", f"data.dir={d}", "data.train_split=newstest2013",
                   "data.valid_split=newstest2014", "data.test_split=newstest2014",
                   "data.tokenizer.vocab_size=8000"],
        (4096, 25000)),
}
# The arms of --train and --compile: overrides on the depth study's recipe.
ARMS = {
    "exact": ("data.buckets=null",),
    "ladder": ("data.buckets=12",),
}
COMPILED = {arm: (*extra, "trainer.compile=true") for arm, extra in ARMS.items()}


def count(corpus: str, folder: Path, budget: int, rungs: int | None) -> dict[str, Any]:
    from normzoo.recipe import load
    from normzoo.tasks.datamodule import TextDataModule

    recipe_name, overrides, _ = CORPORA[corpus]
    recipe = load(REPO / "recipes" / recipe_name,
                  [*overrides(folder), f"data.max_tokens={budget}",
                   f"data.buckets={'null' if rungs is None else rungs}"])
    data = TextDataModule(recipe)
    data.setup("fit")
    shapes = data.train_shapes()
    return {"corpus": corpus, "budget": budget, "rungs": rungs, "shapes": shapes.shapes,
            "padding": shapes.padding, "batches": shapes.batches,
            "ladder": list(data.ladder.rungs) if data.ladder else None}


def measure_shapes(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for corpus, folder in (("Multi30k", args.data), ("WMT14 sample (newstest2013)", args.wmt)):
        if not folder.is_dir():
            print(f"skipping {corpus}: no {folder}", file=sys.stderr)
            continue
        for budget in CORPORA[corpus][2]:
            rows += [count(corpus, folder, budget, rungs) for rungs in RUNGS]
    return rows


def summarise(runs: list[dict]) -> dict[str, Any]:
    by = {arm: {r["pair"]: r for r in runs if r["arm"] == arm} for arm in ARMS}
    pairs = sorted(by["exact"])
    ratios = [by["ladder"][p]["tokens_per_s"] / by["exact"][p]["tokens_per_s"] for p in pairs]
    return {"tokens_per_s": {arm: statistics.median(r["tokens_per_s"] for r in by[arm].values())
                             for arm in ARMS},
            "wall_s": {arm: statistics.median(r["wall_s"] for r in by[arm].values())
                       for arm in ARMS},
            "compiles": {arm: max((r["compiles"] or 0) for r in by[arm].values()) for arm in ARMS},
            "ladder_vs_exact": ratios}


def report(args: argparse.Namespace, info: dict, shapes: list[dict],
           training: dict[str, Any]) -> list[str]:
    lines = ["# Batch shapes against padding", "", *machine_lines(info), "",
             f"`python benchmarks/batch_shapes.py {' '.join(sys.argv[1:])}`".replace("  ", " "),
             "", "## Shapes and padding of one training epoch", "",
             "Global batches, each padded to its longest (`null`) or to a ladder of N lengths "
             "fitted to the split (`data.buckets`).", ""]
    lines += table(["corpus", "tokens a batch", "data.buckets", "shapes", "padding", "batches"],
                   [[r["corpus"], f"{r['budget']:,}", "null" if r["rungs"] is None
                     else str(r["rungs"]), str(r["shapes"]), f"{r['padding']:.1%}",
                     f"{r['batches']:,}"] for r in shapes])
    for name, summary in training.items():
        tps = summary["tokens_per_s"]
        lines += ["", f"## Training, {name}: exact lengths against the 12-rung ladder", "",
                  f"The depth study's model, bf16-mixed, {args.steps} steps a run, "
                  f"{args.pairs} pairs, {args.threads} torch thread(s); target tokens/s after "
                  f"step {args.skip} (median over the pairs); wall time includes start-up, "
                  "compiles and the final validation.",
                  ""]
        lines += table(["arm", "target tokens/s", "wall s", "compiles"],
                       [[arm, f"{tps[arm]:,.0f}", f"{summary['wall_s'][arm]:.0f}",
                         str(summary["compiles"][arm])] for arm in ARMS])
        ratios = ", ".join(f"{r:.3f}" for r in summary["ladder_vs_exact"])
        lines += ["", f"Ladder against exact, pair by pair: {ratios}."]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=MULTI30K)
    parser.add_argument("--wmt", type=Path, default=WMT)
    parser.add_argument("--train", action="store_true", help="eager training, paired")
    parser.add_argument("--compile", action="store_true", help="compiled training, paired")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--skip", type=int, default=10,
                        help="steps left out of tokens/s (a static-shape compile compiles "
                             "each new shape as it comes: skip past them)")
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    precision.SKIP = args.skip  # train_once's first step of the throughput
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    with tempfile.TemporaryDirectory() as cache:
        os.environ.setdefault("NORMZOO_CACHE", cache)
        shapes = measure_shapes(args)
    for r in shapes:
        print(f"{r['corpus']}, {r['budget']:,} tokens, buckets {r['rungs']}: {r['shapes']} "
              f"shapes, {r['padding']:.1%} padding, {r['batches']} batches", file=sys.stderr)
    training = {}
    for name, arms in (("eager", ARMS), ("compiled", COMPILED)):
        if getattr(args, "train" if name == "eager" else "compile"):
            bf16 = {arm: ("bf16-mixed", extra, {}) for arm, extra in arms.items()}
            training[name] = summarise(precision.measure_training(args, bf16))
    info = machine(args.threads)
    out = args.out or RESULTS / f"batch-shapes-{device_slug()}.md"
    write_report(out, report(args, info, shapes, training),
                 {"machine": info, "shapes": shapes, "training": training})
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
