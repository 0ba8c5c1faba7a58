"""normzoo as a package (issue 60, items 2 and 3): the wheel and the sdist that ``python -m
build`` makes carry what a user needs (every recipe and study, the license, the ``py.typed``
marker of ``normzoo.plugin``'s type hints, every module) and nothing of the tests or docs; and,
slow, the wheel installed into a fresh virtualenv trains the quick start by name from a folder
outside the repository to its test BLEU (``.ci/run`` does the same in a few steps).

The recipes have one copy, ``recipes/`` at the repository's root: pyproject.toml maps it into
the wheel as ``normzoo/recipes/``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECIPES = sorted(p.relative_to(ROOT / "recipes").as_posix() for p in (ROOT / "recipes").rglob(
    "*.yaml"))
MODULES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "normzoo").rglob("*.py")
                 if "__pycache__" not in p.parts)
# The shipped studies: each file, and the prose and sections one folder down that they name
# (the sections are read by path; tests/test_shipped_studies.py checks nothing else is named).
STUDIES = sorted(p.relative_to(ROOT / "studies").as_posix() for glob in ("*.yaml", "*/*.md",
                                                                        "*/*.py", "__init__.py")
                 for p in (ROOT / "studies").glob(glob))


def _toml(path: Path) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    return tomllib.loads(path.read_text(encoding="utf-8"))


def test_every_package_of_normzoo_is_listed_for_the_wheel():
    """pyproject.toml lists the packages (a `find` cannot take the recipes' folder from the
    root): a package added to normzoo/ and not listed there would be missing from the wheel."""
    listed = _toml(ROOT / "pyproject.toml")["tool"]["setuptools"]["packages"]
    found = sorted({Path(module).parent.as_posix().replace("/", ".") for module in MODULES})
    shipped = {"normzoo.recipes", "normzoo.recipes.studies", "normzoo.studies"}
    assert sorted(set(listed) - shipped) == found
    assert shipped <= set(listed)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist, and the wheel built from it, as `python -m build` makes them (without
    isolation: the setuptools installed here; .ci/run builds them isolated)."""
    pytest.importorskip("build", reason="pip install build (part of .[dev])")
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out),
                           str(ROOT)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = out.glob("normzoo-*.whl")
    (sdist,) = out.glob("normzoo-*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


def test_the_wheel_carries_the_recipes_the_studies_the_license_and_py_typed(
        built: dict[str, Path]):
    names = zipfile.ZipFile(built["wheel"]).namelist()
    assert sorted(n.removeprefix("normzoo/recipes/") for n in names
                  if n.startswith("normzoo/recipes/")) == RECIPES
    assert sorted(n.removeprefix("normzoo/studies/") for n in names
                  if n.startswith("normzoo/studies/")) == STUDIES
    assert "normzoo/py.typed" in names
    (info,) = {n.split("/")[0] for n in names if ".dist-info/" in n}
    assert f"{info}/licenses/LICENSE" in names
    metadata = zipfile.ZipFile(built["wheel"]).read(f"{info}/METADATA").decode()
    assert "License-Expression: MIT" in metadata and "License-File: LICENSE" in metadata
    assert sorted(n for n in names if n.endswith(".py")) == sorted(
        MODULES + [f"normzoo/studies/{n}" for n in STUDIES if n.endswith(".py")])
    assert not [n for n in names if n.startswith(("tests/", "docs/", "site/", "studies/",
                                                  "benchmarks/", "plugins/", "recipes/"))]
    assert not [n for n in names if "/test_" in n or "conftest" in n or "__pycache__" in n]
    assert {n.split("/")[0] for n in names} == {"normzoo", info}


def test_the_sdist_carries_what_builds_the_wheel_and_no_tests_or_docs(built: dict[str, Path]):
    with tarfile.open(built["sdist"]) as sdist:
        names = [n.split("/", 1)[1] for n in sdist.getnames() if "/" in n]
    assert sorted(n.removeprefix("recipes/") for n in names
                  if n.startswith("recipes/") and n.endswith(".yaml")) == RECIPES
    assert {"LICENSE", "README.md", "pyproject.toml", "normzoo/py.typed"} <= set(names)
    assert set(MODULES) <= set(names)
    assert {f"studies/{n}" for n in STUDIES} <= set(names)  # the wheel is built from the sdist
    assert not [n for n in names if n.split("/")[0] in ("tests", "docs", "site",
                                                        "benchmarks", "plugins", ".ci")]
    assert not [n for n in names if "/test_" in n or "conftest" in n]


def _run(args: list[str], cwd: Path, env: dict[str, str],
         timeout: int = 1800) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{args}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.slow
def test_the_installed_wheel_trains_the_quick_start_by_name(built: dict[str, Path],
                                                            tmp_path: Path):
    """A fresh virtualenv, torch's CPU build first, then the wheel (not editable): from a
    folder outside the repository, `normzoo train quickstart` as the README has it, to the
    quick start's test BLEU (96-97 in the README; any trained model is far above copying's
    0.05). Needs the package index, as pip does."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["NORMZOO_CACHE"] = str(tmp_path / "cache")
    pip = [str(python), "-m", "pip", "install", "-q"]
    _run([*pip, "torch==2.13.0"], tmp_path, env)
    _run([*pip, str(built["wheel"])], tmp_path, env)
    work = tmp_path / "work"
    work.mkdir()
    where = _run([str(python), "-c", "import normzoo; print(normzoo.__file__)"], work, env)
    assert where.stdout.startswith(str(venv))
    listed = _run(["normzoo", "recipe", "list"], work, env).stdout
    assert "quickstart" in listed and "studies/multi30k_papers" in listed
    trained = _run(["normzoo", "train", "quickstart"], work, env, timeout=3600)
    first = trained.stderr.splitlines()[0]
    assert first.startswith("recipe: quickstart (shipped with normzoo")
    assert str(venv) in first  # the wheel's copy, not the checkout's
    assert "test BLEU" in trained.stdout
    summary = json.loads((work / "runs" / "quickstart" / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["test"]["bleu"] > 80, summary["test"]
    # The README's study line, verbatim: the wheel's study, its page written here.
    reported = _run(["normzoo", "study", "report", "studies/quickstart-schemes.yaml"], work, env)
    assert reported.stderr.splitlines()[0].startswith(
        "study: studies/quickstart-schemes.yaml (shipped with normzoo")
    assert str(venv) in reported.stderr.splitlines()[0]
    assert (work / "runs" / "study-quickstart-schemes" / "index.md").is_file()
