"""Residual schemes in a Llama-style decoder: docs/study-llama.md, from what the sweeps wrote.

    python benchmarks/study_llama.py [SWEEPS]      # default SWEEPS: runs/study-llama
    python benchmarks/study_llama.py --render-only

``recipes/studies/llama_schemes.yaml`` (``recipes/gpt_llama.yaml`` made small) is swept over
Pre-LN, Peri-LN, Mix-LN and DeepNorm, three seeds each, on the built-in corpus and on the German
side of Multi30k (the commands are in DATASETS: seeds 1 and 2 first, seed 3 added later from a
clone at the same commit, SEED_RUNS). **Collect** copies each finished cell's files into
``docs/study-llama/data/<dataset>/`` (``study_files.py``; cells already there and absent from
SWEEPS stay); **render** writes the report from those files alone, so every number in it is in
the repository.

Each scheme is judged against Pre-LN by :func:`normzoo.sweep.significance.judge` on the per-seed
test losses: a difference is *shown* only with three seeds a side or more and Welch's t-test
below 0.05, else at most *indicated*. The runs keep no per-token test losses, so it is called
with ``sentence_test=False``: the seeds' test decides alone, and the report says that the test
set's noise is not tested apart from it. Each verdict is its own test at 0.05; the report also
says which of the shown differences Holm's correction for the comparisons made together keeps.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from study_files import as_float, copy_cells, curve, mean_sd, pyplot, read_csv, read_json
from study_files import training_minutes as minutes_of

from normzoo.sweep import significance
from normzoo.sweep.significance import INDICATED, NOT_SHOWN, SHOWN, judge, welch_p

ALPHA, MIN_SEEDS = significance.ALPHA, significance.MIN_SEEDS

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "study-llama" / "data"
FIGURES = ROOT / "docs" / "study-llama"
REPORT = ROOT / "docs" / "study-llama.md"
RECIPE = "recipes/studies/llama_schemes.yaml"
STUDY_COMMIT = "0d0ecfe"  # the sweeps run from a clone at this commit
SEED_RUNS = (  # (--set seed=..., when and how): what ran, in order
    ("1,2", "seeds 1 and 2, the study as first run"),
    ("3", "seed 3, added on 2026-11-26 from a fresh clone at the same commit"),
)
SEEDS = tuple(seed for values, _ in SEED_RUNS for seed in values.split(","))
LINESTYLES = {"1": "-", "2": "--", "3": ":"}  # the plots' line for each seed
SCHEMES = {"pre": "Pre-LN", "peri": "Peri-LN", "mixln": "Mix-LN", "deepnorm": "DeepNorm"}
_SWEEP = (f"OMP_NUM_THREADS=1 normzoo sweep {RECIPE}")
_GRID = "--set seed={seeds} --set model.residual=pre,peri,mixln,deepnorm --diagnose"
_MULTI30K = ("data.source=files data.dir=../shared/data/multi30k data.train_split=train.de "
             "data.valid_split=val.de data.test_split=test2016.de data.tokenizer.vocab_size=4000")
DATASETS = {  # folder under runs/study-llama and docs/study-llama/data: (what, command with
    # {seeds} for each of SEED_RUNS)
    "builtin": ("the built-in corpus (20,000 generated sentences, 2,000-entry BPE)",
                f"{_SWEEP} {_GRID} --out runs/study-llama/builtin"),
    "multi30k-de": ("Multi30k's German side (29,000 sentences, 4,000-entry BPE; test2016)",
                    f"{_SWEEP} {_MULTI30K} {_GRID} --out runs/study-llama/multi30k-de"),
}


class Cell:
    """One finished run: its scheme and seed, how it ended, its test loss."""

    def __init__(self, dataset: str, folder: Path) -> None:
        record, summary = read_json(folder / "cell.json"), read_json(folder / "summary.json")
        self.dataset, self.name = dataset, folder.name
        self.scheme = str(record.get("model.residual", ""))
        self.seed = str(record.get("seed", "1"))
        self.status = record.get("status", "")
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

    def ratio(self, column: str, when: str) -> float | None:
        """``column`` after the last layer over after the first (decoder), at ``when``."""
        rows = [r for r in self.diagnose if r.get("when") == when]
        values = [as_float(r.get(column)) for r in sorted(rows, key=lambda r: int(r["layer"]))]
        if len(values) < 2 or values[0] in (None, 0.0) or values[-1] is None:
            return None
        return values[-1] / values[0]


def load_cells() -> list[Cell]:
    return [Cell(dataset, folder) for dataset in DATASETS if (DATA / dataset).is_dir()
            for folder in sorted((DATA / dataset).iterdir()) if (folder / "cell.json").is_file()]


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


def verdicts(cells: list[Cell]) -> list[tuple[str, str, str, str, float | None, float]]:
    """(dataset, scheme's label, direction, verdict, Welch p, mean test loss minus Pre-LN's) for
    every scheme against Pre-LN where both have a test loss."""
    out = []
    for dataset in DATASETS:
        mine = [c for c in cells if c.dataset == dataset and c.test_loss is not None]
        pre = [c.test_loss for c in mine if c.scheme == "pre"]
        for scheme, label in SCHEMES.items():
            losses = [c.test_loss for c in mine if c.scheme == scheme]
            if scheme != "pre" and pre and losses:
                out.append((dataset, label, *verdict(pre, losses),
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


def summary(cells: list[Cell]) -> list[str]:
    """What the verdicts show, dataset by dataset, and how many of the shown differences would
    stand if the comparisons were corrected for being made together (Holm)."""
    found = verdicts(cells)
    if not found:
        return ["Pending."]
    lines = []
    for dataset in DATASETS:
        mine = [f for f in found if f[0] == dataset]
        if not mine:
            continue
        parts = []
        for label in (SHOWN, INDICATED, NOT_SHOWN):
            for direction in ("lower test loss", "higher test loss"):
                names = [f"{name} ({diff:+.3f} nats, Welch p = {_p(p)})"
                         for _, name, d, v, p, diff in mine if (v, d) == (label, direction)]
                if names:
                    parts.append(f"{direction} than Pre-LN {label}: {', '.join(names)}")
        lines.append(f"- **{dataset}**: {'; '.join(parts)}.")
    tested = [f for f in found if f[4] is not None]
    shown = [f for f in tested if f[3] == SHOWN]
    if shown:
        kept = holm([f[4] for f in tested])
        survivors = [f"{f[1]} on {f[0]}" for f, k in zip(tested, kept, strict=True)
                     if k and f[3] == SHOWN]
        chance = 1 - (1 - ALPHA) ** len(tested)
        lines += ["", f"Each verdict is its own test at {ALPHA}. Were no scheme different from "
                  f"Pre-LN, at least one of these {len(tested)} comparisons would pass by "
                  f"chance about {chance:.0%} of the time (for independent tests); Holm's "
                  f"correction for making them together keeps {len(survivors)} of the "
                  f"{len(shown)} shown: {', '.join(survivors) or 'none'}."
                  + (" The others pass the rule's test on its own, not the correction."
                     if len(survivors) < len(shown) else "")]
    return lines


def table(cells: list[Cell]) -> list[str]:
    lines = ["| scheme | seeds | test loss | test perplexity | minus Pre-LN (loss) | verdict | "
             "last train loss | grad norm last/first, init | stream norm last/first, end | "
             "steps, stopped | training min |", "|" + "---|" * 11]
    pre = [c.test_loss for c in cells if c.scheme == "pre" and c.test_loss is not None]
    for scheme, label in SCHEMES.items():
        mine = [c for c in cells if c.scheme == scheme]
        if not mine:
            lines.append(f"| {label} | 0 | pending | | | | | | | | |")
            continue
        losses = [c.test_loss for c in mine if c.test_loss is not None]
        diff, words = "–", "–"
        if scheme != "pre" and losses and pre:
            diff = f"{statistics.fmean(losses) - statistics.fmean(pre):+.3f}"
            words = _words(*verdict(pre, losses))
        stops = sorted({f"{c.steps}, {c.stopped.split(':')[0]}" for c in mine})
        lines.append(
            f"| {label} | {len(mine)} | {_stat(losses)} | "
            f"{_stat([c.test_ppl for c in mine], 2)} | {diff} | {words} | "
            f"{_stat([c.train_loss for c in mine])} | "
            f"{_stat([c.ratio('grad_norm', 'init') for c in mine], 2)} | "
            f"{_stat([c.ratio('stream_norm', 'final') for c in mine], 2)} | "
            f"{'; '.join(stops)} | {_stat([c.minutes for c in mine], 1)} |")
    return lines


def plot(cells: list[Cell]) -> dict[str, str]:
    plt = pyplot()
    figures = {}
    for dataset in DATASETS:
        mine = [c for c in cells if c.dataset == dataset and c.val]
        if not mine:
            continue
        fig, ax = plt.subplots(figsize=(6.5, 4))
        colours = dict(zip(SCHEMES, ("C0", "C1", "C2", "C3"), strict=True))
        for c in mine:
            steps, values = zip(*c.val, strict=True)
            ax.plot(steps, values, color=colours.get(c.scheme, "k"),
                    linestyle=LINESTYLES.get(c.seed, "-."),
                    label=f"{SCHEMES.get(c.scheme, c.scheme)} seed {c.seed}")
        ax.set(xlabel="update", ylabel="validation loss (nats/token)",
               title=f"Schemes in a Llama-style decoder: {dataset}")
        ax.legend(fontsize=7)
        fig.tight_layout()
        FIGURES.mkdir(parents=True, exist_ok=True)
        fig.savefig(FIGURES / f"val_loss_{dataset}.png", dpi=110)
        plt.close(fig)
        figures[f"Validation loss, {dataset}"] = f"study-llama/val_loss_{dataset}.png"
    return figures


def commands(command: str) -> str:
    """The dataset's sweep command once for each of SEED_RUNS, in the order they ran."""
    return "\n".join(f"  # {when}\n  {command.replace('{seeds}', seeds)}"
                     for seeds, when in SEED_RUNS)


def render(cells: list[Cell]) -> str:
    figures = plot(cells)
    hours = sum(c.minutes or 0.0 for c in cells) / 60
    expected = len(SCHEMES) * len(SEEDS) * len(DATASETS)
    lines = [
        "# Residual schemes in a Llama-style decoder", "",
        "*Generated by `python benchmarks/study_llama.py` from the files the sweeps wrote "
        "(`docs/study-llama/data/`); do not edit by hand.*", "",
        "## How it was run", "",
        f"[`{RECIPE}`](../{RECIPE}) builds on [`recipes/gpt_llama.yaml`](../recipes/"
        "gpt_llama.yaml) (`base:`): a decoder with RMSNorm, rotary positions (base 10,000), "
        "grouped-query attention (4 query heads, 2 key/value heads), SwiGLU (352), no biases, "
        "unscaled embeddings, made small: d_model 128, 6 layers, 1.36M parameters; AdamW (0.9, "
        "0.95), weight decay 0.1, clipping at 1.0, a warm-up–stable–decay schedule (100 "
        "updates of warm-up to 1e-3, constant, then the last 20% decaying in 1-sqrt shape to "
        "0), about 2k tokens per update, 800 updates, validation every 200, the best "
        "checkpoint scored on the test split; bf16-mixed. `model.residual` is swept over "
        "Pre-LN, Peri-LN (Kim et al. 2025), Mix-LN (Li et al. 2024, the first 25% of layers "
        f"Post-LN) and DeepNorm (Wang et al. 2022), seeds {', '.join(SEEDS[:-1])} and "
        f"{SEEDS[-1]}. Diagnostics are those of `normzoo diagnose` on the decoder's layers.", "",
        *[f"- **{name}**: {what}.\n\n  ```bash\n{commands(command)}\n  ```\n"
          for name, (what, command) in DATASETS.items()],
        f"The sweeps run from a clone at commit `{STUDY_COMMIT}`, one torch thread, on a 2-core "
        "CPU (AMD EPYC; seed 3's family 25, model 17) shared with two other training "
        "processes; no GPU was lent. Seed 3 "
        "was added on 2026-11-26 from a fresh clone at the same commit, after a 150-update "
        "run of Pre-LN seed 1 on multi30k-de there (`trainer.max_steps=150 "
        "optim.decay_steps=1`: its first 149 updates follow the study's schedule) logged the "
        "same training losses as the committed cell at updates 49, 99 and 149, to every "
        f"digit. Cells: {len(cells)} of {expected}; {hours:.1f} h of training in all.", "",
        "Rule: each scheme is judged against Pre-LN on the per-seed test losses "
        "([`normzoo.sweep.significance`](../normzoo/sweep/significance.py)): a difference is "
        f"*shown* only with {MIN_SEEDS} seeds a side or more and Welch's t-test below {ALPHA}; "
        "with fewer seeds, at most *indicated*. The runs keep no per-token test losses, so no "
        "paired bootstrap tests the test set's noise apart from the seeds': the seeds' test "
        "decides alone. Lower is better. 800 updates at this size is a short-horizon "
        "comparison, not the papers' scale (they train 100M–7B models for billions of "
        "tokens): a verdict here says what these runs show, not how the schemes rank at "
        "scale.", "",
    ]
    for name, (what, _) in DATASETS.items():
        lines += [f"## {name}", "", f"{what[0].upper()}{what[1:]}.", "",
                  *table([c for c in cells if c.dataset == name]), ""]
    lines += ["## What the verdicts show", "", *summary(cells), ""]
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
    cells = load_cells()
    REPORT.write_text(render(cells), encoding="utf-8")
    print(f"wrote {REPORT} ({len(cells)} cells)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
