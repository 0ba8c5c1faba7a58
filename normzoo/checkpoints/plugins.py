"""Step two of loading a model: the plugins that built it, installed and importable here?

A checkpoint and an export record every plugin that built the model (its norm, residual scheme
and ``model.qk_norm``), with its distribution and version
(:class:`normzoo.registry.entry.PluginInfo`). A missing or broken one is named with the
``pip install`` that fixes it, before anything is rebuilt.
"""

from __future__ import annotations

import warnings

from normzoo import registry
from normzoo.checkpoints.reading import CheckpointError, damaged


def check_plugins(plugins: list[dict[str, str]], source: str) -> list[str]:
    """Check that the plugins that built the model are installed here and import.

    Fails naming the distribution to install when one is missing (or the name now comes from
    another distribution), or naming the import error when it fails to import. Returns each
    version difference (a plugin's, not normzoo's own, is also warned about).
    """
    if not (isinstance(plugins, list) and all(
            isinstance(p, dict) and isinstance(p.get("name"), str) for p in plugins)):
        raise damaged(source, "its plugin list is not a list of {kind, name, distribution, "
                       "version} entries")
    differences = []
    with registry.pinned(plugins):  # a name several distributions provide: the recorded one
        for plugin in plugins:
            reg = registry.of_kind(plugin.get("kind"))
            name = plugin["name"]
            dist, version = str(plugin.get("distribution", "?")), str(plugin.get("version", "?"))
            entry = reg.entry(name) if name in reg else None
            if entry is None or registry.normalize_distribution(
                    entry.info.distribution) != registry.normalize_distribution(dist):
                here = "" if entry is None else (
                    f" ('{name}' here comes from {entry.info.distribution} {entry.info.version})")
                raise CheckpointError(
                    f"{source} was built with {reg.kind} '{name}' from the distribution '{dist}' "
                    f"(version {version}), which is not installed here{here}; install it first, "
                    f"e.g. pip install '{dist}=={version}'"
                )
            if reg.load(entry).error is not None:
                raise CheckpointError(
                    f"{source} was built with {reg.kind} '{name}' from {dist} {version}, and that "
                    f"plugin failed to import here: {entry.error}; fix or reinstall {dist}, "
                    f"e.g. pip install --force-reinstall '{dist}=={version}'"
                )
            if entry.info.version == version:
                continue
            differences.append(
                f"{reg.kind} '{name}' was built with {dist} {version} and {dist} "
                f"{entry.info.version} is installed here (pip install '{dist}=={version}' to "
                "match)")
            if registry.normalize_distribution(dist) != registry.BUILTIN:
                warnings.warn(registry.PluginVersionWarning(
                    f"{source}: {differences[-1]}; the model may load or behave differently"),
                    stacklevel=2)
    return differences
