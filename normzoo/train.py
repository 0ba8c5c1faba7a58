"""One training run from a recipe: run directory, tokenizer, data, task, Trainer, final test.

Run directory layout::

    recipe.yaml          the resolved recipe (overrides applied)
    tokenizer.json       the tokenizer the model was trained with
    checkpoints/         last.ckpt and the best by the validation metric
    logs/csv/            metrics.csv (Lightning CSVLogger)
    logs/tb/             TensorBoard events
    summary.json         final metrics, wall time, test scores
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from normzoo.atomic import atomic_write_text, checkpoint_io, remove_stale_temporaries
from normzoo.errors import NormzooError, RuntimeFailure
from normzoo.models.config import ModelConfig
from normzoo.preemption import Preempted
from normzoo.recipe import Recipe

TASKS = {
    "translation": ("normzoo.tasks.translation", "TranslationTask", "val/bleu", "max"),
    "mlm": ("normzoo.tasks.lm", "MaskedLMTask", "val/loss", "min"),
    "causal_lm": ("normzoo.tasks.lm", "CausalLMTask", "val/loss", "min"),
}


class RunDirectoryExists(NormzooError):
    """A run directory already holds a run; refuse to overwrite it silently."""


class TrainerSetupError(NormzooError):
    """The recipe's trainer settings cannot run on this machine (devices, strategy, precision)."""


def run_directory(recipe: Recipe, recipe_path: str | Path) -> Path:
    return Path(recipe.run.dir or Path("runs") / Path(recipe_path).stem)


def global_rank() -> int:
    """This process's rank, known before the Trainer exists (from the launcher's environment).

    Lightning's launcher re-runs ``normzoo train`` once per extra process, and torchrun or SLURM
    start every process the same way: only rank 0 may create or write the run directory.
    """
    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    return getattr(rank_zero_only, "rank", 0) or 0


def _contents(run_dir: Path) -> list[Path]:
    """What ``run_dir`` holds besides the lock of the process that is looking."""
    from normzoo.runlock import LOCK_NAME

    if not run_dir.is_dir():
        return []
    return [p for p in run_dir.iterdir() if p.name != LOCK_NAME]


def refuse_existing_run(run_dir: Path, force: bool) -> bool:
    """Whether ``run_dir`` holds a run; raise unless ``force`` allows overwriting it."""
    holds_run = bool(_contents(run_dir))
    if holds_run and not force:
        raise RunDirectoryExists(
            f"run directory {run_dir} already holds a run; pass --force to overwrite it, "
            "or choose another with run.dir=PATH"
        )
    return holds_run


def prepare_run_dir(recipe: Recipe, recipe_path: str | Path, force: bool) -> Path:
    run_dir = run_directory(recipe, recipe_path)
    if refuse_existing_run(run_dir, force):
        for path in _contents(run_dir):  # not the lock: it keeps others out while we start
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def monitored_metric(recipe: Recipe) -> tuple[str, str]:
    """The validation metric that picks the best checkpoint, and whether higher is better."""
    _, _, monitor, mode = TASKS[recipe.task]
    if recipe.task == "translation" and not recipe.eval.valid_bleu:
        return "val/loss", "min"
    return monitor, mode


def task_class(task: str):
    import importlib

    module, name, _, _ = TASKS[task]
    return getattr(importlib.import_module(module), name)


def _flush_logs_callback():
    from lightning.pytorch.callbacks import Callback

    class FlushLogsOnCheckpoint(Callback):
        """Write the loggers' buffered rows whenever a checkpoint is saved.

        A run killed later loses no logged history that its checkpoint covers: the resumed run
        picks up both from the same step.
        """

        def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
            for logger in trainer.loggers:
                logger.save()

    return FlushLogsOnCheckpoint()


def build_trainer(recipe: Recipe, run_dir: Path, **extra: Any):
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint, RichProgressBar
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    t = recipe.trainer
    strategy: Any = t.strategy
    if t.strategy == "fsdp":
        from lightning.pytorch.strategies import FSDPStrategy

        from normzoo.models.layers import DecoderLayer, EncoderLayer

        # One FSDP unit per Transformer layer; each process saves its own shard.
        strategy = FSDPStrategy(auto_wrap_policy={EncoderLayer, DecoderLayer},
                                state_dict_type="sharded")
    from normzoo.checkpointing import rolling_checkpoints
    from normzoo.preemption import preemption_callback

    monitor, mode = monitored_metric(recipe)
    checkpoints = run_dir / "checkpoints"
    # Lightning runs checkpoint callbacks last, in this order: best-N, then step-N and last.
    best = ModelCheckpoint(
        dirpath=checkpoints,
        filename="best-{step}",
        monitor=monitor,
        mode=mode,
        save_top_k=t.save_top_k,
        save_last=False,
        auto_insert_metric_name=False,
    )
    rolling = rolling_checkpoints(checkpoints, t.keep_checkpoints)
    callbacks: list[Any] = [best, rolling, preemption_callback(rolling, t.slurm_requeue),
                            _flush_logs_callback()]
    diagnostics = recipe.diagnostics
    if diagnostics.guard or diagnostics.max_loss is not None:
        from normzoo.diagnostics.callbacks import DivergenceGuard

        callbacks.append(DivergenceGuard(diagnostics.max_loss))
    if diagnostics.every_steps:
        from normzoo.diagnostics.callbacks import DiagnosticsCallback

        callbacks.append(DiagnosticsCallback(diagnostics.every_steps))
    if t.progress_bar:
        callbacks.append(RichProgressBar(leave=True))
    loggers = [
        CSVLogger(run_dir / "logs", name="csv", version=""),
        TensorBoardLogger(run_dir / "logs", name="tb", version="", default_hp_metric=False),
    ]
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    try:
        return L.Trainer(
            default_root_dir=run_dir,
            max_steps=t.max_steps,
            max_epochs=t.max_epochs if t.max_epochs is not None else -1,
            max_time=t.max_time,
            val_check_interval=t.val_every_steps * t.accumulate,
            check_val_every_n_epoch=None,
            log_every_n_steps=t.log_every_steps,
            accumulate_grad_batches=t.accumulate,
            gradient_clip_val=recipe.optim.clip_norm or None,
            precision=t.precision,
            accelerator=t.accelerator,
            devices=t.devices,
            num_nodes=t.num_nodes,
            strategy=strategy,
            callbacks=callbacks,
            logger=loggers,
            use_distributed_sampler=False,  # token-budget batches are sharded by our sampler
            enable_progress_bar=t.progress_bar,
            plugins=[checkpoint_io()],  # atomic writes: never a half-written checkpoint
            **extra,
        )
    except (MisconfigurationException, ValueError, RuntimeError) as error:
        raise TrainerSetupError(
            f"trainer settings (accelerator={t.accelerator}, devices={t.devices}, "
            f"num_nodes={t.num_nodes}, strategy={t.strategy}, precision={t.precision}) cannot "
            f"run on this machine: {error}"
        ) from None


def read_metrics(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def write_metrics(path: Path, rows: list[dict[str, str]]) -> None:
    fields = sorted({key for row in rows for key in row})
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, text.getvalue(), "metrics log")


def resume_checkpoint(run_dir: Path, resume: str) -> Path:
    """``auto`` -> the run's newest complete checkpoint, whatever its name (``last.ckpt`` may
    be older, if the process died between two writes); otherwise the path given."""
    from normzoo.checkpointing import newest_checkpoint

    if resume != "auto":
        path = Path(resume)
        if not path.exists():
            raise RunDirectoryExists(f"cannot resume: no checkpoint at {path}")
        return path
    directory = run_dir / "checkpoints"
    newest = newest_checkpoint(directory)
    if newest is None:
        raise RunDirectoryExists(
            f"cannot resume {run_dir}: no complete checkpoint in {directory} (the run stopped "
            "before its first checkpoint, "
            "which is written at the first validation, every trainer.val_every_steps steps); "
            "start it again with --force"
        )
    return newest.path


class ResumeError(NormzooError):
    """The checkpoint to resume from does not belong to this recipe's model or task."""


def check_resumable(saved: dict[str, Any], recipe: Recipe, path: Path) -> None:
    """Refuse a checkpoint whose model or task differs from ``recipe``'s, naming each difference.

    Loading it anyway would fail deep inside ``load_state_dict`` with a shape mismatch, or worse,
    succeed and silently continue a different experiment.
    """
    meta = saved.get("normzoo") if isinstance(saved, dict) else None
    theirs = meta.get("recipe") if isinstance(meta, dict) else None
    if (not isinstance(theirs, dict) or "loops" not in saved
            or not isinstance(saved.get("global_step"), int)):
        raise ResumeError(f"{path} is not a normzoo training checkpoint (no recipe or loop "
                          "state in it); resume from a run's checkpoints/*.ckpt")
    ours = recipe.to_dict()
    differences = [f"task: checkpoint {theirs.get('task')!r}, recipe {ours['task']!r}"] \
        if theirs.get("task") != ours["task"] else []
    their_model, our_model = theirs.get("model"), ours["model"]
    if not isinstance(their_model, dict):
        raise ResumeError(f"{path} is damaged: its recipe has no model section")
    # Compared with defaults filled in: a key added to normzoo since the checkpoint was written
    # is not a difference when the checkpoint's model had the default.
    their_model = {**ModelConfig().model_dump(mode="json"), **their_model}
    for key in sorted(set(their_model) | set(our_model)):
        if their_model.get(key) != our_model.get(key):
            differences.append(f"model.{key}: checkpoint {their_model.get(key)!r}, "
                               f"recipe {our_model.get(key)!r}")
    if differences:
        lines = "\n".join(f"  - {d}" for d in differences)
        raise ResumeError(f"cannot resume from {path}: it was trained with another model:\n"
                          f"{lines}\nresume with the recipe it was trained with "
                          "(its run directory's recipe.yaml)")


STEP_FILE = re.compile(r"^(?:best|step)-(\d+)(?:-v\d+)?\.ckpt$")


def discard_abandoned_work(checkpoint_dir: Path, resumed_step: int) -> None:
    """Before resuming at ``resumed_step``: delete what a killed process left that the resumed
    run will redo: half-written temporary files and checkpoints of later steps (the resumed run
    writes its own; left in place they would collide with them or pose as its results)."""
    remove_stale_temporaries(checkpoint_dir)
    for path in checkpoint_dir.glob("*.ckpt"):
        match = STEP_FILE.match(path.name)
        if match and int(match.group(1)) > resumed_step:
            if path.is_dir():  # an FSDP sharded checkpoint
                shutil.rmtree(path)
            else:
                path.unlink()


def prepare_resume(ckpt_path: Path, recipe: Recipe, run_dir: Path, resume: str | None,
                   rank: int) -> tuple[int, str]:
    """Check the checkpoint to resume from and tidy the run directory; return its step and the
    tokenizer it was trained with.

    ``--resume auto`` is crash recovery: checkpoints after the resumed step are discarded as the
    run redoes them. With an explicit path they are left alone (the user may be branching).
    """
    from normzoo.checkpoint import checkpoint_parts, checkpoint_tokenizer, read_checkpoint

    # Weights only: a crafted file runs no code. FSDP's sharded checkpoints are folders whose
    # metadata is in meta.pt.
    sharded = ckpt_path.is_dir()
    saved = read_checkpoint(ckpt_path / "meta.pt" if sharded else ckpt_path)
    if not sharded:
        checkpoint_parts(saved, str(ckpt_path))  # a clean error for a damaged file
    check_resumable(saved, recipe, ckpt_path)
    tokenizer = checkpoint_tokenizer(saved["normzoo"].get("tokenizer"), str(ckpt_path))
    step = saved["global_step"]
    if rank == 0:
        if resume == "auto":
            discard_abandoned_work(run_dir / "checkpoints", step)
        else:
            remove_stale_temporaries(run_dir / "checkpoints")
    return step, tokenizer.to_str()


@contextlib.contextmanager
def machine_failures(trainer: Any) -> Iterator[None]:
    """Turn the machine running out of memory or disk into a :class:`RuntimeFailure` (exit 1)
    that says what to do, instead of a traceback from deep inside torch."""
    import torch

    try:
        yield
    except torch.OutOfMemoryError:
        raise RuntimeFailure(
            f"out of memory at step {trainer.global_step}: lower data.max_tokens (raise "
            "trainer.accumulate to keep the batch), then continue with --resume auto"
        ) from None
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
        raise RuntimeFailure(
            f"the disk is full (at step {trainer.global_step}): free space, then continue with "
            "--resume auto; the last checkpoint is intact"
        ) from None


def _trim_history(rows: list[dict[str, str]], resumed_step: int) -> list[dict[str, str]]:
    """The logged rows up to the checkpoint, each once; rows after it are redone by the resumed
    run (a row can appear twice if a process died before Lightning replaced metrics.csv)."""
    kept = {}
    for row in rows:
        if not row.get("step") or int(row["step"]) < resumed_step:
            kept.setdefault(tuple(sorted((k, v) for k, v in row.items() if v)), row)
    return list(kept.values())


def run(
    recipe: Recipe, recipe_path: str | Path, *, force: bool = False, resume: str | None = None
) -> dict[str, Any] | None:
    """Train ``recipe`` and return the summary (also written to ``summary.json``).

    Under several processes only rank 0 creates and writes the run directory and returns the
    summary; the other ranks return None. ``resume`` (``auto`` or a checkpoint path) continues
    a run in its own directory: model, optimizer, schedule and step count.

    Rank 0 holds the run directory's lock throughout (:mod:`normzoo.runlock`): a second process
    on a live run is refused before it reads or deletes anything. A SLURM job requeued after
    pre-emption runs the same command again and resumes by itself, as Lightning's does.
    """
    from normzoo.runlock import RunLock

    rank = global_rank()
    run_dir = run_directory(recipe, recipe_path)
    if rank > 0:
        return _run(recipe, recipe_path, run_dir, rank, force, _requeued(run_dir, resume))
    lock = RunLock(run_dir).acquire()
    finished = False
    try:
        summary = _run(recipe, recipe_path, run_dir, rank, force, _requeued(run_dir, resume))
        finished = True
        return summary
    except Preempted:
        finished = True  # its checkpoint stays
        raise
    finally:
        lock.release(remove_dir_if_empty=not finished)


def _requeued(run_dir: Path, resume: str | None) -> str | None:
    """``auto`` for a SLURM job restarted after a requeue whose run has a checkpoint."""
    from normzoo.checkpointing import newest_checkpoint
    from normzoo.preemption import slurm_restarted

    if resume is None and slurm_restarted() and newest_checkpoint(run_dir / "checkpoints"):
        import typer

        typer.echo(f"SLURM job restarted (SLURM_RESTART_COUNT="
                   f"{os.environ.get('SLURM_RESTART_COUNT')}): resuming {run_dir}", err=True)
        return "auto"
    return resume


def _run(recipe: Recipe, recipe_path: str | Path, run_dir: Path, rank: int, force: bool,
         resume: str | None) -> dict[str, Any] | None:
    import lightning as L

    from normzoo.data.tokenizer import Tokenizer
    from normzoo.tasks.datamodule import TextDataModule, show_progress

    started = time.perf_counter()
    ckpt_path = resume_checkpoint(run_dir, resume) if resume else None
    if rank == 0 and ckpt_path is None:
        refuse_existing_run(run_dir, force)  # at once, not after minutes of tokenizer training
    resumed_step, saved_tokenizer = 0, ""
    if ckpt_path is not None:
        resumed_step, saved_tokenizer = prepare_resume(ckpt_path, recipe, run_dir, resume,
                                                       rank)
        if rank == 0:
            import typer

            typer.echo(f"resuming from {ckpt_path} (step {resumed_step})", err=True)
    # The Trainer and the data first: settings the hardware cannot run, and data that is
    # missing or broken, fail before anything is written to the run directory.
    trainer = build_trainer(recipe, run_dir)
    saved = run_dir / "tokenizer.json"
    tokenizer = None  # the recipe's, from the prepared cache
    if saved_tokenizer:
        tokenizer = Tokenizer.from_str(saved_tokenizer)  # the one the weights were trained with
    elif saved.is_file() and rank > 0:
        tokenizer = Tokenizer.load(saved)  # the one rank 0 used
    data = TextDataModule(recipe, tokenizer, show_progress=rank == 0 and show_progress())
    # Prepared (by each node's first process) and mapped now, so that broken data fails
    # before the run directory exists.
    data.setup("fit")
    tokenizer = data.tokenizer
    if rank == 0 and ckpt_path is None:
        prepare_run_dir(recipe, recipe_path, force)
    if rank == 0:
        atomic_write_text(run_dir / "recipe.yaml", recipe.to_yaml(), "recipe")
        atomic_write_text(saved, tokenizer.to_str(), "tokenizer")
    L.seed_everything(recipe.seed, workers=True, verbose=False)
    task = task_class(recipe.task)(recipe.to_dict(), tokenizer.vocab_size, tokenizer.to_str())
    if recipe.task == "translation":
        task.valid_references = data.references["valid"]

    metrics_file = run_dir / "logs" / "csv" / "metrics.csv"
    # Lightning's CSV logger starts metrics.csv afresh: the earlier rows wait in a file of their
    # own until the run ends, so that a second crash loses none of them either.
    earlier = metrics_file.with_name("metrics.before-resume.csv")
    history = []
    if ckpt_path is not None and rank == 0:
        history = _trim_history(read_metrics(earlier) + read_metrics(metrics_file), resumed_step)
        if history:
            write_metrics(earlier, history)
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    try:
        with machine_failures(trainer):
            trainer.fit(task, datamodule=data, ckpt_path=ckpt_path, weights_only=True)
    except SIGTERMException:
        _merge_history(metrics_file, earlier, history)
        raise _preempted(trainer, recipe_path, run_dir, started) from None
    _merge_history(metrics_file, earlier, history)
    # ModelCheckpoint refreshes last.ckpt only at validation; make it the true final state.
    trainer.save_checkpoint(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    if recipe.task != "translation":  # validate/test are collective: every rank takes part
        lm_validation, lm_test = test_language_model(recipe, task, data, trainer)
    if not trainer.is_global_zero:
        return None
    summary: dict[str, Any] = {
        "status": "completed",
        "recipe": str(recipe_path),
        "run_dir": str(run_dir),
        "steps": trainer.global_step,
        "train_wall_s": round(time.perf_counter() - started, 1),
        "best_checkpoint": trainer.checkpoint_callback.best_model_path or None,
        "validation": {k: float(v) for k, v in trainer.callback_metrics.items()
                       if k.startswith("val/")} if recipe.task == "translation" else lm_validation,
    }
    summary["test"] = (test_translation(recipe, task, data, trainer)
                       if recipe.task == "translation" else lm_test)
    summary["total_wall_s"] = round(time.perf_counter() - started, 1)
    atomic_write_text(run_dir / "summary.json", json.dumps(summary, indent=2), "summary")
    return summary


def _merge_history(metrics_file: Path, earlier: Path, history: list[dict[str, str]]) -> None:
    """Put the rows logged before a resume back in front of this process's rows."""
    if history:
        write_metrics(metrics_file, history + read_metrics(metrics_file))
        earlier.unlink()


def _preempted(trainer, recipe_path: str | Path, run_dir: Path, started: float) -> Preempted:
    """What to say (and record in ``summary.json``) when a signal stopped the run."""
    import signal

    stop = next(cb for cb in trainer.callbacks if type(cb).__name__ == "StopOnSignal")
    name = signal.Signals(stop.agreed).name
    command = f"normzoo train {recipe_path} --resume auto"
    if run_directory_override(run_dir, recipe_path):
        command += f" run.dir={run_dir}"
    if trainer.is_global_zero:
        summary = {"status": "preempted", "signal": name, "recipe": str(recipe_path),
                   "run_dir": str(run_dir), "steps": trainer.global_step,
                   "checkpoint": stop.saved_path, "resume": command,
                   "train_wall_s": round(time.perf_counter() - started, 1)}
        if stop.requeue_note:
            summary["requeue"] = stop.requeue_note
        atomic_write_text(run_dir / "summary.json", json.dumps(summary, indent=2), "summary")
    note = f"; {stop.requeue_note}" if stop.requeue_note else ""
    return Preempted(f"stopped by {name} at step {trainer.global_step}: saved "
                     f"{stop.saved_path}{note}; continue with: {command}", stop.agreed)


def run_directory_override(run_dir: Path, recipe_path: str | Path) -> bool:
    """Whether ``run_dir`` is not the recipe's default (so a resume command must name it)."""
    return Path(run_dir) != Path("runs") / Path(recipe_path).stem


def _load_best(task, trainer) -> None:
    import torch

    best = trainer.checkpoint_callback.best_model_path
    if best and Path(best).is_file():  # FSDP's sharded checkpoints are folders: keep weights
        state = torch.load(best, map_location="cpu", weights_only=True)["state_dict"]
        task.load_state_dict(state)


def test_language_model(recipe: Recipe, task, data,
                        trainer) -> tuple[dict[str, float], dict[str, Any]]:
    """Task metrics of the best checkpoint on the validation split (``val/*``) and on the test
    split (all ranks take part). The test runs as ``trainer.test`` and logs under ``test/``, so
    its numbers never stand in for the validation metrics."""
    _load_best(task, trainer)
    validation = trainer.validate(task, dataloaders=data.val_dataloader(), verbose=False)[0]
    test = trainer.test(task, dataloaders=data.test_dataloader(), verbose=False)[0]
    return ({k: float(v) for k, v in validation.items()},
            {"split": recipe.data.test_split,
             **{k.removeprefix("test/"): float(v) for k, v in test.items()}})


def test_translation(recipe: Recipe, task, data, trainer) -> dict[str, Any]:
    """BLEU of the best checkpoint on the test split, decoded by rank 0 alone."""
    _load_best(task, trainer)
    split = recipe.data.test_split
    from normzoo.evaluate import translate_dataset
    from normzoo.scoring import score

    test = data.dataset("test")
    sources = data.sources["test"]
    hyps = translate_dataset(task.model, data.tokenizer, test, recipe.eval,
                             recipe.data.max_tokens)
    refs = data.references["test"]
    result = score(hyps, refs)
    copy = score(sources, refs)
    atomic_write_text(Path(trainer.default_root_dir) / f"hyps.{split}.txt",
                      "\n".join(hyps) + "\n", "hypotheses")
    summary = {"split": split, "beam": recipe.eval.beam, "bleu": round(result.bleu, 2),
               "chrf": round(result.chrf, 2), "signature": result.bleu_signature,
               "copy_source_bleu": round(copy.bleu, 2), "sentences": result.sentences}
    if recipe.eval.beam > 1:  # the greedy score beside it shows what the beam search buys
        greedy = recipe.eval.model_copy(update={"beam": 1})
        greedy_hyps = translate_dataset(task.model, data.tokenizer, test, greedy,
                                        recipe.data.max_tokens)
        summary["greedy_bleu"] = round(score(greedy_hyps, refs).bleu, 2)
    return summary
