"""The study's page (``index.md``): the question, how the cells ran, what is missing, the scores
over seeds, every verdict with its tests and the reason whenever it is capped, the figures, and
the study's own prose (``intro`` before, ``notes`` after)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from normzoo.study.spec import Study, setting_text, value_text
from normzoo.verdicts.significance import p_text

if TYPE_CHECKING:
    from normzoo.study.results import PartResult, ScoreView


def _fmt(value: float | None, digits: int) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _digits(unit: str, values: list[float]) -> int:
    """Two decimals for BLEU and for scores in the tens (chrF, percentages), four for losses and
    fractions."""
    return 2 if unit == "BLEU" or (values and max(abs(v) for v in values) >= 10) else 4


def _signed(value: float | None, digits: int) -> str:
    return "–" if value is None else f"{value:+.{digits}f}"


def _prose(path: Path | None) -> list[str]:
    return [path.read_text(encoding="utf-8").rstrip(), ""] if path else []


def render(study: Study, parts: list[PartResult], drawn: dict[str, dict[str, str]],
           runs: Path, own: Sequence[str] = ()) -> str:
    from normzoo.study.results import missing_cells

    lines = [f"# {study.name}", "", f"> {study.question}", "",
             "<!-- written by `normzoo study report`: edit the study file or its prose, "
             "and report again -->", "", *_prose(study.intro), "## How it ran", "",
             f"The study file `{study.file.name}`: `normzoo study run` trained its cells, "
             "`normzoo study report` wrote this page.", ""]
    for part in parts:
        lines += _how(part, study, runs)
    if any(missing_cells(p) for p in parts):
        lines += ["## Not finished yet", "",
                  "This page reports the cells that have finished; `normzoo study run "
                  f"{study.file}` trains the rest (finished cells are kept):", ""]
        lines += [f"- {p.name}: {m}" for p in parts for m in missing_cells(p)] + [""]
    lines += ["## Scores over seeds", ""]
    for part in parts:
        lines += _scores(part)
    lines += ["## Verdicts", "", *_rule(study), "", *_verdicts(parts, study)]
    if drawn.get(""):
        lines += ["### Figures: the comparisons across parts", ""]
        lines += [f"![{what}]({name})" for what, name in drawn[""].items()] + [""]
    for part in parts:
        figures = drawn.get(part.name, {})
        if figures:
            lines += [f"### Figures: {part.part.title or part.name}", ""]
            lines += [f"![{what} of {part.name}]({name})" for what, name in figures.items()]
            lines.append("")
    lines += [*own, *_prose(study.notes)]
    return "\n".join(lines).rstrip() + "\n"


def _how(part: PartResult, study: Study, runs: Path) -> list[str]:
    from normzoo.study.results import stopped_reasons

    cells = [c for cells in part.cells.cells.values() for c in cells]
    done = [c for c in cells if c.status == "ok"]
    walls = [w for c in done if (w := c.summary.get("train_wall_s")) is not None]
    steps = [int(s) for c in done if isinstance(s := c.summary.get("steps"), int)]
    devices = sorted({c.device or "not recorded" for c in done})
    precisions = sorted({c.precision or "not recorded" for c in done})
    overrides = ", ".join(f"`{k}={value_text(v)}`" for k, v in part.part.overrides.items())
    grid = "; ".join(f"`{k}`: {', '.join(value_text(v) for v in vs)}"
                     for k, vs in part.part.grid.items()) or "none"
    folder = part.part.folder or part.name
    lines = [f"**{part.part.title or part.name}** (cells in `{folder}/`): recipe "
             f"`{part.part.recipe.name}`" + (f" with {overrides}" if overrides else "")
             + f"; grid {grid}; seeds {', '.join(map(str, part.part.seeds))}; "
             f"{part.task.name}, compared on " + "; ".join(
                 f"the {v.name}" + (f" ({v.unit})" if v.unit else "")
                 + f", {'higher' if v.better == 'max' else 'lower'} is better"
                 for v in part.scores) + ".", ""]
    total = len(part.cells.settings) * len(part.part.seeds)
    status = {s: sum(c.status == s for c in cells) for s in ("ok", "diverged", "failed")}
    lines.append(f"- cells: {status['ok']} of {total} finished, {status['diverged']} diverged, "
                 f"{status['failed']} failed")
    if steps:
        lines.append(f"- updates per finished cell: {min(steps)}–{max(steps)}; why training "
                     "stopped: " + ", ".join(f"{k} ({n})" for k, n in
                                             stopped_reasons(done).most_common()))
    if walls:
        lines.append(f"- training wall time per cell: {min(walls):.0f}–{max(walls):.0f} s "
                     f"(median {statistics.median(walls):.0f} s)")
    lines.append(f"- devices: {', '.join(devices)}; precisions: {', '.join(precisions)}")
    machines = sorted({str((c.summary.get("machine") or {}).get("cpu") or (
        c.summary.get("machine") or {}).get("gpu") or "not recorded") for c in done})
    lines += [f"- machines: {', '.join(machines)}", ""]
    return lines


def _scores(part: PartResult) -> list[str]:
    return [line for view in part.scores for line in _score_table(part, view)]


def _score_table(part: PartResult, view: ScoreView) -> list[str]:
    values_all = [v for i in range(len(part.cells.settings)) for c in part.cells.finished(i)
                  if (v := c.score(view.score, part.task)) is not None]
    digits = _digits(view.unit, values_all)
    lines = [f"{part.part.title or part.name}: {view.name}"
             + (f" ({view.unit})" if view.unit else ""), "",
             "| setting | seeds finished | mean ± sd | per seed | diverged | failed |",
             "|---|---|---|---|---|---|"]
    for index, setting in enumerate(part.cells.settings):
        cells = part.cells.cells.get(index, [])
        scored = [(c.seed, v) for c in part.cells.finished(index)
                  if (v := c.score(view.score, part.task)) is not None]
        values = [v for _, v in scored]
        mean = statistics.fmean(values) if values else None
        sd = statistics.stdev(values) if len(values) > 1 else None
        lines.append(f"| {setting_text(setting)} | {', '.join(s for s, _ in scored) or '–'} | "
                     f"{_fmt(mean, digits)}{'' if sd is None else f' ± {sd:.{digits}f}'} | "
                     f"{', '.join(f'{v:.{digits}f}' for v in values) or '–'} | "
                     f"{sum(c.status == 'diverged' for c in cells)} | "
                     f"{sum(c.status == 'failed' for c in cells)} |")
    return [*lines, ""]


def _rule(study: Study) -> list[str]:
    return [f"A difference is **shown** only where the example-level test is below "
            f"{study.alpha:g}: a two-sided hierarchical test over the runs' per-example test "
            "outputs whose noise holds the test set's (the examples resampled) and the seeds' "
            "(the spread of the seeds' t-test, paired where both sides ran the same seeds, else "
            "Welch's), with three seeds a side or more, every run's precision and device "
            "recorded and one of each; otherwise it is at most **indicated**, and the reason "
            "says what capped it. The seeds' t-test is given beside it; for runs that kept no "
            "per-example outputs, and for scores that are one number a run, it decides alone. "
            "**Equal** is said only from two one-sided tests against the margin the study "
            "states. Holm's correction is taken over the study's comparisons, on the p-value "
            "each is decided by. The tests' false-alarm rates under true nulls are measured by "
            "`python -m normzoo.verdicts.calibration` (normzoo's `docs/verdicts/null-rates.md`)."]


def _verdicts(parts: list[PartResult], study: Study) -> list[str]:
    lines = ["| part | system vs baseline | score | baseline | system | difference | seeds' test "
             "p | example-level p | 95% interval | TOST p | Holm | devices, precisions | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    reasons = []
    for part in parts:
        for row in part.rows:
            where = "" if row.get("across_parts") else f"{row['part']}, "
            reasons.append(f"{len(reasons) + 1}. {where}{row['system_setting']} against "
                           f"{row['baseline_setting']}: **{row['verdict']}**: {row['reason']}")
            lines.append(_row(part, row, len(reasons)))
    return [*lines, "", *reasons, ""]


def _side(side: dict[str, Any] | None, digits: int) -> str:
    """A side's mean ± sd (its runs), the sd left out for one run."""
    if not side:
        return "–"
    spread = f" ± {side['sd']:.{digits}f}" if len(side["runs"]) > 1 else ""
    return f"{side['mean']:.{digits}f}{spread} ({len(side['runs'])})"


def _row(part: PartResult, row: dict[str, Any], number: int) -> str:
    base, system = row.get("baseline"), row.get("system")
    digits = _digits(row["unit"], [*(base or {}).get("scores", []),
                                 *(system or {}).get("scores", [])])
    interval = row.get("seed_interval")
    kinds = sorted({f"{d or '?'} {p or '?'}" for side in (base, system) if side
                    for d, p in zip(side["devices"], side["precisions"], strict=True)})
    holm = {True: "kept", False: "not kept"}.get(row.get("holm_kept"), "–") \
        if row.get("rule_p") is not None else "–"
    where = "(across parts)" if row.get("across_parts") else row["part"]
    return (f"| {where} | {row['system_setting']} vs {row['baseline_setting']} | "
            f"{row['score']} | "
            f"{_side(base, digits)} | {_side(system, digits)} | "
            f"{_signed(row.get('difference'), digits)} | {p_text(row.get('seed_p'))} | "
            f"{p_text(row.get('example_p'))} | "
            + (f"{interval[0]:+.{digits}f} to {interval[1]:+.{digits}f}" if interval else "–")
            + f" | {p_text(row.get('equivalence_p'))} | {holm} | {', '.join(kinds) or '–'} | "
            f"{row['verdict']} ({number}) |")
