"""Is one setting's test loss lower than another's beyond chance? For language-model runs
(causal LM or masked LM), one run per seed a side, from the test loss each run's
``summary.json`` records.

The runs keep no per-sentence losses, so there is no bootstrap: the t-test over the seeds
(paired where both sides ran the same seeds, else Welch's) decides alone
(:func:`normzoo.sweep.significance.judge` with ``sentence_test=False``, as the Llama-style study
judges its schemes). Three runs a side, one precision, one device kind and runs that are
distinct work (no two with the same test loss) are needed for *shown*, as for translation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from normzoo.sweep.compare import CompareError


def _test_loss(run_dir: Path) -> tuple[float, str]:
    """The run's test loss (nats per token) and the split it was measured on."""
    summary_file = run_dir / "summary.json"
    try:
        test = json.loads(summary_file.read_text(encoding="utf-8")).get("test") or {}
    except (OSError, json.JSONDecodeError, AttributeError):
        test = {}
    if not isinstance(test.get("loss"), (int, float)):
        raise CompareError(f"{run_dir} has no test loss in summary.json: the run has not "
                           "finished its final test")
    return float(test["loss"]), str(test.get("split"))


def compare_lm_runs(baselines: list[Path], systems: list[Path],
                    margin: float | None = None) -> dict[str, Any]:
    """Compare language-model ``systems`` with ``baselines`` (one run per seed a side): each
    run's test loss and precision, the seeds' t-test (paired where the seeds match) and the
    verdict; with a ``margin`` (nats/token), whether the two are equal within it."""
    from normzoo.sweep.compare import run_recipe

    recipes = {"baseline": [run_recipe(d) for d in baselines],
               "system": [run_recipe(d) for d in systems]}
    from normzoo.sweep.compare import (
        _precision,
        refuse_copies,
        refuse_repeats,
        run_device,
        setting_differences,
    )
    from normzoo.sweep.significance import judge, same_seeds, seed_order, seed_test, welch_p

    found = {"baseline": [_test_loss(d) for d in baselines],
             "system": [_test_loss(d) for d in systems]}
    seeds = {side: [recipe.get("seed") for recipe in recipes[side]] for side in recipes}
    for side, dirs in (("baseline", baselines), ("system", systems)):
        refuse_repeats(side, dirs, seeds[side])
        refuse_copies(side, dirs, [loss for loss, _ in found[side]], "test losses")
    split = found["baseline"][0][1]
    for side, dirs in (("baseline", baselines), ("system", systems)):
        for run_dir, (_, run_split) in zip(dirs, found[side], strict=True):
            if run_split != split:
                raise CompareError(f"{run_dir} was tested on {run_split} and {baselines[0]} on "
                                   f"{split}: not the same test set")
    paired = same_seeds(seeds["baseline"], seeds["system"])
    dirs = {"baseline": baselines, "system": systems}
    if paired:  # seed with seed, in the seeds' order
        order = {side: seed_order(seeds[side]) for side in found}
        found, recipes, dirs = ({side: [held[side][i] for i in order[side]] for side in held}
                                for held in (found, recipes, dirs))
    loss = {side: [value for value, _ in runs] for side, runs in found.items()}
    precision = {side: [_precision(r) for r in side_recipes]
                 for side, side_recipes in recipes.items()}
    device = {side: [run_device(d) for d in side_dirs] for side, side_dirs in dirs.items()}
    verdict = judge(loss["baseline"], loss["system"], None,
                    [p for side in precision.values() for p in side if p], sentence_test=False,
                    devices=[d for side in device.values() for d in side if d], paired=paired)
    return {"task": recipes["baseline"][0].get("task"), "split": split,
            "baselines": [str(p) for p in dirs["baseline"]],
            "systems": [str(p) for p in dirs["system"]],
            "baseline_seed_loss": loss["baseline"], "system_seed_loss": loss["system"],
            "baseline_precision": precision["baseline"],
            "system_precision": precision["system"],
            "baseline_device": device["baseline"], "system_device": device["system"],
            **seed_test(loss["baseline"], loss["system"], paired, margin),
            "baseline_differences": setting_differences(recipes["baseline"]),
            "system_differences": setting_differences(recipes["system"]),
            "welch_p": welch_p(loss["baseline"], loss["system"]),
            "verdict": verdict.label, "reason": verdict.reason}


def lm_json(result: dict[str, Any]) -> str:
    difference, lower = lm_direction(result)
    return json.dumps({**result, "difference": difference, "better": lower}, indent=2)


def lm_direction(result: dict[str, Any]) -> tuple[float, str | None]:
    """The system's mean test loss minus the baseline's, and which of the two is lower (better;
    None: equal)."""
    from normzoo.sweep.significance import mean_sd

    difference = (mean_sd(result["system_seed_loss"])[0]
                  - mean_sd(result["baseline_seed_loss"])[0])
    return difference, "system" if difference < 0 else "baseline" if difference > 0 else None


def format_lm_comparison(result: dict[str, Any]) -> str:
    from normzoo.sweep.compare import difference_notes, kinds, seed_line
    from normzoo.sweep.significance import equivalence_line, mean_sd

    lines = []
    for side in ("baseline", "system"):
        losses = result[f"{side}_seed_loss"]
        mean, sd = mean_sd(losses)
        runs = "1 run" if len(losses) == 1 else f"{len(losses)} runs"
        spread = (f" ± {sd:.4f} ({', '.join(f'{v:.4f}' for v in losses)})"
                  if len(losses) > 1 else "")
        lines.append(f"{side}: {runs}, test loss {mean:.4f}{spread} nats/token on "
                     f"{result['split']}, "
                     f"{kinds(result[f'{side}_precision'], result[f'{side}_device'])}")
    lines += difference_notes(result)
    difference, lower = lm_direction(result)
    lines.append(f"the {lower} has the lower test loss: the system is {difference:+.4f} "
                 "nats/token" if lower else "the same test loss: neither is lower")
    lines.append(seed_line(result, "test loss", digits=4))
    lines.append(f"{result['verdict']}: {result['reason']}")
    equal = equivalence_line(
        result, "nats/token", {*result["baseline_precision"], *result["system_precision"]} - {""},
        {*result["baseline_device"], *result["system_device"]} - {""})
    return "\n".join([*lines, equal] if equal else lines)
