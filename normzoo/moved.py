"""Import paths of the 0.1 layout, kept working for one release with a deprecation warning.

The top level of ``normzoo/`` was grouped into packages by job (:mod:`normzoo.checkpoints`,
:mod:`normzoo.inference`, :mod:`normzoo.export`, :mod:`normzoo.run`, :mod:`normzoo.sweep`,
:mod:`normzoo.registry`). A plugin or script that imports an old path (``normzoo.checkpoint``,
``normzoo.options``, ``normzoo.diagnostics.sweep``, ...) gets a stand-in module whose names
are looked up, on use, in the module(s) that hold them now, and one ``DeprecationWarning``
naming the new path. :func:`install` puts the finder that does this on ``sys.meta_path``;
``import normzoo`` calls it. Nothing is imported until an old path is.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Any

REMOVED_IN = "0.3"

#: old module path -> the module(s) its names are in now, searched in order
MOVED: dict[str, tuple[str, ...]] = {
    "normzoo.registry_entry": ("normzoo.registry.entry",),
    "normzoo.options": ("normzoo.registry.options",),
    "normzoo.atomic": ("normzoo.io.atomic",),
    "normzoo.checkpoint": ("normzoo.inference.load", "normzoo.inference.model",
                           "normzoo.inference.device", "normzoo.checkpoints.reading"),
    "normzoo.checkpoint_files": ("normzoo.checkpoints.reading", "normzoo.checkpoints.plugins",
                                 "normzoo.checkpoints.rebuild"),
    "normzoo.checkpointing": ("normzoo.checkpoints.rolling",),
    "normzoo.decoding": ("normzoo.inference.decoding",),
    "normzoo.evaluate": ("normzoo.inference.translate",),
    "normzoo.scoring": ("normzoo.inference.scoring",),
    "normzoo.card": ("normzoo.export.card",),
    "normzoo.hf": ("normzoo.export.hf",),
    "normzoo.hf.plain": ("normzoo.export.hf.plain",),
    "normzoo.hf.architectures": ("normzoo.export.hf.architectures",),
    "normzoo.train": ("normzoo.run.training",),
    "normzoo.runlock": ("normzoo.run.lock",),
    "normzoo.preemption": ("normzoo.run.preemption",),
    "normzoo.rng": ("normzoo.checkpoints.rng_state",),
    "normzoo.machine": ("normzoo.run.machine",),
    "normzoo.optim": ("normzoo.tasks.optim",),
    "normzoo.diagnostics.sweep": ("normzoo.sweep.runner",),
    "normzoo.diagnostics.sweep_plots": ("normzoo.sweep.plots",),
    "normzoo.diagnostics.launch": ("normzoo.sweep.launch",),
    "normzoo.diagnostics.seeds": ("normzoo.sweep.seeds",),
    "normzoo.diagnostics.compare": ("normzoo.sweep.compare",),
    "normzoo.diagnostics.grid": ("normzoo.recipe.grid",),
    "normzoo.data.prepared": ("normzoo.data.cache",),
    "normzoo.data.prepare_tokenizer": ("normzoo.data.train_tokenizer",),
    "normzoo.checkpoints.atomic": ("normzoo.io.atomic",),
    "normzoo.checkpoints.load": ("normzoo.inference.load",),
    "normzoo.tasks.terms": ("normzoo.nn.token_loss",),
    "normzoo.run.rng": ("normzoo.checkpoints.rng_state",),
}


class MovedModule(types.ModuleType):
    """Stands in for an old path: every name is read from the new module(s) that hold it."""

    def __init__(self, name: str, targets: tuple[str, ...]) -> None:
        super().__init__(name, f"Moved to {', '.join(targets)}; this path goes in {REMOVED_IN}.")
        self.__moved_to__ = targets

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        for target in self.__moved_to__:
            module = importlib.import_module(target)
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"module {self.__name__!r} (moved to "
                             f"{', '.join(self.__moved_to__)}) has no attribute {name!r}")

    def __dir__(self) -> list[str]:
        names: set[str] = set()
        for target in self.__moved_to__:
            names |= set(dir(importlib.import_module(target)))
        return sorted(names)


class _MovedLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        targets = MOVED[spec.name]
        where = (f"moved to {targets[0]}" if len(targets) == 1 else
                 f"been split: its names are in {', '.join(targets[:-1])} and {targets[-1]}")
        warnings.warn(f"{spec.name} has {where}; import from there (the old path goes in "
                      f"normzoo {REMOVED_IN})", DeprecationWarning, stacklevel=_caller_level())
        module = MovedModule(spec.name, targets)
        if any(old.startswith(spec.name + ".") for old in MOVED):
            module.__path__ = []  # a package (normzoo.hf): its old submodules import too
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def _caller_level() -> int:
    """The ``stacklevel`` that points the warning at the line that named the old path (an
    ``import`` statement or ``importlib.import_module``): the first frame outside importlib
    and this module. ``warnings`` itself skips importlib's bootstrap frames when it counts,
    so they are not counted here either."""
    frame, level = sys._getframe(1), 1
    while frame is not None:
        name = frame.f_code.co_filename
        bootstrap = "importlib" in name and "_bootstrap" in name
        if not (bootstrap or name == __file__ or name == importlib.__file__):
            return level
        frame, level = frame.f_back, level + (0 if bootstrap else 1)
    return level


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None,
                  target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, _MovedLoader(),
                                              is_package=any(old.startswith(fullname + ".")
                                                             for old in MOVED))


def install() -> None:
    """Let the old paths import (once per interpreter)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
