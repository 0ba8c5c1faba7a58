"""The precision study's figure: training and validation loss by step, a panel for each depth
and scheme, a colour for each precision."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..sweep_files import pyplot
from .plan import DEPTH, PRECISIONS, SCHEMES, STUDIES
from .verdicts import group


def _smoothed(points: list[tuple[int, float]], width: int = 4) -> list[tuple[int, float]]:
    out = []
    for i in range(len(points)):
        window = points[max(0, i - width + 1) : i + 1]
        out.append((points[i][0], sum(v for _, v in window) / len(window)))
    return out


def plot_losses(cells: list[Any], folder: Path) -> str | None:
    if not cells:
        return None
    plt = pyplot()
    panels = [(s, k) for s in STUDIES for k in SCHEMES]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), sharey=True)
    for ax, (study, scheme) in zip(axes, panels, strict=True):
        for i, precision in enumerate(PRECISIONS):
            for cell in group(cells, study, scheme, precision):
                colour = f"C{i}"
                train = _smoothed(cell.losses("train_loss"))
                if train:
                    ax.plot(*zip(*train, strict=True), color=colour, alpha=0.5, lw=1,
                            label=f"{PRECISIONS[precision]} train" if cell.seed == "1" else None)
                val = cell.losses("val_loss")
                if val:
                    ax.plot(*zip(*val, strict=True), "o--", color=colour, ms=4, lw=1,
                            label=f"{PRECISIONS[precision]} validation"
                            if cell.seed == "1" else None)
        ax.set_title(f"{SCHEMES[scheme]} {DEPTH[study]}", fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    axes[0].set_ylabel("loss")
    fig.tight_layout()
    folder.mkdir(parents=True, exist_ok=True)
    fig.savefig(folder / "loss_curves.png", dpi=110)
    plt.close(fig)
    return "precision/loss_curves.png"
