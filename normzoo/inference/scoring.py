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


@dataclass(frozen=True)
class PairedBootstrap:
    """sacreBLEU's paired bootstrap resampling of a system against a baseline (``sacrebleu
    --paired-bs``): both BLEU scores, the p-value of the system's difference (the chance of
    so large a difference if the two were equally good) and the system's 95% interval."""

    baseline_bleu: float
    system_bleu: float
    p_value: float
    system_ci: float
    signature: str

    def as_dict(self) -> dict:
        return asdict(self)


def paired_bootstrap(baseline: Sequence[str], system: Sequence[str], references: Sequence[str],
                     samples: int = 1000) -> PairedBootstrap:
    """Paired bootstrap resampling (Koehn 2004) by sacreBLEU's own implementation, seeded as
    sacreBLEU seeds it (``SACREBLEU_SEED``, default 12345), so the p-value is reproducible.

    To compare runs over several seeds, pass each system's hypotheses of all seeds concatenated
    (seed by seed, in the same order for both) and the references repeated as often: the
    resampling then draws sentence-and-seed pairs, each scored for both systems."""
    from sacrebleu.significance import PairedTest

    if not len(baseline) == len(system) == len(references):
        raise ValueError(f"{len(baseline)} baseline and {len(system)} system hypotheses for "
                         f"{len(references)} references")
    test = PairedTest([("baseline", list(baseline)), ("system", list(system))],
                      {"BLEU": BLEU()}, references=[list(references)], test_type="bs",
                      n_samples=samples)
    signatures, results = test()
    base, other = results["BLEU"]
    return PairedBootstrap(float(base.score), float(other.score), float(other.p_value),
                           float(other.ci), str(signatures["BLEU"]))
