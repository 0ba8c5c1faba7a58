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


def parse_grid(settings: list[str]) -> list[tuple[str, list[str]]]:
    """``["model.residual=post,pre", "optim.warmup_steps=0,4000"]`` -> keys with their values.

    Several keys before the ``=`` move together: ``model.encoder_layers,model.decoder_layers=6,18``
    is one axis (6+6 and 18+18 layers). A value may be a YAML mapping, e.g. a scheme with its
    options: ``model.residual=deepnorm,{name: admin, init: profiled}``.
    """
    grid = []
    for text in settings:
        key, _, values = text.partition("=")
        if not key or not values:
            raise ConfigError([Problem(text, "--set must look like KEY=V1,V2,...")],
                              "invalid sweep")
        grid.append((key.strip(), split_values(values)))
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
    parts = [f"{label(key)}-{value_name(value)}" for key, value in cell.items()]
    return re.sub(r"[^A-Za-z0-9_.-]", "_", "_".join(parts))
