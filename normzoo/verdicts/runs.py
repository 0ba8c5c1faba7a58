"""``normzoo compare``: two sets of finished runs (one per seed a side) judged under the rule, for
any task: the score is the task's (:attr:`~normzoo.contract.task.Task.compared_score`, with its
direction and unit), the example-level test resamples the per-example outputs the task kept
(:meth:`~normzoo.contract.task.Task.example_outputs`), and the verdict is
:func:`normzoo.verdicts.rule.compare`'s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from normzoo.errors import NormzooError
from normzoo.verdicts.rule import Run


class CompareError(NormzooError):
    """The runs cannot be compared (not run directories, unfinished, other tasks or test
    sets)."""


def _read(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A run directory's saved recipe and summary, or why it cannot be compared."""
    import yaml

    if not (run_dir / "recipe.yaml").is_file():
        raise CompareError(f"{run_dir} is not a run directory (no recipe.yaml)")
    try:
        recipe = yaml.safe_load((run_dir / "recipe.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        recipe = None
    if not isinstance(recipe, dict):
        raise CompareError(f"{run_dir}/recipe.yaml is not a recipe")
    try:
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        summary = {}  # a run's outputs may still say its score (its test translations)
    return recipe, summary if isinstance(summary, dict) else {}


def read_runs(dirs: list[Path], data_dir: Path | None) -> tuple[Any, list[Run], str]:
    """The runs as the rule reads them, their task, and the test split they were scored on."""
    from normzoo.contract import task_of
    from normzoo.run.identity import identity_key

    found = [(d, *_read(d)) for d in dirs]
    tasks = {str(recipe.get("task")) for _, recipe, _ in found}
    if len(tasks) > 1:
        raise CompareError("the runs are of different tasks: " + ", ".join(
            f"{d} ({recipe.get('task')})" for d, recipe, _ in found))
    task = task_of(found[0][1])
    key = task.compared_score[0]
    runs, splits = [], set()
    for run_dir, recipe, summary in found:
        test = summary.get("test") or {}
        outputs = task.example_outputs(run_dir, recipe, data_dir)
        score = test.get(key)
        if not isinstance(score, int | float) or isinstance(score, bool):
            if outputs is None:
                raise CompareError(f"{run_dir} has no test {key} in summary.json and no "
                                   "per-example test outputs: the run has not finished its "
                                   "final test")
            score = round(outputs.corpus_score(), 10)  # what the final test scores them as
        splits.add(str(test.get("split") or (recipe.get("data") or {}).get("test_split")))
        machine = summary.get("machine") if isinstance(summary.get("machine"), dict) else {}
        runs.append(Run(str(run_dir), None if recipe.get("seed") is None else str(
            recipe["seed"]), float(score), str((recipe.get("trainer") or {}).get(
                "precision") or ""), str(machine.get("device") or ""),
            identity_key(summary.get("identity")), outputs,
            json.dumps(test, sort_keys=True, default=str)))
    if len(splits) > 1:
        raise CompareError(f"the runs were tested on different splits ({', '.join(sorted(splits))})"
                           ": not the same test set")
    return task, runs, splits.pop()


def compare_runs(baselines: list[Path], systems: list[Path], data_dir: Path | None = None,
                 samples: int = 1000, margin: float | None = None) -> dict[str, Any]:
    """``systems`` against ``baselines`` under the rule, as one ``verdicts.json``-style row
    with the task, its score and the test split."""
    from normzoo.verdicts.distinct import NotDistinct
    from normzoo.verdicts.rule import compare

    if not baselines or not systems:
        raise CompareError("give at least one baseline and one system run")
    task, runs, split = read_runs([*baselines, *systems], data_dir)
    key, better, unit = task.compared_score
    try:
        row = compare(runs[:len(baselines)], runs[len(baselines):], better=better,
                      margin=margin, samples=samples)
    except NotDistinct as error:
        raise CompareError(str(error)) from None
    recipes = [recipe for recipe, _ in map(_read, [*baselines, *systems])]
    row["baseline_differences"] = setting_differences(recipes[:len(baselines)])
    row["system_differences"] = setting_differences(recipes[len(baselines):])
    side = ("system" if row["difference"] > 0 else "baseline") if better == "max" else (
        "system" if row["difference"] < 0 else "baseline")
    return {"task": task.name, "score": f"test {key}", "unit": unit, "split": split, **row,
            "better_side": None if row["difference"] == 0 else side}


# Where and how a run ran, not what it is: these may differ between the seeds of one setting.
WHERE_IT_RAN = ("seed", "run.", "data.dir", "trainer.accelerator", "trainer.devices",
                "trainer.num_nodes", "trainer.strategy", "trainer.precision")


def setting_differences(recipes: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The recipe keys, as dotted paths, on which a side's runs differ beyond their seed and
    where they ran (precision is reported on its own), with each run's value: a side is one
    setting, so a difference here (another residual, another beam) is worth a note."""
    flat = [_flatten(recipe) for recipe in recipes]
    keys = sorted(set().union(*flat)) if flat else []
    return {key: [f.get(key) for f in flat] for key in keys
            if not key.startswith(WHERE_IT_RAN)
            and len({json.dumps(f.get(key), sort_keys=True, default=str) for f in flat}) > 1}


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def format_comparison(row: dict[str, Any]) -> str:
    """The comparison as ``normzoo compare`` prints it."""
    from normzoo.verdicts.significance import p_text

    unit = f" {row['unit']}" if row["unit"] else ""
    digits = 2 if max(abs(v) for s in ("baseline", "system") for v in row[s]["scores"]) >= 10 \
        else 4
    lines = []
    for name in ("baseline", "system"):
        side = row[name]
        runs = "1 run" if len(side["runs"]) == 1 else f"{len(side['runs'])} runs"
        spread = (f" ± {side['sd']:.{digits}f} ("
                  + ", ".join(f"{v:.{digits}f}" for v in side["scores"]) + ")"
                  if len(side["runs"]) > 1 else "")
        kinds = ", ".join(sorted({p or "precision not recorded" for p in side["precisions"]}))
        devices = ", ".join(sorted({d or "device not recorded" for d in side["devices"]}))
        lines.append(f"{name}: {runs}, {row['score']} {side['mean']:.{digits}f}{spread}{unit} "
                     f"on {row['split']}, {kinds} on {devices}")
    lines += [f"note: the {side} runs differ in more than their seed: " + "; ".join(
        f"{key} ({', '.join(str(v) for v in values)})" for key, values in found.items())
        for side in ("baseline", "system") if (found := row.get(f"{side}_differences"))]
    word = "higher" if row["better"] == "max" else "lower"
    lines.append(f"the {row['better_side']} is better ({word} {row['score']}): the system is "
                 f"{row['difference']:+.{digits}f}{unit}" if row["better_side"] else
                 f"the same {row['score']}: neither is better")
    if row["seed_p"] is not None:
        low, high = row["seed_interval"]
        lines.append(f"seeds: {row['seed_test']}, p = {p_text(row['seed_p'])}; 95% interval "
                     f"of the difference [{low:+.{digits}f}, {high:+.{digits}f}]")
    else:
        lines.append(f"seeds: {row['seed_test']}: nothing to test (fewer than two runs a side, "
                     "or no spread)")
    if row["example_p"] is not None:
        low, high = row["example_interval"]
        lines.append(f"examples: {row['example_test']}, two-sided p = "
                     f"{p_text(row['example_p'])}; 95% interval [{low:+.{digits}f}, "
                     f"{high:+.{digits}f}]")
    else:
        lines.append(f"examples: no example-level test ({row['example_note']})")
    lines.append(f"{row['verdict']}: {row['reason']}")
    if row["margin"] is None and row["verdict"] == "not shown":
        lines.append("not shown is not \"no difference\": the interval above is what the seeds "
                     "leave open; --margin M tests whether the two are equal within ± M")
    elif row["margin"] is not None and row["verdict"] != "equal":
        lines.append(f"equal within ± {row['margin']:g}{unit}: not shown (two one-sided tests "
                     f"p = {p_text(row['equivalence_p'])})")
    return "\n".join(lines)
