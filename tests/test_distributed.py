"""Real multi-process training: DDP with 2 CPU processes (gloo), launched as users launch it.

Each run is the ``normzoo train`` command in a subprocess with ``trainer.strategy=ddp
trainer.devices=2``: Lightning's launcher re-runs the command for the second process, which is
exactly what must work (one run directory, rank-0-only output).
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import warm

from normzoo.data import builtin
from normzoo.recipe import OptimConfig
from normzoo.tasks.optim import lr_factor

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")

RECIPE = """
task: translation
seed: 5
model: {d_model: 32, heads: 2, ffn_dim: 64, encoder_layers: 1, decoder_layers: 1,
        dropout: 0.0, max_positions: 128}
data: {source: files, src_lang: en, tgt_lang: xx, max_len: 64, max_tokens: 300,
       tokenizer: {vocab_size: 250, min_frequency: 1}}
optim: {lr: 3.0e-3, warmup_steps: 3, schedule: inverse_sqrt, clip_norm: 1.0}
trainer: {max_steps: 6, val_every_steps: 3, log_every_steps: 1, accelerator: cpu,
          progress_bar: false, keep_checkpoints: 2}
eval: {beam: 1}
"""


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ddp")
    for split, size in (("train", 400), ("valid", 40), ("test", 20)):
        builtin.write_split(root / "data", split, size=size)
    (root / "recipe.yaml").write_text(RECIPE, encoding="utf-8")
    return root


def train(workspace: Path, name: str, *overrides: str, devices: int = 2,
          extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NORMZOO_CACHE": str(workspace / "cache")}
    strategy = ["trainer.strategy=ddp"] if devices > 1 else []
    command = [sys.executable, "-m", "normzoo", "train", str(workspace / "recipe.yaml"),
               f"data.dir={workspace / 'data'}", f"run.dir={workspace / name}",
               f"trainer.devices={devices}", *strategy, *overrides, *extra]
    result = warm.run(command, cwd=workspace, env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def without_key_bias(name: str, value: torch.Tensor) -> torch.Tensor:
    """Drop the key projection's bias: softmax ignores it, so its exact gradient is zero and
    what it gets is float rounding noise, which Adam (scale-free) turns into +-lr steps. Any
    two summation orders disagree there; every other weight must match."""
    d = 32
    if name.endswith("qkv_proj.bias"):
        return torch.cat([value[:d], value[2 * d:]])
    if name.endswith("kv_proj.bias"):
        return value[d:]
    return value


def weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)["state_dict"]


def metrics(run: Path) -> list[dict[str, str]]:
    with open(run / "logs" / "csv" / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def runs(workspace: Path) -> dict[str, subprocess.CompletedProcess]:
    return {
        # Two processes with 300 tokens each against one process with 600.
        "ddp": train(workspace, "ddp", "data.max_tokens=300"),
        "single": train(workspace, "single", "data.max_tokens=600", devices=1),
    }


def test_two_processes_end_with_the_weights_of_one_process_with_twice_the_batch(
    workspace, runs
):
    ddp, single = weights(workspace / "ddp/checkpoints/last.ckpt"), weights(
        workspace / "single/checkpoints/last.ckpt")
    assert ddp.keys() == single.keys()
    for key in ddp:
        a, b = without_key_bias(key, ddp[key]), without_key_bias(key, single[key])
        torch.testing.assert_close(a, b, rtol=1e-4, atol=2e-5, msg=key)
    start = weights(workspace / "ddp/checkpoints/step-3.ckpt")
    moved = max((ddp[k] - start[k]).abs().max().item() for k in ddp)
    assert moved > 1e-3  # training really changed the weights between the checkpoints


def test_one_run_directory_and_one_set_of_checkpoints(workspace, runs):
    def files(run: Path) -> list[str]:  # TensorBoard event names hold host and pid: skip
        return sorted(str(p.relative_to(run)) for p in run.rglob("*")
                      if p.is_file() and "tb" not in p.parts)

    ddp_files, single_files = files(workspace / "ddp"), files(workspace / "single")
    assert ddp_files == single_files
    assert "checkpoints/last.ckpt" in ddp_files and "summary.json" in ddp_files
    assert sorted(p.name for p in workspace.iterdir()) == [
        "cache", "data", "ddp", "recipe.yaml", "single"]  # no stray lightning_logs etc.
    # Rank-0-only output: the summary is printed once (a pipe gets its one-line form).
    assert runs["ddp"].stdout.count("summary: ") == 1


def test_validation_bleu_under_two_processes_equals_single_process_bleu(workspace, runs):
    rows = [r for r in metrics(workspace / "ddp") if r.get("val/bleu")]
    assert [int(r["step"]) for r in rows] == [2, 5]  # validation after steps 3 and 6
    ddp_bleu = float(rows[-1]["val/bleu"])
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = warm.run(
        [sys.executable, "-m", "normzoo", "evaluate",
         str(workspace / "ddp/checkpoints/last.ckpt"), "--split", "valid", "--beam", "1",
         "--data-dir", str(workspace / "data"), "--hyps", str(workspace / "h.txt"), "--json"],
        cwd=workspace, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["sentences"] == 40
    assert ddp_bleu == pytest.approx(report["bleu"], abs=1e-4)
    (workspace / "h.txt").unlink()


def test_resume_under_ddp_continues_step_count_and_learning_rate(workspace):
    train(workspace, "resume", "trainer.max_steps=4", "trainer.val_every_steps=2")
    first = metrics(workspace / "resume")
    train(workspace, "resume", "trainer.max_steps=8", "trainer.val_every_steps=2",
          extra=("--resume", "auto"))
    rates = [float(r["train/lr"]) for r in metrics(workspace / "resume") if r.get("train/lr")]
    first_rates = [float(r["train/lr"]) for r in first if r.get("train/lr")]
    assert len(first_rates) == 4 and len(rates) == 8  # the earlier rows are kept on resume
    # The rate of each of the 8 updates follows the schedule across the restart.
    factor = lr_factor(OptimConfig(lr=3e-3, warmup_steps=3, schedule="inverse_sqrt"), 8)
    assert rates == pytest.approx([3e-3 * factor(step) for step in range(8)], rel=1e-5)
    ckpt = torch.load(workspace / "resume/checkpoints/last.ckpt", weights_only=True)
    assert ckpt["global_step"] == 8


@pytest.mark.parametrize("settings", [
    ["trainer.accelerator=gpu"],
    ["trainer.strategy=fsdp", "trainer.devices=2", "trainer.accelerator=cpu"],
])
def test_a_strategy_the_hardware_cannot_run_is_a_clear_error_and_writes_nothing(
    workspace, tmp_path, settings
):
    from typer.testing import CliRunner

    from normzoo.cli import app

    run_dir = tmp_path / "never"
    result = CliRunner().invoke(app, ["train", str(workspace / "recipe.yaml"),
                                      f"data.dir={workspace / 'data'}", f"run.dir={run_dir}",
                                      *settings])
    assert result.exit_code == 2, result.output
    assert "cannot run on this machine" in result.output
    assert not run_dir.exists()


@pytest.mark.slow  # in `-m slow`: keeps the default run under 15 minutes on 2 cores
def test_sigterm_under_ddp_stops_both_processes_at_one_step_and_resumes_exactly(workspace):
    # Pre-emption of a multi-process job: SIGTERM to the launching process (as a scheduler
    # sends it) reaches both ranks; they agree on the step, save one checkpoint, exit 143
    # without hanging, and --resume auto ends with the weights of an uninterrupted run.
    settings = ("trainer.max_steps=30", "trainer.val_every_steps=3", "data.max_tokens=300")
    train(workspace, "term-whole", *settings)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NORMZOO_CACHE": str(workspace / "cache")}
    command = [sys.executable, "-m", "normzoo", "train", str(workspace / "recipe.yaml"),
               f"data.dir={workspace / 'data'}", f"run.dir={workspace / 'term'}",
               "trainer.devices=2", "trainer.strategy=ddp", *settings]
    live = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=workspace)
    last = workspace / "term" / "checkpoints" / "last.ckpt"
    for _ in range(3000):
        if last.exists() or live.poll() is not None:
            break
        time.sleep(0.1)
    live.send_signal(signal.SIGTERM)
    _, err = live.communicate(timeout=300)
    assert live.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "Traceback" not in err
    stopped = torch.load(last, weights_only=True)["global_step"]
    assert 3 <= stopped < 30
    assert f"stopped by SIGTERM at step {stopped}" in err
    train(workspace, "term", *settings, extra=("--resume", "auto"))
    whole, resumed = weights(workspace / "term-whole/checkpoints/last.ckpt"), weights(last)
    for key in whole:
        assert torch.equal(whole[key], resumed[key]), key


@pytest.mark.slow  # in `-m slow`: keeps the default run under 15 minutes on 2 cores
def test_ngpt_under_ddp_keeps_its_rows_on_the_sphere_and_equals_one_process(workspace):
    """A scheme's after_step (nGPT's renormalisation) runs on every process after each update:
    the replicas stay equal to a single process with twice the batch, rows unit length."""
    ddp = train(workspace, "ngpt-ddp", "data.max_tokens=300", "model.residual=ngpt")
    single = train(workspace, "ngpt-single", "data.max_tokens=600", "model.residual=ngpt",
                   devices=1)
    assert ddp.returncode == single.returncode == 0
    a = weights(workspace / "ngpt-ddp/checkpoints/last.ckpt")
    b = weights(workspace / "ngpt-single/checkpoints/last.ckpt")
    for key in a:
        torch.testing.assert_close(without_key_bias(key, a[key]), without_key_bias(key, b[key]),
                                   rtol=1e-4, atol=2e-5, msg=key)
    embedding = a["model.encoder_embeddings.tokens.weight"]
    norms = embedding.norm(dim=1)
    torch.testing.assert_close(norms[norms > 0], torch.ones_like(norms[norms > 0]))
