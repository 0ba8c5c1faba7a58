"""``normzoo evaluate``: scoring a checkpoint or export on a split of its recipe's data or on
given files, the way a paper's numbers are made.

What to score is said once: ``--split`` or ``--src``/``--ref``, never both. sacreBLEU's own
command line refuses a test set (``-t``) given with reference files ("I need exactly one of
...") rather than pick one: a score on the files, read as the split's, ends up in a paper
table. An explicit ``--hyps`` file that exists is kept unless ``--force``, as ``train`` keeps
a run directory: hypotheses of another model or beam would be lost without a word. The
default ``hyps.SPLIT.evaluate.txt`` is evaluate's own output and is rewritten.

Checkpoint loading and sacreBLEU load inside the command, never at import.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from normzoo.cli.common import (
    batch_tokens_option,
    beam_option,
    device_option,
    input_warnings,
    lenpen_option,
    user_errors,
)
from normzoo.io.atomic import check_output_file


@user_errors
def evaluate(
    checkpoint: Path = typer.Argument(..., metavar="CHECKPOINT",
                                      help="A .ckpt file or an export directory."),
    split: str = typer.Option(None, metavar="NAME", help="Split of the recipe's data "
                              "(default: its data.test_split, e.g. test)."),
    src: Path = typer.Option(None, metavar="FILE",
                             help="A file to score instead of --split, in the split's format "
                             "(translation: source sentences, with --ref)."),
    ref: Path = typer.Option(None, metavar="FILE",
                             help="Raw references, line-aligned with --src."),
    data_dir: Path = typer.Option(None, metavar="DIR",
                                  help="Where the recipe's data files are now."),
    beam: int = beam_option(),
    lenpen: float = lenpen_option(),
    batch_tokens: int = batch_tokens_option(),
    bf16: bool = typer.Option(False, "--bf16", help="Decode under bf16 autocast (translation; "
                              "on a CPU with bf16 instructions or a GPU)."),
    hyps: Path = typer.Option(None, metavar="FILE",
                              help="Where to write hypotheses (default: "
                              "hyps.SPLIT.evaluate.txt)."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing --hyps file."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
    device: str = device_option(),
) -> None:
    """Score a checkpoint or export: BLEU and chrF (sacreBLEU) for translation, MLM accuracy or
    perplexity for language models."""
    from normzoo.contract import EvaluateRequest, task_of, working_tasks
    from normzoo.errors import NormzooError
    from normzoo.inference.load import load
    from normzoo.tasks.evaluation import by_test_step

    if split is not None and (src is not None or ref is not None):
        given = " and ".join(o for o, v in (("--src", src), ("--ref", ref)) if v is not None)
        raise NormzooError(f"--split {split} and {given} both say what to score: drop "
                           f"--split to score the files, or {given} to score split {split}")
    if hyps is not None:
        check_output_file(hyps, "--hyps")
        if hyps.exists() and not force:
            raise NormzooError(f"--hyps {hyps} exists; give another file, or --force to "
                               "overwrite it")
    loaded = load(checkpoint, device)
    task = task_of(loaded.recipe)
    asked = {"beam": beam, "lenpen": lenpen, "bf16": bf16 or None, "hyps": hyps, "src": src,
             "ref": ref, "force": force or None}
    given = {key: value for key, value in asked.items() if value is not None}
    refused = [f"--{key}" for key in given if key not in task.evaluate_options]
    if refused:  # they would be ignored without a word, and the reader believe them used
        verb = "applies" if len(refused) == 1 else "apply"
        keys = {option.removeprefix("--") for option in refused}
        users = [other.name for other in working_tasks()
                 if keys <= other.evaluate_options] or ["other tasks"]
        raise NormzooError(f"{', '.join(refused)} {verb} to {' and '.join(users)} only; "
                           f"{checkpoint} is {task.kind} (task {loaded.recipe.task})")
    data = loaded.recipe.data
    if data_dir is not None:
        data = data.model_copy(update={"dir": str(data_dir), "source": "files"})
        loaded.recipe = loaded.recipe.model_copy(update={"data": data})
    name = split or data.test_split
    request = EvaluateRequest(
        str(checkpoint), name, src, batch_tokens, given,
        by_test_step=lambda **how: by_test_step(task, loaded, name, src, batch_tokens,
                                                str(checkpoint), **how))
    with input_warnings():  # an input longer than the model's positions, named
        report, lines = task.evaluate(loaded, request)
    typer.echo(json.dumps(report, indent=2) if as_json else "\n".join(lines))
