"""The fourth task, sentence classification, end to end through the task contract: trained from
files in the ``text<TAB>label`` layout, from a local dataset in the hub's layout and from the
built-in corpus; its accuracy in ``summary.json`` is what ``normzoo evaluate`` prints for its
checkpoint and export; it starts from a masked LM's encoder with ``init.from``; bad input is a
clear exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from tiny import tiny
from typer.testing import CliRunner

from normzoo.classification import corpus
from normzoo.cli import app
from normzoo.recipe import from_dict
from normzoo.run import training as train

ROOT = Path(__file__).resolve().parent.parent


def _files(folder: Path, sizes: tuple[int, int, int] = (400, 60, 60)) -> Path:
    """The built-in labelled corpus as ``train/valid/test.tsv``."""
    for split, size in zip(("train", "valid", "test"), sizes, strict=True):
        texts, labels = corpus.builtin_examples(split, size)
        lines = [f"{text}\t{label}" for text, label in zip(texts, labels, strict=True)]
        (folder / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def _recipe(root: Path, **changes) -> dict:
    """A tiny classifier on ``root``'s files; a section in ``changes`` updates that section."""
    base = tiny(task="classification", task_options={"pooling": "mean"},
                model={"family": "encoder", "decoder_layers": 0, "activation": "gelu"},
                data={"source": "files", "dir": str(root), "max_tokens": 1024,
                      "train_limit": None, "valid_limit": None},
                run={"dir": str(root / "run")}, optim={"lr": 3e-3, "warmup_steps": 2},
                trainer={"max_steps": 30, "val_every_steps": 15, "save_top_k": 1})
    return {**base, **{key: {**base[key], **value} if isinstance(value, dict) and value
                       and isinstance(base.get(key), dict) and key != "task_options"
                       else value for key, value in changes.items()}}


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny classifier trained for 30 steps on files, its best checkpoint tested."""
    root = _files(tmp_path_factory.mktemp("classify"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NORMZOO_CACHE", str(root / "cache"))
        train.run(from_dict(_recipe(root)), "classify.yaml")
    return root / "run"


def test_the_summary_holds_test_accuracy_and_evaluate_prints_it(classifier: Path,
                                                                tmp_path: Path):
    summary = json.loads((classifier / "summary.json").read_text(encoding="utf-8"))
    assert summary["status"] == "completed" and summary["task"] == "classification"
    test = summary["test"]
    assert test["split"] == "test" and set(test) >= {"accuracy", "macro_f1", "loss"}
    assert 0.35 < test["accuracy"] <= 1.0  # above the majority class's share, from 30 steps
    saved = yaml.safe_load((classifier / "recipe.yaml").read_text(encoding="utf-8"))
    assert saved["task_options"]["labels"] == sorted(corpus.LABELS)  # resolved from the data
    best = summary["best_checkpoint"]
    result = CliRunner().invoke(app, ["evaluate", best, "--json"])
    assert result.exit_code == 0, result.output
    scores = json.loads(result.output)
    assert scores["accuracy"] == pytest.approx(test["accuracy"], abs=6e-5)
    assert scores["macro_f1"] == pytest.approx(test["macro_f1"], abs=6e-5)
    assert scores["loss"] == pytest.approx(test["loss"], abs=6e-5)
    assert scores["sentences"] == 60
    out = tmp_path / "export"
    assert CliRunner().invoke(app, ["export", best, "--out", str(out)]).exit_code == 0
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "pipeline_tag: text-classification" in card and "past-plural" in card
    exported = CliRunner().invoke(app, ["evaluate", str(out), "--json"])
    assert json.loads(exported.output)["accuracy"] == scores["accuracy"]


def test_evaluate_scores_a_labelled_file_and_refuses_decoding_options(classifier: Path,
                                                                       tmp_path: Path):
    best = json.loads((classifier / "summary.json").read_text())["best_checkpoint"]
    lines = (classifier.parent / "test.tsv").read_text(encoding="utf-8").splitlines()[:10]
    given = tmp_path / "some.tsv"
    given.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["evaluate", best, "--src", str(given), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["sentences"] == 10
    refused = CliRunner().invoke(app, ["evaluate", best, "--beam", "4"])
    assert refused.exit_code == 2
    assert "--beam applies to translation only" in refused.output
    assert "is a classifier (task classification)" in refused.output
    hf = CliRunner().invoke(app, ["export", best, "--out", str(tmp_path / "hf"),
                                  "--format", "hf"])
    assert hf.exit_code == 2 and "classifier's head" in hf.output


def test_a_bad_line_names_its_file_and_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    root = _files(tmp_path, (40, 10, 10))
    train_file = root / "train.tsv"
    lines = train_file.read_text(encoding="utf-8").splitlines()
    lines[6] = "a sentence without its label"
    train_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(_recipe(root)), encoding="utf-8")
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    result = CliRunner().invoke(app, ["train", str(recipe)])
    assert result.exit_code == 2, result.output
    assert f"{train_file}, line 7 has no tab" in result.output
    assert "Traceback" not in result.output


def test_task_options_are_checked_when_the_recipe_is(tmp_path: Path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(_recipe(tmp_path, task_options={
        "pooling": "max", "label": "x"})), encoding="utf-8")
    result = CliRunner().invoke(app, ["recipe", "validate", str(recipe)])
    assert result.exit_code == 2
    assert "task_options.pooling: is 'max'; use one of first, mean" in result.output
    assert "task_options.label: task 'classification' has no option 'label'" in result.output
    unknown = CliRunner().invoke(app, ["recipe", "validate", str(recipe), "task=clasification"])
    assert unknown.exit_code == 2 and "did you mean 'classification'" in unknown.output


def test_a_hub_dataset_with_class_labels_trains(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch):
    """A local folder in the hub's layout (what ``datasets.load_dataset`` reads): its
    ``ClassLabel`` integers become the label names the run records."""
    import datasets

    folder = tmp_path / "hub"
    features = datasets.Features({"sentence": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=list(corpus.LABELS))})
    for split, size in (("train", 120), ("validation", 20), ("test", 20)):
        texts, labels = corpus.builtin_examples("train" if split == "train" else "valid",
                                                size)
        rows = {"sentence": texts, "label": [corpus.LABELS.index(x) for x in labels]}
        datasets.Dataset.from_dict(rows, features=features).to_parquet(
            str(folder / "data" / f"{split}.parquet"))
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    recipe = from_dict(_recipe(tmp_path, data={
        "source": "hub", "path": str(folder), "text_field": "sentence",
        "train_split": "train", "valid_split": "validation", "test_split": "test",
        "max_tokens": 1024, "train_limit": None, "valid_limit": None},
        trainer={"max_steps": 2, "val_every_steps": 2}))
    summary = train.run(recipe, "hub.yaml")
    assert summary["status"] == "completed"
    saved = yaml.safe_load((tmp_path / "run" / "recipe.yaml").read_text(encoding="utf-8"))
    assert saved["task_options"]["labels"] == sorted(corpus.LABELS)


def test_a_classifier_starts_from_a_masked_lms_encoder(classifier: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch):
    """``init.from`` an MLM checkpoint of the same encoder: every encoder weight is loaded, the
    head keeps its fresh initialisation (``init.strict: false``); a resume of the classifier
    keeps its resolved label set without calling it a change."""
    root = classifier.parent
    for split in ("train", "valid", "test"):
        text = [line.rpartition("\t")[0] for line in
                (root / f"{split}.tsv").read_text(encoding="utf-8").splitlines()]
        (tmp_path / f"{split}.txt").write_text("\n".join(text) + "\n", encoding="utf-8")
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    mlm = _recipe(tmp_path, task="mlm", task_options={},
                  data={"source": "files", "dir": str(tmp_path), "max_tokens": 1024},
                  run={"dir": str(tmp_path / "mlm")}, trainer={"max_steps": 2,
                                                              "val_every_steps": 2})
    train.run(from_dict(mlm), "mlm.yaml")
    start = tmp_path / "mlm" / "checkpoints" / "last.ckpt"
    recipe = _recipe(root, init={"from": str(start), "strict": False},
                     run={"dir": str(tmp_path / "cls")},
                     trainer={"max_steps": 2, "val_every_steps": 2, "keep_checkpoints": 2})
    summary = train.run(from_dict(recipe), "cls.yaml")
    init = summary["init"]
    assert init["loaded"] > 0 and init["unexpected"] == []
    assert init["missing"] and all(name.startswith("classifier.") for name in init["missing"])
    file = tmp_path / "cls.yaml"
    more = {**recipe, "trainer": {**recipe["trainer"], "max_steps": 4}}
    file.write_text(yaml.safe_dump(more), encoding="utf-8")
    result = CliRunner().invoke(app, ["train", str(file), "--resume", "auto"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "cls" / "summary.json").read_text())["steps"] == 4


def test_the_recipe_trains_the_built_in_corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``recipes/classify.yaml`` as shipped, shortened to a few steps: built-in data, offline."""
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    result = CliRunner().invoke(app, [
        "train", str(ROOT / "recipes" / "classify.yaml"), f"run.dir={tmp_path / 'run'}",
        "trainer.max_steps=4", "trainer.val_every_steps=4", "data.train_limit=200",
        "data.valid_limit=40", "trainer.progress_bar=false"])
    assert result.exit_code == 0, result.output
    assert "test accuracy " in result.output and "macro-F1" in result.output


def test_every_trainable_weight_gets_a_gradient():
    """The MLM head the classifier does not use is frozen: under DDP a parameter without a
    gradient stops the run (Lightning's ``ddp`` does not look for unused parameters)."""
    import torch

    from normzoo.contract import module_class

    recipe = from_dict(_recipe(Path("."), task_options={"labels": ["a", "b", "c"]}))
    module = module_class("classification")(recipe, 100)
    batch = {"tokens": torch.randint(5, 100, (4, 9)), "labels": torch.tensor([0, 1, 2, 1])}
    module.loss_terms(batch).loss_sum.backward()
    without = [name for name, p in module.named_parameters()
               if p.requires_grad and p.grad is None]
    assert without == []
    frozen = {name for name, p in module.model.named_parameters() if not p.requires_grad}
    assert frozen == {"head_dense.weight", "head_dense.bias", "head_norm.weight",
                      "head_norm.bias", "output_bias"}


@pytest.mark.slow
def test_the_recipe_as_shipped_learns_the_labels(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch):
    """``recipes/classify.yaml`` in full (150 updates): well above the majority class (36%)."""
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    result = CliRunner().invoke(app, ["train", str(ROOT / "recipes" / "classify.yaml"),
                                      f"run.dir={tmp_path / 'run'}"])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text(encoding="utf-8"))
    assert summary["test"]["accuracy"] > 0.9


def test_compare_judges_classifiers_on_their_test_accuracy():
    """``normzoo compare`` on the classifier study's committed runs (400 labelled sentences):
    the classifier's own score, higher better, its test set resampled from each run's
    per-example outputs; equal accuracies of two seeds are no copy (their losses differ)."""
    data = ROOT / "docs" / "study-classify" / "data"
    args = ["compare", *(x for s in (1, 2, 3) for x in ("-b", str(data / "random-small" /
                                                              f"seed-{s}"))),
            *(x for s in (1, 2, 3) for x in ("-s", str(data / "from-mlm-small" / f"seed-{s}"))),
            "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)
    assert found["score"] == "test accuracy" and found["better"] == "max"
    assert found["better_side"] == "system"
    assert found["baseline"]["scores"] == pytest.approx([0.634, 0.672, 0.672], abs=1e-6)
    assert found["example_test"] and found["example_p"] > 0.05
    assert found["verdict"] == "not shown"
    text = CliRunner().invoke(app, args[:-1]).output
    assert "the system is better (higher test accuracy): the system is +0.0793" in text


LENGTH_TASK = '''
from normzoo.classification.task import Classification


class SentenceLength(Classification):
    """Short or long: a third party's task, a classifier of its own corpus's sentences."""

    name = "nz_length"
    evaluate_options = frozenset()  # its corpus is its own: no --src file to read

    def read(self, split):
        from normzoo.data import builtin

        texts = [source for source, _ in builtin.generate(split.name, size=split.limit)]
        yield texts, ["long" if len(t.split()) > 8 else "short" for t in texts]

    def builtin_files(self):
        from pathlib import Path

        return [*super().builtin_files(), Path(__file__)]
'''


def test_a_third_partys_task_trains_is_listed_and_named_once_missing(
        fake_dists, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A task from another distribution, one entry point: listed by ``normzoo list tasks``,
    trained from a recipe, recorded in the checkpoint; uninstalled, ``evaluate`` names the
    distribution to install."""
    dist, version = "nz-length-task", "1.2"
    fake_dists.activate(fake_dists.write(
        dist, version, {"normzoo.tasks": {"nz_length": "nz_length:SentenceLength"}},
        {"nz_length": LENGTH_TASK}))
    listed = CliRunner().invoke(app, ["list", "tasks"])
    assert f"nz_length       {dist} {version}  Short or long" in listed.output
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    recipe = _recipe(tmp_path, task="nz_length", data={"source": "builtin", "train_limit": 200,
                                                       "valid_limit": 40},
                     trainer={"max_steps": 3, "val_every_steps": 3})
    summary = train.run(from_dict(recipe), "length.yaml")
    assert summary["task"] == "nz_length" and 0 <= summary["test"]["accuracy"] <= 1
    checkpoint = tmp_path / "run" / "checkpoints" / "last.ckpt"
    import torch

    record = {"kind": "task", "name": "nz_length", "distribution": dist, "version": version}
    assert record in torch.load(checkpoint, weights_only=True)["normzoo"]["plugins"]
    assert CliRunner().invoke(app, ["evaluate", str(checkpoint)]).exit_code == 0
    # An option the task does not take is refused, never ignored (--src scored the test split).
    texts = tmp_path / "some.tsv"
    texts.write_text("a short one\tshort\n", encoding="utf-8")
    refused = CliRunner().invoke(app, ["evaluate", str(checkpoint), "--src", str(texts)])
    assert refused.exit_code == 2, refused.output
    assert "--src applies to " in refused.output and "task nz_length" in refused.output
    fake_dists.restore()  # uninstalled
    result = CliRunner().invoke(app, ["evaluate", str(checkpoint)])
    assert result.exit_code == 2, result.output
    assert f"task 'nz_length' from the distribution '{dist}'" in result.output
    assert f"pip install '{dist}=={version}'" in result.output
