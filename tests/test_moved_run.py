"""A run directory moved to another path resumes with its best checkpoint
(:mod:`normzoo.checkpoints.relocate`).

Lightning's ``ModelCheckpoint`` records its absolute folder: resumed from a new one it dropped
its best score and best checkpoints, so the first validation after the resume wrote a new
``best-<step>.ckpt`` however bad, and ``best_model_path`` pointed into the old folder.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from tiny import tiny

from normzoo.checkpoints.relocate import relocated_state
from normzoo.recipe import from_dict
from normzoo.run import training as train
from normzoo.run.callbacks import RelocateCheckpoints
from normzoo.tasks.translation.module import TranslationModule


def _recipe(run_dir: Path, max_steps: int) -> Any:
    return from_dict(tiny(run={"dir": str(run_dir)},
                          trainer={"max_steps": max_steps, "val_every_steps": 1,
                                   "keep_checkpoints": 2, "save_top_k": 1,
                                   "loggers": ["csv"]}))


def test_a_moved_run_resumes_with_its_best_checkpoint_and_score(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    trainers: list[Any] = []

    def kept(*args: Any, **kwargs: Any) -> Any:
        trainers.append(build(*args, **kwargs))
        return trainers[-1]

    build = train.build_trainer
    monkeypatch.setattr(train, "build_trainer", kept)
    old, new = tmp_path / "old" / "run", tmp_path / "new" / "run"
    train.run(_recipe(old, 3), "tiny.yaml")
    before = trainers[-1].checkpoint_callback
    best_name, best_score = Path(before.best_model_path).name, before.best_model_score
    assert best_name.startswith("best-") and best_score is not None

    new.parent.mkdir()
    shutil.move(old, new)
    # Every validation after the resume is worse than the old best.
    real = TranslationModule.validation_step

    def worse(self: TranslationModule, batch: dict[str, Any], batch_idx: int) -> None:
        self.log("val/loss", self.loss_terms(batch).mean + 100.0, batch_size=batch["ntokens"])

    monkeypatch.setattr(TranslationModule, "validation_step", worse)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = train.run(_recipe(new, 5), "tiny.yaml", resume="auto")
    monkeypatch.setattr(TranslationModule, "validation_step", real)
    assert not [w for w in caught if "dirpath has changed" in str(w.message)]

    after = trainers[-1].checkpoint_callback
    folder = new / "checkpoints"
    assert Path(after.dirpath) == folder.resolve()
    assert torch.equal(torch.as_tensor(after.best_model_score), torch.as_tensor(best_score))
    assert Path(after.best_model_path) == folder.resolve() / best_name
    assert Path(after.best_model_path).is_file()
    assert list(after.best_k_models) == [after.best_model_path]
    assert sorted(p.name for p in folder.glob("best-*.ckpt")) == [best_name]
    assert Path(summary["best_checkpoint"]) == folder.resolve() / best_name


def _state(folder: str, *steps: int) -> dict[str, Any]:
    models = {f"{folder}/best-{s}.ckpt": torch.tensor(float(s)) for s in steps}
    return {"dirpath": folder, "best_k_models": models, "best_model_score": torch.tensor(1.0),
            "best_model_path": f"{folder}/best-{min(steps)}.ckpt", "kth_value":
            torch.tensor(float(max(steps))), "kth_best_model_path":
            f"{folder}/best-{max(steps)}.ckpt", "last_model_path": "", "monitor": "val/loss"}


def test_a_recorded_best_checkpoint_missing_from_the_new_folder_is_left_out(tmp_path: Path,
                                                                          capsys):
    from lightning.pytorch.callbacks import ModelCheckpoint

    callback = ModelCheckpoint(dirpath=tmp_path, monitor="val/loss", mode="min", save_top_k=2)
    (tmp_path / "best-2.ckpt").write_bytes(b"")  # best-1.ckpt, the best, did not come along
    state, missing = relocated_state(_state("/gone/checkpoints", 1, 2), callback)
    assert missing == [str(tmp_path / "best-1.ckpt")]
    assert state["dirpath"] == callback.dirpath
    assert list(state["best_k_models"]) == [str(tmp_path / "best-2.ckpt")]
    assert state["best_model_path"] == str(tmp_path / "best-2.ckpt")
    assert float(state["best_model_score"]) == 2.0
    loaded = {"callbacks": {callback.state_key: _state("/gone/checkpoints", 1, 2)}}
    RelocateCheckpoints(callback).on_load_checkpoint(SimpleNamespace(is_global_zero=True), None,
                                                     loaded)
    assert loaded["callbacks"][callback.state_key]["dirpath"] == callback.dirpath
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: ") and "best-1.ckpt" in lines[0]

    (tmp_path / "best-2.ckpt").unlink()
    state, missing = relocated_state(_state("/gone/checkpoints", 1, 2), callback)
    assert len(missing) == 2 and state["best_k_models"] == {}
    assert state["best_model_path"] == "" and state["best_model_score"] is None
    assert float(state["kth_value"]) == float("inf")  # any score beats none


@pytest.mark.parametrize("folder", ["same", "unrecorded"])
def test_a_run_in_its_recorded_folder_is_left_as_it_is(tmp_path: Path, folder: str):
    from lightning.pytorch.callbacks import ModelCheckpoint

    callback = ModelCheckpoint(dirpath=tmp_path, monitor="val/loss")
    state = _state(callback.dirpath, 1) if folder == "same" else {"best_model_path": ""}
    assert relocated_state(state, callback) == (state, [])


def test_a_copied_run_goes_on_with_one_best_checkpoint_the_true_best(tmp_path: Path):
    """``cp -r`` of a run folder, then ``normzoo train --resume auto run.dir=COPY`` with more
    steps: the copy keeps exactly one ``best-*.ckpt``, that of the lowest validation loss of
    its whole history (the old steps' and the new), and the original is left as it was. (Before
    the copy's best state was relocated, the first validation after the resume wrote a second
    ``best-5.ckpt``, worse than the copied ``best-4.ckpt``.)"""
    import csv
    import os
    import subprocess
    import sys

    import yaml

    # A learning rate at which the validation loss rises after step 4.
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(tiny(
        optim={"lr": 0.2, "warmup_steps": 1},
        trainer={"max_steps": 4, "val_every_steps": 1, "keep_checkpoints": 1, "save_top_k": 1,
                 "loggers": ["csv"]})))
    env = {**os.environ, "NORMZOO_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}

    def train(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "normzoo", "train", "t.yaml", *args],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)

    first = train("run.dir=old")
    assert first.returncode == 0, first.stderr
    def files(run: Path) -> dict[Path, bytes]:
        return {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}

    original = files(tmp_path / "old")
    shutil.copytree(tmp_path / "old", tmp_path / "copy")
    resumed = train("--resume", "auto", "run.dir=copy", "trainer.max_steps=6")
    assert resumed.returncode == 0, resumed.stderr
    assert "warning" not in resumed.stderr and "Traceback" not in resumed.stderr

    folder = tmp_path / "copy" / "checkpoints"
    with open(tmp_path / "copy" / "logs" / "csv" / "metrics.csv", newline="") as f:
        # A validation after N steps is logged at index N - 1.
        scores = {int(r["step"]) + 1: float(r["val/loss"]) for r in csv.DictReader(f)
                  if r.get("val/loss")}
    assert sorted(scores) == [1, 2, 3, 4, 5, 6]
    true_best = min(scores, key=scores.__getitem__)
    assert sorted(p.name for p in folder.glob("best-*.ckpt")) == [f"best-{true_best}.ckpt"]
    summary = yaml.safe_load((tmp_path / "copy" / "summary.json").read_text())
    assert Path(summary["best_checkpoint"]) == folder.resolve() / f"best-{true_best}.ckpt"
    assert files(tmp_path / "old") == original
