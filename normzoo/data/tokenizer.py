"""Subword tokenizers trained with Hugging Face ``tokenizers``, cached by content hash, or read
from a ``tokenizer.json`` of that library (``data.tokenizer.type: file``).

Text is split on spaces with the SentencePiece-style ``▁`` marker (Metaspace), so decoding
gives back the original spacing: hypotheses come out detokenized, ready for sacreBLEU against
raw references. ``decode(encode(text)) == NFKC(text)`` for any one-line text that does not start
with a space and whose characters all occur in the training text; a leading space is dropped,
and characters never seen in training (tabs and newlines included) decode to nothing. Special
ids are fixed so models and checkpoints agree on them; a tokenizer read from a file must have
them at those ids (:func:`special_token_problem`).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

from normzoo.errors import NormzooError, RuntimeFailure
from normzoo.io.atomic import atomic_write_text, os_reason

SPECIALS = ("<pad>", "<s>", "</s>", "<unk>", "<mask>")
PAD, BOS, EOS, UNK, MASK = range(len(SPECIALS))


def cache_dir() -> Path:
    """Where trained tokenizers are cached (``$NORMZOO_CACHE`` or ``~/.cache/normzoo``)."""
    root = os.environ.get("NORMZOO_CACHE") or Path.home() / ".cache" / "normzoo"
    return Path(root) / "tokenizers"


def cache_failure(error: OSError | None, folder: Path | None = None) -> RuntimeFailure:
    """The cache folder cannot be used: say which, and how to point it elsewhere (exit 1), as
    Hugging Face does for an unusable ``HF_HOME``, rather than working without it."""
    folder = folder or cache_dir()
    setting = os.environ.get("NORMZOO_CACHE")
    where = (f"NORMZOO_CACHE={setting}" if setting else
             f"the default {cache_dir().parent}, since NORMZOO_CACHE is not set")
    if error is None:
        reason = "it cannot be written"
    else:
        reason = os_reason(error)
        if error.filename is not None and error.errno != errno.ENOSPC:
            reason += f": {error.filename}"
    return RuntimeFailure(f"cannot use the cache {folder} ({where}): {reason}; "
                          "point NORMZOO_CACHE at a writable folder")


def special_token_problem(backend: HFTokenizer) -> str | None:
    """Why ``backend`` cannot be normzoo's tokenizer, naming each special token that it lacks
    or has at another id; None if it has them all at theirs.

    The ids are fixed (:data:`PAD`... :data:`MASK`): models, decoding, batching and the
    Hugging Face export use them as constants, so a tokenizer from elsewhere must have the
    tokens at those ids rather than be mapped onto them."""
    wrong = []
    for i, token in enumerate(SPECIALS):
        found = backend.token_to_id(token)
        if found != i:
            wrong.append(f"{token} (id {i}) is " + ("missing" if found is None else
                                                     f"id {found}"))
    if not wrong:
        return None
    listed = ", ".join(repr(token) for token in SPECIALS)
    return (f"tokenizer does not have normzoo's special tokens at their fixed ids: "
            f"{'; '.join(wrong)}. normzoo pads, begins, ends, replaces unknown text and masks "
            f"with ids 0-4: train the tokenizer with special_tokens=[{listed}] first, in "
            "that order")


class Tokenizer:
    """A subword tokenizer with normzoo's fixed special ids."""

    def __init__(self, backend: HFTokenizer) -> None:
        self.backend = backend
        problem = special_token_problem(backend)
        if problem is not None:
            raise NormzooError(problem)

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        """Subword ids of ``text``, without BOS/EOS."""
        return self.backend.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.backend.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        """Detokenized text; special tokens are dropped, and decoding stops at EOS."""
        ids = list(ids)
        if EOS in ids:
            ids = ids[: ids.index(EOS)]
        return self.backend.decode(ids, skip_special_tokens=True)

    def decode_batch(self, batch: Sequence[Sequence[int]]) -> list[str]:
        return [self.decode(ids) for ids in batch]

    def save(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(path))

    def to_str(self) -> str:
        return self.backend.to_str()

    @classmethod
    def from_str(cls, text: str) -> Tokenizer:
        return cls(HFTokenizer.from_str(text))

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        path = Path(path)
        if not path.is_file():
            raise NormzooError(f"tokenizer file not found: {path}")
        try:
            backend = HFTokenizer.from_file(str(path))
        except Exception as error:  # the library raises bare Exceptions on bad JSON
            raise NormzooError(f"cannot read tokenizer {path}: {error}") from None
        # A file saved with truncation or padding switched on would cut and pad every
        # sentence silently; normzoo's batching does both itself, to the recipe's lengths.
        backend.no_truncation()
        backend.no_padding()
        try:
            return cls(backend)  # checks the special tokens
        except NormzooError as error:
            raise NormzooError(f"{path}: {error}") from None


def _build(kind: str, vocab_size: int, min_frequency: int, lowercase: bool):
    steps = [normalizers.NFKC()] + ([normalizers.Lowercase()] if lowercase else [])
    if kind == "bpe":
        backend = HFTokenizer(models.BPE(unk_token="<unk>"))
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(SPECIALS),
            show_progress=False,
        )
    else:
        backend = HFTokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size, special_tokens=list(SPECIALS), unk_token="<unk>",
            show_progress=False,
        )
    backend.normalizer = normalizers.Sequence(steps)
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    return backend, trainer


def corpus_key(texts: Iterable[str], settings: dict) -> str:
    """Hash of the training text and the settings: the cache key of a tokenizer."""
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    for line in texts:
        data = line.encode("utf-8")
        # Length-prefixed: ["a\nb"] and ["a", "b"] are different corpora.
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()[:24]


def train_tokenizer(
    texts: Sequence[str],
    *,
    kind: str = "bpe",
    vocab_size: int = 8000,
    min_frequency: int = 2,
    lowercase: bool = False,
    use_cache: bool = True,
) -> Tokenizer:
    """Train on ``texts`` (or reuse the cached tokenizer trained on the same text and settings)."""
    settings = {"kind": kind, "vocab_size": vocab_size, "min_frequency": min_frequency,
                "lowercase": lowercase, "specials": SPECIALS, "version": 2}
    path = cache_dir() / f"{corpus_key(texts, settings)}.json"
    if use_cache:
        try:  # the folder is made first: an unusable one fails before minutes of training
            path.parent.mkdir(parents=True, exist_ok=True)
            cached = path.is_file()
        except OSError as error:
            raise cache_failure(error) from None
        if cached:
            try:
                return Tokenizer.load(path)
            except NormzooError:
                pass  # a damaged cache entry is trained again and replaced
    backend, trainer = _build(kind, vocab_size, min_frequency, lowercase)
    backend.train_from_iterator(texts, trainer=trainer, length=len(texts))
    tokenizer = Tokenizer(backend)
    if use_cache:
        try:  # atomic: concurrent runs never read a half-written file
            atomic_write_text(path, tokenizer.to_str(), "tokenizer cache entry")
        except RuntimeFailure as error:
            cause = error.__cause__
            raise cache_failure(cause if isinstance(cause, OSError) else None) from None
    return tokenizer
