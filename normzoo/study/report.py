"""``normzoo study report``: a study's cells read, every comparison judged under the rule, and the
page written: ``index.md``, its figures and ``verdicts.json``.

What has not finished is reported as missing, never guessed: a comparison is judged over the
seeds each side has finished, and the page lists the cells still to run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from normzoo.io.atomic import atomic_write_text
from normzoo.study.cells import Cell, read_part
from normzoo.study.results import PartResult, ScoreView, missing_cells
from normzoo.study.spec import PART, Part, Score, Study, setting_text

VERDICTS = "verdicts.json"
PAGE = "index.md"


def score_of(score: Score, task: Any) -> ScoreView:
    """The score as the task reads it: the task's compared test score by default."""
    if score.source == "task":
        key, better, unit = task.compared_score
        return ScoreView(score, f"test {key}", better, unit)
    return ScoreView(score, f"{score.source} {score.name}", str(score.better), score.unit)


def _recipe(part: Part) -> Any:
    from normzoo import recipe as recipes
    from normzoo.study.running import part_overrides

    return recipes.load(part.recipe, part_overrides(part))


def _run(cell: Cell, root: Path, value: float, task: Any, data_dir: Path | None,
         with_outputs: bool) -> Any:
    from normzoo.verdicts.rule import Run

    label = str(cell.folder.relative_to(root)) if cell.folder.is_relative_to(root) else str(
        cell.folder)
    return Run(label, cell.seed, value, cell.precision, cell.device, cell.identity,
               cell.outputs(task, data_dir) if with_outputs else None,
               json.dumps(cell.summary.get("test"), sort_keys=True, default=str)
               if cell.summary.get("test") else None)


def read_result(name: str, part: Part, folder: Path) -> PartResult:
    """One part's cells, task and score."""
    from normzoo.contract import task_of

    recipe = _recipe(part)
    task = task_of(recipe)
    return PartResult(name, part, read_part(part, folder, recipe.seed), task,
                      [score_of(score, task) for score in part.scores])


def side_runs(result: PartResult, setting: dict[str, Any], view: ScoreView, root: Path,
              data_dir: Path | None) -> list[Any]:
    """The finished runs of one setting of a part, as the rule reads them."""
    cells = result.cells
    index = cells.settings.index({k: v for k, v in setting.items() if k != PART})
    return [_run(c, root, value, result.task, data_dir, view.resampled)
            for c in cells.finished(index)
            if (value := c.score(view.score, result.task)) is not None]


def judge(baseline: tuple[PartResult, dict[str, Any]], system: tuple[PartResult,
          dict[str, Any]], score: int, margin: float | None, root: Path,
          data_dir: Path | None, samples: int) -> dict[str, Any]:
    """One comparison's row of ``verdicts.json``, over the seeds each side has finished."""
    from normzoo.verdicts.distinct import NotDistinct
    from normzoo.verdicts.rule import REFUSED, compare

    (base_part, base_setting), (sys_part, sys_setting) = baseline, system
    same = base_part is sys_part
    view = base_part.scores[score]
    margin = view.score.margin if view.score.margin is not None else margin
    other = next((v for v in sys_part.scores if v.name == view.name), sys_part.scores[0])
    row: dict[str, Any] = {
        "part": base_part.name if same else f"{sys_part.name} vs {base_part.name}",
        "across_parts": not same,
        "baseline_setting": _named(base_part, base_setting, same),
        "system_setting": _named(sys_part, sys_setting, same), "score": view.name,
        "better": view.better, "unit": view.unit, "margin": margin}
    if (other.name, sys_part.task.name) != (view.name, base_part.task.name):
        return {**row, "verdict": REFUSED, "rule_p": None, "reason": (
            f"{sys_part.name} scores {sys_part.task.name}'s {other.name} and "
            f"{base_part.name} {base_part.task.name}'s {view.name}: not comparable")}
    sides = [side_runs(p, s, v, root, data_dir)
             for (p, s), v in ((baseline, view), (system, other))]
    if not sides[0] or not sides[1]:
        return {**row, "verdict": "missing", "reason": "a side has no finished run yet",
                "rule_p": None}
    try:
        row.update(compare(*sides, better=view.better, margin=margin, samples=samples,
                           no_examples=None if view.resampled else
                           f"the {view.name} is one number a run",
                           varied=varied(baseline, system)))
    except NotDistinct as error:
        row.update(verdict=REFUSED, reason=str(error), rule_p=None)
    return row


VARIED = {"trainer.precision": "precision", "trainer.accelerator": "device"}


def varied(*sides: tuple[PartResult, dict[str, Any]]) -> set[str]:
    """What a comparison is about among the kinds the rule otherwise holds equal: the
    precision where its two settings set ``trainer.precision`` apart, the device likewise."""
    values = [{**part.part.overrides, **setting} for part, setting in sides]
    return {kind for key, kind in VARIED.items()
            if len({str(v.get(key)) for v in values}) > 1}


def _named(part: PartResult, setting: dict[str, Any], same: bool) -> str:
    text = setting_text({k: v for k, v in setting.items() if k != PART})
    return text if same else f"{part.name}" + ("" if text == setting_text({}) else
                                               f" ({text})")


def report(study: Study, runs: Path | None = None, out: Path | None = None,
           data_dir: Path | None = None, samples: int = 1000) -> list[PartResult]:
    """Judge every part's comparisons, write ``verdicts.json``, the figures and the page into
    ``out`` (default: the study's run folder), and return what was judged. An ``out`` apart
    from the runs gets a copy of the cells it reads (:mod:`.collect`), read from there."""
    from normzoo.study import figures, page
    from normzoo.verdicts.rule import holm_over

    runs = runs or study.out
    out = out or runs
    out.mkdir(parents=True, exist_ok=True)
    if out.resolve() != runs.resolve() and (out / "data").resolve() != runs.resolve():
        from normzoo.study.collect import copy_part

        for name in {p.folder or n for n, p in study.parts.items()}:  # rebuilt from the copy
            copy_part(runs / name, out / "data" / name)
        runs = out / "data"
    parts = [read_result(name, part, runs / (part.folder or name))
             for name, part in study.parts.items()]
    by_name = {p.name: p for p in parts}
    for result in parts:
        result.rows = [judge((result, pair.baseline), (result, pair.system), score,
                             pair.margin, runs, data_dir, samples)
                       for pair in result.part.pairs() for score in range(len(result.scores))]
    across = [judge((by_name[c.baseline[PART]], c.baseline), (by_name[c.system[PART]],
                                                                c.system), score, c.margin,
                    runs, data_dir, samples) for c in study.comparisons
              for score, view in enumerate(by_name[c.baseline[PART]].scores)
              if view.name in {v.name for v in by_name[c.system[PART]].scores}]
    if across:
        parts[-1].rows += across  # shown after the parts' own, under the last part
    rows = [row for p in parts for row in p.rows]
    holm_over(rows, study.alpha)
    drawn = {p.name: figures.draw(p, out) for p in parts}
    drawn[""] = {f"{c.system[PART]} against {c.baseline[PART]}": name for c in study.comparisons
                 if (name := figures.across((by_name[c.baseline[PART]], c.baseline),
                                            (by_name[c.system[PART]], c.system), out))}
    atomic_write_text(out / VERDICTS, json.dumps(
        {"study": study.name, "question": study.question, "alpha": study.alpha,
         "missing": {p.name: missing_cells(p) for p in parts}, "comparisons": rows},
        indent=2, default=str) + "\n", "study verdicts")
    own = [line for section in study.sections for line in own_section(study, section, parts,
                                                                      out)]
    atomic_write_text(out / PAGE, page.render(study, parts, drawn, runs, own), "study page")
    return parts


def own_section(study: Study, section: str, parts: list[PartResult], out: Path) -> list[str]:
    """One of the study's own sections (``FILE.py:function``), as Markdown lines."""
    import importlib.util

    from normzoo.errors import ConfigError, Problem

    file, _, function = section.partition(":")
    path = study.file.resolve().parent / file
    spec = importlib.util.spec_from_file_location(f"normzoo_study_{path.stem}", path)
    if spec is None or spec.loader is None or not path.is_file() or not function:
        raise ConfigError([Problem("sections", f"{section}: give FILE.py:function, the file "
                                   "relative to the study file")], "invalid study")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [*getattr(module, function)(study, parts, out).rstrip().splitlines(), ""]
