"""``normzoo study run`` and ``report``: a study file's cells trained over seeds, resumably, and
its page, figures and ``verdicts.json`` written, for translation, a classifier and a causal LM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tiny import tiny

TESTS = Path(__file__).parent


def _normzoo(*args: str, cwd: Path, crash: list[str] | None = None
             ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NORMZOO_CACHE": str(cwd / "cache"), "PYTHONPATH": str(TESTS)}
    command = ([sys.executable, str(TESTS / "crash.py"), *crash] if crash
               else [sys.executable, "-m", "normzoo"])
    return subprocess.run([*command, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def _study(folder: Path, recipe_: dict, name: str = "study.yaml", **study) -> Path:
    (folder / "recipe.yaml").write_text(yaml.safe_dump(recipe_), encoding="utf-8")
    body = {"question": "Does Post-LN trail Pre-LN here?", "recipe": "recipe.yaml",
            "grid": {"model.residual": ["pre", "post"]}, "seeds": [1, 2, 3],
            "baseline": {"model.residual": "pre"}, "out": "runs/study", **study}
    path = folder / name
    path.write_text(yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
    return path


TRANSLATION = tiny(data={"valid_limit": 30}, trainer={"max_steps": 4, "val_every_steps": 2,
                                                      "save_top_k": 1})


@pytest.fixture(scope="module")
def translation_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny translation study, run whole, with its first run's output."""
    folder = tmp_path_factory.mktemp("study")
    _study(folder, TRANSLATION, margin=1.0)
    ran = _normzoo("study", "run", "study.yaml", cwd=folder)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return folder


def test_run_then_report_writes_the_page_figures_and_verdicts(translation_study: Path):
    folder = translation_study
    reported = _normzoo("study", "report", "study.yaml", cwd=folder)
    assert reported.returncode == 0, reported.stdout + reported.stderr
    out = folder / "runs" / "study"
    verdicts = json.loads((out / "verdicts.json").read_text(encoding="utf-8"))
    (row,) = verdicts["comparisons"]
    assert row["baseline"]["seeds"] == ["1", "2", "3"] == row["system"]["seeds"]
    assert row["paired"] and row["seed_test"].startswith("paired t-test")
    assert row["example_test"] and 0 < row["example_p"] <= 1  # the sentences were resampled
    assert row["score"] == "test bleu" and row["unit"] == "BLEU" and row["margin"] == 1.0
    assert row["verdict"] in ("shown", "indicated", "not shown", "equal")
    assert row["baseline"]["devices"] == ["cpu"] * 3 and "holm_kept" in row
    assert verdicts["missing"] == {"main": []}
    page = (out / "index.md").read_text(encoding="utf-8")
    assert "> Does Post-LN trail Pre-LN here?" in page
    assert "| main | residual=post vs residual=pre |" in page
    for figure in ("curves-main.png", "stability-main.png"):
        assert f"]({figure})" in page and (out / figure).stat().st_size > 1000
    assert f"main: residual=post vs residual=pre (test bleu): {row['verdict']}" in \
        reported.stdout


def test_run_again_trains_nothing(translation_study: Path):
    folder = translation_study
    summaries = sorted((folder / "runs" / "study" / "main").glob("*/summary.json"))
    assert len(summaries) == 6
    before = {p: p.stat().st_mtime_ns for p in summaries}
    again = _normzoo("study", "run", "study.yaml", cwd=folder)
    assert again.returncode == 0, again.stdout + again.stderr
    assert {p: p.stat().st_mtime_ns for p in summaries} == before
    assert "parameters" not in again.stdout + again.stderr  # no model was built


def test_a_partial_study_reports_what_has_finished_and_says_what_is_missing(tmp_path: Path):
    # Only seed 1 of each setting trained (a study stopped early), then the whole reported.
    _study(tmp_path, TRANSLATION, name="first.yaml", seeds=[1])
    assert _normzoo("study", "run", "first.yaml", cwd=tmp_path).returncode == 0
    _study(tmp_path, TRANSLATION)
    reported = _normzoo("study", "report", "study.yaml", cwd=tmp_path)
    assert reported.returncode == 0, reported.stderr
    out = tmp_path / "runs" / "study"
    verdicts = json.loads((out / "verdicts.json").read_text(encoding="utf-8"))
    assert verdicts["missing"]["main"] == [f"residual={s}, seed {n}" for s in ("pre", "post")
                                           for n in (2, 3)]
    (row,) = verdicts["comparisons"]
    assert row["verdict"] in ("indicated", "not shown") and "one seed a side" in row["reason"]
    page = (out / "index.md").read_text(encoding="utf-8")
    assert "## Not finished yet" in page and "- main: residual=pre, seed 2" in page


def test_a_cell_killed_mid_training_resumes_when_the_study_runs_again(tmp_path: Path):
    recipe = tiny(trainer={"max_steps": 6, "val_every_steps": 2, "save_top_k": 1})
    _study(tmp_path, recipe, seeds=[1], grid={"model.residual": ["pre"]}, baseline=[])
    killed = _normzoo("study", "run", "study.yaml", cwd=tmp_path, crash=["step", "5"])
    assert killed.returncode == -9, killed.stdout + killed.stderr
    cell = tmp_path / "runs" / "study" / "main" / "seed-1_residual-pre"
    assert not (cell / "cell.json").exists() and (cell / "checkpoints").is_dir()
    again = _normzoo("study", "run", "study.yaml", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    summary = json.loads((cell / "summary.json").read_text(encoding="utf-8"))
    assert summary["status"] == "completed" and summary["steps"] == 6
    assert "resum" in again.stdout + again.stderr  # from its checkpoint, not from scratch
    metrics = (cell / "logs" / "csv" / "metrics.csv").read_text(encoding="utf-8")
    assert metrics.count("\n5,") <= 1  # the steps after the checkpoint ran once in the history


# One task judged on a score to maximise and one on a loss to minimise: the two kinds of row.
@pytest.mark.parametrize("task", ["classification", "causal_lm"])
def test_other_tasks_are_judged_by_the_example_level_test(tmp_path: Path, task: str):
    if task == "classification":
        recipe = tiny(task="classification", model={"family": "encoder", "decoder_layers": 0},
                      data={"source": "builtin", "train_limit": 200, "valid_limit": 40,
                            "max_tokens": 1024},
                      trainer={"max_steps": 4, "val_every_steps": 2, "save_top_k": 1})
    else:
        recipe = tiny(task="causal_lm", model={"family": "decoder", "encoder_layers": 0},
                      data={"source": "builtin", "train_limit": 200, "valid_limit": 40},
                      trainer={"max_steps": 4, "val_every_steps": 2, "save_top_k": 1})
    _study(tmp_path, recipe)
    ran = _normzoo("study", "run", "study.yaml", cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    reported = _normzoo("study", "report", "study.yaml", cwd=tmp_path)
    assert reported.returncode == 0, reported.stdout + reported.stderr
    out = tmp_path / "runs" / "study"
    (row,) = json.loads((out / "verdicts.json").read_text(encoding="utf-8"))["comparisons"]
    assert row["example_test"] and row["example_p"] is not None  # not a t-test alone
    assert row["score"] == ("test accuracy" if task == "classification" else "test loss")
    assert row["better"] == ("max" if task == "classification" else "min")
    assert (out / "index.md").is_file()


@pytest.mark.parametrize(("study", "message"), [
    ({"grid": {"model.residual": ["pre", "post"]}, "baseline": {"model.residual": "admin"}},
     "is not a setting of the grid"),
    ({"grid": {"seed": [1, 2]}}, "the seeds are the study's `seeds`"),
    ({"recipe": "missing.yaml"}, "recipe file not found"),
    ({"seedz": [1, 2]}, "seedz: unknown key"),
    ({"margin": -1}, "margin"),
])
def test_a_bad_study_file_is_refused_with_every_problem(tmp_path: Path, study: dict,
                                                        message: str):
    _study(tmp_path, TRANSLATION, **study)
    for command in ("run", "report"):
        result = _normzoo("study", command, "study.yaml", cwd=tmp_path)
        assert result.returncode == 2, result.stdout + result.stderr
        assert message in result.stderr and "Traceback" not in result.stderr
