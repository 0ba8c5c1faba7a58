"""``normzoo diagnose``: the probes on one training batch, at initialisation or at a checkpoint.

Several variants (e.g. ``--vary model.residual=post,pre,deepnorm``) are measured on the *same*
batch and drawn on the same axes, so what a scheme does to gradients and the stream by depth
can be compared directly.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from normzoo.data.batching import token_budget_batches
from normzoo.diagnostics.probes import Measurements, gradient_norms, probe
from normzoo.io.atomic import save_figure
from normzoo.recipe import Recipe


@dataclass
class Variant:
    """What to measure: a recipe (at initialisation) or a loaded checkpoint."""

    label: str
    recipe: Recipe
    state_dict: dict[str, torch.Tensor] | None = None
    tokenizer_json: str | None = None


def recipe_variants(data: dict, vary: list[str], name: str,
                    resolve: Callable[[dict], Recipe]) -> list[Variant]:
    """The variants ``--vary`` asks for, as a sweep's ``--set`` axes (:mod:`.grid`): each
    ``KEY=V1,V2,...`` is one axis (its values split on the commas outside brackets, so a value
    may be a mapping such as ``{name: admin, init: profiled}``; tied keys ``K1,K2=...`` move
    together), and every combination of the axes is one variant, labelled by its values.
    Without ``--vary``, the recipe ``data`` itself, labelled ``name``. ``resolve`` turns a
    recipe's data (overrides applied) into the recipe measured."""
    from normzoo import recipe as recipes
    from normzoo.recipe.grid import cell_overrides, cells, label, parse_grid

    if not vary:
        return [Variant(name, resolve(data))]
    grid = parse_grid(vary, "--vary")
    return [Variant(", ".join(f"{label(axis)}={value}" for axis, value in cell.items()),
                    resolve(recipes.apply_overrides(data, cell_overrides(cell))))
            for cell in cells(grid)]


def first_batch(recipe: Recipe, tokenizer, variants: list[Variant] | None = None) -> dict:
    """The first training batch of the recipe's seeded epoch 0. Each of ``variants`` measured
    at initialisation gets what only the data can say filled in (a classifier's label set,
    :meth:`~normzoo.contract.Task.resolved`), from these data, as a run records it: without
    it ``normzoo diagnose recipes/classify.yaml`` could build no model. A checkpoint's recipe
    holds its run's already."""
    from normzoo.contract import task_of
    from normzoo.tasks.datamodule import TextDataModule

    data = TextDataModule(recipe, tokenizer)
    data.prepare_data()
    for variant in variants or []:
        task = task_of(variant.recipe)
        if variant.state_dict is None and task.resolves_from_data:
            variant.recipe = task.resolved(variant.recipe, data)
    if recipe.data.streaming:
        return next(iter(data.train_dataloader()))
    dataset = data.dataset("train")
    batch = token_budget_batches(dataset.lengths(), recipe.data.max_tokens, seed=recipe.seed)[0]
    return dataset.collate(batch)


def measure(variant: Variant, tokenizer, batch: dict) -> Measurements:
    """Forward and backward of ``variant`` on ``batch`` (dropout off), with the probes on."""
    from normzoo.contract import module_class

    torch.manual_seed(variant.recipe.seed)
    task = module_class(variant.recipe.task)(variant.recipe, tokenizer.vocab_size,
                                           tokenizer.to_str())
    if variant.state_dict is not None:
        task.load_state_dict(variant.state_dict)
    elif task.model.scheme.needs_data_init(task.model):  # e.g. Admin ``init: profiled``,
        task.data_init(batch)  # set from the batch at init, as training would
    model = task.model.eval()  # no dropout: the measurement is of the weights, not the noise
    with probe(model) as found:
        loss = task.loss_terms(batch).mean
    loss.backward()
    found.grad_norm = gradient_norms(model)
    return found


CSV_FIELDS = ["when", "stack", "layer", "grad_norm", "stream_norm", "layer_cosine",
              "ratio_self_attn", "ratio_cross_attn", "ratio_ffn",
              "branch_self_attn", "branch_cross_attn", "branch_ffn"]


def csv_rows(results: dict[str, Measurements]) -> list[dict]:
    """One row per variant and layer: the layer metrics as ``table`` shows them, unrounded."""
    rows = []
    for label, found in results.items():
        for name, norm in found.stream_norm.items():
            stack, layer, _ = depth_index(name)
            rows.append({"when": label, "stack": stack, "layer": layer,
                         "grad_norm": found.grad_norm.get(name, ""), "stream_norm": norm,
                         "layer_cosine": found.layer_cosine.get(name, ""),
                         **{f"{column}_{k}": values.get(f"{name}.{k}", "")
                            for column, values in (("ratio", found.branch_ratio),
                                                   ("branch", found.branch_norm))
                            for k in ("self_attn", "cross_attn", "ffn")}})
    return rows


def diagnose_run(run_dir: Path) -> list[dict]:
    """A trained run measured at initialisation (its recipe and seed) and at its last
    checkpoint, on the same first training batch: ``diagnose.csv`` and ``diagnose.md`` in
    ``run_dir`` (what ``normzoo sweep --diagnose`` writes for every cell).

    A last checkpoint with non-finite weights (a diverged run) is measured at init only."""
    import csv
    import io

    from normzoo.checkpoints.reading import CheckpointError
    from normzoo.data.train_tokenizer import recipe_tokenizer
    from normzoo.inference.load import load_checkpoint
    from normzoo.io.atomic import atomic_write_text

    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    variants, note = [], ""
    try:
        loaded = load_checkpoint(checkpoint)
        recipe, tokenizer = loaded.recipe, loaded.tokenizer
        state = {f"model.{k}": v for k, v in loaded.model.state_dict().items()}
        variants = [Variant("init", recipe), Variant("final", recipe, state)]
    except CheckpointError as error:
        from normzoo import recipe as recipes

        recipe = recipes.load(run_dir / "recipe.yaml")
        tokenizer = recipe_tokenizer(recipe)
        variants, note = [Variant("init", recipe)], f"\nnot measured at the end: {error}\n"
    batch = first_batch(recipe, tokenizer, variants)
    results = {v.label: measure(v, tokenizer, batch) for v in variants}
    rows = csv_rows(results)
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS)
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(run_dir / "diagnose.csv", out.getvalue(), "diagnostics table")
    atomic_write_text(run_dir / "diagnose.md", table(results) + "\n" + note, "diagnostics table")
    return rows


def depth_index(name: str) -> tuple[str, int, str]:
    """``decoder.layers.3.ffn`` -> (``decoder``, 3, ``ffn``)."""
    match = re.match(r"(encoder|decoder)\.layers\.(\d+)\.?(.*)", name)
    if not match:
        return name, -1, ""
    return match.group(1), int(match.group(2)), match.group(3)


def table(results: dict[str, Measurements]) -> str:
    """A Markdown table: one row per layer, the layer metrics of every variant."""
    lines = []
    for label, found in results.items():
        lines.append(f"\n### {label}\n")
        lines.append("| layer | grad norm | stream norm | cos(in, out) | "
                     "branch ratio self_attn | cross_attn | ffn |")
        lines.append("|---|---|---|---|---|---|---|")
        for name, norm in found.stream_norm.items():
            ratios = [found.branch_ratio.get(f"{name}.{k}") for k in
                      ("self_attn", "cross_attn", "ffn")]
            cells = ["" if r is None else f"{r:.3f}" for r in ratios]
            lines.append(f"| {name} | {found.grad_norm.get(name, 0.0):.4g} | {norm:.3f} | "
                         f"{found.layer_cosine[name]:.3f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


PLOTS = {
    "grad_norm_vs_depth.png": ("grad_norm", "", "gradient norm of the layer", True),
    "stream_norm_vs_depth.png": ("stream_norm", "", "stream norm after the layer (per copy)",
                                 True),
    # On the hypersphere (nGPT) the norm is 1 everywhere; the angle a layer turns the stream by
    # is what changes with depth, and it reads the same for every scheme.
    "layer_cosine_vs_depth.png": ("layer_cosine", "", "cos(layer's input, its output)", False),
    "branch_ratio_vs_depth.png": ("branch_ratio", "ffn", "||f(x)|| / ||x||, feed-forward", True),
}


def plot(results: dict[str, Measurements], out: Path) -> list[Path]:
    """One PNG per metric: depth on x, one line per variant, one panel per stack."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    written = []
    present = {depth_index(n)[0] for f in results.values() for n in f.stream_norm}
    stacks = [s for s in ("encoder", "decoder") if s in present]
    for filename, (metric, sublayer, ylabel, log) in PLOTS.items():
        fig, axes = plt.subplots(1, len(stacks), figsize=(5.5 * len(stacks), 4), squeeze=False)
        for ax, stack in zip(axes[0], stacks, strict=True):
            positive = False
            for label, found in results.items():
                points = sorted(
                    (layer, value) for name, value in getattr(found, metric).items()
                    for s, layer, sub in [depth_index(name)] if s == stack and sub == sublayer
                )
                if points:
                    ax.plot([p[0] + 1 for p in points], [p[1] for p in points], marker="o",
                            label=label)
                    positive = positive or any(p[1] > 0 for p in points)
            ax.set_title(stack)
            ax.set_xlabel("layer")
            ax.set_ylabel(ylabel)
            if log and positive:  # all zero (ReZero's branches at init): a linear axis
                ax.set_yscale("log")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / filename
        save_figure(fig, path)
        plt.close(fig)
        written.append(path)
    return written
