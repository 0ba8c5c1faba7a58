"""Where a training step's time goes, op by op: the depth study's model (d_model 128, 6+6 layers,
a 6,000-entry vocabulary, batches of up to 2,048 tokens of Multi30k) through the task's own
loss and normzoo's own AdamW (``normzoo.tasks.optim``), in fp32 and in bf16 autocast, one
torch thread.

    python benchmarks/step_profile.py [--steps 6] [--threads 1] [--out results/step-profile-cpu.md]
                                      [--recipe RECIPE [KEY=VALUE ...]]

Each op's *self* time (torch's profiler, the time inside the op and not in the ops it calls)
is put in the phase it ran in (forward and loss, backward, optimizer: ``record_function``
ranges around each) and in a category: matrix products, casts and copies, norms, softmax,
dropout, element-wise arithmetic, reductions, indexing and the rest. The report gives the
milliseconds per step of each, and the ops that cost most in bf16, so that "bf16 made the
products cheap, the rest did not shrink" can be read off per op. The machine (CPU family and
model, whether it has AMX) is named: the split differs between CPUs with and without AMX.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path
from typing import Any

from common import MULTI30K, REPO, RESULTS, machine, machine_lines, table, write_report

RECIPE = REPO / "recipes" / "studies" / "multi30k_depth.yaml"
PHASES = ("forward", "backward", "optimizer")
# Categories by op name, tried in this order (the first that matches wins).
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("matrix products", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
                         "aten::_scaled_dot_product")),
    ("casts and copies", ("aten::copy_", "aten::_to_copy", "aten::to", "aten::clone",
                          "aten::contiguous", "aten::cat", "aten::empty_strided")),
    ("norms", ("aten::native_layer_norm", "aten::_fused_rms_norm", "aten::rsqrt",
               "aten::layer_norm", "aten::rms_norm")),
    ("softmax", ("aten::_softmax", "aten::softmax", "aten::_log_softmax", "aten::exp")),
    ("dropout", ("aten::random_", "aten::bernoulli", "aten::native_dropout", "aten::ge",
                 "aten::masked_fill")),
    ("optimizer kernels", ("aten::_foreach", "aten::_fused_adam")),
    ("reductions", ("aten::sum", "aten::mean", "aten::amax", "aten::max", "aten::norm",
                    "aten::linalg_vector_norm")),
    ("element-wise", ("aten::mul", "aten::add", "aten::sub", "aten::div", "aten::threshold",
                      "aten::relu", "aten::gelu", "aten::silu", "aten::clamp", "aten::sqrt",
                      "aten::lerp", "aten::addc", "aten::neg", "aten::where", "aten::log")),
    ("indexing", ("aten::embedding", "aten::index", "aten::gather", "aten::scatter",
                  "aten::masked_select", "aten::nonzero")),
)


def category(name: str) -> str:
    """The category of the op ``name`` (``other`` for autograd bookkeeping, views and the rest)."""
    for label, prefixes in CATEGORIES:
        if name.startswith(prefixes):
            return label
    return "other"


def _phase(event: Any) -> str | None:
    """The ``## phase`` range an event ran inside, if any."""
    parent = event
    while parent is not None:
        if parent.name.startswith("## "):
            return parent.name[3:]
        parent = parent.cpu_parent
    return None


def profile_steps(precision: str, steps: int, recipe_path: Path, overrides: list[str]
                  ) -> dict[str, Any]:
    """Milliseconds per step by phase and category, and by op, over ``steps`` profiled steps
    (after two unprofiled ones) of the study's first batches."""
    import torch
    from torch.profiler import profile, record_function

    from normzoo.recipe import load
    from normzoo.tasks.datamodule import TextDataModule
    from normzoo.tasks.optim import build_optimizer
    from normzoo.tasks.translation.module import TranslationModule

    recipe = load(recipe_path, overrides)
    module = TextDataModule(recipe, None, show_progress=False)
    module.setup("fit")
    loader = iter(module.train_dataloader())
    batches = [next(loader) for _ in range(steps + 2)]
    torch.manual_seed(0)
    task = TranslationModule(recipe, module.tokenizer.vocab_size).train()
    optimizer, _ = build_optimizer(task.model, recipe.optim, recipe.trainer.max_steps)
    smoothing = recipe.optim.label_smoothing

    def step(batch: Any) -> None:
        with record_function("## forward"):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                terms = task.loss_terms(batch, smoothing)
            loss = terms.loss_sum / terms.tokens
        with record_function("## backward"):
            loss.backward()
        with record_function("## optimizer"):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    for batch in batches[:2]:
        step(batch)
    with profile() as prof:
        for batch in batches[2:]:
            step(batch)
    by_phase: dict[str, collections.Counter] = {p: collections.Counter() for p in PHASES}
    by_op: collections.Counter = collections.Counter()
    calls: collections.Counter = collections.Counter()
    for event in prof.events():
        phase = _phase(event)
        if phase is None or event.name.startswith("## "):
            continue
        ms = event.self_cpu_time_total / 1e3 / steps
        by_phase[phase][category(event.name)] += ms
        by_op[(phase, event.name)] += ms
        calls[(phase, event.name)] += 1
    ops = [{"phase": phase, "op": name, "ms": ms, "calls": calls[(phase, name)] / steps}
           for (phase, name), ms in by_op.most_common()]
    return {"phases": {p: dict(c) for p, c in by_phase.items()},
            "step_ms": sum(sum(c.values()) for c in by_phase.values()), "ops": ops}


def report(info: dict[str, Any], results: dict[str, dict[str, Any]], args: argparse.Namespace,
           top: int = 15) -> list[str]:
    labels = [label for label, _ in CATEGORIES] + ["other"]
    steps = args.steps
    lines = ["# One training step, op by op", "", *machine_lines(info), "",
             f"`python benchmarks/step_profile.py --steps {steps} --threads {info['threads']}"
             f"{args.shown}`: `{args.recipe_name}`, forward and loss, backward and "
             "normzoo's AdamW, no Lightning loop; self time of each op, ms per step "
             f"(mean of {steps} profiled steps after two unprofiled ones; the profiler's own "
             "cost per op included).", ""]
    rows = []
    for label in labels:
        row = [label]
        for precision in results:
            phases = results[precision]["phases"]
            row += [f"{phases[p].get(label, 0.0):.1f}" for p in PHASES]
        rows.append(row)
    rows.append(["**step**"] + [f"**{sum(results[pr]['phases'][p].values()):.1f}**"
                                for pr in results for p in PHASES])
    header = ["category"] + [f"{pr} {p}" for pr in results for p in PHASES]
    lines += [*table(header, rows), ""]
    step = {pr: results[pr]["step_ms"] for pr in results}
    if "fp32" in step and "bf16" in step:
        matmul = {pr: sum(results[pr]["phases"][p].get("matrix products", 0.0) for p in PHASES)
                  for pr in results}
        lines += [f"- Step: fp32 {step['fp32']:.0f} ms, bf16 {step['bf16']:.0f} ms "
                  f"({step['fp32'] / step['bf16']:.2f}x). Matrix products: {matmul['fp32']:.0f} "
                  f"against {matmul['bf16']:.0f} ms ({matmul['fp32'] / matmul['bf16']:.2f}x); "
                  f"everything else: {step['fp32'] - matmul['fp32']:.0f} against "
                  f"{step['bf16'] - matmul['bf16']:.0f} ms.", ""]
    for precision in results:
        lines += [f"## The {top} costliest ops in {precision}", ""]
        costliest = [[o["phase"], f"`{o['op']}`", f"{o['ms']:.1f}", f"{o['calls']:.0f}"]
                     for o in results[precision]["ops"][:top]]
        lines += [*table(["phase", "op", "ms per step", "calls per step"], costliest), ""]
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--recipe", type=Path, default=RECIPE,
                        help="the model and data to profile (default: the depth study's)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="recipe settings (default for the study's recipe: "
                        "data.dir=../shared/data/multi30k)")
    parser.add_argument("--out", type=Path, default=RESULTS / "step-profile-cpu.md")
    args = parser.parse_args(argv)
    study = args.recipe.resolve() == RECIPE
    if study and not args.overrides:
        args.overrides = [f"data.dir={MULTI30K}"]
    args.recipe_name = RECIPE.relative_to(REPO) if study else args.recipe
    args.shown = "" if study else f" --recipe {args.recipe} {' '.join(args.overrides)}".rstrip()
    import torch

    from normzoo.run.allocator import keep_freed_memory

    torch.set_num_threads(args.threads)
    malloc = keep_freed_memory()  # as a training run on a CPU does (NORMZOO_CPU_MALLOC)
    results = {}
    for precision in args.precisions.split(","):
        results[precision] = profile_steps(precision, args.steps, args.recipe, args.overrides)
        print(f"{precision}: {results[precision]['step_ms']:.0f} ms per step", file=sys.stderr)
    info = machine(args.threads)
    from normzoo.run.machine import _cpu_flags

    info["amx"], info["cpu_malloc"] = "amx_bf16" in _cpu_flags(), malloc
    lines = report(info, results, args)
    lines[2] += f"; AMX: {'yes' if info['amx'] else 'no'}; malloc: {malloc}"
    write_report(args.out, lines, {"machine": info, "steps": args.steps, "recipe": str(
        args.recipe_name), "overrides": args.overrides, "results": results})
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
