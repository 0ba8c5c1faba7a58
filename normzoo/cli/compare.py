"""``normzoo compare``: whether one setting's test score beats another's beyond chance, over the
seeds and over the test set's examples, for any task (:mod:`normzoo.verdicts.runs`, under the
rule of :mod:`normzoo.verdicts.rule`).

numpy, scipy and sacreBLEU load inside the command, never at import.
"""

from __future__ import annotations

from pathlib import Path

import typer

from normzoo.cli.common import user_errors


def positive_margin(value: float | None) -> float | None:
    """``--margin``: a finite number above 0, the one message for every other value (a bound
    of ``min=0`` told nan "greater than or equal to 0" and let 0 through to a later refusal)."""
    import math

    if value is not None and not (math.isfinite(value) and value > 0):
        what = "is not a finite number" if not math.isfinite(value) else "is not above 0"
        raise typer.BadParameter(f"{value} {what}: use a finite number above 0 (the half-width "
                                 "of the equivalence band, in the score's unit), e.g. 0.5")
    return value


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
    samples: int = typer.Option(1000, min=100, metavar="N",
                                help="Resamples of the example-level test (at least 100)."),
    margin: float = typer.Option(None, metavar="M", callback=positive_margin,
                                 help="Also test whether the two are equal within ± M (in the "
                                 "score's unit: BLEU, accuracy, nats/token): two one-sided "
                                 "tests over the seeds. Without it, nothing is called equal."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """Compare the SYSTEM runs with the BASELINE runs (one per seed) on the task's test score
    (BLEU, a classifier's accuracy, a language model's loss).

    Says which setting scores better, and whether that is shown: the seeds' t-test (paired
    when both sides ran the same seeds, else Welch's) and the example-level test (a two-sided
    hierarchical bootstrap of the runs' per-example test outputs: seeds, then examples) both
    below 0.05, with three runs a side or more, every run's precision and device recorded and
    one of each; otherwise it is at most indicated, and the reason says why. Runs that are not
    distinct work (one seed twice, two runs of one training, outputs that agree beyond what
    two seeds ever do) are refused. A difference not shown is no finding of equality: --margin
    M tests that (two one-sided tests), held to the same rule."""
    import json

    from normzoo.verdicts.runs import compare_runs, format_comparison

    result = compare_runs(baseline, system, data_dir, samples, margin)
    typer.echo(json.dumps(result, indent=2, default=str) if as_json
               else format_comparison(result))
