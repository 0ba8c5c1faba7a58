"""Tasks as plugins, at their edges: a broken task plugin is an error only where a recipe names
it; an invalid task leaves its options unchecked instead of judging them as another task's; a
resumed classifier keeps the label set its checkpoint trained with."""

from __future__ import annotations

from pathlib import Path

import pytest
import test_classification
import yaml
from test_classification import _files, _recipe
from typer.testing import CliRunner

from normzoo.cli import app

ROOT = Path(__file__).resolve().parent.parent
BROKEN = "raise ImportError('this plugin is broken')\n"


def test_a_broken_task_plugin_is_an_error_only_where_a_recipe_names_it(fake_dists):
    fake_dists.activate(fake_dists.write("nz-broken-task", "0.1", {
        "normzoo.tasks": {"sentiment": "nz_broken_task:Sentiment"}}, {"nz_broken_task": BROKEN}))
    runner = CliRunner()
    for recipe in ("bert_postnorm.yaml", "classify.yaml", "quickstart.yaml"):
        result = runner.invoke(app, ["recipe", "validate", str(ROOT / "recipes" / recipe)])
        assert result.exit_code == 0, result.output
    streamed = runner.invoke(app, ["recipe", "validate", str(ROOT / "recipes" / "classify.yaml"),
                                   "data.streaming=true"])
    assert streamed.exit_code == 2
    assert "streams causal_lm and mlm corpora; classification corpora" in streamed.output
    listed = runner.invoke(app, ["list", "tasks"])
    assert "BROKEN: ImportError: this plugin is broken" in listed.output
    named = runner.invoke(app, ["recipe", "validate", str(ROOT / "recipes" / "classify.yaml"),
                                "task=sentiment"])
    assert named.exit_code == 2 and "this plugin is broken" in named.output


CANNOT_BUILD = """
from normzoo.plugin import Task


class Refuses(Task):
    \"\"\"A task whose construction fails.\"\"\"

    name, family, module = "nz_refuses", "encoder", "nowhere:Nothing"

    def __init__(self):
        raise RuntimeError("this task cannot be built")


NOT_A_CLASS = 3
"""


classifier = test_classification.classifier  # the module's fixture: a tiny trained classifier


def test_a_task_that_cannot_be_built_or_is_no_task_is_broken_and_named(fake_dists,
                                                                      classifier: Path):
    """Issue 59's fault pass: a task plugin whose class raises in ``__init__`` and one whose
    entry point names an ``int`` are BROKEN in ``list`` and ``list --check`` (named, with why),
    and a mistyped ``task=``, a streaming refusal and ``evaluate --beam`` on a classifier end
    in their own messages, exit 2, with no traceback from the plugin."""
    fake_dists.activate(fake_dists.write("nz-faulty-tasks", "0.1", {"normzoo.tasks": {
        "nz_refuses": "nz_faulty:Refuses", "nz_int": "nz_faulty:NOT_A_CLASS"}},
        {"nz_faulty": CANNOT_BUILD}))
    runner = CliRunner()
    listed = runner.invoke(app, ["list", "tasks"])
    assert listed.exit_code == 0, listed.output
    assert "nz_refuses" in listed.output and "RuntimeError: this task cannot be built" in \
        listed.output
    assert "nz_int" in listed.output and "not a subclass of normzoo.contract.task.Task" in \
        listed.output
    assert listed.output.count("BROKEN") == 2
    checked = runner.invoke(app, ["list", "--check"])
    assert checked.exit_code == 1 and "nz_refuses" in checked.output
    recipe = str(ROOT / "recipes" / "classify.yaml")
    for args, said in ((["task=classificaton"], "unknown task 'classificaton'"),
                       (["data.streaming=true"], "streams causal_lm and mlm corpora"),
                       (["task=nz_refuses"], "this task cannot be built")):
        result = runner.invoke(app, ["recipe", "validate", recipe, *args])
        assert result.exit_code == 2, result.output
        assert said in result.output and "Traceback" not in result.output
    beam = runner.invoke(app, ["evaluate", str(classifier / "checkpoints" / "last.ckpt"),
                               "--beam", "2"])
    assert beam.exit_code == 2, beam.output
    assert "--beam applies to translation only" in beam.output


def test_an_invalid_task_leaves_its_options_unchecked():
    result = CliRunner().invoke(app, ["recipe", "validate", str(ROOT / "recipes" /
                                                                "classify.yaml"),
                                      "task=classificaton"])
    assert result.exit_code == 2
    assert "unknown task 'classificaton' (did you mean 'classification'?)" in result.output
    assert "task_options" not in result.output and "model.family" not in result.output


def test_a_resumed_classifier_keeps_its_checkpoints_labels(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch):
    """The label set is the checkpoint's: data whose labels have changed since is refused
    (naming the label), never trained on with its classes silently renumbered."""
    root = _files(tmp_path, (200, 30, 30))
    recipe = _recipe(root, trainer={"max_steps": 2, "val_every_steps": 2})
    file = tmp_path / "r.yaml"
    file.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    runner = CliRunner()
    assert runner.invoke(app, ["train", str(file)]).exit_code == 0
    saved = yaml.safe_load((root / "run" / "recipe.yaml").read_text(encoding="utf-8"))
    for split in ("train", "valid", "test"):
        path = root / f"{split}.tsv"
        path.write_text(path.read_text(encoding="utf-8").replace("\tpast-plural\n",
                                                                 "\tzz-plural\n"))
    result = runner.invoke(app, ["train", str(file), "--resume", "auto",
                                 "trainer.max_steps=4"])
    assert result.exit_code == 2, result.output
    assert "'zz-plural' are not in the label set" in result.output
    again = yaml.safe_load((root / "run" / "recipe.yaml").read_text(encoding="utf-8"))
    assert again["task_options"]["labels"] == saved["task_options"]["labels"]


def test_a_classifier_sweep_records_its_test_accuracy(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch):
    """The sweep's results carry every score the task's final test records (a classifier's
    accuracy and macro-F1), and its seeds' summary averages them."""
    import csv

    root = _files(tmp_path, (120, 20, 20))
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(_recipe(root, trainer={"max_steps": 2,
                                                            "val_every_steps": 2})))
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "sweep"
    result = CliRunner().invoke(app, ["sweep", str(recipe), "--set", "seed=1,2", "--jobs", "1",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    with open(out / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert all(0 <= float(row["test_accuracy"]) <= 1 and row["test_macro_f1"] for row in rows)
    assert "test accuracy" in (out / "results.md").read_text(encoding="utf-8")


def test_a_training_split_of_one_label_is_refused_before_the_run_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    for split in ("train", "valid", "test"):
        (tmp_path / f"{split}.tsv").write_text("a b c\tx\nd e f\tx\n", encoding="utf-8")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(_recipe(tmp_path)), encoding="utf-8")
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    result = CliRunner().invoke(app, ["train", str(recipe)])
    assert result.exit_code == 2, result.output
    assert "split 'train' has 1 label ('x'): a classifier needs two or more" in result.output
    assert not (tmp_path / "run").exists()
