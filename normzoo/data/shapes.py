"""Few batch shapes: a ladder of lengths that token-budget batches are padded up to.

A GPU pays for every new batch shape: cuDNN's attention builds a plan per shape (0.4-4.3 s for
the first step on each new shape of Transformer-base on an H200), the caching allocator carves
new blocks, and a compiled step with static shapes compiles once per shape. Token-budget
batches padded to their own longest example come in dozens of shapes (35 in a Multi30k epoch
at 2,048 tokens a batch). Padded up to a short ladder of lengths instead, every batch of one
rung has the same length and, the budget being fixed, the same number of rows: an epoch has
about as many shapes as the ladder has rungs.

The ladder is fitted to the training split's lengths (:meth:`LengthLadder.fit`): the rungs
that pad the fewest token slots, found exactly by dynamic programming over the distinct
lengths. Twelve rungs give Multi30k 13 shapes and 10.6% padding at 2,048 tokens a batch, where
exact lengths give 35 shapes and 6.8% (``tests/test_shapes.py`` measures both on the real
data). A streamed corpus has no lengths up front: its ladder is spread geometrically up to
``max_len`` (:meth:`LengthLadder.spread`).

Padding is invisible to the model: padded keys are masked in attention and norms, every other
layer works token by token and the loss skips padded labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from normzoo.recipe import DataConfig

# Rungs of the ladder that ``data.buckets: auto`` fits where shapes cost (a GPU, or compile).
DEFAULT_RUNGS = 12


@dataclass(frozen=True)
class LengthLadder:
    """Lengths, ascending, that a batch's time dimension is padded up to (the smallest rung
    at least as long as its longest example; a longer example keeps its own length)."""

    rungs: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.rungs or any(r < 1 for r in self.rungs) or list(self.rungs) != sorted(
                set(self.rungs)):
            raise ValueError(f"a ladder is distinct positive lengths, ascending: {self.rungs}")

    def ceil(self, lengths: np.ndarray | int) -> np.ndarray | int:
        """Each length padded up to its rung (itself past the top rung)."""
        rungs = np.asarray(self.rungs)
        values = np.asarray(lengths)
        at = np.searchsorted(rungs, values)
        out = np.where(at < len(rungs), rungs[np.minimum(at, len(rungs) - 1)], values)
        return int(out) if np.ndim(lengths) == 0 else out

    @classmethod
    def fit(cls, lengths: Sequence[int] | np.ndarray, count: int) -> LengthLadder:
        """The ``count`` rungs that pad ``lengths`` to the fewest token slots in all (the top
        rung is the longest length, so nothing outgrows the ladder); exact, by dynamic
        programming over the distinct lengths (a few hundred at most: milliseconds)."""
        lengths = np.maximum(np.asarray(lengths, dtype=np.int64), 1)
        if lengths.size == 0:
            return cls((1,))
        values, counts = np.unique(lengths, return_counts=True)
        if count >= len(values):
            return cls(tuple(int(v) for v in values))
        # below[j]: examples no longer than values[j]; a rung at values[j] over (values[i],
        # values[j]] costs values[j] slots for each of below[j] - below[i] examples.
        below = np.concatenate(([0], np.cumsum(counts)))
        n = len(values)
        cost = np.full((count, n), np.inf)
        choice = np.zeros((count, n), dtype=np.int64)
        cost[0] = below[1:] * values
        for k in range(1, count):
            for j in range(k, n):
                # the previous rung at values[i], i < j
                options = cost[k - 1, :j] + (below[j + 1] - below[1 : j + 1]) * values[j]
                choice[k, j] = int(np.argmin(options))
                cost[k, j] = options[choice[k, j]]
        rungs, j = [], n - 1
        for k in range(count - 1, -1, -1):
            rungs.append(int(values[j]))
            j = int(choice[k, j])
        return cls(tuple(sorted(set(rungs))))

    @classmethod
    def spread(cls, count: int, longest: int, shortest: int = 8) -> LengthLadder:
        """``count`` rungs from ``shortest`` to ``longest``, each a constant factor above the
        last and rounded up to a multiple of 8 (a streamed corpus, whose lengths are unknown
        until it is read)."""
        if longest <= shortest or count <= 1:
            return cls((longest,))
        raw = np.geomspace(shortest, longest, count)
        rungs = {min(int(-(-r // 8) * 8), longest) for r in raw}
        return cls(tuple(sorted(rungs | {longest})))


def rows_per_rung(ladder: LengthLadder, budget: int, shards: int = 1) -> np.ndarray:
    """How many examples a batch at each rung holds: as many as the budget allows, a multiple
    of ``shards`` (every rank gets the same number of rows) where at least ``shards`` fit."""
    rows = budget // np.asarray(ladder.rungs, dtype=np.int64)
    rounded = rows // shards * shards
    return np.maximum(np.where(rounded > 0, rounded, rows), 1)


@dataclass(frozen=True)
class ShapeCount:
    """The batches of one epoch as the model sees them: ``shapes`` distinct shapes (rows and
    padded length of each side), ``padding`` the fraction of their token slots that are
    padding, over ``batches`` batches."""

    shapes: int
    padding: float
    batches: int

    def describe(self) -> str:
        return (f"{self.batches:,} batches an epoch in {self.shapes} shapes, "
                f"{self.padding:.1%} of their token slots padding")


def count_shapes(sides: Sequence[np.ndarray], order: np.ndarray, bounds: np.ndarray,
                 padded: np.ndarray) -> ShapeCount:
    """The shapes and padding of the batches ``order[bounds[b]:bounds[b + 1]]``, whose sides
    (a translation's source and target; one for a language model) have the lengths
    ``sides``; batch ``b`` pads every side to ``padded[b]``, or to that side's own longest
    where ``padded[b]`` is 0."""
    count = len(bounds) - 1
    if count <= 0:
        return ShapeCount(0, 0.0, 0)
    starts = bounds[:-1]
    rows = np.diff(bounds)
    columns, slots, real = [rows], 0, 0
    for side in sides:
        ordered = np.asarray(side, dtype=np.int64)[order]
        longest = np.maximum.reduceat(ordered, starts)
        length = np.where(padded > 0, np.maximum(padded, longest), longest)
        columns.append(length)
        slots += int((rows * length).sum())
        real += int(ordered.sum())
    shapes = len(np.unique(np.stack(columns, axis=1), axis=0))
    return ShapeCount(shapes, 1.0 - real / slots if slots else 0.0, count)


def ladder_rungs(data: DataConfig) -> int | None:
    """How many rungs ``data.buckets`` gives the ladder (None: no ladder, or ``auto`` left
    unresolved): about the shapes of an epoch, for a compiled step's static shapes."""
    buckets = data.buckets
    if isinstance(buckets, list):
        return len(buckets)
    return buckets if isinstance(buckets, int) and not isinstance(buckets, bool) else None


def ladder_for(data: DataConfig, lengths: np.ndarray | None) -> LengthLadder | None:
    """The ladder ``data.buckets`` asks for: ``N`` rungs fitted to the training ``lengths``
    (spread up to ``max_len`` where there are none: a streamed split), the lengths listed, or
    None (``null``, and ``auto`` left unresolved: each batch padded to its longest)."""
    buckets = data.buckets
    if isinstance(buckets, list):
        return LengthLadder(tuple(buckets))
    if not isinstance(buckets, int) or isinstance(buckets, bool):
        return None
    if lengths is None:
        return LengthLadder.spread(buckets, data.max_len)
    return LengthLadder.fit(lengths, buckets)


def batch_shapes_line(ladder: LengthLadder | None, shapes: ShapeCount | None) -> str:
    """What a run's first lines say of its batches: the ladder, and one epoch's shapes and
    padding (a streamed split's are known only as it is read)."""
    padded = (f"lengths padded up to a ladder of {len(ladder.rungs)} "
              f"({', '.join(map(str, ladder.rungs))})" if ladder is not None
              else "each batch padded to its longest example")
    if shapes is None:
        return f"train batches: {padded} (streamed: shapes counted as they come)"
    return f"train batches: {padded}; {shapes.describe()}"
