"""The depth study's tables: its figures beside the papers', and the fixes at 18+18 with the
verdict of each against Pre-LN and Post-LN (the rule is ``study_depth_verdicts``')."""

from __future__ import annotations

from typing import Any

from study_depth_verdicts import PRECISION, SCHEMES, Comparison, compare, setting
from study_files import fmt, mean_sd

from normzoo.sweep.significance import p_text, welch_p

PAPERS = [
    ("6 layers", "Admin (Liu et al. 2020), WMT14 En-De", {"post": "27.80", "pre": "27.27",
                                                          "admin": "27.90"}),
    ("6 layers", "Admin (Liu et al. 2020), IWSLT14 De-En", {"post": "35.64", "pre": "35.50",
                                                            "admin": "35.67"}),
    ("18 layers", "Admin (Liu et al. 2020), WMT14 En-De", {"post": "diverged", "pre": "28.38",
                                                           "admin": "29.03"}),
    ("18 layers", "DeepNet (Wang et al. 2022)", {"post": "diverged", "deepnorm": "28.8"}),
]


def _mean_cell(group: list[Any]) -> str:
    if not group:
        return "–"
    mean, sd = mean_sd([c.bleu for c in group])
    return f"{mean:.2f} ± {sd:.2f} ({len(group)})" if len(group) > 1 else f"{mean:.2f} (1)"


def papers_table(cells: list[Any]) -> list[str]:
    schemes = ("post", "pre", "admin", "deepnorm")
    lines = ["| depth | source | " + " | ".join(SCHEMES[s] for s in schemes) + " |",
             "|---|---|" + "---|" * len(schemes)]
    for depth, source, figures in PAPERS:
        lines.append(f"| {depth} | {source} | "
                     + " | ".join(figures.get(s, "–") for s in schemes) + " |")
    for depth, tier, cap in (("6+6", "ceiling", "7,000"), ("18+18", "stability", "4,500")):
        row = [_mean_cell(setting(cells, tier, scheme)) for scheme in schemes]
        lines.append(f"| {depth} | normzoo, Multi30k En-De test2016 (d_model 128, {cap}-update "
                     "cap; mean ± sd (seeds)) | " + " | ".join(row) + " |")
    return lines


def _difference(result: Comparison | None) -> str:
    """The difference of the means, its verdict, and the seeds' p-value (the test set's, the
    paired bootstrap's, is in the verdict's own text and in ``normzoo compare``)."""
    if result is None:
        return "–"
    seed_p = welch_p(result.theirs, result.ours)
    return (f"{result.diff:+.2f}, {result.verdict.label}"
            + (f" (Welch p = {p_text(seed_p)})" if seed_p is not None else ""))


def fixes_table(cells: list[Any], refs: list[str] | None) -> list[str]:
    """The fixes at 18+18 against Pre-LN and Post-LN (the first rows), in test BLEU over the
    seeds in the study's precision, with the devices they ran on; a scheme trained but not
    scored has its best validation loss only."""
    lines = ["| scheme (18+18, warm-up 4,000, bf16-mixed) | seeds: BLEU (device) | mean ± sd | "
             "best val loss | minus Pre-LN | minus Post-LN |", "|---|---|---|---|---|---|"]
    for scheme in SCHEMES:
        group = setting(cells, "stability", scheme)
        ran = [c for c in cells if c.tier == "stability" and c.scheme == scheme
               and c.precision == PRECISION]
        per_seed = ", ".join(f"{c.seed}: {fmt(c.bleu)} ({c.device_short})" for c in ran)
        cols = [_difference(compare(cells, "stability", scheme, base, refs)
                            if scheme != base else None) for base in ("pre", "post")]
        vals = [c.best_val for c in ran if c.best_val is not None]
        best = (f"{mean_sd(vals)[0]:.3f}" + (f" ± {mean_sd(vals)[1]:.3f}" if len(vals) > 1
                                                else "")) if vals else "–"
        name = SCHEMES[scheme] + " (baseline)" * (scheme in ("pre", "post"))
        lines.append(f"| {name} | {per_seed or '–'} | {_mean_cell(group)} | {best} | "
                     + " | ".join(cols) + " |")
    return lines
