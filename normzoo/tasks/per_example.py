"""The per-example test outputs of the tasks the final test scores in Lightning's loops (the
classifier, the language models): the file a run keeps, ``examples.<test split>.tsv``
(:data:`~normzoo.contract.outputs.OUTPUTS_FILE`), written and read back here.

A header line names the columns, then one line per example of the test split, in the split's
order: a classifier's ``prediction``, ``label`` and ``loss``, a language model's ``loss_sum``
and ``tokens``. Floats are written as Python's ``repr`` (every bit kept), so the column sums
give back the summary's test scores. Read back, the rows are checked against the split they
claim to be (its number of examples), and whatever does not parse is an error naming the file
and the line: a verdict resting on a damaged file would be wrong without a sign of it.

No torch here: :meth:`~normzoo.contract.task.Task.example_outputs` reads the files wherever
``normzoo compare`` runs; the side that writes them is :mod:`normzoo.tasks.testing`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from normzoo.contract.outputs import OUTPUTS_FILE
from normzoo.errors import NormzooError
from normzoo.io.atomic import atomic_write_text


class ExampleOutputsError(NormzooError):
    """A run's per-example outputs file is not what its task writes (damaged, edited, or of
    another test split): the verdicts that would rest on it are refused."""


def outputs_path(run_dir: Path, split: str) -> Path:
    """Where a run keeps the per-example outputs of its final test on ``split``."""
    return Path(run_dir) / OUTPUTS_FILE.format(split=split)


def write_outputs(path: Path, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """The header and one tab-separated line per row, written whole or not at all (a killed
    run leaves the old file or none, never half of one). Floats as ``repr``: nothing lost."""
    lines = ["\t".join(header)]
    lines += ["\t".join(repr(v) if isinstance(v, float) else str(v) for v in row)
              for row in rows]
    atomic_write_text(path, "\n".join(lines) + "\n", "per-example test outputs")


# A column's parser: the cell's value, or ValueError saying what the cell should be.
Parser = Callable[[str], Any]


def number(text: str) -> float:
    """A finite float (a loss)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ValueError("a finite number")
    return value


def count(text: str) -> int:
    """A whole number >= 0 (a token count)."""
    if not (text.isascii() and text.isdigit()):
        raise ValueError("a whole number >= 0")
    return int(text)


def label_of(labels: Sequence[str] | None) -> Parser:
    """A parser of a label name of ``labels`` (the run's label set; None: any non-empty
    name)."""
    known = None if labels is None else {str(name) for name in labels}

    def label(text: str) -> str:
        if not text or (known is not None and text not in known):
            raise ValueError("a label of the run's label set"
                             + (f" ({', '.join(sorted(known))})" if known else ""))
        return text

    return label


def read_outputs(path: Path, header: Sequence[str],
                 parsers: Sequence[Parser]) -> list[tuple[Any, ...]]:
    """The rows of ``path`` under ``header``, each cell through its parser; a wrong header, a
    line with another number of columns or a cell that does not parse raises
    :class:`ExampleOutputsError` naming the file and the line."""
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as error:
        raise ExampleOutputsError(f"{path} cannot be read as per-example outputs: "
                                  f"{error}") from None
    if lines and lines[-1] == "":
        lines.pop()  # the final newline
    if not lines or lines[0].split("\t") != list(header):
        found = repr(lines[0]) if lines else "nothing"
        raise ExampleOutputsError(f"{path}, line 1: expected the header "
                                  f"{chr(9).join(header)!r}, found {found}")
    rows = []
    for line_no, line in enumerate(lines[1:], start=2):
        cells = line.split("\t")
        if len(cells) != len(header):
            raise ExampleOutputsError(f"{path}, line {line_no}: {len(cells)} column(s), "
                                      f"expected {len(header)} ({', '.join(header)})")
        row = []
        for name, parse, cell in zip(header, parsers, cells, strict=True):
            try:
                row.append(parse(cell))
            except ValueError as expected:
                raise ExampleOutputsError(f"{path}, line {line_no}: {name} is {cell!r}, not "
                                          f"{expected}") from None
        rows.append(tuple(row))
    return rows


def split_size(task: Any, recipe: dict[str, Any], data_dir: Path | None = None) -> int:
    """How many examples the run's test split holds, read as the run read it (its limit
    too): from ``data_dir`` where a ``files`` corpus is now, else where the recipe says. Only
    the sections reading the data takes are validated: a run whose model or trainer section
    an older normzoo wrote is still read."""
    from normzoo.recipe import from_dict

    data = dict(recipe.get("data") or {})
    if data_dir is not None:
        data["dir"] = str(data_dir)
    reading = {"task": recipe.get("task"), "data": data,
               "task_options": recipe.get("task_options") or {}}
    resolved = from_dict(reading, check_registry=False)
    from normzoo.data.split import Split

    # The test split is read to valid_limit, as the run prepared it.
    split = Split.of(task, resolved, resolved.data.test_split, resolved.data.valid_limit)
    return sum(len(parts[0]) for parts in task.read(split))


def kept_outputs(task: Any, run_dir: Path, recipe: dict[str, Any], data_dir: Path | None,
                 header: Sequence[str],
                 parsers: Sequence[Parser]) -> list[tuple[Any, ...]] | None:
    """The rows a run kept for its test split (None where it kept none: a run from before
    they were kept), checked to be one per example of that split."""
    split = (recipe.get("data") or {}).get("test_split", "test")
    path = outputs_path(run_dir, split)
    if not path.is_file():
        return None
    rows = read_outputs(path, header, parsers)
    expected = split_size(task, recipe, data_dir)
    if len(rows) != expected:
        where = (f"line {expected + 2} is one row too many" if len(rows) > expected
                 else f"it ends at line {len(rows) + 1}")
        raise ExampleOutputsError(f"{path}: {len(rows)} rows, but the test split '{split}' "
                                  f"has {expected} examples ({where}): the file is not this "
                                  "run's final test of that split")
    return rows
