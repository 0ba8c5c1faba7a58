"""The precision study's report: docs/precision.md and its plots, from what the sweeps wrote.

    python -m studies.precision.report [SWEEPS]     # default SWEEPS: runs/study-precision
    python -m studies.precision.report --render-only

Does bf16-mixed training move what normzoo reports? The depth study's recipe
(``recipes/studies/multi30k_depth.yaml``) is trained in ``32-true`` and in ``bf16-mixed``,
Post-LN and Pre-LN, at 6+6 layers with three seeds (``shallow``) and at 18+18 with one
(``deep``). **Collect** copies each cell's ``summary.json``, ``cell.json`` and the loss columns
of its ``metrics.csv`` into ``docs/precision/data/``; **render** writes the report from those
files alone, so every number in it is in the repository. Cells not yet run show as pending.
The sweeps are ``plan.py``'s, the verdicts ``verdicts.py``'s
and the figure ``plots.py``'s.

These are the short protocol's runs (the recipe's 1,000 updates, a 200-step warm-up, cosine
decay): what bf16-mixed does over a short, fixed run, not at convergence.

Both precisions ran the same seeds, so each reading's verdict is
:func:`normzoo.sweep.significance.judge` with the paired t-test, fp32 against bf16-mixed; BLEU is
at most *indicated*, since its sentence-level test (the hierarchical bootstrap) needs the test
translations the cells did not keep, and the validation loss (no per-sentence values) is judged
by the seeds' test alone. Every verdict carries the 95% interval of the difference, "equal" is
said only by the equivalence test (TOST) against stated margins, and a column says whether Holm's
correction over the table's tests keeps each verdict (``verdicts.py``). At 18+18
there is one seed a precision: at most indicated, and without a sentence-level test nothing, and
where a scheme fails in both precisions (BLEU under FAILED_BLEU) no precision effect can be seen
at all; the report says so rather than reading those cells against the 6+6 spread.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from ..sweep_files import as_float, copy_cells, curve, fmt, read_csv, training_minutes
from .plan import COMMANDS, DEPTH, PRECISIONS, RECIPE, SCHEMES, SEEDS, STUDIES
from .plots import plot_losses
from .verdicts import (
    BLEU_MARGIN,
    LOSS_MARGIN,
    _ms,
    comparisons,
    deep_text,
    findings,
    group,
    table_lines,
)

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "precision" / "data"
FIGURES = ROOT / "docs" / "precision"
REPORT = ROOT / "docs" / "precision.md"


# -- collect ----------------------------------------------------------------------------------
def collect(sweeps: Path) -> None:
    """Copy what the report reads from each sweep folder into ``docs/precision/data``."""
    for study in STUDIES:
        copy_cells(sweeps / study, DATA / study)


# -- the cells --------------------------------------------------------------------------------
class Cell:
    """One finished run: its study, scheme, precision, seed and what it measured."""

    def __init__(self, study: str, folder: Path) -> None:
        record = json.loads((folder / "cell.json").read_text(encoding="utf-8"))
        summary_path = folder / "summary.json"
        summary = (json.loads(summary_path.read_text(encoding="utf-8"))
                   if summary_path.is_file() else {})
        self.study, self.folder = study, folder
        self.scheme = record.get("model.residual", "")
        self.precision = record.get("trainer.precision", "")
        self.seed = record.get("seed", "1")
        self.status = record.get("status", "")
        self.bleu = _float(record.get("test_bleu"))
        # The lowest validation loss the run logged (the checkpoint the test scores);
        # cell.json's metric_value is the last validation's.
        validations = [v for _, v in self.losses("val_loss")]
        self.best_val = min(validations) if validations else _float(record.get("metric_value"))
        self.final_train = _float(record.get("final_train_loss"))
        self.steps = record.get("steps")
        self.wall_min = (summary["total_wall_s"] / 60 if "total_wall_s" in summary else None)
        self.train_min, self.processes = self._training_minutes()
        test = summary.get("test", {})
        self.greedy = _float(test.get("greedy_bleu"))
        self.signature = test.get("signature", "")
        machine = summary.get("machine")  # the device kind, where the run recorded it
        self.device = str(machine.get("device") or "") if isinstance(machine, dict) else ""

    def losses(self, column: str) -> list[tuple[int, float]]:
        return curve(read_csv(self.folder / "loss.csv"), column)

    def _training_minutes(self) -> tuple[float | None, int]:
        return training_minutes(read_csv(self.folder / "loss.csv"))


_float = as_float


def load_cells() -> list[Cell]:
    return [Cell(study, folder) for study in STUDIES if (DATA / study).is_dir()
            for folder in sorted((DATA / study).iterdir()) if (folder / "cell.json").is_file()]




# -- render -----------------------------------------------------------------------------------
def results_table(cells: list[Cell], study: str) -> list[str]:
    lines = ["| scheme | precision | seeds | test2016 BLEU (beam 5) | greedy BLEU | best val "
             "loss | final train loss | training per cell (min) |",
             "|---|---|---|---|---|---|---|---|"]
    for scheme, name in SCHEMES.items():
        for precision, label in PRECISIONS.items():
            group_ = group(cells, study, scheme, precision)
            seeds = ", ".join(c.seed for c in group_) or "pending"
            statuses = {c.status for c in group_} - {"ok"}
            if statuses:
                seeds += f" ({', '.join(sorted(statuses))})"
            lines.append(
                f"| {name} | {label} | {seeds} | "
                f"{_ms([c.bleu for c in group_ if c.bleu is not None])} | "
                f"{_ms([c.greedy for c in group_ if c.greedy is not None])} | "
                f"{_ms([c.best_val for c in group_ if c.best_val is not None], 3)} | "
                f"{_ms([c.final_train for c in group_ if c.final_train is not None], 3)} | "
                f"{_ms([c.train_min for c in group_ if c.train_min is not None], 1)} |")
    return lines


def per_cell_table(cells: list[Cell]) -> list[str]:
    lines = ["| depth | scheme | precision | seed | status | steps | BLEU | best val loss | "
             "training (min) | processes |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in sorted(cells, key=lambda c: (c.study, c.scheme, c.seed, c.precision)):
        figures = [fmt(value, digits, "pending")
                   for value, digits in ((c.bleu, 2), (c.best_val, 3), (c.train_min, 1))]
        lines.append(f"| {DEPTH[c.study]} | {SCHEMES.get(c.scheme, c.scheme)} | "
                     f"{PRECISIONS.get(c.precision, c.precision)} | {c.seed} | {c.status} | "
                     f"{c.steps} | " + " | ".join(figures) + f" | {c.processes} |")
    return lines


def speed_lines(cells: list[Cell]) -> list[str]:
    lines = []
    for study in STUDIES:
        times = {p: [c.train_min for c in cells if c.study == study and c.precision == p
                     and c.train_min is not None] for p in PRECISIONS}
        if all(times.values()):
            fp32, bf16 = (statistics.mean(times[p]) for p in PRECISIONS)
            lines.append(f"- {DEPTH[study]}: {fp32:.1f} min of training per cell in fp32 and "
                         f"{bf16:.1f} min in bf16-mixed on average: {fp32 / bf16:.2f}x.")
    return lines or ["- pending."]


RESULTS = ROOT / "benchmarks" / "results"


def benchmark_lines() -> list[str]:
    """The step throughput and decoding measured by ``benchmarks/precision.py`` (its committed
    JSON files), so this page holds speed and quality together."""
    lines = []
    speed = RESULTS / "precision-cpu.json"
    if speed.is_file():
        data = json.loads(speed.read_text(encoding="utf-8"))
        s, tps = data["summary"], data["summary"]["tokens_per_s"]
        lines += [f"- Training through `normzoo train` (`python benchmarks/precision.py`, "
                  f"{data['steps']} steps, one thread, {len(s['ratios'])} pairs taking "
                  f"turns, on {data['machine']['cpu']}, {data['machine']['date'][:10]}): "
                  f"bf16-mixed {tps['bf16-mixed']:,.0f} against fp32 "
                  f"{tps['32-true']:,.0f} target tokens/s, **{s['ratio_median']:.2f}x** "
                  f"(pairs {s['ratio_min']:.2f}-{s['ratio_max']:.2f}); validation loss at the "
                  f"last step {s['val_loss_diff_pct']:+.2f}% "
                  f"([details](../benchmarks/results/precision-cpu.md))."]
    decode = RESULTS / "precision-decode-cpu.json"
    if decode.is_file():
        data = json.loads(decode.read_text(encoding="utf-8"))
        checkpoint = data["checkpoint"]
        checkpoint = checkpoint[checkpoint.find("runs/"):] if "runs/" in checkpoint else checkpoint
        lines += [f"- Decoding test2016 with `normzoo evaluate --bf16` "
                  f"(`python benchmarks/precision.py --decode CKPT`, `{checkpoint}`; each "
                  "command's wall time, start-up included):"]
        for row in data["rows"]:
            if row["precision"] != "bf16":
                continue
            fp32 = next(r for r in data["rows"] if r["beam"] == row["beam"]
                        and r["precision"] == "fp32")
            lines.append(f"  beam {row['beam']}: BLEU {row['bleu']:.2f} against fp32's "
                         f"{fp32['bleu']:.2f}, {row['differing_sentences']} of 1,000 sentences "
                         f"translated differently, {row['wall_s']:.0f} s against "
                         f"{fp32['wall_s']:.0f} s.")
    return lines or ["- Not measured yet (`python benchmarks/precision.py`)."]


def render(cells: list[Cell]) -> str:
    expected = sum(len(SEEDS[s]) * len(SCHEMES) * len(PRECISIONS) for s in STUDIES)
    rows = comparisons(cells)
    steps = sorted({int(c.steps) for c in cells if c.steps})
    updates = " or ".join(f"{n:,} updates" for n in steps) or "1,000 updates"
    _, conclusion, summary = findings(rows, updates)
    tests = sum(r["seed_p"] is not None for r in rows)
    equal_tests = sum(r["equivalence_p"] is not None for r in rows)
    signature = next((c.signature for c in cells if c.signature), "")
    plot = plot_losses(cells, FIGURES)
    lines = [
        "# bf16-mixed against fp32: does the precision move normzoo's readings?", "",
        "*Generated by `python -m studies.precision.report` from the files the sweeps wrote "
        "(`docs/precision/data/`); do not edit by hand.*", "",
        summary, "",
        "## How it was run", "",
        f"The short protocol's recipe, [`{RECIPE}`](../{RECIPE}) (the first depth study's, which"
        " the depth study has since left for the papers' protocol: Multi30k En→De, d_model 128,"
        " 4 heads, FFN 512, dropout 0.1, a joint 6,000-entry BPE, batches of up to 2,048 "
        "tokens, AdamW at peak 1e-3 with a 200-step warm-up and a cosine decay, no clipping, "
        "1,000 steps, label smoothing 0.1, the best validation loss scored on test2016 with "
        "beam 5), trained once with `trainer.precision=32-true` and once with `bf16-mixed`: "
        "Post-LN and Pre-LN at 6+6 layers with seeds 1, 2 and 3, and at 18+18 layers with seed "
        "1. Within a seed both precisions see the same batches in the same order and start from"
        " the same weights. Decoding for the test runs in float32 in every cell, so BLEU "
        "measures what training in bf16 did to the weights.", "",
        *[f"```bash\n{COMMANDS[s]}\n```\n" for s in STUDIES],
        "Machine: a 2-core AMD EPYC (Zen 4, `avx512_bf16`), no GPU (the throughput benchmark "
        "below names the machine it last ran on); each sweep one torch "
        "thread, the two side by side. bf16-mixed is torch's CPU autocast with normzoo's "
        "explicit attention path, blocked cross-entropy and CPU dropout "
        "([benchmarks/results/precision-cpu.md](../benchmarks/results/precision-cpu.md)); "
        "norm statistics in float32.", "",
        f"Cells: {len(cells)} of {expected}." + (f" sacreBLEU: `{signature}`" if signature
                                                  else ""), "",
        "## Verdict", "",
        "Rule ([`normzoo.sweep.significance`](../normzoo/sweep/significance.py)): both "
        "precisions ran the same seeds, so the seeds' test is the **paired t-test**, seed with "
        "seed; a precision effect is *shown* only with three seeds a side or more, the paired "
        "t-test below 0.05 and, for BLEU, the sentence-level test (the hierarchical bootstrap "
        "of the runs' translations, seeds then sentences) below 0.05 too; otherwise it is at "
        "most *indicated*, and runs on more than one device kind are at most indicated. These "
        "cells kept no test translations, so no bootstrap could be run: a BLEU difference can "
        "be at most indicated here, and the validation loss (no per-sentence values) is judged "
        "by the seeds' test alone. The precisions are not held against the verdict: the "
        "precision is the factor compared.", "",
        "A *not shown* is not \"no difference\": each row gives the 95% interval of bf16 minus "
        "fp32 by the paired t-test, what the seeds leave open. Only the equivalence test (two "
        f"one-sided paired t-tests, TOST) says \"equal\", within a margin: ± {BLEU_MARGIN:.1f} "
        "BLEU (under the ± 1.57 BLEU within which test2016 itself places one run's score) and "
        f"± {LOSS_MARGIN:.2f} nats for the loss (a 2% change of perplexity, about the seeds' "
        "spread of Pre-LN 6+6's validation loss). Each verdict is its own test at 0.05; the "
        f"last column says whether Holm's correction over the table's {tests} difference "
        f"tests (and, apart, its {equal_tests} equivalence tests) keeps it. At 18+18 there is "
        "one seed a precision, which allows at most *indicated*.", "",
        *table_lines(rows), "", conclusion, "", deep_text(cells)
        + " The depth study's report names each cell's precision, and its verdict never calls a "
        "difference between runs of different precisions shown.", "",
        "## Results", "",
        "### 6+6 layers (seeds 1-3; mean ± standard deviation over seeds)", "",
        *results_table(cells, "shallow"), "",
        "### 18+18 layers (seed 1)", "",
        *results_table(cells, "deep"), "",
        "### Every cell", "",
        *per_cell_table(cells), "",
        "### Time", "",
        *speed_lines(cells), "",
        *benchmark_lines(), "",
        "Training time is Lightning's `ThroughputMonitor` clock (validation and start-up left "
        "out), summed over the processes of a cell that was stopped and resumed; one thread, "
        "with the other sweep on the other core. The throughput on an otherwise idle machine is "
        "in "
        "[benchmarks/results/precision-cpu.md](../benchmarks/results/precision-cpu.md).", "",
    ]
    if plot:
        lines += ["## Loss curves", "",
                  "Training loss (each point the mean of four logged batches, thin lines, one "
                  "per seed) and validation loss (dots; no dropout or label smoothing) by "
                  "precision:", "", f"![loss curves]({plot})", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="?", type=Path, default=ROOT / "runs" / "study-precision")
    parser.add_argument("--render-only", action="store_true",
                        help="render from docs/precision/data without collecting")
    args = parser.parse_args(argv)
    if not args.render_only:
        collect(args.sweeps)
    cells = load_cells()
    REPORT.write_text(render(cells), encoding="utf-8")
    print(f"{REPORT.relative_to(ROOT)}: {len(cells)} cells", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
