"""``normzoo train`` itself on a GPU: Transformer-base (``recipes/wmt_prenorm.yaml``) on Multi30k
for a fixed number of steps, bf16-mixed, validation and logging on, and the throughput and MFU
the run logs, read back from its ``metrics.csv``. ``gpu_check.sh`` sets it beside the bare
step (``gpu_step.py``) that it wraps: the same model, vocabulary size and token budget.

    python benchmarks/gpu_train.py --out TRAIN.json [--data DIR] [--steps 50] [--log-every 10]
        [--count-syncs] [--max-tokens 25000] [--vocab 8000] [--run-dir DIR]
        [--set KEY=VALUE ...] [--dry-run]
    python benchmarks/gpu_train.py --prepare-only [--data DIR]   # fill $NORMZOO_CACHE

The recipe's model as it is; the data from ``--data`` (``train`` and ``val``; ``val`` also
stands in for the test split, so only two splits travel), one batch of ``--max-tokens`` a
step (``trainer.accumulate=1``, as the bare step), validation loss every ``--val-every``
steps (no BLEU while training), CSV logs every ``--log-every`` steps, no step checkpoints
kept, and the final
test greedy.

Tokens/s is Lightning's ``ThroughputMonitor`` (``train/lengths`` over ``train/time``: target
tokens over training time, validation left out), over the steps after the first epoch where
the run has one (their batch shapes were met in the first), else over its second half; the
MFU is the run's own (``train/device/mfu``: FLOPs counted by torch on its first batch, scaled
by each batch's target tokens), averaged over the same steps, with 6 × parameters × target
tokens/s beside it.

``--count-syncs`` counts what the training steps make the host wait for, torch's sync
detector on from each training batch's start to its end: the same command run in a process of
this script's (``--syncs-child``), two callbacks added to its Trainer (:mod:`gpu_syncs`); the
counts join the result (``syncs_per_step``, ``syncs_where``; null without a GPU).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package
from common import MULTI30K, REPO
from gpu_flops import six_nd, utilisation
from gpu_syncs import child_can_count, read_syncs, syncs_child, syncs_path

RECIPE = REPO / "recipes" / "wmt_prenorm.yaml"
SPLITS = ("train", "val")
MFU_DEFINITION = ("train_mfu: the run's own, as it logs it (Lightning's ThroughputMonitor, "
                  "train/device/mfu): the FLOPs of a training step counted by torch's "
                  "FlopCounterMode on the run's first batch (its padded shapes, forward and "
                  "backward), scaled by each batch's target tokens, over the bf16 peak.")


def data_overrides(data: Path, max_tokens: int, vocab: int) -> list[str]:
    """The recipe's data section pointed at local Multi30k files."""
    return ["data.source=files", "data.path=null", "data.name=null", f"data.dir={data}",
            "data.train_split=train", "data.valid_split=val", "data.test_split=val",
            f"data.max_tokens={max_tokens}", f"data.tokenizer.vocab_size={vocab}"]


def overrides(args: argparse.Namespace) -> list[str]:
    return [*data_overrides(args.data, args.max_tokens, args.vocab),
            f"trainer.max_steps={args.steps}", f"trainer.val_every_steps={args.val_every}",
            f"trainer.log_every_steps={args.log_every}", "trainer.accumulate=1",
            "trainer.precision=bf16-mixed",
            "trainer.loggers=[csv]", "trainer.progress_bar=false", "trainer.keep_checkpoints=0",
            "trainer.save_top_k=0", "eval.beam=1", "eval.valid_bleu=false",
            f"run.dir={args.run_dir}", *args.set]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="the figures, as JSON")
    parser.add_argument("--data", type=Path, default=MULTI30K,
                        help="a folder with train.{en,de} and val.{en,de}")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--val-every", type=int, default=25)
    parser.add_argument("--log-every", type=int, default=10,
                        help="trainer.log_every_steps (the GPU check runs 10 and 1: before "
                        "issue 61 each logged step synchronised the GPU, results/"
                        "gpu-train-nvidia-h200.md); the rate needs two logged steps after the "
                        "first epoch")
    parser.add_argument("--count-syncs", action="store_true",
                        help="count the host's waits for the GPU in each training step "
                        "(torch's sync debug mode; null without a GPU)")
    parser.add_argument("--max-tokens", type=int, default=25000)
    parser.add_argument("--vocab", type=int, default=8000,
                        help="BPE vocabulary (peers.py's base size has 8,000)")
    parser.add_argument("--run-dir", type=Path, default=Path("/tmp/gpu-check-train"))
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="more recipe overrides, after the ones above")
    parser.add_argument("--prepare-only", action="store_true",
                        help="run `normzoo prepare` on the data (fills $NORMZOO_CACHE)")
    parser.add_argument("--dry-run", action="store_true",
                        help="validate the recipe with its overrides, check the data, train "
                        "nothing")
    args = parser.parse_args(argv)
    if not args.prepare_only and args.out is None:
        parser.error("--out is required")
    if args.steps < 2 or args.val_every < 1 or args.log_every < 1:
        parser.error("--steps must be at least 2, --val-every and --log-every at least 1")
    return args


def missing_files(data: Path) -> list[str]:
    return [f"{split}.{lang}" for split in SPLITS for lang in ("en", "de")
            if not (data / f"{split}.{lang}").is_file()]


def read_metrics(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def throughput(rows: list[dict[str, str]], steps: int) -> dict[str, Any]:
    """Target tokens/s and the logged MFU from a run's ``metrics.csv`` rows: over the steps
    after the first epoch where there are at least two, else over the second half of the
    steps; and over every logged step (``tokens_per_s_all``)."""
    progress = [(int(r["step"]), int(r["epoch"] or 0), float(r["train/lengths"]),
                 float(r["train/time"]), _number(r.get("train/device/mfu")))
                for r in rows if r.get("train/lengths") and r.get("train/time")]
    if len(progress) < 2:
        return {"tokens_per_s": None, "window": "fewer than two steps logged"}
    later = [p for p in progress if p[1] >= 1]
    if len(later) >= 2:
        window = later
        where = f"steps {later[0][0]}-{later[-1][0]}, after the first epoch"
    else:
        window = [p for p in progress if p[0] >= steps // 2] or progress[-2:]
        if len(window) < 2:
            window = progress[-2:]
        where = f"steps {window[0][0]}-{window[-1][0]}, the second half (one epoch or less)"
    first, last = window[0], window[-1]
    mfus = [p[4] for p in window[1:] if p[4] is not None]
    return {"tokens_per_s": (last[2] - first[2]) / (last[3] - first[3]), "window": where,
            "steps_timed": last[0] - first[0],
            "tokens_per_s_all": (progress[-1][2] - progress[0][2])
            / (progress[-1][3] - progress[0][3]),
            "mfu": sum(mfus) / len(mfus) if mfus else None,
            "epochs": progress[-1][1] + 1}


def _number(text: str | None) -> float | None:
    return float(text) if text not in (None, "") else None


def parameters(run_dir: Path) -> int:
    """The run's model's parameters, counted on the meta device from its resolved recipe and
    tokenizer (the run prints them, but does not record them)."""
    import torch
    from tokenizers import Tokenizer

    from normzoo.recipe import load
    from normzoo.tasks.translation.module import TranslationModule

    recipe = load(run_dir / "recipe.yaml")
    vocab = Tokenizer.from_file(str(run_dir / "tokenizer.json")).get_vocab_size()
    with torch.device("meta"):
        task = TranslationModule(recipe, vocab)
    return sum(p.numel() for p in task.model.parameters())


def peak() -> tuple[float, str] | None:
    import torch

    from normzoo.run.hardware import peak_bf16_flops

    return peak_bf16_flops(torch.cuda.get_device_name()) if torch.cuda.is_available() else None


def command(args: argparse.Namespace) -> list[str]:
    """The process that trains: ``python -m normzoo train ...``, or with ``--count-syncs``
    the same command line run by this script's :func:`syncs_child`."""
    normzoo = ["train", str(RECIPE), *overrides(args), "--force"]
    if args.count_syncs:
        return [sys.executable, str(Path(__file__).resolve()), "--syncs-child",
                str(syncs_path(args.out)), *normzoo]
    return [sys.executable, "-m", "normzoo", *normzoo]


def train(args: argparse.Namespace) -> dict[str, Any]:
    run = command(args)
    counts = syncs_path(args.out)
    counts.unlink(missing_ok=True)
    started = time.perf_counter()
    done = subprocess.run(run, cwd=REPO, check=False)
    result: dict[str, Any] = {"command": " ".join(run[2:]), "returncode": done.returncode,
                              "wall_s": round(time.perf_counter() - started, 1),
                              "steps": args.steps, "max_tokens": args.max_tokens,
                              "log_every": args.log_every}
    if args.count_syncs:
        result.update(read_syncs(counts))
    metrics = args.run_dir / "logs" / "csv" / "metrics.csv"
    if not metrics.is_file():
        result["error"] = f"no {metrics}"
        return result
    rows = read_metrics(metrics)
    result.update(throughput(rows, args.steps))
    result["val_loss"] = [float(r["val/loss"]) for r in rows if r.get("val/loss")]
    summary = args.run_dir / "summary.json"
    if summary.is_file():
        record = json.loads(summary.read_text(encoding="utf-8"))
        result.update({key: record.get(key) for key in (
            "status", "train_batch_shapes", "train_padding", "train_wall_s", "total_wall_s")})
        result["gpu"] = record.get("machine", {}).get("gpu")
    result["params"] = parameters(args.run_dir)
    top = peak()
    result.update(peak_flops=top[0] if top else None, mfu_definition=MFU_DEFINITION)
    if result.get("tokens_per_s"):
        result["mfu_6nd"] = utilisation(six_nd(result["params"], result["tokens_per_s"]),
                                        result["peak_flops"])
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--syncs-child"]:
        syncs_child(Path(argv[1]), argv[2:])
        return 0
    args = parse_args(argv)
    missing = missing_files(args.data)
    if args.prepare_only:
        if missing:
            print(f"{args.data}: missing {', '.join(missing)}", file=sys.stderr)
            return 2
        prepare = [sys.executable, "-m", "normzoo", "prepare", str(RECIPE),
                   *data_overrides(args.data, args.max_tokens, args.vocab)]
        return subprocess.run(prepare, cwd=REPO, check=False).returncode
    print(f"normzoo train {RECIPE.relative_to(REPO)} {' '.join(overrides(args))} -> {args.out}",
          flush=True)
    if args.dry_run:
        from normzoo.recipe import load

        load(RECIPE, overrides(args))  # a ConfigError names every problem
        if args.count_syncs and not child_can_count(args.out):
            return 2
        if missing:
            print(f"{args.data}: missing {', '.join(missing)} (gpu_check.sh prepare copies "
                  "them)", file=sys.stderr)
            return 2
        print(f"recipe valid; data {args.data} has {', '.join(SPLITS)}; "
              f"NORMZOO_CACHE={os.environ.get('NORMZOO_CACHE', '(default)')}")
        return 0
    result = train(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if result.get("tokens_per_s"):
        mfu = result.get("mfu")
        print(f"normzoo train, logging every {args.log_every}: {result['tokens_per_s']:,.0f} "
              f"target tokens/s over {result['window']}; MFU as logged "
              f"{'n/a' if mfu is None else f'{100 * mfu:.1f}%'}")
    if args.count_syncs:
        per_step = result.get("syncs_per_step")
        print(f"host synchronisations per training step: "
              f"{result.get('syncs_note') if per_step is None else f'{per_step:g}'} "
              f"({result.get('syncs')} over {result.get('syncs_steps_counted')} steps)")
        for where in result.get("syncs_where", [])[:5]:
            print(f"  {where['count']} x {' < '.join(where['frames'])}")
    return 0 if result["returncode"] == 0 and result.get("tokens_per_s") else 1


if __name__ == "__main__":
    sys.exit(main())
