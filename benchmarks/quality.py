"""Quality per CPU time: Multi30k En->De test2016 BLEU of normzoo's Pre-LN, Post-LN and
DeepNorm recipes, each trained for the same fixed wall-clock budget.

    python benchmarks/quality.py [--budget-min 10] [--data DIR] [--schemes pre,post,deepnorm]
                                 [--threads N] [--runs DIR] [--out PATH] [--tiny]

Each recipe (recipes/multi30k_{prenorm,postnorm,deepnorm}.yaml) runs through normzoo's own
``recipe.load`` + ``train.run`` with ``trainer.max_time`` set to the budget and no step limit.
Validation is off, so the whole budget goes to training and the test split is decoded with
the final weights (beam 5 as the recipes say, plus greedy). Test decoding is outside the
budget. ``--tiny`` trains a tiny model on normzoo's built-in corpus for 20 steps, for the
test suite. Writes benchmarks/results/quality-<device>.md (and .json) unless ``--out`` says
where.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package
from common import (
    MULTI30K,
    REPO,
    RESULTS,
    device_slug,
    machine,
    machine_lines,
    table,
    write_report,
)

RECIPES = {"pre": "multi30k_prenorm.yaml", "post": "multi30k_postnorm.yaml",
           "deepnorm": "multi30k_deepnorm.yaml"}
NO_STEP_LIMIT = 10**9
TINY = ["data.source=builtin", "data.valid_split=valid", "data.test_split=test",
        "data.train_limit=2000", "data.valid_limit=40", "data.max_tokens=512",
        "data.tokenizer.vocab_size=300", "model.d_model=32", "model.heads=2",
        "model.ffn_dim=64", "model.encoder_layers=1", "model.decoder_layers=1",
        "eval.beam=2"]


def max_time(minutes: float) -> str:
    """``trainer.max_time`` as the recipe wants it: ``DD:HH:MM:SS``."""
    seconds = max(round(minutes * 60), 1)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    return f"{days:02d}:{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"


def overrides(args: argparse.Namespace, run_dir: Path) -> list[str]:
    """The recipe as it is, except: the budget instead of a step count, and no validation."""
    steps = 20 if args.tiny else NO_STEP_LIMIT
    common = [f"run.dir={run_dir}", f"trainer.max_time={max_time(args.budget_min)}",
              f"trainer.max_steps={steps}", f"trainer.val_every_steps={NO_STEP_LIMIT}",
              "trainer.keep_checkpoints=0", "trainer.progress_bar=false",
              "eval.valid_bleu=false"]
    return common + (TINY if args.tiny else [f"data.dir={args.data}"])


def train_one(scheme: str, args: argparse.Namespace, runs: Path) -> dict[str, Any]:
    """Train one recipe within the budget; its summary (or how it diverged) and CPU time."""
    from normzoo import recipe
    from normzoo.diagnostics.callbacks import DivergenceError
    from normzoo.run import training as train

    path = REPO / "recipes" / RECIPES[scheme]
    resolved = recipe.load(path, overrides(args, runs / scheme))
    result: dict[str, Any] = {"scheme": scheme, "recipe": f"recipes/{RECIPES[scheme]}"}
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        result["summary"] = train.run(resolved, path, force=True)
    except DivergenceError as error:  # a result too: this recipe can't be trained this way
        result["diverged"] = str(error)
    result.update(cpu_s=time.process_time() - cpu, wall_s=time.perf_counter() - wall)
    return result


def result_row(r: dict[str, Any]) -> list[str]:
    scheme, recipe, cpu = r["scheme"], f"`{r['recipe']}`", f"{r['cpu_s']:,.1f}"
    if "diverged" in r:
        return [scheme, recipe, "diverged", "", cpu, "—", "—", "—", "—"]
    s, test = r["summary"], r["summary"]["test"]
    return [scheme, recipe, f"{s['steps']:,}", f"{s['train_wall_s']:,.1f}", cpu,
            f"{test['bleu']:.2f}", f"{test.get('greedy_bleu', test['bleu']):.2f}",
            f"{test['chrf']:.2f}", f"{test['copy_source_bleu']:.2f}"]


def report(args: argparse.Namespace, results: list[dict[str, Any]],
           info: dict[str, Any]) -> list[str]:
    tests = [r["summary"]["test"] for r in results if "summary" in r]
    test = tests[0] if tests else {"split": "test", "sentences": "?", "beam": "?",
                                   "signature": "n/a"}
    data = "built-in toy corpus (--tiny)" if args.tiny else f"`{args.data}`"
    command = (f"python benchmarks/quality.py --budget-min {args.budget_min:g} --threads "
               f"{args.threads}" + (" --tiny" if args.tiny else ""))
    lines = [f"# Quality per CPU time: {args.budget_min:g} min of training per recipe "
             f"({device_slug()})", "", f"Command: `{command}`", "", *machine_lines(info), "",
             f"Data: {data}; test split `{test['split']}` ({test['sentences']} sentences). "
             "Each recipe as written, with `trainer.max_time` = the budget instead of a step "
             "count and validation off, so the test is decoded with the final weights (beam "
             f"{test['beam']} and greedy; decoding is not part of the budget). 'train wall s' "
             "is from the start of the run (tokenizer, data) to the end of training; 'CPU s' "
             "is the process's CPU time over the whole run, test decoding included.", "",
             *table(["scheme", "recipe", "steps", "train wall s", "CPU s",
                     f"test BLEU (beam {test['beam']})", "greedy BLEU", "chrF",
                     "copy-source BLEU"], [result_row(r) for r in results]),
             "", f"BLEU signature: `{test['signature']}`"]
    lines += [f"\n{r['scheme']} diverged: {r['diverged']}" for r in results if "diverged" in r]
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-min", type=float, default=10.0)
    parser.add_argument("--data", type=Path, default=MULTI30K)
    parser.add_argument("--schemes", default=",".join(RECIPES))
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--runs", type=Path, default=None,
                        help="keep the run directories here (default: a temporary folder)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args(argv)
    unknown = set(args.schemes.split(",")) - set(RECIPES)
    if unknown:
        parser.error(f"unknown scheme(s) {sorted(unknown)}; known: {', '.join(RECIPES)}")
    if not args.tiny and not (args.data / "train.en").is_file():
        parser.error(f"no Multi30k in {args.data} (train.en missing); pass --data DIR")
    return args


def main(argv: list[str] | None = None) -> int:
    import torch

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        runs = args.runs or Path(tmp)
        results = [train_one(scheme, args, runs) for scheme in args.schemes.split(",")]
    info = machine(args.threads)
    lines = report(args, results, info)
    out = args.out or RESULTS / f"quality-{device_slug()}.md"
    write_report(out, lines, {"machine": info, "budget_min": args.budget_min,
                              "tiny": args.tiny, "results": results})
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
