"""Encoded examples and how a batch of them becomes tensors, for each task.

Examples live in flat numpy arrays (:class:`TokenTable`: all token ids end to end, plus where
each row starts), memory-mapped from the prepared cache during training or built in memory for
a few sentences at the command line. Nothing here holds a Python list per example, so a split
of millions of pairs costs a few arrays, shared between the processes that map them.

Pure torch and numpy (no Lightning): the data module wires these to loaders and samplers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from normzoo.data.tokenizer import BOS, EOS, MASK, PAD, SPECIALS


def pad(rows: Sequence[Sequence[int]], value: int = PAD, length: int = 0) -> torch.Tensor:
    """Right-pad ``rows`` into one ``[len(rows), longest]`` long tensor, or ``[len(rows),
    length]`` where ``length`` (a ladder's rung: :mod:`normzoo.data.shapes`) is longer."""
    longest = max(length, *(len(r) for r in rows))
    out = np.full((len(rows), longest), value, dtype=np.int64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return torch.from_numpy(out)


def token_dtype(vocab_size: int) -> np.dtype:
    """The narrowest unsigned type that holds every id: half the bytes of int32 for the
    vocabularies (< 65,536) that nearly every recipe uses, as fairseq and nanoGPT do."""
    return np.dtype(np.uint16 if vocab_size <= 2**16 else np.uint32)


@dataclass
class TokenTable:
    """Rows of token ids stored end to end: row ``i`` is ``tokens[offsets[i]:offsets[i + 1]]``."""

    tokens: np.ndarray
    offsets: np.ndarray

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[int]], vocab_size: int = 2**32) -> TokenTable:
        lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        tokens = np.fromiter((t for r in rows for t in r), dtype=token_dtype(vocab_size),
                             count=int(offsets[-1]))
        return cls(tokens, offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def row(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


class Indexed:
    """A map-style dataset whose items are their own indices: batches are built whole by
    ``collate`` from the indices a batch sampler chose, never one example at a time. A task's
    dataset (:meth:`~normzoo.contract.task.Task.dataset`) subclasses it and gives
    ``collate(items)``, ``lengths()`` and ``sides()``."""

    def __getitem__(self, i: int) -> int:
        return i

    def __getitems__(self, items: list[int]) -> list[int]:
        """A whole batch at once (torch's DataLoader asks this first), handed on as it is: a
        :class:`~normzoo.data.batching.ShapedBatch` keeps the length it is padded to."""
        return items


class ParallelData(Indexed):
    """Encoded sentence pairs; ``ids`` are the kept rows' line numbers in the split (for
    scoring each sentence once). Training drops pairs longer than ``max_len``; evaluation
    keeps them and truncates them instead."""

    def __init__(self, src: TokenTable, tgt: TokenTable, max_len: int, drop_long: bool) -> None:
        self.src, self.tgt, self.max_len = src, tgt, max_len
        src_len, tgt_len = src.lengths(), tgt.lengths()
        if drop_long:
            self.ids = np.flatnonzero((src_len < max_len) & (tgt_len < max_len))
        else:
            self.ids = np.arange(len(src), dtype=np.int64)
        cap = max_len - 1
        self._src_len = np.minimum(src_len[self.ids], cap)
        self._tgt_len = np.minimum(tgt_len[self.ids], cap)

    @classmethod
    def build(cls, src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]], max_len: int,
              drop_long: bool) -> ParallelData:
        """From token lists in memory (a few sentences at the command line)."""
        return cls(TokenTable.from_rows(src), TokenTable.from_rows(tgt), max_len, drop_long)

    def __len__(self) -> int:
        return len(self.ids)

    def lengths(self) -> np.ndarray:
        """Padded length of each pair: the longer side plus its EOS or BOS."""
        return np.maximum(self._src_len, self._tgt_len) + 1

    def src_lengths(self) -> np.ndarray:
        return self._src_len + 1

    def sides(self) -> list[np.ndarray]:
        """The lengths of each example's tensors as a batch pads them: source, target."""
        return [self._src_len + 1, self._tgt_len + 1]

    def collate(self, items: Sequence[int]) -> dict[str, torch.Tensor]:
        """Source + EOS; target input BOS + target; target output target + EOS; both sides
        padded to the batch's rung where it has one (:class:`ShapedBatch`), each to its own
        longest otherwise."""
        cap = self.max_len - 1
        length = getattr(items, "length", 0)
        src = [self.src.row(self.ids[i])[:cap] for i in items]
        tgt = [self.tgt.row(self.ids[i])[:cap] for i in items]
        return {
            "src": pad([np.append(s, EOS) for s in src], length=length),
            "tgt_in": pad([np.insert(t, 0, BOS) for t in tgt], length=length),
            "tgt_out": pad([np.append(t, EOS) for t in tgt], length=length),
            "ids": torch.from_numpy(self.ids[np.asarray(items, dtype=np.int64)]),
            # Counted here, on the host, so logging throughput never waits for the device.
            "ntokens": sum(len(t) + 1 for t in tgt),
        }


class SentenceData(Indexed):
    """Encoded sentences for masked LM: BOS + tokens + EOS, one example per non-empty line.

    With ``mask_seed`` set (validation, test, evaluation), each sentence's masks depend only on
    the seed and the sentence's line number, not on the batch it falls in (token budget, number
    of processes), so the metric compares checkpoints on the same masked tokens every time and
    ``normzoo evaluate`` scores what the run's final test scored. With ``epoch_masks`` as well
    (training), each epoch masks anew (:func:`epoch_seed` of the batch's ``epoch``), the same in
    a loader worker as in the training process, so a resumed run trains on the masks an
    uninterrupted one did. Without ``mask_seed``, torch's global generator draws them.
    """

    def __init__(self, lines: TokenTable, max_len: int, vocab_size: int, mask_prob: float,
                 mask_seed: int | None = None, epoch_masks: bool = False) -> None:
        self.lines, self.max_len = lines, max_len
        self.vocab_size, self.mask_prob, self.mask_seed = vocab_size, mask_prob, mask_seed
        self.epoch_masks = epoch_masks
        lengths = lines.lengths()
        self.keep = np.flatnonzero(lengths > 0)
        self._lengths = np.minimum(lengths[self.keep], max_len - 2) + 2

    @classmethod
    def build(cls, lines: Sequence[Sequence[int]], max_len: int, vocab_size: int,
              mask_prob: float, mask_seed: int | None = None) -> SentenceData:
        return cls(TokenTable.from_rows(lines), max_len, vocab_size, mask_prob, mask_seed)

    def __len__(self) -> int:
        return len(self.keep)

    def lengths(self) -> np.ndarray:
        return self._lengths

    def sides(self) -> list[np.ndarray]:
        return [self._lengths]

    def rows(self, items: Sequence[int]) -> list[np.ndarray]:
        cap = self.max_len - 2
        return [np.concatenate(([BOS], self.lines.row(self.keep[i])[:cap], [EOS]))
                for i in items]

    def collate(self, items: Sequence[int]) -> dict[str, torch.Tensor]:
        seed = self.mask_seed
        if seed is not None and self.epoch_masks:  # training: new masks every epoch
            seed = epoch_seed(seed, getattr(items, "epoch", 0))
        return mask_tokens(pad(self.rows(items), length=getattr(items, "length", 0)),
                           self.vocab_size, self.mask_prob,
                           seed, lines=self.keep[np.asarray(items, dtype=np.int64)])


# SplitMix64's increment and multipliers (Steele et al. 2014), for the seeded masks.
_GOLDEN, _MIX1, _MIX2 = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9),
                         np.uint64(0x94D049BB133111EB))


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's step: ``z`` plus the increment, scrambled (wrapping uint64 arithmetic)."""
    z = z + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def epoch_seed(seed: int, epoch: int) -> int:
    """The mask seed of a training epoch: a hash of the run's seed and the epoch, so each epoch
    masks each sentence anew, and the masks are the same in a worker process, the training
    process or a resumed run."""
    with np.errstate(over="ignore"):
        mixed = _mix(np.array([seed % 2**64], dtype=np.uint64)
                     + np.uint64(epoch + 1) * _GOLDEN)
    return int(mixed[0])


def _hashed_uniforms(seed: int, stream: int, lines: np.ndarray, width: int) -> torch.Tensor:
    """``[len(lines), width]`` numbers in [0, 1): entry (i, j) a hash of (``seed``,
    ``stream``, ``lines[i]``, j), so it is the same in any batch that holds line ``lines[i]``."""
    with np.errstate(over="ignore"):
        key = _mix(np.array([(seed % 2**64) ^ (stream << 56)], dtype=np.uint64))
        key = _mix(key + np.asarray(lines, dtype=np.uint64)[:, None])
        key = _mix(key + np.arange(width, dtype=np.uint64)[None, :])
    return torch.from_numpy((key >> np.uint64(11)).astype(np.float64) * 2.0**-53)


def mask_tokens(tokens: torch.Tensor, vocab_size: int, mask_prob: float, seed: int | None,
                lines: Sequence[int] | None = None) -> dict[str, torch.Tensor]:
    """BERT masking: of the chosen positions, 80% -> <mask>, 10% random, 10% unchanged.

    Without ``seed`` the draws come from torch's global generator (training). With one, each
    draw for position j of row i is a hash of (``seed``, ``lines[i]``, j): a sentence gets the
    same masks whatever batch it is in and wherever in it (``lines`` names each row's sentence;
    default, its row)."""
    if seed is None:
        pick, roll = torch.rand(tokens.shape), torch.rand(tokens.shape)
        random_ids = torch.randint(len(SPECIALS), vocab_size, tokens.shape)
    else:
        keys = np.arange(len(tokens)) if lines is None else np.asarray(lines)
        pick, roll, draw = (_hashed_uniforms(seed, stream, keys, tokens.shape[1])
                            for stream in range(3))
        random_ids = len(SPECIALS) + (draw * (vocab_size - len(SPECIALS))).long()
    maskable = tokens >= len(SPECIALS)
    chosen = (pick < mask_prob) & maskable
    # At least one target per sentence, so no example contributes nothing.
    none = ~chosen.any(dim=1) & maskable.any(dim=1)
    if none.any():
        first = maskable.float().argmax(dim=1)
        chosen[none, first[none]] = True
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    inputs = tokens.clone()
    inputs[chosen & (roll < 0.8)] = MASK
    swap = chosen & (roll >= 0.8) & (roll < 0.9)
    inputs[swap] = random_ids[swap]
    return {"tokens": inputs, "labels": labels, "ntokens": int(maskable.sum())}


class BlockData(Indexed):
    """Causal LM: one token stream (every line followed by EOS), cut into blocks of
    ``block + 1`` tokens that overlap by one, so block ``i``'s last label is block ``i+1``'s
    first input. A block is a view into the stream: nothing is copied until collation.
    ``offsets`` (where each line starts in the stream, as a :class:`TokenTable` keeps them) say
    which line each predicted token belongs to, so a final test can score line by line."""

    def __init__(self, stream: np.ndarray, block: int, offsets: np.ndarray | None = None) -> None:
        self.stream, self.block, self.offsets = stream, block, offsets
        self.starts = np.arange(0, max(len(stream) - 1, 0), block, dtype=np.int64)

    @classmethod
    def build(cls, lines: Sequence[Sequence[int]], block: int) -> BlockData:
        table = TokenTable.from_rows([[*ids, EOS] for ids in lines])
        return cls(table.tokens, block, table.offsets)

    def label_lines(self, item: int, count: int) -> np.ndarray:
        """The line of each of block ``item``'s first ``count`` labels (stream positions
        ``start + 1`` on); needs ``offsets``."""
        if self.offsets is None:
            raise ValueError("a BlockData built without its lines' offsets")
        positions = self.starts[item] + 1 + np.arange(count, dtype=np.int64)
        return np.searchsorted(self.offsets, positions, side="right") - 1

    def __len__(self) -> int:
        return len(self.starts)

    def lengths(self) -> np.ndarray:
        return np.minimum(self.block + 1, len(self.stream) - self.starts) - 1

    def sides(self) -> list[np.ndarray]:
        return [self.lengths()]

    def collate(self, items: Sequence[int]) -> dict[str, torch.Tensor]:
        rows = [self.stream[self.starts[i] : self.starts[i] + self.block + 1] for i in items]
        return collate_blocks(rows, getattr(items, "length", 0))


def collate_blocks(rows: Sequence[np.ndarray], length: int = 0) -> dict[str, torch.Tensor]:
    """Inputs are a block without its last token, labels without its first (both padded to
    ``length`` where the batch's rung is longer)."""
    return {
        "tokens": pad([r[:-1] for r in rows], length=length),
        "labels": pad([r[1:] for r in rows], value=-100, length=length),
        "ntokens": sum(len(r) - 1 for r in rows),
    }
