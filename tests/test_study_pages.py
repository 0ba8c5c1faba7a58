"""The shipped studies' pages are what ``normzoo study report`` writes from their study files and
committed cells: rendered again here, each page and its ``verdicts.json`` equal the committed
ones, so no number on them is typed by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from normzoo.cli import app

ROOT = Path(__file__).resolve().parent.parent
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"
# study file -> the folder of its committed page (its cells in data/ beneath it)
PAGES = {"precision.yaml": "docs/precision", "llama.yaml": "docs/study-llama",
         "depth.yaml": "docs/study-depth", "classify-init.yaml": "docs/study-classify",
         "quickstart-schemes.yaml": "docs/study-quickstart"}


@pytest.mark.parametrize("study", sorted(PAGES))
def test_a_shipped_page_is_what_the_report_writes(study: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch):
    page = ROOT / PAGES[study]
    if not (ROOT / "studies" / study).is_file() or not (page / "index.md").is_file():
        pytest.skip(f"{study} is not a study file with a committed page yet")
    translated = "multi30k" in (ROOT / "studies" / study).read_text(encoding="utf-8")
    if translated and not MULTI30K.is_dir():
        pytest.skip("needs ../shared/data/multi30k (the references)")
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(ROOT)
    out = tmp_path / "page"
    found = CliRunner().invoke(app, ["study", "report", f"studies/{study}", "--from",
                                     str(page / "data"), "--out", str(out),
                                     *(["--data-dir", str(MULTI30K)] if translated else [])])
    assert found.exit_code == 0, found.output
    assert json.loads((out / "verdicts.json").read_text(encoding="utf-8")) == json.loads(
        (page / "verdicts.json").read_text(encoding="utf-8"))
    assert (out / "index.md").read_text(encoding="utf-8") == (page / "index.md").read_text(
        encoding="utf-8")
    for figure in out.glob("*.png"):
        assert (page / figure.name).is_file(), f"{figure.name} is not committed"
