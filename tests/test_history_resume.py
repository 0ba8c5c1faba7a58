"""A run extended on resume keeps its whole ``metrics.csv`` and validates at its new
``max_steps`` (issue 25, item 1).

Lightning's CSV logger deletes ``metrics.csv`` when it starts and rewrites it in place, under
the header it knows, when a new metric appears; normzoo used to put a resumed run's earlier rows
back underneath it, and the logger's next rewrite failed half-way (``dict contains fields not in
fieldnames``), leaving two lines. Here the file is settled before the logger starts and the
logger keeps it (:mod:`normzoo.run.history`).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
import yaml
from tiny import tiny
from typer.testing import CliRunner

from normzoo.cli import app
from normzoo.errors import RuntimeFailure
from normzoo.recipe import from_dict
from normzoo.run import training as train
from normzoo.run.callbacks import HistoryCSVLogger
from normzoo.run.history import read_metrics, resume_history

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")

# A language model on the built-in corpus, as in the issue, a few steps long.
LM = {
    "task": "causal_lm",
    "seed": 1,
    "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "decoder_layers": 1,
              "max_positions": 64, "dropout": 0.0},
    "data": {"source": "builtin", "valid_split": "valid", "train_limit": 400,
             "valid_limit": 20, "max_tokens": 512, "max_len": 64,
             "tokenizer": {"vocab_size": 200, "min_frequency": 1}},
    "optim": {"lr": 1.0e-3, "warmup_steps": 2},
    "trainer": {"max_steps": 8, "val_every_steps": 4, "log_every_steps": 1,
                "progress_bar": False, "accelerator": "cpu"},
}


def rows_of(run_dir: Path) -> list[dict[str, str]]:
    return read_metrics(run_dir / "logs" / "csv" / "metrics.csv")


def header_of(run_dir: Path) -> list[str]:
    with open(run_dir / "logs" / "csv" / "metrics.csv", newline="", encoding="utf-8") as f:
        return next(csv.reader(f))


def step_of(path: Path) -> int:
    return torch.load(path, map_location="cpu", weights_only=True)["global_step"]


def test_extending_a_finished_language_model_keeps_every_row_and_validates_at_the_new_cap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    recipe = tmp_path / "lm.yaml"
    recipe.write_text(yaml.safe_dump(LM))
    run_dir = tmp_path / "R"
    args = ["train", str(recipe), f"run.dir={run_dir}"]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    before = rows_of(run_dir)
    earlier = [row for row in before if int(row["step"]) < 8]  # the rows of steps 0..7
    assert {int(row["step"]) for row in earlier if row.get("train/loss")} == set(range(8))
    assert any(row.get("test/loss") for row in before)  # the first run's final test

    extended = CliRunner().invoke(app, [*args, "trainer.max_steps=11", "--resume", "auto"])
    assert extended.exit_code == 0, extended.output
    after = rows_of(run_dir)
    # Every earlier row, unchanged and in order, ahead of the new ones (none is lost: count).
    kept = [row for row in after if int(row["step"]) < 8]
    assert len(kept) == len(earlier)
    for old, new in zip(earlier, kept, strict=True):
        assert {k: v for k, v in new.items() if v} == {k: v for k, v in old.items() if v}
    assert after[:len(earlier)] == kept
    # The new steps, each trained and logged once, and a header that covers every field.
    losses = [int(row["step"]) for row in after if row.get("train/loss")]
    assert losses == list(range(11))
    assert set(header_of(run_dir)) == {key for row in after for key in row}
    assert {"test/loss", "test/ppl", "val/loss"} <= set(header_of(run_dir))
    # Validated and saved at step 11 though 11 is no multiple of val_every_steps (4): the
    # validation after the 11th step is logged at its index, 10, as every validation is.
    assert [int(row["step"]) for row in after if row.get("val/loss") and
            not row.get("test/loss")][-2:] == [10, 11]  # then the final validation, at 11
    checkpoints = run_dir / "checkpoints"
    assert step_of(checkpoints / "step-11.ckpt") == 11
    assert step_of(checkpoints / "last.ckpt") == 11
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 11 and summary["status"] == "completed"


def test_translation_validates_and_saves_at_a_max_steps_between_validations(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    run_dir = tmp_path / "run"
    recipe = from_dict(tiny(run={"dir": str(run_dir)},
                            trainer={"max_steps": 3, "val_every_steps": 2, "log_every_steps": 1,
                                     "keep_checkpoints": 5, "save_top_k": 1}))
    summary = train.run(recipe, "tiny.yaml")
    checkpoints = run_dir / "checkpoints"
    assert sorted(p.name for p in checkpoints.glob("step-*.ckpt")) == ["step-2.ckpt",
                                                                        "step-3.ckpt"]
    assert step_of(checkpoints / "last.ckpt") == 3
    validated = [int(row["step"]) for row in rows_of(run_dir) if row.get("val/loss")]
    assert validated == [1, 2]  # after steps 2 and 3
    assert summary is not None and summary["steps"] == 3


# -- the logger and the history, without training ------------------------------------------------


def logger_in(tmp_path: Path):
    logger = HistoryCSVLogger(tmp_path / "logs")
    return logger, tmp_path / "logs" / "csv" / "metrics.csv"


def test_the_logger_keeps_an_existing_file_and_appends_under_its_header(tmp_path: Path):
    logger, path = logger_in(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text("epoch,step,train/loss,val/loss\n0,0,5.0,\n0,1,,4.5\n")
    logger.log_metrics({"train/loss": 4.0}, step=2)  # fields the file has: appended
    logger.save()
    assert path.read_text().splitlines() == ["epoch,step,train/loss,val/loss", "0,0,5.0,",
                                             "0,1,,4.5", ",2,4.0,"]


def test_a_new_metric_widens_the_header_and_keeps_every_row(tmp_path: Path):
    logger, path = logger_in(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text("step,train/loss\n0,5.0\n1,4.0\n")
    logger.log_metrics({"test/loss": 3.0}, step=2)
    logger.save()
    assert path.read_text().splitlines() == ["step,test/loss,train/loss", "0,,5.0", "1,,4.0",
                                             "2,3.0,"]


def test_a_failed_rewrite_leaves_the_file_whole(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch):
    import errno
    import os
    from types import SimpleNamespace

    from normzoo.io import atomic

    logger, path = logger_in(tmp_path)
    path.parent.mkdir(parents=True)
    text = "step,train/loss\n" + "".join(f"{i},{i}.5\n" for i in range(50))
    path.write_text(text)

    def full(*_args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic, "os", SimpleNamespace(**{**vars(os), "replace": full}))
    logger.log_metrics({"val/loss": 1.0}, step=50)
    with pytest.raises(RuntimeFailure, match="disk is full"):
        logger.save()
    assert path.read_text() == text  # not a byte shorter
    assert [p.name for p in path.parent.iterdir()] == ["metrics.csv"]  # no temporary left


def test_resume_history_keeps_the_rows_before_the_checkpoint_each_once(tmp_path: Path):
    path = tmp_path / "metrics.csv"
    # A row written twice, a row after the checkpoint, and a last line torn by a kill
    # mid-write.
    path.write_text("step,train/loss,val/loss\n0,5.0,\n1,4.0,\n1,4.0,\n1,,3.9\n2,3.5,\n1,3.")
    assert resume_history(path, 2) == 3
    assert path.read_text().splitlines() == ["step,train/loss,val/loss", "0,5.0,", "1,4.0,",
                                             "1,,3.9"]
