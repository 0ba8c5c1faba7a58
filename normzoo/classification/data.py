"""A classification split as a dataset: each sentence as ``[BOS, *ids, EOS]`` (cut to
``data.max_len``) and its label's class index."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from normzoo.plugin import BOS, EOS, DataError, Indexed, TokenTable, pad


class LabelledSentences(Indexed):
    """Sentences and class indices; ``labels`` are the examples' label names, ``classes`` the
    recipe's label set (its order is the class index); ``checkpoint`` the trained classifier
    they are scored for (``normzoo evaluate``), None while a run trains."""

    def __init__(self, lines: TokenTable, labels: Sequence[str], classes: Sequence[str],
                 max_len: int, where: str = "", checkpoint: str | None = None) -> None:
        index = {name: i for i, name in enumerate(classes)}
        unknown = sorted(set(labels) - set(index))
        if unknown:
            raise DataError(f"{where}labels {', '.join(map(repr, unknown[:5]))} are not in the "
                            + _advice(classes, checkpoint))
        if len(labels) != len(lines):
            raise DataError(f"{where}{len(lines)} sentences but {len(labels)} labels")
        self.lines, self.max_len = lines, max_len
        self.targets = np.fromiter((index[name] for name in labels), np.int64, len(labels))
        self._lengths = np.minimum(lines.lengths(), max_len - 2) + 2

    @classmethod
    def build(cls, rows: Sequence[Sequence[int]], labels: Sequence[str],
              classes: Sequence[str], max_len: int) -> LabelledSentences:
        return cls(TokenTable.from_rows(rows), labels, classes, max_len)

    def __len__(self) -> int:
        return len(self.targets)

    def lengths(self) -> np.ndarray:
        return self._lengths

    def sides(self) -> list[np.ndarray]:
        return [self._lengths]

    def collate(self, items: Sequence[int]) -> dict[str, torch.Tensor | int]:
        """``tokens`` ``[B, T]``, ``labels`` ``[B]`` and ``ntokens``: the examples the loss is
        averaged over (one per sentence)."""
        cap = self.max_len - 2
        rows = [np.concatenate(([BOS], self.lines.row(i)[:cap], [EOS])) for i in items]
        targets = torch.from_numpy(self.targets[np.asarray(items, dtype=np.int64)])
        return {"tokens": pad(rows, length=getattr(items, "length", 0)), "labels": targets,
                "ntokens": len(rows)}


def _advice(classes: Sequence[str], checkpoint: str | None) -> str:
    """What to do about labels outside ``classes``: a run can widen its label set; a trained
    checkpoint's is fixed (its head has one output per label), so only other data helps."""
    if checkpoint is not None:
        return (f"label set {checkpoint} was trained on ({', '.join(classes)}): score only "
                "files whose labels are among these, or train a classifier with the new labels "
                "added to task_options.labels")
    return (f"label set ({', '.join(classes)}): add them to task_options.labels, or leave it "
            "unset to take the training split's (a resumed run keeps the set its checkpoint "
            "trained with)")
