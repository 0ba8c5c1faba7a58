"""Every task keeps its per-example test outputs, and every run its identity.

The classifier and the language models write ``examples.<test split>.tsv`` at the end of their
final test: one row per example of the split, in its order, whose sums give back the summary's
test scores; :meth:`Task.example_outputs` reads them as the example-level test resamples them and
refuses a damaged file, naming its line. ``summary.json``'s ``identity`` (the seed and a hash of
the initial weights) is the same for a run and its resumption, the same for the same seed, and
differs between seeds: two outputs of one training cannot pass for two seeds.

Tiny models trained a few steps on the CPU, one thread: seconds each.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import pytest
import torch
import warm
import yaml

from normzoo.classification import corpus
from normzoo.contract import module_class, task_of
from normzoo.contract.outputs import OUTPUTS_FILE
from normzoo.data import builtin
from normzoo.data.batching import TokenBudgetSampler
from normzoo.data.examples import BlockData
from normzoo.data.tokenizer import Tokenizer
from normzoo.recipe import Recipe, from_dict
from normzoo.run import training as train
from normzoo.run.identity import weights_sha256
from normzoo.tasks.per_example import ExampleOutputsError

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")

TEST_LINES = 31  # the language models' test split: 30 sentences and an empty line


@pytest.fixture(scope="module", autouse=True)
def _one_thread_and_a_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NORMZOO_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``{split}.txt`` (language models; the test split with an empty line in it) and
    ``{split}.tsv`` (the classifier) from the built-in corpora."""
    folder = tmp_path_factory.mktemp("data")
    for split, size in (("train", 200), ("valid", 20), ("test", TEST_LINES - 1)):
        lines = [source for source, _ in builtin.generate(split, size=size)]
        if split == "test":
            lines.insert(7, "")  # not an MLM example; a causal LM predicts its EOS
        (folder / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for split, size in (("train", 300), ("valid", 40), ("test", 40)):
        texts, labels = corpus.builtin_examples(split, size)
        (folder / f"{split}.tsv").write_text(
            "".join(f"{t}\t{label}\n" for t, label in zip(texts, labels, strict=True)),
            encoding="utf-8")
    return folder


def recipe(task: str, folder: Path, run_dir: Path, **sections: dict[str, Any]) -> Recipe:
    """A tiny ``task`` on ``folder``'s files; ``sections`` update the recipe's."""
    family = {"mlm": "encoder", "classification": "encoder", "causal_lm": "decoder"}[task]
    plain: dict[str, Any] = {
        "task": task,
        "seed": 1,
        "model": {"family": family, "d_model": 32, "heads": 2, "ffn_dim": 64,
                  "encoder_layers": 0 if family == "decoder" else 1,
                  "decoder_layers": 1 if family == "decoder" else 0,
                  "dropout": 0.0, "max_positions": 64},
        "data": {"source": "files", "dir": str(folder), "max_tokens": 256, "max_len": 24,
                 "tokenizer": {"vocab_size": 150, "min_frequency": 1}},
        "optim": {"lr": 3e-3, "warmup_steps": 2},
        "trainer": {"max_steps": 4, "val_every_steps": 2, "progress_bar": False,
                    "accelerator": "cpu"},
        "eval": {"valid_bleu": False},
        "run": {"dir": str(run_dir)},
    }
    for name, values in sections.items():
        plain[name] = {**plain.get(name, {}), **values} if isinstance(values, dict) else values
    return from_dict(plain)


def summary_of(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))


def saved_recipe(run_dir: Path) -> dict[str, Any]:
    return yaml.safe_load((run_dir / "recipe.yaml").read_text(encoding="utf-8"))


def rows_of(run_dir: Path) -> tuple[list[str], list[list[str]]]:
    lines = (run_dir / OUTPUTS_FILE.format(split="test")).read_text(encoding="utf-8")
    header, *rows = lines.splitlines()
    return header.split("\t"), [row.split("\t") for row in rows]


@pytest.fixture(scope="module")
def runs(data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One tiny run of each task that keeps its outputs this way."""
    root = tmp_path_factory.mktemp("runs")
    out = {}
    for task in ("classification", "causal_lm", "mlm"):
        changes = {"task_options": {"pooling": "mean"}} if task == "classification" else {}
        train.run(recipe(task, data, root / task, **changes), f"{task}.yaml")
        out[task] = root / task
    return out


# -- the rows ----------------------------------------------------------------------------------


def test_the_classifiers_rows_give_back_its_test_accuracy_and_loss(runs, data):
    run = runs["classification"]
    test = summary_of(run)["test"]
    header, rows = rows_of(run)
    assert header == ["prediction", "label", "loss"]
    gold = corpus.builtin_examples("test", 40)[1]
    assert [label for _, label, _ in rows] == gold  # the split's order, label names
    labels = set(saved_recipe(run)["task_options"]["labels"])
    assert {prediction for prediction, _, _ in rows} <= labels
    correct = sum(prediction == label for prediction, label, _ in rows)
    # torchmetrics divides in float32: the same float32 as the exact share
    assert np.float32(correct / len(rows)) == np.float32(test["accuracy"])
    losses = [float(loss) for _, _, loss in rows]
    assert all(repr(float(loss)) == loss for _, _, loss in rows)  # full repr, nothing lost
    assert sum(losses) / len(losses) == pytest.approx(test["loss"], rel=1e-5)


@pytest.mark.parametrize("task", ["causal_lm", "mlm"])
def test_a_language_models_rows_are_the_test_lines_and_give_back_its_loss(task, runs, data):
    run = runs[task]
    test = summary_of(run)["test"]
    header, rows = rows_of(run)
    assert header == ["loss_sum", "tokens"]
    assert len(rows) == TEST_LINES
    sums = [float(loss) for loss, _ in rows]
    tokens = [int(n) for _, n in rows]
    assert sum(sums) / sum(tokens) == pytest.approx(test["loss"], rel=1e-5)
    lines = (data / "test.txt").read_text(encoding="utf-8").splitlines()
    ids = Tokenizer.load(run / "tokenizer.json").encode_batch(lines)
    if task == "causal_lm":
        # Every token of a line and its EOS is predicted once, but the stream's first token.
        assert tokens == [len(line) + 1 - (i == 0) for i, line in enumerate(ids)]
    else:
        # The masked tokens the test loss counts: at least one per sentence, none of an empty
        # line (no example; its row stays, so the rows are the split's lines).
        assert rows[7] == ["0.0", "0"]
        assert all(0 < n <= len(line) for n, line in zip(tokens, ids, strict=True) if line)


@pytest.mark.parametrize("task", ["classification", "causal_lm", "mlm"])
def test_example_outputs_reads_them_as_the_resampling_needs_them(task, runs, data, tmp_path):
    run = runs[task]
    test = summary_of(run)["test"]
    outputs = task_of(from_dict(saved_recipe(run))).example_outputs(run, saved_recipe(run))
    _, rows = rows_of(run)
    assert len(outputs) == len(rows) and outputs.stats.shape == (len(rows), 2)
    if task == "classification":
        assert outputs.corpus_score() == pytest.approx(test["accuracy"], abs=1e-7)
        assert list(outputs.keys) == [(p, float(loss)) for p, _, loss in rows]
        assert outputs.stats[:, 1].tolist() == [1.0] * len(rows)
    else:
        assert outputs.corpus_score() == pytest.approx(test["loss"], rel=1e-5)
        assert list(outputs.keys) == [float(loss) for loss, _ in rows]
    # vectorised over resamples: a [resamples, k] array of column sums scores at once
    totals = np.stack([outputs.stats.sum(0), outputs.stats[:5].sum(0)])
    assert outputs.score(totals).shape == (2,)
    # A moved corpus: the split is counted where data_dir says it is now.
    moved = tmp_path / "moved"
    shutil.copytree(data, moved)
    recipe_moved = {**saved_recipe(run), "data": {**saved_recipe(run)["data"],
                                                  "dir": str(tmp_path / "gone")}}
    again = task_of(from_dict(saved_recipe(run))).example_outputs(run, recipe_moved, moved)
    assert again.stats.tolist() == outputs.stats.tolist()


def test_a_run_without_the_file_has_no_example_outputs(runs, tmp_path):
    run = tmp_path / "old"
    run.mkdir()
    recipe_plain = saved_recipe(runs["causal_lm"])
    assert task_of(from_dict(recipe_plain)).example_outputs(run, recipe_plain) is None


def _damaged(runs: dict[str, Path], tmp_path: Path, task: str, edit) -> str:
    """The error example_outputs raises on a copy of ``task``'s file edited by ``edit``."""
    run = tmp_path / task
    run.mkdir(exist_ok=True)
    path = run / OUTPUTS_FILE.format(split="test")
    lines = (runs[task] / path.name).read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join(edit(lines)) + "\n", encoding="utf-8")
    plain = saved_recipe(runs[task])
    with pytest.raises(ExampleOutputsError) as error:
        task_of(from_dict(plain)).example_outputs(run, plain)
    assert str(path) in str(error.value)
    assert error.value.exit_code == 2  # the user's file, said without a traceback
    return str(error.value)


@pytest.mark.parametrize(("task", "edit", "said"), [
    ("classification", lambda ls: ["prediction\tlabel", *ls[1:]], "line 1: expected the header"),
    ("classification", lambda ls: [*ls[:3], ls[3] + "\textra", *ls[4:]], "line 4: 4 column"),
    ("classification", lambda ls: [*ls[:2], "nolabel\t" + ls[2].split("\t", 1)[1], *ls[3:]],
     "line 3: prediction is 'nolabel', not a label of the run's label set"),
    ("classification", lambda ls: ls[:-1], "39 rows, but the test split 'test' has 40"),
    ("causal_lm", lambda ls: [*ls[:5], "1.5\tmany", *ls[6:]],
     "line 6: tokens is 'many', not a whole number"),
    ("causal_lm", lambda ls: [*ls[:5], "nan\t3", *ls[6:]],
     "line 6: loss_sum is 'nan', not a finite number"),
    ("mlm", lambda ls: [*ls, "1.0\t1"], "32 rows, but the test split 'test' has 31"),
])
def test_a_damaged_file_is_refused_naming_its_line(runs, tmp_path, task, edit, said):
    assert said in _damaged(runs, tmp_path, task, edit)


# -- the identity ------------------------------------------------------------------------------


def test_the_identity_is_the_seed_and_the_hash_of_the_weights_the_run_started_from(runs):
    run = runs["causal_lm"]
    identity = summary_of(run)["identity"]
    plain = saved_recipe(run)
    assert identity["seed"] == plain["seed"] == 1
    # The model as the seed builds it, before any step: not the trained weights.
    built = from_dict(plain)
    L.seed_everything(built.seed, workers=True, verbose=False)
    vocab = Tokenizer.load(run / "tokenizer.json").vocab_size
    fresh = module_class(built.task)(built, vocab)
    assert weights_sha256(fresh.model) == identity["init_sha256"]
    trained = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert trained["normzoo"]["identity"] == identity
    fresh.load_state_dict(trained["state_dict"])
    assert weights_sha256(fresh.model) != identity["init_sha256"]


def test_a_run_started_from_init_from_hashes_the_weights_it_loaded(runs, data, tmp_path):
    source = runs["causal_lm"] / "checkpoints" / "last.ckpt"
    started = train.run(recipe("causal_lm", data, tmp_path / "warm", init={"from": str(source)},
                               trainer={"max_steps": 2}), "lm.yaml")
    plain = saved_recipe(runs["causal_lm"])
    built = from_dict(plain)
    model = module_class(built.task)(built, Tokenizer.load(runs["causal_lm"] / "tokenizer.json")
                                   .vocab_size)
    model.load_state_dict(torch.load(source, weights_only=True)["state_dict"])
    assert started["identity"]["seed"] == 1
    assert started["identity"]["init_sha256"] == weights_sha256(model.model)


def test_a_resumed_run_keeps_the_identity_of_its_first_start(data, tmp_path):
    run = tmp_path / "run"
    first = train.run(recipe("causal_lm", data, run), "lm.yaml")
    longer = recipe("causal_lm", data, run, trainer={"max_steps": 6})
    resumed = train.run(longer, "lm.yaml", resume="auto")
    assert resumed["steps"] == 6 and first["steps"] == 4
    assert resumed["identity"] == first["identity"]
    assert torch.load(run / "checkpoints" / "last.ckpt",
                      weights_only=True)["normzoo"]["identity"] == first["identity"]


def test_the_same_seed_starts_alike_and_another_seed_does_not(runs, data, tmp_path):
    first = summary_of(runs["causal_lm"])["identity"]
    again = train.run(recipe("causal_lm", data, tmp_path / "again",
                             trainer={"max_steps": 2}), "lm.yaml")["identity"]
    other = train.run(recipe("causal_lm", data, tmp_path / "other", seed=2,
                             trainer={"max_steps": 2}), "lm.yaml")["identity"]
    # The same start; other settings (two updates, not the fixture's): another training.
    assert again["init_sha256"] == first["init_sha256"]
    assert again["settings_sha256"] != first["settings_sha256"]
    assert other["seed"] == 2 and other["init_sha256"] != first["init_sha256"]


def test_a_diverged_run_reports_its_identity_too(runs, data, tmp_path):
    from normzoo.diagnostics.callbacks import DivergenceError

    run = tmp_path / "diverged"
    with pytest.raises(DivergenceError):
        train.run(recipe("causal_lm", data, run, diagnostics={"max_loss": 0.5}), "lm.yaml")
    summary = summary_of(run)
    assert summary["status"] == "diverged"
    assert summary["identity"]["init_sha256"] == summary_of(runs["causal_lm"])["identity"][
        "init_sha256"]


# -- two processes -----------------------------------------------------------------------------


def test_two_processes_keep_each_example_once(data, tmp_path):
    """Under DDP (2 CPU processes, gloo) each rank scores its share of every test batch, and a
    batch with fewer examples than ranks is topped up by repeating one: the file has each line
    once, with every token the split holds, and scores what one process re-scoring the best
    checkpoint does."""
    # One block a process a step (30 tokens, blocks of 24): an odd number of test blocks
    # leaves the last global batch one short, and the second process repeats it.
    plain = recipe("causal_lm", data, tmp_path / "ddp", data={"max_tokens": 30},
                   trainer={"devices": 2, "strategy": "ddp"}).to_dict()
    (tmp_path / "lm.yaml").write_text(yaml.safe_dump(plain), encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = warm.run([sys.executable, "-m", "normzoo", "train", str(tmp_path / "lm.yaml")],
                    cwd=tmp_path, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = tmp_path / "ddp"
    _, rows = rows_of(run)
    lines = (data / "test.txt").read_text(encoding="utf-8").splitlines()
    ids = Tokenizer.load(run / "tokenizer.json").encode_batch(lines)
    assert [int(n) for _, n in rows] == [len(line) + 1 - (i == 0) for i, line in enumerate(ids)]
    blocks = BlockData.build(ids, 24).lengths()
    shares = [[i for batch in TokenBudgetSampler(blocks, 30, shuffle=False, rank=rank,
                                                 world_size=2) for i in batch]
              for rank in (0, 1)]
    assert len(shares[0]) + len(shares[1]) > len(blocks)  # the case is real: one repeated
    scored = warm.run([sys.executable, "-m", "normzoo", "evaluate",
                       summary_of(run)["best_checkpoint"], "--split", "test", "--json"],
                      cwd=tmp_path, env=env, timeout=300)
    assert scored.returncode == 0, scored.stderr[-3000:]
    loss = sum(float(s) for s, _ in rows) / sum(int(n) for _, n in rows)
    assert loss == pytest.approx(json.loads(scored.stdout)["loss"], abs=6e-5)
    assert summary_of(run)["identity"]["seed"] == 1
