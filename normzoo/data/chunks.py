"""A recipe's raw text in bounded chunks, and a fingerprint of its content.

Preparing WMT14 (4.5 M pairs) must not hold the corpus as Python strings: these readers yield
a few tens of thousands of lines at a time, with exactly the lines (and the errors) that
:mod:`normzoo.data.sources` gives for the whole file. The fingerprint is what the prepared
cache is keyed by: a change to any byte of the data builds a new cache.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from normzoo.data.sources import PAIRS_COLUMN, DataError, _builtin_pairs, hub_split, text_file

if TYPE_CHECKING:
    from normzoo.recipe import DataConfig

CHUNK = 20_000  # lines per chunk: large enough for the tokenizer's threads, small in memory


def file_lines(path: Path, chunk: int = CHUNK) -> Iterator[list[str]]:
    """The lines of ``path`` as :func:`~normzoo.data.sources.read_lines` reads them (only LF
    ends a line, a trailing CR and a byte-order mark are dropped), ``chunk`` at a time."""
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    offset, lines, seen_text, seen_any = 0, [], False, False
    with path.open("rb") as handle:
        for raw in handle:  # a binary file splits on b"\n" only
            try:
                line = raw.decode("utf-8-sig" if offset == 0 else "utf-8")
            except UnicodeDecodeError as error:
                raise DataError(f"{path} is not UTF-8 text ({error.reason} at byte "
                                f"{offset + error.start})") from None
            offset += len(raw)
            line = line.removesuffix("\n").rstrip("\r")
            seen_any = True
            seen_text = seen_text or bool(line.strip())
            lines.append(line)
            if len(lines) == chunk:
                yield lines
                lines = []
    if not seen_text:
        raise DataError(f"data file is empty: {path}" + (" (only whitespace)" if seen_any else ""))
    if lines:
        yield lines


def count_lines(path: Path) -> int:
    """Lines of ``path`` (a final line without LF counts), read in blocks: fast, no decoding."""
    count, last = 0, b"\n"
    with path.open("rb") as handle:
        while block := handle.read(1 << 24):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def take(chunks: Iterator, limit: int | None) -> Iterator:
    """At most ``limit`` lines (or pairs) of ``chunks``."""
    left = limit
    for item in chunks:
        if left is None:
            yield item
            continue
        size = len(item[0]) if isinstance(item, tuple) else len(item)
        if left <= size:
            yield tuple(x[:left] for x in item) if isinstance(item, tuple) else item[:left]
            return
        left -= size
        yield item


def _aligned(src: Path, tgt: Path, chunk: int) -> Iterator[tuple[list[str], list[str]]]:
    sources, targets = file_lines(src, chunk), file_lines(tgt, chunk)
    while True:
        a, b = next(sources, None), next(targets, None)
        if a is None and b is None:
            return
        if a is None or b is None or len(a) != len(b):
            raise DataError(f"{src} has {count_lines(src)} lines but {tgt} has "
                            f"{count_lines(tgt)}; parallel files must be line-aligned")
        yield a, b


def parallel_chunks(data: DataConfig, split: str, limit: int | None = None,
                    chunk: int = CHUNK, files: list[Path] | None = None
                    ) -> Iterator[tuple[list[str], list[str]]]:
    """(sources, targets) of ``split``, ``chunk`` pairs at a time (``files``: a ``files``
    source's two files, as the task names them)."""
    if data.source == "builtin":
        pairs = _builtin_pairs(split, limit)
        yield [s for s, _ in pairs], [t for _, t in pairs]
    elif data.source == "files":
        source, target = files or _pair_files(data, split)
        yield from take(_aligned(source, target, chunk), limit)
    else:
        rows = hub_split(data, split)
        if PAIRS_COLUMN not in rows.column_names:
            raise DataError(f"dataset '{data.path}' has no '{PAIRS_COLUMN}' column: "
                            f"{rows.column_names}")
        if limit is not None:
            rows = rows.select(range(min(limit, len(rows))))
        for batch in rows.iter(batch_size=chunk):  # Arrow to Python a batch at a time
            pairs = batch[PAIRS_COLUMN]
            missing = {data.src_lang, data.tgt_lang} - set(pairs[0])
            if missing:
                raise DataError(f"dataset '{data.path}' has no language(s) {sorted(missing)}; "
                                f"it has {sorted(pairs[0])}")
            yield [p[data.src_lang] for p in pairs], [p[data.tgt_lang] for p in pairs]


def text_chunks(data: DataConfig, split: str, limit: int | None = None,
                chunk: int = CHUNK) -> Iterator[list[str]]:
    """Monolingual lines of ``split``, ``chunk`` at a time (blank hub lines dropped, as
    :func:`~normzoo.data.sources.load_text` does)."""
    if data.source == "builtin":
        yield [s for s, _ in _builtin_pairs(split, limit)]
    elif data.source == "files":
        yield from take(file_lines(text_file(Path(data.dir or ""), split), chunk), limit)
    else:
        rows = hub_split(data, split)
        if data.text_field not in rows.column_names:
            raise DataError(f"dataset '{data.path}' has no '{data.text_field}' column: "
                            f"{rows.column_names}")
        kept = (
            [line for line in batch[data.text_field] if line.strip()]
            for batch in rows.iter(batch_size=chunk)
        )
        yield from take((lines for lines in kept if lines), limit)


def _pair_files(data: DataConfig, split: str) -> list[Path]:
    folder = Path(data.dir or "")
    return [folder / f"{split}.{data.src_lang}", folder / f"{split}.{data.tgt_lang}"]


def examples(data: DataConfig, split: str, task: Any, limit: int | None) -> int:
    """How many pairs or lines ``split`` holds (after ``limit``), without reading its text
    where the source can say (for the tokenizer's sample and the progress bar)."""
    if data.source == "files":
        total = count_lines(task.split_files(data, split)[0])
    elif data.source == "builtin":
        from normzoo.data import builtin

        total = builtin.SPLITS.get(split, 0)
    else:
        total = len(hub_split(data, split))  # hub text: blank lines not yet dropped
    return total if limit is None else min(total, limit)


_hashed: dict[tuple, bytes] = {}


def _file_hash(path: Path) -> bytes:
    """SHA-256 of a file's bytes, computed once per process for an unchanged file (same
    inode, size and modification time): the tokenizer's key and the cache's both need it."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if key not in _hashed:
        with path.open("rb") as handle:
            _hashed[key] = hashlib.file_digest(handle, "sha256").digest()
    return _hashed[key]


def fingerprint(data: DataConfig, split: str, task: Any) -> str:
    """A hash of ``split``'s content: each file's bytes, the hub dataset's own fingerprint
    (which covers its files and the processing that built it), or the built-in corpus's
    generator's source."""
    digest = hashlib.sha256(f"{data.source}:{task.name}:{split}".encode())
    if data.source == "files":
        for path in task.split_files(data, split):
            if not path.is_file():
                raise DataError(f"data file not found: {path}")
            digest.update(_file_hash(path))
    elif data.source == "builtin":
        from normzoo.data import builtin

        # The generator and its words (the content), and a task's own corpus built on them.
        toy = sorted(Path(builtin.__file__).parent.glob("*.py"))
        for path in [*toy, *task.builtin_files()]:
            digest.update(path.name.encode() + path.read_bytes())
    else:
        digest.update(hub_split(data, split)._fingerprint.encode())
    return digest.hexdigest()
