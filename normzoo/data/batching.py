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

With a :class:`~normzoo.data.shapes.LengthLadder` the batches come in few shapes: a batch at
rung ``r`` holds exactly the examples that fit ``r`` (:func:`~normzoo.data.shapes.rows_per_rung`)
and every example is padded to ``r``. The few examples of a rung that do not fill a batch join
the next rung's first batch, padded to it, so every batch but an epoch's last has its rung's
one shape; and since the batches are a function of the sorted lengths alone, every epoch has
the same shapes. Each batch is a :class:`ShapedBatch`, which tells the collate function the
length to pad to.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler

from normzoo.data.shapes import LengthLadder, ShapeCount, count_shapes, rows_per_rung


class ShapedBatch(list):
    """A batch's indices, ``length``: the length every side of it is padded to (0: each side
    to its own longest example), and the ``epoch`` it belongs to (what a masked LM's training
    masks are drawn from, in whichever process collates the batch)."""

    def __init__(self, items, length: int = 0, epoch: int = 0) -> None:
        super().__init__(items)
        self.length = length
        self.epoch = epoch


def pack(
    lengths: Sequence[int] | np.ndarray, max_tokens: int, *, seed: int = 0, epoch: int = 0,
    shuffle: bool = True, shards: int = 1, ladder: LengthLadder | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The batches of :func:`token_budget_batches` as three arrays, ``(order, bounds,
    padded)``: batch ``b`` is ``order[bounds[b]:bounds[b + 1]]``, padded to ``padded[b]``
    (0 without a ladder: each side to its own longest). Vectorised, so that millions of
    examples cost a few arrays and about a second rather than a Python list per example."""
    lengths = np.asarray(lengths, dtype=np.int64)
    budget = max_tokens * shards
    too_long = np.flatnonzero(lengths > max_tokens)
    if too_long.size:
        i = int(too_long[0])
        raise ValueError(f"example {i} has {lengths[i]} tokens, more than max_tokens={max_tokens}")
    rng = np.random.default_rng([seed, epoch])
    # Random ties between equal lengths, then a stable sort by length.
    order = rng.permutation(len(lengths)) if shuffle else np.arange(len(lengths))
    order = order[np.argsort(lengths[order], kind="stable")]
    # An empty example still takes a row: count it as one token, so batches stay bounded.
    ordered = np.maximum(lengths[order], 1)
    if ladder is not None:
        starts, padded = _ladder_starts(ordered, ladder, budget, shards)
    else:
        starts, padded = _greedy_starts(ordered, budget), None
    n = len(order)
    bounds = np.array([*starts, n], dtype=np.int64)
    padded = np.zeros(len(starts), np.int64) if padded is None else np.asarray(padded, np.int64)
    if shuffle and len(starts) > 1:
        sizes = np.diff(bounds)
        shuffled = rng.permutation(len(starts))
        order = np.concatenate([order[bounds[b] : bounds[b + 1]] for b in shuffled])
        bounds = np.concatenate(([0], np.cumsum(sizes[shuffled])))
        padded = padded[shuffled]
    return order, bounds, padded


def _greedy_starts(ordered: np.ndarray, budget: int) -> list[int]:
    """Where each batch starts in the sorted lengths ``ordered``, each padded to its longest."""
    starts = []
    start, n = 0, len(ordered)
    while start < n:
        # Sorted lengths: the k-th example joins while k * its length fits the budget, and that
        # product only grows with k, so the batch ends at the first k where it does not.
        most = min(budget // int(ordered[start]), n - start)
        fits = np.arange(1, most + 1) * ordered[start : start + most] <= budget
        size = most if fits.all() else int(np.argmin(fits))
        starts.append(start)
        start += size
    return starts


def _ladder_starts(ordered: np.ndarray, ladder: LengthLadder, budget: int,
                   shards: int) -> tuple[list[int], list[int]]:
    """Where each batch starts in the sorted lengths ``ordered``, and the rung it is padded
    to: a batch takes its rung's rows; where that reaches into a longer rung, it takes that
    rung's (fewer) rows and its length, until it ends inside the rung it is padded to."""
    rung = np.searchsorted(np.asarray(ladder.rungs), ordered)  # len(rungs): past the top
    rows = rows_per_rung(ladder, budget, shards)
    starts, padded = [], []
    start, n = 0, len(ordered)
    while start < n:
        at = int(rung[start])
        if at == len(ladder.rungs):  # the rest outgrow the ladder: each its own longest
            starts += [start + s for s in _greedy_starts(ordered[start:], budget)]
            return starts, padded + [0] * (len(starts) - len(padded))
        while True:
            last = min(start + int(rows[at]), n) - 1
            if rung[last] <= at:
                size, length = last - start + 1, ladder.rungs[at]
                break
            if rung[last] == len(ladder.rungs):  # reaches past the top: end before it
                size = int(np.searchsorted(rung[start:], len(ladder.rungs)))
                length = ladder.rungs[at]
                break
            at = int(rung[last])
        starts.append(start)
        padded.append(length)
        start += size
    return starts, padded


def token_budget_batches(
    lengths: Sequence[int] | np.ndarray, max_tokens: int, *, seed: int = 0, epoch: int = 0,
    shuffle: bool = True, shards: int = 1, ladder: LengthLadder | None = None,
) -> list[ShapedBatch]:
    """Indices of ``lengths`` grouped into batches of at most ``shards * max_tokens`` padded
    tokens (padded up to ``ladder``'s rungs where one is given); no single example may be
    longer than ``max_tokens``."""
    order, bounds, padded = pack(lengths, max_tokens, seed=seed, epoch=epoch, shuffle=shuffle,
                                 shards=shards, ladder=ladder)
    return [ShapedBatch(order[bounds[b] : bounds[b + 1]].tolist(), int(padded[b]), epoch)
            for b in range(len(bounds) - 1)]


class TokenBudgetSampler(Sampler[list[int]]):
    """A batch sampler over :func:`token_budget_batches`, each global batch split across ranks
    (padded up to ``ladder``'s rungs where one is given).

    Call :meth:`set_epoch` each epoch (Lightning does) for a new deterministic order, and
    :meth:`resume_at` to continue an epoch part-way through (the batches are a pure function of
    the seed and the epoch, so a position is just two numbers).
    """

    def __init__(
        self, lengths: Sequence[int] | np.ndarray, max_tokens: int, *, seed: int = 0,
        shuffle: bool = True, rank: int = 0, world_size: int = 1,
        ladder: LengthLadder | None = None,
    ) -> None:
        self.lengths, self.max_tokens = np.asarray(lengths, dtype=np.int64), max_tokens
        self.ladder = ladder
        self.seed, self.shuffle = seed, shuffle
        self.rank, self.world_size = rank, world_size
        self.epoch = 0
        self._skip = 0  # batches of the current epoch to pass over on the next iteration
        self._cached: tuple[int, tuple[np.ndarray, np.ndarray]] | None = None

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

    def _packed(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._cached is None or self._cached[0] != self.epoch:  # len() and iter() share it
            self._cached = (self.epoch, pack(
                self.lengths, self.max_tokens, seed=self.seed, epoch=self.epoch,
                shuffle=self.shuffle, shards=self.world_size, ladder=self.ladder,
            ))
        return self._cached[1]

    def _share(self, batch: np.ndarray, length: int, epoch: int) -> ShapedBatch:
        if self.world_size > 1:
            batch = (batch[self.rank :: self.world_size] if len(batch) > self.rank
                     else batch[[self.rank % len(batch)]])
        return ShapedBatch(batch.tolist(), int(length), epoch)

    def __iter__(self) -> Iterator[list[int]]:
        # The skip stays until the epoch changes or resume_done(): a multi-process DataLoader
        # iterates its batch sampler twice while it starts.
        # Read now, not when the first batch is drawn: resume_done() may reset it in between.
        order, bounds, padded = self._packed()
        epoch = self.epoch
        return (self._share(order[bounds[b] : bounds[b + 1]], padded[b], epoch)
                for b in range(self._skip, len(bounds) - 1))

    def resume_done(self) -> None:
        """The resumed iteration has started: later ones begin at the epoch's first batch."""
        self._skip = 0

    @property
    def skipped(self) -> int:
        """Batches the next iteration will pass over (set by :meth:`resume_at`)."""
        return self._skip

    def __len__(self) -> int:
        return len(self._packed()[1]) - 1

    def shapes(self, sides: Sequence[np.ndarray]) -> ShapeCount:
        """The shapes and padding of this epoch's global batches, whose examples' sides have
        the lengths ``sides`` (:func:`~normzoo.data.shapes.count_shapes`)."""
        return count_shapes(sides, *self._packed())


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
