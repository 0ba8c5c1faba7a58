"""A side's runs are distinct work, or the comparison is refused.

Counting one run's work as several seeds shrinks the seeds' spread the t-test divides by: three
copies of one run with a line changed read as three seeds, and seed 1 against seed 2 of one
setting then reads *shown*. So the runs of a comparison are refused when

* a run is given twice, or a side holds one seed twice (:func:`repeats`);
* two runs share the identity of their training (``summary.json``'s ``identity``: the seed, the
  initial weights' hash and the settings'), whichever side each is on: two outputs of one
  training run, such as its best checkpoint and its checkpoint average (:func:`shared_training`);
* two runs of a side agree on their per-example test outputs beyond what two seeds of one
  setting ever do (:func:`near_copies`): more than :data:`MAX_AGREEMENT` of the examples that
  either run got wrong, or that carry a number (a classifier's loss, a sentence's loss), agree.
  Measured on the committed studies, genuine seeds agree on at most 27% of their wrong test
  translations (the depth study's 6+6 and 18+18 cells on Multi30k), 3.6% (the quick start's,
  on the built-in corpus) and 0.2% of a classifier's examples (prediction and loss); a copy
  with 1% of its lines changed agrees on 99% (``tests/test_verdict_rule.py`` measures every
  committed pair).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from normzoo.errors import NormzooError

MAX_AGREEMENT = 0.8
DIGITS = 4  # numbers agree when equal to 4 significant digits: moving the 6th hides nothing


class NotDistinct(NormzooError):
    """The runs of a comparison are not distinct work (exit 2: the runs given are wrong)."""


def _key(value: Any) -> Hashable:
    if isinstance(value, float):
        return f"{value:.{DIGITS}g}"
    if isinstance(value, tuple):
        return tuple(_key(v) for v in value)
    return value


def agreement(first: Sequence[Hashable], second: Sequence[Hashable]) -> float:
    """The share of the informative examples (a key that is not None in either run) on which
    the two runs' outputs agree; 1.0 for two runs with no informative example that are equal."""
    if len(first) != len(second):
        return 0.0
    informative = [(a, b) for a, b in zip(first, second, strict=True)
                   if a is not None or b is not None]
    if not informative:
        return 1.0 if list(first) == list(second) else 0.0
    return sum(_key(a) == _key(b) for a, b in informative) / len(informative)


def repeats(side: str, labels: Sequence[str], seeds: Sequence[Any]) -> list[str]:
    """A run given twice, or two runs of one seed, on one side."""
    problems: list[str] = []
    for i, (label, seed) in enumerate(zip(labels, seeds, strict=True)):
        for earlier, earlier_seed in zip(labels[:i], seeds[:i], strict=False):
            if label == earlier:
                problem = f"{label} is given twice"
            elif seed is not None and str(seed) == str(earlier_seed):
                problem = f"{earlier} and {label} are both seed {seed}"
            else:
                continue
            if problem not in problems:
                problems.append(problem)
            break
    return [f"the {side} runs must be one run per seed: {p}" for p in problems]


def shared_training(labels: Sequence[str], identities: Sequence[str | None]) -> list[str]:
    """Two runs (either side) whose training had the same initial weights."""
    seen: dict[str, str] = {}
    problems = []
    for label, identity in zip(labels, identities, strict=True):
        if identity is None:
            continue
        if identity in seen and seen[identity] != label:
            problems.append(f"{seen[identity]} and {label} are outputs of one training run "
                            f"(the same initial weights, {identity[:12]}...)")
        seen.setdefault(identity, label)
    return problems


def near_copies(side: str, labels: Sequence[str], keys: Sequence[Sequence[Hashable] | None]
                ) -> list[str]:
    """Two runs of a side whose per-example outputs agree beyond :data:`MAX_AGREEMENT`."""
    problems = []
    for i in range(len(labels)):
        for j in range(i):
            if keys[i] is None or keys[j] is None or labels[i] == labels[j]:
                continue  # one run given twice is refused as such
            share = agreement(keys[j], keys[i])
            if share > MAX_AGREEMENT:
                problems.append(f"{labels[j]} and {labels[i]} agree on {share:.1%} of their "
                                f"test outputs (genuine seeds: at most {MAX_AGREEMENT:.0%})")
    return [f"the {side} runs must be distinct work: {p}" for p in problems]


def refuse(problems: list[str]) -> None:
    if problems:
        raise NotDistinct("; ".join(problems))
