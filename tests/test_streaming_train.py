"""``data.streaming: true`` end to end: ``normzoo train`` on a streamed hub corpus (a local folder
in the hub's layout), killed with SIGKILL and resumed, equals the uninterrupted run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from test_resume import losses, normzoo, weights
from test_sources import hub_folder, offline  # noqa: F401  (a fixture)

from normzoo.data import builtin


def recipe(folder: Path, task: str) -> dict:
    return {
        "task": task, "seed": 4,
        "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "decoder_layers": 1,
                  "encoder_layers": 1, "dropout": 0.1, "max_positions": 64},
        "data": {"source": "hub", "path": str(folder), "name": "default", "streaming": True,
                 "shuffle_buffer": 50, "train_split": "train", "valid_split": "validation",
                 "test_split": "test", "max_tokens": 256, "max_len": 32,
                 "tokenizer": {"vocab_size": 200, "min_frequency": 1}},
        "optim": {"lr": 1.0e-3, "warmup_steps": 2},
        "trainer": {"max_steps": 12, "val_every_steps": 4, "log_every_steps": 1,
                    "progress_bar": False, "accelerator": "cpu"},
    }


@pytest.fixture
def corpus(tmp_path: Path, offline) -> Path:  # noqa: F811
    columns = {split: {"text": [s for s, _ in builtin.generate(name, size=size)]}
               for split, name, size in (("train", "train", 300), ("validation", "valid", 20),
                                         ("test", "test", 20))}
    return hub_folder(tmp_path / "hub" / "toy", "default", columns)


@pytest.mark.parametrize("task", ["causal_lm", pytest.param("mlm", marks=pytest.mark.slow)])
def test_streamed_run_killed_and_resumed_equals_the_uninterrupted_run(corpus: Path,
                                                                       tmp_path: Path, task):
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe(corpus, task)))
    whole = normzoo(["train", "r.yaml", "run.dir=whole"], tmp_path)
    assert whole.returncode == 0, whole.stderr[-3000:]
    # SIGKILL as step 7 starts: the checkpoint of step 4 is the newest; the epoch is 300 lines
    # in about 6 batches, so the resumed run crosses an epoch boundary of the stream.
    killed = normzoo(["train", "r.yaml", "run.dir=cut"], tmp_path, crash=["step", "7"])
    assert killed.returncode == -9, killed.stderr[-3000:]
    resumed = normzoo(["train", "r.yaml", "run.dir=cut", "--resume", "auto"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert losses(tmp_path / "cut") == losses(tmp_path / "whole")
    a, b = weights(tmp_path / "cut"), weights(tmp_path / "whole")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_streaming_is_refused_for_translation_and_local_files(tmp_path: Path):
    for changes, message in ((["task=translation"], "streams causal_lm and mlm"),
                             (["data.source=files", "data.dir=x"], "streams hub datasets only")):
        (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe(tmp_path, "causal_lm")))
        result = subprocess.run([sys.executable, "-m", "normzoo", "recipe", "validate",
                                 str(tmp_path / "r.yaml"), *changes],
                                capture_output=True, text=True)
        assert result.returncode == 2 and message in result.stderr, result.stderr
