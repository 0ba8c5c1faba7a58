"""Runs that move (issue 25, 3): a recipe's paths are stored resolved, ``~`` is expanded,
``--data-dir`` re-points a moved corpus, and ``normzoo recipe validate`` reports data that is
not there."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from tiny import tiny
from typer.testing import CliRunner

from normzoo.cli import app
from normzoo.data import builtin

runner = CliRunner()


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))


def corpus(folder: Path) -> Path:
    """train/valid/test .en/.xx files of the toy corpus."""
    for split, size in (("train", 60), ("valid", 8), ("test", 8)):
        builtin.write_split(folder, split, src_lang="en", tgt_lang="xx", size=size)
    return folder


def recipe_file(folder: Path) -> Path:
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny(data={"source": "files", "dir": "corpus"})),
                    encoding="utf-8")
    return path


def test_a_relative_data_dir_is_stored_resolved_so_evaluate_works_from_anywhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    corpus(project / "corpus")
    elsewhere.mkdir()
    recipe_file(project)
    monkeypatch.chdir(project)
    trained = runner.invoke(app, ["train", "tiny.yaml", "run.dir=run"])
    assert trained.exit_code == 0, trained.output
    saved = yaml.safe_load((project / "run" / "recipe.yaml").read_text(encoding="utf-8"))
    assert saved["data"]["dir"] == str(project / "corpus")

    monkeypatch.chdir(elsewhere)
    checkpoint = str(project / "run" / "checkpoints" / "last.ckpt")
    scored = runner.invoke(app, ["evaluate", checkpoint, "--split", "valid", "--json"])
    assert scored.exit_code == 0, scored.output
    assert '"bleu"' in scored.output

    moved = shutil.move(project / "corpus", elsewhere / "corpus")  # the data moves on
    lost = runner.invoke(app, ["evaluate", checkpoint, "--split", "valid"])
    assert lost.exit_code == 2 and "data file not found" in lost.output, lost.output
    assert "Traceback" not in lost.output
    again = runner.invoke(app, ["evaluate", checkpoint, "--split", "valid", "--data-dir",
                                str(moved)])
    assert again.exit_code == 0, again.output


def test_a_tilde_in_data_dir_is_the_home_folder(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch):
    home = tmp_path / "home"
    corpus(home / "corpus")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    recipe_file(tmp_path)
    trained = runner.invoke(app, ["train", "tiny.yaml", "run.dir=~/run", "data.dir=~/corpus"])
    assert trained.exit_code == 0, trained.output
    saved = yaml.safe_load((home / "run" / "recipe.yaml").read_text(encoding="utf-8"))
    assert saved["data"]["dir"] == str(home / "corpus")
    assert not (tmp_path / "~").exists()


def test_recipe_validate_reports_data_that_is_not_there(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    path = recipe_file(tmp_path)
    missing = runner.invoke(app, ["recipe", "validate", str(path)])
    assert missing.exit_code == 2, missing.output
    assert "data.dir: data file not found: the folder corpus does not exist" in missing.output
    assert "Traceback" not in missing.output and missing.output.count("error:") == 1

    corpus(tmp_path / "corpus")
    (tmp_path / "corpus" / "valid.xx").unlink()
    (tmp_path / "corpus" / "test.en").unlink()
    split = runner.invoke(app, ["recipe", "validate", str(path)])
    assert split.exit_code == 2, split.output
    assert "data file not found: corpus/valid.xx (the valid split, data.valid_split)" in \
        split.output
    assert "corpus/test.en (the test split" in split.output
    assert runner.invoke(app, ["train", str(path), "run.dir=run"]).exit_code == 2
    assert not (tmp_path / "run").exists()

    corpus(tmp_path / "corpus")
    ok = runner.invoke(app, ["recipe", "validate", str(path)])
    assert ok.exit_code == 0 and "ok" in ok.output, ok.output
    text = runner.invoke(app, ["recipe", "validate", str(path), "task=causal_lm"])
    assert text.exit_code == 2 and "corpus/train.txt (the train split" in text.output


def test_a_data_key_its_source_does_not_read_is_named(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch):
    """A folder named without ``source: files`` would train on the toy corpus: validate and
    train say so on stderr (a warning, not a refusal: a sweep over data.source keeps dir)."""
    monkeypatch.chdir(tmp_path)
    path = recipe_file(corpus(tmp_path / "corpus").parent)
    read = runner.invoke(app, ["recipe", "validate", str(path)])
    assert read.exit_code == 0 and "warning" not in read.output, read.output
    toy = runner.invoke(app, ["recipe", "validate", str(path), "data.source=builtin"])
    assert toy.exit_code == 0, toy.output
    assert "warning: data.dir=corpus is not read: data.source is builtin, so the run reads " \
           "normzoo's built-in toy corpus; set data.source=files to read corpus" in toy.stderr
    hub = runner.invoke(app, ["recipe", "validate", str(path), "data.path=wmt14"])
    assert "warning: data.path=wmt14 is not read: data.source is files, so the run reads the " \
           "files in corpus; set data.source=hub to read wmt14" in hub.stderr
    trained = runner.invoke(app, ["train", str(path), "data.source=builtin", "run.dir=run",
                                  "trainer.max_steps=1", "trainer.val_every_steps=1"])
    assert trained.exit_code == 0, trained.output
    assert "warning: data.dir=" in trained.stderr and "is not read" in trained.stderr


def test_resolving_leaves_hub_names_and_unset_paths_alone(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch):
    from normzoo.recipe import from_dict
    from normzoo.run.directory import run_directory
    from normzoo.run.inputs import resolve_paths

    monkeypatch.chdir(tmp_path)
    builtin_recipe = from_dict(tiny())
    assert resolve_paths(builtin_recipe) is builtin_recipe
    hub = resolve_paths(from_dict(tiny(data={"source": "hub", "path": "wmt/wmt14"})))
    assert hub.data.path == "wmt/wmt14"
    (tmp_path / "local_hub").mkdir()
    local = resolve_paths(from_dict(tiny(data={"source": "hub", "path": "local_hub"},
                                         init={"from": "../x.ckpt"})))
    assert local.data.path == str(tmp_path / "local_hub")
    assert local.init.checkpoint == str(tmp_path.parent / "x.ckpt")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert run_directory(from_dict(tiny(run={"dir": "~/r"})), "x.yaml") == tmp_path / "r"
    assert run_directory(from_dict(tiny(run={"dir": "r"})), "x.yaml") == Path("r")


def test_the_run_directory_is_stored_resolved_so_its_recipe_resumes_it_from_anywhere(
        tmp_path: Path):
    """``recipe.yaml`` stores ``run.dir`` absolute, as it stores ``data.dir`` (once typed
    relative and stored so, the run's own recipe named another folder from anywhere else), and
    the default run directory too; the command line still shows the folder as typed."""
    import os
    import subprocess
    import sys

    import warm

    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    corpus(project / "corpus")
    elsewhere.mkdir()
    recipe_file(project)
    env = {**os.environ, "NORMZOO_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}

    def normzoo(cwd: Path, *args: str) -> subprocess.CompletedProcess:
        done = warm.run([sys.executable, "-m", "normzoo", *args], cwd=cwd, env=env, timeout=600)
        assert done.returncode == 0, done.stderr
        return done

    typed = normzoo(project, "train", "tiny.yaml", "run.dir=run")
    assert typed.stdout.splitlines()[-1] == "run directory: run"
    normzoo(project, "train", "tiny.yaml")  # runs/tiny, the default
    for run in (project / "run", project / "runs" / "tiny"):
        saved = yaml.safe_load((run / "recipe.yaml").read_text(encoding="utf-8"))
        assert saved["run"]["dir"] == str(run)
        assert saved["data"]["dir"] == str(project / "corpus")

    resumed = normzoo(elsewhere, "train", "../project/run/recipe.yaml", "--resume", "auto",
                      "trainer.max_steps=2")
    assert "resume: trainer.max_steps 1 -> 2" in resumed.stderr
    assert "resume: run.dir" not in resumed.stderr  # the same folder, named the same way
    summary = json.loads((project / "run" / "summary.json").read_text(encoding="utf-8"))
    assert summary["status"] == "completed" and summary["steps"] == 2
    assert not (elsewhere / "run").exists()
