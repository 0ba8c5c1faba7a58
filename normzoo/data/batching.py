"""Token-budget batches: examples of similar length together, at most ``max_tokens`` per batch.

Like fairseq: sort by length (ties broken by a seeded shuffle), pack greedily so that
``len(batch) * longest <= max_tokens`` (padding included), then shuffle the order of the
batches with the seed and the epoch. Every example is in exactly one batch per epoch, and the
same seed gives the same batches.

Under ``world_size`` processes, ``max_tokens`` is the budget of each process: the batches are
packed for ``world_size * max_tokens`` tokens (the global batch) and each rank takes every
``world_size``-th example of each. So 2 processes with ``max_tokens=B`` see, step by step,
exactly the examples that 1 process with ``max_tokens=2B`` sees, which is what makes a
multi-process run reproduce a single-process one. A rank's share holds at most ``max_tokens``
plus one example's tokens; a global batch with fewer examples than ranks is topped up by
repeating its examples, so that every rank has something to step on.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

from torch.utils.data import Sampler


def token_budget_batches(
    lengths: Sequence[int], max_tokens: int, *, seed: int = 0, epoch: int = 0,
    shuffle: bool = True, shards: int = 1,
) -> list[list[int]]:
    """Indices of ``lengths`` grouped into batches of at most ``shards * max_tokens`` padded
    tokens; no single example may be longer than ``max_tokens``."""
    budget = max_tokens * shards
    order = list(range(len(lengths)))
    rng = random.Random(f"{seed}:{epoch}")
    if shuffle:
        rng.shuffle(order)  # random ties between equal lengths, then a stable sort
    order.sort(key=lambda i: lengths[i])
    batches: list[list[int]] = []
    batch: list[int] = []
    longest = 0
    for i in order:
        length = lengths[i]
        if length > max_tokens:
            raise ValueError(f"example {i} has {length} tokens, more than max_tokens={max_tokens}")
        # An empty example still takes a row: count it as one token, so batches stay bounded.
        length = max(length, 1)
        if batch and (len(batch) + 1) * max(longest, length) > budget:
            batches.append(batch)
            batch, longest = [], 0
        batch.append(i)
        longest = max(longest, length)
    if batch:
        batches.append(batch)
    if shuffle:
        rng.shuffle(batches)
    return batches


class TokenBudgetSampler(Sampler[list[int]]):
    """A batch sampler over :func:`token_budget_batches`, each global batch split across ranks.

    Call :meth:`set_epoch` each epoch (Lightning does) for a new deterministic order.
    """

    def __init__(
        self, lengths: Sequence[int], max_tokens: int, *, seed: int = 0, shuffle: bool = True,
        rank: int = 0, world_size: int = 1,
    ) -> None:
        self.lengths, self.max_tokens = list(lengths), max_tokens
        self.seed, self.shuffle = seed, shuffle
        self.rank, self.world_size = rank, world_size
        self.epoch = 0
        self._cached: tuple[int, list[list[int]]] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _all_batches(self) -> list[list[int]]:
        if self._cached is None or self._cached[0] != self.epoch:  # len() and iter() share it
            batches = token_budget_batches(
                self.lengths, self.max_tokens, seed=self.seed, epoch=self.epoch,
                shuffle=self.shuffle, shards=self.world_size,
            )
            self._cached = (self.epoch, batches)
        return self._cached[1]

    def _mine(self) -> list[list[int]]:
        batches = self._all_batches()
        if self.world_size == 1:
            return batches
        return [batch[self.rank :: self.world_size] or [batch[self.rank % len(batch)]]
                for batch in batches]

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._mine())

    def __len__(self) -> int:
        return len(self._mine())
