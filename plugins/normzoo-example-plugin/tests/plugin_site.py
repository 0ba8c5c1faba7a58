"""The example plugin made visible to a test session through its entry points, as a user's
``pip install`` makes it.

normzoo finds a plugin only through installed package metadata, so importing the source folder
is not enough. Where the plugin is not installed, :func:`pip_installed` has pip build its wheel
offline (``--no-build-isolation --no-index``: setuptools must be in the environment) and install
it with ``--target`` into a temporary folder put first on ``sys.path``: the files a
``pip install`` writes into site-packages, found through the same entry points, while the
environment itself is never modified, even if the run is killed. normzoo's own suite
(``tests/test_plugin.py``) uses the same function.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from normzoo import registry

PLUGIN = Path(__file__).resolve().parents[1]
DIST, MODULE, VERSION = "normzoo-example-plugin", "normzoo_example_plugin", "0.1.0"


def entry_point_names() -> set[str]:
    """The names this checkout's ``pyproject.toml`` registers (no TOML parser: Python 3.10)."""
    text = (PLUGIN / "pyproject.toml").read_text(encoding="utf-8")
    return set(re.findall(rf'^(\w+) = "{MODULE}\.', text, re.MULTILINE))


def _refresh() -> None:
    importlib.invalidate_caches()
    registry.norms.refresh()
    registry.residuals.refresh()


def forget(folder: str) -> None:
    """Take ``folder`` off ``sys.path``, unload the plugin and re-read the registries."""
    while folder in sys.path:
        sys.path.remove(folder)
    sys.path_importer_cache.pop(folder, None)
    for name in [n for n in sys.modules if n == MODULE or n.startswith(f"{MODULE}.")]:
        del sys.modules[name]
    _refresh()


@contextmanager
def pip_installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The plugin, pip-installed into a private folder on ``sys.path`` while the context lasts;
    yields that folder."""
    try:
        import setuptools
    except ImportError:
        pytest.fail("building the plugin offline needs setuptools: pip install 'setuptools>=77'")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.fail(f"setuptools {setuptools.__version__} is too old: pip install -U setuptools")
    # Build from a copy, so the checkout gets no build/ or *.egg-info folders.
    source = tmp_path_factory.mktemp("plugin-src") / PLUGIN.name
    shutil.copytree(PLUGIN, source, ignore=shutil.ignore_patterns(
        "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache"))
    target = tmp_path_factory.mktemp("plugin-site")
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
               "--no-index", "--no-cache-dir", "--disable-pip-version-check", "--quiet",
               "--target", str(target), str(source)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        pytest.fail(f"pip could not install the plugin:\n{done.stdout}\n{done.stderr}")
    assert (target / MODULE).is_dir() and list(target.glob(f"{MODULE}-{VERSION}.dist-info"))
    sys.path.insert(0, str(target))
    _refresh()
    try:
        yield target
    finally:
        forget(str(target))


@contextmanager
def visible(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path | None]:
    """The plugin as installed in this environment (a plugin's CI: ``pip install -e .``), or, if
    it is not, :func:`pip_installed`'s private copy; yields the private folder or None.

    An installed copy that lacks a name this checkout registers is stale (installed from an
    older checkout without ``-e``): the tests would test it, not this code, so they stop.
    """
    try:
        dist = importlib.metadata.distribution(DIST)
    except importlib.metadata.PackageNotFoundError:
        with pip_installed(tmp_path_factory) as target:
            yield target
        return
    missing = entry_point_names() - {ep.name for ep in dist.entry_points}
    if missing:
        pytest.fail(f"the installed {DIST} {dist.version} lacks {sorted(missing)}: reinstall "
                    f"it (pip install -e {PLUGIN}) or uninstall it")
    yield None
