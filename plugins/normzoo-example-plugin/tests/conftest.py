"""Fixtures of the plugin's own tests, which run from the plugin's folder
(``python -m pytest`` there, or ``python -m pytest plugins/normzoo-example-plugin/tests``) and
in normzoo's suite (its ``testpaths``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from plugin_site import visible


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path | None]:
    """The plugin's names registered for one test module, and gone after it (normzoo's suite
    checks that they are absent without the plugin)."""
    with visible(tmp_path_factory) as folder:
        yield folder


@pytest.fixture(autouse=True)
def _single_thread() -> Iterator[None]:
    """The models are tiny: one intra-op thread is as fast, and immune to a busy CPU."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
