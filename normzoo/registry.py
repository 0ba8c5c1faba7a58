"""The plugin registry: names in a recipe -> norm factories and residual schemes.

Built-ins and third-party packages take one path: Python entry points in the groups
``normzoo.norms`` and ``normzoo.residuals``. Indexing reads only package metadata (fast, imports
nothing); a plugin is imported the first time it is asked for. A plugin that fails to import is
reported by ``normzoo list`` and becomes an error only when a recipe names it. Two distributions
registering one name is an error that names both.

This module imports neither torch nor Lightning, so ``normzoo list`` and ``--help`` stay fast.
"""

from __future__ import annotations

import importlib
import re
import traceback
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from normzoo.errors import RegistryError
from normzoo.options import close_match

NORMS_GROUP = "normzoo.norms"
RESIDUALS_GROUP = "normzoo.residuals"
IN_PROCESS = "<in-process>"


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
    """One registered name. ``target`` is ``module:attr`` (entry point) or the object itself."""

    info: PluginInfo
    target: str
    obj: Any = None
    error: str | None = None
    rivals: list[PluginInfo] = field(default_factory=list)

    @property
    def loaded(self) -> bool:
        return self.obj is not None


def normalize_distribution(name: str) -> str:
    """A distribution's canonical name (PEP 503): ``Foo_Bar`` and ``foo-bar`` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _same_distribution(a: PluginInfo, b: PluginInfo) -> bool:
    return normalize_distribution(a.distribution) == normalize_distribution(b.distribution)


def first_doc_line(obj: Any) -> str:
    """A plugin's one-line description: its ``description`` attribute or docstring head."""
    text = getattr(obj, "description", None) or (obj.__doc__ or "")
    text = text.strip()
    return text.splitlines()[0].strip() if text else ""


class Registry:
    """Names of one kind (norms or residual schemes), indexed from one entry-point group."""

    def __init__(self, group: str, kind: str) -> None:
        self.group = group
        self.kind = kind
        self._entries: dict[str, Entry] | None = None

    # -- indexing -----------------------------------------------------------------------------
    def _index(self) -> dict[str, Entry]:
        if self._entries is None:
            self._entries = {}
            seen: set[tuple[str, str, str]] = set()
            for ep in entry_points(group=self.group):
                dist = ep.dist.name if ep.dist is not None else "unknown"
                version = ep.dist.version if ep.dist is not None else "unknown"
                key = (ep.name, normalize_distribution(dist), ep.value)
                if key in seen:  # editable installs can expose the same metadata twice
                    continue
                seen.add(key)
                self._add(Entry(PluginInfo(ep.name, dist, version), ep.value))
        return self._entries

    def _add(self, entry: Entry) -> None:
        assert self._entries is not None
        current = self._entries.get(entry.info.name)
        if current is None:
            self._entries[entry.info.name] = entry
        elif not any(_same_distribution(i, entry.info) for i in [current.info, *current.rivals]):
            # The same distribution seen twice (an editable install next to its build) is not a
            # conflict; a second distribution is.
            current.rivals.append(entry.info)

    def register(self, name: str, obj: Any, distribution: str = IN_PROCESS) -> None:
        """Register ``obj`` under ``name`` from Python code (notebooks, tests).

        Packages should use entry points instead, so that ``normzoo list`` sees them.
        """
        entries = self._index()
        if name in entries and normalize_distribution(
            entries[name].info.distribution
        ) != normalize_distribution(distribution):
            owner = entries[name].info
            raise RegistryError(
                f"{self.kind} '{name}' is already registered by {owner.distribution} "
                f"{owner.version}; pick another name"
            )
        entries[name] = Entry(PluginInfo(name, distribution, "0"), f"{obj!r}", obj=obj)

    def unregister(self, name: str) -> None:
        """Forget an in-process registration (entry points come back on the next refresh)."""
        self._index().pop(name, None)

    def refresh(self) -> None:
        """Re-read entry points (after installing a plugin in this process).

        In-process registrations are forgotten; import caches are invalidated so that packages
        installed since the interpreter started (or folders added to ``sys.path``) are found.
        """
        importlib.invalidate_caches()
        self._entries = None

    # -- lookup -------------------------------------------------------------------------------
    def names(self) -> list[str]:
        """Every registered name, sorted; imports nothing."""
        return sorted(self._index())

    def __contains__(self, name: str) -> bool:
        return name in self._index()

    def entry(self, name: str) -> Entry:
        """The entry for ``name`` (not imported); raises with a close-match suggestion."""
        entries = self._index()
        if name not in entries:
            known = ", ".join(sorted(entries)) or "none"
            raise RegistryError(
                f"unknown {self.kind} '{name}'{close_match(name, list(entries))}; "
                f"registered: {known}"
            )
        return entries[name]

    def info(self, name: str) -> PluginInfo:
        return self.entry(name).info

    def get(self, name: str) -> Any:
        """The object registered as ``name``, importing its plugin on first use."""
        entry = self.entry(name)
        if entry.rivals:
            owners = ", ".join(
                f"{i.distribution} {i.version}" for i in [entry.info, *entry.rivals]
            )
            raise RegistryError(
                f"{self.kind} '{name}' is registered by more than one distribution ({owners}); "
                "uninstall all but one of them"
            )
        self._load(entry)
        if entry.error is not None:
            raise RegistryError(
                f"{self.kind} '{name}' from {entry.info.distribution} {entry.info.version} "
                f"failed to import: {entry.error}; fix or reinstall {entry.info.distribution}, "
                "or pick another name"
            )
        return entry.obj

    def _load(self, entry: Entry) -> None:
        if entry.loaded or entry.error is not None:
            return
        try:
            entry.obj = EntryPoint(entry.info.name, entry.target, self.group).load()
        except Exception as exc:  # a broken plugin must not take normzoo down with it
            # Point at the plugin's own line, not at importlib's machinery.
            frames = [
                frame
                for frame in traceback.extract_tb(exc.__traceback__)
                if not frame.filename.startswith("<frozen ")
                and "importlib" not in frame.filename.replace("\\", "/").split("/")
                and frame.filename != __file__
            ]
            where = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
            entry.error = f"{type(exc).__name__}: {exc}{where}"

    def entries(self, load: bool = True) -> list[Entry]:
        """All entries sorted by name; with ``load``, each is imported (errors are recorded)."""
        result = [self._index()[name] for name in self.names()]
        if load:
            for entry in result:
                self._load(entry)
        return result


norms = Registry(NORMS_GROUP, "norm")
residuals = Registry(RESIDUALS_GROUP, "residual scheme")


def plugin_provenance(norm: str, residual: str) -> list[dict[str, str]]:
    """What a checkpoint records about the plugins that built it."""
    return [
        {"kind": "norm", **norms.info(norm).as_dict()},
        {"kind": "residual", **residuals.info(residual).as_dict()},
    ]
