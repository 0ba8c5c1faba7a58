"""Griffe extensions for reading normzoo's source into the API reference.

``SphinxRoles``: normzoo's docstrings cite code with Sphinx roles. A docstring's
``:func:`pinned```, ``:class:`~normzoo.inference.model.Loaded``` or ``:mod:`normzoo.registry```
would otherwise show the role's name beside the code. Each becomes an optional cross-reference
for mkdocs-autorefs: a link where the API reference documents the object, plain code where it
does not (never a warning). A relative name is resolved in the scope of the docstring's object,
as Sphinx does; ``~`` shows only the last part of the path.

``BaseAliases``: a class whose base is a module-level alias of a class (the recipe sections'
``_Section = Section``) gets that class as its base, so that static analysis, and with it
griffe-pydantic, sees that the recipe sections are pydantic models. It must come before
griffe_pydantic in the handler's ``extensions``.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:mod|func|class|meth|attr|data|exc|obj|const):`(~?)([\w.]+)`")


def qualified(obj: griffe.Object, name: str) -> str:
    """The full path of ``name`` as written in ``obj``'s docstring (unchanged if unresolved)."""
    if name.startswith("normzoo"):
        return name
    head, _, rest = name.partition(".")
    try:
        path = obj.resolve(head)
    except griffe.NameResolutionError:
        return name
    return f"{path}.{rest}" if rest else path


def cross_references(obj: griffe.Object, text: str) -> str:
    def link(match: re.Match[str]) -> str:
        short, name = match.groups()
        shown = name.rsplit(".", 1)[-1] if short else name
        return (f'<autoref identifier="{html.escape(qualified(obj, name))}" optional>'
                f"<code>{html.escape(shown)}</code></autoref>")

    return ROLE.sub(link, text)


def objects(obj: griffe.Object):
    """``obj`` and every object defined inside it (aliases, defined elsewhere, left out)."""
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from objects(member)


class SphinxRoles(griffe.Extension):
    """Rewrite every docstring of a loaded package once the whole package is known."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for obj in objects(pkg):
            if obj.docstring is not None:
                obj.docstring.value = cross_references(obj, obj.docstring.value)


def aliased_class(base: Any, modules: Any) -> griffe.ExprName | None:
    """The class that ``base`` names through a module-level ``Alias = Class``, if it does."""
    if not isinstance(base, griffe.ExprName):
        return None
    try:
        target = modules.get_member(base.canonical_path)
    except (KeyError, ValueError, griffe.AliasResolutionError):
        return None
    if target.is_attribute and isinstance(target.value, griffe.ExprName):
        return target.value
    return None


class BaseAliases(griffe.Extension):
    """Point each base that is a module-level alias of a class at the class itself."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader,
                   **kwargs: Any) -> None:
        for obj in objects(pkg):
            if obj.is_class:
                obj.bases = [aliased_class(base, loader.modules_collection) or base
                             for base in obj.bases]
