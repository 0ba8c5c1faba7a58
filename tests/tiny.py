"""The tiny translation recipe that command-line tests train in about a second: one layer on
each side, ``d_model`` 32, a few built-in sentences, one step."""

from __future__ import annotations

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
