"""Where a split's file is by default: a leaf module (``pathlib`` alone), read by the task
contract's default :meth:`~normzoo.contract.task.Task.split_files` and by the data readers."""

from __future__ import annotations

from pathlib import Path


def text_file(directory: Path, split: str) -> Path:
    """The file of a one-column split in ``directory``: ``{split}.txt``, or the file named
    ``split`` itself where there is no such ``.txt`` (``train.de`` takes one side of a parallel
    corpus, as ``../shared/data/multi30k`` holds it)."""
    txt = directory / f"{split}.txt"
    named = directory / split
    return named if not txt.exists() and named.is_file() else txt
