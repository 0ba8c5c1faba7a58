"""The plugin registry: names in a recipe -> norm factories, residual schemes and tasks.

Built-ins and third-party packages take one path: Python entry points in the groups
``normzoo.norms``, ``normzoo.residuals`` and ``normzoo.tasks``. Indexing reads only package
metadata (fast, imports nothing); a plugin is imported the first time it is asked for. A plugin
that fails to import is reported by ``normzoo list`` and becomes an error only when a recipe
names it. Two distributions registering one name is an error that names both, except where a
checkpoint recorded which one built it (:func:`pinned`). normzoo's own names are reserved: a
plugin registering one is that plugin's conflict (``normzoo list`` shows it), and the built-in
keeps working. What one entry is (its provenance, its conflict, its description) is
:mod:`normzoo.registry.entry`.

This module imports neither torch nor Lightning, so ``normzoo list`` and ``--help`` stay fast.
"""

from __future__ import annotations

import importlib
import traceback
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from normzoo.errors import RegistryError
from normzoo.registry.entry import (
    BUILTIN,
    Entry,
    PluginInfo,
    first_doc_line,
    is_builtin,
    normalize_distribution,
    same_distribution,
)
from normzoo.registry.options import close_match

# What is recorded and shown about one entry lives in normzoo.registry.entry; callers import it
# from here, with the rest of the registry.
__all__ = [
    "BUILTIN",
    "IN_PROCESS",
    "NORMS_GROUP",
    "RESIDUALS_GROUP",
    "TASKS_GROUP",
    "Entry",
    "PluginInfo",
    "PluginVersionWarning",
    "Registry",
    "first_doc_line",
    "normalize_distribution",
    "norms",
    "of_kind",
    "pinned",
    "plugin_provenance",
    "residuals",
    "task_provenance",
    "tasks",
]

NORMS_GROUP = "normzoo.norms"
RESIDUALS_GROUP = "normzoo.residuals"
TASKS_GROUP = "normzoo.tasks"
IN_PROCESS = "<in-process>"

# (group, name) -> canonical distribution: who resolves a contested name (see ``pinned``).
_pins: ContextVar[dict[tuple[str, str], str] | None] = ContextVar("normzoo_pins", default=None)


class PluginVersionWarning(UserWarning):
    """A checkpoint was built with another version of a plugin than the one installed."""


class Registry:
    """Names of one kind (norms or residual schemes), indexed from one entry-point group."""

    def __init__(self, group: str, kind: str, instance_of: str | None = None) -> None:
        self.group = group
        self.kind = kind
        # ``module:Class``: each entry must be a subclass of it and is kept as an instance made
        # without arguments (tasks), so a plugin whose class cannot be built is BROKEN in
        # ``normzoo list`` rather than a traceback wherever it is first used. Named by a
        # string: the class lives above the registry, and is imported as entry points are.
        self.instance_of = instance_of
        self._entries: dict[str, Entry] | None = None
        self._refused: list[Entry] = []

    # -- indexing -----------------------------------------------------------------------------
    def _index(self) -> dict[str, Entry]:
        if self._entries is None:
            self._entries, self._refused = {}, []
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
        name = entry.info.name
        current = self._entries.get(name)
        known = [current, *current.claimants] if current is not None else []
        known += [e for e in self._refused if e.info.name == name]
        if any(same_distribution(e.info, entry.info) for e in known):
            return  # one distribution seen twice (an editable install next to its build)
        if current is None:
            self._entries[name] = entry
        elif is_builtin(entry.info):  # plugins listed before normzoo claimed a built-in's name
            for taken in [current, *current.claimants]:
                taken.claimants, taken.reserved = [], entry.info
                self._refused.append(taken)
            self._entries[name] = entry
        elif is_builtin(current.info):
            entry.reserved = current.info
            self._refused.append(entry)
        else:
            current.claimants.append(entry)

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
        if self.instance_of is not None:
            entries[name].obj = self._made(obj)

    def unregister(self, name: str) -> None:
        """Forget an in-process registration (entry points come back on the next refresh)."""
        self._index().pop(name, None)

    def refused(self) -> list[Entry]:
        """Plugins' entries ignored because their name is a built-in's, sorted by name."""
        self._index()
        return sorted(self._refused, key=lambda e: (e.info.name, e.info.distribution))

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
        """The entry for ``name`` (not imported); raises with a close-match suggestion.

        Where several distributions register ``name`` and :func:`pinned` names one of them,
        that one's entry.
        """
        entries = self._index()
        if name not in entries:
            known = ", ".join(sorted(entries)) or "none"
            raise RegistryError(
                f"unknown {self.kind} '{name}'{close_match(name, list(entries))}; "
                f"registered: {known}"
            )
        entry = entries[name]
        for claimant in entry.claimants:
            if self._pinned(claimant):
                return claimant
        return entry

    def _pinned(self, entry: Entry) -> bool:
        """Whether :func:`pinned` chose ``entry``'s distribution for its name."""
        pin = (_pins.get() or {}).get((self.group, entry.info.name))
        return pin == normalize_distribution(entry.info.distribution)

    def info(self, name: str) -> PluginInfo:
        return self.entry(name).info

    def get(self, name: str) -> Any:
        """The object registered as ``name``, importing its plugin on first use."""
        entry = self.entry(name)
        if entry.claimants and not self._pinned(entry):
            owners = ", ".join(
                f"{i.distribution} {i.version}" for i in [entry.info, *entry.rivals]
            )
            raise RegistryError(
                f"{self.kind} '{name}' is registered by more than one distribution ({owners}); "
                "uninstall all but one of them"
            )
        if self.load(entry).error is not None:
            raise RegistryError(
                f"{self.kind} '{name}' from {entry.info.distribution} {entry.info.version} "
                f"failed to import: {entry.error}; fix or reinstall {entry.info.distribution}, "
                "or pick another name"
            )
        return entry.obj

    def load(self, entry: Entry) -> Entry:
        """``entry`` with its plugin imported, or with ``error`` set if the import failed."""
        if not (entry.loaded or entry.error is not None):
            self._load(entry)
        return entry

    def _load(self, entry: Entry) -> None:
        try:
            entry.obj = self._made(EntryPoint(entry.info.name, entry.target, self.group).load())
        # A broken plugin must not take normzoo down with it: one that calls sys.exit() on
        # import (SystemExit is no Exception) included; Ctrl-C still stops the command.
        except (Exception, SystemExit) as exc:
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

    def _made(self, obj: Any) -> Any:
        """``obj`` as this registry keeps it: itself, or (``instance_of``) an instance of it."""
        if self.instance_of is None:
            return obj
        module, _, name = self.instance_of.partition(":")
        base = getattr(importlib.import_module(module), name)
        if not (isinstance(obj, type) and issubclass(obj, base)):
            raise TypeError(f"the entry point names {obj!r}, not a subclass of "
                            f"{base.__module__}.{base.__qualname__}")
        return obj()

    def working(self) -> list[Entry]:
        """The entries that import and that no other distribution contests, sorted by name: what
        a listing of alternatives may offer (a broken plugin is an error only where named)."""
        return [entry for entry in self.entries(load=True)
                if entry.error is None and entry.conflict is None]

    def entries(self, load: bool = True) -> list[Entry]:
        """All entries sorted by name; with ``load``, each is imported (errors are recorded)."""
        result = [self._index()[name] for name in self.names()]
        if load:
            for entry in result:
                self.load(entry)
        return result


norms = Registry(NORMS_GROUP, "norm")
residuals = Registry(RESIDUALS_GROUP, "residual scheme")
tasks = Registry(TASKS_GROUP, "task", instance_of="normzoo.contract.task:Task")


def of_kind(kind: str) -> Registry:
    """The registry for a checkpoint's plugin ``kind`` (``norm``, ``residual`` or ``task``)."""
    return {"norm": norms, "task": tasks}.get(kind, residuals)


def task_provenance(name: str) -> list[dict[str, str]]:
    """What a checkpoint records about the task that trained it, where a plugin provides it
    (its model is the task's ``build_model``'s), so that a missing task plugin is named with
    its distribution on load; nothing for normzoo's own tasks, which come with normzoo."""
    info = tasks.info(name)
    return [] if is_builtin(info) else [{"kind": "task", **info.as_dict()}]


@contextmanager
def pinned(plugins: Iterable[Mapping[str, Any]]) -> Iterator[None]:
    """Resolve each recorded name to the distribution that recorded it, where several provide it.

    ``plugins`` is what a checkpoint records (``kind``, ``name``, ``distribution``), so a model
    rebuilt from it uses the plugin that built it, not "uninstall all but one".
    """
    pins = {(of_kind(str(p.get("kind"))).group, str(p["name"])):
            normalize_distribution(str(p.get("distribution", ""))) for p in plugins}
    token = _pins.set({**(_pins.get() or {}), **pins})
    try:
        yield
    finally:
        _pins.reset(token)


def plugin_provenance(norm: str, residual: str, qk_norm: str | None = None
                      ) -> list[dict[str, str]]:
    """What a checkpoint records about the plugins that built it: every one the model uses,
    ``model.qk_norm``'s too, so that a missing one is named with its distribution on load
    (each name once: a ``qk_norm`` that is also ``model.norm`` is one entry)."""
    recorded = [
        {"kind": "norm", **norms.info(norm).as_dict()},
        {"kind": "residual", **residuals.info(residual).as_dict()},
    ]
    if qk_norm is not None and qk_norm != norm:
        recorded.append({"kind": "norm", **norms.info(qk_norm).as_dict()})
    return recorded
