"""The prepared-data cache on disk: token arrays that every process memory-maps.

One folder per content key under ``$NORMZOO_CACHE/prepared/`` (``~/.cache/normzoo``)::

    <key>/manifest.json              what is there: sizes, checksums, statistics, settings
    <key>/tokenizer.json             the tokenizer that made the ids
    <key>/<role>/<name>.tokens       token ids of every row, end to end (uint16 or uint32)
    <key>/<role>/<name>.offsets      int64, rows + 1: where each row starts
    <key>/<role>/<name>.txt          raw lines (validation and test: BLEU needs the text)

The layout is fairseq's and Megatron's indexed datasets (a flat ``.bin`` and an index),
kept raw so that ``numpy.memmap`` maps it with no parsing: pages are shared by every rank
on a node, and a start costs milliseconds whatever the corpus size.

A folder is built under a temporary name and renamed into place whole, after its files are
synced, so a build killed at any point leaves nothing that a later run would read; builds of
one key are serialised by a lock file. A folder whose files do not match its manifest (size
always, SHA-256 where asked) is reported as damaged, never read as data.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from normzoo.data.examples import TokenTable
from normzoo.data.sources import DataError

FORMAT = 1


class DamagedCache(DataError):
    """A prepared folder's files do not match its manifest."""


def cache_root() -> Path:
    """``$NORMZOO_CACHE/prepared`` (default ``~/.cache/normzoo/prepared``)."""
    from normzoo.data.tokenizer import cache_dir

    return cache_dir().parent / "prepared"


def ensure_folder(folder: Path) -> None:
    """Create a cache folder, or fail naming ``NORMZOO_CACHE`` (exit 1)."""
    from normzoo.data.tokenizer import cache_failure

    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".probe-{uuid.uuid4().hex[:8]}"
        probe.touch()
        probe.unlink()
    except OSError as error:
        raise cache_failure(error, folder) from None


def digest(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


class TableWriter:
    """Appends rows of ids to ``<name>.tokens`` as they are encoded; the offsets are written
    at :meth:`close`. Memory: one chunk of rows plus 8 bytes per row."""

    def __init__(self, folder: Path, name: str, dtype: np.dtype) -> None:
        self.folder, self.name, self.dtype = folder, name, dtype
        self.handle = (folder / f"{name}.tokens").open("wb")
        self.lengths: list[np.ndarray] = []

    def append(self, rows: Sequence[Sequence[int]]) -> None:
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        flat = np.fromiter((t for r in rows for t in r), dtype=self.dtype,
                           count=int(lengths.sum()))
        self.handle.write(flat.tobytes())
        self.lengths.append(lengths)

    def close(self) -> tuple[int, int]:
        """Finish both files; returns (rows, tokens)."""
        self.handle.close()
        lengths = np.concatenate(self.lengths) if self.lengths else np.zeros(0, np.int64)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        (self.folder / f"{self.name}.offsets").write_bytes(offsets.tobytes())
        return len(lengths), int(offsets[-1])


def write_lines(handle, lines: Sequence[str]) -> None:
    """Raw lines, LF-separated, to a text file opened with ``newline=""``; read back by
    :meth:`Prepared.lines` exactly (a line never holds an LF)."""
    handle.write("".join(line + "\n" for line in lines))


@contextlib.contextmanager
def building(root: Path, key: str) -> Iterator[Path | None]:
    """Hold the build lock of ``key``; yield a fresh temporary folder to fill, or None when
    another process finished the same folder while this one waited for the lock.

    On a clean exit the folder's files are synced and it is renamed to ``root/key`` in one
    step; on an error or a kill it is never renamed, and the next build removes it.
    """
    ensure_folder(root)
    with (root / f"{key}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released by the kernel if this process dies
        final = root / key
        for stale in root.glob(f"{key}.tmp-*"):  # left by a killed build: only we build key
            shutil.rmtree(stale, ignore_errors=True)
        if final.exists():
            yield None
            return
        work = root / f"{key}.tmp-{uuid.uuid4().hex[:8]}"
        work.mkdir()
        try:
            yield work
            for path in work.rglob("*"):
                if path.is_file():
                    with path.open("rb") as handle:
                        os.fsync(handle.fileno())
            os.rename(work, final)
            descriptor = os.open(root, os.O_RDONLY)
            try:
                os.fsync(descriptor)  # the rename itself survives a power cut
            finally:
                os.close(descriptor)
        finally:
            shutil.rmtree(work, ignore_errors=True)


def write_manifest(folder: Path, manifest: dict) -> None:
    """Record every file's size and SHA-256, so :meth:`Prepared.open` can tell a complete,
    undamaged folder from anything else."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    manifest = {**manifest, "format": FORMAT, "files": {
        str(p.relative_to(folder)): {"bytes": p.stat().st_size, "sha256": digest(p)}
        for p in files}}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))


class Prepared:
    """An opened prepared folder: memory-mapped tables, raw lines and the manifest."""

    def __init__(self, path: Path, manifest: dict) -> None:
        self.path, self.manifest = path, manifest
        self.dtype = np.dtype(manifest["dtype"])

    @classmethod
    def open(cls, path: Path, verify: bool = False) -> Prepared:
        """Check ``path`` against its manifest (sizes; checksums too with ``verify``)."""
        try:
            manifest = json.loads((path / "manifest.json").read_text())
            files = manifest["files"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise DamagedCache(f"prepared data {path} is damaged: no readable manifest "
                               f"({type(error).__name__})") from None
        if manifest.get("format") != FORMAT:
            raise DamagedCache(f"prepared data {path} has format {manifest.get('format')}, "
                               f"this normzoo reads format {FORMAT}")
        for name, expected in files.items():
            file = path / name
            problem = None
            if not file.is_file():
                problem = "is missing"
            elif file.stat().st_size != expected["bytes"]:
                problem = f"has {file.stat().st_size} bytes, the manifest says {expected['bytes']}"
            elif verify and digest(file) != expected["sha256"]:
                problem = "does not match its checksum"
            if problem:
                raise DamagedCache(f"prepared data {path} is damaged: {name} {problem}")
        return cls(path, manifest)

    def table(self, role: str, name: str) -> TokenTable:
        """The table ``name`` of ``role``: token ids, or a task's own ids (per-token tags,
        stored as int32: ``dtypes`` in the manifest)."""
        folder = self.path / role
        dtype = np.dtype(self.manifest.get("dtypes", {}).get(name, self.dtype))
        return TokenTable(_map(folder / f"{name}.tokens", dtype),
                          _map(folder / f"{name}.offsets", np.dtype(np.int64)))

    def lines(self, role: str, name: str) -> list[str]:
        text = (self.path / role / f"{name}.txt").read_bytes().decode("utf-8")
        return text.split("\n")[:-1]

    def tokenizer_json(self) -> str:
        return (self.path / "tokenizer.json").read_text(encoding="utf-8")


def _map(path: Path, dtype: np.dtype) -> np.ndarray:
    if path.stat().st_size == 0:  # mmap cannot map an empty file
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")
