"""Masked-LM scores: ``normzoo evaluate`` on a run's checkpoint and split gives what the run's
final test wrote to ``summary.json``, because each sentence's masks depend on the recipe's seed
and the sentence alone, never on the batch it falls in."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny import tiny, toy_text
from typer.testing import CliRunner

from normzoo.cli import app
from normzoo.data.examples import SentenceData
from normzoo.recipe import from_dict
from normzoo.run import training as train


def test_seeded_masks_do_not_depend_on_the_batch():
    generator = np.random.default_rng(0)
    lines = [generator.integers(5, 300, size=generator.integers(3, 30)).tolist()
             for _ in range(40)]
    data = SentenceData.build(lines, 64, 300, 0.15, mask_seed=3)
    alone = {i: data.collate([i]) for i in range(len(data))}
    for items in ([0, 1, 2, 3], [3, 2, 1, 0], [7, 30, 3], list(range(40))):
        batch = data.collate(items)
        for row, i in enumerate(items):
            width = alone[i]["tokens"].shape[1]
            assert torch.equal(batch["tokens"][row, :width], alone[i]["tokens"][0])
            assert torch.equal(batch["labels"][row, :width], alone[i]["labels"][0])
            assert batch["labels"][row, width:].eq(-100).all()
    # Another seed masks other tokens; the masked share is BERT's.
    other = SentenceData.build(lines, 64, 300, 0.15, mask_seed=4).collate(list(range(40)))
    whole = data.collate(list(range(40)))
    assert not torch.equal(whole["labels"], other["labels"])
    masked = whole["labels"].ne(-100)
    assert 0.1 < int(masked.sum()) / whole["ntokens"] < 0.25


@pytest.fixture(scope="module")
def mlm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small masked LM trained for 20 steps, its best checkpoint tested at the end."""
    root = toy_text(tmp_path_factory.mktemp("mlm"), (300, 40, 60))
    recipe = from_dict(tiny(
        task="mlm", model={"family": "encoder", "decoder_layers": 0, "activation": "gelu"},
        data={"source": "files", "dir": str(root), "max_tokens": 256, "train_limit": 300,
              "valid_limit": None},
        run={"dir": str(root / "run")}, optim={"lr": 3e-3, "warmup_steps": 2},
        trainer={"max_steps": 20, "val_every_steps": 10, "save_top_k": 1}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NORMZOO_CACHE", str(root / "cache"))
        train.run(recipe, "mlm.yaml")
    return root / "run"


@pytest.mark.parametrize("batch_tokens", [4096, 100])
def test_evaluate_scores_what_the_runs_final_test_scored(mlm_run: Path, batch_tokens: int):
    summary = json.loads((mlm_run / "summary.json").read_text(encoding="utf-8"))
    best = summary["best_checkpoint"]
    assert best and Path(best).is_file()
    result = CliRunner().invoke(app, ["evaluate", best, "--json",
                                      "--batch-tokens", str(batch_tokens)])
    assert result.exit_code == 0, result.output
    scores = json.loads(result.output)
    assert scores["split"] == summary["test"]["split"] == "test"
    # evaluate rounds to 4 decimals
    assert scores["mlm_acc"] == pytest.approx(summary["test"]["mlm_acc"], abs=6e-5)
    assert scores["loss"] == pytest.approx(summary["test"]["loss"], abs=6e-5)
    assert scores["mlm_acc"] > 0
