"""Prepare a recipe's data once: train the tokenizer on a sample, encode every split, cache.

The tokenizer step is :mod:`normzoo.data.train_tokenizer`; this module encodes the splits
with it and owns the cache of encoded arrays.

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
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from normzoo.contract import task_of
from normzoo.data import chunks
from normzoo.data.cache import (
    DamagedCache,
    Prepared,
    TableWriter,
    building,
    cache_root,
    write_lines,
    write_manifest,
)
from normzoo.data.examples import token_dtype
from normzoo.data.tokenizer import Tokenizer, cache_failure
from normzoo.data.train_tokenizer import (
    key_hash,
    recipe_tokenizer,
    split_chunks,
    split_of,
    stream_rows,
)
from normzoo.recipe import Recipe

# recipe_tokenizer and stream_rows are the tokenizer step's; callers import them from here too.
__all__ = [
    "ROLES",
    "Report",
    "data_key",
    "describe",
    "open_prepared",
    "prepare",
    "recipe_tokenizer",
    "stream_rows",
]

ROLES = ("train", "valid", "test")


@dataclass
class Report:
    """What :func:`prepare` did, for the command line."""

    built: bool = False
    rebuilt_damaged: str = ""
    seconds: float = 0.0


def _canonical(tokenizer_json: str) -> str:
    """The tokenizer as it serialises after a load: a checkpoint's copy and the cache's copy
    of one tokenizer must give one key."""
    return Tokenizer.from_str(tokenizer_json).to_str()


def data_key(recipe: Recipe, tokenizer_json: str, roles: tuple[str, ...] = ROLES) -> str:
    """The encoded cache's key: every split's content and the tokenizer, so that any change
    to what the ids would be names a new folder instead of reading stale arrays."""
    data, task = recipe.data, task_of(recipe)
    splits = {}
    for role in roles:
        name, limit = split_of(recipe, role)
        splits[role] = [name, limit, chunks.fingerprint(data, name, task)]
    # Task options that change what is read (a classifier's label column) name a new cache;
    # without any, the keys of the caches prepared before tasks had options stay as they were.
    changed = task.data_options(recipe)
    options = {"task_options": changed} if changed else {}
    return key_hash({"task": recipe.task, **options, "splits": splits,
                     "langs": [data.src_lang, data.tgt_lang, data.text_field],
                     "tokenizer": hashlib.sha256(_canonical(tokenizer_json).encode()).hexdigest(),
                     "format": 1})


def _progress(total: int, label: str, show: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=label, unit=" lines", unit_scale=True, disable=not show,
                file=sys.stderr, leave=False)


def _encode_role(recipe: Recipe, tokenizer: Tokenizer, folder: Path, role: str,
                 dtype: np.dtype, show: bool) -> dict:
    """Encode one split into ``folder/role``; returns its statistics."""
    out = folder / role
    out.mkdir()
    name, limit = split_of(recipe, role)
    task = task_of(recipe)
    # Token parts at the tokenizer's width; a task's own tables (tags) as int32.
    writers = {n: TableWriter(out, n, dtype if n in task.token_parts else OWN_IDS)
               for n in task.tables or task.token_parts}
    kept = task.kept_texts(role)  # raw text kept beside the tokens: file name -> part
    texts = {n: (out / f"{n}.txt").open("w", encoding="utf-8", newline="") for n in kept}
    max_len = recipe.data.max_len
    dropped: dict[str, int] | None = None
    total = chunks.examples(recipe.data, name, task, limit)
    with _progress(total, f"{role} ({name})", show) as bar:
        for parts in split_chunks(recipe, role):
            encoded = task.encode(parts, tokenizer)
            for writer, rows in zip(writers.values(), encoded, strict=True):
                writer.append(rows)
            lengths = [np.fromiter(map(len, rows), np.int64, len(rows)) for rows in encoded]
            counts = task.dropped(lengths, max_len, role)
            if counts is not None:
                dropped = {k: (dropped or {}).get(k, 0) + v for k, v in counts.items()}
            for file, part in kept.items():
                write_lines(texts[file], parts[task.parts.index(part)])
            bar.update(len(parts[0]))
    for handle in texts.values():
        handle.close()
    sizes = {n: w.close() for n, w in writers.items()}
    rows = next(iter(sizes.values()))[0]
    tokens = sum(t for name, (_, t) in sizes.items() if name in task.token_parts)
    stats = {"split": name, "rows": rows, "tokens": tokens}
    if dropped is not None:
        stats["dropped"] = dropped
    return stats


OWN_IDS = np.dtype(np.int32)


def _own_tables(recipe: Recipe) -> dict[str, str]:
    """The task's tables that hold ids of its own, not tokens, and their dtype."""
    task = task_of(recipe)
    return {name: OWN_IDS.name for name in task.tables or () if name not in task.token_parts}


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
            **({"dtypes": own} if (own := _own_tables(recipe)) else {}),
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
    unit = task_of(str(manifest["task"])).unit
    lines = []
    for role in (r for r in ROLES if r in manifest["splits"]):
        stats = manifest["splits"][role]
        # The role alone where the split has its name ("train:"), both where they differ
        # ("valid (val):", "test (test2016):").
        name = role if stats["split"] == role else f"{role} ({stats['split']})"
        line = f"{name + ':':6s} {stats['rows']:,} {unit}, {stats['tokens']:,} tokens"
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
