"""The LightningDataModule: prepared (memory-mapped) token arrays -> token-budget batches.

``prepare_data`` builds the recipe's cache when it is missing (Lightning runs it on one
process per node); ``setup`` memory-maps it in every process, so the pages are shared and a
start costs the same for Multi30k and for WMT14.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader

from normzoo.contract import task_of
from normzoo.data.batching import ResumableLoader, TokenBudgetSampler
from normzoo.data.cache import Prepared
from normzoo.data.prepare import open_prepared, prepare
from normzoo.data.shapes import LengthLadder, ShapeCount, ladder_for
from normzoo.data.sources import DataError
from normzoo.data.tokenizer import Tokenizer
from normzoo.recipe import Recipe

# How long a process that does not build the cache waits for the one that does (another node
# may be encoding WMT14): longer than any prepare, shorter than forever.
WAIT_FOR_PREPARE_S = 3 * 3600.0


class TextDataModule(L.LightningDataModule):
    """The recipe's splits, by role (``train``, ``valid``, ``test``), batched by token budget.

    ``tokenizer`` is a resumed run's own; without it the recipe's (cached) tokenizer is used.
    """

    def __init__(self, recipe: Recipe, tokenizer: Tokenizer | None = None,
                 show_progress: bool = False) -> None:
        super().__init__()
        self.prepare_data_per_node = True
        self.recipe, self.tokenizer, self.show_progress = recipe, tokenizer, show_progress
        self.prepared: Prepared | None = None
        self.report = None
        self.datasets: dict[str, Any] = {}  # the task's examples by role
        # Raw text the task keeps beside its tokens (Task.kept_texts), by name and role.
        self.texts: dict[str, dict[str, list[str]]] = {}
        # A streamed training split is read while training; only the others are prepared.
        self.roles = ("valid", "test") if recipe.data.streaming else ("train", "valid", "test")

    def prepare_data(self) -> None:
        """Build (or check and open) the cache; runs once per node, before ``setup``."""
        if self.prepared is None:
            self.prepared, self.tokenizer, self.report = prepare(
                self.recipe, self.tokenizer, show=self.show_progress, roles=self.roles)
            if self.report.built:  # say what was prepared (and what was damaged) once
                from normzoo.data.prepare import describe

                for line in describe(self.prepared, self.report):
                    print(f"data: {line}", file=sys.stderr)

    def _open(self) -> Prepared:
        if self.prepared is None:
            if local_rank() == 0 or self.tokenizer is None:
                self.prepare_data()
            else:  # the node's first process prepares; this one maps what it wrote
                self.prepared = open_prepared(self.recipe, self.tokenizer, WAIT_FOR_PREPARE_S,
                                              self.roles)
        return self.prepared

    def _build(self, role: str):
        prepared, task = self._open(), task_of(self.recipe)
        for name in task.kept_texts(role):
            self.texts.setdefault(name, {})[role] = prepared.lines(role, name)
        return task.dataset(prepared, role, self.recipe, self.tokenizer)

    @property
    def sources(self) -> dict[str, list[str]]:
        """Raw source sentences by role, where the task keeps them (translation's ``src``)."""
        return self.texts.get("src", {})

    @property
    def references(self) -> dict[str, list[str]]:
        """Raw references by role, where the task keeps them (translation's ``ref``)."""
        return self.texts.get("ref", {})

    def dataset(self, role: str):
        """The examples of ``role`` (``train``, ``valid`` or ``test``)."""
        if role not in self.datasets:
            built = self._build(role)
            if len(built) == 0:
                split = getattr(self.recipe.data, f"{role}_split")
                raise DataError(f"split '{split}' has no usable examples (all empty or longer "
                                f"than data.max_len={self.recipe.data.max_len})")
            self.datasets[role] = built
        return self.datasets[role]

    def setup(self, stage: str | None = None) -> None:
        if stage in ("fit", None):
            # The test split is scored only after training, but opened now: a broken test
            # file must stop the run before hours of training, not after.
            for role in self.roles:
                self.dataset(role)

    @functools.cached_property
    def ladder(self) -> LengthLadder | None:
        """The lengths every batch is padded up to (``data.buckets``; :mod:`normzoo.data.shapes`):
        fitted to the training split, or spread up to ``max_len`` for a streamed one; None
        pads each batch to its longest (also for an unresolved ``auto``, which only a run
        resolves, for its machine: :func:`normzoo.run.machine.batch_ladder`)."""
        data = self.recipe.data
        return ladder_for(data, None if data.streaming else self.dataset("train").lengths())

    def train_shapes(self, world_size: int = 1) -> ShapeCount | None:
        """The shapes and padding of one epoch of the training split's global batches over
        ``world_size`` processes (the first epoch's; with a ladder every epoch has the same
        shapes), or None for a streamed split."""
        if self.recipe.data.streaming:
            return None
        dataset = self.dataset("train")
        sampler = TokenBudgetSampler(dataset.lengths(), self.recipe.data.max_tokens,
                                     seed=self.recipe.seed, world_size=world_size,
                                     ladder=self.ladder)
        return sampler.shapes(dataset.sides())

    def world(self) -> tuple[int, int]:
        """This process's rank and the number of processes (0 and 1 outside a trainer)."""
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def _loader(self, role: str) -> DataLoader:
        dataset, training = self.dataset(role), role == "train"
        rank, world = self.world()
        sampler = TokenBudgetSampler(
            dataset.lengths(), self.recipe.data.max_tokens, seed=self.recipe.seed,
            shuffle=training, rank=rank, world_size=world, ladder=self.ladder,
        )
        # Page-locked host memory where batches go to a GPU: Lightning copies them with
        # non_blocking=True, which overlaps the copy with the step only from pinned memory.
        pin = self.on_cuda()
        if training:  # knows its position in the epoch, for exact resume
            return ResumableLoader(dataset, sampler, collate_fn=dataset.collate,
                                   num_workers=self.workers, pin_memory=pin)
        # A generator of its own: validating must not draw from the global RNG either.
        return DataLoader(dataset, batch_sampler=sampler, collate_fn=dataset.collate,
                          num_workers=self.workers, pin_memory=pin,
                          generator=torch.Generator().manual_seed(self.recipe.seed))

    @property
    def workers(self) -> int:
        """The loader processes ``data.num_workers`` asks for; none for an unresolved ``auto``,
        which only a run resolves, for its machine (:func:`normzoo.run.machine.loader_workers`)."""
        workers = self.recipe.data.num_workers
        return 0 if workers == "auto" else workers

    def on_cuda(self) -> bool:
        """Whether batches go to a GPU (so loaders pin host memory)."""
        trainer = self.trainer
        return trainer is not None and trainer.strategy.root_device.type == "cuda"

    def train_dataloader(self) -> DataLoader:
        if self.recipe.data.streaming:
            return task_of(self.recipe).streaming_loader(self)
        return self._loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._loader("valid")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")


def training_data(recipe: Recipe, tokenizer_json: str = "", saved: Path | None = None,
                  progress: bool = False) -> TextDataModule:
    """A training run's data module, prepared (by each node's first process) and mapped now,
    so that broken data fails before the run's folder is written: on the tokenizer its
    weights were trained with (``tokenizer_json``), else the ``saved`` file of the run (where
    rank 0 wrote it, for the other ranks), else the recipe's."""
    tokenizer = None  # the recipe's, from the prepared cache
    if tokenizer_json:
        tokenizer = Tokenizer.from_str(tokenizer_json)
    elif saved is not None and saved.is_file():
        tokenizer = Tokenizer.load(saved)
    data = TextDataModule(recipe, tokenizer, show_progress=progress)
    data.setup("fit")
    return data


def show_progress() -> bool:
    """Progress bars only where someone watches: a terminal, not a log file."""
    return sys.stderr.isatty()


def local_rank() -> int:
    """This process's rank on its node (torchrun, Lightning's launcher and SLURM set it): the
    first process of each node prepares the data that the node's others memory-map."""
    for name in ("LOCAL_RANK", "SLURM_LOCALID"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0
