"""``normzoo recipe``: the sub-app that reads recipes without training, created and filled here
so that the group and its commands (``list``, ``copy``, ``show``, ``validate``) are found in one
place; and :func:`chosen`, how every command that takes a recipe reads its argument (a file, or
a recipe shipped with normzoo: :mod:`normzoo.recipe.shipped`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from normzoo.cli.common import OVERRIDES_HELP, file_system_failures, user_errors
from normzoo.errors import NormzooError

if TYPE_CHECKING:
    from normzoo.recipe.data import DataConfig
    from normzoo.recipe.shipped import Resolved

#: The help of every command's RECIPE argument.
RECIPE_HELP = ("Recipe YAML file, or the name of a recipe shipped with normzoo (normzoo recipe "
               "list); a file of that name wins.")

app = typer.Typer(help="The shipped recipes (list, copy), and any recipe printed resolved or "
                  "validated.", no_args_is_help=True)


def chosen(recipe: Path) -> Resolved:
    """What the RECIPE argument names (a file, else a shipped recipe: exit 2 for neither),
    saying so first on stderr where a shipped recipe is read or a file hides one."""
    from normzoo.recipe.shipped import resolve

    resolved = resolve(recipe)
    if resolved.note is not None:
        typer.echo(resolved.note, err=True)
    return resolved


def _data(data: DataConfig) -> str:
    """``builtin``, ``files:DIR`` or ``hub:PATH (NAME)``: what the data source reads."""
    if data.source == "files":
        return f"files:{data.dir}"
    if data.source == "hub":
        return f"hub:{data.path}" + (f" ({data.name})" if data.name else "")
    return str(data.source)


def _row(path: Path) -> tuple[str, str, str]:
    """TASK, MODEL (family, residual scheme/norm) and DATA of the recipe at ``path``, its
    bases merged in, validated without the registry (a plugin's scheme is listed by name)."""
    from normzoo.errors import ConfigError
    from normzoo.recipe import from_dict, read_recipe

    try:
        recipe = from_dict(read_recipe(path), check_registry=False)
    except ConfigError:
        return "?", "? (invalid recipe)", "?"
    model = recipe.model
    return (recipe.task, f"{model.family} {model.residual.name}/{model.norm.name}",
            _data(recipe.data))


@app.command("list")
@user_errors
def list_recipes() -> None:
    """List the recipes shipped with normzoo: name, task, model (family, residual scheme/norm),
    data, and what each is for. Any of them trains by name (normzoo train NAME); normzoo
    recipe copy NAME writes one out to edit."""
    from normzoo.recipe.shipped import SUFFIX, folder, names, purpose, version

    shipped = [(name, folder() / f"{name}{SUFFIX}") for name in names()]
    if not shipped:
        raise NormzooError(f"no recipes are installed with normzoo (looked in {folder()})")
    table = [("NAME", "TASK", "MODEL", "DATA", "")] + [(name, *_row(path), purpose(path))
                                                         for name, path in shipped]
    widths = [max(len(row[i]) for row in table) for i in range(3)]
    for i, row in enumerate(table):
        line = "  ".join(f"{cell:<{width}}" for cell, width in zip(row, widths, strict=False))
        typer.secho(f"{line}  {row[3]}", bold=i == 0)
        if row[4]:
            typer.echo(f"    {row[4]}")
    typer.echo(f"\n{len(shipped)} recipes shipped with normzoo {version()} ({folder()}): "
               "normzoo train NAME trains one, normzoo recipe copy NAME writes it out to edit.")


@app.command("copy")
@user_errors
def copy(
    name: str = typer.Argument(..., metavar="NAME", help="A shipped recipe (normzoo recipe list)."),
    dest: str = typer.Argument(None, metavar="[DEST]", show_default=False,
                               help="The file to write, or a folder to write NAME.yaml in "
                               "(default: ./NAME.yaml)."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing file."),
) -> None:
    """Write a shipped recipe out as a file to edit, as it ships (comments included); an
    existing file is kept unless --force."""
    from normzoo.io.atomic import atomic_write_text, not_a_folder
    from normzoo.recipe.shipped import find, not_found, version

    source = find(name)
    if source is None:
        raise not_found(name, "no such recipe", files=False)
    target = Path(dest) if dest else Path(source.name)
    if target.is_dir() or (dest or "").endswith(("/", "\\")):  # a folder, or one to make
        target = target / source.name
    if target.is_dir():
        raise NormzooError(f"{target} is a folder; give a file name or another folder")
    if target.exists() and not force:
        raise NormzooError(f"{target} exists; --force overwrites it")
    blocked = not_a_folder(target.parent)
    if blocked is not None:
        raise NormzooError(f"{target.parent} {blocked}")
    with file_system_failures():
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(target, source.read_text(encoding="utf-8"), "recipe")
    typer.echo(f"wrote {target} (normzoo {version()}'s {name}); train it: normzoo train "
               f"{target}")


@app.command("show")
@user_errors
def show(
    recipe: Path = typer.Argument(..., metavar="RECIPE", help=RECIPE_HELP),
    overrides: list[str] = typer.Argument(None, metavar="[KEY=VALUE]...", help=OVERRIDES_HELP,
                                          show_default=False),
) -> None:
    """Print the resolved recipe (its bases merged in, defaults filled in, overrides applied)
    as YAML."""
    from normzoo import recipe as recipes

    path = chosen(recipe).path
    # Not checked against this machine: a recipe for a bigger one is shown as well.
    typer.echo(recipes.load(path, overrides or []).to_yaml(), nl=False)


@app.command("validate")
@user_errors
def validate(
    recipe: Path = typer.Argument(..., metavar="RECIPE", help=RECIPE_HELP),
    overrides: list[str] = typer.Argument(None, metavar="[KEY=VALUE]...", help=OVERRIDES_HELP,
                                          show_default=False),
) -> None:
    """Check a recipe (its bases merged in) against the schema, the installed plugins, what
    this machine can run (memory, CPU cores) and the inputs it names (data files, init.from);
    exit 2 with every error."""
    from normzoo import recipe as recipes
    from normzoo.recipe.bases import read_recipe_with_bases
    from normzoo.run.inputs import check_inputs, unread_data_keys
    from normzoo.run.machine import check_machine

    path = chosen(recipe).path
    checked = check_inputs(check_machine(recipes.load(path, overrides or [])))
    for line in unread_data_keys(checked):
        typer.echo(f"warning: {line}", err=True)
    _, bases = read_recipe_with_bases(path)
    typer.echo(f"{recipe}: ok" + (f" (built on {', '.join(map(str, bases))})" if bases else ""))
