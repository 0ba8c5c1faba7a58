"""Prepare a recipe's data once: train the tokenizer on a sample, encode every split, cache.

``prepare(recipe)`` returns the opened cache, building it first when it is missing or
damaged; ``open_prepared`` only opens (other ranks, which wait for the one that builds).

The cache key covers everything that changes the ids: the data's content (each file's
SHA-256, or the hub dataset's fingerprint), the split names and limits, the languages or
text field, and the tokenizer (its JSON's hash; the tokenizer in turn is keyed by the
training split's content and the tokenizer settings). ``data.max_len`` is not in the key: it
is applied when the arrays are read, so one cache serves every length limit.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from normzoo.atomic import atomic_write_text
from normzoo.data import chunks
from normzoo.data.examples import token_dtype
from normzoo.data.prepared import (
    DamagedCache,
    Prepared,
    TableWriter,
    building,
    cache_root,
    ensure_folder,
    write_lines,
    write_manifest,
)
from normzoo.data.tokenizer import EOS, Tokenizer, cache_failure, train_tokenizer
from normzoo.errors import NormzooError, RuntimeFailure
from normzoo.recipe import Recipe

ROLES = ("train", "valid", "test")


@dataclass
class Report:
    """What :func:`prepare` did, for the command line."""

    built: bool = False
    rebuilt_damaged: str = ""
    seconds: float = 0.0


def _hash(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:24]


def _split(recipe: Recipe, role: str) -> tuple[str, int | None]:
    data = recipe.data
    name = {"train": data.train_split, "valid": data.valid_split, "test": data.test_split}[role]
    return name, data.train_limit if role == "train" else data.valid_limit


def _canonical(tokenizer_json: str) -> str:
    """The tokenizer as it serialises after a load: a checkpoint's copy and the cache's copy
    of one tokenizer must give one key."""
    return Tokenizer.from_str(tokenizer_json).to_str()


def tokenizer_key(recipe: Recipe) -> str:
    data, tok = recipe.data, recipe.data.tokenizer
    name, limit = _split(recipe, "train")
    # A streamed corpus is not read to be hashed: its name stands for its content.
    content = ([data.path, data.name, name] if data.streaming
               else chunks.fingerprint(data, name, recipe.task))
    return _hash({"data": content, "limit": limit,
                  "langs": [data.src_lang, data.tgt_lang, data.text_field],
                  "tokenizer": tok.model_dump(), "format": 1})


def data_key(recipe: Recipe, tokenizer_json: str, roles: tuple[str, ...] = ROLES) -> str:
    data = recipe.data
    splits = {}
    for role in roles:
        name, limit = _split(recipe, role)
        splits[role] = [name, limit, chunks.fingerprint(data, name, recipe.task)]
    return _hash({"task": recipe.task, "splits": splits,
                  "langs": [data.src_lang, data.tgt_lang, data.text_field],
                  "tokenizer": hashlib.sha256(_canonical(tokenizer_json).encode()).hexdigest(),
                  "format": 1})


def _tokenizer_texts(recipe: Recipe) -> list[str]:
    """The training split's text, or a seeded sample of ``tokenizer.sample_size`` examples of
    it (kept in corpus order) when it is larger: a 4.5 M-pair corpus trains its vocabulary on
    a million pairs, as SentencePiece's ``input_sentence_size`` does, in bounded memory."""
    data, tok = recipe.data, recipe.data.tokenizer
    name, limit = _split(recipe, "train")
    total = chunks.examples(data, name, recipe.task, limit)
    chosen = None
    if tok.sample_size is not None and total > tok.sample_size:
        rng = np.random.default_rng(tok.sample_seed)
        chosen = np.sort(rng.choice(total, size=tok.sample_size, replace=False))
    sources: list[str] = []
    targets: list[str] = []
    start = 0
    for chunk in _chunks(recipe, "train"):
        first = chunk[0] if recipe.task == "translation" else chunk
        if chosen is None:
            picks = range(len(first))
        else:
            lo, hi = np.searchsorted(chosen, [start, start + len(first)])
            picks = (chosen[lo:hi] - start).tolist()
        sources.extend(first[i] for i in picks)
        if recipe.task == "translation":
            targets.extend(chunk[1][i] for i in picks)
        start += len(first)
    return sources + targets


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


def stream_rows(recipe: Recipe):
    """A function that opens the training split as a ``datasets`` streaming dataset."""
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
    """The recipe's tokenizer, trained once on (a sample of) the training split and cached."""
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


def _chunks(recipe: Recipe, role: str) -> Iterator:
    name, limit = _split(recipe, role)
    if recipe.task == "translation":
        return chunks.parallel_chunks(recipe.data, name, limit)
    return chunks.text_chunks(recipe.data, name, limit)


def _progress(total: int, label: str, show: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=label, unit=" lines", unit_scale=True, disable=not show,
                file=sys.stderr, leave=False)


def _encode_role(recipe: Recipe, tokenizer: Tokenizer, folder: Path, role: str,
                 dtype: np.dtype, show: bool) -> dict:
    """Encode one split into ``folder/role``; returns its statistics."""
    out = folder / role
    out.mkdir()
    name, limit = _split(recipe, role)
    translation = recipe.task == "translation"
    names = ("src", "tgt") if translation else ("text",)
    writers = {n: TableWriter(out, n, dtype) for n in names}
    keep_text = translation and role != "train"
    texts = {n: (out / f"{n}.txt").open("w", encoding="utf-8", newline="")
             for n in (("src", "ref") if keep_text else ())}
    max_len = recipe.data.max_len
    long = empty = 0
    total = chunks.examples(recipe.data, name, recipe.task, limit)
    with _progress(total, f"{role} ({name})", show) as bar:
        for chunk in _chunks(recipe, role):
            parts = chunk if translation else (chunk,)
            encoded = [tokenizer.encode_batch(part) for part in parts]
            if recipe.task == "causal_lm":  # the stream: every line followed by EOS
                encoded = [[[*ids, EOS] for ids in encoded[0]]]
            for writer, rows in zip(writers.values(), encoded, strict=True):
                writer.append(rows)
            lengths = [np.fromiter(map(len, rows), np.int64, len(rows)) for rows in encoded]
            if translation:
                long += int(((lengths[0] >= max_len) | (lengths[1] >= max_len)).sum())
            elif recipe.task == "mlm":
                empty += int((lengths[0] == 0).sum())
            for handle, part in zip(texts.values(), parts, strict=False):
                write_lines(handle, part)
            bar.update(len(parts[0]))
    for handle in texts.values():
        handle.close()
    sizes = {n: w.close() for n, w in writers.items()}
    rows, tokens = sizes[names[0]][0], sum(t for _, t in sizes.values())
    stats = {"split": name, "rows": rows, "tokens": tokens}
    if translation and role == "train":
        stats["dropped"] = {f"longer than data.max_len={max_len}": long}
    elif recipe.task == "mlm":
        stats["dropped"] = {"empty after tokenization": empty}
    return stats


def _build(recipe: Recipe, tokenizer: Tokenizer, key: str, show: bool,
           roles: tuple[str, ...]) -> None:
    with building(cache_root(), key) as folder:
        if folder is None:
            return  # another process built it while this one waited
        dtype = token_dtype(tokenizer.vocab_size)
        (folder / "tokenizer.json").write_text(tokenizer.to_str(), encoding="utf-8")
        splits = {role: _encode_role(recipe, tokenizer, folder, role, dtype, show)
                  for role in roles}
        data = recipe.data
        write_manifest(folder, {
            "key": key, "task": recipe.task, "dtype": dtype.name,
            "vocab_size": tokenizer.vocab_size, "splits": splits,
            "source": {"source": data.source, "dir": data.dir, "path": data.path,
                       "name": data.name},
        })


def prepare(recipe: Recipe, tokenizer: Tokenizer | None = None, *, show: bool = False,
            verify: bool = True, roles: tuple[str, ...] = ROLES,
            ) -> tuple[Prepared, Tokenizer, Report]:
    """Open the recipe's prepared data, building it first if it is missing or damaged.

    ``tokenizer`` (a resumed run's own) replaces the recipe's; ``verify`` checks every
    file's checksum, which reads the cache once (and leaves it in the page cache for the
    ranks that map it next). ``roles`` leaves out a streamed training split.
    """
    started = time.perf_counter()
    report = Report()
    if tokenizer is None:
        tokenizer = recipe_tokenizer(recipe)
    key = data_key(recipe, tokenizer.to_str(), roles)
    path = cache_root() / key
    if path.exists():
        try:
            prepared = Prepared.open(path, verify=verify)
            report.seconds = time.perf_counter() - started
            return prepared, tokenizer, report
        except DamagedCache as error:
            report.rebuilt_damaged = str(error)
            _discard(path)
    try:
        _build(recipe, tokenizer, key, show, roles)
    except OSError as error:  # a full disk, a read-only cache: nothing half-built is kept
        raise cache_failure(error, cache_root()) from None
    report.built = True
    prepared = Prepared.open(path, verify=False)  # just written and checked by its build
    report.seconds = time.perf_counter() - started
    return prepared, tokenizer, report


def _discard(path: Path) -> None:
    """Move a damaged folder out of the key's name first (one rename), then delete it: a
    reader never sees half of a deletion as data."""
    import shutil
    import uuid

    doomed = path.with_name(f"{path.name}.tmp-damaged-{uuid.uuid4().hex[:8]}")
    try:
        path.rename(doomed)
    except FileNotFoundError:
        return  # another process discarded it first
    shutil.rmtree(doomed, ignore_errors=True)


def open_prepared(recipe: Recipe, tokenizer: Tokenizer, wait_s: float = 0.0,
                  roles: tuple[str, ...] = ROLES) -> Prepared:
    """Open what another process prepared (other ranks), waiting up to ``wait_s`` for it."""
    path = cache_root() / data_key(recipe, tokenizer.to_str(), roles)
    deadline = time.monotonic() + wait_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(1.0)
    if not path.exists():
        raise DamagedCache(f"prepared data {path} does not exist; run "
                           "`normzoo prepare RECIPE` first")
    return Prepared.open(path)


def describe(prepared: Prepared, report: Report) -> list[str]:
    """Lines for the command line: per split, rows and tokens and what was dropped; time,
    path and size of the cache."""
    manifest = prepared.manifest
    unit = "pairs" if manifest["task"] == "translation" else "lines"
    lines = []
    for role in (r for r in ROLES if r in manifest["splits"]):
        stats = manifest["splits"][role]
        line = f"{role:5s} {stats['split']}: {stats['rows']:,} {unit}, {stats['tokens']:,} tokens"
        dropped = {why: n for why, n in stats.get("dropped", {}).items() if n}
        if dropped:
            line += "; dropped " + ", ".join(f"{n:,} {why}" for why, n in dropped.items())
        lines.append(line)
    size = sum(f["bytes"] for f in manifest["files"].values())
    state = "built" if report.built else "already prepared"
    lines.append(f"{state} in {report.seconds:.1f} s: {prepared.path} ({size / 2**20:,.1f} MiB)")
    if report.rebuilt_damaged:
        lines.insert(0, f"rebuilt: {report.rebuilt_damaged}")
    return lines
