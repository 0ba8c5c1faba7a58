"""The precision study's verdicts: bf16-mixed against fp32 for each scheme, depth and reading.

Both precisions ran the same seeds, so the seeds' test is the paired t-test (seed with seed,
:func:`normzoo.sweep.significance.same_seeds` and ``seed_order``) and the verdict is
:func:`normzoo.sweep.significance.judge`'s. BLEU is at most *indicated*: its sentence-level test,
the hierarchical bootstrap (:mod:`normzoo.sweep.bootstrap`), needs the test translations, which
the cells did not keep; the validation loss has no per-sentence values, so the seeds' test
decides alone. The precisions are not passed to ``judge``: the precision is the factor compared
here, not a confound (``judge`` refuses *shown* between runs of different precisions). A *not
shown* carries the 95% interval of the difference; "equal" is said only by the equivalence test
(TOST) against the margins below, and Holm's correction over the table's tests says which
verdicts survive making them together. Where a scheme fails in both precisions, no precision
effect could be seen at all.
"""

from __future__ import annotations

import statistics
from typing import Any

from normzoo.sweep.significance import (
    INDICATED,
    NOT_SHOWN,
    SHOWN,
    equivalence_p,
    equivalence_verdict,
    holm,
    judge,
    p_text,
    paired_t_p,
    same_seeds,
    seed_interval,
    seed_order,
    welch_p,
)

from .plan import DEPTH, PRECISIONS, SCHEMES, SEEDS, STUDIES

FAILED_BLEU = 1.0  # a scheme whose every cell scores below this test BLEU failed to train
# Under the ± 1.57 BLEU within which test2016 itself places one run's score (bootstrap.py):
BLEU_MARGIN = 1.0  # a smaller difference is one a single run's BLEU cannot resolve.
# e^0.02 = 1.02, a 2% change of perplexity; about the seeds' spread of Pre-LN 6+6 (0.020):
LOSS_MARGIN = 0.02  # a smaller difference is what choosing another seed already moves.
# (attribute, what, digits, margin, unit)
READINGS = (("bleu", "test2016 BLEU (beam 5)", 2, BLEU_MARGIN, "BLEU"),
            ("best_val", "best validation loss", 3, LOSS_MARGIN, "nats"))
TEST_NAME = "paired t"


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


def compare(cells: list[Any], study: str, scheme: str, attribute: str) -> dict[str, Any]:
    """bf16 minus fp32 in the mean of ``attribute`` over seeds; the paired t-test where both
    precisions ran the same seeds (Welch's otherwise), its 95% interval of the difference, the
    equivalence test against the reading's margin, and ``judge``'s verdict."""
    margin = dict((a, m) for a, _, _, m, _ in READINGS)[attribute]
    runs = {p: [c for c in group(cells, study, scheme, p) if getattr(c, attribute) is not None]
            for p in PRECISIONS}
    for p, side in runs.items():
        runs[p] = [side[i] for i in seed_order([c.seed for c in side])]
    values = {p: [getattr(c, attribute) for c in side] for p, side in runs.items()}
    seeds = {p: [c.seed for c in side] for p, side in runs.items()}
    done = all(len(v) == len(SEEDS[study]) for v in values.values())
    paired = same_seeds(seeds["32-true"], seeds["bf16-mixed"])
    devices = {c.device for side in runs.values() for c in side} - {""}
    result: dict[str, Any] = {"values": values, "done": done, "diff": None, "verdict": None,
                              "paired": paired, "seed_p": None, "interval": None,
                              "margin": margin, "equivalence_p": None, "equal": None,
                              "seeds": min(len(v) for v in values.values())}
    base, system = values["32-true"], values["bf16-mixed"]
    if base and system:
        result["diff"] = statistics.mean(system) - statistics.mean(base)
        result["seed_p"] = (paired_t_p if paired else welch_p)(base, system)
        result["verdict"] = judge(base, system, None, devices=devices, paired=paired,
                                  sentence_test=attribute == "bleu",
                                  sentence_name="hierarchical bootstrap")
        result["interval"] = seed_interval(base, system, paired)
        result["equivalence_p"] = equivalence_p(base, system, margin, paired)
        # No precisions here either: they are what is compared, not a second factor.
        result["equal"] = equivalence_verdict(result["equivalence_p"], result["seeds"],
                                              devices=devices)
    return result


def failed(cells: list[Any], study: str, scheme: str) -> bool:
    """Whether every cell of the scheme, in both precisions, scored under FAILED_BLEU."""
    mine = [c for p in PRECISIONS for c in group(cells, study, scheme, p)]
    return bool(mine) and all(c.bleu is not None and c.bleu < FAILED_BLEU for c in mine)


def comparisons(cells: list[Any]) -> list[dict[str, Any]]:
    """Every comparison of the table, in its order, with Holm's correction over the table's
    difference tests (``holm_diff``) and, apart, over its equivalence tests (``holm_equal``);
    a comparison with nothing to test (one seed a precision) is not counted."""
    rows = []
    for study in STUDIES:
        for scheme, name in SCHEMES.items():
            for attribute, what, digits, _, unit in READINGS:
                rows.append({**compare(cells, study, scheme, attribute), "study": study,
                             "scheme": scheme, "name": f"{name} {DEPTH[study]}", "what": what,
                             "digits": digits, "unit": unit,
                             "failed": failed(cells, study, scheme)})
    for key, p_key in (("holm_diff", "seed_p"), ("holm_equal", "equivalence_p")):
        for row, kept in zip(rows, holm([r[p_key] for r in rows]), strict=True):
            row[key] = kept
    return rows


def _interval(row: dict[str, Any]) -> str:
    if row["interval"] is None:
        return ("no interval: one seed a precision" if row["seeds"] < 2
                else "no interval: no variance to test")
    low, high = row["interval"]
    digits = row["digits"] + 1
    return f"{low:+.{digits}f} to {high:+.{digits}f}"


def _margin(row: dict[str, Any]) -> str:
    return f"± {row['margin']:.{row['digits'] - 1}f} {row['unit']}"


def _test(row: dict[str, Any]) -> str:
    if row["seed_p"] is None:
        return "– (one seed a side)" if row["seeds"] < 2 else "– (no variance to test)"
    return f"{TEST_NAME if row['paired'] else 'Welch'} p = {p_text(row['seed_p'])}"


def _holm(row: dict[str, Any]) -> str:
    """Whether Holm's correction keeps the row's verdict and its "equal"."""
    if row["seed_p"] is None:
        return "nothing to test"
    label, equal = row["verdict"].label, row["equal"]
    parts = [f"difference: {'kept' if row['holm_diff'] else f'not kept ({label} → not shown)'}"
             if label != NOT_SHOWN else "difference: not shown either way"]
    if equal in (SHOWN, INDICATED):
        parts.append(f"equal: {'kept' if row['holm_equal'] else 'not kept (→ not shown)'}")
    return "; ".join(parts)


def table_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The verdict table: one row per scheme, depth and reading."""
    tests = sum(r["seed_p"] is not None for r in rows)
    equal_tests = sum(r["equivalence_p"] is not None for r in rows)
    lines = ["| comparison | fp32 | bf16-mixed | bf16 − fp32 | 95% interval of the difference "
             "| seeds' test | verdict | equal within the margin (TOST p) | Holm's correction "
             f"over the table ({tests} difference, {equal_tests} equivalence tests) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        head = f"| {r['name']}, {r['what']} | "
        if r["diff"] is None:
            lines.append(head + "pending | | | | | | | |")
            continue
        d, label = r["digits"], r["verdict"].label
        equal = (f"{_margin(r)}: {r['equal']} (p = {p_text(r['equivalence_p'])})"
                 if r["equivalence_p"] is not None else f"{_margin(r)}: nothing to test")
        lines.append(head + " | ".join([
            _ms(r["values"]["32-true"], d), _ms(r["values"]["bf16-mixed"], d),
            f"{r['diff']:+.{d}f}", _interval(r), _test(r),
            (f"**{label}**" if label == SHOWN else label)
            + ("" if r["done"] else " (not every seed has run yet)"), equal, _holm(r)]) + " |")
    return lines


def findings(rows: list[dict[str, Any]], updates: str) -> tuple[str | None, str, str]:
    """The strongest 6+6 verdict (None while cells are pending), the conclusion on the 6+6
    readings (what is shown or indicated to move, what the equivalence test shows equal within
    its margin, what neither, and whether Holm's correction keeps each) and its summary line."""
    shallow = [r for r in rows if r["study"] == "shallow"]
    if not shallow or any(r["diff"] is None or not r["done"] for r in shallow):
        text = (f"**Not decided yet**: the 6+6 cells of every seed have not all run (the short "
                f"protocol's runs, {updates}).")
        return None, text, text.replace("**", "")
    labels = [r["verdict"].label for r in shallow]
    strongest = next((label for label in (SHOWN, INDICATED) if label in labels), NOT_SHOWN)
    tests = sum(r["seed_p"] is not None for r in rows)
    holm_not = "not kept by Holm's correction"
    moved = [r for r in shallow if r["verdict"].label != NOT_SHOWN]
    equal = [r for r in shallow if r["equal"] == SHOWN]
    open_ = [r for r in shallow if r["verdict"].label == NOT_SHOWN and r["equal"] != SHOWN]
    every = all(r["equal"] == SHOWN and r["holm_equal"] for r in shallow)
    close = ("So bf16-mixed moves no 6+6 reading by more than the margins." if every else
             "So this page does not say that bf16-mixed moves no reading: the equivalence "
             "tests do not support it for every reading.")
    text = (f"**At 6+6, in the short protocol's runs ({updates}; three seeds a precision)**: "
            + "; ".join(f"{_reading(r)} is **{r['verdict'].label}** to move: bf16 minus fp32 "
                        f"{r['diff']:+.{r['digits'] + 1}f} {r['unit']} (95% interval "
                        f"{_interval(r)}; {_test(r)}, which Holm's correction over the table's "
                        f"{tests} tests {'keeps' if r['holm_diff'] else 'does not keep'})"
                        + (f", a difference within the margin {_margin(r)}"
                           if r["equal"] == SHOWN else "") for r in moved)
            + (". " if moved else "no reading is shown to move. "))
    if equal:
        text += ("Equal to fp32 within the margin by the equivalence test: " + ", ".join(
            f"{_reading(r)} within {_margin(r)} (TOST p = {p_text(r['equivalence_p'])}"
            + ("" if r["holm_equal"] else f", {holm_not}") + ")" for r in equal) + ". ")
    if open_:
        text += ("Neither shown to move nor shown equal, so a difference beyond the margin is "
                 "still open: " + ", ".join(f"{_reading(r)} (95% interval {_interval(r)} "
                                            f"{r['unit']}, margin {_margin(r)})"
                                            for r in open_) + ". ")
    items = ([f"{_reading(r)} {r['verdict'].label} to move ({r['diff']:+.{r['digits'] + 1}f} "
              f"{r['unit']}, {_test(r)}" + ("" if r["holm_diff"] else f", {holm_not}") + ")"
              for r in moved]
             + [f"{_reading(r)} equal within {_margin(r)} (TOST p = "
                f"{p_text(r['equivalence_p'])}" + ("" if r["holm_equal"] else f", {holm_not}")
                + ")" for r in equal]
             + [f"{_reading(r)} neither shown to move nor equal within {_margin(r)} (95% "
                f"interval {_interval(r)} {r['unit']})" for r in open_])
    summary = (f"Summary: the short protocol's runs ({updates}), not training to convergence. "
               f"At 6+6, three seeds a precision, paired t-test: {'; '.join(items)}. {close} "
               "18+18 has one seed a precision, which allows at most indicated; nothing there "
               "is shown, indicated or ruled out.")
    return strongest, text + close, summary


def _reading(row: dict[str, Any]) -> str:
    return f"{row['name']} {row['what']}"


def deep_text(cells: list[Any]) -> str:
    """What one seed a precision at 18+18 allows, and where a scheme fails in both."""
    fails = [(name, [f"{c.bleu:.2f}" for p in PRECISIONS for c in group(cells, "deep", s, p)])
             for s, name in SCHEMES.items() if failed(cells, "deep", s)]
    return ("The 6+6 verdicts do not carry to 18+18: there one seed a precision allows at most "
            "*indicated*, and only through a sentence-level test (the hierarchical bootstrap, "
            "which needs the test translations these cells did not keep); with one seed there "
            "is no seeds' test, no interval of the difference and no equivalence test, so "
            "nothing at 18+18 is shown, indicated or ruled out"
            + "".join(f", and {name} fails to train in both precisions (BLEU "
                      f"{' and '.join(bleus)}), so for it no precision effect could be seen at all"
                      for name, bleus in fails) + ".")
