"""The sweep's figures say what they show: titles, axis labels, training and validation loss of
every cell, diverged cells marked, a colour bar on the stability map. Built from a fake
finished sweep (rows and ``logs/csv/metrics.csv``), no training."""

from __future__ import annotations

import csv
import math

import pytest

from normzoo.sweep import plots as sweep_plots
from normzoo.sweep import runner as sweeps

KEYS = ["model.residual", "optim.lr"]
# Cell -> (train losses at steps 0..n-1, {step: val loss}); the third diverges at step 3.
LOGS = {
    "residual-post_lr-0.001": ([5.0, 4.0, 3.5, 3.2], {2: 3.9, 4: 3.4}),
    "residual-pre_lr-0.001": ([5.1, 4.2, 3.8, 3.6], {2: 4.0, 4: 3.7}),
    "residual-post_lr-0.01": ([5.0, 6.0, 9.0, math.nan], {2: 8.5}),
}


def _write_metrics(path, train, val) -> None:
    path.parent.mkdir(parents=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["epoch", "step", "train/loss", "val/loss"])
        writer.writeheader()
        for step, loss in enumerate(train):
            writer.writerow({"epoch": 0, "step": step, "train/loss": loss})
            if step + 1 in val:  # Lightning writes validation as rows of their own
                writer.writerow({"epoch": 0, "step": step + 1, "val/loss": val[step + 1]})


@pytest.fixture
def finished(tmp_path):
    """A 2×2 sweep with three cells finished (one diverged) and ``pre`` at lr 0.01 not run."""
    out = tmp_path / "depth-sweep"
    rows = []
    for cell, (train, val) in LOGS.items():
        _write_metrics(out / cell / "logs" / "csv" / "metrics.csv", train, val)
        residual, lr = cell.split("_")[0].split("-")[1], cell.split("lr-")[1]
        ok = not math.isnan(train[-1])
        rows.append({"cell": cell, "model.residual": residual, "optim.lr": lr,
                     "metric": "val/loss", "status": "ok" if ok else "diverged",
                     "diverged_at_step": "" if ok else 3, "steps": 4 if ok else 3,
                     "metric_value": min(val.values()) if ok else "",
                     "final_train_loss": train[-1]})
    return rows, out


def _lines(fig):
    return {line.get_gid(): line for ax in fig.axes for line in ax.get_lines() if line.get_gid()}


def test_loss_curves_show_training_and_validation_of_every_cell(finished):
    rows, out = finished
    fig = sweep_plots.loss_curves_figure(rows, KEYS, out)
    assert fig.get_suptitle() == ("sweep depth-sweep: training loss (interval mean) and "
                                  "validation loss")
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == ["lr=0.001", "lr=0.01"]  # one panel per lr
    assert axes[-1].get_xlabel() == "update step"
    assert {ax.get_ylabel() for ax in axes} == {"loss (nats/token)"}
    lines = _lines(fig)
    for cell, (train, val) in LOGS.items():
        training, validation = lines[f"{cell}/train"], lines[f"{cell}/val"]
        assert training.get_linestyle() == "-"
        assert (validation.get_linestyle(), validation.get_marker()) == ("--", "o")
        assert training.get_color() == validation.get_color()
        # What was logged, the diverged cell's finite points included.
        assert list(training.get_ydata()) == [x for x in train if math.isfinite(x)]
        assert list(validation.get_xdata()) == list(val)
    assert lines["residual-post_lr-0.001/train"].get_color() != \
        lines["residual-pre_lr-0.001/train"].get_color()
    # The same residual keeps its colour in every panel.
    assert lines["residual-post_lr-0.01/train"].get_color() == \
        lines["residual-post_lr-0.001/train"].get_color()
    assert "residual-post_lr-0.01/diverged" in lines
    legends = [[t.get_text() for t in ax.get_legend().get_texts()] for ax in axes]
    assert legends[0] == ["residual=post", "residual=pre", "training (interval mean)",
                          "validation"]
    assert legends[1][0] == "residual=post (diverged at step 3)"


def test_stability_map_has_a_colour_bar_labels_and_readable_cells(finished):
    rows, out = finished
    fig = sweep_plots.stability_map_figure(rows, KEYS, out)
    grid, bar = fig.axes
    assert bar.get_ylabel().startswith("final training loss")
    assert bar.get_ylim() == pytest.approx((3.2, 3.6))  # the finished cells' range
    assert fig.get_suptitle() == "sweep depth-sweep: final training loss per cell"
    assert grid.get_title() == "grey: diverged or not run"
    assert (grid.get_xlabel(), grid.get_ylabel()) == ("lr", "residual")
    assert [t.get_text() for t in grid.get_xticklabels()] == ["0.001", "0.01"]
    assert [t.get_text() for t in grid.get_yticklabels()] == ["post", "pre"]
    texts = {(t.get_position(), t.get_text()) for t in grid.texts}
    assert texts == {((0, 0), "train 3.2\nval loss 3.4"), ((0, 1), "train 3.6\nval loss 3.7"),
                     ((1, 0), "diverged\nat step 3"), ((1, 1), "not run")}


def test_a_single_axis_sweep_and_a_cell_that_logged_nothing(tmp_path):
    out = tmp_path / "s"
    rows = [{"cell": "residual-post", "model.residual": "post", "status": "diverged",
             "diverged_at_step": 0, "final_train_loss": None},
            {"cell": "residual-admin", "model.residual": "{name: admin, init: profiled}",
             "status": "ok", "metric": "val/bleu", "metric_value": 12.5,
             "final_train_loss": 3.0}]
    fig = sweep_plots.loss_curves_figure(rows, ["model.residual"], out)
    (ax,) = fig.axes
    assert ax.get_title() == "residual: post, admin (init: profiled)"
    assert [t.get_text() for t in ax.get_legend().get_texts()][:2] == [
        "residual=post (diverged at step 0, nothing logged)",
        "residual=admin (init: profiled) (nothing logged)"]
    grid = sweep_plots.stability_map_figure(rows, ["model.residual"], out).axes[0]
    assert {t.get_text() for t in grid.texts} == {"diverged\nat step 0", "train 3\nval bleu 12.5"}


def test_the_sweep_writes_both_pngs(finished):
    rows, out = finished
    sweeps.plot(rows, KEYS, out)  # the name the sweep (and its tests) use
    for name in ("loss_curves.png", "stability_map.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (out / name).stat().st_size > 10_000
