"""One split as a task reads it (:meth:`normzoo.contract.task.Task.read`): its name, its example
limit, where it comes from, and readers of its lines in bounded chunks, so a task reads files,
the hub and the built-in corpus without knowing how normzoo opens them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from normzoo.data import chunks
from normzoo.data.sources import hub_split

if TYPE_CHECKING:
    from normzoo.recipe import Recipe


@dataclass(frozen=True)
class Split:
    """``name`` of the recipe's data, at most ``limit`` examples. ``files`` are the files a
    ``files`` source reads (the task's :meth:`~normzoo.contract.task.Task.split_files`), or the
    one file ``normzoo evaluate --src`` names, read as the split would be."""

    recipe: Recipe
    name: str
    limit: int | None = None
    files: tuple[Path, ...] = ()

    @classmethod
    def of(cls, task: Any, recipe: Recipe, name: str, limit: int | None = None) -> Split:
        """``name`` of ``recipe``'s data as ``task`` lays its files out."""
        files = task.split_files(recipe.data, name) if recipe.data.source == "files" else []
        return cls(recipe, name, limit, tuple(files))

    @property
    def source(self) -> str:
        """``files``, ``builtin`` or ``hub``: which reader applies."""
        return "files" if self.files else self.recipe.data.source

    @property
    def where(self) -> str:
        """Its first file, or the split's name: what a message about its content names."""
        return str(self.files[0]) if self.files else f"split '{self.name}'"

    def lines(self, file: int = 0) -> Iterator[list[str]]:
        """Its lines, a bounded chunk at a time: of its ``file``-th file, or the built-in
        corpus's English, or a hub dataset's ``data.text_field`` (blank lines dropped)."""
        if self.files:
            yield from chunks.take(chunks.file_lines(self.files[file]), self.limit)
        else:
            yield from chunks.text_chunks(self.recipe.data, self.name, self.limit)

    def hub_rows(self) -> Any:
        """The hub dataset's rows of this split (a ``datasets.Dataset``, at most ``limit``)."""
        rows = hub_split(self.recipe.data, self.name)
        return rows if self.limit is None else rows.select(range(min(self.limit, len(rows))))
