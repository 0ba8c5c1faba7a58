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

# The score a task's runs are compared on (Task.compared_score): the test loss unless it says.
LOSS = ("loss", "min", "nats/token")


def _test_score(run_dir: Path, key: str = "loss") -> tuple[float, str]:
    """The run's test score ``key`` (its loss: nats per token) and the split it was measured
    on."""
    summary_file = run_dir / "summary.json"
    try:
        test = json.loads(summary_file.read_text(encoding="utf-8")).get("test") or {}
    except (OSError, json.JSONDecodeError, AttributeError):
        test = {}
    if not isinstance(test.get(key), (int, float)):
        raise CompareError(f"{run_dir} has no test {key} in summary.json: the run has not "
                           "finished its final test")
    return float(test[key]), str(test.get("split"))


def compare_lm_runs(baselines: list[Path], systems: list[Path],
                    margin: float | None = None,
                    score: tuple[str, str, str] = LOSS) -> dict[str, Any]:
    """Compare ``systems`` with ``baselines`` (one run per seed a side) on a test score the
    runs' summaries hold (``score``: its key, ``min`` or ``max`` for which is better, and its
    unit; a language model's test loss by default): each run's score and precision, the seeds'
    t-test (paired where the seeds match) and the verdict; with a ``margin`` (in the score's
    unit), whether the two are equal within it."""
    key, mode, unit = score
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

    found = {"baseline": [_test_score(d, key) for d in baselines],
             "system": [_test_score(d, key) for d in systems]}
    seeds = {side: [recipe.get("seed") for recipe in recipes[side]] for side in recipes}
    for side, dirs in (("baseline", baselines), ("system", systems)):
        refuse_repeats(side, dirs, seeds[side])
        # A copy is told by the test loss, which two distinct runs do not share (a count such
        # as an accuracy over 500 sentences may well be equal).
        refuse_copies(side, dirs, [_test_score(d, "loss")[0] for d in dirs], "test losses")
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
            "score": key, "direction": "lower" if mode == "min" else "higher", "unit": unit,
            f"baseline_seed_{key}": loss["baseline"], f"system_seed_{key}": loss["system"],
            "baseline_precision": precision["baseline"],
            "system_precision": precision["system"],
            "baseline_device": device["baseline"], "system_device": device["system"],
            **seed_test(loss["baseline"], loss["system"], paired, margin),
            "baseline_differences": setting_differences(recipes["baseline"]),
            "system_differences": setting_differences(recipes["system"]),
            "welch_p": welch_p(loss["baseline"], loss["system"]),
            "verdict": verdict.label, "reason": verdict.reason}


def lm_json(result: dict[str, Any]) -> str:
    difference, better = lm_direction(result)
    return json.dumps({**result, "difference": difference, "better": better}, indent=2)


def lm_direction(result: dict[str, Any]) -> tuple[float, str | None]:
    """The system's mean test score minus the baseline's, and which of the two is better (the
    lower loss, the higher accuracy; None: equal)."""
    from normzoo.sweep.significance import mean_sd

    key = result.get("score", "loss")
    difference = (mean_sd(result[f"system_seed_{key}"])[0]
                  - mean_sd(result[f"baseline_seed_{key}"])[0])
    lower = -difference if result.get("direction", "lower") == "higher" else difference
    return difference, "system" if lower < 0 else "baseline" if lower > 0 else None


def format_lm_comparison(result: dict[str, Any]) -> str:
    from normzoo.sweep.compare import difference_notes, kinds, seed_line
    from normzoo.sweep.significance import equivalence_line, mean_sd

    key, unit = result.get("score", "loss"), result.get("unit", "nats/token")
    per = f" {unit}" if unit else ""
    lines = []
    for side in ("baseline", "system"):
        values = result[f"{side}_seed_{key}"]
        mean, sd = mean_sd(values)
        runs = "1 run" if len(values) == 1 else f"{len(values)} runs"
        spread = (f" ± {sd:.4f} ({', '.join(f'{v:.4f}' for v in values)})"
                  if len(values) > 1 else "")
        lines.append(f"{side}: {runs}, test {key} {mean:.4f}{spread}{per} on "
                     f"{result['split']}, "
                     f"{kinds(result[f'{side}_precision'], result[f'{side}_device'])}")
    lines += difference_notes(result)
    difference, better = lm_direction(result)
    word = result.get("direction", "lower")
    lines.append(f"the {better} has the {word} test {key}: the system is {difference:+.4f}"
                 f"{per}" if better else f"the same test {key}: neither is {word}")
    lines.append(seed_line(result, f"test {key}", digits=4))
    lines.append(f"{result['verdict']}: {result['reason']}")
    equal = equivalence_line(
        result, unit or key, {*result["baseline_precision"], *result["system_precision"]}
        - {""}, {*result["baseline_device"], *result["system_device"]} - {""})
    return "\n".join([*lines, equal] if equal else lines)
