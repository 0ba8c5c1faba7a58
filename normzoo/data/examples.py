"""Encoded examples and how a batch of them becomes tensors, for each task.

Pure torch (no Lightning): the data module wires these to loaders and samplers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from normzoo.data.tokenizer import BOS, EOS, MASK, PAD, SPECIALS


def pad(rows: Sequence[Sequence[int]], value: int = PAD) -> torch.Tensor:
    """Right-pad ``rows`` into one ``[len(rows), longest]`` long tensor."""
    longest = max(len(r) for r in rows)
    out = torch.full((len(rows), longest), value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.as_tensor(row, dtype=torch.long)
    return out


@dataclass
class ParallelData:
    """Encoded sentence pairs; ``ids`` index into the split (for scoring each sentence once)."""

    src: list[list[int]]
    tgt: list[list[int]]
    ids: list[int]

    @classmethod
    def build(cls, src: list[list[int]], tgt: list[list[int]], max_len: int, drop_long: bool):
        """Training drops pairs longer than ``max_len``; evaluation truncates them instead."""
        keep_src, keep_tgt, ids = [], [], []
        for i, (s, t) in enumerate(zip(src, tgt, strict=True)):
            if drop_long and (len(s) + 1 > max_len or len(t) + 1 > max_len):
                continue
            keep_src.append(s[: max_len - 1])
            keep_tgt.append(t[: max_len - 1])
            ids.append(i)
        return cls(keep_src, keep_tgt, ids)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> int:
        return i

    def lengths(self) -> list[int]:
        return [max(len(s), len(t)) + 1 for s, t in zip(self.src, self.tgt, strict=True)]

    def collate(self, items: list[int]) -> dict[str, torch.Tensor]:
        """Source + EOS; target input BOS + target; target output target + EOS."""
        return {
            "src": pad([self.src[i] + [EOS] for i in items]),
            "tgt_in": pad([[BOS, *self.tgt[i]] for i in items]),
            "tgt_out": pad([[*self.tgt[i], EOS] for i in items]),
            "ids": torch.tensor([self.ids[i] for i in items], dtype=torch.long),
            # Counted here, on the host, so logging throughput never waits for the device.
            "ntokens": sum(len(self.tgt[i]) + 1 for i in items),
        }


@dataclass
class SentenceData:
    """Encoded sentences for masked LM: BOS + tokens + EOS, one example per line.

    With ``mask_seed`` set (validation, evaluation), a batch's masks depend only on the seed and
    the batch, so the metric compares checkpoints on the same masked tokens every time.
    """

    rows: list[list[int]]
    vocab_size: int
    mask_prob: float
    mask_seed: int | None = None

    @classmethod
    def build(cls, lines: list[list[int]], max_len: int, vocab_size: int, mask_prob: float,
              mask_seed: int | None = None):
        rows = [[BOS, *ids[: max_len - 2], EOS] for ids in lines if ids]
        return cls(rows, vocab_size, mask_prob, mask_seed)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> int:
        return i

    def lengths(self) -> list[int]:
        return [len(r) for r in self.rows]

    def collate(self, items: list[int]) -> dict[str, torch.Tensor]:
        """BERT masking: of the chosen positions, 80% -> <mask>, 10% random, 10% unchanged."""
        tokens = pad([self.rows[i] for i in items])
        rng = None
        if self.mask_seed is not None:
            rng = torch.Generator().manual_seed(self.mask_seed * 1_000_003 + items[0])
        maskable = tokens >= len(SPECIALS)
        chosen = (torch.rand(tokens.shape, generator=rng) < self.mask_prob) & maskable
        # At least one target per sentence, so no example contributes nothing.
        none = ~chosen.any(dim=1) & maskable.any(dim=1)
        if none.any():
            first = maskable.float().argmax(dim=1)
            chosen[none, first[none]] = True
        labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
        roll = torch.rand(tokens.shape, generator=rng)
        inputs = tokens.clone()
        inputs[chosen & (roll < 0.8)] = MASK
        random_ids = torch.randint(len(SPECIALS), self.vocab_size, tokens.shape, generator=rng)
        swap = chosen & (roll >= 0.8) & (roll < 0.9)
        inputs[swap] = random_ids[swap]
        return {"tokens": inputs, "labels": labels, "ntokens": int(maskable.sum())}


@dataclass
class BlockData:
    """Causal LM: all lines joined with EOS, cut into blocks of ``block + 1`` tokens."""

    blocks: list[list[int]]

    @classmethod
    def build(cls, lines: list[list[int]], block: int):
        stream: list[int] = []
        for ids in lines:
            stream.extend(ids)
            stream.append(EOS)
        size = block + 1
        blocks = [stream[i : i + size] for i in range(0, len(stream) - 1, block)]
        return cls([b for b in blocks if len(b) > 1])

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, i: int) -> int:
        return i

    def lengths(self) -> list[int]:
        return [len(b) - 1 for b in self.blocks]

    def collate(self, items: list[int]) -> dict[str, torch.Tensor]:
        rows = [self.blocks[i] for i in items]
        return {
            "tokens": pad([r[:-1] for r in rows]),
            "labels": pad([r[1:] for r in rows], value=-100),
            "ntokens": sum(len(r) - 1 for r in rows),
        }
