"""Where raw text comes from: the built-in corpus, local line-aligned files, or the HF hub.

Every source returns plain untokenized strings; the references kept for BLEU are exactly these.
Problems with the user's data (missing, empty or misaligned files, an unreachable hub) raise
:class:`DataError` with the path and what is wrong.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from normzoo.contract.files import text_file
from normzoo.errors import NormzooError

if TYPE_CHECKING:
    from normzoo.recipe import DataConfig


class DataError(NormzooError):
    """The data named by a recipe is missing or unusable."""


# The column of a parallel hub dataset (wmt14, iwslt2017, ...): one {language: text} mapping
# per pair. The hub's layout names it so; it is a column, not a task.
PAIRS_COLUMN = "translation"


def read_lines(path: Path) -> list[str]:
    """Lines of a UTF-8 text file, without their line ends (LF or CR LF).

    Only LF ends a line, as for ``wc -l``: a stray CR inside a sentence must not split it and
    shift every later line of a parallel file. A byte-order mark is dropped.
    """
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    # Not read_text(): its universal newlines would also split lines on a lone "\r".
    lines = decode_lines(path.read_bytes(), str(path))
    if not any(line.strip() for line in lines):  # no bytes, or nothing but whitespace
        raise DataError(f"data file is empty: {path}" + (" (only whitespace)" if lines else ""))
    return lines


def decode_lines(data: bytes, name: str) -> list[str]:
    """The lines of UTF-8 ``data`` (a file's bytes, or standard input's), split as
    :func:`read_lines` says; ``name`` says where the bytes came from in the error."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise DataError(
            f"{name} is not UTF-8 text ({error.reason} at byte {error.start})"
        ) from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def _limit(items: list, limit: int | None) -> list:
    return items if limit is None else items[:limit]


def _builtin_pairs(split: str, limit: int | None) -> list[tuple[str, str]]:
    """The built-in corpus; a limit generates only that prefix (not the whole split)."""
    from normzoo.data import builtin

    try:
        size = None if limit is None else min(limit, builtin.SPLITS[split])
        return builtin.generate(split, size=size)
    except (KeyError, ValueError):
        raise DataError(f"the built-in corpus has no split '{split}'; it has "
                        f"{', '.join(builtin.SPLITS)}") from None


def parallel_files(directory: Path, split: str, src: str, tgt: str) -> tuple[list[str], list[str]]:
    """``{directory}/{split}.{src}`` and ``.{tgt}``, checked to be line-aligned."""
    src_path, tgt_path = directory / f"{split}.{src}", directory / f"{split}.{tgt}"
    sources, targets = read_lines(src_path), read_lines(tgt_path)
    if len(sources) != len(targets):
        raise DataError(
            f"{src_path} has {len(sources)} lines but {tgt_path} has {len(targets)}; "
            "parallel files must be line-aligned"
        )
    return sources, targets


def hub_split(data: DataConfig, split: str):
    """Split ``split`` of the recipe's hub dataset (``data.path``, ``data.name``), or a
    :class:`DataError` that says why not and what to set."""
    import datasets

    try:
        return datasets.load_dataset(data.path, data.name, split=split)
    except (FileNotFoundError, ConnectionError, ValueError) as error:
        if "Unknown split" in str(error):  # the dataset was found: a split name is wrong
            keys = [f"data.{key}" for key in ("train_split", "valid_split", "test_split")
                    if getattr(data, key) == split]
            hint = f"set {' or '.join(keys) or 'the split'} to one of them"
        else:
            hint = "Offline? Point the recipe at local files: data.source=files data.dir=DIR"
        raise DataError(
            f"cannot load split '{split}' of dataset '{data.path}'"
            + (f" ({data.name})" if data.name else "")
            + f": {type(error).__name__}: {str(error).rstrip('.')}; {hint}"
        ) from None
    except Exception as error:  # the hub client raises many types when offline
        raise DataError(
            f"cannot load dataset '{data.path}': {type(error).__name__}: {error}"
        ) from None


def load_parallel(data: DataConfig, split: str, limit: int | None = None):
    """(sources, targets) of ``split`` for translation."""
    if data.source == "builtin":
        pairs = _builtin_pairs(split, limit)
        return [s for s, _ in pairs], [t for _, t in pairs]
    if data.source == "files":
        sources, targets = parallel_files(Path(data.dir), split, data.src_lang, data.tgt_lang)
        return _limit(sources, limit), _limit(targets, limit)
    rows = hub_split(data, split)
    if limit is not None:
        rows = rows.select(range(min(limit, len(rows))))
    if PAIRS_COLUMN not in rows.column_names:
        raise DataError(f"dataset '{data.path}' has no '{PAIRS_COLUMN}' column: "
                        f"{rows.column_names}")
    pairs = rows[PAIRS_COLUMN]
    missing = {data.src_lang, data.tgt_lang} - set(pairs[0]) if pairs else set()
    if missing:
        raise DataError(f"dataset '{data.path}' has no language(s) {sorted(missing)}; "
                        f"it has {sorted(pairs[0])}")
    return [p[data.src_lang] for p in pairs], [p[data.tgt_lang] for p in pairs]


def load_text(data: DataConfig, split: str, limit: int | None = None) -> list[str]:
    """Monolingual lines of ``split`` for masked or causal language modelling."""
    if data.source == "builtin":
        return [s for s, _ in _builtin_pairs(split, limit)]
    if data.source == "files":
        return _limit(read_lines(text_file(Path(data.dir), split)), limit)
    rows = hub_split(data, split)
    if data.text_field not in rows.column_names:
        raise DataError(f"dataset '{data.path}' has no '{data.text_field}' column: "
                        f"{rows.column_names}")
    lines = [line for line in rows[data.text_field] if line.strip()]
    return _limit(lines, limit)
