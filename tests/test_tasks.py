"""Each task learns on a tiny corpus, and one end-to-end ``normzoo.run.training.run`` leaves a
complete run directory behind.

Tiny models (d_model 32, 1 layer) on 200 examples, CPU only: a few seconds per task.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from registered import BUILTIN_TASKS

from normzoo.contract import task_of
from normzoo.data import builtin
from normzoo.data.prepare import recipe_tokenizer
from normzoo.data.tokenizer import Tokenizer
from normzoo.errors import ConfigError
from normzoo.recipe import Recipe, from_dict, load
from normzoo.run import directory
from normzoo.run import training as train
from normzoo.run.machine import resolve_auto
from normzoo.tasks.datamodule import TextDataModule

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


@pytest.fixture(scope="module", autouse=True)
def _cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NORMZOO_CACHE", str(tmp_path_factory.mktemp("nzcache")))
        yield


@pytest.fixture(scope="module")
def text_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``{split}.txt`` files for the language-model tasks, from the built-in corpus."""
    folder = tmp_path_factory.mktemp("text")
    for split in ("train", "valid", "test"):
        pairs = builtin.generate(split, size=200 if split == "train" else 40)
        lines = [s for s, _ in pairs]
        (folder / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def tiny(task: str, source: dict[str, Any], **sections: dict[str, Any]) -> Recipe:
    recipe = {
        "task": task,
        "seed": 1,
        "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "encoder_layers": 1,
                  "decoder_layers": 1, "dropout": 0.0, "max_positions": 128},
        "data": {"train_limit": 200, "valid_limit": 20, "max_tokens": 512, "max_len": 64,
                 "tokenizer": {"vocab_size": 200, "min_frequency": 1}, **source},
        "optim": {"lr": 3e-3, "warmup_steps": 5, "schedule": "constant"},
        "trainer": {"max_steps": 40, "progress_bar": False, "accelerator": "cpu"},
        "eval": {"valid_bleu": False},
    }
    for name, values in sections.items():
        recipe[name] = {**recipe.get(name, {}), **values}
    return from_dict(recipe)


def fixed_loss(task, batch_of) -> float:
    """Loss on a fixed batch, without dropout and with fixed MLM masking."""
    was_training = task.training
    task.eval()
    try:
        with torch.no_grad():
            torch.manual_seed(0)
            batch = batch_of()
            return float(task.loss_terms(batch).mean)
    finally:
        task.train(was_training)


def data_of(task_name: str, text_dir: Path) -> dict[str, Any]:
    """A task that reads lines of text reads ``text_dir``'s files; any other its built-in
    corpus (``data.source: builtin``, which every task reads)."""
    if task_of(task_name).parts == ("text",):
        return {"source": "files", "dir": str(text_dir)}
    return {"source": "builtin"}


@pytest.mark.parametrize("task_name", BUILTIN_TASKS)
def test_each_task_learns(task_name: str, text_dir: Path):
    recipe = tiny(task_name, data_of(task_name, text_dir))
    L.seed_everything(recipe.seed, verbose=False)
    tokenizer = recipe_tokenizer(recipe)
    assert isinstance(tokenizer, Tokenizer) and tokenizer.vocab_size <= 200
    module = TextDataModule(recipe, tokenizer)
    module.setup("fit")
    # What only the data can say (a classifier's label set), filled in as a run does.
    recipe = module.recipe = task_of(recipe).resolved(recipe, module)
    train_set = module.dataset("train")
    assert len(train_set) > 0
    task = train.module_class(recipe.task)(recipe, tokenizer.vocab_size,
                                         tokenizer.to_str())
    assert task.model.config.family == recipe.model.family

    items = list(range(min(16, len(train_set))))
    before = fixed_loss(task, lambda: train_set.collate(items))
    trainer = L.Trainer(
        max_steps=40, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, use_distributed_sampler=False, limit_val_batches=0,
        num_sanity_val_steps=0, accelerator="cpu", devices=1,
    )
    trainer.fit(task, datamodule=module)
    assert trainer.global_step == 40
    after = fixed_loss(task, lambda: train_set.collate(items))
    assert after < 0.9 * before, (before, after)
    # A part that is not text (a classifier's label) is one target per example: 40 steps give
    # too few targets for the 0.5-nat drop asked of a loss over every token.
    if set(task_of(task_name).parts) <= set(task_of(task_name).token_parts):
        assert after < before - 0.5, (before, after)


def test_loaders_batch_within_the_budget(text_dir: Path):
    for name in BUILTIN_TASKS:
        recipe = tiny(name, data_of(name, text_dir), data={"max_tokens": 256, "max_len": 32})
        module = TextDataModule(recipe, recipe_tokenizer(recipe))
        module.setup("fit")
        seen = 0
        for batch in module.train_dataloader():
            tensors = [batch[k] for k in ("src", "tgt_in", "tgt_out", "tokens", "labels")
                       if k in batch]
            assert all(t.numel() <= 256 for t in tensors), name
            seen += tensors[0].shape[0]
        assert seen == len(module.dataset("train"))


# -- one end-to-end run ----------------------------------------------------------------------------


def e2e_recipe(run_dir: Path, **trainer: Any) -> Recipe:
    return tiny(
        "translation", {"source": "builtin"},
        run={"dir": str(run_dir)},
        optim={"schedule": "inverse_sqrt"},
        trainer={"max_steps": 20, "val_every_steps": 10, "log_every_steps": 5, **trainer},
        eval={"valid_bleu": True, "valid_bleu_limit": 10},
    )


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Recipe, Path, dict]:
    run_dir = tmp_path_factory.mktemp("runs") / "tiny"
    recipe = e2e_recipe(run_dir)
    summary = train.run(recipe, "x.yaml")
    return recipe, run_dir, summary


def test_run_directory_contents(finished_run):
    recipe, run_dir, summary = finished_run
    # The recipe as this machine trains it: data.buckets' auto resolved (no ladder on a CPU).
    assert load(run_dir / "recipe.yaml") == resolve_auto(recipe)
    assert load(run_dir / "recipe.yaml").data.buckets is None
    tokenizer = Tokenizer.load(run_dir / "tokenizer.json")
    assert tokenizer.decode(tokenizer.encode("The bakers are blue.")) == "The bakers are blue."

    checkpoints = run_dir / "checkpoints"
    assert (checkpoints / "last.ckpt").is_file()
    best = sorted(checkpoints.glob("best-*.ckpt"))
    assert len(best) == 1  # save_top_k=1

    with open(run_dir / "logs" / "csv" / "metrics.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    losses = [float(r["train/loss"]) for r in rows if r.get("train/loss")]
    assert len(losses) >= 3  # logged every 5 of 20 steps
    assert all(loss > 0 for loss in losses)
    assert any(r.get("val/loss") for r in rows)
    assert any(r.get("val/bleu") for r in rows)
    assert list((run_dir / "logs" / "tb").glob("events.out.tfevents.*"))

    on_disk = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert on_disk == json.loads(json.dumps(summary))
    assert on_disk["steps"] == 20
    assert on_disk["run_dir"] == str(run_dir)
    assert Path(on_disk["best_checkpoint"]) == best[0]
    test = on_disk["test"]
    assert {"bleu", "copy_source_bleu", "chrf", "signature"} <= test.keys()
    assert test["signature"].startswith("nrefs:1|")
    assert 0 <= test["bleu"] <= 100 and 0 <= test["copy_source_bleu"] <= 100
    assert "val/loss" in on_disk["validation"]
    hyps = (run_dir / f"hyps.{recipe.data.test_split}.txt").read_text(encoding="utf-8")
    assert len(hyps.splitlines()) == test["sentences"]


def test_checkpoint_is_plain_data_and_self_contained(finished_run):
    recipe, run_dir, _ = finished_run
    for path in [run_dir / "checkpoints" / "last.ckpt",
                 *(run_dir / "checkpoints").glob("best-*.ckpt")]:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        meta = ckpt["normzoo"]
        assert from_dict(meta["recipe"]) == resolve_auto(recipe)
        tokenizer = Tokenizer.from_str(meta["tokenizer"])
        assert tokenizer.to_str() == Tokenizer.load(run_dir / "tokenizer.json").to_str()
        plugins = {(p["kind"], p["name"]): p for p in meta["plugins"]}
        assert plugins[("norm", "layernorm")]["distribution"] == "normzoo"
        assert plugins[("residual", "pre")]["distribution"] == "normzoo"
        assert all(p["version"] for p in meta["plugins"])
        # The weights rebuild the model from the checkpoint alone.
        task = train.module_class(meta["recipe"]["task"])(from_dict(meta["recipe"]),
                                                        tokenizer.vocab_size,
                                                        meta["tokenizer"])
        task.load_state_dict(ckpt["state_dict"])


def test_last_checkpoint_holds_the_final_step(finished_run):
    recipe, run_dir, _ = finished_run
    (best,) = (run_dir / "checkpoints").glob("best-*.ckpt")
    if torch.load(best, weights_only=True)["global_step"] == recipe.trainer.max_steps:
        pytest.skip("the best checkpoint is the final one: the case cannot show")
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == recipe.trainer.max_steps


def test_a_second_run_into_the_same_directory(finished_run, monkeypatch: pytest.MonkeyPatch):
    recipe, run_dir, _ = finished_run
    before = sorted(p.relative_to(run_dir) for p in run_dir.rglob("*"))
    with pytest.raises(directory.RunDirectoryExists, match="--force"):
        train.run(recipe, "x.yaml")
    assert sorted(p.relative_to(run_dir) for p in run_dir.rglob("*")) == before  # untouched

    # With force=True the old run is cleared and training starts (stopped here, right after).
    class Started(Exception):
        pass

    def started(task):
        raise Started

    monkeypatch.setattr(train, "module_class", started)  # the step right after the directory
    other = run_dir.parent / "forced"
    other.mkdir()
    (other / "old.txt").write_text("old", encoding="utf-8")
    forced = e2e_recipe(other)
    with pytest.raises(Started):
        train.run(forced, "x.yaml", force=True)
    assert sorted(p.name for p in other.iterdir()) == [".lock", "recipe.yaml", "tokenizer.json"]
    assert load(other / "recipe.yaml") == resolve_auto(forced)


def test_an_empty_run_directory_is_not_a_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    recipe = e2e_recipe(empty)
    assert directory.RunDirectory(recipe, "x.yaml", rank=0).path.resolve() == empty
    assert directory.prepare_run_dir(empty, force=False) == empty
    # Without run.dir the directory is runs/<recipe file name>.
    plain = tiny("translation", {"source": "builtin"})
    assert directory.RunDirectory(plain, "recipes/quick.yaml", rank=0).path == Path("runs/quick")


def test_broken_data_fails_before_the_run_directory_is_created(tmp_path: Path):
    from normzoo.data.sources import DataError

    folder = tmp_path / "data"
    folder.mkdir()
    for split in ("valid", "test"):  # every file there (a missing one is refused sooner)
        for lang in ("en", "de"):
            (folder / f"{split}.{lang}").write_text("a\n", encoding="utf-8")
    (folder / "train.en").write_text("a\nb\n", encoding="utf-8")
    (folder / "train.de").write_text("a\n", encoding="utf-8")
    recipe = tiny("translation", {"source": "files", "dir": str(folder), "src_lang": "en",
                                  "tgt_lang": "de"}, run={"dir": str(tmp_path / "run")})
    with pytest.raises(DataError, match="line-aligned"):
        train.run(recipe, "broken.yaml")
    assert not (tmp_path / "run").exists()


# -- language models: validation and test each report their own split ----------------------------


def _best_score(checkpoint: Path) -> float:
    """The monitored validation metric of the best checkpoint, as ModelCheckpoint recorded it
    during training."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)["callbacks"]
    (best,) = [v["best_model_score"] for k, v in state.items()
               if k.startswith("ModelCheckpoint") and "'monitor': 'val/loss'" in k]
    return float(best)


# The language models: the assertions below name each one's metrics.
@pytest.mark.parametrize("task_name", ["causal_lm", "mlm"])
def test_language_model_summary_reports_each_split(task_name: str, text_dir: Path,
                                                    tmp_path: Path):
    """summary.json's ``validation`` is the validation split's metrics and ``test`` the test
    split's, both of the best checkpoint: the validation loss is the one that made it the best,
    and (causal LM) each equals ``normzoo evaluate --split`` of it (masked LM:
    ``tests/test_mlm_eval.py``).

    The final test used to run ``trainer.validate`` on the test split, which overwrote the
    ``val/*`` metrics that the summary then reported as validation.
    """
    from typer.testing import CliRunner

    from normzoo.cli import app

    recipe = tiny(task_name, {"source": "files", "dir": str(text_dir), "valid_limit": None},
                  run={"dir": str(tmp_path / "run")},
                  trainer={"max_steps": 20, "val_every_steps": 10})
    summary = train.run(recipe, "x.yaml")
    best = summary["best_checkpoint"]
    validation, test = summary["validation"], summary["test"]
    assert test["split"] == "test"
    assert validation["val/loss"] == pytest.approx(_best_score(Path(best)), abs=1e-5)
    # Two splits of a barely trained model can score within 1e-3; one overwriting the other
    # would be equal to the last digit.
    assert validation["val/loss"] != pytest.approx(test["loss"], abs=1e-6)
    if task_name == "mlm":
        assert set(validation) == {"val/loss", "val/mlm_acc"}
        assert set(test) == {"split", "loss", "mlm_acc"}
        return
    scores = {}
    for split in ("valid", "test"):
        result = CliRunner().invoke(app, ["evaluate", best, "--split", split, "--json"])
        assert result.exit_code == 0, result.output
        scores[split] = json.loads(result.output)
    assert validation["val/loss"] == pytest.approx(scores["valid"]["loss"], abs=2e-4)
    assert validation["val/ppl"] == pytest.approx(scores["valid"]["ppl"], abs=2e-3)
    assert test["loss"] == pytest.approx(scores["test"]["loss"], abs=2e-4)
    assert test["ppl"] == pytest.approx(scores["test"]["ppl"], abs=2e-3)


# -- Admin with init: profiled is profiled when training starts -----------------------------------


def _admin_recipe(run_dir: Path, text_dir: Path, steps: int) -> Recipe:
    return tiny("causal_lm", {"source": "files", "dir": str(text_dir)},
                model={"residual": {"name": "admin", "init": "profiled"}, "decoder_layers": 2},
                run={"dir": str(run_dir)}, trainer={"max_steps": steps, "val_every_steps": 10})


def _recorded_omegas(checkpoint: Path) -> list[float]:
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]
    return [state[k].item() for k in state if k.endswith(".profiled_omega")]


def test_admin_profiled_at_the_start_of_training_and_not_on_resume(
    text_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The first training batch profiles w (Transformer-Clinic's procedure, once, in site
    order); the checkpoint records them; a resumed run keeps them and does not profile again."""
    from normzoo.residual import admin

    calls = []
    original = admin.profile

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(admin, "profile", counting)
    run_dir = tmp_path / "run"
    recipe = _admin_recipe(run_dir, text_dir, steps=10)
    train.run(recipe, "x.yaml")
    assert len(calls) == 1
    last = run_dir / "checkpoints" / "last.ckpt"
    recorded = _recorded_omegas(last)

    # The same procedure, by itself, on the same initial model and the same first batch.
    tokenizer = Tokenizer.load(run_dir / "tokenizer.json")
    module = TextDataModule(recipe, tokenizer)
    module.setup("fit")
    L.seed_everything(recipe.seed, workers=True, verbose=False)
    task = train.module_class(recipe.task)(recipe, tokenizer.vocab_size,
                                         tokenizer.to_str())
    first = next(iter(module.train_dataloader()))
    expected = original(task.train().model, lambda: task.logits(first))["decoder"]
    assert len(expected) == 2 * 2 and expected[0] == 1.0 and min(expected[1:]) > 1.0
    assert recorded == pytest.approx(expected, rel=1e-5)
    saved = torch.load(last, map_location="cpu", weights_only=True)
    assert saved["normzoo"]["data_init"] == {"decoder": pytest.approx(expected, rel=1e-5)}
    omegas = [v for k, v in saved["state_dict"].items() if k.endswith(".omega")]
    assert len(omegas) == 4 and all(not torch.allclose(w, torch.ones_like(w)) for w in omegas)

    longer = _admin_recipe(run_dir, text_dir, steps=20)
    train.run(longer, "x.yaml", resume="auto")
    assert len(calls) == 1, "a resumed run keeps the profiled w"
    assert _recorded_omegas(last) == recorded
    assert torch.load(last, weights_only=True)["global_step"] == 20


def test_admin_profile_takes_rank_zero_values_and_leaves_the_generators(text_dir: Path):
    """Under several processes every one takes rank 0's w (the reference profiles on one GPU),
    so the replicas agree; profiling draws nothing from the run's generators."""
    from types import SimpleNamespace

    recipe = _admin_recipe(text_dir / "unused", text_dir, steps=1)
    recipe = from_dict({**recipe.to_dict(),
                        "model": {**recipe.to_dict()["model"], "dropout": 0.3}})
    tokenizer = recipe_tokenizer(recipe)
    task = train.module_class(recipe.task)(recipe, tokenizer.vocab_size,
                                         tokenizer.to_str())
    module = TextDataModule(recipe, tokenizer)
    module.setup("fit")
    batch = next(iter(module.train_dataloader()))
    rank0 = {"decoder": [1.0, 1.5, 2.0, 2.5]}
    sent = []

    def broadcast(obj, src=0):
        sent.append((obj, src))
        return rank0

    task._trainer = SimpleNamespace(world_size=2, strategy=SimpleNamespace(broadcast=broadcast))
    task.train()
    before = torch.random.get_rng_state()
    assert task.data_init(batch) == rank0
    assert torch.equal(torch.random.get_rng_state(), before)
    (own, src), = sent
    assert src == 0 and own["decoder"] != rank0["decoder"]  # its own batch's values were sent
    state = task.model.state_dict()
    assert [state[k].item() for k in state if k.endswith("profiled_omega")] == rank0["decoder"]
    omegas = [state[k] for k in state if k.endswith(".omega")]
    assert [w.unique().item() for w in omegas] == rank0["decoder"]


def test_admin_profiled_is_refused_under_fsdp():
    with pytest.raises(ConfigError) as caught:
        from_dict({"task": "translation", "trainer": {"strategy": "fsdp"},
                   "model": {"residual": {"name": "admin", "init": "profiled"}}})
    assert [p.path for p in caught.value.problems] == ["model.residual"]
    assert "fsdp" in str(caught.value)


def test_a_schemes_after_step_runs_once_per_real_update(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch):
    """The contract's after_step hook: called after each optimizer update with the updated
    weights, once per update also under gradient accumulation (4 updates of 2 batches each)."""
    from tiny import tiny

    from normzoo import models as base  # where a task's build_model finds assemble
    from normzoo.residual.pre import PreLN

    calls: list[int] = []

    class Constrained(PreLN):
        @classmethod
        def after_step(cls, model):  # a constraint a scheme could impose: unit-norm rows
            calls.append(1)
            with torch.no_grad():
                weight = model.decoder.layers[0].ffn.ffn_out.weight
                weight.div_(weight.norm(dim=1, keepdim=True))

    real_assemble = base.assemble

    def assemble(*args, **kwargs):  # a Pre-LN model whose scheme constrains it
        model = real_assemble(*args, **kwargs)
        model.scheme = Constrained
        return model

    monkeypatch.setattr(base, "assemble", assemble)
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    recipe = from_dict(tiny(run={"dir": str(tmp_path / "run")},
                            trainer={"max_steps": 4, "val_every_steps": 4,
                                     "accumulate": 2}))
    train.run(recipe, "tiny.yaml")
    assert len(calls) == 4  # one per update, not per batch
    state = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    rows = state["state_dict"]["model.decoder.layers.0.ffn.ffn_out.weight"].norm(dim=1)
    torch.testing.assert_close(rows, torch.ones_like(rows))
