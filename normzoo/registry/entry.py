"""One registered name: where it comes from, and why it may be unusable.

:mod:`normzoo.registry` indexes and resolves names; this module is what is *recorded and shown*
about one: :class:`PluginInfo` goes into every checkpoint (provenance), an :class:`Entry`'s
``conflict`` and :func:`first_doc_line` are what ``normzoo list`` prints. Like the registry, it
imports neither torch nor Lightning, so listing stays fast.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BUILTIN = "normzoo"  # the distribution whose names are reserved


@dataclass(frozen=True)
class PluginInfo:
    """Where a registered name comes from; recorded in every checkpoint."""

    name: str
    distribution: str
    version: str

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "distribution": self.distribution, "version": self.version}


@dataclass
class Entry:
    """One registered name. ``target`` is ``module:attr`` (entry point) or the object itself.

    ``claimants`` are other distributions' entries for the same name (a conflict);
    ``reserved`` is set on a plugin's entry refused because the name is a built-in's.
    """

    info: PluginInfo
    target: str
    obj: Any = None
    error: str | None = None
    claimants: list[Entry] = field(default_factory=list)
    reserved: PluginInfo | None = None

    @property
    def loaded(self) -> bool:
        return self.obj is not None

    @property
    def rivals(self) -> list[PluginInfo]:
        """The other distributions that register this name."""
        return [claimant.info for claimant in self.claimants]

    @property
    def conflict(self) -> str | None:
        """Why this entry cannot be used as it stands (``normzoo list``'s CONFLICT), or None."""
        if self.reserved is not None:
            return (f"'{self.info.name}' is the name of a built-in ({self.reserved.distribution} "
                    f"{self.reserved.version}), reserved; this entry is ignored: rename it in "
                    f"{self.info.distribution}")
        if self.claimants:
            return "also registered by " + ", ".join(
                f"{i.distribution} {i.version}" for i in self.rivals)
        return None


def normalize_distribution(name: str) -> str:
    """A distribution's canonical name (PEP 503): ``Foo_Bar`` and ``foo-bar`` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def same_distribution(a: PluginInfo, b: PluginInfo) -> bool:
    """Whether two entries come from one distribution, however each spells its name."""
    return normalize_distribution(a.distribution) == normalize_distribution(b.distribution)


def is_builtin(info: PluginInfo) -> bool:
    """Whether ``info`` comes from normzoo itself, whose names no plugin may take."""
    return normalize_distribution(info.distribution) == BUILTIN


def first_doc_line(obj: Any) -> str:
    """A plugin's one-line description: its ``description`` attribute or docstring head."""
    text = getattr(obj, "description", None) or (obj.__doc__ or "")
    text = text.strip()
    return text.splitlines()[0].strip() if text else ""


def builtin_doc_line(target: Any) -> str | None:
    """The one-line description of one of normzoo's own entries (``normzoo.nn.norms:LayerNorm``),
    read from its source file without importing it; None if it cannot be read that way.

    Importing normzoo's own modules imports torch, seconds that ``normzoo list`` need not spend
    on entries that cannot be broken without normzoo itself being broken. Third-party entries
    are imported: whether they import is what the listing reports.
    """
    if not isinstance(target, str) or not target.startswith(BUILTIN + "."):
        return None
    module, _, attr = target.partition(":")
    package = Path(__file__).parent.parent  # normzoo/, found without importing the entry's
    path = package.joinpath(*module.split(".")[1:]).with_suffix(".py")
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef) and node.name == attr:
            text = _class_description(node) or ast.get_docstring(node) or ""
            text = text.strip()
            return text.splitlines()[0].strip() if text else ""
    return None


def _class_description(node: ast.ClassDef | ast.FunctionDef) -> str | None:
    """A class's literal ``description = "..."`` attribute, which :func:`first_doc_line` prefers."""
    for statement in node.body if isinstance(node, ast.ClassDef) else ():
        if (isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Constant)
                and isinstance(statement.value.value, str)
                and any(isinstance(t, ast.Name) and t.id == "description"
                        for t in statement.targets)):
            return statement.value.value
    return None
