"""Every write path and every input, clean (issue 12): what the user sees when an output cannot be
written (read-only, full disk, in the way) or an input is bad in a way validation used to miss.

Each case is a message and an exit code (2: the input is wrong, 1: the machine failed), never a
traceback, and nothing half-written is left behind. ``docs/faults.md`` lists them. Read-only and
full file systems are simulated by ``tests/hazards.py``, which works as root too.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Any

import hazards

# Lightning binds its log handler to sys.stderr when first imported: imported here, not inside
# a CliRunner call whose stream is closed afterwards.
import lightning.pytorch  # noqa: F401
import pytest
import torch
import yaml
from registered import BUILTIN_TASKS
from tiny import TINY
from typer.testing import CliRunner

from normzoo import recipe as recipes
from normzoo.cli import app
from normzoo.inference.load import EXPORT_FILES

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")
runner = CliRunner()
REPO = Path(__file__).resolve().parent.parent

# The tiny model as overrides: on code that wrongly accepts an input, the run ends in seconds.
TINY_OVERRIDES = [f"{section}.{key}={value}" for section in ("model", "trainer")
                  for key, value in TINY[section].items()]


def cli(args: list[str], code: int, *needles: str, input: bytes | str | None = None) -> str:
    """Run the CLI in-process: exit ``code``, one ``error:`` line holding every needle (for a
    failure), and no exception escaping as a traceback."""
    result = runner.invoke(app, [str(a) for a in args], input=input)
    output = result.output
    escaped = result.exception if not isinstance(result.exception, SystemExit) else None
    assert escaped is None, f"{type(escaped).__name__}: {escaped}\n{output}"
    assert "Traceback" not in output, output
    assert result.exit_code == code, output
    if code:
        assert output.count("error:") == 1, output
    for needle in needles:
        assert needle in output, (needle, output)
    return output


def leftovers(folder: Path) -> list[Path]:
    """Temporary files or staging folders a failed write left in ``folder`` (recursively)."""
    return [p for p in folder.rglob("*") if ".tmp" in p.name or p.name.startswith(".")]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def tiny_recipe(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY), encoding="utf-8")
    return path


# -- writing outputs: export ----------------------------------------------------------------------


def test_export_onto_an_existing_file_is_refused(tiny_checkpoint: Path, tmp_path: Path):
    target = tmp_path / "model.bin"
    target.write_text("keep me")
    cli(["export", tiny_checkpoint, "--out", target], 2, f"{target} is a file",
        "export writes a directory")
    assert target.read_text() == "keep me"
    assert not leftovers(tmp_path)
    # under a file (mkdir says only "File exists"): named, before the checkpoint is read
    cli(["export", tiny_checkpoint, "--out", target / "sub" / "export"], 2,
        f"is under {target}, a file, not a folder")
    assert target.read_text() == "keep me"


@pytest.mark.parametrize("filesystem", [False, True], ids=["folder", "file system"])
def test_export_into_a_read_only_folder(tiny_checkpoint: Path, tmp_path: Path,
                                        filesystem: bool):
    folder = tmp_path / "ro"
    folder.mkdir()
    with hazards.read_only(folder, filesystem):
        cli(["export", tiny_checkpoint, "--out", folder / "export"], 1, str(folder / "export"),
            "Read-only file system" if filesystem else "Permission denied")
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("budget", [0, 1_000, 5_000])
def test_export_onto_a_full_disk_leaves_nothing(tiny_checkpoint: Path, tmp_path: Path,
                                                budget: int):
    folder = tmp_path / "full"
    folder.mkdir()
    with hazards.full_disk(folder, budget):
        cli(["export", tiny_checkpoint, "--out", folder / "export"], 1, "the disk is full",
            str(folder / "export"))
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize(("umask", "directory", "file"),
                         [(0o022, 0o755, 0o644), (0o002, 0o775, 0o664), (0o077, 0o700, 0o600)])
def test_an_export_follows_the_umask(tiny_checkpoint: Path, tmp_path: Path, umask: int,
                                     directory: int, file: int):
    old = os.umask(umask)
    try:
        cli(["export", tiny_checkpoint, "--out", tmp_path / "export"], 0)
    finally:
        os.umask(old)
    out = tmp_path / "export"
    assert oct(out.stat().st_mode & 0o777) == oct(directory)
    files = sorted(path.name for path in out.iterdir())
    assert files == sorted([*EXPORT_FILES, "README.md"])  # README.md: the model card
    assert {name: oct((out / name).stat().st_mode & 0o777) for name in files} == {
        name: oct(file) for name in files}


def test_exporting_an_export_directory_says_so(tiny_checkpoint: Path, tmp_path: Path):
    cli(["export", tiny_checkpoint, "--out", tmp_path / "export"], 0)
    output = cli(["export", tmp_path / "export", "--out", tmp_path / "again"], 2,
                 "is an export directory", "export needs a .ckpt")
    assert "damaged" not in output and "truncated" not in output
    assert not (tmp_path / "again").exists()


# -- writing outputs: evaluate --hyps -------------------------------------------------------------


@pytest.mark.parametrize("resume", [[], ["--resume", "auto"]], ids=["new", "resume"])
@pytest.mark.parametrize("under", [False, True], ids=["a file", "under a file"])
def test_a_run_directory_that_is_a_file_is_refused(tiny_recipe: Path, tmp_path: Path,
                                                   cache: Path, resume: list[str], under: bool):
    """A run.dir that is a file, or lies under one, was "could not write ...: File exists"
    (or "Not a directory"), exit 1, a machine failure; it is the user's path: exit 2."""
    blocker = tmp_path / "runs.txt"
    blocker.write_text("keep me", encoding="utf-8")
    run_dir = blocker / "run" if under else blocker
    said = "is under" if under else "is a file, not a folder"
    cli(["train", tiny_recipe, f"run.dir={run_dir}", *resume], 2, said, "run.dir=PATH")
    assert blocker.read_text(encoding="utf-8") == "keep me"


@pytest.fixture
def sentences(tmp_path: Path) -> tuple[Path, Path]:
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("The dog sees a cat.\nA man walks.\n", encoding="utf-8")
    ref.write_text("x y\nz\n", encoding="utf-8")
    return src, ref


@pytest.mark.parametrize("hazard", ["read-only", "read-only file system", "full",
                                    "full after a few bytes"])
def test_evaluate_hypotheses_on_an_unwritable_disk(tiny_checkpoint: Path, tmp_path: Path,
                                                   sentences: tuple[Path, Path], hazard: str):
    src, ref = sentences
    folder = tmp_path / "out"
    folder.mkdir()
    hyps = folder / "hyps.txt"
    hyps.write_text("the previous hypotheses\n")
    guard = (hazards.read_only(folder, "file system" in hazard) if "read-only" in hazard else
             hazards.full_disk(folder, 0 if hazard == "full" else 5))
    reason = {"read-only": "Permission denied", "read-only file system": "Read-only file system"}
    with guard:
        cli(["evaluate", tiny_checkpoint, "--src", src, "--ref", ref, "--hyps", hyps,
             "--force"], 1,
            str(hyps), reason.get(hazard, "the disk is full"))
    assert hyps.read_text() == "the previous hypotheses\n"  # untouched, not half-written
    assert not leftovers(folder)


def test_evaluate_hypotheses_into_a_folder_that_is_no_folder(tiny_checkpoint: Path,
                                                             tmp_path: Path,
                                                             sentences: tuple[Path, Path]):
    src, ref = sentences
    cli(["evaluate", tiny_checkpoint, "--src", src, "--ref", ref, "--hyps", tmp_path], 2,
        f"--hyps {tmp_path} is a directory")
    (tmp_path / "file").write_text("x")
    cli(["evaluate", tiny_checkpoint, "--src", src, "--ref", ref, "--hyps",
         tmp_path / "file" / "hyps.txt"], 2, "is not a directory")


# -- writing outputs: the tokenizer cache ---------------------------------------------------------


def _cache_unusable(tmp_path: Path, how: str) -> tuple[Path, Any]:
    if how == "a file":
        (tmp_path / "cachefile").write_text("x")
        return tmp_path / "cachefile", None
    if how == "under a file":
        (tmp_path / "cachefile").write_text("x")
        return tmp_path / "cachefile" / "cache", None
    folder = tmp_path / "cache"
    folder.mkdir()
    return folder, (hazards.read_only(folder) if how == "read-only" else
                    hazards.full_disk(folder, 100))


@pytest.mark.parametrize("how", ["a file", "under a file", "read-only", "full"])
def test_an_unusable_tokenizer_cache(tiny_recipe: Path, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch, how: str):
    folder, guard = _cache_unusable(tmp_path, how)
    monkeypatch.setenv("NORMZOO_CACHE", str(folder))
    run_dir = tmp_path / "run"
    with guard or contextlib.nullcontext():
        cli(["train", tiny_recipe, f"run.dir={run_dir}"], 1, "NORMZOO_CACHE", str(folder))
    assert not run_dir.exists()
    assert not (folder.is_dir() and leftovers(folder))


# -- bad input: stdin, recipes, data, checkpoints, hardware ---------------------------------------


def test_translate_refuses_stdin_that_is_no_utf8(tiny_checkpoint: Path, tmp_path: Path):
    junk = b"The dog \xff\xfe sees.\n"
    from_stdin = cli(["translate", tiny_checkpoint], 2, "standard input", "not UTF-8",
                     input=junk)
    (tmp_path / "in.txt").write_bytes(junk)
    from_file = cli(["translate", tiny_checkpoint, "--input", tmp_path / "in.txt"], 2,
                    "not UTF-8")
    assert from_stdin.split("is not")[1] == from_file.split("is not")[1]  # the same words


@pytest.mark.parametrize("text", ["", "\n\n", "   \n", "# only a comment\n"])
def test_an_empty_recipe_file_is_refused(tmp_path: Path, cache: Path, text: str):
    path = tmp_path / "empty.yaml"
    path.write_text(text, encoding="utf-8")
    for command in (["recipe", "validate"], ["recipe", "show"], ["train"]):
        cli([*command, path, f"run.dir={tmp_path / 'run'}", *TINY_OVERRIDES], 2,
            f"recipe file {path} is empty")
    assert not (tmp_path / "run").exists()
    (tmp_path / "defaults.yaml").write_text("{}\n")  # all the defaults, said explicitly
    cli(["recipe", "validate", tmp_path / "defaults.yaml"], 0)


@pytest.mark.parametrize("text", [" \n", "\n\n\n", "\t \r\n  \n"])
@pytest.mark.parametrize("task", ["translation", "causal_lm"])  # parallel files; one text file
def test_whitespace_only_training_files_are_refused(tmp_path: Path, cache: Path, text: str,
                                                    task: str):
    folder = tmp_path / "data"
    folder.mkdir()
    names = ("en", "xx") if task == "translation" else ("txt",)
    for split in ("train", "valid", "test"):
        for suffix in names:
            (folder / f"{split}.{suffix}").write_text("a b c .\nd e f .\n", encoding="utf-8")
    for suffix in names:  # both sides of a parallel corpus: line-aligned, and blank
        (folder / f"train.{suffix}").write_text(text, encoding="utf-8")
    path = tmp_path / "r.yaml"
    path.write_text(f"task: {task}\n", encoding="utf-8")
    cli(["train", path, f"run.dir={tmp_path / 'run'}", "data.source=files", f"data.dir={folder}",
         *TINY_OVERRIDES], 2, "data file is empty", f"train.{names[0]}", "only whitespace")
    assert not (tmp_path / "run").exists()


def _poisoned(tiny_checkpoint: Path, tmp_path: Path, value: float) -> tuple[Path, str]:
    data = torch.load(tiny_checkpoint, map_location="cpu", weights_only=True)
    name = sorted(k for k, v in data["state_dict"].items() if v.is_floating_point())[3]
    data["state_dict"][name].view(-1)[0] = value
    path = tmp_path / "poisoned.ckpt"
    torch.save(data, path)
    return path, name.removeprefix("model.")


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
@pytest.mark.parametrize("command", ["evaluate", "translate", "export", "diagnose"])
def test_a_checkpoint_with_non_finite_weights_is_refused(tiny_checkpoint: Path, tmp_path: Path,
                                                         value: float, command: str):
    path, name = _poisoned(tiny_checkpoint, tmp_path, value)
    args = {"evaluate": ["evaluate", path, "--hyps", tmp_path / "hyps.txt"],
            "translate": ["translate", path],
            "export": ["export", path, "--out", tmp_path / "export"],
            "diagnose": ["diagnose", path, "--out", tmp_path / "diag"]}[command]
    cli(args, 2, str(path), "not finite", name, input="The dog sees a cat.\n")
    assert not (tmp_path / "hyps.txt").exists() and not (tmp_path / "export").exists()


def test_an_export_with_non_finite_weights_is_refused(tiny_checkpoint: Path, tmp_path: Path):
    from safetensors.torch import load_file, save_file

    cli(["export", tiny_checkpoint, "--out", tmp_path / "export"], 0)
    weights = load_file(tmp_path / "export" / "model.safetensors")
    name = sorted(weights)[0]
    weights[name].view(-1)[-1] = float("nan")
    save_file(weights, tmp_path / "export" / "model.safetensors")
    cli(["translate", tmp_path / "export"], 2, "not finite", name, input="The dog.\n")


HUGE = ["model.d_model=1048576", "model.heads=1"]


@pytest.mark.parametrize("command", [["recipe", "validate"], ["train"]])
def test_a_model_the_machine_cannot_hold_is_refused_before_writing(tiny_recipe: Path,
                                                                   tmp_path: Path, cache: Path,
                                                                   command: list[str]):
    run_dir = tmp_path / "run"
    output = cli([*command, tiny_recipe, f"run.dir={run_dir}", *HUGE], 2, "model.d_model",
                 "needs at least", "TiB", "memory")
    assert re.search(r"\d+(\.\d+)? (GiB|TiB)", output)
    assert not run_dir.exists() and not cache.exists()


def test_the_size_estimate_is_a_close_lower_bound():
    from normzoo.models import assemble
    from normzoo.run.machine import parameter_count

    for model in ({"d_model": 64, "heads": 4, "ffn_dim": 128, "encoder_layers": 2,
                   "decoder_layers": 3},
                  {"d_model": 48, "heads": 2, "ffn_dim": 96, "encoder_layers": 1,
                   "decoder_layers": 1, "activation": "swiglu", "share_embeddings": False,
                   "tie_output": False, "positions": "learned", "max_positions": 100},
                  ):
        for task in BUILTIN_TASKS:
            recipe = recipes.from_dict({"task": task, "model": model,
                                        "data": {"tokenizer": {"vocab_size": 300}}})
            real = sum(p.numel() for p in assemble(recipe.model, vocab_size=300).parameters())
            estimate = parameter_count(recipe)
            assert 0.9 * real <= estimate <= real, (task, model, estimate, real)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CPU-only machine")
@pytest.mark.parametrize("accelerator", ["cpu", "auto"])
def test_more_cpu_devices_than_cores_is_refused(tiny_recipe: Path, tmp_path: Path, cache: Path,
                                                accelerator: str):
    run_dir = tmp_path / "run"
    for command in (["recipe", "validate"], ["train"]):
        cli([*command, tiny_recipe, f"run.dir={run_dir}", "trainer.devices=64",
             f"trainer.accelerator={accelerator}"], 2, "trainer.devices",
            f"{os.cpu_count()} CPU cores")
    assert not run_dir.exists()


# -- misleading words -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(REPO.glob("recipes/*.yaml")), ids=lambda p: p.name)
def test_the_offline_file_names_in_a_recipe_comment_match_its_splits(path: Path):
    text = path.read_text(encoding="utf-8")
    recipe = recipes.load(path)
    comment = re.search(r"^# Offline:.*\((DIR/.*)\)", text, re.MULTILINE)
    if comment is None or recipe.task == "translation":
        return
    named = re.findall(r"(?:DIR/)?([\w.-]+)\.txt", comment.group(1))
    data = recipe.data
    assert named == [data.train_split, data.valid_split, data.test_split], comment.group(0)


def test_faults_doc_names_only_tests_that_exist():
    """Every `test_x.py::name` (or `::name`, in the file named before it) in docs/faults.md is a
    test of that file, and the sections other engineers fill in are there."""
    doc = (REPO / "docs" / "faults.md").read_text(encoding="utf-8")
    file = None
    named = re.findall(r"`(?:tests/)?(test_\w+\.py)?::(\w+)`", doc)
    assert len(named) > 20
    for found, name in named:
        file = found or file
        assert file is not None and f"def {name}(" in (REPO / "tests" / file).read_text(
            encoding="utf-8"), (file, name)
    for section in ("Writing outputs", "Bad input", "Kills, pre-emption and locks", "Plugins"):
        assert f"\n## {section}\n" in doc
