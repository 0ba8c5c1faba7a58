"""Residual schemes in a Llama-style decoder: docs/study-llama.md, from what the sweeps wrote.

    python -m studies.llama.report [SWEEPS]      # default SWEEPS: runs/study-llama
    python -m studies.llama.report --render-only

``recipes/studies/llama_schemes.yaml`` (``recipes/gpt_llama.yaml`` made small) is swept in two
parts (``plan.py``): first Pre-LN, Peri-LN, Mix-LN and DeepNorm at 6 layers on the
built-in corpus and on the German side of Multi30k; then the contract's new schemes (Pre-LN,
+QK-norm, LNS, Peri-LN, HC, mHC, nGPT) at 6 and 12 layers on the German side of Multi30k; three
seeds a cell. **Collect** copies each finished cell's files into ``docs/study-llama/data/<group>/``
(``studies/sweep_files.py``; cells already there and absent from the sweeps stay); **render** writes
the report from those files alone, so every number in it is in the repository.

Each scheme is judged against Pre-LN of its group by :func:`normzoo.sweep.significance.judge` on
the per-seed test losses. Every cell of a group ran seeds 1-3, and a seed fixes the order the
data comes in under every scheme, so the seeds' test is the paired t-test (seed with
seed, as ``normzoo compare`` pairs them; Welch's only where the seeds differ); a difference is
*shown* only with three seeds a side or more, one precision and one device kind (as the runs
recorded them) and that test below 0.05, else at most *indicated*. The runs keep no per-token
test losses, so it is called with ``sentence_test=False``: the seeds' test decides alone. Each
verdict carries the 95% interval of the difference; equality is claimed only by the equivalence
test (TOST) against :data:`text.MARGIN`. Each verdict is its own test at 0.05; a
column says which Holm's correction over the comparisons of a part made together keeps, and
only those are in bold.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from normzoo.sweep.significance import (
    equivalence_p,
    equivalence_verdict,
    holm,
    judge,
    paired_t_p,
    same_seeds,
    seed_interval,
    seed_order,
    welch_p,
)

from ..sweep_files import as_float, copy_cells, curve, mean_sd, pyplot, read_csv, read_json
from ..sweep_files import training_minutes as minutes_of
from .plan import DATASETS, GROUPS, SCHEMES, SEED_RUNS, SWEEPS
from .text import (
    MARGIN,
    cost_table,
    first_part,
    holm_cell,
    second_part,
    short_p,
    summary_lines,
    verdict_cell,
)

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "study-llama" / "data"
FIGURES = ROOT / "docs" / "study-llama"
REPORT = ROOT / "docs" / "study-llama.md"
SEEDS = tuple(seed for values, _ in SEED_RUNS for seed in values.split(","))
LINESTYLES = {"1": "-", "2": "--", "3": ":"}  # the plots' line for each seed
# (label, residual, QK-norm) of the first part's schemes; the second part's are the plan's.
FIRST_SCHEMES = [("Pre-LN", "pre", False), ("Peri-LN", "peri", False),
                 ("Mix-LN", "mixln", False), ("DeepNorm", "deepnorm", False)]
PARTS = {"first": (list(DATASETS), FIRST_SCHEMES), "second": (list(GROUPS), SCHEMES)}
BASELINE = ("pre", False)


def residual_name(value: object) -> str:
    """A cell's ``model.residual`` as the sweep recorded it (``pre``, or a mapping written as
    ``{name: hyper, streams: 4}``) -> the scheme's name."""
    parsed = yaml.safe_load(str(value)) if value else ""
    return str(parsed.get("name", "")) if isinstance(parsed, dict) else str(parsed)


class Cell:
    """One finished run: its group, scheme and seed, how it ended, its test loss."""

    def __init__(self, group: str, folder: Path) -> None:
        record, summary = read_json(folder / "cell.json"), read_json(folder / "summary.json")
        recipe = (folder / "recipe.yaml").read_text(encoding="utf-8") \
            if (folder / "recipe.yaml").is_file() else ""
        trainer = (yaml.safe_load(recipe) or {}).get("trainer") or {}
        self.precision = str(trainer.get("precision") or "")  # as the run saved its recipe
        self.device = str((summary.get("machine") or {}).get("device") or "")  # "": unrecorded
        self.group, self.name = group, folder.name
        self.scheme = residual_name(record.get("model.residual", ""))
        self.key = (self.scheme, bool(record.get("model.qk_norm")))
        self.seed = str(record.get("seed", "1"))
        self.steps = record.get("steps") or summary.get("steps")
        self.stopped = record.get("stopped") or summary.get("stopped", "")
        test = summary.get("test") or {}
        self.test_loss, self.test_ppl = as_float(test.get("loss")), as_float(test.get("ppl"))
        losses = read_csv(folder / "loss.csv")
        self.val = curve(losses, "val_loss")
        train = curve(losses, "train_loss")
        self.train_loss = train[-1][1] if train else None
        self.minutes, _ = minutes_of(losses)
        self.diagnose = read_csv(folder / "diagnose.csv")

    def _column(self, column: str, when: str) -> list[float | None]:
        rows = [r for r in self.diagnose if r.get("when") == when]
        return [as_float(r.get(column)) for r in sorted(rows, key=lambda r: int(r["layer"]))]

    def ratio(self, column: str, when: str) -> float | None:
        """``column`` after the last layer over after the first (decoder), at ``when``."""
        values = self._column(column, when)
        if len(values) < 2 or values[0] in (None, 0.0) or values[-1] is None:
            return None
        return values[-1] / values[0]

    def mean(self, column: str, when: str) -> float | None:
        """``column`` averaged over the decoder's layers at ``when``."""
        values = [v for v in self._column(column, when) if v is not None]
        return statistics.fmean(values) if values else None


def load_cells() -> list[Cell]:
    groups = [g for names, _ in PARTS.values() for g in names]
    return [Cell(group, folder) for group in groups if (DATA / group).is_dir()
            for folder in sorted((DATA / group).iterdir()) if (folder / "cell.json").is_file()]


def _stat(values: list[float | None], digits: int = 3) -> str:
    kept = [v for v in values if v is not None]
    if not kept:
        return "–"
    mean, sd = mean_sd(kept)
    return f"{mean:.{digits}f} ± {sd:.{digits}f}" if len(kept) > 1 else f"{mean:.{digits}f}"


@dataclass
class Found:
    """One scheme against its group's Pre-LN: the direction of the difference, judge's label,
    the seeds' test (paired or Welch's) and its p, the difference of the mean test losses and
    its 95% interval, the equivalence test against MARGIN, and whether Holm keeps it."""

    group: str
    name: str
    direction: str
    label: str
    paired: bool
    p: float | None
    diff: float
    interval: tuple[float, float] | None
    equal_p: float | None
    equal: str
    holm: bool = False


def verdict(pre: list[float], losses: list[float], paired: bool = False,
            precisions: Sequence[str] = (), devices: Sequence[str] = (), group: str = "",
            name: str = "") -> Found:
    """The verdict on a scheme's per-seed test losses against Pre-LN's (``paired``: given seed
    by seed in the same order): lower or higher test loss, judge's label, the seeds' p, the
    interval of the difference and whether the two are equal within MARGIN."""
    found = judge(pre, losses, None, precisions, sentence_test=False, devices=devices,
                  paired=paired)
    equal_p = equivalence_p(pre, losses, MARGIN, paired)
    return Found(group, name, "lower test loss" if statistics.fmean(losses)
                 < statistics.fmean(pre) else "higher test loss", found.label, paired,
                 (paired_t_p if paired else welch_p)(pre, losses),
                 statistics.fmean(losses) - statistics.fmean(pre),
                 seed_interval(pre, losses, paired), equal_p,
                 equivalence_verdict(equal_p, min(len(pre), len(losses)), precisions, devices))


def compare(group: str, name: str, pre: list[Cell], mine: list[Cell]) -> Found:
    """``mine`` against ``pre``, paired seed with seed where both ran the same seeds."""
    pre, mine = ([c for c in side if c.test_loss is not None] for side in (pre, mine))
    paired = same_seeds([c.seed for c in pre], [c.seed for c in mine])
    if paired:
        pre, mine = ([side[i] for i in seed_order([c.seed for c in side])]
                     for side in (pre, mine))
    both = pre + mine
    return verdict([c.test_loss for c in pre], [c.test_loss for c in mine], paired,
                   [c.precision for c in both if c.precision],
                   [c.device for c in both if c.device], group, name)


def _losses(cells: list[Cell], key: tuple[str, bool]) -> list[float]:
    return [c.test_loss for c in cells if c.key == key and c.test_loss is not None]


def verdicts(cells: list[Cell], part: str = "first") -> list[Found]:
    """Every scheme of ``part`` against its group's Pre-LN where both have a test loss, with
    whether Holm's correction over all of them (the part's comparisons) keeps each."""
    groups, schemes = PARTS[part]
    out = []
    for group in groups:
        mine = [c for c in cells if c.group == group]
        pre = [c for c in mine if c.key == BASELINE]
        for label, scheme, qk in schemes:
            theirs = [c for c in mine if c.key == (scheme, qk)]
            if (scheme, qk) != BASELINE and _losses(pre, BASELINE) \
                    and _losses(theirs, (scheme, qk)):
                out.append(compare(group, label, pre, theirs))
    for found, kept in zip(out, holm([f.p for f in out]), strict=True):
        found.holm = kept
    return out


def _tested(found: list[Found]) -> int:
    """How many comparisons Holm's correction counts: those the seeds' test has a p for."""
    return sum(f.p is not None for f in found)


def summary(cells: list[Cell], part: str = "first") -> list[str]:
    """What the verdicts of ``part`` show, scheme by scheme, with Holm's correction and the
    equivalence test (text.summary_lines)."""
    found = verdicts(cells, part)
    return summary_lines(found, PARTS[part][1], GROUPS) if found else ["Pending."]


def table(cells: list[Cell], schemes: list[tuple[str, str, bool]] = FIRST_SCHEMES,
          found: Sequence[Found] = (), tests: int = 0) -> list[str]:
    """One group's table; ``found``: its verdicts, from the part's ``tests`` comparisons."""
    lines = ["| scheme | seeds | test loss | test perplexity | minus Pre-LN (loss) | verdict "
             "(95% interval of the difference) | Holm over the part's "
             f"{tests} comparisons | equal within ± {MARGIN:g} nats (TOST) | last train loss | "
             "grad norm last/first, init | stream norm last/first, end | cos(in, out) mean, "
             "end | steps, stopped | training min |", "|" + "---|" * 14]
    by_name = {f.name: f for f in found}
    for label, scheme, qk in schemes:
        mine = [c for c in cells if c.key == (scheme, qk)]
        if not mine:
            lines.append(f"| {label} | 0 | pending |" + " |" * 11)
            continue
        losses = _losses(mine, (scheme, qk))
        diff, words, kept, equal = "–", "–", "–", "–"
        if label in by_name:
            one = by_name[label]
            diff, words, kept = f"{one.diff:+.3f}", verdict_cell(one), holm_cell(one)
            equal = f"{one.equal} (p = {short_p(one.equal_p)})" if one.equal_p is not None else "–"
        stops = sorted({f"{c.steps}, {c.stopped.split(':')[0]}" for c in mine})
        lines.append(
            f"| {label} | {len(mine)} | {_stat(losses)} | "
            f"{_stat([c.test_ppl for c in mine], 2)} | {diff} | {words} | {kept} | {equal} | "
            f"{_stat([c.train_loss for c in mine])} | "
            f"{_stat([c.ratio('grad_norm', 'init') for c in mine], 2)} | "
            f"{_stat([c.ratio('stream_norm', 'final') for c in mine], 2)} | "
            f"{_stat([c.mean('layer_cosine', 'final') for c in mine], 3)} | "
            f"{'; '.join(stops)} | {_stat([c.minutes for c in mine], 1)} |")
    return lines


def plot(cells: list[Cell]) -> dict[str, str]:
    plt = pyplot()
    figures = {}
    for part, (groups, schemes) in PARTS.items():
        labels = {(scheme, qk): label for label, scheme, qk in schemes}
        colours = {key: f"C{i}" for i, key in enumerate(labels)}
        for group in groups:
            mine = [c for c in cells if c.group == group and c.val]
            if not mine:
                continue
            fig, ax = plt.subplots(figsize=(6.5, 4))
            for c in mine:
                steps, values = zip(*c.val, strict=True)
                ax.plot(steps, values, color=colours.get(c.key, "k"),
                        linestyle=LINESTYLES.get(c.seed, "-."),
                        label=f"{labels.get(c.key, c.scheme)} seed {c.seed}")
            name = GROUPS.get(group, group)
            ax.set(xlabel="update", ylabel="validation loss (nats/token)",
                   title=f"Schemes in a Llama-style decoder: {name}")
            ax.legend(fontsize=6, ncol=2 if part == "second" else 1)
            fig.tight_layout()
            FIGURES.mkdir(parents=True, exist_ok=True)
            fig.savefig(FIGURES / f"val_loss_{group}.png", dpi=110)
            plt.close(fig)
            figures[f"Validation loss, {name}"] = f"study-llama/val_loss_{group}.png"
    return figures


def render(cells: list[Cell]) -> str:
    figures = plot(cells)
    first = [c for c in cells if c.group in DATASETS]
    second = [c for c in cells if c.group in GROUPS]
    lines = [
        "# Residual schemes in a Llama-style decoder", "",
        "*Generated by `python -m studies.llama.report` from the files the sweeps wrote "
        "(`docs/study-llama/data/`); do not edit by hand.*", "",
        *first_part(len(first), sum(c.minutes or 0.0 for c in first) / 60, SEEDS), "",
    ]
    found = verdicts(cells, "first")
    for name, (what, _) in DATASETS.items():
        lines += [f"## {name}", "", f"{what[0].upper()}{what[1:]}.", "",
                  *table([c for c in first if c.group == name], FIRST_SCHEMES,
                         [f for f in found if f.group == name], _tested(found)), ""]
    lines += ["## What the verdicts show", "", *summary(cells, "first"), ""]
    lines += [*second_part(len(second), sum(c.minutes or 0.0 for c in second) / 60), ""]
    found = verdicts(cells, "second")
    for group, name in GROUPS.items():
        lines += [f"## {name}", "", *table([c for c in second if c.group == group], SCHEMES,
                                           [f for f in found if f.group == group],
                                           _tested(found)), ""]
    lines += ["## What the second part's verdicts show", "", *summary(cells, "second"), ""]
    lines += ["## What each scheme costs per step", "", *cost_table(), ""]
    lines += ["## Plots", "", *[f"{caption} (seed 1 solid, 2 dashed, 3 dotted):\n\n"
                                f"![{caption}]({path})\n" for caption, path in figures.items()]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweeps", nargs="?", type=Path, default=ROOT / "runs" / "study-llama")
    parser.add_argument("--render-only", action="store_true",
                        help="render from docs/study-llama/data without reading the runs")
    args = parser.parse_args(argv)
    if not args.render_only:
        for dataset in DATASETS:
            copy_cells(args.sweeps / dataset, DATA / dataset, extra=("recipe.yaml",))
        for group, folder, _, _ in SWEEPS:
            copy_cells(args.sweeps / folder, DATA / group, extra=("recipe.yaml",))
    cells = load_cells()
    REPORT.write_text(render(cells), encoding="utf-8")
    print(f"wrote {REPORT} ({len(cells)} cells)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
