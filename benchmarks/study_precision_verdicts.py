"""The precision study's verdicts: bf16-mixed against fp32 for each scheme, depth and reading,
judged by :func:`normzoo.sweep.significance.judge` on the per-seed values (BLEU at most
indicated: the cells kept no test translations for the paired bootstrap), and where a scheme
fails in both precisions, so that no precision effect could be seen at all.
"""

from __future__ import annotations

import statistics
from typing import Any

from study_precision_plan import DEPTH, PRECISIONS, SCHEMES, SEEDS, STUDIES

from normzoo.sweep.significance import INDICATED, MIN_SEEDS, NOT_SHOWN, SHOWN, judge, welch_p

FAILED_BLEU = 1.0  # a scheme whose every cell scores below this test BLEU failed to train


def group(cells: list[Any], study: str, scheme: str, precision: str) -> list[Any]:
    return sorted((c for c in cells if (c.study, c.scheme, c.precision) == (study, scheme,
                                                                             precision)),
                  key=lambda c: c.seed)


def mean_sd(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else None)


def _ms(values: list[float], digits: int = 2) -> str:
    mean, sd = mean_sd(values)
    if mean is None:
        return "pending"
    return f"{mean:.{digits}f}" + (f" ± {sd:.{digits}f}" if sd is not None else "")


READINGS = (("bleu", "test2016 BLEU (beam 5)", 2), ("best_val", "best validation loss", 3))


def compare(cells: list[Any], study: str, scheme: str, attribute: str) -> dict[str, Any]:
    """bf16 minus fp32 in the mean of ``attribute`` over seeds, and the seed-aware verdict on
    it: BLEU with no paired bootstrap (no translations kept), so at most indicated; the
    validation loss by the seeds' test alone (no per-sentence values)."""
    values = {p: [getattr(c, attribute) for c in group(cells, study, scheme, p)
                  if getattr(c, attribute) is not None] for p in PRECISIONS}
    expected = len(SEEDS[study])
    done = all(len(v) == expected for v in values.values())
    result: dict[str, Any] = {"values": values, "done": done, "diff": None, "verdict": None,
                              "welch": None}
    if values["32-true"] and values["bf16-mixed"]:
        result["diff"] = (statistics.mean(values["bf16-mixed"])
                          - statistics.mean(values["32-true"]))
        result["verdict"] = judge(values["32-true"], values["bf16-mixed"], None,
                                  sentence_test=attribute == "bleu")
        result["welch"] = welch_p(values["32-true"], values["bf16-mixed"])
    return result


def failed(cells: list[Any], study: str, scheme: str) -> bool:
    """Whether every cell of the scheme, in both precisions, scored under FAILED_BLEU."""
    mine = [c for p in PRECISIONS for c in group(cells, study, scheme, p)]
    return bool(mine) and all(c.bleu is not None and c.bleu < FAILED_BLEU for c in mine)


def _both(values: dict[str, list[float]], digits: int) -> str:
    return ", ".join(f"{PRECISIONS[p]} {_ms(v, digits)}" for p, v in values.items())


def verdict_lines(cells: list[Any]) -> tuple[list[str], str | None]:
    """One line per scheme and reading, and the strongest verdict over the 6+6 readings (None
    while cells are pending)."""
    lines, labels = [], []
    for study in STUDIES:
        for scheme, name in SCHEMES.items():
            for attribute, what, digits in READINGS:
                c = compare(cells, study, scheme, attribute)
                head = f"- {name} {DEPTH[study]}, {what}:"
                if c["diff"] is None:
                    lines.append(f"{head} pending.")
                    continue
                where = "" if c["done"] else " (not every seed has run yet)"
                numbers = f"bf16 minus fp32 {c['diff']:+.{digits}f} ({_both(c['values'], digits)})"
                seeds = min(len(v) for v in c["values"].values())
                if seeds < MIN_SEEDS:
                    few = "one seed" if seeds == 1 else f"{seeds} seeds"
                    line = (f"{head} {numbers}: {few} a precision can neither show nor rule out "
                            f"a precision effect{where}.")
                else:
                    label = c["verdict"].label
                    why = ("no test translations were kept, so no paired bootstrap: at most "
                           "indicated" if attribute == "bleu" else
                           "no per-sentence losses: the seeds' test alone")
                    line = (f"{head} {numbers}: {'**' + label + '**' if label == SHOWN else label}"
                            f" (Welch p = {c['welch']:.2f}; {why}){where}.")
                if failed(cells, study, scheme):
                    line += (f" {name} fails to train in both precisions (BLEU under "
                             f"{FAILED_BLEU:.0f} in every cell), so no precision effect could be "
                             "seen here at all.")
                lines.append(line)
                if study == "shallow":
                    labels.append(c["verdict"].label if c["done"] else None)
    if not labels or None in labels:
        return lines, None
    return lines, next((label for label in (SHOWN, INDICATED) if label in labels), NOT_SHOWN)

