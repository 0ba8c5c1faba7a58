"""The documentation site (mkdocs.yml, docs/) builds with ``--strict``: no broken link, no page
missing from the navigation, and the generated reference pages are there.

Needs the ``docs`` extra (``pip install -e ".[docs]"``, part of ``.[dev]``); skipped without it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SKIP = 'the docs extra is not installed (pip install -e ".[docs]")'

for module in ("mkdocs", "material", "mkdocstrings_handlers.python", "griffe_pydantic"):
    pytest.importorskip(module, reason=SKIP)


def page_text(site: Path, page: str) -> str:
    """The text of a built page, tags stripped."""
    return re.sub(r"<[^>]+>", "", (site / page / "index.html").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_the_site_builds_strict_with_the_api_and_cli_reference(site: Path):
    residual = page_text(site, "reference/api/residual")
    assert "ResidualScheme" in residual and "StreamEnds" in residual
    assert "Registry" in page_text(site, "reference/api/registry")
    assert "load_checkpoint" in page_text(site, "reference/api/load")
    recipe = page_text(site, "reference/api/recipe")
    assert "DataConfig" in recipe and "max_tokens" in recipe
    cli = page_text(site, "reference/cli")
    assert "normzoo train" in cli and "normzoo recipe validate" in cli and "--resume" in cli
    # The build helpers are not published; docstrings' Sphinx roles became code, not text.
    assert not (site / "hooks").exists()
    assert ":func:`" not in residual and ":class:`" not in recipe


def load_hook(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_link_out_of_docs_names_a_repository_file_or_fails_the_build(caplog):
    hook = load_hook("repo_links")
    docs = ROOT / "docs"

    def rewrite(markdown: str) -> str:
        return re.sub(hook.LINK, lambda m: hook.outside_link(m, docs, docs, ROOT, "page.md"),
                      markdown)

    assert rewrite("[`recipes/gpt_llama.yaml`](../recipes/gpt_llama.yaml)") == (
        "`recipes/gpt_llama.yaml`")
    assert rewrite("the [details](../benchmarks/README.md).") == (
        "the details (`benchmarks/README.md`).")
    assert rewrite("[data](data.md), [web](https://example.org)") == (
        "[data](data.md), [web](https://example.org)")  # MkDocs' own to check
    with caplog.at_level("WARNING"):
        assert rewrite("[gone](../recipes/no_such.yaml)") == "[gone](../recipes/no_such.yaml)"
    assert "not a file of the repository" in caplog.text
