"""A tokenizer from a file (issue 27): ``data.tokenizer: {type: file, path: tokenizer.json}``
trains nothing and encodes with exactly that tokenizer; a missing file, one that is no
tokenizer and one without normzoo's special tokens are command-line errors (exit 2) as soon as
the recipe is validated."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import yaml
from tiny import tiny
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers, trainers
from typer.testing import CliRunner

from normzoo.cli import app
from normzoo.data import builtin
from normzoo.data.tokenizer import SPECIALS, Tokenizer
from normzoo.errors import ConfigError
from normzoo.recipe import from_dict

runner = CliRunner()


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))


def word_level(path: Path, specials: list[str]) -> HFTokenizer:
    """A word-level tokenizer of the built-in corpus, made with the tokenizers library alone."""
    lines = [line for pair in builtin.generate("train", size=200) for line in pair]
    backend = HFTokenizer(models.WordLevel(unk_token=specials[-1]))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.train_from_iterator(lines, trainer=trainers.WordLevelTrainer(
        special_tokens=specials, show_progress=False))
    backend.save(str(path))
    return backend


def recipe_file(folder: Path, tokenizer_path: str, **changes) -> Path:
    data = tiny(data={"tokenizer": {"type": "file", "path": tokenizer_path,
                                    "vocab_size": 64}}, **changes)
    path = folder / "r.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_a_run_trains_on_the_tokenizer_file_of_an_earlier_run(
        tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    earlier = tiny_checkpoint.parent.parent / "tokenizer.json"
    shutil.copy(earlier, tmp_path / "earlier.json")
    monkeypatch.chdir(tmp_path)  # the path is relative to where normzoo runs, as data.dir is
    path = recipe_file(tmp_path, "earlier.json")
    result = runner.invoke(app, ["train", str(path), "run.dir=run"])
    assert result.exit_code == 0, result.output
    theirs = Tokenizer.load(earlier)
    ours = Tokenizer.load(tmp_path / "run" / "tokenizer.json")
    assert ours.to_str() == theirs.to_str()  # that tokenizer, not one trained with vocab 64
    text = "The big dogs saw a small cat."
    assert ours.encode(text) == theirs.encode(text)
    weights = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    rows = {tuple(v.shape) for k, v in weights["state_dict"].items() if "embed" in k}
    assert (theirs.vocab_size, 32) in rows and (64, 32) not in rows
    saved = yaml.safe_load((tmp_path / "run" / "recipe.yaml").read_text(encoding="utf-8"))
    assert saved["data"]["tokenizer"]["path"] == str(tmp_path / "earlier.json")  # resolved


def test_prepared_ids_are_those_of_the_file(tmp_path: Path):
    from normzoo.data.prepare import data_key, prepare
    from normzoo.data.train_tokenizer import split_chunks, tokenizer_key

    backend = word_level(tmp_path / "words.json", list(SPECIALS))
    recipe = from_dict(tiny(data={"tokenizer": {"type": "file",
                                                "path": str(tmp_path / "words.json")}}))
    prepared, tokenizer, _ = prepare(recipe)
    assert tokenizer.to_str() == backend.to_str()
    sources = [line for chunk in split_chunks(recipe, "train") for line in chunk[0]]
    table = prepared.table("train", "src")
    assert len(table) == len(sources)
    for i, line in enumerate(sources):
        assert table.row(i).tolist() == backend.encode(line, add_special_tokens=False).ids
    # Keyed by the file's content: another file at the same path is another tokenizer.
    key, prepared_key = tokenizer_key(recipe), data_key(recipe, tokenizer.to_str())
    backend.add_tokens(["zebra"])
    backend.save(str(tmp_path / "words.json"))
    again = prepare(recipe)[1]
    assert tokenizer_key(recipe) != key
    assert data_key(recipe, again.to_str()) != prepared_key
    assert again.vocab_size == tokenizer.vocab_size + 1


def test_a_missing_tokenizer_file_is_refused_at_validate_train_and_prepare(tmp_path: Path):
    path = recipe_file(tmp_path, str(tmp_path / "gone.json"))
    message = f"data.tokenizer.path: tokenizer file not found: {tmp_path / 'gone.json'}"
    for command in (["recipe", "validate"], ["train"], ["prepare"]):
        result = runner.invoke(app, [*command, str(path), f"run.dir={tmp_path / 'run'}"])
        assert result.exit_code == 2, result.output
        assert message in result.output
        assert "Traceback" not in result.output
    assert not (tmp_path / "run").exists()


def test_a_tokenizer_without_normzoos_special_tokens_is_refused(tmp_path: Path):
    word_level(tmp_path / "bert.json", ["[PAD]", "<pad>", "[UNK]"])
    path = recipe_file(tmp_path, str(tmp_path / "bert.json"))
    for command in (["recipe", "validate"], ["prepare"]):
        result = runner.invoke(app, [*command, str(path)])
        assert result.exit_code == 2, result.output
        output = " ".join(result.output.split())  # the message wraps on a narrow terminal
        assert "data.tokenizer.path:" in output and str(tmp_path / "bert.json") in output
        assert ("tokenizer does not have normzoo's special tokens at their fixed ids: <pad> "
                "(id 0) is id 1; <s> (id 1) is missing; </s> (id 2) is missing; <unk> (id 3) "
                "is missing; <mask> (id 4) is missing") in output
        assert "special_tokens=['<pad>', '<s>', '</s>', '<unk>', '<mask>']" in output


@pytest.mark.parametrize("content", ["{ not json", '{"version": "1.0"}'])
def test_a_file_that_is_no_tokenizer_is_refused(tmp_path: Path, content: str):
    (tmp_path / "bad.json").write_text(content, encoding="utf-8")
    result = runner.invoke(app, ["recipe", "validate",
                                 str(recipe_file(tmp_path, str(tmp_path / "bad.json")))])
    assert result.exit_code == 2, result.output
    assert "inputs missing or unusable" in result.output  # it is there: not "not found"
    assert f"data.tokenizer.path: cannot read tokenizer {tmp_path / 'bad.json'}" in \
        " ".join(result.output.split())


def test_type_file_needs_a_path():
    with pytest.raises(ConfigError) as info:
        from_dict(tiny(data={"tokenizer": {"type": "file"}}))
    assert [str(p) for p in info.value.problems] == [
        "data.tokenizer.path: required when type is 'file'"]


def test_a_run_from_init_from_or_resuming_does_not_read_the_file(tmp_path: Path):
    from normzoo.run.inputs import input_problems

    recipe = from_dict(tiny(data={"tokenizer": {"type": "file", "path": "gone.json"}}))
    assert [p.path for p in input_problems(recipe)] == ["data.tokenizer.path"]
    assert input_problems(recipe, resuming=True) == []
    # init.from: the run trains on the checkpoint's tokenizer, whatever data.tokenizer says.
    started = from_dict(tiny(data={"tokenizer": {"type": "file", "path": "gone.json"}},
                             init={"from": str(tmp_path / "x.ckpt")}))
    assert [p.path for p in input_problems(started)] == ["init.from"]


def test_a_files_own_truncation_and_padding_are_switched_off(tmp_path: Path):
    """A tokenizer saved with truncation and padding on would cut and pad every sentence
    silently; normzoo batches and cuts to the recipe's lengths itself."""
    backend = word_level(tmp_path / "words.json", list(SPECIALS))
    text = "the big dogs saw a small cat"
    whole = backend.encode(text, add_special_tokens=False).ids
    backend.enable_truncation(max_length=3)
    backend.enable_padding(pad_id=0, pad_token=SPECIALS[0], length=12)
    backend.save(str(tmp_path / "cut.json"))
    loaded = Tokenizer.load(tmp_path / "cut.json")
    assert loaded.encode(text) == whole and len(whole) > 3
    assert [len(ids) for ids in loaded.encode_batch([text, "cat"])] == [len(whole), 1]
