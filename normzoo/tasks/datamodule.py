"""The LightningDataModule: raw text -> tokenizer ids -> token-budget batches, for every task."""

from __future__ import annotations

import lightning as L
import torch
from torch.utils.data import DataLoader

from normzoo.data.batching import ResumableLoader, TokenBudgetSampler
from normzoo.data.examples import BlockData, ParallelData, SentenceData
from normzoo.data.sources import DataError, load_parallel, load_text
from normzoo.data.tokenizer import Tokenizer, train_tokenizer
from normzoo.recipe import Recipe


def fit_tokenizer(recipe: Recipe) -> Tokenizer:
    """Train (or fetch from the cache) the tokenizer on the training split of ``recipe``."""
    data = recipe.data
    if recipe.task == "translation":
        src, tgt = load_parallel(data, data.train_split, data.train_limit)
        texts = src + tgt
    else:
        texts = load_text(data, data.train_split, data.train_limit)
    tok = data.tokenizer
    return train_tokenizer(texts, kind=tok.type, vocab_size=tok.vocab_size,
                           min_frequency=tok.min_frequency, lowercase=tok.lowercase)


class TextDataModule(L.LightningDataModule):
    """Loads the recipe's splits, encodes them with ``tokenizer`` and batches by token budget."""

    def __init__(self, recipe: Recipe, tokenizer: Tokenizer) -> None:
        super().__init__()
        self.recipe, self.tokenizer = recipe, tokenizer
        self.datasets: dict[str, ParallelData | SentenceData | BlockData] = {}
        self.sources: dict[str, list[str]] = {}  # raw text, translation only
        self.references: dict[str, list[str]] = {}

    def _build(self, split: str, training: bool):
        data, task = self.recipe.data, self.recipe.task
        limit = data.train_limit if training else data.valid_limit
        if task == "translation":
            src, tgt = load_parallel(data, split, limit)
            self.sources[split], self.references[split] = src, tgt
            return ParallelData.build(
                self.tokenizer.encode_batch(src), self.tokenizer.encode_batch(tgt),
                data.max_len, drop_long=training,
            )
        lines = self.tokenizer.encode_batch(load_text(data, split, limit))
        if task == "mlm":
            return SentenceData.build(lines, data.max_len, self.tokenizer.vocab_size,
                                      data.mask_prob,
                                      mask_seed=None if training else self.recipe.seed)
        return BlockData.build(lines, data.max_len)

    def dataset(self, split: str, training: bool = False):
        if split not in self.datasets:
            built = self._build(split, training)
            if len(built) == 0:
                raise DataError(f"split '{split}' has no usable examples (all empty or longer "
                                f"than data.max_len={self.recipe.data.max_len})")
            self.datasets[split] = built
        return self.datasets[split]

    def setup(self, stage: str | None = None) -> None:
        data = self.recipe.data
        if data.max_len > data.max_tokens:
            raise DataError(f"data.max_len={data.max_len} exceeds data.max_tokens="
                            f"{data.max_tokens}: the longest example would not fit a batch")
        if stage in ("fit", None):
            self.dataset(data.train_split, training=True)
            self.dataset(data.valid_split)
            # Scored only after training, but read now: a broken test file must stop the run
            # before hours of training, not after.
            self.dataset(data.test_split)

    def _loader(self, split: str, training: bool) -> DataLoader:
        dataset = self.dataset(split, training)
        trainer = self.trainer
        rank = trainer.global_rank if trainer is not None else 0
        world = trainer.world_size if trainer is not None else 1
        sampler = TokenBudgetSampler(
            dataset.lengths(), self.recipe.data.max_tokens, seed=self.recipe.seed,
            shuffle=training, rank=rank, world_size=world,
        )
        if training:  # knows its position in the epoch, for exact resume
            return ResumableLoader(dataset, sampler, collate_fn=dataset.collate,
                                   num_workers=self.recipe.data.num_workers)
        # A generator of its own: validating must not draw from the global RNG either.
        return DataLoader(dataset, batch_sampler=sampler, collate_fn=dataset.collate,
                          num_workers=self.recipe.data.num_workers,
                          generator=torch.Generator().manual_seed(self.recipe.seed))

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.recipe.data.train_split, training=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.recipe.data.valid_split, training=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.recipe.data.test_split, training=False)
