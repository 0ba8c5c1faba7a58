"""Data at WMT scale: prepare time, time to the first step and peak memory, by corpus size.

    python benchmarks/data_scale.py                  # 0.1 M, 1 M and 4.5 M pairs, 100 M LM tokens
    python benchmarks/data_scale.py --sizes 20000 --lm-tokens 2000000 --baseline none  # quick

Builds synthetic corpora by sampling real sentence pairs from ``../shared/data`` (Multi30k and
WMT14 newstest2013/2014, about 40 k pairs) with a seeded generator: a 4.5 M-pair corpus the
size of WMT14 En-De (validation newstest2013, test newstest2014). For each size it runs
``normzoo train recipes/wmt_prenorm.yaml`` on it (Transformer-base, fp32, CPU) and measures:

* cold prepare: ``normzoo prepare`` on an empty cache (tokenizer and encoding);
* warm start: wall time from launching ``normzoo train`` to the end of its first optimizer
  step, with the cache ready, for one process and for two DDP processes;
* peak resident memory (``ru_maxrss``) of each process at that step, and the same peak for a
  corpus of every real pair once (about 40 k pairs: the same vocabulary, so the same model):
  the model's own memory, which the data adds to.

The same is measured for the in-memory data path of ``--baseline`` (a git revision before
prepared data; run from a temporary worktree) up to ``--baseline-max`` pairs, and for a
``causal_lm`` corpus of ``--lm-tokens`` tokens (recipes/gpt_prenorm.yaml).

Each training process runs ``data_scale_child.py``: it patches ``normzoo.run.training`` to stop
the run right after the first optimizer step, records the time and ``ru_maxrss``, and exits. The
corpora are ``data_scale_corpora.py``'s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from common import REPO, RESULTS, machine, machine_lines, write_report
from data_scale_corpora import (
    write_corpus,
    write_lm_corpus,
    write_lm_real_corpus,
    write_real_corpus,
)

BASELINE = "2afa3d2"  # the last revision that held every split as Python lists
# GPT-2 small's 16 k-token steps take minutes on a CPU: a smaller decoder on the same data
# (the data path, not the model, is what is measured; its own memory is reported beside it).
LM = ["data.max_tokens=4096", "data.max_len=512", "model.d_model=256", "model.heads=4",
      "model.ffn_dim=1024", "model.decoder_layers=4"]
TRAIN = ["data.source=files", "data.train_split=train", "data.valid_split=valid",
         "data.test_split=test", "trainer.max_steps=2", "trainer.precision=32-true",
         "trainer.accumulate=1", "trainer.accelerator=cpu", "trainer.progress_bar=false"]

CHILD = Path(__file__).with_name("data_scale_child.py")  # each training process


# -- measurements -----------------------------------------------------------------------------


def first_step(args, recipe: str, overrides: list[str], devices: int, work: Path,
               pythonpath: Path | None = None, timeout: float = 3600,
               tokenizer: Path | None = None) -> dict:
    """Launch a training run; seconds to its first step and each rank's peak RSS in MiB."""
    out = work / "first-step"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    run_dir = work / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    strategy = ["trainer.strategy=ddp"] if devices > 1 else []
    argv = ["train", recipe, *TRAIN, *overrides, f"trainer.devices={devices}", *strategy,
            f"run.dir={run_dir}", "--force"]
    env = {**os.environ, "OMP_NUM_THREADS": str(max(1, args.threads // devices))}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    if tokenizer is not None:
        env["DATA_SCALE_TOKENIZER"] = str(tokenizer)
    started = time.time()
    process = subprocess.Popen([sys.executable, str(CHILD), str(out), "--", *argv],
                               env=env, cwd=pythonpath or REPO, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    try:
        _, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        return {"error": f"no first step within {timeout:.0f} s"}
    records = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    if len(records) != devices:
        return {"error": f"exit {process.returncode}: {err.strip().splitlines()[-1:]}"}
    return {"seconds": round(max(r["time"] for r in records) - started, 1),
            "to_first_batch": round(max(r["batch_time"] for r in records) - started, 1),
            "peak_mib": [round(r["peak_rss"] / 2**20) for r in records]}


def cold_prepare(recipe: str, overrides: list[str], cache: Path, work: Path,
                 threads: int) -> dict:
    """``normzoo prepare`` on an empty cache: wall time, what it printed, its peak memory."""
    shutil.rmtree(cache, ignore_errors=True)
    env = {**os.environ, "NORMZOO_CACHE": str(cache), "OMP_NUM_THREADS": str(threads)}
    started = time.time()
    done = subprocess.run([sys.executable, str(CHILD), str(work), "--", "prepare",
                           recipe, *overrides], env=env, cwd=REPO, capture_output=True, text=True)
    seconds = round(time.time() - started, 1)
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-500:]}
    peak = json.loads((work / "prepare.json").read_text())["peak_rss"]
    return {"seconds": seconds, "report": done.stdout.strip().splitlines(),
            "peak_mib": round(peak / 2**20)}


def baseline_tree(work: Path, revision: str) -> Path:
    tree = work / f"baseline-{revision}"
    if not tree.is_dir():
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree),
                        revision], check=True, capture_output=True)
    return tree


def save_partial(args, results: dict) -> None:
    """The numbers so far, so that a long run that stops early still leaves them."""
    Path(args.out).with_suffix(".partial.json").write_text(json.dumps(results, indent=1))


def measure(args) -> dict:
    work = Path(args.work)
    cache = work / "cache"
    os.environ["NORMZOO_CACHE"] = str(cache)
    results: dict = {"translation": [], "lm": None, "model_only": {}}
    recipe = "recipes/wmt_prenorm.yaml"
    sizes = [int(s) for s in args.sizes.split(",")]
    tiny = write_real_corpus(work / "corpus-real")
    for devices in (1, 2):
        results["model_only"][devices] = first_step(args, recipe, [f"data.dir={tiny}"], devices,
                                                    work)
    for pairs in sizes:
        folder = write_corpus(work / f"corpus-{pairs}", pairs)
        overrides = [f"data.dir={folder}", *TRAIN]
        row = {"pairs": pairs, "corpus_mib": round(sum(
            (folder / f"train.{lang}").stat().st_size for lang in ("en", "de")) / 2**20)}
        print(f"{pairs:,} pairs: cold prepare", file=sys.stderr, flush=True)
        row["prepare"] = cold_prepare(recipe, overrides, cache, work, args.threads)
        for devices in (1, 2):
            print(f"{pairs:,} pairs: warm start, {devices} process(es)", file=sys.stderr,
                  flush=True)
            row[f"prepared_{devices}"] = first_step(args, recipe, [f"data.dir={folder}"],
                                                    devices, work)
        if args.baseline != "none" and pairs <= args.baseline_max:
            tree = baseline_tree(work, args.baseline)
            trained = max((cache / "prepared" / "tokenizers").glob("*.json"),
                          key=lambda p: p.stat().st_mtime)
            for devices in (1, 2) if pairs <= args.baseline_ddp_max else (1,):
                print(f"{pairs:,} pairs: in-memory path, {devices} process(es)",
                      file=sys.stderr, flush=True)
                row[f"in_memory_{devices}"] = first_step(
                    args, str(REPO / recipe), [f"data.dir={folder}"], devices, work,
                    pythonpath=tree, tokenizer=trained)
        results["translation"].append(row)
        save_partial(args, results)
        shutil.rmtree(cache / "prepared", ignore_errors=True)  # disk: one corpus at a time
    if args.lm_tokens:
        folder = write_lm_corpus(work / f"lm-{args.lm_tokens}", args.lm_tokens)
        lm_recipe = "recipes/gpt_prenorm.yaml"
        overrides = [f"data.dir={folder}", *TRAIN, *LM]
        print("LM corpus: cold prepare", file=sys.stderr, flush=True)
        row = {"target_tokens": args.lm_tokens,
               "corpus_mib": round((folder / "train.txt").stat().st_size / 2**20),
               "prepare": cold_prepare(lm_recipe, overrides, cache, work, args.threads)}
        small = write_lm_real_corpus(work / "lm-real")
        for devices in (1, 2):
            print(f"LM corpus: warm start, {devices} process(es)", file=sys.stderr, flush=True)
            row[f"prepared_{devices}"] = first_step(
                args, lm_recipe, [f"data.dir={folder}", *LM], devices, work)
            row[f"model_only_{devices}"] = first_step(
                args, lm_recipe, [f"data.dir={small}", *LM], devices, work)
        results["lm"] = row
    Path(args.out).with_suffix(".partial.json").unlink(missing_ok=True)
    return results


# -- report -----------------------------------------------------------------------------------


def _cell(result: dict | None, what: str) -> str:
    """One table cell: ``start`` (to the first batch / to the end of the first step), ``peak``
    (MiB, per rank) or ``prepare`` (seconds)."""
    if not result:
        return "not run"
    if "error" in result:
        return f"failed: {result['error']}"[:80]
    if what == "prepare":
        return f"{result['seconds']:.0f} s"
    if what == "start":
        return f"{result['to_first_batch']:.0f} / {result['seconds']:.0f} s"
    return ", ".join(f"{peak:,}" for peak in result["peak_mib"])


def report(args, results: dict, info: dict) -> list[str]:
    model = results["model_only"]
    lines = ["# Data at scale: prepare once, memory-map everywhere", "", *machine_lines(info), "",
             f"Command: `python benchmarks/data_scale.py {' '.join(args.argv)}`".rstrip(), "",
             "`normzoo train recipes/wmt_prenorm.yaml` (Transformer-base, fp32, CPU). *Start*: "
             "seconds from launching the command to its first batch (data ready, model built) "
             "/ to the end of its first optimizer step. *Peak*: resident memory of each process "
             "at that step, MiB. The model's own, the same run on every real pair once (about "
             f"40 k pairs, the same vocabulary): {_cell(model.get(1), 'peak')} MiB for one "
             f"process, {_cell(model.get(2), 'peak')} for two; start "
             f"{_cell(model.get(1), 'start')} and {_cell(model.get(2), 'start')}.", "",
             "| pairs | text MiB | data path | cold prepare | start, 1 process | peak | "
             "start, 2 processes | peaks |",
             "|---:|---:|---|---:|---:|---:|---:|---:|"]
    for row in results["translation"]:
        for path, label in (("prepared", "prepared"), ("in_memory", "in-memory")):
            one, two = row.get(f"{path}_1"), row.get(f"{path}_2")
            if one is None and path == "in_memory":
                continue
            prep = _cell(row["prepare"], "prepare") if path == "prepared" else "-"
            lines.append(f"| {row['pairs']:,} | {row['corpus_mib']:,} | {label} | {prep} | "
                         f"{_cell(one, 'start')} | {_cell(one, 'peak')} | {_cell(two, 'start')} "
                         f"| {_cell(two, 'peak')} |")
    lm = results.get("lm")
    if lm:
        tokens = next((line for line in lm["prepare"].get("report", [])
                       if line.startswith("train")), str(lm["target_tokens"]))
        lines += ["", "## Causal LM", "",
                  "`recipes/gpt_prenorm.yaml` with a smaller decoder (" + " ".join(LM) + "), "
                  f"on {tokens} ({lm['corpus_mib']:,} MiB of text); the model's own: every real "
                  "line once.", "",
                  "| corpus | cold prepare | start, 1 process | peak | start, 2 processes | "
                  "peaks |", "|---|---:|---:|---:|---:|---:|",
                  f"| 100 M tokens | {_cell(lm['prepare'], 'prepare')} | "
                  f"{_cell(lm['prepared_1'], 'start')} | {_cell(lm['prepared_1'], 'peak')} | "
                  f"{_cell(lm['prepared_2'], 'start')} | {_cell(lm['prepared_2'], 'peak')} |",
                  f"| model's own | - | {_cell(lm['model_only_1'], 'start')} | "
                  f"{_cell(lm['model_only_1'], 'peak')} | {_cell(lm['model_only_2'], 'start')} | "
                  f"{_cell(lm['model_only_2'], 'peak')} |"]
    largest = results["translation"][-1]["prepare"]
    lines += ["", f"What `normzoo prepare` printed for the largest corpus (peak memory "
              f"{largest.get('peak_mib', '?'):,} MiB):", "", "```",
              *largest.get("report", []), "```", ""]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000,4500000")
    parser.add_argument("--lm-tokens", type=int, default=100_000_000)
    parser.add_argument("--baseline", default=BASELINE,
                        help="git revision of the in-memory path ('none' to skip)")
    parser.add_argument("--baseline-max", type=int, default=1_000_000)
    parser.add_argument("--baseline-ddp-max", type=int, default=100_000,
                        help="two in-memory processes hold two copies: larger ones skip DDP")
    parser.add_argument("--work", default="/tmp/normzoo-data-scale")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--out", default=str(RESULTS / "data_scale-cpu.md"))
    args = parser.parse_args()
    args.argv = sys.argv[1:]
    info = machine(args.threads)
    results = measure(args)
    write_report(Path(args.out), report(args, results, info),
                 {"machine": info, "args": vars(args), "results": results})


if __name__ == "__main__":
    main()
