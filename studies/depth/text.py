"""The depth study report's prose: how it was run and what it could not judge, with the numbers
read from the cells (so the text cannot drift from them)."""

from __future__ import annotations

from typing import Any

from . import plan as sd
from .plan import PRECISION
from .tables import MARGIN

RULE = (
    "Rule for every difference in BLEU (`normzoo compare`'s, issue 51): **shown** only with three "
    "seeds a side or more, the seeds' t-test over their BLEU (the training runs' noise; the "
    "paired t-test where both sides ran the same seeds, else Welch's) and the hierarchical "
    "bootstrap of their translations (the test set's noise and the seeds': each of 1,000 "
    "samples draws the seeds, then the sentences within each seed's run) both below 0.05, in "
    "one precision and on one device kind; otherwise at most **indicated**: a side whose cells "
    "trained on both a CPU and a GPU is at most indicated, whatever the p-values. Every "
    "difference carries the 95% interval of the seeds' test: a **not shown** says how large a "
    "difference the seeds leave open, never that there is none. \"Equal\" is said only where "
    f"the equivalence test (two one-sided tests of the seeds) puts the difference within ± "
    f"{MARGIN:g} BLEU, with its p-value and label beside it. The pooled paired bootstrap the "
    "page used before (every (sentence, seed) item resampled alike) counted each test sentence "
    "once a seed; on the committed 6+6 cells it alone called 3 of 6 same-setting seed pairs "
    "significant. Each table of comparisons says whether Holm's correction over its own "
    "comparisons keeps each one.")


def _count(cells: list[Any]) -> str:
    done = {t: sum(c.tier == t and c.precision in (PRECISION, "32-true") for c in cells)
            for t in sd.TIERS}
    return ", ".join(f"{tier} {done[tier]}" for tier in sd.TIERS)


def how_it_was_run(cells: list[Any]) -> list[str]:
    cpu_hours = sum(c.train_min or 0.0 for c in cells if not c.on_gpu) / 60
    gpu = [c for c in cells if c.on_gpu]
    machines = sorted({c.machine for c in cells if c.machine})
    signatures = sorted({c.signature for c in cells if c.signature})
    two = [f"{c.tier} {c.label}" for c in cells if not c.on_gpu and (c.threads or 1) > 1]
    records = "its summary.json records" if len(two) == 1 else "their summary.json files record"
    two_threads = (f" ({'; '.join(two)}: the last stretch with two torch threads, as {records})"
                   if two else "")
    return [
        "## How it was run", "",
        f"The recipe, [`{sd.RECIPE}`](../{sd.RECIPE}), is the protocol of fairseq's IWSLT14 "
        "example and the papers below, at a width a 2-core CPU affords: Multi30k En→De (29,000 "
        "pairs), an encoder–decoder with d_model 128, 4 heads, FFN 512, LayerNorm, a joint "
        "6,000-entry BPE; inverse square-root schedule with a 4,000-update warm-up to 5e-4, "
        "Adam (0.9, 0.98), weight decay 1e-4, dropout, attention and activation dropout 0.1, "
        "label smoothing 0.1, about 2k tokens per update, no clipping; validation every 500 "
        "updates, early stopping after 4 without improvement; test2016 scored (beam 5, length "
        "penalty 1) with the best checkpoint, and with the average of the converged "
        "checkpoints (from the best validation point on) where a run has them. Weights start "
        "as the reference code's ([init-references.md](init-references.md)). Four tiers:", "",
        "- **ceiling**: Post-LN and Pre-LN 6+6, 3 seeds, to early stopping or the 7,000-update "
        "cap (all six reached the cap, still improving);",
        "- **stability**: six schemes at 18+18 with the same warm-up, to 4,500 updates (500 "
        "past the warm-up's peak, where the papers' deep Post-LN diverges); Post-LN, Pre-LN, "
        "DeepNorm and Admin with 3 seeds in bf16-mixed, ResiDual and Sub-LN with one;",
        "- **nowarmup**: Post-LN and Pre-LN 18+18 at a constant 5e-4 from the first update, "
        "1,500 updates, one seed (32-true);",
        "- **nowarmup6**: the same at 6+6, 3 seeds each: the depth at which Post-LN trains "
        "with the warm-up, so that this tier tests what the warm-up does.", "",
        f"The first study's sweeps, from a clone at `{sd.STUDY_COMMIT}`:", "",
        "```bash", *sd.COMMANDS, "```", "",
        "Issue 35's, from clones at the commit each names (`studies/depth/run.sh` runs "
        "those still to run in two slots; `python -m studies.depth.report --commands a` "
        "prints slot A's):", "",
        "```bash", *[f"{c}   # {commit}" for c, (*_, commit) in
                     zip(sd.SEED_COMMANDS, sd.SEED_SWEEPS, strict=True)], "```", "",
        "Every sweep is resumable: re-running a command finishes its interrupted cell from the "
        "last checkpoint and skips the finished ones. The clone at `181c692` trains bit for "
        "bit as the study's commit (Post-LN 18+18, seed 1: training loss 9.045141 at update "
        "50 and 8.659921 at 100 in both, on two different CPUs); `3fd4a6b` changes no "
        "training code, only what the diagnostics record and how the final test averages.", "",
        "**Where the cells ran.** The CPU cells one thread each, two side by side on a 2-core "
        f"AMD EPYC{two_threads}: the machine changed between sessions (a Zen 5 and a Zen 4 "
        "with bf16 instructions, a Zen 3 without, where `bf16-mixed` falls back to `32-true` "
        "and the cell's `recipe.yaml` records it), so each cell's row names its precision and, "
        "where the run recorded it, its processor. Three sessions were lent an NVIDIA H200 for 15 "
        "minutes of device time each. The first trained on the host's CPU by a defect of "
        "`normzoo sweep --jobs` (since fixed; its partial cells are not used). The second "
        "trained ResiDual and Sub-LN at 18+18, whose final test then ran out of device time "
        "(a defect since fixed; they are reported by validation loss only). The third "
        "(2026-11-26) ran six 18+18 cells side by side through `studies/depth/gpu.sh`: "
        "each trained at about 8 updates per second whether six or two ran, so the lanes are "
        "bound by their own CPU process, not the GPU; a throttle written for a saturated GPU "
        "stopped four of them, and Pre-LN and DeepNorm seed 1 trained to the cap and were "
        "scored there (a second call on the same machine resumed them from their checkpoints). "
        f"Cells so far: {_count(cells)}; {cpu_hours:.1f} h of training on the CPU "
        f"in all, {len(gpu)} cells on the GPU. Machines recorded: "
        + (", ".join(machines) or "–") + ".", "",
        "sacreBLEU: " + (", ".join(f"`{s}`" for s in signatures) or "–"), "",
    ]


def limits(cells: list[Any]) -> list[str]:
    unscored = [c for c in cells if not c.scored]
    gpu_scored = [c for c in cells if c.tier == "stability" and c.on_gpu and c.scored
                  and c.precision == PRECISION]
    return [
        "## What this study could not judge", "",
        "- **Quality at 18+18.** The stability tier stops at 4,500 updates, 500 past the "
        "warm-up's peak: its BLEU says whether a scheme trains through the peak, not what it "
        "converges to.",
        "- **Convergence at 6+6.** All six ceiling cells reached the 7,000-update cap with "
        "their best checkpoint the last one and validation loss still falling: verdict 5 "
        "compares them at the cap, not converged, and they have no converged checkpoints to "
        "average.",
        "- **Devices.** The bf16-mixed cells of one setting trained on different devices "
        "(CPUs of three generations, and the H200): the same precision policy (bf16 matrix "
        "products under autocast, fp32 weights and optimizer), other kernels. Each row names "
        "its device; no verdict mixes precisions, and a comparison whose cells mix device "
        "kinds (at 18+18, "
        + (" and ".join(c.label for c in gpu_scored) or "none") + " on the GPU) is at most "
        "indicated: a difference could be the device's.",
        "- **The no-warm-up pair at 18+18** trained in 32-true, one seed each: its difference "
        "is at most indicated, and Post-LN fails at that depth with the warm-up too.",
        *([f"- **Test BLEU of {' and '.join(c.label for c in unscored)} at 18+18.** Trained "
           "to the cap on the GPU but not scored (see How it was run): validation loss only, "
           "one seed, no verdict reads them. Scoring them needs a GPU "
           "(`studies/depth/gpu.sh`); they were not scored this session."]
          if unscored else []),
        "- **Warm-up at matched budgets.** Verdict 2 sets Post-LN 6+6 without warm-up (1,500 "
        "updates, still improving there) against the same with the warm-up at the 7,000-update "
        "cap: the budgets are unmatched, and no cell at a matched budget was trained.",
        "- **Scale.** d_model 128 on Multi30k; the papers train d_model 512–1024 on WMT for "
        "100k+ updates.", "",
    ]
