"""The depth study's verdicts: each claim read from the cells by its stated rule.

Every difference in test BLEU goes through ``normzoo.sweep.significance.judge``, the rule
``normzoo compare`` applies: *shown* only with at least three seeds a side, Welch's t-test over
the seeds' BLEU and the paired bootstrap of their pooled translations both below 0.05, and one
precision; a difference with fewer seeds, or one test only, is at most *indicated*. The
measurements that carry no test set (gradient and stream norms) are held to the same count of
seeds: a rule met in every one of three seeds a side is shown, in fewer it is indicated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from study_files import fmt, mean_sd

from normzoo.sweep.significance import INDICATED, MIN_SEEDS, NOT_SHOWN, SHOWN, Verdict, judge

PRECISION = "bf16-mixed"  # every comparison's cells share it (the 18+18 no-warm-up pair: 32-true)
SCHEMES = {"post": "Post-LN", "pre": "Pre-LN", "deepnorm": "DeepNorm",
           "admin": "Admin (profiled)", "resi_dual": "ResiDual", "subln": "Sub-LN"}


def setting(cells: list[Any], tier: str, scheme: str, precision: str = PRECISION) -> list[Any]:
    """The seeds of one setting that have a test score, in one precision, by seed."""
    return sorted((c for c in cells if c.tier == tier and c.scheme == scheme
                   and c.bleu is not None and c.precision == precision),
                  key=lambda c: int(c.seed))


@dataclass
class Comparison:
    """``system`` against ``baseline`` in test BLEU, over each setting's seeds."""

    system: str
    baseline: str
    ours: list[float]
    theirs: list[float]
    verdict: Verdict

    @property
    def mean(self) -> float:
        return mean_sd(self.ours)[0]

    @property
    def base_mean(self) -> float:
        return mean_sd(self.theirs)[0]

    @property
    def diff(self) -> float:
        return self.mean - self.base_mean

    def text(self) -> str:
        return (f"{self.system} {_stat(self.ours)} vs {self.baseline} {_stat(self.theirs)}: "
                f"{self.diff:+.2f} BLEU, **{self.verdict.label}** ({self.verdict.reason})")


def _stat(values: list[float]) -> str:
    mean, sd = mean_sd(values)
    if len(values) == 1:
        return f"{mean:.2f} (one seed)"
    return f"{mean:.2f} ± {sd:.2f} ({len(values)} seeds)"


def compare(cells: list[Any], tier: str, system: str, baseline: str,
            references: list[str] | None, precision: str = PRECISION) -> Comparison | None:
    ours, theirs = setting(cells, tier, system, precision), setting(cells, tier, baseline,
                                                                    precision)
    if not ours or not theirs:
        return None
    pairs = [(a, b) for a in ours for b in theirs if a.seed == b.seed] or list(
        zip(ours, theirs, strict=False))
    p = bootstrap(pairs, references)
    verdict = judge([c.bleu for c in theirs], [c.bleu for c in ours], p,
                    [c.precision for c in ours + theirs])
    if p is None and references is None:
        verdict = Verdict(NOT_SHOWN, "no references, so no paired bootstrap: "
                          + verdict.reason)
    return Comparison(SCHEMES[system], SCHEMES[baseline], [c.bleu for c in ours],
                      [c.bleu for c in theirs], verdict)


def bootstrap(pairs: list[tuple[Any, Any]], references: list[str] | None) -> float | None:
    """The paired bootstrap p-value of the pooled translations, seed with seed."""
    if references is None:
        return None
    from normzoo.inference.scoring import paired_bootstrap

    system, baseline = [], []
    for ours, theirs in pairs:
        a, b = ours.hypotheses(), theirs.hypotheses()
        if a is None or b is None or not len(a) == len(b) == len(references):
            return None
        system += a
        baseline += b
    if system == baseline:
        return None
    return paired_bootstrap(baseline, system, references * len(pairs)).p_value


# -- the claims -------------------------------------------------------------------------------
def _ratio(values: list[float], first: int = 0) -> float | None:
    if len(values) <= first + 1 or not values[first] > 0:
        return None
    return values[-1] / values[first]


def _by_seeds(rows: list[bool], seeds: int) -> str:
    """A measurement's rule, met in ``rows`` (one per seed and stack), as a verdict label."""
    if not rows or not any(rows):
        return NOT_SHOWN
    if all(rows):
        return SHOWN if seeds >= MIN_SEEDS else INDICATED
    return "shown in part" if seeds >= MIN_SEEDS else "indicated in part"


def _diagnosed(cells: list[Any], tier: str, scheme: str) -> list[Any]:
    return sorted((c for c in cells if c.tier == tier and c.scheme == scheme and c.diagnose
                   and c.precision == PRECISION), key=lambda c: int(c.seed))


def claim_gradients(cells: list[Any], refs: list[str] | None) -> tuple[str, str]:
    """At initialisation, before any update: the 18+18 cells of Post-LN and Pre-LN, one reading
    per seed (the seed sets the weights and the first batch)."""
    post, pre = _diagnosed(cells, "stability", "post"), _diagnosed(cells, "stability", "pre")
    if not post or not pre:
        return "not yet measured", ""
    text, met = [], []
    for stack in ("encoder", "decoder"):
        r_post = [_ratio(c.layer_metric("init", stack, "grad_norm")) for c in post]
        r_pre = [_ratio(c.layer_metric("init", stack, "grad_norm")) for c in pre]
        text.append(f"{stack}: last/first layer gradient norm, Post-LN "
                    f"{', '.join(fmt(r) for r in r_post)} vs Pre-LN "
                    f"{', '.join(fmt(r) for r in r_pre)}")
        worst_post = min((r for r in r_post if r is not None), default=None)
        met += [r is not None and worst_post is not None and worst_post >= 2
                and r <= worst_post / 2 for r in r_pre]
    seeds = min(len(post), len(pre))
    return _by_seeds(met, seeds), (f"18+18 at initialisation, seeds {_seeds(post)} (Post-LN) "
                                   f"and {_seeds(pre)} (Pre-LN): " + "; ".join(text))


def _seeds(cells: list[Any]) -> str:
    return ", ".join(c.seed for c in cells)


def _trains_where_other_fails(result: Comparison | None, context: str) -> tuple[str, str]:
    if result is None:
        return "not yet measured", ""
    numbers = f"{context}: {result.text()}"
    fails = result.base_mean < 0.5 * result.mean
    if result.mean >= 10 and fails and result.diff > 0:
        return result.verdict.label, numbers
    if result.diff > 0 and result.verdict.label != NOT_SHOWN:
        return (f"not shown: {result.baseline} trains too (more than half of "
                f"{result.system}'s BLEU), though lower ({result.verdict.label})"), numbers
    return NOT_SHOWN, numbers


def claim_warmup(cells: list[Any], refs: list[str] | None) -> tuple[str, str]:
    """At 6+6, the depth at which Post-LN trains with the warm-up: without it, does it fail
    where Pre-LN trains? The 18+18 pair (one seed, 32-true) is context only: there Post-LN
    fails with the warm-up too, so it cannot say what the warm-up does."""
    result = compare(cells, "nowarmup6", "pre", "post", refs)
    verdict, numbers = _trains_where_other_fails(
        result, "6+6 without warm-up, 1,500 updates at a constant 5e-4")
    if result is None:
        numbers = "6+6 without warm-up: cells still to run"
    with_warmup = setting(cells, "ceiling", "post")
    if result is not None and with_warmup:
        trains = mean_sd([c.bleu for c in with_warmup])[0] >= 10
        numbers += (f"; with the 4,000-update warm-up Post-LN 6+6 scores "
                    f"{_stat([c.bleu for c in with_warmup])} at the 7,000-update cap")
        if not trains and verdict in (SHOWN, INDICATED):
            verdict = "not shown: Post-LN 6+6 does not train with the warm-up either"
    deep = compare(cells, "nowarmup", "pre", "post", refs, precision="32-true")
    if deep is not None:
        numbers += (f". At 18+18 (32-true; Post-LN fails there with the warm-up too, so this "
                    f"pair cannot isolate the warm-up): {deep.text()}")
    return verdict, numbers


def claim_stream(cells: list[Any], refs: list[str] | None) -> tuple[str, str]:
    """Pre-LN 18+18 at the end: the stream's norm and the branches' own norms, last layer over
    first. The self-attention branch's norm is exact from what every cell recorded: its ratio
    times the norm of the stream entering it, which is the previous layer's output (so from
    layer 2 on). The feed-forward branch's norm, where the cell measured it (diagnose.csv's
    branch_ffn), is given beside it."""
    pre = _diagnosed(cells, "stability", "pre")
    if not pre:
        return "not yet measured", ""
    text, met = [], []
    for stack in ("encoder", "decoder"):
        streams, attns, ffns = [], [], []
        for cell in pre:
            stream = cell.layer_metric("final", stack, "stream_norm")
            ratio = cell.layer_metric("final", stack, "ratio_self_attn")
            attn = [r * s for r, s in zip(ratio[1:], stream[:-1], strict=True)]
            growth, branch = _ratio(stream), _ratio(attn)
            streams.append(growth)
            attns.append(branch)
            ffn = cell.layer_metric("final", stack, "branch_ffn")
            ffns.append(_ratio(ffn) if any(ffn) else None)
            met.append(growth is not None and branch is not None and growth >= 2
                       and branch <= growth / 2)
        measured = [f for f in ffns if f is not None]
        text.append(
            f"{stack}: stream norm last/first layer {', '.join(fmt(g) for g in streams)}; "
            f"self-attention branch norm last/second layer {', '.join(fmt(b) for b in attns)}"
            + (f"; feed-forward branch norm last/first {', '.join(fmt(f) for f in measured)} "
               f"({len(measured)} of {len(pre)} seeds measured it)" if measured else ""))
    return _by_seeds(met, len(pre)), (f"Pre-LN 18+18 at the end, seeds {_seeds(pre)}: "
                                      + "; ".join(text))


def claim_deepnorm(cells: list[Any], refs: list[str] | None) -> tuple[str, str]:
    return _trains_where_other_fails(compare(cells, "stability", "deepnorm", "post", refs),
                                     "18+18 with the 4,000-update warm-up, at 4,500 updates")


def claim_ceiling(cells: list[Any], refs: list[str] | None) -> tuple[str, str]:
    result = compare(cells, "ceiling", "post", "pre", refs)
    if result is None:
        return "not yet measured", ""
    numbers = f"6+6 at the 7,000-update cap (still improving there): {result.text()}"
    if result.diff > 0 and result.verdict.label == SHOWN:
        return SHOWN, numbers
    if result.diff < 0 and result.verdict.label == SHOWN:
        return "the opposite is shown (Pre-LN ends higher)", numbers
    if result.verdict.label == INDICATED:
        return f"{NOT_SHOWN}: a difference of {result.diff:+.2f} is indicated only", numbers
    return f"{NOT_SHOWN}: no difference beyond the noise ({result.diff:+.2f} BLEU)", numbers


CLAIMS = [
    ("1. Post-LN's gradients grow toward the output at initialisation",
     "shown where, in every one of at least three seeds a side and in both stacks, the last "
     "layer's gradient norm is at least 2x the first's in Post-LN and Pre-LN's ratio at most "
     "half of Post-LN's smallest (18+18, at init: a measurement, no test set, no p-value)",
     "Xiong et al. 2020, Fig. 3", claim_gradients),
    ("2. Without warm-up, Post-LN fails at a depth where it trains with warm-up, while Pre-LN "
     "trains",
     "shown where, at 6+6 without warm-up, Pre-LN reaches 10 BLEU, Post-LN scores under half "
     "of it and the difference is shown by the seed-aware test (three seeds a side), and "
     "Post-LN 6+6 reaches 10 BLEU with the warm-up",
     "Xiong et al. 2020 (Sec. 3): Post-LN needs the warm-up stage, Pre-LN trains without it",
     claim_warmup),
    ("3. Pre-LN's stream grows with depth; its branches do not keep up",
     "shown where, at the end, in each of at least three seeds and both stacks, the stream norm "
     "after the last layer is at least 2x that after the first, and the self-attention branch's "
     "own norm (not its ratio to the stream) grows by at most half as much",
     "Xie et al. 2023 (ResiDual); Liu et al. 2020 (Admin) on Pre-LN's shallow dependency on "
     "its residual branches", claim_stream),
    ("4. DeepNorm trains deep Post-LN where plain Post-LN fails",
     "shown where, at 18+18 with warm-up, DeepNorm reaches 10 BLEU, Post-LN under half of it, "
     "and the difference is shown by the seed-aware test (three seeds a side, one precision)",
     "Wang et al. 2022 (DeepNet), Table 1: 18L Post-LN diverges, DeepNorm 28.8", claim_deepnorm),
    ("5. At 6+6, Post-LN ends higher than Pre-LN",
     "shown where Post-LN's mean over three seeds beats Pre-LN's and the seed-aware test shows "
     "the difference; the cells stopped at the 7,000-update cap, still improving, so this "
     "compares them there, not converged",
     "Liu et al. 2020 (Admin), Table 1: 6L WMT14 Post-LN 27.80 vs Pre-LN 27.27, IWSLT14 35.64 "
     "vs 35.50", claim_ceiling),
]
