"""The rule: when does one setting's score differ from another's, and when are they equal?

A difference is **shown** only where it survives both of its noises, on runs that can be
compared:

* the example-level test of the runs' per-example outputs is below alpha: two-sided and
  calibrated (:mod:`normzoo.verdicts.resampling`), its noise holds the test set's (the
  examples resampled) and the seeds' (at its seed level, the spread and degrees of freedom of
  the seeds' t-test on the runs' scores: paired where both sides ran the same seeds, else
  Welch's; :mod:`normzoo.verdicts.significance`). Requiring the t-test below alpha as well
  took the false-alarm rate under 3% with three runs a side (Welch's is conservative there;
  ``docs/verdicts/null-rates.md``): the t-test is reported beside it, and a difference it
  finds that the example-level test does not is *indicated*. Runs that kept no per-example
  outputs (from before they were kept) are judged by the seeds' t-test alone, and the reason
  says so;
* at least :data:`~normzoo.verdicts.significance.MIN_SEEDS` runs a side;
* every run's precision and device kind recorded, one of each over both sides: a run that
  recorded none is *unknown*, and unknown is no match; a side mixing precisions or devices
  could owe its difference to them.

Whatever falls short is at most **indicated**, and the reason names what capped it. "Equal" is
said only from two one-sided tests against a stated margin, held to the same conditions; a
*not shown* is never "no difference".
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from normzoo.verdicts import significance as sig

EQUAL = "equal"
REFUSED = "refused"


@dataclass(frozen=True)
class Run:
    """One run as a comparison sees it."""

    label: str
    seed: str | None
    score: float
    precision: str = ""  # "": not recorded
    device: str = ""
    identity: str | None = None
    outputs: Any = None  # ExampleOutputs, or None where the run kept none
    #: Without outputs, what tells a copy: the run's recorded test scores, all of them (two
    #: seeds may share an accuracy, never every float of their test).
    fingerprint: str | None = None


def caps(baseline: Sequence[Run], system: Sequence[Run], seeds: int,
         varied: Collection[str] = ()) -> list[str]:
    """Why a difference between these runs could be at most indicated. ``varied``: the kinds
    (``precision``, ``device``) the comparison itself is about, which may differ between the
    sides (never within one)."""
    runs = [*baseline, *system]
    found = []
    if seeds < sig.MIN_SEEDS:
        found.append(f"{'one seed' if seeds == 1 else f'{seeds} seeds'} a side, under the "
                     f"{sig.MIN_SEEDS} a test of the seeds' spread needs")
    for what, values in (("precision", [r.precision for r in runs]),
                         ("device", [r.device for r in runs])):
        unknown = [r.label for r, v in zip(runs, values, strict=True) if not v]
        if unknown:
            found.append(f"{len(unknown)} run{'s' * (len(unknown) > 1)} recorded no {what} "
                         f"({', '.join(unknown[:3])}{', ...' if len(unknown) > 3 else ''}): "
                         "unknown is no match")
        sides = ([[getattr(r, what) for r in side] for side in (baseline, system)]
                 if what in varied else [values])
        mixed = sorted({v for side in sides for v in side if v and len(set(filter(None, side)))
                        > 1})
        if mixed:
            found.append(f"the runs {'of a side ' if what in varied else ''}trained on more "
                         f"than one {what} ({', '.join(mixed)}): a difference could be the "
                         f"{what}'s")
    return found


def check_distinct(baseline: Sequence[Run], system: Sequence[Run]) -> None:
    """Refuse runs that are not distinct work (:mod:`normzoo.verdicts.distinct`)."""
    from normzoo.verdicts import distinct

    problems = []
    for side, runs in (("baseline", baseline), ("system", system)):
        labels = [r.label for r in runs]
        problems += distinct.repeats(side, labels, [r.seed for r in runs])
        problems += distinct.near_copies(side, labels, [
            r.outputs.keys if r.outputs is not None else
            None if r.fingerprint is None else [r.fingerprint] for r in runs])
    both = [*baseline, *system]
    problems += distinct.shared_training([r.label for r in both], [r.identity for r in both])
    distinct.refuse(problems)


def compare(baseline: Sequence[Run], system: Sequence[Run], *, better: str = "max",
            margin: float | None = None, alpha: float = sig.ALPHA, samples: int = 1000,
            no_examples: str | None = None, varied: Collection[str] = ()) -> dict[str, Any]:
    """The comparison of ``system`` with ``baseline`` as one row of ``verdicts.json``: both
    sides' seeds and scores, the seeds' test, the example-level test, the interval, the
    equivalence test, precisions and devices, and the verdict with its reason
    (``no_examples``: why the score has no per-example outputs to resample, such as a
    validation loss; the seeds' test then decides alone; ``varied``: what the comparison
    varies, :func:`caps`). Raises
    :class:`~normzoo.verdicts.distinct.NotDistinct` for runs that are not distinct work."""
    check_distinct(baseline, system)
    seeds = {"baseline": [r.seed for r in baseline], "system": [r.seed for r in system]}
    paired = sig.same_seeds(seeds["baseline"], seeds["system"])
    if paired:
        baseline = [baseline[i] for i in sig.seed_order(seeds["baseline"])]
        system = [system[i] for i in sig.seed_order(seeds["system"])]
    base, other = [r.score for r in baseline], [r.score for r in system]
    row: dict[str, Any] = {
        "baseline": _side(baseline), "system": _side(system),
        "difference": sig.mean_sd(other)[0] - sig.mean_sd(base)[0], "better": better,
        **sig.seed_test(base, other, paired, margin)}
    row.update(_examples(baseline, system, paired, samples) if no_examples is None else
               {"example_test": None, "example_p": None, "example_interval": None,
                "example_note": no_examples})
    word, reason = verdict(row, baseline, system, alpha, varied)
    row.update(verdict=word, reason=reason, rule_p=rule_p(row))
    return row


def _side(runs: Sequence[Run]) -> dict[str, Any]:
    mean, sd = sig.mean_sd([r.score for r in runs])
    return {"runs": [r.label for r in runs], "seeds": [r.seed for r in runs],
            "scores": [r.score for r in runs], "mean": mean, "sd": sd,
            "precisions": [r.precision for r in runs], "devices": [r.device for r in runs]}


def _examples(baseline: Sequence[Run], system: Sequence[Run], paired: bool,
              samples: int) -> dict[str, Any]:
    """The example-level test, or why there is none."""
    runs = [*baseline, *system]
    if any(r.outputs is None for r in runs):
        missing = [r.label for r in runs if r.outputs is None]
        return {"example_test": None, "example_p": None, "example_interval": None,
                "example_note": f"{len(missing)} of the {len(runs)} runs kept no per-example "
                                f"test outputs ({missing[0]}{', ...' * (len(missing) > 1)})"}
    lengths = {len(r.outputs) for r in runs}
    if len(lengths) > 1:
        return {"example_test": None, "example_p": None, "example_interval": None,
                "example_note": f"the runs scored test sets of different sizes "
                                f"({', '.join(map(str, sorted(lengths)))})"}
    if all(list(r.outputs.keys) == list(baseline[0].outputs.keys) for r in runs):
        return {"example_test": None, "example_p": None, "example_interval": None,
                "example_note": "identical outputs: no difference to test"}
    from normzoo.verdicts.resampling import example_test

    found = example_test([r.outputs.stats for r in baseline],
                         [r.outputs.stats for r in system], baseline[0].outputs.score,
                         paired=paired, samples=samples)
    return {"example_test": found.name, "example_p": found.p_value,
            "example_interval": list(found.interval), "example_note": None,
            "example_scores": [found.baseline_score, found.system_score]}


def rule_p(row: dict[str, Any]) -> float | None:
    """The p-value the rule decides by, for Holm's correction over a study: the example-level
    test's, the seeds' t-test's alone for runs without per-example outputs, None where there
    is nothing to test (identical outputs, no spread)."""
    if row["example_p"] is not None:
        return row["example_p"]
    if "identical" in (row.get("example_note") or ""):
        return None
    return row["seed_p"]


def verdict(row: dict[str, Any], baseline: Sequence[Run], system: Sequence[Run],
            alpha: float = sig.ALPHA, varied: Collection[str] = ()) -> tuple[str, str]:
    """The verdict word and its reason."""
    seeds = min(len(baseline), len(system))
    seed_p, example_p = row["seed_p"], row["example_p"]
    name = "paired t" if row["paired"] else "Welch"
    seed_text = sig.p_text(seed_p) if seed_p is not None else (
        "– (one run a side)" if seeds < 2 else "– (no variance to test)")
    tests = f"seeds: {name} p = {seed_text}" + (
        f"; examples: p = {sig.p_text(example_p)}" if example_p is not None
        else f"; no example-level test ({row['example_note']}): the seeds' test alone")
    if seeds >= 2 and sig.no_spread([r.score for r in baseline], [r.score for r in system]):
        return sig.NOT_SHOWN, ("no variance to test: every run of each side scores the same "
                               f"({tests})")
    capped = caps(baseline, system, seeds, varied)
    by_seeds = seed_p is not None and seed_p < alpha
    decisive = rule_p(row)
    if decisive is not None and decisive < alpha:
        which = "the example-level test" if example_p is not None else "the seeds' test"
        if not capped:
            return sig.SHOWN, f"{which} below {alpha} over {seeds} seeds a side ({tests})"
        return sig.INDICATED, f"{'; '.join(capped)} ({tests})"
    if by_seeds:
        why = ("the seeds differ on this test set, but not beyond the noise of another test "
               "set and other seeds")
        return sig.INDICATED, f"{'; '.join([why, *capped])} ({tests})"
    if row.get("equivalence_p") is not None and row["equivalence_p"] < alpha:
        if not capped:
            return EQUAL, (f"equal within ± {row['margin']:g}: two one-sided tests p = "
                           f"{sig.p_text(row['equivalence_p'])} ({tests})")
        return sig.NOT_SHOWN, (f"equal within ± {row['margin']:g} is only indicated "
                               f"({'; '.join(capped)}; {tests})")
    return sig.NOT_SHOWN, f"no test finds a difference ({'; '.join([*capped, tests])})"


def holm_over(rows: list[dict[str, Any]], alpha: float = sig.ALPHA) -> None:
    """Holm's step-down correction over a study's comparisons, in place (``holm_kept``)."""
    kept = sig.holm([row.get("rule_p") for row in rows], alpha)
    for row, keep in zip(rows, kept, strict=True):
        row["holm_kept"] = keep
