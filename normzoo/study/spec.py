"""A study file: the question, the recipes it trains, the grid, the seeds and the comparisons,
validated once into a :class:`Study` that ``normzoo study run`` and ``report`` are given.

A study is one or more *parts*, each a sweep of its own (a recipe, its overrides, grid axes and
seeds) in ``OUT/<part>/``; the top level's keys are every part's defaults, so a one-recipe study
names no part at all. Each part compares its settings with its baseline setting(s), or with the
pairs its ``comparisons`` list. Paths in the file are read relative to the file.

.. code-block:: yaml

    question: Does Post-LN trail Pre-LN in the quick-start model at 300 updates?
    recipe: ../recipes/quickstart.yaml
    overrides: {trainer.max_steps: 300}
    grid: {model.residual: [pre, post]}
    seeds: [1, 2, 3]
    baseline: {model.residual: pre}
    margin: 1.0            # BLEU: "equal" may be said within ± 1
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pydantic

from normzoo.errors import ConfigError, Problem

Setting = dict[str, Any]  # {grid key: value}: one setting of a part's axes (the seed left out)
SEED = "seed"
PART = "part"  # a comparison across parts names each side's part


class Score(pydantic.BaseModel):
    """What a comparison compares. ``task``: the task's compared test score
    (:attr:`~normzoo.contract.task.Task.compared_score`), the only one with per-example
    outputs to resample; else a scalar the run recorded: ``validation`` (the best checkpoint's
    validation metrics in ``summary.json``, e.g. ``val/loss``), ``test`` (its test scores) or
    ``diagnose`` (a column of ``diagnose.csv`` at the last checkpoint: the stream norm after
    the last layer by default), with which way is better and its unit."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    source: Literal["task", "validation", "test", "diagnose"] = "task"
    name: str | None = None
    better: Literal["min", "max"] | None = None
    unit: str = ""
    #: "Equal" within ± margin for this score (in its unit), over the comparison's own.
    margin: float | None = pydantic.Field(None, gt=0, allow_inf_nan=False)

    @pydantic.model_validator(mode="after")
    def _named(self) -> Score:
        if self.source != "task" and (not self.name or self.better is None):
            raise ValueError(f"a {self.source} score needs its name and better (min or max)")
        return self


class Comparison(pydantic.BaseModel):
    """One pair of settings of a part: the system's runs against the baseline's."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    baseline: Setting
    system: Setting
    margin: float | None = pydantic.Field(None, gt=0, allow_inf_nan=False)


class Part(pydantic.BaseModel):
    """One sweep of the study: a recipe, its overrides, the grid, the seeds, and what it
    compares. Keys left out take the study's top-level values."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    recipe: Path
    overrides: dict[str, Any] = {}
    grid: dict[str, list[Any]] = {}
    seeds: list[int] = pydantic.Field([1, 2, 3], min_length=1)
    baseline: list[Setting] = []
    comparisons: list[Comparison] = []
    scores: list[Score] = pydantic.Field([Score()], alias="score", min_length=1)
    margin: float | None = pydantic.Field(None, gt=0, allow_inf_nan=False)
    diagnose: bool = False
    title: str = ""
    #: The part's folder under the study's runs (default: its name); two parts may share one,
    #: each reading the cells of its own axes.
    folder: str | None = None

    @pydantic.field_validator("baseline", mode="before")
    @classmethod
    def _one_or_more(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value

    @pydantic.field_validator("scores", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        """One score or a list; ``task`` is ``{source: task}``."""
        value = [value] if isinstance(value, dict | str) else value
        return [{"source": v} if isinstance(v, str) else v for v in value] if isinstance(
            value, list) else value

    @pydantic.model_validator(mode="after")
    def _consistent(self) -> Part:
        problems = []
        if SEED in self.grid or SEED in self.overrides:
            problems.append("the seeds are the study's `seeds`, not a grid axis or override")
        for key, values in self.grid.items():
            if not values:
                problems.append(f"grid axis {key} has no values")
        settings = [*self.baseline, *(s for c in self.comparisons for s in (c.baseline,
                                                                             c.system))]
        for setting in settings:
            if set(setting) != set(self.grid) or any(
                    setting[k] not in self.grid[k] for k in setting):
                problems.append(f"{setting} is not a setting of the grid {self.grid}")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def settings(self) -> list[Setting]:
        """Every setting of the grid's axes, in the grid's order."""
        import itertools

        keys = list(self.grid)
        return [dict(zip(keys, combo, strict=True))
                for combo in itertools.product(*self.grid.values())]

    def pairs(self) -> list[Comparison]:
        """What the part compares: its ``comparisons``, or every other setting against each
        baseline setting."""
        if self.comparisons:
            return [c if c.margin is not None else c.model_copy(update={"margin": self.margin})
                    for c in self.comparisons]
        return [Comparison(baseline=base, system=other, margin=self.margin)
                for base in self.baseline for other in self.settings() if other != base]


class Study(pydantic.BaseModel):
    """A whole study file."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    name: str
    question: str
    parts: dict[str, Part]
    out: Path
    alpha: float = pydantic.Field(0.05, gt=0, lt=1)
    comparisons: list[Comparison] = []
    intro: Path | None = None
    notes: Path | None = None
    #: Sections of the study's own, ``FILE.py:function`` (relative to the study file): each is
    #: called with the study, its judged parts and the page's folder, and returns Markdown put
    #: after the verdicts (what is particular to one study: a table from elsewhere, a figure).
    sections: list[str] = []
    file: Path


# A part's keys (a top-level one is every part's default); `comparisons` is the one part's, or,
# with parts, the study's own.
PART_KEYS = {f.alias or name for name, f in Part.model_fields.items()} - {"comparisons"}


def _across(study: Study) -> list[Problem]:
    """The study-level comparisons: each side names a part and one of its settings."""
    problems = []
    for i, pair in enumerate(study.comparisons):
        for side in ("baseline", "system"):
            setting = dict(getattr(pair, side))
            part = study.parts.get(str(setting.pop(PART, "")))
            where = f"comparisons.{i}.{side}"
            if part is None:
                problems.append(Problem(where, f"name its part: one of {', '.join(study.parts)}"))
            elif setting not in part.settings():
                problems.append(Problem(where, f"{setting} is not a setting of the grid "
                                        f"{part.grid}"))
    return problems


def load_study(path: Path, echo: Callable[[str], object] | None = None) -> Study:
    """The study file at ``path``, validated (every problem at once, exit 2). A part's
    ``recipe`` is a path relative to the file or, where there is no such file, a recipe shipped
    with normzoo (:mod:`normzoo.recipe.shipped`); ``echo`` is given the line that says so."""
    from normzoo.recipe.reading import read_yaml
    from normzoo.recipe.shipped import find, name_of, shipped_line
    from normzoo.registry.options import pydantic_problems

    try:
        data = read_yaml(path)
    except ConfigError as error:
        raise ConfigError([Problem("", str(p).replace("recipe", "study"))
                           for p in error], "cannot read study") from None
    here = path.resolve().parent
    # Without parts, `comparisons` are the one part's; with parts, they pair settings of two
    # parts (each side names its part) and each part lists its own under its name.
    defaults = {k: v for k, v in data.items()
                if k in PART_KEYS or (k == "comparisons" and "parts" not in data)}
    parts_data = data.get("parts") or {"main": {}}
    if not isinstance(parts_data, dict):
        raise ConfigError([Problem("parts", "must map each part's name to its keys")],
                          "invalid study")
    parts, problems = {}, []
    for name, given in parts_data.items():
        merged = {**defaults, **(given or {})}
        if isinstance(merged.get("overrides"), list):
            merged["overrides"] = dict(str(o).partition("=")[::2] for o in merged["overrides"])
        try:
            part = Part.model_validate(merged)
        except pydantic.ValidationError as error:
            problems += pydantic_problems(error, "" if name == "main" and "parts" not in data
                                          else f"parts.{name}", Part)
            continue
        recipe = here / part.recipe
        shipped = None if recipe.exists() else find(part.recipe)
        if shipped is not None:
            recipe = shipped
            if echo is not None:
                echo(shipped_line(str(name_of(shipped)), part.recipe))
        parts[str(name)] = part.model_copy(update={"recipe": recipe})
    top = {k: v for k, v in data.items() if k not in PART_KEYS and k not in ("parts",
                                                                              "comparisons")}
    top["comparisons"] = data.get("comparisons") or [] if "parts" in data else []
    top.setdefault("name", path.stem)
    top.setdefault("out", f"runs/study-{path.stem}")
    for key in ("intro", "notes"):
        if top.get(key):
            top[key] = here / str(top[key])
    try:
        study = Study.model_validate({**top, "parts": {}, "file": path})
    except pydantic.ValidationError as error:
        problems += pydantic_problems(error, "", Study)
        study = None
    problems = [Problem(p.path, p.message.removeprefix("Value error, ")) for p in problems]
    if problems or study is None:
        raise ConfigError(problems, f"invalid study {path}")
    for name, part in parts.items():
        if not part.recipe.is_file():
            problems.append(Problem(f"parts.{name}.recipe" if "parts" in data else "recipe",
                                    f"recipe file not found: {part.recipe}"))
    study = study.model_copy(update={"parts": parts})
    problems += _across(study)
    if problems:
        raise ConfigError(problems, f"invalid study {path}")
    return study


def value_text(value: Any) -> str:
    """A grid value as a ``key=value`` override and a sweep's ``--set`` value (a mapping in
    YAML's flow style: ``{name: admin, init: profiled}``)."""
    import yaml

    if isinstance(value, dict | list):
        return yaml.safe_dump(value, default_flow_style=True, sort_keys=False).strip()
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def setting_text(setting: Setting) -> str:
    """A setting in words, for tables: ``residual=pre, norm=rmsnorm`` (the keys' last parts)."""
    from normzoo.recipe.grid import label

    return ", ".join(f"{label(k)}={value_text(v)}" for k, v in setting.items()) or "(the recipe)"
