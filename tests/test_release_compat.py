"""Older checkpoints keep loading (docs/compatibility.md): a checkpoint written by 0.2.0's code,
committed as a small fixture (``tests/fixtures/make_checkpoint.py``), loads in this release
with the same weights, recipe and translations, evaluates, and exports."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from normzoo.cli import app

FIXTURES = Path(__file__).parent / "fixtures"
RELEASES = sorted(p for p in FIXTURES.glob("checkpoint-*") if (p / "last.ckpt").is_file())


def test_the_first_releases_checkpoint_is_kept():
    assert [p.name for p in RELEASES][:1] == ["checkpoint-0.2.0"]


@pytest.mark.parametrize("folder", RELEASES, ids=[p.name for p in RELEASES])
def test_a_released_checkpoint_loads_translates_and_scores_as_it_did(folder: Path):
    sys.path.insert(0, str(FIXTURES))
    try:
        from make_checkpoint import expected
    finally:
        sys.path.remove(str(FIXTURES))
    assert expected(folder / "last.ckpt") == json.loads((folder / "expected.json").read_text())


@pytest.mark.parametrize("folder", RELEASES, ids=[p.name for p in RELEASES])
def test_a_released_checkpoint_evaluates_and_exports(folder: Path, tmp_path: Path):
    checkpoint = str(folder / "last.ckpt")
    runner = CliRunner()
    scored = runner.invoke(app, ["evaluate", checkpoint, "--split", "valid", "--json",
                                 "--hyps", str(tmp_path / "hyps.txt")])
    assert scored.exit_code == 0, scored.output
    assert json.loads(scored.output)["sentences"] > 0
    exported = runner.invoke(app, ["export", checkpoint, "--out", str(tmp_path / "export")])
    assert exported.exit_code == 0, exported.output
    assert (tmp_path / "export").is_dir()
