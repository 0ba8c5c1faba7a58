"""Is one setting's test BLEU better than another's beyond chance? Over one run a side or
several (one per seed), from the test translations the runs wrote (``hyps.<split>.txt``).

Two tests, both needed before a difference counts as shown
(:mod:`normzoo.sweep.significance`): a t-test on the runs' BLEU (the seeds' noise; paired where
both sides ran the same seeds, else Welch's) and the hierarchical bootstrap of their
translations (the test set's noise and the seeds', :mod:`normzoo.sweep.bootstrap`). A side's
runs must be distinct work (no two with the same translations). With fewer than three runs a
side, or runs on more than one device kind, a difference is at most *indicated*; runs trained
in different precisions are never compared as shown.

The bootstrap's p-value is two-sided: the chance, were the two equally good, of a difference in
BLEU at least this large in either direction. Which one is better is the sign of the
difference, which the report states in words beside it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from normzoo.errors import NormzooError
from normzoo.tasks import task_of


class CompareError(NormzooError):
    """The runs cannot be compared (missing translations, other test sets)."""


def run_recipe(run_dir: Path) -> dict[str, Any]:
    """The resolved recipe a run directory holds (``recipe.yaml``), as plain data."""
    import yaml

    recipe_file = run_dir / "recipe.yaml"
    if not recipe_file.is_file():
        raise CompareError(f"{run_dir} is not a run directory (no recipe.yaml)")
    recipe = yaml.safe_load(recipe_file.read_text(encoding="utf-8"))
    if not isinstance(recipe, dict):
        raise CompareError(f"{run_dir}/recipe.yaml is not a recipe")
    return recipe


def run_task(run_dirs: list[Path]) -> str:
    """The task every one of ``run_dirs`` trained (translation, mlm, causal_lm): the runs
    compared must share it."""
    tasks = {str(d): run_recipe(d).get("task") for d in run_dirs}
    if len(set(tasks.values())) > 1:
        raise CompareError("the runs are of different tasks: " + ", ".join(
            f"{d} ({task})" for d, task in tasks.items()))
    return str(next(iter(tasks.values())))


def _run(run_dir: Path) -> tuple[list[str], str, dict[str, Any]]:
    """A finished translation run's test hypotheses, test split name and resolved recipe."""
    recipe = run_recipe(run_dir)
    if task_of(recipe).compared_by != "hypotheses":
        raise CompareError(f"{run_dir} is not a translation run (its task is "
                           f"{recipe.get('task')}); compare scores translations")
    split = recipe["data"]["test_split"]
    hyps = run_dir / f"hyps.{split}.txt"
    if not hyps.is_file():
        raise CompareError(f"{run_dir} has no test translations ({hyps.name}): the run has "
                           "not finished its final test")
    return read_hypotheses(hyps), split, recipe


def read_hypotheses(path: Path) -> list[str]:
    """One hypothesis per ``\\n``-ended line, as the run wrote them (``"\\n".join(hyps) +
    "\\n"``). Not ``str.splitlines``: that also splits at characters a translation may hold
    (U+2028, U+0085, form feed, ...), and the lines would no longer pair with the references."""
    from normzoo.data.sources import decode_lines

    return decode_lines(path.read_bytes(), str(path))


def compare_runs(baselines: list[Path], systems: list[Path], data_dir: Path | None = None,
                 samples: int = 1000, margin: float | None = None) -> dict[str, Any]:
    """Compare ``systems`` with ``baselines`` (one run per seed a side, any number): each run's
    BLEU, precision and device kind, the seeds' test (the paired t-test where both sides ran
    the same seeds, else Welch's), the hierarchical bootstrap of the first ``min(len)`` runs of
    each side paired (seed with seed where the seeds match, else in order), and the verdict.
    References come from the baselines' recipe data (``data_dir`` re-points a ``files``
    corpus). ``margin``: also test whether the two are equal within it (BLEU)."""
    from normzoo.inference.scoring import score
    from normzoo.sweep.bootstrap import hierarchical_bootstrap
    from normzoo.sweep.significance import judge, same_seeds, seed_order, seed_test, welch_p

    if not baselines or not systems:
        raise CompareError("give at least one baseline and one system run")
    runs = {"baseline": [_run(d) for d in baselines], "system": [_run(d) for d in systems]}
    seeds = {side: [recipe.get("seed") for _, _, recipe in found] for side, found in runs.items()}
    for side, dirs in (("baseline", baselines), ("system", systems)):
        refuse_repeats(side, dirs, seeds[side])
        refuse_copies(side, dirs, [hyps for hyps, _, _ in runs[side]], "test translations")
    split, first = runs["baseline"][0][1], runs["baseline"][0][2]
    references = _references(first, split, data_dir)
    for side, dirs in (("baseline", baselines), ("system", systems)):
        for run_dir, (hyps, run_split, _) in zip(dirs, runs[side], strict=True):
            if run_split != split or len(hyps) != len(references):
                raise CompareError(f"{run_dir} translated {run_split} ({len(hyps)} lines) and "
                                   f"{baselines[0]} {split} ({len(references)} references): "
                                   "not the same test set")
    paired = same_seeds(seeds["baseline"], seeds["system"])
    dirs = {"baseline": baselines, "system": systems}
    if paired:  # seed with seed, in the seeds' order, for both tests
        order = {side: seed_order(seeds[side]) for side in runs}
        runs = {side: [runs[side][i] for i in order[side]] for side in runs}
        dirs = {side: [dirs[side][i] for i in order[side]] for side in runs}
    bleu = {side: [round(score(h, references).bleu, 2) for h, _, _ in found]
            for side, found in runs.items()}
    precision = {side: [_precision(recipe) for _, _, recipe in found]
                 for side, found in runs.items()}
    device = {side: [run_device(d) for d in side_dirs] for side, side_dirs in dirs.items()}
    differences = {side: setting_differences([recipe for _, _, recipe in found])
                   for side, found in runs.items()}
    pairs = min(len(baselines), len(systems))
    base_hyps = [hyps for hyps, _, _ in runs["baseline"][:pairs]]
    sys_hyps = [hyps for hyps, _, _ in runs["system"][:pairs]]
    identical = base_hyps == sys_hyps
    sentences = hierarchical_bootstrap(base_hyps, sys_hyps, references, samples=samples)
    verdict = judge(bleu["baseline"], bleu["system"], None if identical else sentences.p_value,
                    [p for side in precision.values() for p in side if p],
                    devices=[d for side in device.values() for d in side if d], paired=paired,
                    sentence_name="hierarchical bootstrap")
    return {"baselines": [str(p) for p in dirs["baseline"]],
            "systems": [str(p) for p in dirs["system"]],
            "baseline_seed_bleu": bleu["baseline"], "system_seed_bleu": bleu["system"],
            "baseline_precision": precision["baseline"],
            "system_precision": precision["system"],
            "baseline_device": device["baseline"], "system_device": device["system"],
            **seed_test(bleu["baseline"], bleu["system"], paired, margin),
            "welch_p": welch_p(bleu["baseline"], bleu["system"]),
            "baseline_differences": differences["baseline"],
            "system_differences": differences["system"],
            "pairs": pairs, "sentences": len(references) * pairs, "identical": identical,
            **sentences.as_dict(), "verdict": verdict.label, "reason": verdict.reason}


def refuse_copies(side: str, dirs: list[Path], outputs: list[Any], what: str) -> None:
    """Two runs of a side with the same output are one run's work, whatever seed their
    ``recipe.yaml`` says (a copied folder with its seed edited): counted as two seeds they
    would shrink the seeds' spread to nothing."""
    problems = [f"{earlier} and {run_dir}"
                for i, (run_dir, output) in enumerate(zip(dirs, outputs, strict=True))
                for earlier, earlier_output in zip(dirs[:i], outputs[:i], strict=False)
                if output == earlier_output and run_dir.resolve() != earlier.resolve()]
    if problems:
        raise CompareError(f"the {side} runs must be distinct work, but these have identical "
                           f"{what}: {'; '.join(problems)}")


def run_device(run_dir: Path) -> str:
    """The device kind the run trained on (cpu, cuda, ...), as its ``summary.json`` machine
    record says; empty where the run recorded none (runs before the record existed)."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return ""
    machine = summary.get("machine") if isinstance(summary, dict) else None
    return str(machine.get("device") or "") if isinstance(machine, dict) else ""


def refuse_repeats(side: str, dirs: list[Path], seeds: list[Any]) -> None:
    """A side's runs are its seeds: the same run given twice, or two runs of one seed (a copied
    folder, a re-run), would count one seed's BLEU as several and shrink the seeds' noise that
    Welch's t-test measures, so that three copies of one run could be called shown."""
    problems: list[str] = []
    for i, (run_dir, seed) in enumerate(zip(dirs, seeds, strict=True)):
        for earlier, earlier_seed in zip(dirs[:i], seeds[:i], strict=False):
            if run_dir.resolve() == earlier.resolve():
                problem = f"{run_dir} is given twice"
            elif seed == earlier_seed:
                problem = f"{earlier} and {run_dir} are both seed {seed}"
            else:
                continue
            if problem not in problems:
                problems.append(problem)
            break
    if problems:
        raise CompareError(f"the {side} runs must be one run per seed: {'; '.join(problems)}")


# Where and how a run ran, not what it is: these may differ between the seeds of one setting.
WHERE_IT_RAN = ("seed", "run.", "data.dir", "trainer.accelerator", "trainer.devices",
                "trainer.num_nodes", "trainer.strategy", "trainer.precision")


def setting_differences(recipes: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The recipe keys, as dotted paths, on which a side's runs differ beyond their seed and
    where they ran (precision is reported on its own), with each run's value: a side is one
    setting, so a difference here (another residual, another beam) is worth a note beside the
    verdict."""
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


def _references(recipe: dict[str, Any], split: str, data_dir: Path | None) -> list[str]:
    from normzoo.data.sources import load_parallel
    from normzoo.recipe import DataConfig

    # Only the data section is read: a run trained before a key elsewhere was renamed or
    # removed is still compared, since its translations and data are all compare needs.
    data = DataConfig.model_validate(recipe.get("data") or {})
    if data_dir is not None:
        data = data.model_copy(update={"dir": str(data_dir), "source": "files"})
    return load_parallel(data, split, data.valid_limit)[1]


def _precision(recipe: dict[str, Any]) -> str:
    """The precision the run trained in, as its saved recipe records it (a bf16 request that
    fell back to fp32 on a CPU without bf16 is saved as ``32-true``)."""
    return str((recipe.get("trainer") or {}).get("precision") or "")


def direction(result: dict[str, Any]) -> tuple[float, str | None]:
    """The system's mean BLEU over its runs minus the baseline's, and which of the two is
    higher (None: equal)."""
    from normzoo.sweep.significance import mean_sd

    difference = (mean_sd(result["system_seed_bleu"])[0]
                  - mean_sd(result["baseline_seed_bleu"])[0])
    return difference, "system" if difference > 0 else "baseline" if difference < 0 else None


def _side(name: str, bleus: list[float], precisions: list[str], devices: list[str]) -> str:
    from normzoo.sweep.significance import mean_sd

    mean, sd = mean_sd(bleus)
    runs = "1 run" if len(bleus) == 1 else f"{len(bleus)} runs"
    spread = f" ± {sd:.2f} ({', '.join(f'{b:.2f}' for b in bleus)})" if len(bleus) > 1 else ""
    return f"{name}: {runs}, BLEU {mean:.2f}{spread}, {kinds(precisions, devices)}"


def kinds(precisions: list[str], devices: list[str]) -> str:
    """A side's precisions and device kinds in words, for its line of the report."""
    return (", ".join(sorted({p for p in precisions if p})) or "precision not recorded") + (
        " on " + ", ".join(sorted({d for d in devices if d})) if any(devices) else "")


def seed_line(result: dict[str, Any], scores: str, digits: int = 2) -> str:
    """The seeds' test as the report prints it, with the interval of the difference of the
    means that it leaves open."""
    from normzoo.sweep.significance import p_text

    if result["seed_p"] is not None:
        low, high = result["seed_interval"]
        return (f"seeds: {result['seed_test']} on the runs' {scores}, "
                f"p = {p_text(result['seed_p'])}; 95% interval of the difference "
                f"[{low:+.{digits}f}, {high:+.{digits}f}]")
    if min(len(result["baselines"]), len(result["systems"])) < 2:
        return f"seeds: {result['seed_test']} needs two runs a side or more"
    return f"seeds: {result['seed_test']}: no variance to test (no spread)"


def difference_notes(result: dict[str, Any]) -> list[str]:
    """A ``note:`` line for each side whose runs differ in more than their seed."""
    return [f"note: the {side} runs differ in more than their seed: " + "; ".join(
                f"{key} ({', '.join(str(v) for v in values)})" for key, values in found.items())
            for side in ("baseline", "system") if (found := result[f"{side}_differences"])]


def format_comparison(result: dict[str, Any]) -> str:
    from normzoo.sweep.significance import equivalence_line

    difference, better = direction(result)
    lines = [_side(side, result[f"{side}_seed_bleu"], result[f"{side}_precision"],
                   result[f"{side}_device"]) for side in ("baseline", "system")]
    lines += difference_notes(result)
    if result["identical"]:
        # sacreBLEU gives identical systems p = 1/(samples+1) by design (multeval's
        # convention: a zero difference is not chance); there is simply nothing to test.
        lines.append("identical translations: no difference to test")
    else:
        if better == "system":
            lines.append(f"the system scores higher: {difference:+.2f} BLEU over the baseline")
        elif better == "baseline":
            lines.append(f"the baseline scores higher: the system is {difference:+.2f} BLEU")
        else:
            lines.append("the same BLEU: neither scores higher")
        lines.append(seed_line(result, "BLEU"))
        pairs = (f"{result['pairs']} runs a side paired " + (
            "seed with seed" if result["paired"] else "in order") if result["pairs"] > 1
            else "one run a side")
        lines.append(f"sentences: {result['sentence_test']} over {pairs}, two-sided, p = "
                     f"{result['p_value']:.4f}; BLEU {result['baseline_bleu']:.2f} vs "
                     f"{result['system_bleu']:.2f} (95% CI of the difference ± "
                     f"{result['difference_ci']:.2f})")
    lines.append(f"{result['verdict']}: {result['reason']}")
    lines += [line for line in [equivalence_line(
        result, "BLEU", {*result["baseline_precision"], *result["system_precision"]} - {""},
        {*result["baseline_device"], *result["system_device"]} - {""})] if line]
    return "\n".join([*lines, result["signature"]])


def with_direction(result: dict[str, Any]) -> dict[str, Any]:
    """The result with the difference of the means and the higher of the two, for JSON."""
    difference, better = direction(result)
    return {**result, "difference": difference, "better": None if result["identical"] else
            better, "p_value_two_sided": True}


def to_json(result: dict[str, Any]) -> str:
    return json.dumps(with_direction(result), indent=2)
