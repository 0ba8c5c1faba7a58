"""Residual schemes in a Llama-style decoder: docs/study-llama.md, from what the sweeps wrote.

    python benchmarks/study_llama.py [SWEEPS]      # default SWEEPS: runs/study-llama
    python benchmarks/study_llama.py --render-only

``recipes/studies/llama_schemes.yaml`` (``recipes/gpt_llama.yaml`` made small) is swept in two
parts (``study_llama_plan.py``): first Pre-LN, Peri-LN, Mix-LN and DeepNorm at 6 layers on the
built-in corpus and on the German side of Multi30k; then the contract's new schemes (Pre-LN,
+QK-norm, LNS, Peri-LN, HC, mHC, nGPT) at 6 and 12 layers on the German side of Multi30k; three
seeds a cell. **Collect** copies each finished cell's files into ``docs/study-llama/data/<group>/``
(``study_files.py``; cells already there and absent from the sweeps stay); **render** writes
the report from those files alone, so every number in it is in the repository.

Each scheme is judged against Pre-LN of its group by :func:`normzoo.sweep.significance.judge` on
the per-seed test losses: a difference is *shown* only with three seeds a side or more and
Welch's t-test below 0.05, else at most *indicated*. The runs keep no per-token test losses, so it
is called with ``sentence_test=False``: the seeds' test decides alone, and the report says that
the test set's noise is not tested apart from it. Each verdict is its own test at 0.05; the
report also says which of the shown differences Holm's correction for the comparisons of a part
made together keeps.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import yaml
from study_files import as_float, copy_cells, curve, mean_sd, pyplot, read_csv, read_json
from study_files import training_minutes as minutes_of
from study_llama_plan import DATASETS, GROUPS, SCHEMES, SEED_RUNS, SWEEPS
from study_llama_text import cost_table, first_part, second_part

from normzoo.sweep import significance
from normzoo.sweep.significance import INDICATED, NOT_SHOWN, SHOWN, judge, welch_p

ALPHA, MIN_SEEDS = significance.ALPHA, significance.MIN_SEEDS

ROOT = Path(__file__).resolve().parent.parent
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


def _p(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}" if value >= 1e-3 else f"{value:.1e}"


def verdict(pre: list[float], losses: list[float]) -> tuple[str, str, float | None]:
    """The verdict on a scheme's per-seed test losses against Pre-LN's: lower or higher test
    loss, judge's label (shown / indicated / not shown) and Welch's p."""
    found = judge(pre, losses, None, sentence_test=False)
    direction = ("lower test loss" if statistics.fmean(losses) < statistics.fmean(pre)
                 else "higher test loss")
    return direction, found.label, welch_p(pre, losses)


def _words(direction: str, label: str, p: float | None) -> str:
    return f"{direction}: {'**' + label + '**' if label == SHOWN else label} (Welch p = {_p(p)})"


def _losses(cells: list[Cell], key: tuple[str, bool]) -> list[float]:
    return [c.test_loss for c in cells if c.key == key and c.test_loss is not None]


def verdicts(cells: list[Cell], part: str = "first"
             ) -> list[tuple[str, str, str, str, float | None, float]]:
    """(group, scheme's label, direction, verdict, Welch p, mean test loss minus Pre-LN's) for
    every scheme of ``part`` against its group's Pre-LN where both have a test loss."""
    groups, schemes = PARTS[part]
    out = []
    for group in groups:
        mine = [c for c in cells if c.group == group]
        pre = _losses(mine, BASELINE)
        for label, scheme, qk in schemes:
            losses = _losses(mine, (scheme, qk))
            if (scheme, qk) != BASELINE and pre and losses:
                out.append((group, label, *verdict(pre, losses),
                            statistics.fmean(losses) - statistics.fmean(pre)))
    return out


def holm(p_values: list[float], alpha: float = ALPHA) -> list[bool]:
    """Which of ``p_values`` Holm's step-down correction keeps below ``alpha`` when all of them
    are tested at once."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    kept = [False] * len(p_values)
    for rank, i in enumerate(order):
        if p_values[i] >= alpha / (len(p_values) - rank):
            break
        kept[i] = True
    return kept


def summary(cells: list[Cell], part: str = "first") -> list[str]:
    """What the verdicts of ``part`` show, group by group, and how many of the shown
    differences would stand were the comparisons corrected for being made together (Holm)."""
    found = verdicts(cells, part)
    if not found:
        return ["Pending."]
    lines = []
    for group in PARTS[part][0]:
        mine = [f for f in found if f[0] == group]
        parts = []
        for label in (SHOWN, INDICATED, NOT_SHOWN):
            for direction in ("lower test loss", "higher test loss"):
                names = [f"{name} ({diff:+.3f} nats, Welch p = {_p(p)})"
                         for _, name, d, v, p, diff in mine if (v, d) == (label, direction)]
                if names:
                    parts.append(f"{direction} than Pre-LN {label}: {', '.join(names)}")
        if parts:
            lines.append(f"- **{GROUPS.get(group, group)}**: {'; '.join(parts)}.")
    tested = [f for f in found if f[4] is not None]
    shown = [f for f in tested if f[3] == SHOWN]
    if shown:
        kept = holm([f[4] for f in tested])
        survivors = [f"{f[1]} on {GROUPS.get(f[0], f[0])}"
                     for f, k in zip(tested, kept, strict=True) if k and f[3] == SHOWN]
        chance = 1 - (1 - ALPHA) ** len(tested)
        lines += ["", f"Each verdict is its own test at {ALPHA}. Were no scheme different from "
                  f"Pre-LN, at least one of these {len(tested)} comparisons would pass by "
                  f"chance about {chance:.0%} of the time (for independent tests); Holm's "
                  f"correction for making them together keeps {len(survivors)} of the "
                  f"{len(shown)} shown: {', '.join(survivors) or 'none'}."
                  + (" The others pass the rule's test on its own, not the correction."
                     if len(survivors) < len(shown) else "")]
    return lines


def table(cells: list[Cell], schemes: list[tuple[str, str, bool]] = FIRST_SCHEMES
          ) -> list[str]:
    lines = ["| scheme | seeds | test loss | test perplexity | minus Pre-LN (loss) | verdict | "
             "last train loss | grad norm last/first, init | stream norm last/first, end | "
             "cos(in, out) mean, end | steps, stopped | training min |", "|" + "---|" * 12]
    pre = _losses(cells, BASELINE)
    for label, scheme, qk in schemes:
        mine = [c for c in cells if c.key == (scheme, qk)]
        if not mine:
            lines.append(f"| {label} | 0 | pending | | | | | | | | | |")
            continue
        losses = _losses(mine, (scheme, qk))
        diff, words = "–", "–"
        if (scheme, qk) != BASELINE and losses and pre:
            diff = f"{statistics.fmean(losses) - statistics.fmean(pre):+.3f}"
            words = _words(*verdict(pre, losses))
        stops = sorted({f"{c.steps}, {c.stopped.split(':')[0]}" for c in mine})
        lines.append(
            f"| {label} | {len(mine)} | {_stat(losses)} | "
            f"{_stat([c.test_ppl for c in mine], 2)} | {diff} | {words} | "
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
        "*Generated by `python benchmarks/study_llama.py` from the files the sweeps wrote "
        "(`docs/study-llama/data/`); do not edit by hand.*", "",
        *first_part(len(first), sum(c.minutes or 0.0 for c in first) / 60, SEEDS), "",
    ]
    for name, (what, _) in DATASETS.items():
        lines += [f"## {name}", "", f"{what[0].upper()}{what[1:]}.", "",
                  *table([c for c in first if c.group == name]), ""]
    lines += ["## What the verdicts show", "", *summary(cells, "first"), ""]
    lines += [*second_part(len(second), sum(c.minutes or 0.0 for c in second) / 60), ""]
    for group, name in GROUPS.items():
        lines += [f"## {name}", "", *table([c for c in second if c.group == group], SCHEMES),
                  ""]
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
