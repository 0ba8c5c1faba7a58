"""Residual schemes in a Llama-style decoder: docs/study-llama.md, from what the sweeps wrote.

    python benchmarks/study_llama.py [SWEEPS]      # default SWEEPS: runs/study-llama
    python benchmarks/study_llama.py --render-only

``recipes/studies/llama_schemes.yaml`` (``recipes/gpt_llama.yaml`` made small) is swept over
Pre-LN, Peri-LN, Mix-LN and DeepNorm, two seeds each, on the built-in corpus and on the German
side of Multi30k (the commands are in COMMANDS). **Collect** copies each finished cell's files
into ``docs/study-llama/data/<dataset>/`` (``study_files.py``); **render** writes the report from
those files alone, so every number in it is in the repository.

A scheme is said to differ from Pre-LN only where the means of the two differ by more than
twice the larger standard deviation over seeds of the two (SPREADS); the runs keep no per-token
test losses, so no p-value is given, and two seeds make that spread a rough one (the report says
so).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from study_files import as_float, copy_cells, curve, mean_sd, pyplot, read_csv, read_json
from study_files import training_minutes as minutes_of

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "study-llama" / "data"
FIGURES = ROOT / "docs" / "study-llama"
REPORT = ROOT / "docs" / "study-llama.md"
RECIPE = "recipes/studies/llama_schemes.yaml"
STUDY_COMMIT = "0d0ecfe"  # the sweeps run from a clone at this commit
SPREADS = 2.0  # a difference must exceed this many of the larger standard deviation over seeds
SCHEMES = {"pre": "Pre-LN", "peri": "Peri-LN", "mixln": "Mix-LN", "deepnorm": "DeepNorm"}
_SWEEP = (f"OMP_NUM_THREADS=1 normzoo sweep {RECIPE}")
_GRID = "--set seed=1,2 --set model.residual=pre,peri,mixln,deepnorm --diagnose"
_MULTI30K = ("data.source=files data.dir=../shared/data/multi30k data.train_split=train.de "
             "data.valid_split=val.de data.test_split=test2016.de data.tokenizer.vocab_size=4000")
DATASETS = {  # folder under runs/study-llama and docs/study-llama/data: (what, command)
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
        diff, verdict = "–", "–"
        if scheme != "pre" and losses and pre:
            delta = mean_sd(losses)[0] - mean_sd(pre)[0]
            spread = max(mean_sd(losses)[1], mean_sd(pre)[1])
            diff = f"{delta:+.3f}"
            verdict = (("better" if delta < 0 else "worse") if abs(delta) > SPREADS * spread
                       else "within the seeds' spread")
        stops = sorted({f"{c.steps}, {c.stopped.split(':')[0]}" for c in mine})
        lines.append(
            f"| {label} | {len(mine)} | {_stat(losses)} | "
            f"{_stat([c.test_ppl for c in mine], 2)} | {diff} | {verdict} | "
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
                    linestyle="-" if c.seed == "1" else "--",
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


def render(cells: list[Cell]) -> str:
    figures = plot(cells)
    hours = sum(c.minutes or 0.0 for c in cells) / 60
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
        "Post-LN) and DeepNorm (Wang et al. 2022), two seeds each. Diagnostics are those of "
        "`normzoo diagnose` on the decoder's layers.", "",
        *[f"- **{name}**: {what}.\n\n  ```bash\n  {command}\n  ```\n"
          for name, (what, command) in DATASETS.items()],
        f"The sweeps run from a clone at commit `{STUDY_COMMIT}`, one torch thread, on a 2-core "
        "CPU (AMD EPYC) shared with the depth study's two processes; no GPU was lent. "
        f"Cells: {len(cells)} of {4 * 2 * len(DATASETS)}; {hours:.1f} h of training in all.", "",
        "Rule: a scheme is *better* or *worse* than Pre-LN only where the means of their test "
        "losses differ by more than twice the larger standard deviation over seeds of the two. "
        "Two seeds make that spread rough, and the runs keep no per-token test losses, so no "
        "p-value is given; 800 updates at this size is a short-horizon comparison, not the "
        "papers' scale (they train 100M–7B models for billions of tokens).", "",
    ]
    for name, (what, _) in DATASETS.items():
        lines += [f"## {name}", "", f"{what[0].upper()}{what[1:]}.", "",
                  *table([c for c in cells if c.dataset == name]), ""]
    lines += ["## Plots", "", *[f"{caption}:\n\n![{caption}]({path})\n"
                                for caption, path in figures.items()]]
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
