"""A run's per-example test outputs, in the one shape the example-level test resamples.

Every task keeps what each test example gave (translation: the hypotheses; a classifier: each
example's prediction, gold label and loss; a language model: each sentence's summed loss and its
token count). :meth:`normzoo.contract.task.Task.example_outputs` turns them into
:class:`ExampleOutputs`: per example, the *sufficient statistics* of the task's corpus score (the
score of a set of examples is a function of the column sums of their statistics: BLEU's n-gram
counts and lengths, accuracy's ``[correct, 1]``, the token-weighted loss's ``[loss_sum, tokens]``),
so that resampling examples (and seeds) needs nothing of the task but :attr:`ExampleOutputs.score`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

OUTPUTS_FILE = "examples.{split}.tsv"  # classification and language models (translation: hyps)


@dataclass(frozen=True)
class ExampleOutputs:
    """One run's test outputs, example by example, in the test split's order.

    ``stats``: a float64 array ``[examples, k]``; ``score(totals)`` maps column sums
    ``[..., k]`` to the corpus score ``[...]`` (vectorised over the leading axes, so that a
    thousand resamples are scored at once); ``keys``: each example's output as two runs are told
    apart by (two genuine seeds never agree on nearly all of them; :mod:`.distinct`)."""

    stats: Any  # numpy.ndarray [examples, k]
    score: Callable[[Any], Any]
    keys: Sequence[Hashable]

    def __len__(self) -> int:
        return len(self.keys)

    def corpus_score(self) -> float:
        """The score of the whole test set (what the run's summary records, up to rounding)."""
        return float(self.score(self.stats.sum(0)))
