"""A study page's figures, per part: validation loss per setting with the band its seeds span
(``curves-PART.png``), the stability map (every setting x seed: finished, diverged at which
step, failed or missing; ``stability-PART.png``) and, where the part diagnosed its cells, the
stream and gradient norms by layer at the last checkpoint (``layers-PART.png``).

Drawn on the Agg canvas without pyplot (no global state), written whole or not at all."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from normzoo.io.atomic import save_figure
from normzoo.study.cells import number
from normzoo.study.spec import setting_text

if TYPE_CHECKING:
    from normzoo.study.results import PartResult


def draw(part: PartResult, out: Path) -> dict[str, str]:
    """The figures of one part, as ``{what: file name}`` (only those with something to show)."""
    drawn = {}
    for what, builder in (("curves", curves), ("stability", stability), ("layers", layers)):
        figure = builder(part)
        if figure is not None:
            name = f"{what}-{part.name}.png"
            FigureCanvasAgg(figure)
            save_figure(figure, out / name)
            drawn[what] = name
    return drawn


def _band(runs: list[list[tuple[int, float]]]) -> tuple[list[int], list[float], list[float],
                                                        list[float]]:
    """The steps every run logged, with the runs' mean, lowest and highest value there."""
    steps = sorted(set.intersection(*(set(dict(r)) for r in runs))) if runs else []
    values = [[dict(r)[s] for r in runs] for s in steps]
    return (steps, [sum(v) / len(v) for v in values], [min(v) for v in values],
            [max(v) for v in values])


def curves(part: PartResult) -> Figure | None:
    """Validation loss against the update, one line per setting (the seeds' mean) in the band
    from its lowest to its highest seed."""
    return curves_of([(setting_text(setting), part.cells.finished(index))
                      for index, setting in enumerate(part.cells.settings)],
                     part.part.title or part.name)


def across(baseline: tuple[PartResult, dict], system: tuple[PartResult, dict],
           out: Path) -> str | None:
    """The curves of a comparison across two parts, both sides in one figure; its file name."""
    groups = []
    for result, setting in (baseline, system):
        own = {k: v for k, v in setting.items() if k != "part"}
        index = result.cells.settings.index(own)
        groups.append((result.name + (f" ({setting_text(own)})" if own else ""),
                       result.cells.finished(index)))
    figure = curves_of(groups, f"{groups[1][0]} against {groups[0][0]}")
    if figure is None:
        return None
    name = f"curves-{system[0].name}-vs-{baseline[0].name}.png"
    FigureCanvasAgg(figure)
    save_figure(figure, out / name)
    return name


def curves_of(groups: list[tuple[str, list[Any]]], title: str) -> Figure | None:
    """One line per group of cells (the seeds' mean of their validation loss), in the band
    from the lowest to the highest seed."""
    figure = Figure(figsize=(7, 4.2), layout="constrained")
    axes = figure.add_subplot()
    drawn = False
    for text, cells in groups:
        runs = [c.curve("val_loss") for c in cells]
        runs = [r for r in runs if r]
        steps, mean, low, high = _band(runs)
        if not steps:
            continue
        line, = axes.plot(steps, mean, marker="o", markersize=3,
                          label=f"{text} ({len(runs)} seed{'s' * (len(runs) > 1)})")
        if len(runs) > 1:
            axes.fill_between(steps, low, high, color=line.get_color(), alpha=0.2)
        drawn = True
    if not drawn:
        return None
    axes.set_xlabel("update")
    axes.set_ylabel("validation loss (nats/token)")
    axes.set_title(f"{title}: validation loss (band: the seeds' range)", fontsize=10)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    return figure


STATUS_COLOURS = {"ok": "#4c9a5b", "diverged": "#c0392b", "failed": "#7f7f7f",
                  "missing": "#ffffff"}


def stability(part: PartResult) -> Figure | None:
    """Every setting x seed as a square: trained (green), diverged (red, with the step),
    failed (grey) or missing (white)."""
    settings, seeds = part.cells.settings, [str(s) for s in part.part.seeds]
    labels = [setting_text(s) for s in settings]
    title = f"{part.part.title or part.name}: which cells trained"
    # Wide enough for the longest label and the title (about 0.07 inch a character at 8 pt).
    width = max(0.9 * len(seeds) + 0.075 * max(map(len, labels)) + 0.6, 0.1 * len(title) + 0.4)
    figure = Figure(figsize=(width, 1.0 + 0.45 * len(settings)), layout="constrained")
    axes = figure.add_subplot()
    for row, _ in enumerate(settings):
        found = {c.seed: c for c in part.cells.cells.get(row, [])}
        for column, seed in enumerate(seeds):
            cell = found.get(seed)
            status = cell.status if cell else "missing"
            axes.add_patch(_square(column, row, STATUS_COLOURS.get(status, "#ffffff")))
            step = cell.record.get("diverged_at_step", "?") if cell else "?"
            text = {"ok": "trained", "diverged": f"diverged\n@{step}"}.get(status, status)
            axes.text(column, row, text, ha="center", va="center", fontsize=7)
    axes.set_xlim(-0.5, len(seeds) - 0.5)
    axes.set_ylim(len(settings) - 0.5, -0.5)
    axes.set_xticks(range(len(seeds)), [f"seed {s}" for s in seeds])
    axes.set_yticks(range(len(settings)), labels, fontsize=8)
    axes.set_title(title, fontsize=10)
    return figure


def _square(x: int, y: int, colour: str) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((x - 0.45, y - 0.45), 0.9, 0.9, facecolor=colour, edgecolor="black",
                     linewidth=0.5)


def layers(part: PartResult) -> Figure | None:
    """The stream norm and gradient norm after each layer at the last checkpoint, per setting
    (the seeds' mean), one panel per measure and stack."""
    if not part.part.diagnose:
        return None
    measured: dict[tuple[str, str], dict[str, dict[int, list[float]]]] = {}
    for index, setting in enumerate(part.cells.settings):
        for cell in part.cells.finished(index):
            for row in cell.diagnose():
                if row.get("when") == "init":
                    continue
                for measure in ("stream_norm", "grad_norm"):
                    value = number(row.get(measure))
                    if value is not None:
                        layer_values = measured.setdefault((measure, row.get("stack", "")), {})
                        layer_values.setdefault(setting_text(setting), {}).setdefault(
                            int(row.get("layer") or 0), []).append(value)
    if not measured:
        return None
    figure = Figure(figsize=(4.2 * len(measured), 3.6), layout="constrained")
    for i, ((measure, stack), by_setting) in enumerate(sorted(measured.items())):
        axes = figure.add_subplot(1, len(measured), i + 1)
        for name, by_layer in by_setting.items():
            layers_ = sorted(by_layer)
            axes.plot(layers_, [sum(by_layer[k]) / len(by_layer[k]) for k in layers_],
                      marker="o", markersize=3, label=name)
        axes.set_xlabel("layer")
        axes.set_title(f"{stack} {measure.replace('_', ' ')}", fontsize=9)
        axes.set_yscale("log")
        axes.grid(alpha=0.3)
        axes.legend(fontsize=7)
    return figure
