"""The depth study's comparisons in test BLEU and the tables that list them.

Each comparison is judged as ``normzoo compare`` judges two sets of runs (issue 51's rule,
``normzoo.sweep.significance``): the seeds' t-test (paired where both sides ran the same seeds,
else Welch's) and the hierarchical bootstrap of the translations (seeds, then sentences), both
below 0.05 with three seeds a side, one precision and one device kind, for *shown*. Beside each:
the 95% interval of the difference, the equivalence test against :data:`MARGIN` (the only ground
for "equal"), the device kinds of its cells, and whether Holm's correction over the comparisons
of its table keeps it. The claims built on them are ``verdicts``'.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from normzoo.sweep.significance import (
    NOT_SHOWN,
    Verdict,
    equivalence_verdict,
    holm,
    judge,
    p_text,
    same_seeds,
    seed_order,
    seed_test,
)

from ..sweep_files import fmt, mean_sd
from .plan import PRECISION, SCHEMES

# A difference under 1 BLEU is below what this page treats as meaningful for Multi30k test2016
# at these scales (d_model 128, a few thousand updates): "equal" means within ± MARGIN.
MARGIN = 1.0
SENTENCE_TEST = "hierarchical bootstrap"


def setting(cells: list[Any], tier: str, scheme: str, precision: str = PRECISION) -> list[Any]:
    """The seeds of one setting that have a test score, in one precision, by seed."""
    return sorted((c for c in cells if c.tier == tier and c.scheme == scheme
                   and c.bleu is not None and c.precision == precision),
                  key=lambda c: int(c.seed))


@dataclass
class Comparison:
    """``system`` against ``baseline`` in test BLEU, over each setting's seeds: the verdict and
    what it rests on (the seeds' test, the bootstrap, the device kinds, the equivalence test)."""

    system: str
    baseline: str
    ours: list[float]
    theirs: list[float]
    verdict: Verdict
    tests: dict[str, Any] = field(default_factory=dict)  # significance.seed_test's, MARGIN's
    bootstrap_p: float | None = None
    devices: dict[str, list[str]] = field(default_factory=dict)  # side: "seed kind" per cell

    @property
    def mean(self) -> float:
        return mean_sd(self.ours)[0]

    @property
    def base_mean(self) -> float:
        return mean_sd(self.theirs)[0]

    @property
    def diff(self) -> float:
        return self.mean - self.base_mean

    @property
    def seed_name(self) -> str:
        return "paired t" if self.tests.get("paired") else "Welch"

    @property
    def mixed(self) -> bool:
        """Cells of more than one device kind among both sides."""
        return len({d.split()[-1] for side in self.devices.values() for d in side}) > 1

    @property
    def rule_p(self) -> float | None:
        """The p-value of the rule as one test: shown needs both tests below 0.05, so the
        larger of the two (an intersection-union test); None where either has nothing."""
        seed_p, boot_p = self.tests.get("seed_p"), self.bootstrap_p
        return None if seed_p is None or boot_p is None else max(seed_p, boot_p)

    def interval(self) -> str:
        found = self.tests.get("seed_interval")
        if found is None:
            return "no 95% interval (fewer than two seeds a side, or no spread)"
        return f"95% interval of the difference [{found[0]:+.2f}, {found[1]:+.2f}]"

    def equivalence_label(self) -> str | None:
        """equivalence_verdict's label for the TOST against MARGIN; None where untestable."""
        p = self.tests.get("equivalence_p")
        if p is None:
            return None
        kinds = {d.split()[-1] for side in self.devices.values() for d in side}
        return equivalence_verdict(p, min(len(self.ours), len(self.theirs)), (), kinds)

    def equivalence(self) -> str:
        """The equivalence test against MARGIN with its label: the only ground for "equal"."""
        label = self.equivalence_label()
        if label is None:
            return f"equal within ± {MARGIN:g} BLEU: not testable (one seed a side or no spread)"
        return (f"equal within ± {MARGIN:g} BLEU (the page's margin): {label} (two one-sided "
                f"tests, {self.seed_name}, p = {p_text(self.tests['equivalence_p'])})")

    def text(self) -> str:
        line = (f"{self.system} {stat(self.ours)} vs {self.baseline} {stat(self.theirs)}: "
                f"{self.diff:+.2f} BLEU, {self.interval()}, **{self.verdict.label}** "
                f"({self.verdict.reason})")
        return line + (f"; {self.equivalence()}" if self.verdict.label == NOT_SHOWN else "")


def stat(values: list[float]) -> str:
    mean, sd = mean_sd(values)
    if len(values) == 1:
        return f"{mean:.2f} (one seed)"
    return f"{mean:.2f} ± {sd:.2f} ({len(values)} seeds)"


def compare(cells: list[Any], tier: str, system: str, baseline: str,
            references: list[str] | None, precision: str = PRECISION) -> Comparison | None:
    """As ``normzoo compare`` judges two sets of runs: the seeds paired where both sides ran
    the same ones (paired t-test; the bootstrap pairs seed with seed), else Welch's and the
    bootstrap over the first runs of each side in order; the device kinds of both sides."""
    ours, theirs = setting(cells, tier, system, precision), setting(cells, tier, baseline,
                                                                    precision)
    if not ours or not theirs:
        return None
    paired = same_seeds([c.seed for c in theirs], [c.seed for c in ours])
    if paired:
        ours = [ours[i] for i in seed_order([c.seed for c in ours])]
        theirs = [theirs[i] for i in seed_order([c.seed for c in theirs])]
    n = min(len(ours), len(theirs))
    p = bootstrap(theirs[:n], ours[:n], references)
    base, sys_ = [c.bleu for c in theirs], [c.bleu for c in ours]
    verdict = judge(base, sys_, p, [c.precision for c in ours + theirs],
                    devices=[c.device_kind for c in ours + theirs], paired=paired,
                    sentence_name=SENTENCE_TEST)
    if p is None and references is None:
        verdict = Verdict(NOT_SHOWN, "no references, so no hierarchical bootstrap: "
                          + verdict.reason)
    devices = {side: [f"{c.seed} {c.device_kind}" for c in group]
               for side, group in (("system", ours), ("baseline", theirs))}
    return Comparison(SCHEMES[system], SCHEMES[baseline], sys_, base, verdict,
                      seed_test(base, sys_, paired, MARGIN), p, devices)


def bootstrap(baseline: list[Any], system: list[Any], references: list[str] | None
              ) -> float | None:
    """The hierarchical bootstrap's p-value (seeds, then sentences) of the runs paired in
    order, as ``normzoo compare`` draws it; None without references, translations, or a
    difference (identical translations)."""
    if references is None:
        return None
    from normzoo.sweep.bootstrap import hierarchical_bootstrap

    base = [c.hypotheses() for c in baseline]
    other = [c.hypotheses() for c in system]
    if any(h is None or len(h) != len(references) for h in base + other) or base == other:
        return None
    return hierarchical_bootstrap(base, other, references).p_value


PAPERS = [
    ("6 layers", "Admin (Liu et al. 2020), WMT14 En-De", {"post": "27.80", "pre": "27.27",
                                                          "admin": "27.90"}),
    ("6 layers", "Admin (Liu et al. 2020), IWSLT14 De-En", {"post": "35.64", "pre": "35.50",
                                                            "admin": "35.67"}),
    ("18 layers", "Admin (Liu et al. 2020), WMT14 En-De", {"post": "diverged", "pre": "28.38",
                                                           "admin": "29.03"}),
    ("18 layers", "DeepNet (Wang et al. 2022)", {"post": "diverged", "deepnorm": "28.8"}),
]


def _mean_cell(group: list[Any]) -> str:
    if not group:
        return "–"
    mean, sd = mean_sd([c.bleu for c in group])
    return f"{mean:.2f} ± {sd:.2f} ({len(group)})" if len(group) > 1 else f"{mean:.2f} (1)"


def papers_table(cells: list[Any]) -> list[str]:
    schemes = ("post", "pre", "admin", "deepnorm")
    lines = ["| depth | source | " + " | ".join(SCHEMES[s] for s in schemes) + " |",
             "|---|---|" + "---|" * len(schemes)]
    for depth, source, figures in PAPERS:
        lines.append(f"| {depth} | {source} | "
                     + " | ".join(figures.get(s, "–") for s in schemes) + " |")
    for depth, tier, cap in (("6+6", "ceiling", "7,000"), ("18+18", "stability", "4,500")):
        row = [_mean_cell(setting(cells, tier, scheme)) for scheme in schemes]
        lines.append(f"| {depth} | normzoo, Multi30k En-De test2016 (d_model 128, {cap}-update "
                     "cap; mean ± sd (seeds)) | " + " | ".join(row) + " |")
    return lines


def comparison_table(rows: list[tuple[str, Comparison | None]]) -> list[str]:
    """One row a comparison: the difference with its 95% interval, both tests' p-values, the
    device kinds, the verdict, the equivalence test against MARGIN, and whether Holm's
    correction over this table's comparisons keeps it (each by the larger of its two p-values:
    shown needs both below 0.05)."""
    found = [(name, c) for name, c in rows if c is not None]
    kept = holm([c.rule_p for _, c in found])
    tested = sum(c.rule_p is not None for _, c in found)
    lines = ["| comparison | difference | 95% interval (seeds) | seeds' test p | hierarchical "
             f"bootstrap p | device kinds | verdict | equal within ± {MARGIN:g} BLEU (TOST p) | "
             f"Holm over this table's {tested} |", "|" + "---|" * 9]
    for (name, c), keep in zip(found, kept, strict=True):
        low_high = c.tests.get("seed_interval")
        devices = "; ".join(f"{side}: {', '.join(c.devices[side])}" for side in (
            ("system", "baseline")))
        label = c.equivalence_label()
        equal = "–" if label is None else f"{label} ({p_text(c.tests['equivalence_p'])})"
        holm_text = "– (not tested)" if c.rule_p is None else "kept" if keep else "not kept"
        lines.append(
            f"| {name} | {c.diff:+.2f} | "
            + (f"[{low_high[0]:+.2f}, {low_high[1]:+.2f}]" if low_high else "–")
            + f" | {c.seed_name} {p_text(c.tests.get('seed_p'))} | {p_text(c.bootstrap_p)} | "
            f"{'**mixed**: ' if c.mixed else ''}{devices} | {c.verdict.label} | {equal} | "
            f"{holm_text} |")
    return lines


def _devices(ran: list[Any]) -> str:
    kinds = {c.device_kind for c in ran}
    if len(kinds) <= 1:
        return next(iter(kinds), "–")
    return "**mixed**: " + "; ".join(
        f"{kind} (seed{'s' * (len(seeds) > 1)} {', '.join(seeds)})" for kind, seeds in
        sorted((k, [c.seed for c in ran if c.device_kind == k]) for k in kinds))


UNSCORED = ("trained, not scored: its test needs a GPU (`studies/depth/gpu.sh`), "
            "not scored this session")


def fixes_table(cells: list[Any], refs: list[str] | None) -> list[str]:
    """The fixes at 18+18 with Pre-LN and Post-LN, in test BLEU over the seeds in the study's
    precision, naming the device kind each seed trained on (a scheme whose seeds mix them is
    marked); a scheme trained but not scored has its best validation loss only. Then every
    comparison among them, with its verdict and Holm's correction over them all."""
    lines = ["| scheme (18+18, warm-up 4,000, bf16-mixed) | seeds: BLEU (device) | mean ± sd | "
             "best val loss | device kinds |", "|---|---|---|---|---|"]
    for scheme in SCHEMES:
        group = setting(cells, "stability", scheme)
        ran = [c for c in cells if c.tier == "stability" and c.scheme == scheme
               and c.precision == PRECISION]
        per_seed = ", ".join(f"{c.seed}: {fmt(c.bleu)} ({c.device_short})" for c in ran)
        vals = [c.best_val for c in ran if c.best_val is not None]
        best = (f"{mean_sd(vals)[0]:.3f}" + (f" ± {mean_sd(vals)[1]:.3f}" if len(vals) > 1
                                                else "")) if vals else "–"
        name = SCHEMES[scheme] + " (baseline)" * (scheme in ("pre", "post"))
        mean = _mean_cell(group) if group or not ran else UNSCORED
        lines.append(f"| {name} | {per_seed or '–'} | {mean} | {best} | {_devices(ran)} |")
    pairs = [("pre", "post"), *[(s, b) for s in SCHEMES if s not in ("pre", "post")
                                for b in ("pre", "post")]]
    rows = [(f"{SCHEMES[s]} − {SCHEMES[b]}", compare(cells, "stability", s, b, refs))
            for s, b in pairs]
    return [*lines, "", "Every comparison among them (the system's mean minus the baseline's; "
            "device kinds by seed):", "", *comparison_table(rows)]
