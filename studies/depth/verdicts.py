"""The depth study's verdicts: each claim read from the cells by its stated rule.

Every difference in test BLEU goes through ``normzoo.sweep.significance.judge``, the rule
``normzoo compare`` applies (issue 51): *shown* only with at least three seeds a side, the
seeds' t-test (paired where both sides ran the same seeds, else Welch's) and the hierarchical
bootstrap of their translations (``normzoo.sweep.bootstrap``: seeds, then sentences) both below
0.05, one precision and one device kind; a difference with fewer seeds, one test only, or cells
of both device kinds (cpu and cuda) is at most *indicated*. Each difference carries the 95%
interval of the seeds' test; "equal" is said only from the equivalence test (TOST) against
:data:`MARGIN`. The measurements that carry no test set (gradient and stream norms) are held to
the same count of seeds: a rule met in every one of three seeds a side is shown, in fewer it is
indicated.
"""

from __future__ import annotations

from typing import Any

from normzoo.sweep.significance import INDICATED, MIN_SEEDS, NOT_SHOWN, SHOWN, p_text

from ..sweep_files import fmt, mean_sd
from .plan import PRECISION, SCHEMES
from .tables import MARGIN, Comparison, compare, setting, stat

__all__ = ["CLAIMS", "MARGIN", "PRECISION", "SCHEMES", "Comparison", "compare", "compared",
           "setting"]


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


WARMUP_BUDGETS = ("The budgets are unmatched: the no-warm-up cells stop at a 1,500-update cap, "
                  "still improving there, the warm-up cells at 7,000, so \"fails\" reads "
                  "\"is behind at 1,500 updates\"; no cell at a matched budget was trained")


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
                    f"{stat([c.bleu for c in with_warmup])} at the 7,000-update cap. "
                    f"{WARMUP_BUDGETS}")
        if not trains and verdict in (SHOWN, INDICATED):
            verdict = "not shown: Post-LN 6+6 does not train with the warm-up either"
        elif verdict in (SHOWN, INDICATED):
            verdict += " at a 1,500-update cap; the budgets are unmatched (7,000 with warm-up)"
    deep = compare(cells, "nowarmup", "pre", "post", refs, precision="32-true")
    if deep is not None:
        numbers += (f". At 18+18 (32-true; Post-LN fails there with the warm-up too, so this "
                    f"pair cannot isolate the warm-up): {deep.text()}")
    return verdict, numbers


def _growth(values: list[float | None], stream: list[float | None]) -> list[bool]:
    """Per seed, the rule: the stream at least 2x, the branch at most half as much."""
    return [s is not None and b is not None and s >= 2 and b <= s / 2
            for b, s in zip(values, stream, strict=True)]


def _branch(name: str, met: list[bool], seeds: int, of: int) -> str:
    if not seeds:
        return f"{name} untested (no cell recorded its norm)"
    label = _by_seeds(met, seeds)
    return f"{name} {label}" + (": it grows more than half as much as the stream"
                                * (label == NOT_SHOWN)) + (
        f" ({seeds} of {of} seeds measured it)" if seeds < of else "")


def claim_stream(cells: list[Any], refs: list[str] | None) -> tuple[str, str]:
    """Pre-LN 18+18 at the end: the stream's norm and the branches' own norms, last layer over
    first. The self-attention branch's norm is exact from what every cell recorded: its ratio
    times the norm of the stream entering it, which is the previous layer's output (so from
    layer 2 on). The feed-forward and the decoder's cross-attention branches' norms are those
    the cells measured (diagnose.csv's branch_ffn, branch_cross_attn; the first seed's run
    predates them): each branch is judged on the seeds that have it."""
    pre = _diagnosed(cells, "stability", "pre")
    if not pre:
        return "not yet measured", ""
    text, met = [], {"self": [], "ffn": [], "cross": []}
    measured = {"ffn": set(), "cross": set()}
    for stack in ("encoder", "decoder"):
        streams, attns, found = [], [], {"ffn": [], "cross": []}
        for cell in pre:
            stream = cell.layer_metric("final", stack, "stream_norm")
            ratio = cell.layer_metric("final", stack, "ratio_self_attn")
            streams.append(_ratio(stream))
            attns.append(_ratio([r * s for r, s in zip(ratio[1:], stream[:-1], strict=True)]))
            for key, column in (("ffn", "branch_ffn"), ("cross", "branch_cross_attn")):
                norms = cell.layer_metric("final", stack, column)
                found[key].append(_ratio(norms) if any(norms) else None)
        met["self"] += _growth(attns, streams)
        text.append(f"{stack}: stream norm last/first layer {', '.join(fmt(g) for g in streams)}"
                    f"; self-attention branch norm last/second layer "
                    f"{', '.join(fmt(b) for b in attns)}")
        for key, words in (("ffn", "feed-forward"), ("cross", "cross-attention")):
            pairs = [(b, g, c.seed) for b, g, c in zip(found[key], streams, pre, strict=True)
                     if b is not None]
            if pairs:
                met[key] += _growth([b for b, _, _ in pairs], [g for _, g, _ in pairs])
                measured[key] |= {seed for _, _, seed in pairs}
                text[-1] += (f"; {words} branch norm last/first "
                             f"{', '.join(f'{fmt(b)} (seed {seed})' for b, _, seed in pairs)}")
    label = "; ".join([_branch("self-attention", met["self"], len(pre), len(pre)),
                       _branch("feed-forward", met["ffn"], len(measured["ffn"]), len(pre)),
                       _branch("the decoder's cross-attention", met["cross"],
                               len(measured["cross"]), len(pre))])
    return label, f"Pre-LN 18+18 at the end, seeds {_seeds(pre)}: " + "; ".join(text)


def claim_deepnorm(cells: list[Any], refs: list[str] | None) -> tuple[str, str]:
    return _trains_where_other_fails(compare(cells, "stability", "deepnorm", "post", refs),
                                     "18+18 with the 4,000-update warm-up, at 4,500 updates")


def claim_ceiling(cells: list[Any], refs: list[str] | None) -> tuple[str, str]:
    """Post-LN against Pre-LN at 6+6. "Equal" only from the equivalence test against MARGIN;
    a not shown otherwise says what the interval of the difference leaves open."""
    result = compare(cells, "ceiling", "post", "pre", refs)
    if result is None:
        return "not yet measured", ""
    numbers = f"6+6 at the 7,000-update cap (still improving there): {result.text()}"
    label = result.verdict.label
    if label == SHOWN:
        return (SHOWN if result.diff > 0 else "the opposite is shown (Pre-LN ends higher)"), \
            numbers
    if label == INDICATED:
        return f"{NOT_SHOWN}: a difference of {result.diff:+.2f} is indicated only", numbers
    equal = result.equivalence_label()
    interval = result.tests.get("seed_interval")
    open_ = (f"the 95% interval of the difference, [{interval[0]:+.2f}, {interval[1]:+.2f}] "
             "BLEU, leaves either side ahead" if interval else "no interval to give")
    tost = (f"equal within ± {MARGIN:g} BLEU: {equal} (TOST p = "
            f"{p_text(result.tests['equivalence_p'])})" if equal else
            f"equality within ± {MARGIN:g} BLEU not testable")
    return f"{NOT_SHOWN} either way: {open_}; {tost}", numbers


def compared(cells: list[Any], refs: list[str] | None) -> list[tuple[str, Comparison | None]]:
    """The comparisons in BLEU the verdicts above lean on, for their table."""
    return [("2. Pre-LN − Post-LN, 6+6 without warm-up (1,500 updates)",
             compare(cells, "nowarmup6", "pre", "post", refs)),
            ("2, context. Pre-LN − Post-LN, 18+18 without warm-up (32-true)",
             compare(cells, "nowarmup", "pre", "post", refs, precision="32-true")),
            ("4. DeepNorm − Post-LN, 18+18", compare(cells, "stability", "deepnorm", "post", refs)),
            ("5. Post-LN − Pre-LN, 6+6", compare(cells, "ceiling", "post", "pre", refs))]


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
     "Post-LN 6+6 reaches 10 BLEU with the warm-up. " + WARMUP_BUDGETS,
     "Xiong et al. 2020 (Sec. 3): Post-LN needs the warm-up stage, Pre-LN trains without it",
     claim_warmup),
    ("3. Pre-LN's stream grows with depth; its branches do not keep up",
     "shown where, at the end, in each of at least three seeds and both stacks, the stream norm "
     "after the last layer is at least 2x that after the first, and a branch's own norm (not its "
     "ratio to the stream) grows by at most half as much; judged branch by branch: "
     "self-attention (both stacks, every seed), feed-forward (both stacks) and the decoder's "
     "cross-attention on the seeds that measured them (fewer than three: at most indicated)",
     "Xie et al. 2023 (ResiDual); Liu et al. 2020 (Admin) on Pre-LN's shallow dependency on "
     "its residual branches", claim_stream),
    ("4. DeepNorm trains deep Post-LN where plain Post-LN fails",
     "shown where, at 18+18 with warm-up, DeepNorm reaches 10 BLEU, Post-LN under half of it, "
     "and the difference is shown by the seed-aware test (three seeds a side, one precision, "
     "one device kind)",
     "Wang et al. 2022 (DeepNet), Table 1: 18L Post-LN diverges, DeepNorm 28.8", claim_deepnorm),
    ("5. At 6+6, Post-LN ends higher than Pre-LN",
     "shown where Post-LN's mean over three seeds beats Pre-LN's and the seed-aware test shows "
     "the difference; \"equal\" only where the equivalence test (two one-sided tests) puts the "
     f"difference within ± {MARGIN:g} BLEU; the cells stopped at the 7,000-update cap, still "
     "improving, so this compares them there, not converged",
     "Liu et al. 2020 (Admin), Table 1: 6L WMT14 Post-LN 27.80 vs Pre-LN 27.27, IWSLT14 35.64 "
     "vs 35.50", claim_ceiling),
]
