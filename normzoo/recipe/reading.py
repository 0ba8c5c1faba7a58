"""Reading recipe YAML safely: the safe loader, duplicate keys refused, and a shape check that
stops alias bombs and cycles before anything copies or validates the data.

Nothing in a recipe is ever imported or executed.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import yaml

from normzoo.errors import ConfigError, Problem

# A recipe is at most four levels deep (model.residual.option: [list]); anything far deeper is
# a mistake, and would exhaust Python's recursion limit in copying or validation.
MAX_DEPTH = 16


class _RecipeLoader(yaml.SafeLoader):
    """The safe loader, refusing duplicate keys: YAML forbids them, and PyYAML would otherwise
    keep the last of two ``model:`` sections without a word."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` may be overridden
                continue
            key = self.construct_object(key_node, deep=True)
            with contextlib.suppress(TypeError):  # an unhashable key: the base class says so
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"found duplicate key '{key}'", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep)


class Unreadable(Exception):
    """YAML text that gives no plain data; the message says why, in one line."""


def parse_yaml(text: str) -> Any:
    """``text`` as plain data (safe loader); :class:`Unreadable` whatever the reason it is not."""
    try:
        data = yaml.load(text, Loader=_RecipeLoader)  # a SafeLoader: no Python objects
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise Unreadable(f"malformed YAML{where}: {problem}") from None
    except RecursionError:
        raise Unreadable(f"malformed YAML: nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as error:  # a constructor's own check: 2001-02-30, a 5000-digit number
        reason = str(error).split(";")[0]
        raise Unreadable(f"malformed YAML: a value cannot be read ({reason})") from None
    problem = shape_problem(data)
    if problem is not None:
        raise Unreadable(problem)
    return data


def _containers(node: Any) -> list[Any]:
    values = node.values() if isinstance(node, dict) else node if isinstance(
        node, list | tuple) else ()
    return [value for value in values if isinstance(value, dict | list | tuple)]


def shape_problem(data: Any) -> str | None:
    """Why ``data`` is no recipe-shaped plain data (too deep, or containing itself), or None.

    Iterative, and each shared node is visited once: YAML aliases can make a small file a
    structure with billions of paths ("billion laughs") or a cycle.
    """
    height: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        node, expanded = stack.pop()
        children = _containers(node)
        if expanded:
            on_path.discard(id(node))
            height[id(node)] = 1 + max((height[id(child)] for child in children), default=0)
        elif id(node) in on_path:
            return "contains itself (a YAML alias *x inside the anchor &x it refers to)"
        elif id(node) not in height:
            on_path.add(id(node))
            stack.append((node, True))
            stack += [(child, False) for child in children]
    depth = height.get(id(data), 0)
    if depth > MAX_DEPTH:
        return f"nested {depth} levels deep; a recipe needs at most 4 (the limit is {MAX_DEPTH})"
    return None


def check_shape(data: Any, title: str) -> None:
    problem = shape_problem(data)
    if problem is not None:
        raise ConfigError([Problem("", problem)], title)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """The recipe file as a dict; a clear error for a missing file or malformed YAML."""
    path = Path(path)
    if path.is_dir():  # a run directory, most often, given where its recipe was meant
        hint = (f"; its recipe is {path / 'recipe.yaml'} (to continue that run: normzoo train "
                f"{path / 'recipe.yaml'} --resume auto)" if (path / "recipe.yaml").is_file()
                else "; give a recipe YAML file, such as recipes/quickstart.yaml")
        raise ConfigError([Problem("", f"{path} is a directory, not a recipe file{hint}")],
                          "cannot read recipe")
    if not path.is_file():
        raise ConfigError([Problem("", f"recipe file not found: {path}")], "cannot read recipe")
    try:
        data = parse_yaml(path.read_text(encoding="utf-8"))
    except Unreadable as error:
        raise ConfigError([Problem("", f"{path}: {error}")], "cannot read recipe") from None
    except UnicodeDecodeError:
        raise ConfigError([Problem("", f"{path}: not UTF-8 text")], "cannot read recipe") from None
    except OSError as error:  # unreadable (permissions, an I/O error)
        raise ConfigError([Problem("", f"{path}: {error.strerror or error}")],
                          "cannot read recipe") from None
    if data is None:  # no text, only whitespace or comments: not "every default" by mistake
        raise ConfigError([Problem("", f"recipe file {path} is empty; a recipe needs at least its "
                                   "task (write '{}' to mean every default)")],
                          "cannot read recipe")
    if not isinstance(data, dict):
        raise ConfigError([Problem("", f"{path}: the top level must be a mapping of sections")],
                          "cannot read recipe")
    return data
