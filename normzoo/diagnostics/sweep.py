"""``normzoo sweep``: train every cell of a grid of overrides, one after another, resumably.

Each cell is an ordinary run in ``OUT/<cell>/``; a finished cell leaves ``cell.json`` and is
skipped when the sweep is started again. A cell that diverges is recorded (with the step) and
the sweep goes on. Results: ``results.csv``, ``results.md``, ``loss_curves.png`` and
``stability_map.png`` in ``OUT``.
"""

from __future__ import annotations

import csv
import functools
import io
import itertools
import json
import re
from pathlib import Path
from typing import Any

from normzoo.atomic import atomic_write_text, save_figure
from normzoo.diagnostics.launch import Slurm, run_cells
from normzoo.diagnostics.seeds import over_seeds
from normzoo.errors import ConfigError, Problem

FIELDS = ["cell", "status", "diverged_at_step", "steps", "stopped", "final_train_loss", "metric",
          "metric_value", "test_bleu"]


def split_values(values: str) -> list[str]:
    """``V1,V2,...`` split on the commas outside brackets, so that a value may be a YAML
    mapping or list: ``deepnorm,{name: admin, init: profiled}`` is two values."""
    parts, depth, current = [], 0, ""
    for char in values:
        depth += (char in "[{") - (char in "]}")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [v.strip() for v in [*parts, current] if v.strip()]


def parse_grid(settings: list[str]) -> list[tuple[str, list[str]]]:
    """``["model.residual=post,pre", "optim.warmup_steps=0,4000"]`` -> keys with their values.

    Several keys before the ``=`` move together: ``model.encoder_layers,model.decoder_layers=6,18``
    is one axis (6+6 and 18+18 layers). A value may be a YAML mapping, e.g. a scheme with its
    options: ``model.residual=deepnorm,{name: admin, init: profiled}``.
    """
    grid = []
    for text in settings:
        key, _, values = text.partition("=")
        if not key or not values:
            raise ConfigError([Problem(text, "--set must look like KEY=V1,V2,...")],
                              "invalid sweep")
        grid.append((key.strip(), split_values(values)))
    return grid


def cells(grid: list[tuple[str, list[str]]]) -> list[dict[str, str]]:
    """Every combination, as ``{axis: value}`` (an axis may name several tied keys)."""
    return [dict(zip([k for k, _ in grid], combo, strict=True))
            for combo in itertools.product(*[values for _, values in grid])]


def label(axis: str) -> str:
    """Short name of an axis: its first key's last part (``model.residual`` -> ``residual``)."""
    return axis.split(",")[0].split(".")[-1]


def cell_overrides(cell: dict[str, str]) -> list[str]:
    return [f"{key.strip()}={value}" for axis, value in cell.items() for key in axis.split(",")]


def value_name(value: str) -> str:
    """A value as a name: a mapping by its entries (``{name: admin, init: profiled}`` ->
    ``admin-init-profiled``), anything else as written."""
    from normzoo.recipe.reading import parse_yaml

    try:
        parsed = parse_yaml(value) if value.lstrip().startswith("{") else None
    except Exception:
        parsed = None
    if isinstance(parsed, dict):
        return "-".join([str(parsed.get("name", "")),
                         *(f"{k}-{v}" for k, v in parsed.items() if k != "name")]).strip("-")
    return value


def cell_name(cell: dict[str, str]) -> str:
    """A folder-safe name: ``{model.residual: post, model.encoder_layers: 6}`` ->
    ``residual-post_encoder_layers-6``."""
    parts = [f"{label(key)}-{value_name(value)}" for key, value in cell.items()]
    return re.sub(r"[^A-Za-z0-9_.-]", "_", "_".join(parts))


def final_train_loss(run_dir: Path) -> float | None:
    path = run_dir / "logs" / "csv" / "metrics.csv"
    if not path.is_file():
        return None
    with open(path, newline="", encoding="utf-8") as f:
        losses = [float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")]
    return losses[-1] if losses else None


def run_cell(recipe_path: Path, base_overrides: list[str], cell: dict[str, str], out: Path,
             steps: int | None, diagnose: bool = False) -> dict[str, Any]:
    """Train one cell (unless it already finished) and return its result row; with
    ``diagnose``, also measure it at initialisation and at the end (``diagnose.csv``)."""
    from normzoo import recipe as recipes
    from normzoo.checkpointing import newest_checkpoint
    from normzoo.diagnostics.callbacks import DivergenceError
    from normzoo.tasks import monitored_metric
    from normzoo.train import run

    name = cell_name(cell)
    run_dir = out / name
    record = run_dir / "cell.json"
    if record.is_file():
        return json.loads(record.read_text(encoding="utf-8"))
    overrides = [*base_overrides, *cell_overrides(cell), f"run.dir={run_dir}"]
    if steps is not None:
        overrides.append(f"trainer.max_steps={steps}")
    resolved = recipes.load(recipe_path, overrides)
    metric, _ = monitored_metric(resolved)
    row: dict[str, Any] = {"cell": name, **cell, "metric": metric}
    # A cell that was killed or pre-empted continues from its newest checkpoint.
    resume = "auto" if newest_checkpoint(run_dir / "checkpoints") else None
    try:
        summary = run(resolved, recipe_path, force=resume is None, resume=resume)
        row.update(status="ok", diverged_at_step="", steps=summary["steps"],
                   stopped=summary.get("stopped", ""),
                   metric_value=summary["validation"].get(metric, ""),
                   test_bleu=summary.get("test", {}).get("bleu", ""))
    except DivergenceError as error:
        step = re.search(r"diverged at step (\d+)", str(error))
        row.update(status="diverged", stopped="diverged",
                   diverged_at_step=int(step.group(1)) if step else "",
                   steps=int(step.group(1)) if step else "", metric_value="", test_bleu="")
    row["final_train_loss"] = final_train_loss(run_dir)
    if diagnose:
        from normzoo.diagnostics.diagnose import diagnose_run

        diagnose_run(run_dir)
    atomic_write_text(record, json.dumps(row, indent=2), "sweep cell record")
    return row


def write_results(rows: list[dict[str, Any]], keys: list[str], out: Path) -> None:
    fields = ["cell", *keys, *FIELDS[1:]]
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(out / "results.csv", table.getvalue(), "sweep results")
    lines = ["| " + " | ".join(fields[1:]) + " |", "|" + "---|" * (len(fields) - 1)]
    for row in rows:
        cells_ = [row.get(k, "") for k in fields[1:]]
        lines.append("| " + " | ".join(f"{c:.4g}" if isinstance(c, float) else str(c)
                                       for c in cells_) + " |")
    lines += over_seeds(rows, keys)
    atomic_write_text(out / "results.md", "\n".join(lines) + "\n", "sweep results")


def _loss_points(run_dir: Path) -> list[tuple[int, float]]:
    path = run_dir / "logs" / "csv" / "metrics.csv"
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return [(int(r["step"]), float(r["train/loss"])) for r in csv.DictReader(f)
                if r.get("train/loss")]


def _combo(row: dict[str, Any], keys: list[str]) -> str:
    return " ".join(f"{label(k)}={row[k]}" for k in keys)


def plot_loss_curves(rows: list[dict[str, Any]], keys: list[str], out: Path,
                     plt: Any) -> None:
    """One panel per setting of the other axes (rows: the second axis, columns: the rest), one
    line per value of the first axis in the same colour everywhere: the comparison the sweep
    is for (e.g. post vs pre vs deepnorm) sits within a panel."""
    line_key, row_keys, col_keys = keys[0], keys[1:2], keys[2:]
    lines = list(dict.fromkeys(r[line_key] for r in rows))
    panel_rows = list(dict.fromkeys(_combo(r, row_keys) for r in rows))
    panel_cols = list(dict.fromkeys(_combo(r, col_keys) for r in rows))
    fig, axes = plt.subplots(len(panel_rows), len(panel_cols), squeeze=False, sharex=True,
                             sharey=True, figsize=(1 + 4 * len(panel_cols),
                                                   0.8 + 2.8 * len(panel_rows)))
    for row in rows:
        points = _loss_points(out / row["cell"])
        if not points:
            continue
        ax = axes[panel_rows.index(_combo(row, row_keys)), panel_cols.index(_combo(row, col_keys))]
        diverged = row["status"] == "diverged"
        ax.plot(*zip(*points, strict=True), "--" if diverged else "-",
                color=f"C{lines.index(row[line_key])}",
                label=f"{row[line_key]}" + (" (diverged)" if diverged else ""))
    for (i, name), (j, col) in itertools.product(enumerate(panel_rows), enumerate(panel_cols)):
        ax = axes[i, j]
        ax.set_title(" ".join(t for t in (name, col) if t) or "all", fontsize=9)
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, title=label(line_key), title_fontsize=7)
        if i == len(panel_rows) - 1:
            ax.set_xlabel("step")
        if j == 0:
            ax.set_ylabel("training loss")
    fig.tight_layout()
    save_figure(fig, out / "loss_curves.png")
    plt.close(fig)


def plot(rows: list[dict[str, Any]], keys: list[str], out: Path) -> None:
    """Loss curves of every cell, and a map of final loss (× where the cell diverged)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plot_loss_curves(rows, keys, out, plt)
    plot_stability_map(rows, keys, out, plt)


def plot_stability_map(rows: list[dict[str, Any]], keys: list[str], out: Path,
                     plt: Any) -> None:
    """Every cell on a grid (columns: the last axis), coloured by its final training loss from
    green (lowest of the sweep) to red (highest), a red × where it diverged; the task metric
    under it. A run that stalls on a plateau shows as red without diverging."""
    x_key, y_keys = keys[-1], keys[:-1]
    xs = list(dict.fromkeys(r[x_key] for r in rows))
    ys = list(dict.fromkeys(_combo(r, y_keys) or "all" for r in rows))
    losses = [r["final_train_loss"] for r in rows
              if r["status"] != "diverged" and r["final_train_loss"] is not None]
    low, high = (min(losses), max(losses)) if losses else (0.0, 1.0)
    colours = plt.get_cmap("RdYlGn_r")
    fig, ax = plt.subplots(figsize=(4 + 1.8 * len(xs), 1.4 + 0.55 * len(ys)))
    for row in rows:
        x, y = xs.index(row[x_key]), ys.index(_combo(row, y_keys) or "all")
        loss = row["final_train_loss"]
        if row["status"] == "diverged":
            ax.scatter(x, y, marker="x", s=200, color="red")
            text = f"diverged @ {row['diverged_at_step']}"
        else:
            shade = (loss - low) / (high - low) if loss is not None and high > low else 0.0
            ax.scatter(x, y, s=260, color=colours(shade), edgecolors="black", linewidths=0.5)
            text = f"loss {loss:.3g}" if loss is not None else ""
            if row.get("metric_value") not in (None, ""):
                text += f"\n{row['metric'].split('/')[-1]} {float(row['metric_value']):.3g}"
        ax.annotate(text, (x, y), fontsize=7, ha="left", va="center", xytext=(10, 0),
                    textcoords="offset points")
    ax.set_xticks(range(len(xs)), [f"{label(x_key)}\n= {x}" for x in xs], fontsize=8)
    ax.set_yticks(range(len(ys)), ys, fontsize=8)
    ax.set_xlim(-0.5, len(xs) - 0.2)
    ax.set_ylim(-0.7, len(ys) - 0.3)
    ax.set_title("final training loss (green low, red high)", fontsize=9)
    fig.tight_layout()
    save_figure(fig, out / "stability_map.png")
    plt.close(fig)


def sweep(recipe_path: Path, settings: list[str], overrides: list[str], out: Path,
          steps: int | None, diagnose: bool = False, *, jobs: int = 1, launcher: str = "local",
          slurm: Slurm | None = None) -> list[dict[str, Any]]:
    """Run the grid (skipping finished cells) and write the results and plots. The results
    are rewritten as each cell finishes, with every finished cell of the grid, so a sweep in
    progress can be read (and committed). ``jobs`` cells run at once (:mod:`.launch`)."""
    from normzoo import recipe as recipes

    grid = parse_grid(settings)
    keys = [k for k, _ in grid]
    all_cells = cells(grid)
    for cell in all_cells:  # validate every cell (on this machine) before training any of them
        recipes.load(recipe_path, [*overrides, *cell_overrides(cell)], machine=True)
    out.mkdir(parents=True, exist_ok=True)
    work = functools.partial(_cell_work, recipe_path=recipe_path, overrides=overrides, out=out,
                             steps=steps, diagnose=diagnose)
    todo = [cell for cell in all_cells if not (out / cell_name(cell) / "cell.json").is_file()]

    def collect() -> None:
        if rows := finished(all_cells, out):
            write_results(rows, keys, out)

    collect()
    run_cells(todo, work, out, jobs=jobs, launcher=launcher, slurm=slurm, after_each=collect)
    rows = finished(all_cells, out)
    write_results(rows, keys, out)
    plot(rows, keys, out)
    return rows


def _cell_work(cell: dict[str, str], *, recipe_path: Path, overrides: list[str], out: Path,
               steps: int | None, diagnose: bool) -> dict[str, Any]:
    """:func:`run_cell` with the cell first: what a launcher calls (picklable for submitit)."""
    return run_cell(recipe_path, overrides, cell, out, steps, diagnose)


def finished(all_cells: list[dict[str, str]], out: Path) -> list[dict[str, Any]]:
    """The rows of every finished cell, in the grid's order. Not only those this process has
    reached: a cell may have been finished by an earlier sweep that listed the values in
    another order (or by a second sweep over part of the grid), and the results should show it
    as soon as it is there."""
    records = (out / cell_name(cell) / "cell.json" for cell in all_cells)
    return [json.loads(r.read_text(encoding="utf-8")) for r in records if r.is_file()]
