"""Bad values get one clean line and exit 2 before anything is written (issue 52, item 2):
non-finite floats on the command line, and a model this machine cannot hold because of a
scheme's own weights, which the size check once missed (``hyper`` with a million streams
passed ``recipe validate``; ``train`` then died asking the allocator for terabytes and left
``recipe.yaml`` and ``tokenizer.json`` behind)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

TINY = {"task": "translation", "seed": 1,
        "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "encoder_layers": 1,
                  "decoder_layers": 1},
        "data": {"source": "builtin", "train_limit": 40, "valid_limit": 10, "max_tokens": 512,
                 "tokenizer": {"vocab_size": 300}},
        "trainer": {"max_steps": 2, "progress_bar": False}}


def normzoo(args: list[str], cwd: Path, **env_vars: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NORMZOO_CACHE": str(cwd / "cache"), "OMP_NUM_THREADS": "1",
           **env_vars}
    return subprocess.run([sys.executable, "-m", "normzoo", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args, option", [
    (["translate", "model.ckpt", "--lenpen", "inf"], "--lenpen"),
    (["evaluate", "model.ckpt", "--lenpen", "inf"], "--lenpen"),
    (["generate", "model.ckpt", "--temperature", "inf"], "--temperature"),
    (["generate", "model.ckpt", "--top-p", "-inf"], "--top-p"),
    (["compare", "-b", "a", "-s", "b", "--margin", "inf"], "--margin"),
])
def test_a_non_finite_number_is_refused_by_its_option(tmp_path: Path, args, option: str):
    (tmp_path / "model.ckpt").write_bytes(b"")
    done = normzoo(args, tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "ValidationError" not in done.stderr
    assert option in done.stderr and "not a finite number" in done.stderr


def test_a_scheme_s_own_weights_count_toward_the_size_check(tmp_path: Path):
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    huge = ["model.residual=hyper", "model.residual.streams=1000000", "run.dir=run"]
    checked = normzoo(["recipe", "validate", "tiny.yaml", *huge], tmp_path)
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert "TiB" in checked.stderr and "parameters" in checked.stderr
    trained = normzoo(["train", "tiny.yaml", *huge], tmp_path)
    assert trained.returncode == 2 and "Traceback" not in trained.stderr
    assert "TiB" in trained.stderr
    assert not (tmp_path / "run").exists()  # nothing written: the next train needs no --force


def _fail_in_training(error: BaseException, checkpoints: Path) -> str:
    from types import SimpleNamespace

    from normzoo.errors import RuntimeFailure
    from normzoo.run.trainer import machine_failures

    with pytest.raises(RuntimeFailure) as failure, \
            machine_failures(SimpleNamespace(global_step=3), checkpoints):
        raise error
    return str(failure.value)


@pytest.mark.parametrize("error", [
    OSError(28, "No space left on device", "run/logs/csv/metrics.csv"),  # errno.ENOSPC
    "out of memory",
])
def test_the_advice_after_a_machine_failure_holds_for_the_run_as_it_stands(tmp_path: Path,
                                                                           error):
    """A full disk (or memory) before the first checkpoint used to advise ``--resume auto``
    and call "the last checkpoint" intact: there was none, and the resume refused."""
    import torch

    if error == "out of memory":
        error = torch.OutOfMemoryError("CUDA out of memory")
    checkpoints = tmp_path / "checkpoints"
    none_yet = _fail_in_training(error, checkpoints)
    assert "--force" in none_yet and "no checkpoint was written yet" in none_yet
    assert "--resume auto" not in none_yet and "intact" not in none_yet
    checkpoints.mkdir()
    torch.save({"global_step": 5}, checkpoints / "last.ckpt")
    saved = _fail_in_training(error, checkpoints)
    assert "continue with --resume auto (from last.ckpt, step 5, which is intact)" in saved
    if isinstance(error, OSError):
        assert "writing run/logs/csv/metrics.csv" in saved  # the file is named


def test_recipe_validate_refuses_the_empty_data_files_train_refuses(tmp_path: Path):
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    data = tmp_path / "data"
    data.mkdir()
    for split, text in (("train", ""), ("valid", "a\n"), ("test", " \n\n")):
        for lang in ("en", "de"):
            (data / f"{split}.{lang}").write_text(text)
    files = ["data.source=files", "data.dir=data", "data.src_lang=en", "data.tgt_lang=de"]
    for command in (["recipe", "validate"], ["train"]):
        done = normzoo([*command, "tiny.yaml", *files, "run.dir=run"], tmp_path)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert "inputs missing or unusable" in done.stderr
        assert "data file is empty: data/train.en (the train split" in done.stderr
        assert "data file is empty: data/test.de (only whitespace) (the test split" in done.stderr
    assert not (tmp_path / "run").exists()


def test_a_mistyped_cpu_bf16_override_is_refused_under_fp32_too(tmp_path: Path):
    """Under fp32 the override is never read; ``yes`` was accepted and went into the record."""
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    done = normzoo(["train", "tiny.yaml", "trainer.precision=32-true", "run.dir=run"], tmp_path,
                   NORMZOO_CPU_BF16="yes")
    assert done.returncode == 2, done.stderr
    assert "NORMZOO_CPU_BF16='yes': set it to 1" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "run").exists()


def test_a_raw_pickle_is_refused_in_one_line_without_torch_s_warnings(tmp_path: Path):
    import pickle

    with open(tmp_path / "raw.ckpt", "wb") as f:
        pickle.dump({"state_dict": {}, "when": __import__("datetime").date(2026, 1, 1)}, f,
                    protocol=4)
    (tmp_path / "in.txt").write_text("a b c\n")
    done = normzoo(["translate", "raw.ckpt", "--input", "in.txt"], tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("error: raw.ckpt is not a readable checkpoint")
    assert "UserWarning" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_recipe_validate_refuses_what_train_refuses_init_and_encoding(tmp_path: Path):
    """Found by the fault pass: validate said ok to a garbage init.from and a non-UTF-8 data
    file, which train then refused."""
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    (tmp_path / "bad.ckpt").write_text("garbage\n")
    done = normzoo(["recipe", "validate", "tiny.yaml", "init.from=bad.ckpt"], tmp_path)
    assert done.returncode == 2 and "bad.ckpt is not a readable checkpoint" in done.stderr
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "valid", "test"):
        for lang in ("en", "de"):
            (data / f"{split}.{lang}").write_bytes(b"a b c\n")
    (data / "train.de").write_bytes(b"\xff\xfe\x80 not text\n")
    files = ["data.source=files", "data.dir=data", "data.src_lang=en", "data.tgt_lang=de"]
    done = normzoo(["recipe", "validate", "tiny.yaml", *files], tmp_path)
    assert done.returncode == 2 and "data file is not UTF-8 text: data/train.de" in done.stderr
