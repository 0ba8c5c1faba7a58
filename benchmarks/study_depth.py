"""The depth study's report: docs/study-depth.md and its plots, from what the sweeps wrote.

    python benchmarks/study_depth.py [RUNS ...]     # collect from each clone's runs/, render
    python benchmarks/study_depth.py --gpu DIR      # also the cells study_depth_gpu.sh ran
    python benchmarks/study_depth.py --render-only
    python benchmarks/study_depth.py --commands a   # slot A's sweeps still to run

The study runs the papers' protocol (``recipes/studies/multi30k_papers.yaml``) in four tiers:
``ceiling`` (6+6), ``stability`` (18+18), ``nowarmup`` (18+18 without warm-up) and
``nowarmup6`` (6+6 without warm-up). The first study's sweeps (SWEEPS) ran one seed a deep cell;
issue 35's (SEED_SWEEPS) bring the 18+18 comparisons to three seeds in one precision and add the
6+6 no-warm-up control. ``benchmarks/study_depth.sh`` runs the sweeps still to run in two slots,
one per core; ``study_depth_gpu.sh`` runs 18+18 cells on a lent GPU. **Collect** copies each
cell's files, test translations included, into ``docs/study-depth/data/`` (``study_files.py``);
**render** writes the report from those files alone, so every number in it is in the
repository. Cells not yet run show as pending.

Every verdict follows the rule printed beside it (``study_depth_verdicts.py``): a difference is
*shown* only with three seeds a side or more, Welch's t-test over the seeds' BLEU and the paired
bootstrap of their pooled translations both below 0.05, and one precision
(``normzoo.sweep.significance``, the rule of ``normzoo compare``); otherwise at most *indicated*.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import study_depth_plots as plots
import study_eval_gap
import yaml
from study_depth_plan import SEED_SWEEPS, STABLE_ARGS, SWEEPS, TIERS, command
from study_depth_text import how_it_was_run, limits
from study_depth_verdicts import (
    CLAIMS,
    PRECISION,
    SCHEMES,
    fixes_table,
    papers_table,
)
from study_files import (
    as_float,
    copy_cells,
    curve,
    read_csv,
    read_json,
    training_minutes,
)

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "study-depth" / "data"
FIGURES = ROOT / "docs" / "study-depth"
REPORT = ROOT / "docs" / "study-depth.md"
REFERENCES = ROOT.parent / "shared" / "data" / "multi30k" / "test2016.de"
# Cells whose processes were suspended (SIGSTOP/SIGCONT) while they trained, so that a benchmark
# and the test suite had the cores to themselves, as {"tier/cell": minutes}; the minutes are left
# out of their training time (ThroughputMonitor's clock runs on through a suspension).
PAUSED_MIN: dict[str, float] = {
    "ceiling/seed-3_residual-post": 20.2,
    "ceiling/seed-3_residual-pre": 20.2,
    "stability/residual-post": 10.8,
    "stability/residual-admin-init-profiled": 10.8,
}
UNSCORED = ("not scored: the lent GPU's time ran out during its final test, which then decoded "
            "on the host's CPU (Lightning's teardown had moved the model there; fixed since)")
GPU_LOG = "GPU available: True (cuda), used: True"  # Lightning's line in the cell's sweep log


# -- the cells --------------------------------------------------------------------------------
class Cell:
    """One cell of one tier: its setting, how and where it ran and ended, what it scored."""

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
        self.seed = str(record.get("seed") or recipe.get("seed") or "1")
        self.status = record.get("status", "")
        self.diverged_at = record.get("diverged_at_step", "")
        self.steps = record.get("steps") or summary.get("steps")
        self.stopped = record.get("stopped") or summary.get("stopped", "")
        self.precision = (recipe.get("trainer") or {}).get("precision", "")
        machine = summary.get("machine") or {}
        log = folder / "sweep.log"  # cells run on a lent GPU keep their sweep's log
        self.on_gpu = machine.get("device") == "cuda" or (
            log.is_file() and GPU_LOG in log.read_text(encoding="utf-8"))
        self.machine = machine.get("gpu") if self.on_gpu else machine.get("cpu")
        self.scored = (folder / "cell.json").is_file()
        test = summary.get("test") or {}
        self.bleu = as_float(test.get("bleu"))
        self.greedy = as_float(test.get("greedy_bleu"))
        self.averaged, self.averaged_note = _averaged(test.get("averaged") or {},
                                                      summary.get("best_checkpoint"))
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
        return f"{SCHEMES.get(self.scheme, self.scheme)}, seed {self.seed}"

    @property
    def device_short(self) -> str:
        return "GPU" if self.on_gpu else "CPU"

    def hypotheses(self) -> list[str] | None:
        path = self.folder / "hyps.test2016.txt"
        if not path.is_file():
            return None
        return path.read_text(encoding="utf-8").removesuffix("\n").split("\n")

    def layer_metric(self, when: str, stack: str, metric: str) -> list[float]:
        rows = sorted((r for r in self.diagnose if r["when"] == when and r["stack"] == stack),
                      key=lambda r: int(r["layer"]))
        return [as_float(r.get(metric)) or 0.0 for r in rows]


def _step_of(name: str) -> int | None:
    digits = "".join(ch for ch in Path(name).stem.split("-")[-1] if ch.isdigit())
    return int(digits) if digits else None


def _averaged(averaged: dict, best: str | None) -> tuple[float | None, str]:
    """The averaged checkpoint's BLEU where it averages the converged stretch (from the best
    validation point on, as the papers average), else None and why. Runs before the papers'
    averaging averaged their newest five whatever the best: those count only where the best
    checkpoint is not newer than the oldest of the five."""
    if not averaged:
        return None, "not averaged"
    if averaged.get("skipped"):
        return None, "still improving at its end: nothing to average"
    bleu = as_float(averaged.get("bleu"))
    if "rule" in averaged:  # the papers' averaging
        return bleu, ""
    steps = [_step_of(n) for n in averaged.get("checkpoints", [])]
    best_step = _step_of(best) if best else None
    if bleu is None or best_step is None or not steps or None in steps:
        return None, "not averaged"
    if best_step <= min(s for s in steps if s is not None):
        return bleu, ""
    return None, (f"its newest five (from step {min(steps)}) precede or straddle the best "
                  f"(step {best_step}): mid-schedule, not reported")


def load_cells() -> list[Cell]:
    """Every collected cell: those the sweeps finished (``cell.json``) and those that trained
    on a lent GPU and were cut off before their final test (losses only)."""
    return [Cell(tier, folder) for tier in TIERS if (DATA / tier).is_dir()
            for folder in sorted((DATA / tier).iterdir())
            if (folder / "cell.json").is_file() or (folder / "loss.csv").is_file()]


def collect(runs: Path) -> int:
    """Copy the finished cells of every sweep under a clone's ``runs/`` into ``DATA``."""
    copied = 0
    for tier, folder, _ in SWEEPS:
        copied += len(copy_cells(runs / "study-papers" / folder, DATA / tier,
                                 translations=True, extra=("recipe.yaml",)))
    for tier, folder, *_ in dict.fromkeys((t, f) for t, f, *_ in SEED_SWEEPS):
        copied += len(copy_cells(runs / "study-seeds" / folder, DATA / tier,
                                 translations=True, extra=("recipe.yaml",)))
    return copied


def collect_gpu(source: Path, target: Path) -> int:
    """The finished cells ``study_depth_gpu.sh`` ran on a lent GPU, from its unpacked tarball
    in ``source`` (``<lane>/<cell>/`` beside ``<lane>.log``), into the tier folder ``target``;
    returns how many. Each keeps its lane's log as ``sweep.log`` (the device's name, Lightning's
    "GPU available: True (cuda), used: True"). Cells a lane left unfinished are not copied: the
    GPU keeps no checkpoint to resume them here."""
    copied = 0
    for lane in sorted(p for p in source.iterdir() if p.is_dir()):
        log = source / f"{lane.name}.log"
        names = copy_cells(lane, target, translations=True, extra=("recipe.yaml",))
        for name in names if log.is_file() else []:
            shutil.copyfile(log, target / name / "sweep.log")
        copied += len(names)
    return copied


def pending(slot: str) -> list[str]:
    """Slot ``slot``'s sweeps with the seeds whose cells are not yet collected, in order."""
    found = []
    for tier, folder, args, residual, seeds, where, _ in SEED_SWEEPS:
        name = "admin-init-profiled" if "admin" in residual else residual
        todo = tuple(s for s in seeds
                     if not (DATA / tier / f"seed-{s}_residual-{name}" / "cell.json").is_file())
        if where == slot and todo:
            found.append(command(folder, args, residual, todo))
    return found


def gpu_lanes() -> list[str]:
    """One ``name|args`` lane a pending 18+18 cell, for study_depth_gpu.sh: the SEED_SWEEPS cells
    not yet collected, then ResiDual and Sub-LN while they have no test score."""
    lanes = []
    for tier, _, args, residual, seeds, _, _ in SEED_SWEEPS:
        name = "admin-init-profiled" if "admin" in residual else residual
        for seed in seeds:
            if tier == "stability" and not (
                    DATA / tier / f"seed-{seed}_residual-{name}" / "cell.json").is_file():
                lanes.append(f"stability-{name}-{seed}|{args} --set seed={seed} "
                             f"--set model.residual={residual}")
    for scheme in ("resi_dual", "subln"):
        if not any((DATA / "stability" / f"{prefix}residual-{scheme}" / "cell.json").is_file()
                   for prefix in ("", "seed-1_")):
            lanes.append(f"stability-{scheme}-1|{STABLE_ARGS} --set seed=1 "
                         f"--set model.residual={scheme}")
    return lanes


# -- the report -------------------------------------------------------------------------------
def _fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _ran_on(cell: Cell) -> str:
    where = cell.device_short + (f" ({cell.machine})" if cell.machine else "")
    return f"{cell.precision or '–'}, {where}"


def cell_table(cells: list[Cell], tier: str) -> list[str]:
    head = ["scheme", "seed", "precision, device", "updates", "why it stopped", "best val loss",
            "test BLEU (best)", "averaged (converged)", "greedy", "training (min)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cell in sorted((c for c in cells if c.tier == tier),
                       key=lambda c: (list(SCHEMES).index(c.scheme) if c.scheme in SCHEMES
                                      else 99, c.precision != PRECISION, int(c.seed))):
        stopped = cell.stopped or cell.status
        if cell.status == "diverged":
            stopped = f"diverged at step {cell.diverged_at}"
        if cell.processes > 1:
            stopped += f" (resumed {cell.processes - 1}x)"
        if cell.paused_min:
            stopped += f" (suspended {cell.paused_min:.0f} min, not counted)"
        if tier != "nowarmup" and cell.precision != PRECISION and cell.scored:
            stopped += "; not compared: another precision than the tier's"
        row = [SCHEMES.get(cell.scheme, cell.scheme), cell.seed, _ran_on(cell),
               str(cell.steps or "–"), stopped, _fmt(cell.best_val, 3), _fmt(cell.bleu),
               _fmt(cell.averaged) if cell.averaged is not None else f"– ({cell.averaged_note})",
               _fmt(cell.greedy), _fmt(cell.train_min, 1)]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def render(cells: list[Cell], references: list[str] | None) -> str:
    plt = plots.pyplot()
    figures = plots.draw_all(cells, plt, FIGURES)
    lines = ["# Depth study on Multi30k under the papers' protocol", "",
             "*Generated by `python benchmarks/study_depth.py` from the files the sweeps wrote "
             "(`docs/study-depth/data/`); do not edit by hand.*", "",
             *how_it_was_run(cells), "## Verdicts", "",
             "Rule for every difference in BLEU (`normzoo compare`'s): **shown** only with "
             "three seeds a side or more, Welch's t-test over the seeds' BLEU (the training "
             "runs' noise) and sacreBLEU's paired bootstrap of the pooled translations (the "
             "test set's noise; 1,000 samples) both below 0.05, and one precision; otherwise at "
             "most **indicated**. On the committed 6+6 cells, paired bootstrap alone called 3 "
             "of 6 same-setting seed pairs significant; this rule calls none of them shown."
             + ("" if references is not None else
                " **The references were not found: no p-value computed, so no difference can "
                "be shown.**"), ""]
    for title, rule, paper, judge in CLAIMS:
        verdict, numbers = judge(cells, references)
        lines += [f"### {title}: **{verdict}**", "", f"- Here: {numbers or 'cells still to run'}.",
                  f"- Rule: {rule}.", f"- The papers: {paper}.", ""]
    lines += ["### The fixes at depth", "",
              "Each scheme's 18+18 seeds in bf16-mixed, with the device each trained on (a "
              "difference: the mean's, with the seed-aware verdict):", "",
              *fixes_table(cells, references), "",
              "### The papers' figures beside ours", "",
              "Absolute BLEU is not comparable across datasets and model sizes; the pattern "
              "within a row is.", "", *papers_table(cells), "",
              *limits(cells), *study_eval_gap.section(DATA / "eval-gap"), "## Results", ""]
    for tier in TIERS:
        lines += [f"### {tier}", "", *cell_table(cells, tier), ""]
    lines += ["## Plots", "", *[f"{caption}:\n\n![{caption}]({path})\n"
                                for caption, path in figures.items()]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", type=Path,
                        help="a study clone's runs/ folder to collect from (repeat); default: "
                        "none")
    parser.add_argument("--commands", choices=("a", "b"),
                        help="print slot A's or slot B's sweeps still to run, one a line, in "
                        "order (benchmarks/study_depth.sh runs them) and exit")
    parser.add_argument("--gpu-lanes", action="store_true",
                        help="print the 18+18 cells still to run as study_depth_gpu.sh's lanes "
                        "(name|args, one a line) and exit")
    parser.add_argument("--gpu", type=Path, metavar="DIR",
                        help="also collect the 18+18 cells study_depth_gpu.sh ran on a lent "
                        "GPU, from its tarball unpacked in DIR")
    parser.add_argument("--render-only", action="store_true",
                        help="render from docs/study-depth/data without reading the runs")
    parser.add_argument("--references", type=Path, default=REFERENCES,
                        help="test2016 references (default: ../shared/data/multi30k)")
    args = parser.parse_args(argv)
    if args.commands or args.gpu_lanes:
        print("\n".join(pending(args.commands) if args.commands else gpu_lanes()))
        return 0
    if not args.render_only:
        for runs in args.runs:
            print(f"collected {collect(runs)} cells from {runs}")
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
