"""``trainer.compile_scope``: the whole model compiled against its layers compiled as regions
(``normzoo.tasks.compiled``), and eager, on the depth study's model on this CPU, inductor.

    python benchmarks/compile_regions.py [--steps 12] [--shapes 3] [--pairs 1] [--threads 1]
                                         [--recipe RECIPE [KEY=VALUE ...]] [--out ...]

Each arm (``eager``; ``model``: ``trainer.compile_scope: model``; ``layers``) runs in a process
of its own with an empty inductor cache (``TORCHINDUCTOR_CACHE_DIR``), so that every compile is
a cold one, as a run's first is. The process builds the task from the recipe
(``recipes/studies/multi30k_depth.yaml`` on Multi30k: d_model 128, 6+6 layers, a 6,000-entry
BPE, batches of up to 2,048 tokens; in the recipe's precision), then trains through the
task's own step (``TaskModule.step_terms``: the compiled one), backward and normzoo's AdamW,
no Lightning loop, on the training loader's batches in order:

- **to the first step**: from the process's start (imports, data, model) to the end of its
  first training step, which compiles;
- **a new shape**: the first step on each of the first ``--shapes`` batches of distinct shapes,
  each timed; the compile a shape costs is that step's time less the arm's steady step time
  (with dynamic shapes, the CPU's default, the first shape compiles and later ones need not);
- **steady state**: target tokens/s over the next ``--steps`` batches that compile nothing
  (a batch that compiles again, a new shape TorchDynamo's guards refuse, is timed apart).

``--pairs`` rounds run the three arms, each round in another order. A process reports
TorchDynamo's compiles (``CompileCount``) and the load average when it started. Then, unless
``--interleave 0``, one more process builds the three alike, compiles each on the first batch
and steps them in turn on the same ``--interleave`` batches: the steady ratios of a shared,
noisy machine, batch by batch. Writes
``benchmarks/results/compile-regions-cpu.md`` and its ``.json``.
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
from typing import Any

from common import (
    MULTI30K,
    REPO,
    RESULTS,
    machine,
    machine_lines,
    shape_of,
    table,
    write_report,
)

RECIPE = REPO / "recipes" / "studies" / "multi30k_depth.yaml"
# Each arm: the recipe settings that make it.
ARMS: dict[str, list[str]] = {
    "eager": ["trainer.compile=false"],
    "model": ["trainer.compile=true", "trainer.compile_scope=model"],
    "layers": ["trainer.compile=true", "trainer.compile_scope=layers"],
}


def trainer(args: argparse.Namespace, arm: str) -> tuple[Any, Any]:
    """``arm``'s training step (the task's step, backward, AdamW; seconds it took) and the
    training loader's batches in order."""
    import torch

    from normzoo.recipe import load
    from normzoo.tasks import compiled
    from normzoo.tasks.datamodule import TextDataModule
    from normzoo.tasks.optim import build_optimizer
    from normzoo.tasks.translation.module import TranslationModule

    torch.set_num_threads(args.threads)
    compiled.BACKEND = args.backend
    recipe = load(args.recipe, [*args.overrides, *ARMS[arm]])
    data = TextDataModule(recipe, None, show_progress=False)
    data.setup("fit")
    torch.manual_seed(recipe.seed)
    task = TranslationModule(recipe, data.tokenizer.vocab_size).train()
    optimizer, _ = build_optimizer(task.model, recipe.optim, recipe.trainer.max_steps)
    bf16 = recipe.trainer.precision == "bf16-mixed"
    smoothing = recipe.optim.label_smoothing

    def step(batch: dict[str, Any]) -> float:
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            terms = task.step_terms(batch, smoothing)
        (terms.loss_sum / terms.tokens.clamp(min=1)).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    return step, iter(data.train_dataloader())


def child(args: argparse.Namespace) -> dict[str, Any]:
    """One arm in this process: the timings the module docstring lists."""
    from normzoo.tasks.compiled import CompileCount

    step, loader = trainer(args, args.child)
    count = CompileCount()
    shapes: list[dict[str, Any]] = []
    seen: set = set()
    while len(shapes) < args.shapes:
        batch = next(loader)
        if shape_of(batch) in seen:
            continue
        seen.add(shape_of(batch))
        before, seconds = count.compiles, step(batch)
        if not shapes:
            first_step_end = time.time()
        shapes.append({"shape": {k: list(v) for k, v in shape_of(batch)}, "s": seconds,
                       "compiles": count.compiles - before})
    tokens, seconds, timed, recompiled = 0, 0.0, 0, []
    while timed < args.steps:  # a step that compiled is reported apart, not timed
        batch = next(loader)
        before, took = count.compiles, step(batch)
        if count.compiles > before:
            recompiled.append({"shape": {k: list(v) for k, v in shape_of(batch)}, "s": took,
                               "compiles": count.compiles - before})
            continue
        seconds, tokens, timed = seconds + took, tokens + int(batch["ntokens"]), timed + 1
    return {"arm": args.child, "to_first_step_s": first_step_end - args.started,
            "shapes": shapes, "steady_tokens_per_s": tokens / seconds,
            "steady_step_s": seconds / timed, "steady_steps": timed, "recompiled": recompiled,
            "compiles": count.compiles}


def interleaved(args: argparse.Namespace) -> dict[str, Any]:
    """The three arms in one process, each compiled on the first batch, then each stepping
    on the same ``--interleave`` batches in turn (a batch on which any compiled again left
    out): a shared machine's slow minute falls on all three alike."""
    from normzoo.tasks.compiled import CompileCount

    steps = {}
    for arm in ARMS:
        steps[arm], loader = trainer(args, arm)
    first = next(loader)
    for step in steps.values():
        step(first)
    count = CompileCount()
    times: dict[str, list[float]] = {arm: [] for arm in ARMS}
    while len(times["eager"]) < args.interleave:
        batch, before, order = next(loader), count.compiles, list(ARMS)
        turn = len(times["eager"]) % len(order)
        took = {arm: steps[arm](batch) for arm in order[turn:] + order[:turn]}
        if count.compiles == before:
            for arm in ARMS:
                times[arm].append(took[arm])
    return {"step_s": times, "over_eager": {
        arm: statistics.median(e / t for e, t in zip(times["eager"], times[arm], strict=True))
        for arm in ("model", "layers")}, "layers_over_model": statistics.median(
        m / layer for m, layer in zip(times["model"], times["layers"], strict=True))}


def prepare(args: argparse.Namespace) -> None:
    """The recipe's tokenizer made (and cached) here, so that no arm's first step waits for
    it."""
    from normzoo.recipe import load
    from normzoo.tasks.datamodule import TextDataModule

    TextDataModule(load(args.recipe, args.overrides), None, show_progress=False).setup("fit")


def run_arm(arm: str, args: argparse.Namespace) -> dict[str, Any]:
    """``arm`` in a process of its own, with an inductor cache of its own (empty)."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads),
               "TORCHINDUCTOR_CACHE_DIR": cache}
        out = Path(cache) / "result.json"
        load = os.getloadavg()[0]
        command = [sys.executable, __file__, "--child", arm, "--child-out", str(out),
                   "--started", repr(time.time()), "--steps", str(args.steps), "--shapes",
                   str(args.shapes), "--interleave", str(args.interleave), "--threads",
                   str(args.threads), "--recipe",
                   str(args.recipe), "--backend", args.backend, *args.overrides]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False,
                              cwd=REPO)
        if done.returncode != 0:
            raise SystemExit(f"{arm} exited {done.returncode}:\n{done.stderr[-3000:]}")
        return {**json.loads(out.read_text()), "load": load}


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per arm, the medians over the pairs; per compiled arm, compile per new shape and the
    steady rate over eager's of the same round."""
    summary: dict[str, Any] = {}
    eager = {r["pair"]: r for r in runs if r["arm"] == "eager"}
    for arm in ARMS:
        mine = [r for r in runs if r["arm"] == arm]
        if not mine:
            continue
        entry = {key: statistics.median(r[key] for r in mine)
                 for key in ("to_first_step_s", "steady_tokens_per_s", "steady_step_s")}
        # a shape's compile: its first step less a steady step
        entry["compile_s_per_shape"] = [
            statistics.median(r["shapes"][i]["s"] - r["steady_step_s"] for r in mine)
            for i in range(len(mine[0]["shapes"]))]
        entry["compiles"] = max(r["compiles"] for r in mine)
        if arm != "eager" and eager:
            entry["over_eager"] = [r["steady_tokens_per_s"] / eager[r["pair"]]
                                   ["steady_tokens_per_s"] for r in mine if r["pair"] in eager]
        summary[arm] = entry
    return summary


def report(args: argparse.Namespace, info: dict, runs: list[dict], summary: dict,
           mixed: dict | None) -> list[str]:
    lines = ["# trainer.compile_scope: the whole model against its layers, compiled cold", "",
             *machine_lines(info), "",
             f"`{args.command}`: `{args.recipe_name}`, {args.threads} torch "
             f"thread(s), {args.backend} (from an empty inductor cache) in every process; the "
             "task's step, "
             "backward and AdamW, no Lightning loop. A shape's compile is its first step less a "
             f"steady step; steady state: target tokens/s over {args.steps} steps after the "
             f"first {args.shapes} shapes.", "", "## Each process", ""]
    lines += table(
        ["pair", "arm", "start to first step (s)", "first step of each new shape (s)",
         "later steps that compiled (s)", "steady tokens/s", "compiles", "load at start"],
        [[str(r["pair"]), r["arm"], f"{r['to_first_step_s']:.1f}",
          " / ".join(f"{s['s']:.1f}" for s in r["shapes"]),
          " / ".join(f"{s['s']:.1f}" for s in r["recompiled"]) or "-",
          f"{r['steady_tokens_per_s']:,.0f}", str(r["compiles"]), f"{r['load']:.1f}"]
         for r in runs])
    lines += ["", "## Medians", ""]
    rows = []
    for arm, s in summary.items():
        ratio = s.get("over_eager")
        rows.append([arm, f"{s['to_first_step_s']:.1f}",
                     " / ".join(f"{c:.1f}" for c in s["compile_s_per_shape"]),
                     f"{s['steady_tokens_per_s']:,.0f}",
                     f"{statistics.median(ratio):.2f}" if ratio else "",
                     str(s["compiles"]) if arm != "eager" else ""])
    lines += table(["arm", "start to first step (s)", "compile per new shape (s)",
                    "steady tokens/s", "over eager", "compiles"], rows)
    model, layers = summary.get("model"), summary.get("layers")
    if model and layers:
        first = layers["to_first_step_s"] / model["to_first_step_s"]
        steady = layers["steady_tokens_per_s"] / model["steady_tokens_per_s"]
        lines += ["", f"- **layers / model**: start to the first step {first:.2f}x "
                  f"({layers['to_first_step_s']:.0f} against {model['to_first_step_s']:.0f} s); "
                  f"steady tokens/s {steady:.2f}x."]
    if mixed:
        step_s = mixed["step_s"]
        lines += ["", f"## The three in turn, one process ({len(step_s['eager'])} batches)", ""]
        lines += table(["arm", "median step (s)", "over eager (median of the batches)"],
                       [[arm, f"{statistics.median(step_s[arm]):.3f}",
                         f"{mixed['over_eager'][arm]:.3f}" if arm in mixed["over_eager"]
                         else ""] for arm in ARMS])
        lines += ["", f"- layers / model, batch by batch: **{mixed['layers_over_model']:.3f}x**"
                  " (median)."]
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12, help="steady steps timed per arm")
    parser.add_argument("--shapes", type=int, default=3, help="new shapes timed per arm")
    parser.add_argument("--pairs", type=int, default=1, help="rounds of the three arms")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--backend", default="inductor",
                        help="TorchDynamo's backend (eager: its tracing alone, for the tests)")
    parser.add_argument("--recipe", type=Path, default=RECIPE)
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="recipe settings (default for the study's recipe: "
                        "data.dir=../shared/data/multi30k)")
    parser.add_argument("--out", type=Path, default=RESULTS / "compile-regions-cpu.md")
    parser.add_argument("--interleave", type=int, default=12,
                        help="steps of the three arms in turn in one process (0: none)")
    parser.add_argument("--child", choices=[*ARMS, "interleaved"], help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--started", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.steps, args.shapes, args.pairs, args.threads) < 1:
        parser.error("--steps, --shapes, --pairs and --threads must be at least 1")
    if set(args.arms.split(",")) - set(ARMS):
        parser.error(f"--arms: choose among {', '.join(ARMS)}")
    study = args.recipe.resolve() == RECIPE
    if study and not args.overrides:
        args.overrides = [f"data.dir={MULTI30K}"]
    args.recipe_name = RECIPE.relative_to(REPO) if study else args.recipe
    args.shown = "" if study else " " + " ".join(args.overrides)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        run = interleaved if args.child == "interleaved" else child
        args.child_out.write_text(json.dumps(run(args)))
        return
    arms = args.arms.split(",")
    prepare(args)
    runs = []
    for pair in range(args.pairs):
        for arm in arms[pair % len(arms):] + arms[:pair % len(arms)]:
            result = {**run_arm(arm, args), "pair": pair}
            print(f"pair {pair} {arm}: first step at {result['to_first_step_s']:.1f} s, "
                  f"{result['steady_tokens_per_s']:,.0f} tokens/s", file=sys.stderr)
            runs.append(result)
    mixed = run_arm("interleaved", args) if args.interleave else None
    args.command = " ".join(["python benchmarks/compile_regions.py", "--steps", str(args.steps),
                             "--shapes", str(args.shapes), "--pairs", str(args.pairs),
                             "--interleave", str(args.interleave), "--threads", str(args.threads)]
                            + ([f"--backend {args.backend}"] if args.backend != "inductor" else [])
                            + ([f"--arms {args.arms}"] if args.arms != ",".join(ARMS) else []))
    if args.shown:
        args.command += f" --recipe {args.recipe}{args.shown}"
    info = machine(args.threads)
    summary = summarise(runs)
    write_report(args.out, report(args, info, runs, summary, mixed),
                 {"machine": info, "steps": args.steps, "shapes": args.shapes,
                  "pairs": args.pairs, "recipe": str(args.recipe_name),
                  "overrides": args.overrides, "runs": runs, "summary": summary,
                  "interleaved": mixed})
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
