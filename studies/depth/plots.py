"""The depth study's figures: loss curves per tier and the 18+18 diagnostics by layer.

Each figure says what it shows in its title and axis labels, so it reads on its own; the
training loss is the logged ``train/loss``, already the token mean over each logging interval.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..sweep_files import pyplot

__all__ = ["draw_all", "pyplot"]

TITLES = {
    "ceiling": "6+6, warm-up 4,000: Post-LN and Pre-LN, three seeds",
    "stability": "18+18, warm-up 4,000: six schemes to 4,500 updates",
    "nowarmup": "18+18 without warm-up: Post-LN and Pre-LN at a constant 5e-4",
    "nowarmup6": "6+6 without warm-up: Post-LN and Pre-LN at a constant 5e-4, three seeds",
}
DIAGNOSED = ("post", "pre", "deepnorm", "admin", "resi_dual", "subln")


def draw_all(cells: list[Any], plt: Any, folder: Path) -> dict[str, str]:
    """Every figure of the report, as {caption: path relative to docs/}."""
    figures = {}
    for tier, title in TITLES.items():
        tier_cells = [c for c in cells if c.tier == tier]
        if tier_cells:
            figures[f"Loss curves, {tier}"] = loss_curves(tier_cells, title, plt, folder,
                                                          f"loss_{tier}.png")
    deep = [c for c in cells if c.tier == "stability" and c.diagnose
            and c.precision == "bf16-mixed" and c.seed == "1"]
    pre = [c for c in cells if c.tier == "stability" and c.diagnose and c.scheme == "pre"
           and c.precision == "bf16-mixed"]
    if pre:
        figures["Pre-LN 18+18 at the end: the stream's norm and the branches' own norms"] = \
            stream_and_branches(pre, plt, folder)
    if deep:
        figures["Gradient norm by layer, 18+18, seed 1"] = by_layer(
            deep, plt, folder, "grad_norm", "gradient norm of the layer's parameters",
            ("init", "final"), "grad_norm_by_layer.png")
        figures["Stream norm by layer, 18+18, seed 1, at the end"] = by_layer(
            deep, plt, folder, "stream_norm", "stream norm after the layer", ("final",),
            "stream_norm_by_layer.png")
        figures["Feed-forward branch ratio by layer, 18+18, seed 1, at the end"] = by_layer(
            deep, plt, folder, "ratio_ffn", "||f(x)|| / ||x||, feed-forward", ("final",),
            "branch_ratio_by_layer.png")
    return figures


def loss_curves(cells: list[Any], title: str, plt: Any, folder: Path, name: str) -> str:
    """Training loss (interval mean) and validation loss side by side, a colour per cell."""
    fig, (train_ax, val_ax) = plt.subplots(1, 2, figsize=(12, 4.4), sharex=True)
    for k, cell in enumerate(cells):
        colour, label = f"C{k % 10}", cell.label
        if cell.status == "diverged":
            label += f" (diverged at step {cell.diverged_at})"
        if cell.on_gpu:  # another device and precision than the CPU cells beside it
            label += f" ({cell.precision}, GPU)"
        if cell.train:
            train_ax.plot(*zip(*cell.train, strict=True), color=colour, lw=1, label=label)
        if cell.val:
            val_ax.plot(*zip(*cell.val, strict=True), "--o", color=colour, ms=3, lw=1,
                        label=label)
    train_ax.set_title("training loss (mean over each 50-update interval, dropout on)",
                       fontsize=9)
    val_ax.set_title("validation loss (eval mode; label smoothing 0.1)", fontsize=9)
    for ax in (train_ax, val_ax):
        ax.set_xlabel("update")
        ax.set_ylabel("loss (nats per target token)")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, plt, folder, name)


def by_layer(cells: list[Any], plt: Any, folder: Path, metric: str, ylabel: str,
             whens: tuple[str, ...], name: str) -> str:
    """``metric`` by layer, a panel per stack and moment (at initialisation, at the end)."""
    fig, axes = plt.subplots(len(whens), 2, figsize=(11, 3.6 * len(whens)), squeeze=False)
    chosen = [c for c in cells if c.scheme in DIAGNOSED]
    for i, when in enumerate(whens):
        for j, stack in enumerate(("encoder", "decoder")):
            ax = axes[i, j]
            for k, cell in enumerate(chosen):
                values = cell.layer_metric(when, stack, metric)
                if values:
                    ax.plot(range(1, len(values) + 1), values, marker=".", color=f"C{k % 10}",
                            label=cell.label)
            moment = "at initialisation" if when == "init" else "at the last checkpoint"
            ax.set_title(f"{stack}, {moment}", fontsize=9)
            ax.set_yscale("log")
            ax.set_xlabel("layer")
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=6)
    fig.suptitle(f"{ylabel}, by layer (18+18, warm-up 4,000)")
    fig.tight_layout()
    return _save(fig, plt, folder, name)


def stream_and_branches(cells: list[Any], plt: Any, folder: Path) -> str:
    """Verdict 3's reading: by layer, the stream's norm after each layer and the
    self-attention branch's own norm (its ratio times the norm of the stream entering it, the
    previous layer's output: exact from layer 2 on), a line per seed; in the decoder also the
    cross-attention branch's norm where the cell measured it (branch_cross_attn)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for j, stack in enumerate(("encoder", "decoder")):
        ax = axes[j]
        for k, cell in enumerate(cells):
            stream = cell.layer_metric("final", stack, "stream_norm")
            ratio = cell.layer_metric("final", stack, "ratio_self_attn")
            branch = [r * s for r, s in zip(ratio[1:], stream[:-1], strict=True)]
            ax.plot(range(1, len(stream) + 1), stream, marker=".", color=f"C{k % 10}",
                    label=f"stream, seed {cell.seed}")
            ax.plot(range(2, len(branch) + 2), branch, "--", marker="x", ms=3,
                    color=f"C{k % 10}", label=f"self-attention branch, seed {cell.seed}")
            cross = cell.layer_metric("final", stack, "branch_cross_attn")
            if stack == "decoder" and any(cross):
                ax.plot(range(1, len(cross) + 1), cross, ":", marker="^", ms=3,
                        color=f"C{k % 10}", label=f"cross-attention branch, seed {cell.seed}")
        ax.set_title(f"{stack}, at the last checkpoint", fontsize=9)
        ax.set_yscale("log")
        ax.set_xlabel("layer")
        ax.set_ylabel("mean L2 norm per token")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    fig.suptitle("Pre-LN 18+18 (bf16-mixed): the stream grows; do the branches?")
    fig.tight_layout()
    return _save(fig, plt, folder, "stream_and_branch_norms.png")


def _save(fig: Any, plt: Any, folder: Path, name: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    fig.savefig(folder / name, dpi=110)
    plt.close(fig)
    return f"{folder.name}/{name}"
