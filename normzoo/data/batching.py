"""Token-budget batches: examples of similar length together, at most ``max_tokens`` per batch.

Like fairseq: sort by length (ties broken by a seeded shuffle), pack greedily so that
``len(batch) * longest <= max_tokens`` (padding included), then shuffle the order of the
batches with the seed and the epoch. Every example is in exactly one batch per epoch, and the
same seed gives the same batches. Under several processes each rank takes every
``world_size``-th batch; ranks that would get one batch fewer repeat one from the start of
the epoch's list, so that all ranks step together.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

from torch.utils.data import Sampler


def token_budget_batches(
    lengths: Sequence[int], max_tokens: int, *, seed: int = 0, epoch: int = 0,
    shuffle: bool = True,
) -> list[list[int]]:
    """Indices of ``lengths`` grouped into batches of at most ``max_tokens`` padded tokens."""
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
        if batch and (len(batch) + 1) * max(longest, length) > max_tokens:
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
    """A batch sampler over :func:`token_budget_batches`, sharded across ranks.

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
                shuffle=self.shuffle,
            )
            self._cached = (self.epoch, batches)
        return self._cached[1]

    def _mine(self) -> list[list[int]]:
        batches = self._all_batches()
        if self.world_size == 1:
            return batches
        per_rank = -(-len(batches) // self.world_size)
        # Repeat batches from the start (cycling, when there are fewer batches than ranks)
        # so that every rank gets exactly per_rank of them.
        padded = [batches[i % len(batches)] for i in range(per_rank * self.world_size)]
        return padded[self.rank :: self.world_size]

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._mine())

    def __len__(self) -> int:
        return len(self._mine())
