"""The run directory: where a run lives, and refusing to overwrite one that holds a run.

Layout::

    recipe.yaml          the resolved recipe (overrides applied)
    tokenizer.json       the tokenizer the model was trained with
    checkpoints/         best-N, step-N and last.ckpt
    logs/csv/            metrics.csv (Lightning CSVLogger)
    logs/tb/             TensorBoard events
    summary.json         final metrics, wall time, test scores
    .lock                held by the live ``normzoo train`` (:mod:`normzoo.run.lock`)
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from normzoo.errors import NormzooError
from normzoo.recipe import Recipe
from normzoo.run.lock import LOCK_NAME


class RunDirectoryExists(NormzooError):
    """A run directory already holds a run (or has none to resume); refuse to guess."""


def run_directory(recipe: Recipe, recipe_path: str | Path) -> Path:
    """``run.dir`` (``~`` expanded), or ``runs/<recipe's stem>``. A run stores ``run.dir``
    absolute (:func:`~normzoo.recipe.paths.resolve_paths`, as it stores ``data.dir``), so that its
    ``recipe.yaml`` names its own folder from anywhere; inside the folder ``normzoo`` runs in,
    it is shown relative to it again, as it was most likely typed and as the resume hint
    repeats it."""
    if not recipe.run.dir:
        return Path("runs") / Path(recipe_path).stem
    path = Path(recipe.run.dir).expanduser()
    if recipe.run.dir.startswith(os.sep):  # absolute as written, not by ~
        with contextlib.suppress(OSError, ValueError):  # no current folder; outside it
            return path.relative_to(Path.cwd())
    return path


def with_run_dir(recipe: Recipe, recipe_path: str | Path) -> Recipe:
    """``recipe`` with ``run.dir`` set where unset (to the default, ``runs/<recipe's stem>``):
    the run's ``recipe.yaml`` then names its folder, as ``--resume auto`` with that file as
    the recipe needs (its stem is no longer the original recipe's)."""
    if recipe.run.dir:
        return recipe
    run = recipe.run.model_copy(update={"dir": str(run_directory(recipe, recipe_path))})
    return recipe.model_copy(update={"run": run})


def _contents(run_dir: Path) -> list[Path]:
    """What ``run_dir`` holds besides the lock of the process that is looking."""
    if not run_dir.is_dir():
        return []
    return [p for p in run_dir.iterdir() if p.name != LOCK_NAME]


def refuse_existing_run(run_dir: Path, force: bool) -> bool:
    """Whether ``run_dir`` holds a run; raise unless ``force`` allows overwriting it."""
    holds_run = bool(_contents(run_dir))
    if holds_run and not force:
        raise RunDirectoryExists(
            f"run directory {run_dir} already holds a run; pass --force to overwrite it, "
            "or choose another with run.dir=PATH"
        )
    return holds_run


def prepare_run_dir(recipe: Recipe, recipe_path: str | Path, force: bool) -> Path:
    run_dir = run_directory(recipe, recipe_path)
    if refuse_existing_run(run_dir, force):
        for path in _contents(run_dir):  # not the lock: it keeps others out while we start
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def run_directory_override(run_dir: Path, recipe_path: str | Path) -> bool:
    """Whether ``run_dir`` is not the recipe's default (so a resume command must name it)."""
    return Path(run_dir) != Path("runs") / Path(recipe_path).stem
