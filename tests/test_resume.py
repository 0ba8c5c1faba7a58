"""Crash safety: a run killed at any moment resumes as if it had never stopped.

The crash tests kill real ``normzoo train`` processes with SIGKILL (tests/crash.py) and compare the
resumed run with an uninterrupted one of the same seed: every per-step training loss and every
final weight must be *equal*, not close (one thread, deterministic CPU kernels).
"""

from __future__ import annotations

import csv
import errno
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import torch
import warm
import yaml

from normzoo.data.batching import ResumableLoader, TokenBudgetSampler
from normzoo.errors import RuntimeFailure
from normzoo.io.atomic import (
    atomic_write_text,
    remove_stale_temporaries,
    save_checkpoint_atomically,
)

HERE = Path(__file__).parent
# 200 sentences in batches of 256 tokens: 15 batches an epoch, so 30 steps cross an epoch
# boundary and the checkpoint at step 20 falls mid-epoch. Dropout on: the RNG must be restored.
RECIPE = {
    "task": "translation",
    "seed": 3,
    "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "encoder_layers": 1,
              "decoder_layers": 1, "dropout": 0.1, "residual": "pre"},
    "data": {"source": "builtin", "train_limit": 200, "valid_limit": 20, "max_tokens": 256,
             "max_len": 32, "tokenizer": {"type": "bpe", "vocab_size": 300}},
    "optim": {"lr": 1.0e-3, "warmup_steps": 5},
    "trainer": {"max_steps": 30, "val_every_steps": 5, "log_every_steps": 1,
                "progress_bar": False},
    "eval": {"valid_bleu": False},
}


def environment(cache: Path) -> dict[str, str]:
    return {**os.environ, "NORMZOO_CACHE": str(cache), "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


def normzoo(args: list[str], cwd: Path, crash: list[str] | None = None,
            env: dict[str, str] | None = None):
    prefix = [sys.executable, str(HERE / "crash.py"), *crash] if crash else \
        [sys.executable, "-m", "normzoo"]
    return warm.run([*prefix, *args], cwd=cwd, env={**environment(cwd / "cache"), **(env or {})},
                    timeout=300)


def losses(run_dir: Path) -> dict[int, list[str]]:
    """The logged training loss of every step, as written (exact text of the float)."""
    rows: dict[int, list[str]] = {}
    with open(run_dir / "logs" / "csv" / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row.get("train/loss"):
                rows.setdefault(int(row["step"]), []).append(row["train/loss"])
    return rows


def load(path: Path) -> dict:
    return torch.load(path, weights_only=True)


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load(run_dir / "checkpoints" / "last.ckpt")["state_dict"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("resume")
    (root / "tiny.yaml").write_text(yaml.safe_dump(RECIPE))
    return root


@pytest.fixture(scope="module")
def uninterrupted(workdir: Path) -> Path:
    result = normzoo(["train", "tiny.yaml", "run.dir=runs/whole"], workdir)
    assert result.returncode == 0, result.stderr
    return workdir / "runs" / "whole"


def assert_same_run(resumed: Path, whole: Path) -> None:
    expected, got = losses(whole), losses(resumed)
    assert sorted(expected) == list(range(30))
    assert got == expected  # every step once, the same loss to the last digit
    a, b = weights(whole), weights(resumed)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert load(resumed / "checkpoints" / "last.ckpt")["global_step"] == 30


def test_sigkill_mid_epoch_then_resume_equals_an_uninterrupted_run(workdir, uninterrupted):
    killed = normzoo(["train", "tiny.yaml", "run.dir=runs/killed"], workdir, ["step", "23"])
    assert killed.returncode == -signal.SIGKILL
    run = workdir / "runs" / "killed"
    last = load(run / "checkpoints" / "last.ckpt")
    assert last["global_step"] == 20  # the work since step 20 is lost, nothing before it
    position = last["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
    assert position == {"epoch": 1, "batches": 5}  # in the middle of the second epoch

    resumed = normzoo(["train", "tiny.yaml", "run.dir=runs/killed", "--resume", "auto"],
                      workdir)
    assert resumed.returncode == 0, resumed.stderr
    assert "not resumable" not in resumed.stderr  # Lightning's warning for replayed epochs
    assert_same_run(run, uninterrupted)


@pytest.mark.slow  # in `-m slow`: keeps the default run under 15 minutes on 2 cores
def test_two_crashes_in_a_row_with_worker_processes(workdir, uninterrupted):
    # Workers collate in other processes and start ahead of the loop; the loader must still
    # resume at the right batch. The second crash must not lose the history the first kept.
    args = ["train", "tiny.yaml", "run.dir=runs/twice", "data.num_workers=2"]
    assert normzoo(args, workdir, ["step", "23"]).returncode == -signal.SIGKILL
    again = normzoo([*args, "--resume", "auto"], workdir, ["step", "28"])
    assert again.returncode == -signal.SIGKILL
    resumed = normzoo([*args, "--resume", "auto"], workdir)
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(workdir / "runs" / "twice", uninterrupted)


def test_the_first_loss_a_resumed_run_logs_averages_the_whole_window(workdir):
    """``train/loss`` is the token mean of every step since it was last written: logged every
    3 steps here, the checkpoint at step 20 falls inside a window (indices 18, 19 | 20). The
    run resumed from it logs at index 20 the mean of the same three steps as an uninterrupted
    run, not of index 20 alone: the window is in the checkpoint."""
    (workdir / "every3.yaml").write_text(yaml.safe_dump(
        {**RECIPE, "trainer": {**RECIPE["trainer"], "log_every_steps": 3}}))
    whole = normzoo(["train", "every3.yaml", "run.dir=runs/every3-whole"], workdir)
    assert whole.returncode == 0, whole.stderr
    args = ["train", "every3.yaml", "run.dir=runs/every3-killed"]
    assert normzoo(args, workdir, ["step", "23"]).returncode == -signal.SIGKILL
    resumed = normzoo([*args, "--resume", "auto"], workdir)
    assert resumed.returncode == 0, resumed.stderr
    assert "(step 20)" in resumed.stderr
    expected = losses(workdir / "runs" / "every3-whole")
    assert sorted(expected) == list(range(2, 30, 3))
    assert losses(workdir / "runs" / "every3-killed") == expected


def test_sigkill_inside_a_checkpoint_write_then_resume(workdir, uninterrupted):
    # Each validation writes best-N (when the loss improved), then step-N, then links last to
    # step-N: the 6th write is step-15, after best-15 is complete and while last is at 10.
    killed = normzoo(["train", "tiny.yaml", "run.dir=runs/torn"], workdir, ["write", "6"])
    assert killed.returncode == -signal.SIGKILL
    checkpoints = workdir / "runs" / "torn" / "checkpoints"
    torn = [p for p in checkpoints.iterdir() if p.name.startswith(".step-15.ckpt.tmp-")]
    assert len(torn) == 1  # the half-written file is there, under a name no one loads
    with pytest.raises(RuntimeError):  # torch cannot read a truncated archive
        load(torn[0])
    assert load(checkpoints / "last.ckpt")["global_step"] == 10  # the previous last, whole
    assert load(checkpoints / "best-15.ckpt")["global_step"] == 15

    resumed = normzoo(["train", "tiny.yaml", "run.dir=runs/torn", "--resume", "auto"], workdir)
    assert resumed.returncode == 0, resumed.stderr
    assert "best-15.ckpt" in resumed.stderr  # the newest complete checkpoint, whatever its name
    assert not any(p.name.startswith(".") for p in checkpoints.iterdir())
    assert not list(checkpoints.glob("*-v1.ckpt"))  # no collision with the killed run's files
    assert_same_run(checkpoints.parent, uninterrupted)


def test_last_moves_at_every_checkpoint_not_only_when_the_metric_improves(workdir, uninterrupted):
    checkpoints = uninterrupted / "checkpoints"
    steps = sorted(load(p)["global_step"] for p in checkpoints.glob("step-*.ckpt"))
    assert steps == [10, 15, 20, 25, 30]  # the newest trainer.keep_checkpoints (5)
    assert (checkpoints / "last.ckpt").stat().st_size > 0
    killed = normzoo(["train", "tiny.yaml", "run.dir=runs/lag", "eval.valid_bleu=true",
                      "optim.lr=1.0e-9"], workdir, ["step", "12"])
    assert killed.returncode == -signal.SIGKILL
    # At a learning rate of 1e-9 the translations, and so validation BLEU, cannot improve:
    # best stays at step 5, last moves on regardless.
    lag = workdir / "runs" / "lag" / "checkpoints"
    assert [p.name for p in lag.glob("best-*.ckpt")] == ["best-5.ckpt"]
    assert load(lag / "last.ckpt")["global_step"] == 10
    assert (lag / "last.ckpt").stat().st_ino == (lag / "step-10.ckpt").stat().st_ino  # no copy


def test_sigkill_at_random_steps_loses_at_most_one_interval(workdir, uninterrupted):
    # Three kills in a row at seeded random steps, each followed by --resume auto: each resume
    # starts at most val_every_steps (5) steps before the kill, and the finished run equals
    # the uninterrupted one exactly.
    import random

    from normzoo.checkpoints.rolling import newest_checkpoint

    kills = sorted(random.Random(12).sample(range(6, 30), 3))
    args = ["train", "tiny.yaml", "run.dir=runs/random"]
    checkpoints = workdir / "runs" / "random" / "checkpoints"
    first = normzoo(args, workdir, ["step", str(kills[0])])
    assert first.returncode == -signal.SIGKILL
    for n, kill in enumerate(kills):
        newest = newest_checkpoint(checkpoints)
        assert newest is not None and kill - 5 <= newest.step <= kill, (kill, newest)
        crash = ["step", str(kills[n + 1])] if n + 1 < len(kills) else None
        resumed = normzoo([*args, "--resume", "auto"], workdir, crash)
        assert resumed.returncode == (-signal.SIGKILL if crash else 0), resumed.stderr
    assert_same_run(checkpoints.parent, uninterrupted)


@pytest.mark.slow  # in `-m slow`: keeps the default run under 15 minutes on 2 cores
def test_killed_during_the_first_checkpoint_write(workdir, uninterrupted):
    # The first write is best-5: nothing complete is left, and --resume auto says what to do.
    args = ["train", "tiny.yaml", "run.dir=runs/first"]
    assert normzoo(args, workdir, ["write", "1"]).returncode == -signal.SIGKILL
    nothing = normzoo([*args, "--resume", "auto"], workdir)
    assert nothing.returncode == 2 and "Traceback" not in nothing.stderr
    assert "no complete checkpoint" in nothing.stderr and "--force" in nothing.stderr
    # The second write is step-5: best-5 is complete, there is no last.ckpt yet.
    args = ["train", "tiny.yaml", "run.dir=runs/second"]
    assert normzoo(args, workdir, ["write", "2"]).returncode == -signal.SIGKILL
    checkpoints = workdir / "runs" / "second" / "checkpoints"
    assert not (checkpoints / "last.ckpt").exists()
    resumed = normzoo([*args, "--resume", "auto"], workdir)
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(checkpoints.parent, uninterrupted)


def test_sigterm_saves_the_current_step_and_exits_143(workdir, uninterrupted):
    # SIGTERM arrives as step 13 starts: the step finishes, is checkpointed, the run stops.
    args = ["train", "tiny.yaml", "run.dir=runs/term"]
    stopped = normzoo(args, workdir, ["TERM", "13"])
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr
    assert "Traceback" not in stopped.stderr
    assert "stopped by SIGTERM at step 14" in stopped.stderr
    assert "--resume auto run.dir=runs/term" in stopped.stderr
    run = workdir / "runs" / "term"
    assert load(run / "checkpoints" / "last.ckpt")["global_step"] == 14  # not 10: nothing lost
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "preempted" and summary["steps"] == 14
    resumed = normzoo([*args, "--resume", "auto"], workdir)
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(run, uninterrupted)
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"


def test_slurm_warning_signal_checkpoints_requeues_and_the_requeued_job_resumes(
        workdir, uninterrupted, tmp_path):
    # SIGUSR1 (#SBATCH --signal=USR1@90) as step 14 starts; step 15 ends with a validation, so
    # the run stops after it. A fake scontrol records the requeue; the requeued job runs the
    # same command again (SLURM_RESTART_COUNT=1) and continues by itself.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "scontrol.args"
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" > {record}\n')
    (bin_dir / "scontrol").chmod(0o755)
    slurm = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242"}
    args = ["train", "tiny.yaml", "run.dir=runs/slurm"]
    stopped = normzoo(args, workdir, ["USR1", "14"], slurm)
    assert stopped.returncode == 128 + signal.SIGUSR1, stopped.stderr
    assert "requeued SLURM job 4242" in stopped.stderr
    assert record.read_text().split() == ["requeue", "4242"]
    run = workdir / "runs" / "slurm"
    assert load(run / "checkpoints" / "last.ckpt")["global_step"] == 15
    again = normzoo(args, workdir, env={**slurm, "SLURM_RESTART_COUNT": "1"})
    assert again.returncode == 0, again.stderr
    assert "resuming" in again.stderr
    assert_same_run(run, uninterrupted)


def test_a_second_process_on_a_live_run_is_refused_and_the_run_finishes_intact(
        workdir, uninterrupted):
    live_dir = workdir / "live"
    live_dir.mkdir()
    (live_dir / "tiny.yaml").write_text((workdir / "tiny.yaml").read_text())
    args = ["train", "tiny.yaml", "run.dir=runs/live"]
    live = warm.Popen([sys.executable, str(HERE / "crash.py"), "pause", "12", *args],
                      cwd=live_dir, env=environment(workdir / "cache"))
    try:
        for _ in range(1200):
            if (live_dir / "paused").exists() or live.poll() is not None:
                break
            time.sleep(0.1)
        assert (live_dir / "paused").exists(), live.communicate()
        for extra in (["--resume", "auto"], ["--force"], []):
            other = normzoo([*args, *extra], live_dir)
            assert other.returncode == 2, other.stderr
            assert f"in use by process {live.pid}" in other.stderr, other.stderr
            assert "Traceback" not in other.stderr
    finally:
        (live_dir / "go").write_text("")
        _, err = live.communicate(timeout=300)
    assert live.returncode == 0, err
    assert_same_run(live_dir / "runs" / "live", uninterrupted)


def test_resume_refuses_a_checkpoint_of_another_model(workdir, uninterrupted):
    other = normzoo(["train", "tiny.yaml", "run.dir=runs/whole", "model.d_model=64",
                     "model.ffn_dim=128", "--resume", "auto"], workdir)
    assert other.returncode == 2
    assert "model.d_model: checkpoint 32, recipe 64" in other.stderr
    assert "model.ffn_dim" in other.stderr and "Traceback" not in other.stderr


@pytest.mark.parametrize("content", [[1, 2], {"normzoo": "x", "loops": {}},
                                     {"normzoo": {"recipe": {"model": "oops"}}, "loops": {},
                                      "global_step": 3, "state_dict": {}}])
def test_resume_refuses_a_damaged_checkpoint_cleanly(workdir, tmp_path, content):
    damaged = tmp_path / "damaged.ckpt"
    torch.save(content, damaged)
    result = normzoo(["train", "tiny.yaml", f"run.dir={tmp_path / 'run'}", "--resume",
                      str(damaged)], workdir)
    assert result.returncode == 2, result.stderr
    assert "damaged.ckpt" in result.stderr and "Traceback" not in result.stderr


def test_resume_from_a_folder_that_is_no_checkpoint_says_so(workdir, tmp_path):
    """A folder given to --resume is read as a sharded (FSDP) checkpoint; one without its
    meta.pt is named as not one, with what to give instead."""
    folder = tmp_path / "a-run-folder"
    folder.mkdir()
    result = normzoo(["train", "tiny.yaml", f"run.dir={tmp_path / 'run'}", "--resume",
                      str(folder)], workdir)
    assert result.returncode == 2, result.stderr
    assert f"--resume {folder} is a folder but not a sharded (FSDP) checkpoint" in result.stderr
    assert "meta.pt: " not in result.stderr and "Traceback" not in result.stderr


def test_mixed_precision_trains_with_gradient_clipping(workdir):
    result = normzoo(["train", "tiny.yaml", "run.dir=runs/bf16", "trainer.precision=bf16-mixed",
                      "optim.clip_norm=1.0", "trainer.max_steps=3"], workdir)
    assert result.returncode == 0, result.stderr


def test_resume_refuses_a_code_executing_pickle_without_running_it(workdir, tmp_path):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    evil = tmp_path / "evil.ckpt"
    torch.save({"state_dict": Payload()}, evil)
    result = normzoo(["train", "tiny.yaml", f"run.dir={tmp_path / 'run'}", "--resume",
                      str(evil)], workdir)
    assert result.returncode == 2
    assert "refused" in result.stderr and "Traceback" not in result.stderr
    assert not marker.exists()


def test_a_full_disk_while_saving_exits_1_and_keeps_the_last_checkpoint(workdir):
    result = normzoo(["train", "tiny.yaml", "run.dir=runs/full"], workdir, ["enospc", "2"])
    assert result.returncode == 1
    assert "disk is full" in result.stderr and "Traceback" not in result.stderr
    checkpoints = workdir / "runs" / "full" / "checkpoints"
    assert load(checkpoints / "last.ckpt")["global_step"] == 5  # the first last.ckpt, whole
    assert not list(checkpoints.glob("step-10*"))
    assert not any(p.name.startswith(".") for p in checkpoints.iterdir())


# -- the pieces -------------------------------------------------------------------------------

def test_the_loader_reports_batches_handed_out_and_resumes_after_them():
    lengths = [3, 5, 2, 7, 4, 4, 6, 1, 2, 3] * 4
    dataset = list(range(len(lengths)))

    def loader() -> ResumableLoader:
        sampler = TokenBudgetSampler(lengths, 16, seed=1)
        return ResumableLoader(dataset, sampler, collate_fn=list)

    sampler = TokenBudgetSampler(lengths, 16, seed=1)
    sampler.set_epoch(2)
    epoch2 = list(sampler)
    first = loader()
    first.batch_sampler.set_epoch(2)
    it = iter(first)
    seen = [next(it) for _ in range(3)]
    assert first.state_dict() == {"epoch": 2, "batches": 3}

    second = loader()  # a fresh process: epoch 0, position 0
    second.load_state_dict(first.state_dict())
    assert seen + list(second) == epoch2
    assert len(second) == len(epoch2)  # the epoch's length is unchanged: Lightning counts on it
    assert second.state_dict() == {"epoch": 2, "batches": len(epoch2)}
    assert list(second) == epoch2  # the next pass starts from the top again


def test_a_new_epoch_forgets_a_pending_resume_position():
    sampler = TokenBudgetSampler([2] * 20, 8, seed=0)
    sampler.resume_at(1, 3)
    sampler.set_epoch(2)
    assert sampler.skipped == 0


def test_a_failed_write_leaves_the_previous_file_whole(tmp_path: Path):
    target = tmp_path / "last.ckpt"
    save_checkpoint_atomically({"step": 1}, target)

    def explode(f):
        f.write(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    from normzoo.io import atomic

    with pytest.raises(RuntimeFailure, match=r"disk is full.*previous version.*intact") as info:
        atomic.atomic_write(target, explode, "checkpoint")
    assert info.value.exit_code == 1
    assert load(target) == {"step": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_stale_temporaries_are_removed_and_nothing_else(tmp_path: Path):
    atomic_write_text(tmp_path / "summary.json", "{}")
    (tmp_path / ".last.ckpt.tmp-123").write_bytes(b"torn")
    (tmp_path / ".hidden").write_text("keep")
    removed = remove_stale_temporaries(tmp_path)
    assert [p.name for p in removed] == [".last.ckpt.tmp-123"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".hidden", "summary.json"]


def test_lightning_sets_the_epoch_of_the_token_budget_sampler():
    from lightning.fabric.utilities.data import _set_sampler_epoch

    sampler = TokenBudgetSampler([3, 1, 2] * 10, 6, seed=0)
    loader = ResumableLoader(list(range(30)), sampler, collate_fn=list)
    first = list(loader)
    _set_sampler_epoch(loader, 1)  # what Lightning does at the start of every epoch
    assert sampler.epoch == 1
    assert list(loader) != first  # a new order each epoch


@pytest.mark.parametrize("failure, message", [
    (torch.OutOfMemoryError("CUDA out of memory"), "out of memory at step 7: lower data.max_"),
    (OSError(errno.ENOSPC, "No space left on device"), "disk is full .*--resume auto"),
])
def test_machine_failures_during_training_become_exit_code_1(failure, message):
    from types import SimpleNamespace

    from normzoo.run.trainer import machine_failures

    with pytest.raises(RuntimeFailure, match=message) as info, \
            machine_failures(SimpleNamespace(global_step=7)):
        raise failure
    assert info.value.exit_code == 1


def test_other_os_errors_are_not_mistaken_for_a_full_disk():
    from types import SimpleNamespace

    from normzoo.run.trainer import machine_failures

    with pytest.raises(PermissionError), machine_failures(SimpleNamespace(global_step=0)):
        raise PermissionError(errno.EACCES, "denied")


def test_a_checkpoint_from_before_a_new_model_key_still_resumes():
    from normzoo.recipe import from_dict
    from normzoo.run.resume import ResumeError, check_resumable

    recipe = from_dict(RECIPE)
    old = recipe.to_dict()
    del old["model"]["bias"]  # as if written by a normzoo that had no such key (default value)
    saved = {"normzoo": {"recipe": old}, "loops": {}, "global_step": 5}
    check_resumable(saved, recipe, Path("old.ckpt"))
    old["model"]["d_model"] = 64
    with pytest.raises(ResumeError, match=r"model\.d_model: checkpoint 64, recipe 32"):
        check_resumable(saved, recipe, Path("old.ckpt"))
