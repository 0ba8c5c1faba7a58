"""``normzoo compare``: whether one setting's test BLEU beats another's beyond chance, over the
seeds (Welch's t-test on the runs' BLEU) and over the sentences (sacreBLEU's paired bootstrap
resampling, as ``sacrebleu --paired-bs``); for language models, whether its test loss is lower
over the seeds (:mod:`normzoo.sweep.lm_comparison`).

sacreBLEU loads inside the command, never at import.
"""

from __future__ import annotations

from pathlib import Path

import typer

from normzoo.cli.common import user_errors


@user_errors
def compare(
    baseline: list[Path] = typer.Option(..., "--baseline", "-b", metavar="RUN_DIR",
                                        help="A finished run directory (repeat: one per seed; "
                                        "three or more to show a difference)."),
    system: list[Path] = typer.Option(..., "--system", "-s", metavar="RUN_DIR",
                                      help="A run of the setting compared with it (repeat: "
                                      "one per seed; paired with the baselines in order)."),
    data_dir: Path = typer.Option(None, metavar="DIR",
                                  help="Where the recipes' data files are now."),
    samples: int = typer.Option(1000, min=10, metavar="N",
                                help="Bootstrap resamples (at least 10)."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """Compare the SYSTEM runs with the BASELINE runs (one per seed) on their test scores.

    Says which setting scores higher, and whether that is shown. Translation: Welch's t-test on
    the runs' BLEU (the seeds' noise) and the paired bootstrap of their pooled translations (the
    test set's noise) both below 0.05. Language models: Welch's t-test on the runs' test loss
    below 0.05. Either with three runs a side or more and one precision; otherwise a difference
    is at most indicated."""
    from normzoo.sweep.compare import compare_runs, format_comparison, run_task, to_json

    if run_task([*baseline, *system]) == "translation":
        result = compare_runs(baseline, system, data_dir, samples)
        typer.echo(to_json(result) if as_json else format_comparison(result))
        return
    from normzoo.sweep.lm_comparison import compare_lm_runs, format_lm_comparison, lm_json

    result = compare_lm_runs(baseline, system)
    typer.echo(lm_json(result) if as_json else format_lm_comparison(result))
