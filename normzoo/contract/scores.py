"""Corpus scores as functions of summed per-example statistics, vectorised over resamples.

A corpus score that the example-level test (:mod:`normzoo.verdicts.resampling`) can resample must
be a function of the column sums of per-example *sufficient statistics*: resampling examples (and
seeds) is then a weighted sum of rows, and a thousand resamples are scored at once by one call on
an array ``[resamples, k]``. Corpus BLEU is one (sacreBLEU's per-sentence hypothesis and reference
lengths, matched and total n-grams for n = 1..4: ten numbers a sentence), and so is every ratio of
two sums (accuracy: ``[correct, 1]``; a token-weighted loss: ``[loss_sum, tokens]``).

:func:`bleu_score` reimplements sacreBLEU's ``BLEU()._compute_score_from_stats`` (default
settings) on numpy arrays instead of calling it once per resample: sacreBLEU's own call builds a
``BLEUScore`` object per total, about 20 µs each, so 1000 resamples of 3+3 runs would cost more
than the whole resampling. The two agree to rounding (tests/test_verdict_resampling.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MAX_ORDER = 4  # sacreBLEU's default maximum n-gram order
BLEU_STATS = 2 + 2 * MAX_ORDER  # hyp_len, ref_len, matches[1..4], totals[1..4]
_LOG_ZERO = -9999999999.0  # sacreBLEU's my_log(0): a precision of 0 floors the log, BLEU is 0


def bleu_stats(hypotheses: Sequence[str],
               references: Sequence[str] | Sequence[Sequence[str]]) -> np.ndarray:
    """Per-sentence BLEU statistics ``[sentences, 10]`` (float64): hypothesis length, closest
    reference length, matched n-grams for n = 1..4, hypothesis n-grams for n = 1..4, exactly as
    sacreBLEU's ``BLEU()._extract_corpus_statistics`` gives them with default settings (13a
    tokenisation, mixed case). ``references``: one reference per hypothesis, or several
    reference streams (each a sequence as long as ``hypotheses``), as sacreBLEU takes them."""
    from sacrebleu.metrics import BLEU

    if len(references) and isinstance(references[0], str):
        streams = [list(references)]
    else:
        streams = [list(stream) for stream in references]
    if any(len(stream) != len(hypotheses) for stream in streams):
        raise ValueError(f"{len(hypotheses)} hypotheses but references of lengths "
                         f"{sorted({len(stream) for stream in streams})}")
    stats = BLEU()._extract_corpus_statistics(list(hypotheses), streams)
    return np.asarray(stats, dtype=np.float64).reshape(len(hypotheses), BLEU_STATS)


def bleu_score(totals: np.ndarray) -> np.ndarray:
    """Corpus BLEU (0–100) of summed statistics ``[..., 10]`` (as :func:`bleu_stats` gives them,
    summed over sentences), vectorised over the leading axes: sacreBLEU's
    ``BLEU()._compute_score_from_stats(totals).score`` with its defaults (smoothing 'exp',
    effective order off), step for step:

    * brevity penalty ``exp(1 - ref_len / hyp_len)`` where the hypotheses are shorter (0 for no
      hypothesis words), lengths truncated to integers as sacreBLEU does;
    * no matched n-gram of any order: 0;
    * n-gram orders up to the first with no hypothesis n-grams (sacreBLEU's loop breaks there
      and leaves that order's and the higher orders' precisions 0, so the score is 0);
    * an order with no match gets sacreBLEU's 'exp' smoothing ``100 / (2^m · total)``, m counting
      the orders without a match so far; the others ``100 · matches / total``;
    * the geometric mean of the four precisions (in percent) times the brevity penalty, a
      zero precision floored to sacreBLEU's ``log 0 = -9999999999`` (so the score is 0.0).
    """
    totals = np.asarray(totals, dtype=np.float64)
    if totals.shape[-1] != BLEU_STATS:
        raise ValueError(f"BLEU statistics have {BLEU_STATS} columns, not {totals.shape[-1]}")
    sys_len = np.trunc(totals[..., 0])
    ref_len = np.trunc(totals[..., 1])
    correct = totals[..., 2:2 + MAX_ORDER]
    total = totals[..., 2 + MAX_ORDER:]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        bp = np.where(sys_len < ref_len,
                      np.where(sys_len > 0, np.exp(1 - ref_len / sys_len), 0.0), 1.0)
        # sacreBLEU stops at the first order without hypothesis n-grams: it and the orders after
        # it keep precision 0.
        reached = np.cumsum(total == 0, axis=-1) == 0
        unmatched = (correct == 0) & reached
        halvings = np.cumsum(unmatched, axis=-1)  # sacreBLEU's smooth_mteval = 2 ** halvings
        precision = np.where(unmatched, 100.0 / (2.0 ** halvings * total),
                             100.0 * correct / total)
        precision = np.where(reached, precision, 0.0)
        logs = np.where(precision == 0, _LOG_ZERO,
                        np.log(np.where(precision > 0, precision, 1.0)))
    # Python's sum() of the logs, left to right, as sacreBLEU adds them
    summed = np.zeros(logs.shape[:-1])
    for n in range(MAX_ORDER):
        summed = summed + logs[..., n]
    score = bp * np.exp(summed / MAX_ORDER)
    return np.where(np.any(correct != 0, axis=-1), score, 0.0)


def ratio_score(totals: np.ndarray) -> np.ndarray:
    """``totals[..., 0] / totals[..., 1]``, vectorised: accuracy from per-example
    ``[correct, 1]``, a token-weighted mean loss from per-sentence ``[loss_sum, tokens]``. The
    ratio of sums, not the mean of per-example ratios: that is the corpus score the runs report
    (a loss per token, not per sentence), and only a ratio of sums is a function of summed
    statistics that resampling can recompute."""
    totals = np.asarray(totals, dtype=np.float64)
    if totals.shape[-1] != 2:
        raise ValueError(f"a ratio score takes 2 statistics, not {totals.shape[-1]}")
    return totals[..., 0] / totals[..., 1]
