"""Early stopping (``trainer.patience`` and ``min_delta``, Lightning's ``EarlyStopping``) and
the reason a run ended, as ``summary.json`` and the sweep's results record it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny import tiny

from normzoo.errors import ConfigError
from normzoo.recipe import from_dict, load
from normzoo.run import training as train

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


def _run(tmp_path: Path, **trainer) -> dict:
    recipe = from_dict(tiny(run={"dir": str(tmp_path / "run")},
                            trainer={"max_steps": 8, "val_every_steps": 1, **trainer}))
    return train.run(recipe, "tiny.yaml")


def test_a_run_without_improvement_stops_after_its_patience(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    # No change of the validation loss counts as an improvement: the first validation sets the
    # best, the next two do not improve on it, and the run stops at the third.
    summary = _run(tmp_path, patience=2, min_delta=100.0)
    assert summary["steps"] == 3
    assert summary["stopped"].startswith("early stopping: Monitored metric val/loss did not "
                                         "improve in the last 2 records")
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved["stopped"] == summary["stopped"]


def test_a_run_that_reaches_its_step_cap_says_so(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    summary = _run(tmp_path, max_steps=2, patience=5)
    assert summary["steps"] == 2 and summary["stopped"] == "step cap: trainer.max_steps=2"


def test_early_stopping_settings_are_checked_with_the_recipe(tmp_path: Path):
    path = tmp_path / "r.yaml"
    path.write_text("task: translation\n")
    with pytest.raises(ConfigError) as error:
        load(path, ["trainer.patience=0", "trainer.min_delta=-1"])
    text = str(error.value)
    assert "trainer.patience" in text and "trainer.min_delta" in text
    recipe = load(path, ["trainer.patience=4"])
    assert recipe.trainer.patience == 4 and recipe.trainer.min_delta == 0.0
    assert load(path, []).trainer.patience is None


def test_the_average_of_the_converged_checkpoints_is_scored_beside_the_best(tmp_path: Path,
                                                                           monkeypatch):
    from normzoo.tasks.translation import final_test

    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    # The best validation point at step 2 of 4: the converged stretch is steps 2-4.
    monkeypatch.setattr(final_test, "best_checkpoint_step", lambda trainer: 2)
    recipe = from_dict(tiny(run={"dir": str(tmp_path / "run")}, eval={"average_last": 2},
                            trainer={"max_steps": 4, "val_every_steps": 1,
                                     "keep_checkpoints": 3, "save_top_k": 1}))
    summary = train.run(recipe, "tiny.yaml")
    averaged = summary["test"]["averaged"]
    assert averaged["checkpoints"] == ["step-3.ckpt", "step-4.ckpt"]
    assert averaged["best_step"] == 2 and "best validation point" in averaged["rule"]
    assert 0.0 <= averaged["bleu"] <= 100.0
    split = recipe.data.test_split
    assert (tmp_path / "run" / f"hyps.{split}.average.txt").is_file()
    assert (tmp_path / "run" / f"hyps.{split}.txt").is_file()


def test_a_run_still_improving_at_its_end_has_no_average(tmp_path: Path, monkeypatch):
    from normzoo.tasks.translation import final_test

    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(final_test, "best_checkpoint_step", lambda trainer: 4)  # the newest
    recipe = from_dict(tiny(run={"dir": str(tmp_path / "run")}, eval={"average_last": 2},
                            trainer={"max_steps": 4, "val_every_steps": 1,
                                     "keep_checkpoints": 3, "save_top_k": 1}))
    averaged = train.run(recipe, "tiny.yaml")["test"]["averaged"]
    assert "bleu" not in averaged and "still improving at its end" in averaged["skipped"]
    assert not (tmp_path / "run" / f"hyps.{recipe.data.test_split}.average.txt").exists()


def test_converged_checkpoints_are_those_from_the_best_validation_point_on():
    from normzoo.tasks.translation.final_test import converged_checkpoints

    steps = [(s, Path(f"step-{s}.ckpt")) for s in (500, 1000, 1500, 2000, 2500)]
    # Early stopping with patience 4: the best and the four after it, the newest N of them.
    assert converged_checkpoints(steps, 500, 5)[0] == [p for _, p in steps]
    assert converged_checkpoints(steps, 1500, 5)[0] == [p for _, p in steps[2:]]
    assert converged_checkpoints(steps, 1500, 2)[0] == [p for _, p in steps[3:]]
    # A best older than every kept checkpoint: all kept ones are past it.
    assert converged_checkpoints(steps[1:], 500, 3)[0] == [p for _, p in steps[2:]]
    none, why = converged_checkpoints(steps, 2500, 5)
    assert none == [] and "still improving" in why
    assert converged_checkpoints(steps, None, 5)[0] == []


def test_averaging_more_checkpoints_than_the_run_keeps_is_refused(tmp_path: Path):
    path = tmp_path / "r.yaml"
    path.write_text("task: translation\n")
    with pytest.raises(ConfigError, match=r"eval.average_last: averages the newest 5"):
        load(path, ["eval.average_last=5", "trainer.keep_checkpoints=2"])


def test_the_best_checkpoint_step_is_read_from_the_best_checkpoint(tmp_path: Path, monkeypatch):
    from normzoo.tasks.translation import final_test

    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    seen = []
    real = final_test.best_checkpoint_step
    monkeypatch.setattr(final_test, "best_checkpoint_step",
                        lambda trainer: seen.append(real(trainer)) or seen[-1])
    recipe = from_dict(tiny(run={"dir": str(tmp_path / "run")}, eval={"average_last": 2},
                            trainer={"max_steps": 3, "val_every_steps": 1,
                                     "keep_checkpoints": 3, "save_top_k": 1}))
    summary = train.run(recipe, "tiny.yaml")
    best = Path(summary["best_checkpoint"]).name
    assert best == f"best-{seen[0]}.ckpt" and summary["test"]["averaged"]["best_step"] == seen[0]
