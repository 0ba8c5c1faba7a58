"""Is one run's test BLEU better than another's beyond chance? sacreBLEU's paired bootstrap on
the test translations the runs wrote (``hyps.<split>.txt``), over one seed or several.

Several runs per side are paired in the order given (seed 1 with seed 1, ...): their
translations are concatenated, each against its references, so the resampling draws
sentence-and-seed pairs scored for both systems. That tests these translations: how much the
difference would change with other seeds (the variance between training runs) is not part of
it, and the report says so.

sacreBLEU's p-value is two-sided: the chance, were the two equally good, of a difference in
BLEU at least this large in either direction. Which one is better is the sign of the
difference, which the report states in words beside it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from normzoo.errors import NormzooError


class CompareError(NormzooError):
    """The runs cannot be compared (missing translations, other test sets)."""


def _run(run_dir: Path) -> tuple[list[str], str, dict[str, Any]]:
    """A finished translation run's test hypotheses, test split name and resolved recipe."""
    import yaml

    recipe_file = run_dir / "recipe.yaml"
    if not recipe_file.is_file():
        raise CompareError(f"{run_dir} is not a run directory (no recipe.yaml)")
    recipe = yaml.safe_load(recipe_file.read_text(encoding="utf-8"))
    if recipe.get("task") != "translation":
        raise CompareError(f"{run_dir} is a {recipe.get('task')} run; compare scores "
                           "translations")
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
                 samples: int = 1000) -> dict[str, Any]:
    """Paired bootstrap of ``systems`` against ``baselines`` (as many of each, paired in
    order) on their test translations; references from the baselines' recipe data
    (``data_dir`` re-points a ``files`` corpus)."""
    from normzoo.data.sources import load_parallel
    from normzoo.inference.scoring import paired_bootstrap
    from normzoo.recipe import from_dict

    if len(baselines) != len(systems) or not baselines:
        raise CompareError(f"{len(baselines)} baseline and {len(systems)} system runs: give "
                           "as many of each (one per seed, paired in order)")
    base_hyps, sys_hyps, refs = [], [], []
    for base_dir, sys_dir in zip(baselines, systems, strict=True):
        base, split, recipe = _run(base_dir)
        other, other_split, _ = _run(sys_dir)
        if other_split != split or len(other) != len(base):
            raise CompareError(f"{sys_dir} translated {other_split} ({len(other)} lines) and "
                               f"{base_dir} {split} ({len(base)} lines): not the same test set")
        data = from_dict(recipe, check_registry=False).data
        if data_dir is not None:
            data = data.model_copy(update={"dir": str(data_dir), "source": "files"})
        references = load_parallel(data, split, data.valid_limit)[1]
        if len(references) != len(base):
            raise CompareError(f"{base_dir}: {len(base)} translations for {len(references)} "
                               f"references of {split}")
        base_hyps += base
        sys_hyps += other
        refs += references
    result = paired_bootstrap(base_hyps, sys_hyps, refs, samples=samples)
    return {"baselines": [str(p) for p in baselines], "systems": [str(p) for p in systems],
            "sentences": len(refs), "identical": base_hyps == sys_hyps, **result.as_dict()}


def direction(result: dict[str, Any]) -> tuple[float, str | None]:
    """The system's BLEU minus the baseline's, and which of the two is higher (None: equal)."""
    difference = result["system_bleu"] - result["baseline_bleu"]
    return difference, "system" if difference > 0 else "baseline" if difference < 0 else None


def scope(runs: int) -> str:
    """What the bootstrap resamples, and what it therefore does not test."""
    pooled = f"{runs} runs a side pooled" if runs > 1 else "one run a side"
    return (f"{pooled}: the bootstrap resamples sentences of these translations, so it tests "
            "them, not the variance between seeds (other seeds could give another difference)")


def format_comparison(result: dict[str, Any]) -> str:
    difference, better = direction(result)
    lines = [f"baseline BLEU {result['baseline_bleu']:.2f}, system BLEU "
             f"{result['system_bleu']:.2f} (bootstrap 95% CI ± {result['system_ci']:.2f}), "
             f"{result['sentences']} sentence pairs"]
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
        significant = result["p_value"] < 0.05
        verdict = (f"significant at 0.05: the {better} is better beyond chance"
                   if significant and better else
                   "not significant at 0.05: chance could give this difference, neither is "
                   "shown to be better")
        lines.append(f"p = {result['p_value']:.4f} (paired bootstrap, two-sided: a difference "
                     f"this large either way if the two were equally good): {verdict}")
    lines += [scope(len(result["systems"])), result["signature"]]
    return "\n".join(lines)


def with_direction(result: dict[str, Any]) -> dict[str, Any]:
    """The result with the difference, the higher of the two and what was tested, for JSON."""
    difference, better = direction(result)
    return {**result, "difference": difference, "better": None if result["identical"] else
            better, "p_value_two_sided": True, "tests": scope(len(result["systems"]))}


def to_json(result: dict[str, Any]) -> str:
    return json.dumps(with_direction(result), indent=2)
