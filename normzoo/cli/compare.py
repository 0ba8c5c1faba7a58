"""``normzoo compare``: whether one run's test BLEU beats another's beyond chance (sacreBLEU's
paired bootstrap resampling, as ``sacrebleu --paired-bs``).

sacreBLEU loads inside the command, never at import.
"""

from __future__ import annotations

from pathlib import Path

import typer

from normzoo.cli.common import user_errors


@user_errors
def compare(
    baseline: list[Path] = typer.Option(..., "--baseline", "-b", metavar="RUN_DIR",
                                        help="A finished translation run directory (repeat: "
                                        "one per seed)."),
    system: list[Path] = typer.Option(..., "--system", "-s", metavar="RUN_DIR",
                                      help="The run compared with it (repeat: one per seed, "
                                      "in the baselines' order)."),
    data_dir: Path = typer.Option(None, metavar="DIR",
                                  help="Where the recipes' data files are now."),
    samples: int = typer.Option(1000, min=10, metavar="N",
                                help="Bootstrap resamples (at least 10)."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """Paired bootstrap resampling of SYSTEM against BASELINE on their test translations.

    Says which one scores higher (the sign of the BLEU difference) beside sacreBLEU's p-value,
    which is two-sided. Several runs a side are pooled: the test is then of those translations,
    not of the variance between seeds."""
    from normzoo.sweep.compare import compare_runs, format_comparison, to_json

    result = compare_runs(baseline, system, data_dir, samples)
    typer.echo(to_json(result) if as_json else format_comparison(result))
