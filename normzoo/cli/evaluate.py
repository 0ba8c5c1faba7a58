"""``normzoo evaluate``: scoring a checkpoint or export on a split of its recipe's data or on
given files, the way a paper's numbers are made.

What to score is said once: ``--split`` or ``--src``/``--ref``, never both. sacreBLEU's own
command line refuses a test set (``-t``) given with reference files ("I need exactly one of
...") rather than pick one: a score on the files, read as the split's, ends up in a paper
table. An explicit ``--hyps`` file that exists is kept unless ``--force``, as ``train`` keeps
a run directory: hypotheses of another model or beam would be lost without a word. The
default ``hyps.SPLIT.evaluate.txt`` is evaluate's own output and is rewritten.

What to score, the options a task refuses and ``--data-dir`` are decided by
:func:`normzoo.inference.evaluation.evaluate`, which ``normzoo.load(...).evaluate`` shares.
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
    from normzoo.inference.evaluation import check_hyps, check_what_to_score
    from normzoo.inference.evaluation import evaluate as scored
    from normzoo.inference.load import load

    check_what_to_score(split, src, ref)  # before loading: both are refused at once
    check_hyps(hyps, force)
    loaded = load(checkpoint, device)
    asked = {"beam": beam, "lenpen": lenpen, "bf16": bf16, "hyps": hyps, "src": src,
             "ref": ref, "force": force}
    with input_warnings():  # an input longer than the model's positions, named
        report, lines = scored(loaded, str(checkpoint), split=split, batch_tokens=batch_tokens,
                               data_dir=data_dir, options=asked)
    typer.echo(json.dumps(report, indent=2) if as_json else "\n".join(lines))
