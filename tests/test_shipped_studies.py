"""The studies shipped with normzoo, by name (issue 60, item 1): the README's
``normzoo study run studies/quickstart-schemes.yaml`` and ``study report`` work as written from
any folder, not only from a clone's root; ``normzoo study list`` names them; a file of that name
wins; an unknown name is refused (exit 2) with the names. A shipped study's cells and page are
written under the folder the command runs in (``./runs/study-NAME``), never beside the package.

Run from a temporary folder, as a user outside a clone would (normzoo.recipe.shipped reads the
checkout's studies/ here, the wheel's normzoo/studies/ once installed: tests/test_packaging.py
checks the wheel carries them and .ci/run reports one from the installed wheel).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from normzoo.cli import app
from normzoo.recipe.shipped import STUDIES, folder, names, version
from normzoo.study.spec import load_study

ROOT = Path(__file__).resolve().parent.parent
STUDY_DIR = ROOT / "studies"
NAMES = sorted(p.stem for p in STUDY_DIR.glob("*.yaml"))
# What pyproject.toml's package data carries of studies/ (besides the top level's *.yaml).
CARRIED = ("*/*.md", "*/*.py")

runner = CliRunner()


@pytest.fixture(autouse=True)
def _outside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs in an empty folder, outside the repository."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))


def test_every_study_of_the_repository_is_shipped_by_name():
    assert names(STUDIES) == NAMES
    assert "quickstart-schemes" in NAMES and "depth" in NAMES
    assert folder(STUDIES).resolve() == STUDY_DIR  # a checkout: the one copy


@pytest.mark.parametrize("name", NAMES)
def test_what_each_study_names_is_in_what_the_wheel_carries(name: str):
    """Its prose and sections are files one folder down (the package data's globs) and its
    recipes are shipped recipes: a study read from the wheel finds everything it names."""
    carried = {p.resolve() for glob in CARRIED for p in STUDY_DIR.glob(glob)}
    study = load_study(STUDY_DIR / f"{name}.yaml")
    named = [p for p in (study.intro, study.notes) if p is not None]
    named += [STUDY_DIR / section.split(":")[0] for section in study.sections]
    for path in named:
        assert path.resolve() in carried, f"{name} names {path}, which the wheel lacks"
    for part in study.parts.values():
        assert part.recipe.resolve().is_relative_to(ROOT / "recipes"), part.recipe


def test_study_list_names_each_study_with_its_cells_and_question():
    result = runner.invoke(app, ["study", "list"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NAME", "CELLS", "QUESTION"]
    rows = {line.split()[0]: line for line in lines[1:len(NAMES) + 1]}
    assert sorted(rows) == NAMES
    assert rows["quickstart-schemes"].split()[1] == "6"  # 2 schemes x 3 seeds
    assert "does Post-LN reach another test BLEU than Pre-LN?" in rows["quickstart-schemes"]
    assert f"{len(NAMES)} studies shipped with normzoo {version()}" in result.stdout


@pytest.mark.parametrize("given", ["studies/quickstart-schemes.yaml", "quickstart-schemes"])
def test_the_readme_s_report_works_from_any_folder_and_writes_there(given: str,
                                                                      tmp_path: Path):
    result = runner.invoke(app, ["study", "report", given])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0] == (
        f"study: {given} (shipped with normzoo {version()}: "
        f"{STUDY_DIR / 'quickstart-schemes.yaml'})")
    page = tmp_path / "runs" / "study-quickstart-schemes" / "index.md"
    assert page.is_file()
    assert "missing" in result.stdout  # no cell has run here
    assert not (STUDY_DIR / "runs").exists()


def test_study_run_takes_a_shipped_name_and_trains_under_this_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    seen = {}

    def fake_run(study, out=None, **kwargs):
        seen["study"], seen["out"] = study, out

    monkeypatch.setattr("normzoo.study.running.run_study", fake_run)
    result = runner.invoke(app, ["study", "run", "studies/quickstart-schemes.yaml"])
    assert result.exit_code == 0, result.output
    assert seen["study"].file == STUDY_DIR / "quickstart-schemes.yaml"
    assert seen["study"].out == Path("runs/study-quickstart-schemes")  # relative: this folder
    assert seen["study"].parts["main"].recipe.resolve() == ROOT / "recipes" / "quickstart.yaml"


def test_a_study_file_of_a_shipped_name_wins_and_the_first_line_says_so(tmp_path: Path):
    (tmp_path / "studies").mkdir()
    own = tmp_path / "studies" / "quickstart-schemes.yaml"
    own.write_text((STUDY_DIR / "quickstart-schemes.yaml").read_text(encoding="utf-8").replace(
        "seeds: [1, 2, 3]", "seeds: [7, 8]"), encoding="utf-8")
    result = runner.invoke(app, ["study", "report", "studies/quickstart-schemes.yaml",
                                 "--out", "page"])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0] == (
        "study: studies/quickstart-schemes.yaml (this file; normzoo also ships a study named "
        "quickstart-schemes: normzoo study list)")
    assert "seed 7" in (tmp_path / "page" / "index.md").read_text(encoding="utf-8")


def test_an_unknown_study_exits_2_with_the_shipped_names():
    for command in ("run", "report"):
        result = runner.invoke(app, ["study", command, "quickstart-schemez"])
        assert result.exit_code == 2, result.output
        assert "did you mean 'quickstart-schemes'?" in result.output
        assert ", ".join(NAMES) in result.output
        assert "Traceback" not in result.output
