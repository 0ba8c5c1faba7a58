"""A finished sweep's figures, drawn from its result rows and each cell's ``logs/csv/metrics.csv``:
``loss_curves.png`` (training and validation loss of every cell) and ``stability_map.png``
(final training loss of every cell on the grid, diverged cells marked).

The figures are built on the Agg canvas without pyplot (no global state, nothing to close), and
the builders return them so that what a figure shows can be checked, not only that it exists.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import LogFormatter

from normzoo.io.atomic import save_figure
from normzoo.recipe.grid import label
from normzoo.run.history import metrics_path, read_metrics

TRAIN_LOSS = "train/loss"  # already the token mean over each logging interval (tasks/base.py)
VAL_LOSS = "val/loss"
LOSS_LABEL = "loss (nats/token)"


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _points(rows: list[dict[str, str]], column: str) -> list[tuple[int, float]]:
    """``(step, value)`` of the rows that logged ``column``, finite values only: a diverged
    cell's NaN or inf has nothing to draw (the divergence is marked instead)."""
    points = []
    for row in rows:
        value = _number(row.get(column) or None)
        if value is not None and math.isfinite(value) and row.get("step"):
            points.append((int(float(row["step"])), value))
    return points


def shown(value: str) -> str:
    """A value as a reader wants it in a figure: a YAML mapping as ``admin (init: profiled)``,
    anything else as written."""
    from normzoo.recipe.reading import parse_yaml

    try:
        parsed = parse_yaml(value) if value.lstrip().startswith("{") else None
    except Exception:
        parsed = None
    if not isinstance(parsed, dict):
        return str(value)
    options = ", ".join(f"{k}: {v}" for k, v in parsed.items() if k != "name")
    return f"{parsed.get('name', '')} ({options})" if options else str(parsed.get("name", ""))


def _combo(row: dict[str, Any], keys: list[str]) -> str:
    return ", ".join(f"{label(k)}={shown(row[k])}" for k in keys)


def diverged(row: dict[str, Any]) -> bool:
    """Whether the cell diverged: recorded so, or its final training loss is not finite."""
    loss = _number(row.get("final_train_loss"))
    return row.get("status") == "diverged" or (loss is not None and not math.isfinite(loss))


def divergence_text(row: dict[str, Any]) -> str:
    step = row.get("diverged_at_step")
    return f"diverged at step {step}" if step not in (None, "") else "diverged"


def _figure(**kwargs: Any) -> Figure:
    figure = Figure(layout="constrained", **kwargs)
    FigureCanvasAgg(figure)
    return figure


def loss_curves_figure(rows: list[dict[str, Any]], keys: list[str], out: Path) -> Figure:
    """One panel per setting of the other axes (rows: the second axis, columns: the rest), one
    colour per value of the first axis, the same in every panel: the comparison the sweep is for
    (e.g. post vs pre vs deepnorm) sits within a panel. Training loss solid, validation loss
    dashed with markers, so a cell that overfits or stalls shows against its own training."""
    line_key, row_keys, col_keys = keys[0], keys[1:2], keys[2:]
    values = list(dict.fromkeys(r[line_key] for r in rows))
    panel_rows = list(dict.fromkeys(_combo(r, row_keys) for r in rows))
    panel_cols = list(dict.fromkeys(_combo(r, col_keys) for r in rows))
    fig = _figure(figsize=(1 + 4.6 * len(panel_cols), 1.2 + 3.2 * len(panel_rows)))
    axes = fig.subplots(len(panel_rows), len(panel_cols), squeeze=False, sharex=True,
                        sharey=True)
    handles: dict[Any, list[Line2D]] = {ax: [] for ax in axes.flat}
    for row in rows:
        ax = axes[panel_rows.index(_combo(row, row_keys)), panel_cols.index(_combo(row, col_keys))]
        colour = f"C{values.index(row[line_key]) % 10}"
        logged = read_metrics(metrics_path(out / row["cell"]))
        train, val = _points(logged, TRAIN_LOSS), _points(logged, VAL_LOSS)
        notes = [divergence_text(row)] if diverged(row) else []
        if not train and not val:
            notes.append("nothing logged")
        name = f"{label(line_key)}={shown(row[line_key])}"
        if notes:
            name += f" ({', '.join(notes)})"
        handle = Line2D([], [], color=colour, label=name)
        if train:
            handle, = ax.plot(*zip(*train, strict=True), "-", color=colour, linewidth=1.3,
                              label=name, gid=f"{row['cell']}/train")
            if diverged(row):  # where the logged curve ends
                ax.plot(*train[-1], "x", color=colour, markersize=9, markeredgewidth=2,
                        gid=f"{row['cell']}/diverged")
        if val:
            ax.plot(*zip(*val, strict=True), "--o", color=colour, markersize=4, linewidth=1,
                    gid=f"{row['cell']}/val")
        handles[ax].append(handle)
    styles = [Line2D([], [], color="0.35", linestyle="-", label="training (interval mean)"),
              Line2D([], [], color="0.35", linestyle="--", marker="o", markersize=4,
                     label="validation")]
    for (i, name), (j, col) in itertools.product(enumerate(panel_rows), enumerate(panel_cols)):
        ax = axes[i, j]
        ax.set_title(", ".join(t for t in (name, col) if t)
                     or f"{label(line_key)}: " + ", ".join(shown(v) for v in values), fontsize=10)
        ax.set_yscale("log")
        # Plain numbers (3, 4, 6) on the log axis, not 3×10⁰.
        ax.yaxis.set_major_formatter(LogFormatter())
        ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False))
        ax.grid(alpha=0.3, which="both")
        ax.legend(handles=[*handles[ax], *styles], fontsize=8, loc="best")
        if i == len(panel_rows) - 1:
            ax.set_xlabel("update step")
        if j == 0:
            ax.set_ylabel(LOSS_LABEL)
    fig.suptitle(f"sweep {out.name}: training loss (interval mean) and validation loss")
    return fig


def stability_map_figure(rows: list[dict[str, Any]], keys: list[str], out: Path) -> Figure:
    """Every cell on a grid (columns: the last axis, rows: the others), coloured by its final
    training loss on a scale from the sweep's lowest (green) to its highest (red), with the
    value and the task metric written in; a diverged cell grey with its step. A run that stalls
    on a plateau shows red without diverging."""
    x_key, y_keys = keys[-1], keys[:-1]
    xs = list(dict.fromkeys(r[x_key] for r in rows))
    ys = list(dict.fromkeys(_combo(r, y_keys) or "all" for r in rows))
    losses = [_number(r.get("final_train_loss")) for r in rows if not diverged(r)]
    losses = [loss for loss in losses if loss is not None]
    low, high = (min(losses), max(losses)) if losses else (0.0, 1.0)
    if high <= low:
        low, high = low - 0.5, high + 0.5
    colours = _colour_map()
    norm = Normalize(low, high)
    grid = [[math.nan] * len(xs) for _ in ys]
    empty = set(itertools.product(range(len(xs)), range(len(ys))))
    fig = _figure(figsize=(3.2 + 1.7 * len(xs), 1.9 + 0.8 * len(ys)))
    ax = fig.subplots()
    for row in rows:
        x, y = xs.index(row[x_key]), ys.index(_combo(row, y_keys) or "all")
        loss = _number(row.get("final_train_loss"))
        empty.discard((x, y))
        if diverged(row):
            text, ink = divergence_text(row).replace(" at", "\nat", 1), "darkred"
        elif loss is None:
            text, ink = "no loss\nlogged", "black"
        else:
            grid[y][x] = loss
            red, green, blue, _ = colours(norm(loss))
            ink = "white" if 0.299 * red + 0.587 * green + 0.114 * blue < 0.5 else "black"
            text = f"train {loss:.3g}"
            if _number(row.get("metric_value")) is not None:
                text += f"\n{row['metric'].replace('/', ' ')} {float(row['metric_value']):.3g}"
        ax.text(x, y, text, ha="center", va="center", fontsize=8, color=ink)
    for x, y in empty:  # a cell of the grid not (yet) finished
        ax.text(x, y, "not run", ha="center", va="center", fontsize=8, color="0.4")
    image = ax.imshow(grid, cmap=colours, norm=norm, aspect="auto")
    fig.colorbar(image, ax=ax, label="final training loss\n(last interval mean, nats/token)")
    ax.set_xticks(range(len(xs)), [shown(x) for x in xs], fontsize=8)
    ax.set_xlabel(label(x_key))
    ax.set_yticks(range(len(ys)), [_combo_value(y, y_keys) for y in ys], fontsize=8)
    ax.set_ylabel(", ".join(label(k) for k in y_keys))
    ax.set_title("grey: diverged or not run", fontsize=8)
    fig.suptitle(f"sweep {out.name}: final training loss per cell")
    return fig


def _colour_map() -> Any:
    from matplotlib import colormaps

    return colormaps["RdYlGn_r"].with_extremes(bad="0.85")  # grey: diverged or not run


def _combo_value(combo: str, keys: list[str]) -> str:
    """A row's tick: the bare value when one axis is on the rows (its label names it)."""
    return combo.split("=", 1)[1] if len(keys) == 1 else combo


def plot_loss_curves(rows: list[dict[str, Any]], keys: list[str], out: Path) -> Figure:
    """Write ``OUT/loss_curves.png`` (:func:`loss_curves_figure`) and return the figure."""
    fig = loss_curves_figure(rows, keys, out)
    save_figure(fig, out / "loss_curves.png")
    return fig


def plot_stability_map(rows: list[dict[str, Any]], keys: list[str], out: Path) -> Figure:
    """Write ``OUT/stability_map.png`` (:func:`stability_map_figure`) and return the figure."""
    fig = stability_map_figure(rows, keys, out)
    save_figure(fig, out / "stability_map.png")
    return fig


def plot(rows: list[dict[str, Any]], keys: list[str], out: Path) -> None:
    """Both of a sweep's figures, into ``out``."""
    plot_loss_curves(rows, keys, out)
    plot_stability_map(rows, keys, out)
