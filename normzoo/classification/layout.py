"""The user's labelled data: ``text<TAB>label`` files and Hugging Face hub datasets.

No torch here: recipe checks and ``normzoo list`` read labels through this module, and must not
pay for importing torch.

Problems with the data raise :class:`~normzoo.data.sources.DataError` saying where (file and
1-based line, or the dataset's columns) and what is wrong, because a bad line in a file of
100,000 must be findable without a debugger.
"""

from __future__ import annotations

from collections.abc import Iterable
from numbers import Integral
from typing import Any

from normzoo.plugin import DataError

_SHOWN = 60  # characters of a bad line shown in an error


def _shorten(line: str) -> str:
    return repr(line if len(line) <= _SHOWN else line[:_SHOWN] + "...")


def parse_lines(lines: list[str], where: str, start: int = 1) -> tuple[list[str], list[str]]:
    """(texts, labels) of ``text<TAB>label`` lines; ``where`` (a path) names them in errors.

    The line splits on its *last* tab: a label never holds a tab, but a text copied from a
    spreadsheet may. A trailing ``\\r`` (CR LF files) is dropped, so Windows files give the same
    labels. A line without a tab, with an empty text or with an empty label is an error rather
    than skipped: silently dropping examples would change a test set's score. ``start`` is the
    first line's number (a chunk of a larger file).
    """
    texts: list[str] = []
    labels: list[str] = []
    for number, raw in enumerate(lines, start=start):
        line = raw.rstrip("\r")
        text, tab, label = line.rpartition("\t")
        problem = ("has no tab between text and label" if not tab
                   else "has an empty text" if not text.strip()
                   else "has an empty label" if not label.strip() else None)
        if problem:
            raise DataError(f"{where}, line {number} {problem} (expected 'text<TAB>label'): "
                            f"{_shorten(line)}")
        texts.append(text)
        labels.append(label.strip())
    return texts, labels


def hub_examples(rows: Any, text_field: str, label_field: str) -> tuple[list[str], list[str]]:
    """(texts, labels) of a ``datasets.Dataset`` (or anything with ``column_names``,
    ``features`` and indexing by column name).

    Hub datasets usually store labels as ``ClassLabel`` integers; they become the feature's
    names so that predictions, confusion tables and label files read as words, and a file and a
    hub copy of one dataset give the same label set. Other values become ``str(value)``.
    """
    columns = list(rows.column_names)
    for role, field in (("text", text_field), ("label", label_field)):
        if field not in columns:
            raise DataError(f"the dataset has no {role} column '{field}'; its columns are: "
                            f"{', '.join(columns)}")
    texts = [str(text) for text in rows[text_field]]
    values = rows[label_field]
    feature = (getattr(rows, "features", None) or {}).get(label_field)
    names = getattr(feature, "names", None)
    if names:
        labels = [_class_name(value, names, label_field) for value in values]
    else:
        labels = [str(value) for value in values]
    return texts, labels


def _class_name(value: Any, names: list[str], field: str) -> str:
    """One ``ClassLabel`` integer as its name; -1 (the hub's "no label", as in GLUE's test
    splits) and out-of-range values are errors, since training on them would be meaningless."""
    if isinstance(value, bool) or not isinstance(value, Integral) or not 0 <= value < len(names):
        raise DataError(f"label column '{field}' holds {value!r}, not a class index in "
                        f"0..{len(names) - 1} ({', '.join(names)}); unlabelled split?")
    return names[int(value)]


def label_set(labels: Iterable[str]) -> list[str]:
    """The distinct labels, sorted: numerically when every label is an integer (so ``"10"``
    follows ``"9"``, and ``0..4`` star ratings keep their order), else as strings. The order
    fixes each label's class index, so it must not depend on the order examples arrive in."""
    unique = set(labels)
    try:  # ties ("1", "01") break by the string, so the order never depends on set order
        return sorted(unique, key=lambda label: (int(label), label))
    except ValueError:
        return sorted(unique)
