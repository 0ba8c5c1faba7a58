"""``normzoo compare``: whether one setting's test BLEU beats another's beyond chance, over the
seeds (a t-test on the runs' BLEU: paired where both sides ran the same seeds, else Welch's) and
over the sentences (a hierarchical paired bootstrap: seeds, then sentences; on one run a side,
``sacrebleu --paired-bs``); for language models, whether its test loss is lower over the seeds
(:mod:`normzoo.sweep.lm_comparison`).

sacreBLEU loads inside the command, never at import.
"""

from __future__ import annotations

from pathlib import Path

import typer

from normzoo.cli.common import finite, user_errors


@user_errors
def compare(
    baseline: list[Path] = typer.Option(..., "--baseline", "-b", metavar="RUN_DIR",
                                        help="A finished run directory (repeat: one per seed; "
                                        "three or more to show a difference)."),
    system: list[Path] = typer.Option(..., "--system", "-s", metavar="RUN_DIR",
                                      help="A run of the setting compared with it (repeat: "
                                      "one per seed; paired with the baselines seed with "
                                      "seed where the seeds match, else in order)."),
    data_dir: Path = typer.Option(None, metavar="DIR",
                                  help="Where the recipes' data files are now."),
    samples: int = typer.Option(1000, min=10, metavar="N",
                                help="Bootstrap resamples (at least 10)."),
    margin: float = typer.Option(None, min=0.0, metavar="M", callback=finite,
                                 help="Also test whether the two are equal within ± M (BLEU, "
                                 "or nats/token for language models): two one-sided tests "
                                 "over the seeds. Without it, nothing is called equal."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """Compare the SYSTEM runs with the BASELINE runs (one per seed) on their test scores.

    Says which setting scores higher, and whether that is shown. Translation: a t-test on the
    runs' BLEU (the seeds' noise; paired when both sides ran the same seeds, else Welch's) and
    the hierarchical bootstrap of their translations (seeds, then sentences) both below 0.05.
    Language models: the t-test on the runs' test loss below 0.05 (a classifier: on its test
    accuracy). Either with three runs a
    side or more, one precision and one device kind; otherwise a difference is at most
    indicated. Runs of a side with identical translations (or test losses) are refused. A
    difference not shown is no finding of equality: --margin M tests that (two one-sided
    tests), held to the same rule."""
    from normzoo.sweep.compare import compare_runs, format_comparison, run_task, to_json

    if margin is not None and margin <= 0:
        raise typer.BadParameter("must be above 0", param_hint="--margin")
    from normzoo.tasks import task_of

    if task_of(run_task([*baseline, *system])).compared_by == "hypotheses":
        result = compare_runs(baseline, system, data_dir, samples, margin)
        typer.echo(to_json(result) if as_json else format_comparison(result))
        return
    from normzoo.sweep.lm_comparison import compare_lm_runs, format_lm_comparison, lm_json

    result = compare_lm_runs(baseline, system, margin,
                             task_of(run_task([*baseline, *system])).compared_score)
    typer.echo(lm_json(result) if as_json else format_lm_comparison(result))
