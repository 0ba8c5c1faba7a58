"""The Llama-style decoder study's text: how each part ran, the rule, the words of a verdict, the
summary of a part's verdicts and the cost table, which ``studies/llama/report.py`` puts around its
tables."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from normzoo.sweep import significance
from normzoo.sweep.significance import INDICATED, SHOWN

from .plan import (
    DATASETS,
    DEPTHS,
    FIRST_COMMIT,
    RECIPE,
    SCHEMES,
    SCHEMES_COMMIT,
    SEED_RUNS,
    SWEEPS,
    command,
)

# Equal within ± MARGIN nats/token (TOST) is the only "no difference" the page says: e^0.02 is
# about 2% in perplexity, smaller than every difference the page shows (the smallest, +0.026).
MARGIN = 0.02

ROOT = Path(__file__).resolve().parents[2]
COSTS = ROOT / "benchmarks" / "results" / "scheme_cost-cpu.json"
_MODEL = (f"[`{RECIPE}`](../{RECIPE}) builds on [`recipes/gpt_llama.yaml`](../recipes/"
          "gpt_llama.yaml) (`base:`): a decoder with RMSNorm, rotary positions (base 10,000), "
          "grouped-query attention (4 query heads, 2 key/value heads), SwiGLU (352), no biases, "
          "unscaled embeddings, made small: d_model 128, 6 layers, 1.36M parameters; AdamW (0.9, "
          "0.95), weight decay 0.1, clipping at 1.0, a warm-up–stable–decay schedule (100 "
          "updates of warm-up to 1e-3, constant, then the last 20% decaying in 1-sqrt shape to "
          "0), about 2k tokens per update, 800 updates, validation every 200, the best "
          "checkpoint scored on the test split; bf16-mixed.")
_RULE = ("Rule: each scheme is judged against Pre-LN on the per-seed test losses "
         "([`normzoo.sweep.significance`](../normzoo/sweep/significance.py)). Every scheme "
         "ran Pre-LN's seeds, and a seed fixes the order the data comes in under every "
         "scheme, so the seeds' test is the paired t-test, seed with seed (Welch's only "
         "where the seeds differ), as `normzoo compare` pairs them. A difference is *shown* "
         f"only with {significance.MIN_SEEDS} seeds a side or more, one precision and one "
         "device kind as the runs recorded them, and that test below "
         f"{significance.ALPHA}; otherwise at most *indicated*. The runs keep no per-token "
         "test losses, so no paired bootstrap tests the test set's noise apart from the "
         "seeds': the seeds' test decides alone. Each verdict gives the 95% interval of the "
         "difference (the scheme's mean test loss minus Pre-LN's): a *not shown* is not \"no "
         "difference\", the interval is what the seeds leave open. Only the equivalence test "
         "(two one-sided t-tests of the same kind, TOST) says two schemes are equal, within "
         f"± {MARGIN:g} nats/token (about 2% in perplexity, smaller than every difference "
         "shown here), under the same rule. Each verdict is its own test at "
         f"{significance.ALPHA}; the Holm column says whether Holm's correction over the "
         "part's comparisons made together keeps it, and only what it keeps is in bold. 800 "
         "updates at this size is a short-horizon comparison, not the papers' scale (they "
         "train 100M–7B models for billions of tokens): a verdict here says what these runs "
         "show, not how the schemes rank at scale.")


def short_p(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}" if value >= 1e-3 else f"{value:.1e}"


def _interval(found) -> str:
    if found.interval is None:
        return "no interval (fewer than two seeds a side, or no spread)"
    return f"95% interval {found.interval[0]:+.3f} to {found.interval[1]:+.3f}"


def _test(found) -> str:
    return f"{'paired t' if found.paired else 'Welch'} p = {short_p(found.p)}"


def verdict_cell(found) -> str:
    """A verdict in a table's row: bold only where shown and kept by Holm's correction."""
    label = f"**{found.label}**" if found.label == SHOWN and found.holm else found.label
    return f"{found.direction}: {label} ({_test(found)}; {_interval(found)})"


def holm_cell(found) -> str:
    """Whether Holm's correction keeps a shown verdict; nothing to keep otherwise."""
    return ("kept" if found.holm else "not kept") if found.label == SHOWN else "–"


def _said(found) -> str:
    """A verdict in a sentence, with the seeds' test, the interval and, where no difference is
    shown, the equivalence test."""
    label = (f"**{SHOWN}**, kept by Holm" if found.holm else
             f"{SHOWN} on its own test, not kept by Holm") if found.label == SHOWN else \
        found.label
    equal = (f"; equal within ± {MARGIN:g} nats: {found.equal}, TOST p = "
             f"{short_p(found.equal_p)}" if found.label != SHOWN and found.equal_p is not None
             else "")
    return (f"{found.direction} {label} ({found.diff:+.3f} nats, {_interval(found)}, "
            f"{_test(found)}{equal})")


def summary_lines(found: list, schemes: list[tuple[str, str, bool]],
                  groups: dict[str, str]) -> list[str]:
    """A part's verdicts scheme by scheme across its groups, then what Holm's correction keeps
    and what the equivalence test finds."""
    lines = []
    for name, _, _ in schemes:
        mine = [f for f in found if f.name == name]
        if mine:
            lines.append(f"- **{name}** against Pre-LN: " + "; ".join(
                f"{groups.get(f.group, f.group)}: {_said(f)}" for f in mine) + ".")
    tested = [f for f in found if f.p is not None]
    shown = [f for f in tested if f.label == SHOWN]
    dropped = [f"{f.name} on {groups.get(f.group, f.group)}" for f in shown if not f.holm]
    equal = [f"{f.name} on {groups.get(f.group, f.group)}" for f in found
             if f.equal in (SHOWN, INDICATED)]
    chance = 1 - (1 - significance.ALPHA) ** len(tested)
    lines += ["", f"Each verdict is its own test at {significance.ALPHA}. Were no scheme "
              f"different from Pre-LN, at least one of these {len(tested)} comparisons would "
              f"pass by chance about {chance:.0%} of the time (for independent tests); Holm's "
              f"correction for making them together keeps {len(shown) - len(dropped)} of the "
              f"{len(shown)} shown" + (f"; it does not keep {', '.join(dropped)}, shown on "
                                       "its own test only." if dropped else ".")]
    lines += ["", f"Equal to Pre-LN within ± {MARGIN:g} nats/token (TOST): "
              + (", ".join(equal) if equal else "none") + ". A *not shown* is not \"no "
              "difference\": its 95% interval is the difference these seeds leave open."]
    return lines


def _commands(command_text: str) -> str:
    """A first-part sweep command once for each of SEED_RUNS, in the order they ran."""
    return "\n".join(f"  # {when}\n  {command_text.replace('{seeds}', seeds)}"
                     for seeds, when in SEED_RUNS)


def first_part(cells: int, hours: float, seeds: tuple[str, ...]) -> list[str]:
    """The first part's "How it was run"."""
    expected = 4 * len(seeds) * len(DATASETS)
    return [
        "## How it was run", "",
        f"{_MODEL} `model.residual` is swept over Pre-LN, Peri-LN (Kim et al. 2025), Mix-LN (Li "
        "et al. 2024, the first 25% of layers Post-LN) and DeepNorm (Wang et al. 2022), seeds "
        f"{', '.join(seeds[:-1])} and {seeds[-1]}. Diagnostics are those of `normzoo diagnose` "
        "on the decoder's layers.", "",
        *[f"- **{name}**: {what}.\n\n  ```bash\n{_commands(text)}\n  ```\n"
          for name, (what, text) in DATASETS.items()],
        f"The sweeps run from a clone at commit `{FIRST_COMMIT}`, one torch thread, on a 2-core "
        "CPU (AMD EPYC; seed 3's family 25, model 17) shared with two other training "
        "processes; no GPU was lent. Seed 3 was added on 2026-11-26 from a fresh clone at the "
        "same commit, after a 150-update run of Pre-LN seed 1 on multi30k-de there "
        "(`trainer.max_steps=150 optim.decay_steps=1`: its first 149 updates follow the "
        "study's schedule) logged the same training losses as the committed cell at updates "
        f"49, 99 and 149, to every digit. Cells: {cells} of {expected}; {hours:.1f} h of "
        "training in all.", "",
        _RULE,
    ]


def second_part(cells: int, hours: float) -> list[str]:
    """The second part's heading and "How it was run"."""
    expected = len(SCHEMES) * 3 * len(DEPTHS)
    names = ", ".join(label for label, _, _ in SCHEMES)
    return [
        "## Second part: the contract's new schemes at two depths", "",
        f"The same recipe and protocol on Multi30k's German side, at {DEPTHS[0]} and "
        f"{DEPTHS[1]} decoder layers, seeds 1, 2 and 3, with {names}: HC and mHC with n = 4 "
        "copies of the stream (dynamic HC; mHC's 20 Sinkhorn iterations), QK-norm an RMSNorm "
        "on every head's queries and keys (Qwen3's), nGPT as its paper's code parametrises "
        "it. Every scheme gets the recipe's schedule, warm-up and weight decay; nGPT's paper "
        "trains without either, and weight decay leaves its renormalised matrices unchanged "
        "(a decay scales a row, the renormalisation undoes it), so only the warm-up differs "
        "from its paper's settings. The sweeps, two at a time, one torch thread each, from a "
        f"clone at commit `{SCHEMES_COMMIT}` (`studies/llama/run.sh`), on the 2-core AMD "
        "EPYC (family 25, model 17); no GPU was lent:", "",
        "```bash", *[command(group, folder, grid) for group, folder, grid, _ in SWEEPS], "```",
        "",
        "nGPT seed 3 and mHC seed 3 at 6 layers were stopped (SIGSTOP) for about half an hour "
        "while the test suite ran on 2026-11-26 and then continued: their training minutes "
        "include that pause; their updates and losses do not change.", "",
        f"Cells: {cells} of {expected}; {hours:.1f} h of training in all. The columns are the "
        "first part's, with the mean cosine between a layer's input and output (how far a "
        "layer turns the state: on nGPT's sphere the stream norm is 1 by construction). HC's "
        "and mHC's stream norm is one copy's.", "",
        _RULE,
    ]


def cost_table() -> list[str]:
    """Each scheme's time and memory per training step against Pre-LN's, from
    ``benchmarks/scheme_cost.py``'s last run on this machine."""
    if not COSTS.is_file():
        return ["Not measured yet (`python benchmarks/scheme_cost.py`)."]
    found = json.loads(COSTS.read_text(encoding="utf-8"))
    schemes, machine = found["schemes"], found["machine"]
    base = statistics.median(schemes["Pre-LN"]["ms_per_step"])
    lines = [f"`python benchmarks/scheme_cost.py --rounds 3 --steps 8 --threads 1` "
             f"([results](../benchmarks/results/scheme_cost-cpu.md)), on the {machine['cpu']} "
             f"with nothing else running, {machine['date'][:16].replace('T', ' ')} UTC: one "
             "training step (forward, backward, AdamW) of the 6-layer model on 16 × 128 "
             f"tokens, {found['precision']}, one thread; median of 8 steps a round, 3 rounds "
             "taking turns. Ratios under about 1.25 move by ±0.2 between runs of the benchmark.",
             "", "| scheme | parameters | ms per step (range over rounds) | / Pre-LN | peak RSS, "
             "MiB |", "|---|---|---|---|---|"]
    for label, found_one in schemes.items():
        ms = found_one["ms_per_step"]
        lines.append(f"| {label} | {found_one['params']:,} | {statistics.median(ms):.0f} "
                     f"({min(ms):.0f}–{max(ms):.0f}) | {statistics.median(ms) / base:.2f} | "
                     f"{found_one['maxrss_mib']:,.0f} |")
    return lines
