"""Shared fixtures."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from normzoo import registry


class FakeDists:
    """Installed-looking distributions (``.dist-info`` + modules) in folders, without pip."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.active: list[str] = []

    def write(
        self,
        name: str,
        version: str,
        entry_points: dict[str, dict[str, str]],
        modules: dict[str, str] | None = None,
        folder: str = "site",
    ) -> Path:
        """Write distribution ``name`` into ``root/folder``; returns that folder.

        ``entry_points`` maps a group (``normzoo.norms``) to ``{name: "module:attr"}``;
        ``modules`` maps a top-level module name to its source.
        """
        where = self.root / folder
        info = where / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        lines = []
        for group, names in entry_points.items():
            lines += [f"[{group}]", *(f"{key} = {value}" for key, value in names.items()), ""]
        (info / "entry_points.txt").write_text("\n".join(lines))
        for module, source in (modules or {}).items():
            (where / f"{module}.py").write_text(textwrap.dedent(source))
        return where

    def activate(self, *folders: Path) -> None:
        """Put ``folders`` first on ``sys.path`` (in this order) and re-read the registries."""
        for folder in reversed(folders):
            sys.path.insert(0, str(folder))
            self.active.append(str(folder))
        importlib.invalidate_caches()
        registry.norms.refresh()
        registry.residuals.refresh()
        registry.tasks.refresh()

    def restore(self) -> None:
        for folder in self.active:
            while folder in sys.path:
                sys.path.remove(folder)
            sys.path_importer_cache.pop(folder, None)
            for name, module in list(sys.modules.items()):
                if str(getattr(module, "__file__", None) or "").startswith(folder):
                    del sys.modules[name]
        importlib.invalidate_caches()
        registry.norms.refresh()
        registry.residuals.refresh()
        registry.tasks.refresh()


@pytest.fixture
def fake_dists(tmp_path: Path) -> Iterator[FakeDists]:
    """Fake third-party distributions for one test; sys.path and the registries are restored."""
    dists = FakeDists(tmp_path)
    try:
        yield dists
    finally:
        dists.restore()


@pytest.fixture(autouse=True)
def _one_thread(request: pytest.FixtureRequest) -> Iterator[None]:
    """The suite's models are tiny: one intra-op thread is as fast, and immune to a busy CPU
    (two OpenMP threads on a loaded 2-core machine can be 20x slower). Slow real-data tests
    keep every thread."""
    if request.node.get_closest_marker("slow"):
        yield
        return
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``last.ckpt`` of a two-step translation run on the built-in corpus (a few seconds).

    For tests that need a real checkpoint but not a trained model; copy it before changing it.
    """
    import torch
    from tiny import tiny

    from normzoo.recipe import from_dict
    from normzoo.run import training as train

    root = tmp_path_factory.mktemp("tiny_checkpoint")
    recipe = from_dict(tiny(
        run={"dir": str(root / "run")},
        data={"train_limit": 200, "valid_limit": 8,
              "tokenizer": {"vocab_size": 200, "min_frequency": 1}},
        trainer={"max_steps": 2, "val_every_steps": 2},
    ))
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NORMZOO_CACHE", str(root / "cache"))
        torch.set_num_threads(1)
        try:
            train.run(recipe, "tiny.yaml")
        finally:
            torch.set_num_threads(threads)
    return root / "run" / "checkpoints" / "last.ckpt"


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Compile with TorchDynamo's eager backend, from an empty cache: the same graphs, guards
    and compiles as inductor's, without its minute of C++ generation on a CPU."""
    import torch._dynamo

    from normzoo.tasks import compiled

    monkeypatch.setattr(compiled, "BACKEND", "eager")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
