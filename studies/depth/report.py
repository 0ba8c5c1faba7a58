"""The depth study's report: docs/study-depth.md and its plots, from what the sweeps wrote.

    python -m studies.depth.report [RUNS ...]     # collect from each clone's runs/, render
    python -m studies.depth.report --gpu DIR      # also the cells studies/depth/gpu.sh ran
    python -m studies.depth.report --render-only
    python -m studies.depth.report --commands a   # slot A's sweeps still to run

The study runs the papers' protocol (``recipes/studies/multi30k_papers.yaml``) in four tiers:
``ceiling`` (6+6), ``stability`` (18+18), ``nowarmup`` (18+18 without warm-up) and
``nowarmup6`` (6+6 without warm-up). The first study's sweeps (SWEEPS) ran one seed a deep cell;
issue 35's (SEED_SWEEPS) bring the 18+18 comparisons to three seeds in one precision and add the
6+6 no-warm-up control. ``studies/depth/run.sh`` runs the sweeps still to run in two slots,
one per core; ``studies/depth/gpu.sh`` runs 18+18 cells on a lent GPU. **Collect** copies each
cell's files, test translations included, into ``docs/study-depth/data/`` (``../sweep_files.py``);
**render** writes the report from those files alone (each cell read by ``cells.py``),
so every number in it is in the repository. Cells not yet run show as pending.

Every verdict follows the rule printed beside it (``verdicts.py``,
``tables.py``), the rule of ``normzoo compare`` (issue 51,
``normzoo.sweep.significance``): a difference is *shown* only with three seeds a side or more,
the seeds' t-test (paired where both sides ran the same seeds, else Welch's) and the
hierarchical bootstrap of their translations (seeds, then sentences) both below 0.05, one
precision and one device kind; otherwise at most *indicated*. Each carries the 95% interval of
the difference; "equal" only from the equivalence test against ``MARGIN`` (1 BLEU); each table
of comparisons says which of them Holm's correction over the table keeps.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from ..sweep_files import copy_cells, fmt
from . import gap_text, plots
from .cells import Cell
from .plan import SEED_SWEEPS, STABLE_ARGS, SWEEPS, TIERS, command
from .tables import comparison_table, fixes_table, papers_table
from .text import RULE, how_it_was_run, limits
from .verdicts import CLAIMS, PRECISION, SCHEMES, compared

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "study-depth" / "data"
FIGURES = ROOT / "docs" / "study-depth"
REPORT = ROOT / "docs" / "study-depth.md"
REFERENCES = ROOT.parent / "shared" / "data" / "multi30k" / "test2016.de"


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
    """The finished cells ``studies/depth/gpu.sh`` ran on a lent GPU, from its unpacked tarball
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
    """One ``name|args`` lane a pending 18+18 cell, for studies/depth/gpu.sh: the SEED_SWEEPS cells
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
               str(cell.steps or "–"), stopped, fmt(cell.best_val, 3), fmt(cell.bleu),
               fmt(cell.averaged) if cell.averaged is not None else f"– ({cell.averaged_note})",
               fmt(cell.greedy), fmt(cell.train_min, 1)]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def render(cells: list[Cell], references: list[str] | None) -> str:
    plt = plots.pyplot()
    figures = plots.draw_all(cells, plt, FIGURES)
    lines = ["# Depth study on Multi30k under the papers' protocol", "",
             "*Generated by `python -m studies.depth.report` from the files the sweeps wrote "
             "(`docs/study-depth/data/`); do not edit by hand.*", "",
             *how_it_was_run(cells), "## Verdicts", "", RULE
             + ("" if references is not None else
                " **The references were not found: no p-value computed, so no difference can "
                "be shown.**"), ""]
    for title, rule, paper, judge in CLAIMS:
        verdict, numbers = judge(cells, references)
        lines += [f"### {title}: **{verdict}**", "", f"- Here: {numbers or 'cells still to run'}.",
                  f"- Rule: {rule}.", f"- The papers: {paper}.", ""]
    gpu = [c.label for c in cells if c.tier == "stability" and c.on_gpu and c.scored
           and c.precision == PRECISION]
    lines += ["The comparisons in BLEU these verdicts lean on (the system's mean minus the "
              "baseline's; device kinds by seed; Holm's correction over this table's tested "
              "comparisons, each by the larger of its two p-values, since shown needs both; "
              "kept says that p-value survives the correction, the verdict still needs the rest "
              "of the rule):", "",
              *comparison_table(compared(cells, references)), "",
              "### The fixes at depth", "",
              "Each scheme's 18+18 seeds in bf16-mixed, with the device each trained on"
              + (f"; {' and '.join(gpu)} trained on a GPU (cuda), the other seeds on CPUs: a "
                 "comparison whose cells mix device kinds is at most indicated" if gpu else "")
              + ":", "",
              *fixes_table(cells, references), "",
              "### The papers' figures beside ours", "",
              "Absolute BLEU is not comparable across datasets and model sizes; the pattern "
              "within a row is.", "", *papers_table(cells), "",
              *limits(cells), *gap_text.section(DATA / "eval-gap"), "## Results", ""]
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
                        "order (studies/depth/run.sh runs them) and exit")
    parser.add_argument("--gpu-lanes", action="store_true",
                        help="print the 18+18 cells still to run as studies/depth/gpu.sh's lanes "
                        "(name|args, one a line) and exit")
    parser.add_argument("--gpu", type=Path, metavar="DIR",
                        help="also collect the 18+18 cells studies/depth/gpu.sh ran on a lent "
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
