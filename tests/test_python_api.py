"""The Python API beside the commands (issue 60, item 5): a missing checkpoint is a
``FileNotFoundError``, a method the model lacks or a GPU this machine lacks a ``ValueError``
(each still a normzoo error, exit 2 at the command line); ``Loaded.evaluate`` returns what
``normzoo evaluate --json`` prints, and ``Loaded.classify`` what a classifier's test step picks.
And two faults of ``evaluate`` on a classifier: advice about an unknown label that a user of a
checkpoint can follow, and ``--data-dir`` on a built-in corpus's checkpoint naming the files it
scored (or the one that is missing)."""

from __future__ import annotations

import errno
import json
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from test_generate import lm_checkpoint  # noqa: F401  (a fixture)
from tiny import tiny
from typer.testing import CliRunner

import normzoo
from normzoo.classification import corpus
from normzoo.cli import app
from normzoo.errors import NormzooError

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")
runner = CliRunner()


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``last.ckpt`` of a few steps of a tiny classifier on the built-in labelled corpus."""
    from normzoo.recipe import from_dict
    from normzoo.run import training as train

    root = tmp_path_factory.mktemp("classifier")
    recipe = from_dict(tiny(
        task="classification", task_options={"pooling": "mean"},
        model={"family": "encoder", "decoder_layers": 0, "activation": "gelu"},
        data={"source": "builtin", "max_tokens": 1024, "train_limit": 200, "valid_limit": 20},
        run={"dir": str(root / "run")}, trainer={"max_steps": 4, "val_every_steps": 4}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NORMZOO_CACHE", str(root / "cache"))
        train.run(recipe, "classify.yaml")
    return root / "run" / "checkpoints" / "last.ckpt"


@pytest.fixture(scope="module")
def models(tiny_checkpoint: Path, lm_checkpoint: Path,  # noqa: F811
           classifier: Path) -> dict[str, Any]:
    return {"mt": normzoo.load(tiny_checkpoint), "lm": normzoo.load(lm_checkpoint),
            "cls": normzoo.load(classifier)}


@pytest.fixture(autouse=True)
def _here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # evaluate's default hypotheses file lands here


def _tsv(path: Path, count: int, extra: str = "") -> Path:
    """``count`` sentences of the built-in labelled corpus's test split, ``text<TAB>label``."""
    texts, labels = corpus.builtin_examples("test", count)
    path.write_text("".join(f"{t}\t{label}\n" for t, label in zip(texts, labels, strict=True))
                    + extra, encoding="utf-8")
    return path


def _json(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["evaluate", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


# -- 1. errors Python code can catch by their kind -----------------------------------------------

def test_a_missing_checkpoint_is_a_file_not_found_error(tmp_path: Path):
    for missing in (tmp_path / "missing.ckpt", tmp_path / "no-export-here"):
        with pytest.raises(FileNotFoundError) as raised:
            normzoo.load(missing)
        assert isinstance(raised.value, NormzooError)
        assert str(raised.value) == f"checkpoint not found: {missing}"
        assert raised.value.filename == str(missing) and raised.value.errno == errno.ENOENT
    result = runner.invoke(app, ["evaluate", str(tmp_path / "missing.ckpt")])
    assert result.exit_code == 2, result.output
    assert "checkpoint not found" in result.output and "Traceback" not in result.output


def test_a_user_error_that_is_an_os_error_is_no_failure_to_write():
    """A command's guard that turns OSError into 'could not write' (exit 1) lets a missing
    checkpoint through as the user error it is (exit 2)."""
    from normzoo.checkpoints.reading import CheckpointNotFound
    from normzoo.cli.common import file_system_failures

    with pytest.raises(CheckpointNotFound), file_system_failures():
        raise CheckpointNotFound("x.ckpt")


LACKING = {  # model, method, its arguments, the methods the message names
    "generate on a translation model": ("mt", "generate", [["a"]], "translate, evaluate"),
    "stream on a translation model": ("mt", "stream", ["a"], "translate, evaluate"),
    "classify on a translation model": ("mt", "classify", [["a"]], "translate, evaluate"),
    "translate on a causal LM": ("lm", "translate", [["a"]], "generate, stream, evaluate"),
    "classify on a causal LM": ("lm", "classify", [["a"]], "generate, stream, evaluate"),
    "translate on a classifier": ("cls", "translate", [["a"]], "classify, evaluate"),
    "generate on a classifier": ("cls", "generate", [["a"]], "classify, evaluate"),
}


@pytest.mark.parametrize("case", list(LACKING))
def test_a_method_the_model_lacks_is_a_value_error_naming_those_it_has(models: dict[str, Any],
                                                                       case: str):
    model, method, args, has = LACKING[case]
    loaded = models[model]
    with pytest.raises(ValueError) as raised:
        getattr(loaded, method)(*args)
    assert isinstance(raised.value, NormzooError)
    message = str(raised.value)
    assert message.startswith(f"{method}: {loaded.source} is not "), message
    assert message.endswith(f" but {_kind(loaded)} (task {loaded.recipe.task}); its methods: "
                            f"{has}"), message
    assert loaded.methods == tuple(has.split(", "))


def _kind(loaded: Any) -> str:
    from normzoo.contract import task_of

    return task_of(loaded.recipe).kind


def test_the_command_line_still_exits_2_for_a_method_the_model_lacks(classifier: Path):
    result = runner.invoke(app, ["translate", str(classifier)], input="a line\n")
    assert result.exit_code == 2, result.output
    assert "its methods: classify, evaluate" in result.output
    assert "Traceback" not in result.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_cuda_on_a_machine_without_a_gpu_is_a_value_error(tiny_checkpoint: Path):
    for device in ("cuda", "cuda:1"):
        with pytest.raises(ValueError, match="this machine has no CUDA GPU") as raised:
            normzoo.load(tiny_checkpoint, device=device)
        assert isinstance(raised.value, NormzooError)
    result = runner.invoke(app, ["translate", str(tiny_checkpoint), "--device", "cuda"],
                           input="a\n")
    assert result.exit_code == 2 and "no CUDA GPU" in result.output, result.output


# -- 1. Loaded.classify ---------------------------------------------------------------------------

def test_classify_picks_what_the_classifiers_module_picks(models: dict[str, Any]):
    """The labels are the module's own ``logits``' argmax on the dataset's batch of the same
    sentences, and the accuracy they make is what evaluate reports on them."""
    from normzoo.classification.data import LabelledSentences
    from normzoo.contract import module_class

    loaded = models["cls"]
    classes = loaded.recipe.task_options["labels"]
    texts, gold = corpus.builtin_examples("test", 40)
    picked = loaded.classify(texts)
    assert len(picked) == 40 and set(picked) <= set(classes)
    module = module_class(loaded.recipe)(loaded.recipe, loaded.tokenizer.vocab_size,
                                         loaded.tokenizer.to_str())
    module.model = loaded.model
    dataset = LabelledSentences.build(loaded.tokenizer.encode_batch(texts), gold, classes,
                                      loaded.recipe.data.max_len)
    with torch.no_grad():
        logits = module.logits(dataset.collate(list(range(40))))
    assert picked == [classes[i] for i in logits.argmax(dim=-1).tolist()]
    scores = loaded.evaluate(src=_tsv(Path("some.tsv"), 40))
    right = sum(p == g for p, g in zip(picked, gold, strict=True)) / 40
    assert scores["accuracy"] == round(right, 4) and scores["sentences"] == 40
    assert loaded.classify(texts[:3], max_tokens=8) == picked[:3]  # one sentence a batch
    assert loaded.classify([]) == []


def test_classify_cuts_a_long_text_as_training_did_and_says_so(models: dict[str, Any]):
    loaded = models["cls"]
    long = " ".join(["the dog saw a cat ."] * 40)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        [label] = loaded.classify([long], first_line=7)
    assert label in loaded.recipe.task_options["labels"]
    assert [str(w.message)[:7] for w in caught] == ["line 7:"]
    assert caught[0].filename == __file__  # the warning points at the caller


def test_classify_checks_its_arguments(models: dict[str, Any]):
    loaded = models["cls"]
    with pytest.raises(TypeError, match="classify takes a list of strings, not one string"):
        loaded.classify("one text")
    with pytest.raises(ValueError, match="max_tokens must be an integer >= 1, got 0"):
        loaded.classify(["a"], max_tokens=0)


# -- 1. Loaded.evaluate ---------------------------------------------------------------------------

def test_evaluate_returns_what_the_command_prints_with_json(models: dict[str, Any],
                                                            tmp_path: Path):
    cls, lm, mt = models["cls"], models["lm"], models["mt"]
    assert cls.evaluate() == _json(cls.source)
    assert lm.evaluate("valid") == _json(lm.source, "--split", "valid")
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("the dog .\na cat sat .\n", encoding="utf-8")
    ref.write_text("le chien .\nun chat .\n", encoding="utf-8")
    printed = _json(mt.source, "--src", str(src), "--ref", str(ref), "--beam", "2")
    returned = mt.evaluate(src=str(src), ref=ref, beam=2, hyps=str(tmp_path / "h.txt"))
    assert returned.pop("hypotheses") == str(tmp_path / "h.txt")
    assert printed.pop("hypotheses") == "hyps.src.evaluate.txt"
    assert returned == printed
    assert (tmp_path / "h.txt").read_text(encoding="utf-8") == \
        (tmp_path / "hyps.src.evaluate.txt").read_text(encoding="utf-8")


def test_evaluate_refuses_what_the_command_refuses(models: dict[str, Any], tmp_path: Path):
    cls, mt = models["cls"], models["mt"]
    with pytest.raises(ValueError) as raised:
        cls.evaluate(beam=4)
    assert str(raised.value) == (f"beam applies to translation only; {cls.source} is a "
                                 "classifier (task classification)")
    with pytest.raises(ValueError, match="split test and src both say what to score: drop "
                                         "split to score the files"):
        cls.evaluate("test", src="some.tsv")
    (tmp_path / "h.txt").write_text("kept\n", encoding="utf-8")
    exists = re.escape("hyps h.txt exists; give another file, or force")
    with pytest.raises(ValueError, match=exists):
        mt.evaluate(hyps="h.txt")
    with pytest.raises(TypeError, match="split must be a str or None, got 3"):
        cls.evaluate(3)
    with pytest.raises(TypeError, match="bf16 must be True or False, got str 'no'"):
        mt.evaluate(bf16="no")
    assert (tmp_path / "h.txt").read_text(encoding="utf-8") == "kept\n"


# -- 2. advice a user of a checkpoint can follow ---------------------------------------------------

def test_an_unknown_label_in_a_scored_file_gets_advice_for_a_checkpoint(classifier: Path,
                                                                        tmp_path: Path):
    unknown = _tsv(tmp_path / "unk.tsv", 5, extra="the cat sat .\tweird\n")
    result = runner.invoke(app, ["evaluate", str(classifier), "--src", str(unknown)])
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert f"{unknown}: labels 'weird' are not in the label set {classifier} was trained on (" \
        in message, message
    assert "score only files whose labels are among these, or train a classifier with the new " \
        "labels added to task_options.labels" in message
    assert "leave it unset" not in message and "split 'test'" not in message
    assert "Traceback" not in result.output


def test_an_unknown_label_while_training_still_gets_the_recipes_advice():
    from normzoo.classification.data import LabelledSentences
    from normzoo.data.sources import DataError

    advice = re.escape("add them to task_options.labels, or leave it unset")
    with pytest.raises(DataError, match=advice):
        LabelledSentences.build([[5]], ["c"], ["a", "b"], 16)


# -- 3. --data-dir on a built-in corpus's checkpoint ----------------------------------------------

def test_data_dir_on_a_built_in_corpus_checkpoint_names_the_files_it_scored(classifier: Path,
                                                                           tmp_path: Path):
    folder = tmp_path / "mine"
    folder.mkdir()
    _tsv(folder / "test.tsv", 10)
    scores = _json(str(classifier), "--data-dir", str(folder))
    assert scores["split"] == f"test ({folder / 'test.tsv'})" and scores["sentences"] == 10
    text = runner.invoke(app, ["evaluate", str(classifier), "--data-dir", str(folder)])
    assert f"split=test ({folder / 'test.tsv'})" in text.output, text.output
    loaded = normzoo.load(classifier)
    assert loaded.evaluate(data_dir=folder) == {**scores, "checkpoint": loaded.source}
    assert loaded.recipe.data.source == "builtin"  # the loaded model's recipe is its own


@pytest.mark.parametrize("split", [None, "valid"])
def test_data_dir_without_the_splits_file_is_refused_naming_it(classifier: Path, tmp_path: Path,
                                                               split: str | None):
    folder = tmp_path / "mine"
    folder.mkdir()
    _tsv(folder / "test.tsv", 10)
    name = split or "test"
    args = ["--split", split] if split else []
    empty = tmp_path / "empty"
    empty.mkdir()
    for where in (folder, empty) if split else (empty,):
        result = runner.invoke(app, ["evaluate", str(classifier), "--data-dir", str(where),
                                     *args])
        assert result.exit_code == 2, result.output
        message = " ".join(result.output.split())
        assert f"--data-dir {where}: split '{name}' reads {where / f'{name}.tsv'}, which is " \
            f"not there ({classifier} was trained on data.source builtin" in message, message
        assert "Traceback" not in result.output
