"""A sweep's grid: ``--set`` axes parsed, every combination of their values, and each cell's
overrides and folder name. Shared by the sweep, which trains the cells, and its plots, which
name them."""

from __future__ import annotations

import itertools
import re

from normzoo.errors import ConfigError, Problem


def split_values(values: str) -> list[str]:
    """``V1,V2,...`` split on the commas outside brackets, so that a value may be a YAML
    mapping or list: ``deepnorm,{name: admin, init: profiled}`` is two values."""
    parts, depth, current = [], 0, ""
    for char in values:
        depth += (char in "[{") - (char in "]}")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [v.strip() for v in [*parts, current] if v.strip()]


def parse_grid(settings: list[str], option: str = "--set") -> list[tuple[str, list[str]]]:
    """``["model.residual=post,pre", "optim.warmup_steps=0,4000"]`` -> keys with their values.

    Several keys before the ``=`` move together: ``model.encoder_layers,model.decoder_layers=6,18``
    is one axis (6+6 and 18+18 layers). A value may be a YAML mapping, e.g. a scheme with its
    options: ``model.residual=deepnorm,{name: admin, init: profiled}``.

    Refused, every problem at once (``option`` names the flag in the messages): an axis that is
    not ``KEY=V1,V2,...``; a value given twice on one axis, or two values that name the same
    folder (``seed=1,1``, ``admin,{name: admin}``), which would be one cell trained once where
    two were asked for; a key on two axes, whose cells would set it twice.
    """
    grid, problems = [], []
    for text in settings:
        key, _, values = text.partition("=")
        axis = split_values(values)
        if not key.strip() or not axis:
            problems.append(Problem(text, f"{option} must look like KEY=V1,V2,... "
                                    "(e.g. model.residual=post,pre)"))
            continue
        names = [folder_safe(value_name(value)) for value in axis]
        if twice := sorted({name for name in names if names.count(name) > 1}):
            problems.append(Problem(text, f"{', '.join(twice)} given more than once: the "
                                    "values of an axis must differ, each is one cell"))
        grid.append((key.strip(), axis))
    keys = [key.strip() for axis, _ in grid for key in axis.split(",")]
    if twice := sorted({key for key in keys if keys.count(key) > 1}):
        problems.append(Problem(", ".join(twice), f"named by {option} more than once; give "
                                f"each key one {option} with all its values"))
    if problems:
        raise ConfigError(problems, "invalid sweep" if option == "--set" else f"invalid {option}")
    return grid


def cells(grid: list[tuple[str, list[str]]]) -> list[dict[str, str]]:
    """Every combination, as ``{axis: value}`` (an axis may name several tied keys)."""
    return [dict(zip([k for k, _ in grid], combo, strict=True))
            for combo in itertools.product(*[values for _, values in grid])]


def label(axis: str) -> str:
    """Short name of an axis: its first key's last part (``model.residual`` -> ``residual``)."""
    return axis.split(",")[0].split(".")[-1]


def cell_overrides(cell: dict[str, str]) -> list[str]:
    return [f"{key.strip()}={value}" for axis, value in cell.items() for key in axis.split(",")]


def value_name(value: str) -> str:
    """A value as a name: a mapping by its entries (``{name: admin, init: profiled}`` ->
    ``admin-init-profiled``), anything else as written."""
    from normzoo.recipe.reading import parse_yaml

    try:
        parsed = parse_yaml(value) if value.lstrip().startswith("{") else None
    except Exception:
        parsed = None
    if isinstance(parsed, dict):
        return "-".join([str(parsed.get("name", "")),
                         *(f"{k}-{v}" for k, v in parsed.items() if k != "name")]).strip("-")
    return value


def cell_name(cell: dict[str, str]) -> str:
    """A folder-safe name: ``{model.residual: post, model.encoder_layers: 6}`` ->
    ``residual-post_encoder_layers-6``."""
    return folder_safe("_".join(f"{label(key)}-{value_name(value)}" for key, value in cell.items()))


def folder_safe(text: str) -> str:
    """``text`` with every character a folder name may not safely hold (on any filesystem, in
    any shell) made ``_``: cell folders are named from values such as ``{name: admin}``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)
