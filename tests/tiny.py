"""The tiny translation recipe that command-line tests train in about a second: one layer on
each side, ``d_model`` 32, a few built-in sentences, one step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

TINY: dict[str, Any] = {
    "task": "translation",
    "seed": 3,
    "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "encoder_layers": 1,
              "decoder_layers": 1, "max_positions": 64},
    "data": {"train_limit": 60, "valid_limit": 4, "max_tokens": 512, "max_len": 64,
             "tokenizer": {"vocab_size": 120, "min_frequency": 1}},
    "trainer": {"max_steps": 1, "val_every_steps": 1, "progress_bar": False,
                "accelerator": "cpu", "keep_checkpoints": 0, "save_top_k": 0},
    "eval": {"valid_bleu": False},
}


def tiny(**changes: Any) -> dict[str, Any]:
    """:data:`TINY` with ``changes``: a section given as a mapping updates that section."""
    return {**TINY, **{key: {**TINY[key], **value} if isinstance(value, dict) and key in TINY
                       else value for key, value in changes.items()}}


def toy_text(folder: Path, sizes: tuple[int, int, int] = (300, 20, 20)) -> Path:
    """The built-in corpus's source side as ``train/valid/test.txt`` in ``folder``: text for
    language-model runs (``data.source=files``)."""
    from normzoo.data import builtin

    for split, size in zip(("train", "valid", "test"), sizes, strict=True):
        lines = [source for source, _ in builtin.generate(split, size=size)]
        (folder / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder
