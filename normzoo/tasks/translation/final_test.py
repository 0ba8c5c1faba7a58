"""Translation's final test: the best checkpoint (and the average of the converged ones)
decoded on the test split and scored with BLEU, as ``summary.json`` reports it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from normzoo.checkpoints.averaging import average_state
from normzoo.checkpoints.rolling import checkpoint_step, step_checkpoints
from normzoo.contract.task import FinalTest
from normzoo.inference import translate
from normzoo.inference.scoring import score
from normzoo.io.atomic import atomic_write_text
from normzoo.nn.embeddings import to_float32
from normzoo.recipe import Recipe
from normzoo.tasks.testing import load_best


def test_translation(end: FinalTest) -> dict[str, Any]:
    """BLEU of the best checkpoint on the test split, decoded by rank 0 alone; with
    ``eval.average_last`` N > 1, also of the average of the run's converged checkpoints
    (:func:`converged_checkpoints`, fairseq's ``average_checkpoints`` at the end of training),
    under ``averaged``.

    The decoding runs on the device that trained (rank 0's): Lightning's teardown at the end of
    ``fit`` moves the model to the CPU, where an 18+18 model's four decodes of test2016 (beam
    and greedy, best and averaged) outlasted 200 s on an H200 machine's host CPU. The model
    goes back to the CPU afterwards, as Lightning left it. It decodes in float32 (a
    ``bf16-true`` run's weights cast up), as ``normzoo evaluate`` does by default.
    """
    recipe, task, data, trainer = end.recipe, end.module, end.datamodule, end.trainer
    load_best(task, trainer)
    task.to(trainer.strategy.root_device)
    to_float32(task)
    try:
        summary = _test_translation(recipe, task, data, trainer)
    finally:
        task.cpu()
    end.log_test(logged_scores(summary))
    return summary


def _test_translation(recipe: Recipe, task, data, trainer) -> dict[str, Any]:
    run_dir = Path(trainer.default_root_dir)
    summary = _score_test(recipe, task.model, data, run_dir, "")
    if recipe.eval.average_last > 1:
        best_step = best_checkpoint_step(trainer)
        paths, skipped = converged_checkpoints(step_checkpoints(run_dir / "checkpoints"),
                                               best_step, recipe.eval.average_last)
        summary["averaged"] = {"requested": recipe.eval.average_last, "rule": AVERAGE_RULE,
                               "best_step": best_step}
        if skipped:
            summary["averaged"]["skipped"] = skipped
            return summary
        task.model.load_state_dict(average_state(paths))
        averaged = _score_test(recipe, task.model, data, run_dir, ".average")
        summary["averaged"] |= {"checkpoints": [p.name for p in paths],
                                **{k: averaged[k] for k in ("bleu", "chrf", "greedy_bleu")
                                   if k in averaged}}
    return summary


def best_checkpoint_step(trainer) -> int | None:
    """The step of the run's best checkpoint (None: the run keeps none)."""
    best = trainer.checkpoint_callback.best_model_path
    return checkpoint_step(Path(best)) if best else None


AVERAGE_RULE = ("the newest N periodic checkpoints from the best validation point on (the "
                "best and those after it: the run's converged stretch)")


def converged_checkpoints(steps: list[tuple[int, Path]], best_step: int | None,
                          n: int) -> tuple[list[Path], str | None]:
    """The checkpoints to average, or none and why.

    The papers average the last checkpoints of a run trained past convergence (fairseq's
    ``average_checkpoints --num-epoch-checkpoints``): weights that oscillate around one
    optimum. The newest N of a run still improving are weights along a descent, mid-schedule,
    and their average scored below the best checkpoint in 11 of the depth study's 12 cells. So
    only the checkpoints from the best validation point on are averaged (an early-stopped run's
    last ``patience + 1``), and a run whose best checkpoint is its newest has none: it stopped
    before it converged."""
    if best_step is None:
        return [], "no best checkpoint is known, so no converged stretch to average"
    after = [path for step, path in steps if step >= best_step]
    if len(after) < 2:
        return [], (f"still improving at its end (best checkpoint at step {best_step}, the "
                    "newest): no converged checkpoints to average")
    return after[-n:], None


def logged_scores(summary: dict[str, Any]) -> dict[str, float]:
    """The test scores decoded outside ``trainer.test`` that the run's loggers get (BLEU,
    chrF; ``greedy_bleu``, ``averaged/bleu``, ...), as a language model's ``test/`` metrics."""
    keys = ("bleu", "chrf", "greedy_bleu")
    scores = {key: float(summary[key]) for key in keys if key in summary}
    return scores | {f"averaged/{key}": float(value)
                     for key, value in summary.get("averaged", {}).items() if key in keys}


def _score_test(recipe: Recipe, model, data, run_dir: Path, suffix: str) -> dict[str, Any]:
    """Decode the test split with ``model`` (beam, and greedy beside it), score it and write
    the hypotheses to ``hyps.<split><suffix>.txt``."""
    split = recipe.data.test_split
    test = data.dataset("test")
    sources = data.sources["test"]
    hyps = translate.translate_dataset(model, data.tokenizer, test, recipe.eval,
                                       recipe.data.max_tokens)
    refs = data.references["test"]
    result = score(hyps, refs)
    copy = score(sources, refs)
    atomic_write_text(run_dir / f"hyps.{split}{suffix}.txt", "\n".join(hyps) + "\n",
                      "hypotheses")
    summary = {"split": split, "beam": recipe.eval.beam, "bleu": round(result.bleu, 2),
               "chrf": round(result.chrf, 2), "signature": result.bleu_signature,
               "copy_source_bleu": round(copy.bleu, 2), "sentences": result.sentences}
    if recipe.eval.beam > 1:  # the greedy score beside it shows what the beam search buys
        greedy = recipe.eval.model_copy(update={"beam": 1})
        greedy_hyps = translate.translate_dataset(model, data.tokenizer, test, greedy,
                                                  recipe.data.max_tokens)
        summary["greedy_bleu"] = round(score(greedy_hyps, refs).bleu, 2)
    return summary
