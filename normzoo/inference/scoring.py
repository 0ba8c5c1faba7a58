"""BLEU and chrF with sacreBLEU on detokenized hypotheses against raw references.

Validation during training and ``normzoo evaluate`` both score through :func:`score`, so the
numbers agree and always come with the sacreBLEU signature that makes them comparable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from sacrebleu.metrics import BLEU, CHRF


@dataclass(frozen=True)
class Scores:
    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str
    sentences: int

    def as_dict(self) -> dict:
        return asdict(self)


def score(hypotheses: Sequence[str], references: Sequence[str]) -> Scores:
    """Corpus BLEU and chrF of ``hypotheses`` against one reference each."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    bleu, chrf = BLEU(), CHRF()
    refs = [list(references)]
    b = bleu.corpus_score(list(hypotheses), refs)
    c = chrf.corpus_score(list(hypotheses), refs)
    return Scores(b.score, c.score, str(bleu.get_signature()), str(chrf.get_signature()),
                  len(hypotheses))
