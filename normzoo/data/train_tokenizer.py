"""The recipe's tokenizer, the first step of preparing its data: the text it trains on, the
key it is cached under, and the training itself; or the tokenizer file the recipe names
(``data.tokenizer.type: file``), read as it is.

:mod:`normzoo.data.prepare` then encodes every split with it. Both steps read a recipe's splits
the same way (:func:`split_of`, :func:`split_chunks`, :func:`stream_rows`) and hash their cache
keys the same way (:func:`key_hash`); those live here because the tokenizer needs them first.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from normzoo.contract import task_of
from normzoo.data import chunks
from normzoo.data.cache import cache_root, ensure_folder
from normzoo.data.tokenizer import Tokenizer, cache_failure, train_tokenizer
from normzoo.errors import NormzooError, RuntimeFailure
from normzoo.io.atomic import atomic_write_text
from normzoo.recipe import Recipe


def key_hash(settings: dict) -> str:
    """A cache key: the hash of ``settings`` as canonical JSON, so that the same settings give
    the same key in every process and Python version (dict order does not matter)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:24]


def split_of(recipe: Recipe, role: str) -> tuple[str, int | None]:
    """The split name and example limit that ``role`` (train, valid, test) reads; the tokenizer
    and the encoder must agree on them, or the cache keys would name other data."""
    data = recipe.data
    name = {"train": data.train_split, "valid": data.valid_split, "test": data.test_split}[role]
    return name, data.train_limit if role == "train" else data.valid_limit


def split_chunks(recipe: Recipe, role: str) -> Iterator:
    """``role``'s examples in chunks of the task's parts (:meth:`Task.read
    <normzoo.contract.task.Task.read>`: one list of lines per part), so that a corpus larger
    than memory is read in one bounded pass."""
    from normzoo.data.split import Split

    name, limit = split_of(recipe, role)
    task = task_of(recipe)
    return task.read(Split.of(task, recipe, name, limit))


def tokenizer_key(recipe: Recipe) -> str:
    """The tokenizer's cache key: the training split's content and every tokenizer setting, so
    a changed corpus or vocabulary size trains a new tokenizer instead of reusing a stale one;
    for a tokenizer file, the file's content (its path does not matter, its bytes do)."""
    data, tok = recipe.data, recipe.data.tokenizer
    if tok.type == "file":
        return key_hash({"file": hashlib.sha256(_file_bytes(tok.path)).hexdigest(),
                         "format": 1})
    name, limit = split_of(recipe, "train")
    # A streamed corpus is not read to be hashed: its name stands for its content.
    content = ([data.path, data.name, name] if data.streaming
               else chunks.fingerprint(data, name, task_of(recipe)))
    return key_hash({"data": content, "limit": limit,
                     "langs": [data.src_lang, data.tgt_lang, data.text_field],
                     # Without path, which only a file has: the keys of trained tokenizers
                     # stay those of the releases before tokenizer files.
                     "tokenizer": tok.model_dump(exclude={"path"}), "format": 1})


def _file_bytes(path: str | None) -> bytes:
    """The tokenizer file's content; a clear error (exit 2) when it cannot be read."""
    location = Path(os.path.expanduser(path or ""))
    if not location.is_file():
        raise NormzooError(f"data.tokenizer.path: tokenizer file not found: {location}")
    try:
        return location.read_bytes()
    except OSError as error:
        raise NormzooError(f"data.tokenizer.path: cannot read {location}: "
                           f"{error.strerror or error}") from None


def file_tokenizer(recipe: Recipe) -> Tokenizer:
    """The recipe's tokenizer file, as it is: nothing is trained, and nothing cached, since
    the file is the tokenizer (the prepared data's key holds its content's hash, so an
    edited file prepares anew)."""
    path = os.path.expanduser(recipe.data.tokenizer.path or "")
    try:
        return Tokenizer.load(path)
    except NormzooError as error:
        raise NormzooError(f"data.tokenizer.path: {error}") from None


def _tokenizer_texts(recipe: Recipe) -> list[str]:
    """The training split's text, or a seeded sample of ``tokenizer.sample_size`` examples of
    it (kept in corpus order) when it is larger: a 4.5 M-pair corpus trains its vocabulary on
    a million pairs, as SentencePiece's ``input_sentence_size`` does, in bounded memory."""
    data, tok, task = recipe.data, recipe.data.tokenizer, task_of(recipe)
    name, limit = split_of(recipe, "train")
    total = chunks.examples(data, name, task, limit)
    chosen = None
    if tok.sample_size is not None and total > tok.sample_size:
        rng = np.random.default_rng(tok.sample_seed)
        chosen = np.sort(rng.choice(total, size=tok.sample_size, replace=False))
    texts: list[list[str]] = [[] for _ in task.token_parts]  # each part's, in corpus order
    indices = [task.parts.index(name) for name in task.token_parts]
    start = 0
    for chunk in split_chunks(recipe, "train"):
        size = len(chunk[0])
        if chosen is None:
            picks = range(size)
        else:
            lo, hi = np.searchsorted(chosen, [start, start + size])
            picks = (chosen[lo:hi] - start).tolist()
        for kept, index in zip(texts, indices, strict=True):
            kept.extend(chunk[index][i] for i in picks)
        start += size
    return [line for part in texts for line in part]


def _stream_sample(recipe: Recipe) -> list[str]:
    """The first ``tokenizer.sample_size`` non-blank lines of a streamed training split (a
    stream has no length to sample from uniformly; the hub's shards are shuffled already)."""
    from itertools import islice

    data = recipe.data
    rows = stream_rows(recipe)()
    if rows.column_names is not None and data.text_field not in rows.column_names:
        raise chunks.DataError(f"dataset '{data.path}' has no '{data.text_field}' column: "
                               f"{rows.column_names}")
    lines = (row[data.text_field] for row in rows)
    size = data.tokenizer.sample_size or 1_000_000
    return list(islice((line for line in lines if line.strip()), size))


def stream_rows(recipe: Recipe) -> Callable[[], Any]:
    """A function that opens the training split as a ``datasets`` streaming dataset.

    A function, not the dataset, so that each reader (the tokenizer's sample, each epoch or
    resume of streamed training) opens its own stream from the start, and ``datasets`` is
    imported only when a stream is really opened."""
    data = recipe.data

    def rows():
        import datasets

        try:
            return datasets.load_dataset(data.path, data.name, split=data.train_split,
                                         streaming=True)
        except Exception as error:  # the hub client raises many types when offline
            raise chunks.DataError(f"cannot stream split '{data.train_split}' of dataset "
                                   f"'{data.path}': {type(error).__name__}: {error}") from None

    return rows


def recipe_tokenizer(recipe: Recipe) -> Tokenizer:
    """The recipe's tokenizer, trained once on (a sample of) the training split and cached;
    or its tokenizer file (:func:`file_tokenizer`)."""
    if recipe.data.tokenizer.type == "file":
        return file_tokenizer(recipe)
    path = cache_root() / "tokenizers" / f"{tokenizer_key(recipe)}.json"
    ensure_folder(path.parent)  # an unusable cache fails before minutes of training
    if path.is_file():
        try:
            return Tokenizer.load(path)
        except NormzooError:  # a damaged entry is trained again and replaced
            pass
    tok = recipe.data.tokenizer
    texts = _stream_sample(recipe) if recipe.data.streaming else _tokenizer_texts(recipe)
    tokenizer = train_tokenizer(texts, kind=tok.type,
                                vocab_size=tok.vocab_size, min_frequency=tok.min_frequency,
                                lowercase=tok.lowercase, use_cache=False)
    try:  # atomic: concurrent runs never read a half-written file
        atomic_write_text(path, tokenizer.to_str(), "tokenizer cache entry")
    except RuntimeFailure as error:
        cause = error.__cause__
        raise cache_failure(cause if isinstance(cause, OSError) else None, path.parent) from None
    return tokenizer
