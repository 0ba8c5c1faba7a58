"""The recipe's ``data`` section: where the text comes from, how it is tokenized and how it is
batched, with the rules that tie its fields together.

Kept apart from :mod:`normzoo.recipe.schema` as :mod:`normzoo.recipe.optim` is: a section with
rules of its own, read by the data path (:mod:`normzoo.data`) and the run alike.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from normzoo.errors import Problem
from normzoo.recipe.section import Section
from normzoo.registry.options import rule_error


class TokenizerConfig(Section):
    """Subword tokenizer trained on the training split (cached by content hash), or, with
    ``type: file``, an existing Hugging Face ``tokenizers`` JSON at ``path``, used as it is
    (the training settings below are then not used). ``path`` is relative to the folder
    ``normzoo`` runs in, as ``data.dir`` is.

    Translation uses one joint source/target vocabulary, so embeddings can be shared.
    """

    type: Literal["bpe", "unigram", "file"] = "bpe"
    path: str | None = Field(
        default=None, description="type file: the tokenizer.json to use (one saved by "
        "tokenizers, e.g. a run's own); it needs normzoo's special tokens at ids 0-4")
    vocab_size: int = Field(default=8000, ge=64, le=2**24)
    min_frequency: int = Field(default=2, ge=1)
    lowercase: bool = False
    sample_size: int | None = Field(
        default=1_000_000, gt=0,
        description="train on a seeded sample of this many training examples (null: all)")
    sample_seed: int = Field(default=0, description="seed of that sample")

    @model_validator(mode="after")
    def _file_has_a_path(self) -> TokenizerConfig:
        if self.type == "file" and not self.path:
            raise rule_error(Problem("path", "required when type is 'file'"))
        if self.type != "file" and self.path:  # a forgotten type: file would train a new one
            raise rule_error(Problem("path", f"is read only with type: file (type is "
                                     f"{self.type}, which trains a tokenizer)"))
        return self


class DataConfig(Section):
    """Where the text comes from and how it is batched.

    * ``source: builtin`` — the toy corpus shipped with normzoo (no network, no files).
    * ``source: files`` — line-aligned files ``{dir}/{split}.{lang}`` (translation) or
      ``{dir}/{split}.txt`` (mlm / causal_lm).
    * ``source: hub`` — a Hugging Face dataset ``path`` / ``name`` (network, or a local folder
      in the hub's layout given as ``path``).
    """

    source: Literal["builtin", "files", "hub"] = "builtin"
    dir: str | None = None
    path: str | None = None
    name: str | None = None
    src_lang: str = "en"
    tgt_lang: str = "xx"
    train_split: str = "train"
    valid_split: str = "valid"
    test_split: str = "test"
    text_field: str = "text"
    max_tokens: int = Field(default=4096, gt=0, description="token budget of one batch")
    max_len: int = Field(default=256, gt=1, description="longer examples are dropped")
    train_limit: int | None = Field(default=None, gt=0, description="use the first N examples")
    valid_limit: int | None = Field(
        default=None, gt=0, description="use the first N examples of the validation and test splits"
    )
    mask_prob: float = Field(default=0.15, gt=0, lt=1, description="MLM: fraction masked")
    num_workers: Annotated[int, Field(ge=0)] | Literal["auto"] = Field(
        default="auto",
        description="processes that collate batches beside the training loop; auto: 4 on a "
                    "CUDA device (fewer where the machine has fewer CPUs per process), 0 on a "
                    "CPU, whose cores the step itself uses")
    streaming: bool = Field(
        default=False,
        description="hub corpora too large to prepare: stream and tokenize while training")
    shuffle_buffer: int = Field(default=10_000, gt=0, description="streaming: shuffle buffer")
    buckets: int | list[int] | Literal["auto"] | None = Field(
        default="auto",
        description="batch lengths padded up to a ladder: N rungs fitted to the training "
                    "split, a list of lengths, or null (each batch to its longest); auto: "
                    "12 rungs on a CUDA device, where shapes cost, null on a CPU")
    tokenizer: TokenizerConfig = TokenizerConfig()

    @field_validator("buckets", mode="before")
    @classmethod
    def _ladder(cls, value: Any) -> Any:
        """One message for every wrong value, rather than pydantic's one per union member."""
        if value is None or value == "auto":
            return value
        whole = isinstance(value, int) and not isinstance(value, bool)
        listed = isinstance(value, list) and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value)
        if not (whole or listed):
            raise ValueError(f"{value!r}: expected auto, null, a number of rungs or a list of "
                             "lengths such as [16, 32, 64]")
        if whole and value < 1:
            raise ValueError(f"{value}: a ladder has at least one rung (null pads each batch to "
                             "its longest example)")
        if listed and (not value or min(value) < 1 or value != sorted(set(value))):
            raise ValueError(f"{value}: the lengths of a ladder are positive and ascending, "
                             "each once")
        return value

    @model_validator(mode="after")
    def _source_fields(self) -> DataConfig:
        problems = []
        if self.source == "files" and not self.dir:
            problems.append(Problem("dir", "required when source is 'files'"))
        if self.source == "hub" and not self.path:
            problems.append(Problem("path", "required when source is 'hub'"))
        if self.streaming and self.source != "hub":
            problems.append(Problem("streaming", "streams hub datasets only; prepare local "
                                    "files with `normzoo prepare`"))
        if self.max_len > self.max_tokens:
            problems.append(Problem("max_len", f"{self.max_len} exceeds max_tokens="
                                    f"{self.max_tokens}: the longest example would not fit a "
                                    "batch"))
        if isinstance(self.buckets, list) and self.buckets[-1] > self.max_len:
            problems.append(Problem("buckets", f"{self.buckets[-1]} exceeds max_len="
                                    f"{self.max_len}: no example is that long, and the "
                                    "model may have no position for it"))
        if problems:
            raise rule_error(*problems)
        return self
