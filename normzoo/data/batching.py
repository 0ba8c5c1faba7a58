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

import torch
from torch.utils.data import DataLoader, Sampler


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

    Call :meth:`set_epoch` each epoch (Lightning does) for a new deterministic order, and
    :meth:`resume_at` to continue an epoch part-way through (the batches are a pure function of
    the seed and the epoch, so a position is just two numbers).
    """

    def __init__(
        self, lengths: Sequence[int], max_tokens: int, *, seed: int = 0, shuffle: bool = True,
        rank: int = 0, world_size: int = 1,
    ) -> None:
        self.lengths, self.max_tokens = list(lengths), max_tokens
        self.seed, self.shuffle = seed, shuffle
        self.rank, self.world_size = rank, world_size
        self.epoch = 0
        self._skip = 0  # batches of the current epoch to pass over on the next iteration
        self._cached: tuple[int, list[list[int]]] | None = None

    @property
    def sampler(self) -> TokenBudgetSampler:
        """Lightning calls ``set_epoch`` on ``batch_sampler.sampler`` (the index sampler a torch
        ``BatchSampler`` wraps), never on the batch sampler itself. This one orders its batches
        itself, so it is its own sampler; without this every epoch would repeat epoch 0."""
        return self

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self._skip = 0
        self.epoch = epoch

    def resume_at(self, epoch: int, batches: int) -> None:
        """Make the next iteration start at batch ``batches`` of epoch ``epoch``."""
        self.epoch, self._skip = epoch, batches

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
        # The skip stays until the epoch changes or resume_done(): a multi-process DataLoader
        # iterates its batch sampler twice while it starts.
        return iter(self._mine()[self._skip:])

    def resume_done(self) -> None:
        """The resumed iteration has started: later ones begin at the epoch's first batch."""
        self._skip = 0

    @property
    def skipped(self) -> int:
        """Batches the next iteration will pass over (set by :meth:`resume_at`)."""
        return self._skip

    def __len__(self) -> int:
        return len(self._mine())


class ResumableLoader(DataLoader):
    """A DataLoader over a :class:`TokenBudgetSampler` that can report and restore its position.

    Lightning saves ``state_dict()`` in every checkpoint and calls ``load_state_dict()`` before it
    iterates again, which is what lets a run killed mid-epoch continue with the very next batch
    rather than replay the epoch from its start. The position counts batches *handed to the
    training loop*, not batches fetched by workers ahead of it.

    Its generator (which seeds the workers) is reseeded from the seed and the epoch, so starting
    an iterator never draws from the global RNG that dropout uses.
    """

    def __init__(self, dataset: Sequence, batch_sampler: TokenBudgetSampler, **kwargs) -> None:
        super().__init__(dataset, batch_sampler=batch_sampler, generator=torch.Generator(),
                         **kwargs)
        self._delivered = 0

    def __iter__(self) -> Iterator:
        sampler = self.batch_sampler
        self.generator.manual_seed(sampler.seed * 1_000_003 + sampler.epoch)
        self._delivered = sampler.skipped
        batches = super().__iter__()  # may iterate the sampler more than once while starting
        sampler.resume_done()
        for batch in batches:
            self._delivered += 1
            yield batch

    def state_dict(self) -> dict[str, int]:
        """The position Lightning saves in a checkpoint: the epoch and batches handed out."""
        return {"epoch": self.batch_sampler.epoch, "batches": self._delivered}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue at the saved position on the next iteration."""
        self.batch_sampler.resume_at(int(state["epoch"]), int(state["batches"]))
