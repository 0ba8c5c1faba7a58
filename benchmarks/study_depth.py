"""The depth study's report: docs/study-depth.md and its plots, from what the sweeps wrote.

    python benchmarks/study_depth.py [SWEEPS]      # default SWEEPS: runs/study-papers
    python benchmarks/study_depth.py --render-only

The study runs the papers' protocol (``recipes/studies/multi30k_papers.yaml``) in three tiers,
``ceiling``, ``stability`` and ``nowarmup``, as sweeps that ``benchmarks/study_depth.sh``
runs in two slots, one per core (the commands are in COMMANDS); ``study_depth_gpu.sh`` runs
stability cells on a lent GPU instead. **Collect** copies
each cell's files, test translations included, into ``docs/study-depth/data/``
(``study_files.py``); **render** writes the report from those files alone, so every number in it
is in the repository. Cells not yet run show as pending.

Every verdict follows the rule printed beside it. A difference between two settings is *shown*
only where it is significant by paired bootstrap resampling on their test translations
(sacreBLEU's implementation, ``normzoo.inference.scoring.paired_bootstrap``; several seeds are
pooled, paired seed by seed) at p < 0.05 *and* larger than the seeds' spread (the larger
standard deviation over seeds of the two settings; for settings with one seed, that of the 6+6
seeds).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import study_depth_plots as plots
import study_eval_gap
import yaml
from study_files import (
    as_float,
    copy_cells,
    curve,
    mean_sd,
    read_csv,
    read_json,
    training_minutes,
)

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "study-depth" / "data"
FIGURES = ROOT / "docs" / "study-depth"
REPORT = ROOT / "docs" / "study-depth.md"
REFERENCES = ROOT.parent / "shared" / "data" / "multi30k" / "test2016.de"
RECIPE = "recipes/studies/multi30k_papers.yaml"
TIERS = ("ceiling", "stability", "nowarmup")
PLANNED = {"ceiling": 6, "stability": 6, "nowarmup": 2}
SCHEMES = {"post": "Post-LN", "pre": "Pre-LN", "deepnorm": "DeepNorm",
           "admin": "Admin (profiled)", "resi_dual": "ResiDual", "subln": "Sub-LN"}
_SWEEP = f"OMP_NUM_THREADS=1 normzoo sweep {RECIPE} data.dir=../shared/data/multi30k"
_DEEP = "model.encoder_layers=18 model.decoder_layers=18"
_STABLE = f"{_DEEP} trainer.max_steps=4500"
_NOWARMUP = f"{_DEEP} optim.warmup_steps=0 trainer.max_steps=1500"
# The sweeps run in pairs, one per core: benchmarks/study_depth.sh runs the even ones in slot A
# and the odd ones in slot B, side by side. (tier, folder under runs/study-papers, args).
# On 2026-11-25 the machine came back as a Zen 3 without bf16 (the remaining cells train in
# 32-true, about 3 s per 18+18 step instead of 0.7), so the order was changed to run first the
# cells the verdicts need within the study's budget: the two no-warm-up cells, then Pre-LN and
# DeepNorm at 18+18. ResiDual and Sub-LN at 18+18, which no verdict reads, come last, in their
# own folders; on 2026-11-26 both trained on a lent H200 instead (study_depth_gpu.sh, collected
# with --gpu), so the CPU never ran those two sweeps. Post-LN and Admin at 18+18 had finished
# under the first order (Post-LN, Pre-LN, DeepNorm in stability-a; Admin, ResiDual, Sub-LN in
# stability-b); a sweep skips a finished cell and its results list every finished cell of its
# own grid, so the folders carry on.
SWEEPS = [
    ("ceiling", "ceiling-post", "--set seed=1,2,3 --set model.residual=post"),
    ("ceiling", "ceiling-pre", "--set seed=1,2,3 --set model.residual=pre"),
    ("nowarmup", "nowarmup-post", f"{_NOWARMUP} --set model.residual=post --diagnose"),
    ("nowarmup", "nowarmup-pre", f"{_NOWARMUP} --set model.residual=pre --diagnose"),
    ("stability", "stability-a", f"{_STABLE} --set 'model.residual=post,pre' --diagnose"),
    ("stability", "stability-b", f"{_STABLE} --set 'model.residual={{name: admin, init: profiled}},"
                                 "deepnorm' --diagnose"),
    ("stability", "stability-c", f"{_STABLE} --set model.residual=resi_dual --diagnose"),
    ("stability", "stability-d", f"{_STABLE} --set model.residual=subln --diagnose"),
]
COMMANDS = [f"{_SWEEP} {args} --out runs/study-papers/{folder}" for _, folder, args in SWEEPS]
ALPHA = 0.05
# Cells whose processes were suspended (SIGSTOP/SIGCONT) while they trained, so that a benchmark
# and the test suite had the cores to themselves, as {"tier/cell": minutes}; the minutes are left
# out of their training time (ThroughputMonitor's clock runs on through a suspension). The cells
# suspended before 2026-11-25 14:24 UTC were lost with their machine and restarted from scratch;
# the third 6+6 seed was suspended three times (214 s, 390 s, 608 s) while
# benchmarks/sweep_jobs.py timed sweeps on the two cores, and the first two 18+18 cells once
# (648 s) while benchmarks/peers.py and precision.py ran.
PAUSED_MIN: dict[str, float] = {
    "ceiling/seed-3_residual-post": 20.2,
    "ceiling/seed-3_residual-pre": 20.2,
    "stability/residual-post": 10.8,
    "stability/residual-admin-init-profiled": 10.8,
}
# Why a cell that trained on a lent GPU (study_depth_gpu.sh) but has no cell.json has no test
# score: the sweep's row is written after the final test, and the device's time ran out first.
UNSCORED = ("not scored: the lent GPU's time ran out during its final test, which then decoded "
            "on the host's CPU (Lightning's teardown had moved the model there; fixed since)")
GPU_LOG = "GPU available: True (cuda), used: True"  # Lightning's line in the cell's sweep log
STUDY_COMMIT = "2a99efa"  # the sweeps run from a clone at this commit, so code changes cannot
# touch a running study


# -- the cells --------------------------------------------------------------------------------
class Cell:
    """One cell of one tier: its setting, how it ran and ended, what it scored."""

    def __init__(self, tier: str, folder: Path) -> None:
        record = read_json(folder / "cell.json")
        summary = read_json(folder / "summary.json")
        self.tier, self.folder, self.name = tier, folder, folder.name
        recipe = (yaml.safe_load((folder / "recipe.yaml").read_text(encoding="utf-8"))
                  if (folder / "recipe.yaml").is_file() else {})
        residual = record.get("model.residual") or (recipe.get("model") or {}).get("residual")
        if isinstance(residual, dict):  # a saved recipe.yaml spells a scheme as a mapping
            residual = residual.get("name")
        residual = str(residual or "")
        self.scheme = "admin" if "admin" in residual else residual
        self.seed = str(record.get("seed", "1"))
        self.status = record.get("status", "")
        self.diverged_at = record.get("diverged_at_step", "")
        self.steps = record.get("steps") or summary.get("steps")
        self.stopped = record.get("stopped") or summary.get("stopped", "")
        self.precision = (recipe.get("trainer") or {}).get("precision", "")
        log = folder / "sweep.log"  # cells run by study_depth_gpu.sh keep their sweep's log
        self.on_gpu = log.is_file() and GPU_LOG in log.read_text(encoding="utf-8")
        self.scored = (folder / "cell.json").is_file()
        test = summary.get("test") or {}
        self.bleu = as_float(test.get("bleu"))
        self.greedy = as_float(test.get("greedy_bleu"))
        self.averaged = as_float((test.get("averaged") or {}).get("bleu"))
        self.signature = test.get("signature", "")
        losses = read_csv(folder / "loss.csv")
        self.train, self.val = curve(losses, "train_loss"), curve(losses, "val_loss")
        self.best_val = min((v for _, v in self.val), default=None)
        if not self.scored:  # trained, cut off before the sweep wrote its row
            self.steps = max((s for s, _ in self.train), default=-1) + 1 or None
            cap = (recipe.get("trainer") or {}).get("max_steps")
            reached = f"step cap reached (trainer.max_steps={cap}); " if self.steps == cap else ""
            self.stopped = reached + UNSCORED
        self.train_min, self.processes = training_minutes(losses)
        self.paused_min = PAUSED_MIN.get(f"{tier}/{folder.name}", 0.0)
        if self.train_min is not None:
            self.train_min -= self.paused_min
        self.diagnose = read_csv(folder / "diagnose.csv")

    @property
    def label(self) -> str:
        seed = f", seed {self.seed}" if self.tier == "ceiling" else ""
        return f"{SCHEMES.get(self.scheme, self.scheme)}{seed}"

    def hypotheses(self) -> list[str] | None:
        path = self.folder / "hyps.test2016.txt"
        if not path.is_file():
            return None
        return path.read_text(encoding="utf-8").removesuffix("\n").split("\n")

    def layer_metric(self, when: str, stack: str, metric: str) -> list[float]:
        rows = sorted((r for r in self.diagnose if r["when"] == when and r["stack"] == stack),
                      key=lambda r: int(r["layer"]))
        return [as_float(r[metric]) or 0.0 for r in rows]


def load_cells() -> list[Cell]:
    """Every collected cell: those the sweeps finished (``cell.json``) and those that trained
    on a lent GPU and were cut off before their final test (losses only)."""
    return [Cell(tier, folder) for tier in TIERS if (DATA / tier).is_dir()
            for folder in sorted((DATA / tier).iterdir())
            if (folder / "cell.json").is_file() or (folder / "loss.csv").is_file()]


def collect_gpu(source: Path, target: Path) -> int:
    """The cells ``study_depth_gpu.sh`` ran on a lent GPU, from its unpacked tarballs in
    ``source`` (``gpu-<scheme>/<cell>/`` and ``gpu-<scheme>.log``), into the tier folder
    ``target``; returns how many. A finished cell is copied as any sweep's; one whose final test
    the device's time cut off (no ``cell.json``) with its losses and recipe, to be reported as
    trained but not scored. Each keeps its sweep's log as ``sweep.log``: Lightning's "GPU
    available: True (cuda), used: True" there is the record that it trained on the GPU (the
    study's commit writes no device into ``summary.json``)."""
    copied = 0
    for sweep in sorted(source.glob("gpu-*/")):
        names = copy_cells(sweep, target, translations=True, extra=("recipe.yaml",),
                           unfinished=True)
        log = sweep.parent / f"{sweep.name}.log"
        for name in names if log.is_file() else []:
            shutil.copyfile(log, target / name / "sweep.log")
        copied += len(names)
    return copied


def setting(cells: list[Cell], tier: str, scheme: str) -> list[Cell]:
    """Every seed of one setting that has a test score, by seed."""
    return sorted((c for c in cells if c.tier == tier and c.scheme == scheme
                   and c.bleu is not None), key=lambda c: c.seed)


# -- comparisons ------------------------------------------------------------------------------
@dataclass
class Comparison:
    """``system`` minus ``baseline`` in test BLEU, over the seeds both have."""

    system: str
    baseline: str
    mean: float  # the system's mean BLEU
    base_mean: float
    seeds: int
    spread: float  # the seeds' spread the difference must exceed
    spread_from: str
    p: float | None  # paired bootstrap; None when translations or references are missing

    @property
    def diff(self) -> float:
        return self.mean - self.base_mean

    @property
    def significant(self) -> bool:
        return self.p is not None and self.p < ALPHA and abs(self.diff) > self.spread

    def text(self) -> str:
        p = "p not computed (no translations or references)" if self.p is None else (
            f"p = {self.p:.4f}")
        over = f"{self.seeds} seeds" if self.seeds > 1 else "one seed"
        return (f"{self.system} {self.mean:.2f} vs {self.baseline} {self.base_mean:.2f} "
                f"({over}): {self.diff:+.2f} BLEU, {p}, seeds' spread {self.spread:.2f} "
                f"({self.spread_from})")


def noise_floor(cells: list[Cell]) -> float:
    """The largest standard deviation over seeds among the 6+6 settings: the spread a one-seed
    setting's difference is held to."""
    sds = [mean_sd([c.bleu for c in group])[1] for scheme in ("post", "pre")
           if len(group := setting(cells, "ceiling", scheme)) > 1]
    return max(sds, default=0.0)


def compare(cells: list[Cell], tier: str, system: str, baseline: str,
            references: list[str] | None, base_tier: str | None = None) -> Comparison | None:
    ours, theirs = setting(cells, tier, system), setting(cells, base_tier or tier, baseline)
    if not ours or not theirs:
        return None
    pairs = [(a, b) for a in ours for b in theirs if a.seed == b.seed] or [(ours[0], theirs[0])]
    (mean, sd), (base_mean, base_sd) = (mean_sd([c.bleu for c in ours]),
                                        mean_sd([c.bleu for c in theirs]))
    if len(ours) > 1 or len(theirs) > 1:
        spread, spread_from = max(sd, base_sd), "these settings' seeds"
    else:
        spread, spread_from = noise_floor(cells), "the 6+6 seeds"
    return Comparison(SCHEMES[system], SCHEMES[baseline], mean, base_mean, len(pairs), spread,
                      spread_from, _bootstrap(pairs, references))


def _bootstrap(pairs: list[tuple[Cell, Cell]], references: list[str] | None) -> float | None:
    """The paired bootstrap p-value of the pooled translations (seed with seed)."""
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
    return paired_bootstrap(baseline, system, references * len(pairs)).p_value


# -- the claims -------------------------------------------------------------------------------
def _fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _ratio(values: list[float]) -> float | None:
    return values[-1] / values[0] if len(values) > 1 and values[0] > 0 else None


def _one(cells: list[Cell], tier: str, scheme: str) -> Cell | None:
    return next((c for c in cells if c.tier == tier and c.scheme == scheme and c.diagnose), None)


def claim_gradients(cells: list[Cell], refs: list[str] | None) -> tuple[str, str]:
    """At initialisation, so from the stability tier's 18+18 pair or, until both of those have
    run, the no-warm-up tier's: the same seed gives the same weights and the same first batch,
    and the learning rate plays no part before the first update."""
    where = "18+18 at initialisation, "
    post, pre = _one(cells, "stability", "post"), _one(cells, "stability", "pre")
    if post is None or pre is None:
        post, pre = _one(cells, "nowarmup", "post"), _one(cells, "nowarmup", "pre")
        where = ("18+18 at initialisation (measured in the no-warm-up cells: the same seed, so "
                 "the same weights and first batch as the stability tier's), ")
    if post is None or pre is None:
        return "not yet measured", ""
    text, shown = [], []
    for stack in ("encoder", "decoder"):
        r_post = _ratio(post.layer_metric("init", stack, "grad_norm"))
        r_pre = _ratio(pre.layer_metric("init", stack, "grad_norm"))
        text.append(f"{stack}: last/first layer gradient norm {_fmt(r_post)} (Post-LN) vs "
                    f"{_fmt(r_pre)} (Pre-LN)")
        shown.append(r_post is not None and r_pre is not None and r_post >= 2
                     and r_pre <= r_post / 2)
    verdict = "shown" if all(shown) else "shown in part" if any(shown) else "not shown"
    return verdict, where + "; ".join(text)


def _trains_where_other_fails(result: Comparison | None, context: str) -> tuple[str, str]:
    if result is None:
        return "not yet measured", ""
    numbers = f"{context}: {result.text()}"
    fails = result.base_mean < 0.5 * result.mean
    if result.mean >= 10 and fails and result.diff > 0 and result.significant:
        return "shown", numbers
    if result.diff > 0 and result.significant:
        return (f"not shown: {result.baseline} trains too (more than half of "
                f"{result.system}'s BLEU), though significantly lower"), numbers
    return "not shown", numbers


def claim_warmup(cells: list[Cell], refs: list[str] | None) -> tuple[str, str]:
    return _trains_where_other_fails(compare(cells, "nowarmup", "pre", "post", refs),
                                     "18+18 without warm-up, 1,500 updates at lr 5e-4")


def claim_stream(cells: list[Cell], refs: list[str] | None) -> tuple[str, str]:
    pre = _one(cells, "stability", "pre")
    if pre is None:
        return "not yet measured", ""
    text, shown = [], []
    for stack in ("encoder", "decoder"):
        growth = _ratio(pre.layer_metric("final", stack, "stream_norm"))
        branch = _ratio(pre.layer_metric("final", stack, "ratio_ffn"))
        text.append(f"{stack}: stream norm last/first layer {_fmt(growth)}, feed-forward branch "
                    f"ratio last/first {_fmt(branch)}")
        shown += [growth is not None and growth >= 2, branch is not None and branch <= 0.5]
    verdict = "shown" if all(shown) else "shown in part" if any(shown) else "not shown"
    return verdict, "Pre-LN 18+18 at the end, " + "; ".join(text)


def claim_deepnorm(cells: list[Cell], refs: list[str] | None) -> tuple[str, str]:
    return _trains_where_other_fails(compare(cells, "stability", "deepnorm", "post", refs),
                                     "18+18 with the 4,000-update warm-up, at 4,500 updates")


def claim_ceiling(cells: list[Cell], refs: list[str] | None) -> tuple[str, str]:
    result = compare(cells, "ceiling", "post", "pre", refs)
    if result is None:
        return "not yet measured", ""
    numbers = f"6+6 to convergence or the cap: {result.text()}"
    if result.diff > 0 and result.significant:
        return "shown", numbers
    if result.diff < 0 and result.significant:
        return "the opposite is shown (Pre-LN ends higher)", numbers
    return "not shown: no difference beyond the noise", numbers


CLAIMS = [
    ("1. Post-LN's gradients grow toward the output at initialisation",
     "shown where the last layer's gradient norm is at least 2x the first's in Post-LN and at "
     "most half that ratio in Pre-LN, in both stacks (18+18, at init; a measurement of the "
     "initialisation, so no test set and no p-value)",
     "Xiong et al. 2020, Fig. 3", claim_gradients),
    ("2. Without warm-up, deep Post-LN fails while Pre-LN trains",
     "shown where, without warm-up at 18+18, Pre-LN reaches 10 BLEU, Post-LN scores under half "
     "of it, and the difference is significant and beyond the seeds' spread",
     "Xiong et al. 2020 (Sec. 3): Post-LN needs the warm-up stage, Pre-LN trains without it",
     claim_warmup),
    ("3. Pre-LN's stream grows and its deep layers' branches shrink",
     "shown where, at the end, the stream norm after the last layer is at least 2x that after "
     "the first and the feed-forward branch ratio ||f(x)||/||x|| at most half, in both stacks",
     "Xie et al. 2023 (ResiDual); Liu et al. 2020 (Admin) on Pre-LN's shallow dependency on "
     "its residual branches", claim_stream),
    ("4. DeepNorm trains deep Post-LN where plain Post-LN fails",
     "shown where, at 18+18 with warm-up, DeepNorm reaches 10 BLEU, Post-LN under half of it, "
     "and the difference is significant and beyond the seeds' spread",
     "Wang et al. 2022 (DeepNet), Table 1: 18L Post-LN diverges, DeepNorm 28.8", claim_deepnorm),
    ("5. At 6+6, Post-LN ends higher than Pre-LN",
     "shown where Post-LN's mean over seeds beats Pre-LN's, significantly (p < 0.05, the seeds' "
     "translations pooled) and by more than either's standard deviation over seeds",
     "Liu et al. 2020 (Admin), Table 1: 6L WMT14 Post-LN 27.80 vs Pre-LN 27.27, IWSLT14 35.64 "
     "vs 35.50", claim_ceiling),
]

# The papers' figures for the settings the study runs (BLEU; "diverged" as they report it).
PAPERS = [
    ("6 layers", "Admin (Liu et al. 2020), WMT14 En-De", {"post": "27.80", "pre": "27.27",
                                                          "admin": "27.90"}),
    ("6 layers", "Admin (Liu et al. 2020), IWSLT14 De-En", {"post": "35.64", "pre": "35.50",
                                                            "admin": "35.67"}),
    ("18 layers", "Admin (Liu et al. 2020), WMT14 En-De", {"post": "diverged", "pre": "28.38",
                                                           "admin": "29.03"}),
    ("18 layers", "DeepNet (Wang et al. 2022)", {"post": "diverged", "deepnorm": "28.8"}),
]


def papers_table(cells: list[Cell]) -> list[str]:
    schemes = ("post", "pre", "admin", "deepnorm")
    lines = ["| depth | source | " + " | ".join(SCHEMES[s] for s in schemes) + " |",
             "|---|---|" + "---|" * len(schemes)]
    for depth, source, figures in PAPERS:
        lines.append(f"| {depth} | {source} | "
                     + " | ".join(figures.get(s, "–") for s in schemes) + " |")
    for depth, tier in (("6+6", "ceiling"), ("18+18", "stability")):
        row = []
        for scheme in schemes:
            group = setting(cells, tier, scheme)
            if not group:
                row.append("–")
                continue
            mean, sd = mean_sd([c.bleu for c in group])
            row.append(f"{mean:.2f} ± {sd:.2f}" if len(group) > 1 else f"{mean:.2f}")
        cap = ", 4,500 updates" if tier == "stability" else ""
        lines.append(f"| {depth} | normzoo, Multi30k En-De test2016 (d_model 128{cap}) | "
                     + " | ".join(row) + " |")
    return lines


def _difference(result: Comparison) -> str:
    p = "p –" if result.p is None else f"p = {result.p:.4f}"
    return f"{result.diff:+.2f} ({p}{', shown' if result.significant else ''})"


def fixes_table(cells: list[Cell], refs: list[str] | None) -> list[str]:
    """The four fixes at 18+18 against Pre-LN and Post-LN (the first rows) in test BLEU, with
    each cell's best validation loss: the one reading a cell cut off before its final test
    still has."""
    lines = ["| scheme (18+18, warm-up 4,000) | ran on | best val loss | BLEU | minus Pre-LN | "
             "minus Post-LN |", "|---|---|---|---|---|---|"]
    for scheme in ("pre", "post", "deepnorm", "admin", "resi_dual", "subln"):
        group = setting(cells, "stability", scheme)
        ran = next((c for c in cells if c.tier == "stability" and c.scheme == scheme), None)
        cols = []
        for baseline in ("pre", "post"):
            result = (compare(cells, "stability", scheme, baseline, refs)
                      if scheme != baseline else None)
            cols.append("–" if result is None else _difference(result))
        name = SCHEMES[scheme] + " (baseline)" * (scheme in ("pre", "post"))
        lines.append(f"| {name} | {_ran_on(ran) if ran else '–'} | "
                     f"{_fmt(ran.best_val if ran else None, 3)} | "
                     f"{_fmt(group[0].bleu if group else None)} | " + " | ".join(cols) + " |")
    return lines


def _ran_on(cell: Cell) -> str:
    return f"{cell.precision or '–'}{', GPU' if cell.on_gpu else ', CPU'}"


# -- the report -------------------------------------------------------------------------------
def cell_table(cells: list[Cell], tier: str) -> list[str]:
    head = ["scheme", "seed", "precision, device", "updates", "why it stopped", "best val loss",
            "test BLEU (best)", "(average of last 5)", "greedy", "training (min)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cell in sorted((c for c in cells if c.tier == tier),
                       key=lambda c: (list(SCHEMES).index(c.scheme) if c.scheme in SCHEMES
                                      else 99, c.seed)):
        stopped = cell.stopped or cell.status
        if cell.status == "diverged":
            stopped = f"diverged at step {cell.diverged_at}"
        if cell.processes > 1:
            stopped += f" (resumed {cell.processes - 1}x)"
        if cell.paused_min:
            stopped += f" (suspended {cell.paused_min:.0f} min, not counted)"
        row = [SCHEMES.get(cell.scheme, cell.scheme), cell.seed, _ran_on(cell),
               str(cell.steps or "–"), stopped, _fmt(cell.best_val, 3), _fmt(cell.bleu),
               _fmt(cell.averaged), _fmt(cell.greedy), _fmt(cell.train_min, 1)]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _gpu_speed(cells: list[Cell]) -> str:
    """How fast the GPU cells trained, from their own clocks: what a full-protocol run there
    would cost is estimated from it."""
    timed = [c for c in cells if c.train_min and c.steps]
    if not timed:
        return ""
    rates = ", ".join(f"{c.label} {c.steps / (c.train_min * 60):.1f}" for c in timed)
    return (f"updates per second of an 18+18 d_model-128 cell, {len(timed)} side by side: "
            f"{rates}")


def render(cells: list[Cell], references: list[str] | None) -> str:
    plt = plots.pyplot()
    figures = plots.draw_all(cells, plt, FIGURES)
    hours = sum(c.train_min or 0.0 for c in cells if not c.on_gpu) / 60
    on_gpu = [c for c in cells if c.on_gpu]
    gpu_min = sum(c.train_min or 0.0 for c in on_gpu)
    gpu = (f"{len(on_gpu)} cell{'s' * (len(on_gpu) != 1)} on the GPU, {gpu_min:.0f} min of "
           "training in all, side by side" if on_gpu else "no cell on a GPU")
    signatures = sorted({c.signature for c in cells if c.signature})
    counts = ", ".join(f"{tier} {sum(c.tier == tier for c in cells)} of {PLANNED[tier]}"
                       for tier in TIERS)
    lines = [
        "# Depth study on Multi30k under the papers' protocol", "",
        "*Generated by `python benchmarks/study_depth.py` from the files the sweeps wrote "
        "(`docs/study-depth/data/`); do not edit by hand.*", "",
        "## How it was run", "",
        f"The recipe, [`{RECIPE}`](../{RECIPE}), is the protocol of fairseq's IWSLT14 example and "
        "the papers below, at a width a 2-core CPU affords: Multi30k En→De (29,000 pairs), an "
        "encoder–decoder with d_model 128, 4 heads, FFN 512, LayerNorm, a joint 6,000-entry "
        "BPE; inverse square-root schedule with a 4,000-update warm-up to 5e-4, Adam (0.9, "
        "0.98), weight decay 1e-4, dropout, attention and activation dropout 0.1, label "
        "smoothing 0.1, about 2k tokens per update, no clipping; validation every 500 updates, "
        "early stopping after 4 without improvement; test2016 scored (beam 5, length penalty 1) "
        "with the best checkpoint and with the average of the last 5. Weights start as the "
        "reference code's ([init-references.md](init-references.md)). Three tiers:", "",
        "- **ceiling**: Post-LN and Pre-LN 6+6, 3 seeds, to convergence or 7,000 updates;",
        "- **stability**: six schemes at 18+18 with the same warm-up, to 4,500 updates (500 "
        "past the warm-up's peak, where the papers' deep Post-LN diverges);",
        "- **nowarmup**: Post-LN and Pre-LN 18+18 at a constant 5e-4 from the first update, "
        "1,500 updates.", "",
        *[f"```bash\n{command}\n```\n" for command in COMMANDS],
        f"The sweeps run from a clone at commit `{STUDY_COMMIT}`, and are resumable: re-running "
        "a command finishes its interrupted cell from the last checkpoint and skips the "
        "finished ones. "
        "Machine: a 2-core CPU (AMD EPYC, one thread per cell, two cells side by side), but "
        "for the cells whose row says GPU. Two sessions were lent an NVIDIA H200, each for "
        "15 minutes of device time in all (start-up included). The first (2026-11-26, 01:00 "
        "UTC) ran the four remaining 18+18 cells side by side (`--jobs 4`), and they trained "
        "on the host's CPU instead (a defect of `normzoo sweep --jobs`, since fixed: its local "
        "jobs were given no GPU), reaching update 550 of 4,500 in 9 minutes; those partial "
        "cells are not used. The second (04:12 UTC) trained ResiDual and Sub-LN at 18+18 "
        "there, side by side, through `benchmarks/study_depth_gpu.sh` (a wheel of the study's "
        "commit, the same prepared data and tokenizer), to the 4,500-update cap in about 9 "
        "minutes each; Sub-LN was stopped at update 4,397 by the first call's deadline and "
        "resumed from its checkpoint in the second. Neither finished its final test before the "
        "device time ran out: Lightning had moved the model to the CPU at the end of training, "
        "so the four decodes of test2016 ran on the host's CPU (a defect, since fixed: the "
        "test decodes on the training device). They have validation losses, not BLEU; their "
        "sweep logs, with Lightning's \"GPU available: True (cuda), used: True\", are kept "
        "beside their losses. "
        f"Cells: {counts}; {hours:.1f} h of one-thread training on the CPU "
        f"in all, about {hours / 2:.1f} h of the two cores, against a budget of about 10; "
        f"{gpu}. "
        "Each cell's precision is in its table row. Training minutes compare only roughly "
        "between cells: they ran in different sessions, beside different work, and the study's "
        "commit predates the CPU's family and model in `summary.json` (the machine of the "
        "session that ran the third 6+6 seed and the first two 18+18 cells: family 26, "
        "model 2, a Zen 5, with bf16 in hardware). **The machine changed under the study.** "
        "From 2026-11-25 22:00 UTC the cells ran on an EPYC of family 25, model 1 (Zen 3) "
        "without bf16 instructions, where `bf16-mixed` falls back to `32-true` (the run says "
        "so and its `recipe.yaml` records it): an 18+18 update took about 3 s instead of 0.7. "
        "To stay near the budget the order then put first the cells the verdicts read (the "
        "two no-warm-up cells, Pre-LN and DeepNorm at 18+18) and ResiDual and Sub-LN last.", "",
        "sacreBLEU: " + (", ".join(f"`{s}`" for s in signatures) or "–"), "",
        "## Verdicts", "",
        f"Rule for every difference: significant by paired bootstrap (p < {ALPHA}, 1,000 "
        "samples, sacreBLEU's implementation, seeds pooled seed by seed) and larger than the "
        "seeds' spread." + ("" if references is not None else
                            " **The references were not found: no p-value computed, so no "
                            "difference can be shown.**"), "",
    ]
    for title, rule, paper, judge in CLAIMS:
        verdict, numbers = judge(cells, references)
        lines += [f"### {title}: **{verdict}**", "", f"- Here: {numbers or 'cells still to run'}.",
                  f"- Rule: {rule}.", f"- The papers: {paper}.", ""]
    lines += ["### The fixes at depth", "", *fixes_table(cells, references), "",
              "### The papers' figures beside ours", "",
              "Absolute BLEU is not comparable across datasets and model sizes; the pattern "
              "within a row is.", "", *papers_table(cells), ""]
    unscored = [c for c in cells if not c.scored]
    lines += [
        "## What this study could not judge", "",
        "- **Quality at 18+18.** The stability tier stops at 4,500 updates, 500 past the "
        "warm-up's peak, to keep within the 10-hour budget: its BLEU says whether a scheme "
        "trains through the peak, not what it converges to.",
        *([f"- **Test BLEU of {' and '.join(c.label for c in unscored)} at 18+18.** Trained "
           "to the cap but not scored (see How it was run): the fixes table compares them by "
           "validation loss only, across devices and precisions, a reading rather than a "
           "verdict. No verdict reads them."] if unscored else []),
        "- **Precision at 18+18.** Post-LN and Admin at 18+18 trained in bf16-mixed, the "
        "CPU cells after the machine changed in 32-true, the GPU cells in bf16-mixed on the "
        "GPU (see each row). A scheme that trains in "
        "one precision and fails in the other would be confounded with it. Two readings speak "
        "against that: Admin trained in bf16-mixed at 18+18, so bf16 alone does not make a "
        "deep model fail here, and the [precision study](precision.md) moved no reading "
        "beyond the seeds' spread between fp32 and bf16-mixed, Post-LN and Pre-LN 18+18 "
        "included (short protocol).",
        "- **Seeds at depth.** One seed per 18+18 cell: their differences are held to the 6+6 "
        "seeds' spread, which deep cells may exceed.",
        "- **Scale.** d_model 128 on Multi30k, on a CPU; the papers train d_model 512–1024 on "
        "WMT for 100k+ updates. A GPU run of the full protocol (5 seeds, 12k updates, d_model "
        "256–512) takes hours of a GPU; the sessions here are lent one for 15 minutes at most"
        + (f" (measured there: {speed})." if (speed := _gpu_speed(on_gpu)) else "."),
        "",
        *study_eval_gap.section(DATA / "eval-gap"),
        "## Results", "",
    ]
    for tier in TIERS:
        lines += [f"### {tier}", "", *cell_table(cells, tier), ""]
    lines += ["## Plots", "", *[f"{caption}:\n\n![{caption}]({path})\n"
                                for caption, path in figures.items()]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweeps", nargs="?", type=Path, default=ROOT / "runs" / "study-papers")
    parser.add_argument("--commands", choices=("a", "b"),
                        help="print slot A's or slot B's sweep commands, one a line, in order "
                        "(benchmarks/study_depth.sh runs them) and exit")
    parser.add_argument("--gpu", type=Path, metavar="DIR",
                        help="also collect the stability cells study_depth_gpu.sh ran on a lent "
                        "GPU, from its tarballs unpacked in DIR")
    parser.add_argument("--render-only", action="store_true",
                        help="render from docs/study-depth/data without reading the runs")
    parser.add_argument("--references", type=Path, default=REFERENCES,
                        help="test2016 references (default: ../shared/data/multi30k)")
    args = parser.parse_args(argv)
    if args.commands:
        print("\n".join(COMMANDS["ab".index(args.commands)::2]))
        return 0
    if not args.render_only:
        for tier, folder, _ in SWEEPS:
            copy_cells(args.sweeps / folder, DATA / tier, translations=True,
                       extra=("recipe.yaml",))
        if args.gpu:
            print(f"collected {collect_gpu(args.gpu, DATA / 'stability')} GPU cells")
    cells = load_cells()
    references = (args.references.read_text(encoding="utf-8").removesuffix("\n").split("\n")
                  if args.references.is_file() else None)
    REPORT.write_text(render(cells, references), encoding="utf-8")
    print(f"wrote {REPORT} ({len(cells)} cells)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
