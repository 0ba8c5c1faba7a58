"""The recipes and studies shipped with normzoo, by name: ``normzoo train quickstart`` and
``normzoo study run quickstart-schemes`` from anywhere.

Where they are: the repository's ``recipes/`` and ``studies/`` folders are the one copy. A wheel
carries them as ``normzoo/recipes/`` and ``normzoo/studies/`` (pyproject.toml maps the folders
into the package when it is built); a checkout, or an editable install of one, reads them beside
the package. Nothing is copied in the tree. Each is a :class:`Shelf`; the functions take the
recipes' (:data:`RECIPES`) unless given another (:data:`STUDIES`: only the top level's files are
studies, their folders hold the prose and sections they name).

What a recipe argument means (:func:`resolve`): an existing path always wins; otherwise it is
a shipped recipe's name, written as :func:`names` gives it (``quickstart``,
``studies/llama_schemes``), with ``.yaml``, or as the README writes it from a clone
(``recipes/quickstart.yaml``), so the README's commands work as written outside one. A recipe's
``base:`` and a study's ``recipe:`` follow the same rule, their paths read relative to their
own file first (:func:`beside`). A name that is neither is refused (exit 2) with the close
names and the list.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from normzoo.errors import ConfigError, Problem

SUFFIX = ".yaml"
_PACKAGE = Path(__file__).resolve().parent.parent  # normzoo/


@dataclass(frozen=True)
class Shelf:
    """What normzoo ships of one kind: its word (``recipe``, also the command group that
    lists them), the repository's folder that holds them (the plural; also their folder in the
    wheel), and whether the files in its sub-folders are of the kind too."""

    kind: str
    folder: str
    nested: bool


RECIPES = Shelf("recipe", "recipes", nested=True)
STUDIES = Shelf("study", "studies", nested=False)


def folder(shelf: Shelf = RECIPES) -> Path:
    """The shelf's folder: ``normzoo/recipes/`` as a wheel installs it, else the checkout's
    ``recipes/`` beside the package (an editable install, a clone on the path)."""
    installed = _PACKAGE / shelf.folder
    checkout = _PACKAGE.parent / shelf.folder
    if not installed.is_dir() and checkout.is_dir() and (_PACKAGE.parent / "pyproject.toml"
                                                          ).is_file():
        return checkout
    return installed


def names(shelf: Shelf = RECIPES) -> list[str]:
    """Every shipped name: its path under :func:`folder` without ``.yaml``, in ``/`` form
    (``quickstart``, ``studies/multi30k_depth``), sorted with the top level first."""
    root = folder(shelf)
    files = root.rglob(f"*{SUFFIX}") if shelf.nested else root.glob(f"*{SUFFIX}")
    found = [path.relative_to(root).with_suffix("").as_posix()
             for path in files if path.is_file()] if root.is_dir() else []
    return sorted(found, key=lambda name: (name.count("/"), name))


def _name(text: str, shelf: Shelf = RECIPES) -> str:
    """``text`` as a name: ``./recipes/quickstart.yaml``, ``quickstart.yaml`` and, as a study
    file in a clone names it, ``../recipes/quickstart.yaml`` are ``quickstart``."""
    name = text.strip().replace("\\", "/")
    while name.startswith(("./", "../")):
        name = name.split("/", 1)[1]
    name = name.removeprefix(f"{shelf.folder}/")
    for suffix in (SUFFIX, ".yml"):
        name = name.removesuffix(suffix)
    return name


def find(text: str | Path, shelf: Shelf = RECIPES) -> Path | None:
    """The shipped file ``text`` names (see :func:`_name`), or None."""
    name = _name(str(text), shelf)
    return folder(shelf) / f"{name}{SUFFIX}" if name and name in names(shelf) else None


def name_of(path: str | Path, shelf: Shelf = RECIPES) -> str | None:
    """The shipped name if ``path`` is a shipped file, else None."""
    try:
        relative = Path(os.path.realpath(path)).relative_to(os.path.realpath(folder(shelf)))
    except ValueError:
        return None
    name = relative.with_suffix("").as_posix()
    return name if relative.suffix == SUFFIX and name in names(shelf) else None


def version() -> str:
    """normzoo's version (``normzoo.__version__``), read from the package already imported:
    importing the package's top would count as an import of what its ``__getattr__`` loads
    (normzoo.inference), floors above this one (tests/test_layout.py)."""
    return str(sys.modules["normzoo"].__version__)


def shipped_line(name: str, given: str | Path | None = None, shelf: Shelf = RECIPES) -> str:
    """The line that says a shipped file is read: ``recipe: quickstart (shipped with
    normzoo 0.2.0: .../normzoo/recipes/quickstart.yaml)``."""
    shown = name if given is None else given
    return (f"{shelf.kind}: {shown} (shipped with normzoo {version()}: "
            f"{folder(shelf) / f'{name}{SUFFIX}'})")


@dataclass(frozen=True)
class Resolved:
    """What a recipe argument names: the file to read, the shipped recipe's name if it is
    one, and the first line to print (None where there is nothing to say: a file that is no
    shipped recipe's name, or is the shipped file itself)."""

    path: Path
    name: str | None
    note: str | None


def close_names(given: str | Path, shelf: Shelf = RECIPES) -> str:
    """A ``" (did you mean 'quickstart'?)"`` suffix for a shipped name close to ``given``."""
    from normzoo.registry.options import close_match

    shipped = names(shelf)
    return (close_match(_name(str(given), shelf), shipped)
            or close_match(Path(given).stem, shipped))


def not_found(given: str | Path, title: str = "cannot read recipe",
              files: bool = True, shelf: Shelf = RECIPES) -> ConfigError:
    """Exit 2 for a name that is neither a file (where ``files``) nor shipped: the close
    names, and every name."""
    shipped = names(shelf)
    guess = close_names(given, shelf)
    listed = ", ".join(shipped) if shipped else "none are installed"
    what = (f"{shelf.kind} file not found: {given}, and no {shelf.kind} shipped with normzoo "
            "has that name" if files else f"no {shelf.kind} shipped with normzoo is named "
            f"{given}")
    return ConfigError([Problem("", f"{what}{guess}; the shipped {shelf.folder} (normzoo "
                                f"{shelf.kind} list): {listed}")], title)


def resolve(given: str | Path, shelf: Shelf = RECIPES) -> Resolved:
    """The file ``given`` on the command line names (module docstring): an existing path,
    else a shipped one; :class:`~normzoo.errors.ConfigError` (exit 2) for neither."""
    path = Path(given)
    shipped = find(given, shelf)
    if path.exists():
        same = shipped is not None and os.path.realpath(path) == os.path.realpath(shipped)
        name = _name(str(given), shelf)
        shown = (f"normzoo recipe show {name}" if shelf is RECIPES
                 else "normzoo study list")
        note = (f"{shelf.kind}: {given} (this file; normzoo also ships a {shelf.kind} named "
                f"{name}: {shown})" if shipped is not None and not same else None)
        return Resolved(path, None, note)
    if shipped is None:
        raise not_found(given, f"cannot read {shelf.kind}", shelf=shelf)
    name = _name(str(given), shelf)
    note = shipped_line(name, given, shelf)
    local = path.with_name(path.name + SUFFIX)
    if local.is_file():  # `normzoo recipe copy NAME` wrote it: most likely the one meant
        note += f"; {local} is not read: give its path to use it"
    return Resolved(shipped, name, note)


def beside(folder_of_file: Path, written: str) -> Path:
    """A recipe named inside a file (a ``base:``, a study's ``recipe:``): the path relative to
    that file's folder if it exists, else the shipped recipe of that name, else the relative
    path (whose absence the reader reports)."""
    relative = Path(os.path.normpath(folder_of_file / os.path.expanduser(written)))
    if relative.exists():
        return relative
    return find(written) or relative


def purpose(path: Path) -> str:
    """What a recipe is for: the first line of its leading comment."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if text:
            return text
    return ""
