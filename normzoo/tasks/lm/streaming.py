"""Token-budget batches streamed from a hub corpus too large to prepare on disk, resumable exactly.

Rows come from a ``datasets`` streaming dataset through its seeded shuffle buffer (reshuffled
each epoch by ``set_epoch``); the lines are encoded in chunks, cut into examples, gathered into
pools of about ``pool_batches`` batches, sorted by length and packed like the map-style
:mod:`normzoo.data.batching`; the order of each pool's batches is shuffled by a seeded RNG. The
stream never ends: after the last pool of an epoch the next epoch starts.

Ranks: every rank reads and encodes the whole stream, packs *global* batches of
``world_size * max_tokens`` tokens and takes every ``world_size``-th example of each, as
``TokenBudgetSampler`` does. So all ranks yield the same number of batches (DDP cannot hang),
their shares are disjoint, and 2 processes with budget B see exactly what 1 process with 2B sees.
``split_dataset_by_node`` would read less per rank but give each rank a different stream, hence
different batch counts per epoch, and break that equivalence; encoding is cheap next to a step.

Resume: ``datasets``' own ``IterableDataset.state_dict()`` is not exact here. It does not save
the shuffle buffer: ``BufferShuffledExamplesIterable.load_state_dict`` warns "without the buffer
content ... will be refilled" (datasets 5.2), so about ``buffer_size`` rows are lost and, per
huggingface/datasets#7901 (fix #8408 still open), some come twice. Instead everything here is a
pure function of (seed, epoch), and a position is a few integers: the epoch, batches handed out
in it, and where the current pool starts (its index, the batches before it, and the stream
position as ``rows`` non-blank lines read plus ``drop`` tokens of the next line). Resuming
re-reads the epoch's rows up to the pool (the shuffle buffer needs them) but encodes only from
the pool on. A state with only ``epoch`` and ``batches`` also works: then the earlier pools are
encoded again to find where they end.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from itertools import chain
from typing import TYPE_CHECKING

import numpy as np
import torch

from normzoo.data.batching import pack
from normzoo.data.shapes import LengthLadder
from normzoo.data.sources import DataError
from normzoo.data.tokenizer import BOS, EOS

if TYPE_CHECKING:
    import datasets

CHUNK = 1000  # lines per call of the encoder
KEYS = ("epoch", "batches", "pool", "first", "rows", "drop")
ENDLESS = 2**62  # the length a streaming loader reports: training stops at max_steps


class Batch(list):
    """One rank's share of a global batch: a list of int64 rows, unpadded. ``position`` is the
    state right after it was handed out, for a caller that delivers batches later than they are
    made (a DataLoader worker, Lightning's one-batch prefetch); ``length`` the length its rows
    are padded to (a ladder's rung; 0: the longest row's)."""

    position: dict[str, int]
    length: int = 0


class StreamingBatches(torch.utils.data.IterableDataset):
    """Endless token-budget batches of ``task`` (``causal_lm`` or ``mlm``) examples: this rank's
    share of each global batch, as unpadded int64 rows (``causal_lm``: blocks of ``max_len + 1``
    tokens, inputs ``[:-1]`` and labels ``[1:]``; ``mlm``: ``[BOS, *ids, EOS]``).

    ``rows_factory()`` opens the raw rows afresh (``load_dataset(..., streaming=True)``) and
    must give the same rows each time: resuming replays them. ``encode`` is a batch encoder
    (``Tokenizer.encode_batch``), called on chunks of ``CHUNK`` lines. Use it in a
    ``DataLoader(batch_size=None)`` with ``num_workers`` 0 or 1 (see :class:`Batch`).
    """

    def __init__(
        self, rows_factory: Callable[[], datasets.IterableDataset], *, task: str,
        encode: Callable[[list[str]], Sequence[Sequence[int]]], max_len: int, max_tokens: int,
        seed: int, buffer_size: int = 10_000, pool_batches: int = 64, rank: int = 0,
        world_size: int = 1, text_field: str = "text", ladder: LengthLadder | None = None,
    ) -> None:
        if task not in ("causal_lm", "mlm"):
            raise ValueError(f"streaming supports the tasks causal_lm and mlm, not {task!r}")
        if max_len > max_tokens:
            raise ValueError(f"max_len={max_len} exceeds max_tokens={max_tokens}: "
                             "the longest example would not fit a batch")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in 0..{world_size - 1}")
        self.rows_factory, self.task, self.encode = rows_factory, task, encode
        self.max_len, self.max_tokens, self.seed = max_len, max_tokens, seed
        self.buffer_size, self.pool_batches = buffer_size, pool_batches
        self.rank, self.world_size, self.text_field = rank, world_size, text_field
        self.ladder = ladder
        self._state = dict.fromkeys(KEYS, 0)

    def state_dict(self) -> dict[str, int]:
        """The position after the last batch this object's iterator handed out."""
        return dict(self._state)

    def load_state_dict(self, state: dict) -> None:
        """Make the next ``__iter__`` continue at ``state`` (a full one, or epoch and batches)."""
        full = all(key in state for key in KEYS)
        self._state = {key: int(state[key]) if full or key in ("epoch", "batches") else 0
                       for key in KEYS}

    def __iter__(self) -> Iterator[list[np.ndarray]]:
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers > 1:  # each worker would yield every batch
            raise ValueError("StreamingBatches needs num_workers <= 1 (it splits nothing "
                             "across DataLoader workers)")
        epoch, start = self._state["epoch"], self._state
        while True:
            count = 0
            for share, position in self._epoch(epoch, start):
                count += 1
                self._state = share.position = position
                yield share
            if count == 0 and not any(start[key] for key in KEYS[1:]):
                raise DataError(f"the stream has no usable lines in column '{self.text_field}'")
            epoch, start = epoch + 1, dict.fromkeys(KEYS, 0)

    # -- one epoch -----------------------------------------------------------------------------

    def _lines(self, epoch: int, skip: int) -> Iterator[list[str]]:
        """The epoch's non-blank lines in chunks, the first ``skip`` read but not returned."""
        rows = self.rows_factory()
        if rows.column_names is not None:  # known up front for parquet; else checked per chunk
            self._check(rows.column_names)
            rows = rows.select_columns([self.text_field])  # decode no other column
        rows = rows.shuffle(seed=self.seed, buffer_size=self.buffer_size)
        rows.set_epoch(epoch)
        for chunk in rows.iter(batch_size=CHUNK):
            self._check(list(chunk))
            lines = [line for line in chunk[self.text_field] if line and line.strip()]
            if skip < len(lines):
                yield lines[skip:]
            skip = max(skip - len(lines), 0)

    def _check(self, columns: list[str]) -> None:
        if self.text_field not in columns:
            raise DataError(f"the streamed dataset has no '{self.text_field}' column: {columns}")

    def _examples(self, epoch: int, rows: int, drop: int) -> Iterator[tuple[np.ndarray, tuple]]:
        """Examples from stream position (``rows``, ``drop``), each with the position after it:
        restarting there gives the same examples that follow it."""
        lines = self._lines(epoch, rows)
        if self.task == "mlm":
            for chunk in lines:
                for ids in self.encode(chunk):
                    rows += 1
                    if ids:
                        yield np.array([BOS, *ids[: self.max_len - 2], EOS], np.int64), (rows, 0)
            return
        # causal_lm: lines + EOS as one flat stream, cut into max_len + 1 tokens every max_len.
        size = self.max_len + 1
        tokens, low = np.empty(0, np.int64), 0  # tokens[i] is at stream position low + i
        starts: deque[int] = deque([0])  # positions where line `rows`, `rows + 1`, ... start
        start, total = drop, 0  # the next block's position; the stream's length (from `rows`)
        for chunk in lines:
            encoded = self.encode(chunk)
            flat = np.fromiter(chain.from_iterable([*ids, EOS] for ids in encoded), np.int64)
            for ids in encoded:
                total += len(ids) + 1
                starts.append(total)
            tokens = np.concatenate([tokens, flat])
            while total - start >= size:
                block = tokens[start - low : start - low + size].copy()
                start += self.max_len
                while len(starts) > 1 and starts[1] <= start:
                    starts.popleft()
                    rows += 1
                yield block, (rows, start - starts[0])
            tokens, low = tokens[start - low :], start
        if total - start > 1:
            yield tokens.copy(), (rows, start - starts[0])

    def _length(self, example: np.ndarray) -> int:
        return max(len(example) - (self.task == "causal_lm"), 1)  # causal: the input's length

    def _epoch(self, epoch: int, start: dict) -> Iterator[tuple[Batch, dict[str, int]]]:
        """This rank's batches of ``epoch`` from ``start``, each with the position after it."""
        budget = self.world_size * self.max_tokens
        pool, first, rows, drop = start["pool"], start["first"], start["rows"], start["drop"]
        skip = start["batches"] - first
        examples = self._examples(epoch, rows, drop)
        upcoming = next(examples, None)  # one ahead, so the epoch's last pool knows it is last
        while upcoming is not None:
            items, tokens = [], 0
            while upcoming is not None and tokens < self.pool_batches * budget:
                example, after = upcoming
                items.append(example)
                tokens += self._length(example)
                upcoming = next(examples, None)
            ended = upcoming is None
            # Sorted by length (stable) and packed as the map-style batches are, each padded
            # to its rung where there is a ladder.
            order, bounds, padded = pack([self._length(x) for x in items], self.max_tokens,
                                         shuffle=False, shards=self.world_size,
                                         ladder=self.ladder)
            batches = [([items[j] for j in order[bounds[b] : bounds[b + 1]]], int(padded[b]))
                       for b in range(len(bounds) - 1)]
            random.Random(f"{self.seed}:{epoch}:{pool}").shuffle(batches)
            for i in range(skip, len(batches)):
                batch, length = batches[i]
                share = batch[self.rank :: self.world_size] or [batch[self.rank % len(batch)]]
                here = {"epoch": epoch, "batches": first + i + 1, "pool": pool, "first": first,
                        "rows": rows, "drop": drop}
                if i + 1 == len(batches):
                    here.update(pool=pool + 1, first=first + len(batches), rows=after[0],
                                drop=after[1])
                    if ended:
                        here = {**dict.fromkeys(KEYS, 0), "epoch": epoch + 1}
                out = Batch(share)
                out.length = length
                yield out, here
            skip = max(skip - len(batches), 0)
            pool, first, (rows, drop) = pool + 1, first + len(batches), after


class StreamingLoader(torch.utils.data.DataLoader):
    """A DataLoader over :class:`StreamingBatches` that reports and restores the position of the
    batches it *handed to the training loop* (each batch carries its own position, so one that a
    worker made ahead of time does not move it). Lightning saves ``state_dict()`` in every
    checkpoint and calls ``load_state_dict()`` before it iterates again."""

    def __init__(self, batches: StreamingBatches, collate, num_workers: int = 0,
                 pin_memory: bool = False) -> None:
        def with_position(share: Batch) -> dict:
            return {**collate(list(share), share.length), "position": dict(share.position)}

        # A generator of its own: starting an iterator must not draw from the global RNG that
        # dropout uses, or a resumed run's dropout would be one draw off.
        super().__init__(batches, batch_size=None, collate_fn=with_position,
                         num_workers=min(num_workers, 1), generator=torch.Generator(),
                         pin_memory=pin_memory)
        self._position = batches.state_dict()

    def __iter__(self) -> Iterator[dict]:
        self.dataset.load_state_dict(self._position)
        for batch in super().__iter__():
            self._position = batch.pop("position")
            yield batch

    def __len__(self) -> int:
        """Endless, but sized: Lightning fetches one batch ahead from a loader without a length,
        which would put the saved position one batch past the last step trained."""
        return ENDLESS

    def state_dict(self) -> dict[str, int]:
        return dict(self._position)

    def load_state_dict(self, state: dict) -> None:
        self._position = {key: int(value) for key, value in state.items()}
