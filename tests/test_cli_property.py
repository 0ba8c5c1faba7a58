"""Property: whatever the command line, ``normzoo`` ends with exit code 0, 1, 2 or 3, without a
traceback, and leaves no half-written output file.

Hypothesis generates argument lists for every command (``train``, ``evaluate``, ``translate``,
``generate``, ``export``, ``diagnose``, ``sweep``, ``recipe show``, ``recipe validate``,
``list``), their options included (``--device``, ``--batch-size``, repeated ``--vary``), over
generated bad inputs (recipes, data folders, checkpoints, exports, standard input) and outputs
that are in the way, read-only or on a full disk (``tests/hazards.py``, which works as root).
Most examples run in-process through :func:`normzoo.cli.main` (the console-script entry point)
with ``sys.argv`` and the standard streams replaced; a few run as real ``python -m normzoo``
processes, to show the same at the real command line.

After each example every file left in its folder is checked to be whole (JSON, YAML, PNG,
checkpoints, safetensors, exports, hypotheses), no temporary or staging file is left, inputs are
unchanged, and an output that was in the way is untouched unless the command succeeded.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hazards

# Lightning binds its log handler to sys.stderr when first imported: imported here, not inside
# an example whose stream is replaced.
import lightning.pytorch  # noqa: F401
import pytest
import torch
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tiny import tiny, toy_text

from normzoo import cli
from normzoo.inference.load import EXPORT_FILES, load_export

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")
HERE = Path(__file__).parent
EXAMPLES = 120

# One step, a step-N.ckpt kept (for export --average) and every step logged.
TINY = tiny(trainer={"keep_checkpoints": 1, "log_every_steps": 1})
SENTENCES = [f"the dog number {i} sees a cat ." for i in range(12)]


# -- the world: inputs made once per module -------------------------------------------------------


@dataclass
class World:
    root: Path
    cache: Path
    checkpoints: dict[str, Path] = field(default_factory=dict)
    data: dict[str, Path] = field(default_factory=dict)


def _write_data(folder: Path, how: str) -> Path:
    folder.mkdir(parents=True)
    good = ("\n".join(SENTENCES) + "\n").encode()
    for split in ("train", "valid", "test"):
        for suffix in ("en", "xx", "txt"):
            (folder / f"{split}.{suffix}").write_bytes(good)
    broken = {"whitespace": b"  \n\t\n", "empty": b"", "not utf-8": b"a \xff b\n" * 12,
              "misaligned": good + b"one more\n"}
    for suffix in ("xx", "txt"):
        if how == "missing":
            (folder / f"train.{suffix}").unlink()
        elif how in broken:
            (folder / f"train.{suffix}").write_bytes(broken[how])
    return folder


def _language_model(root: Path) -> Path:
    """``last.ckpt`` of two steps of a tiny causal LM on toy text (for ``generate``)."""
    from normzoo.recipe import from_dict
    from normzoo.run import training as train

    root.mkdir()
    toy_text(root, (100, 8, 8))
    recipe = from_dict(tiny(task="causal_lm", model={"family": "decoder", "encoder_layers": 0},
                            run={"dir": str(root / "run")},
                            data={"source": "files", "dir": str(root)},
                            trainer={"max_steps": 2, "val_every_steps": 2}))
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NORMZOO_CACHE", str(root / "cache"))
        train.run(recipe, "lm.yaml")
    torch.set_num_threads(threads)
    return root / "run" / "checkpoints" / "last.ckpt"


def _poisoned(source: Path, target: Path, value: float) -> Path:
    data = torch.load(source, map_location="cpu", weights_only=True)
    next(v for v in data["state_dict"].values() if v.is_floating_point()).view(-1)[0] = value
    torch.save(data, target)
    return target


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path) -> Iterator[World]:
    from safetensors.torch import load_file, save_file

    from normzoo.export.writer import export

    root = tmp_path_factory.mktemp("cli_property")
    found = World(root, root / "cache")
    folder = root / "checkpoints"
    folder.mkdir()
    good = folder / "good.ckpt"
    shutil.copy(tiny_checkpoint, good)
    raw = good.read_bytes()
    found.checkpoints.update({
        "good": good,
        "nan": _poisoned(good, folder / "nan.ckpt", float("nan")),
        "inf": _poisoned(good, folder / "inf.ckpt", float("-inf")),
        "truncated": folder / "cut.ckpt", "empty": folder / "empty.ckpt",
        "text": folder / "notes.ckpt", "folder": folder / "folder.ckpt",
        "missing": folder / "missing.ckpt",
    })
    found.checkpoints["truncated"].write_bytes(raw[: len(raw) // 2])
    found.checkpoints["empty"].write_bytes(b"")
    found.checkpoints["text"].write_bytes(b"task: translation\n")
    found.checkpoints["folder"].mkdir()
    exports = root / "exports"
    found.checkpoints["export"] = export(good, exports / "good")
    for name in ("nan export", "export without config"):
        shutil.copytree(exports / "good", exports / name)
        found.checkpoints[name] = exports / name
    weights = load_file(exports / "nan export" / "model.safetensors")
    next(iter(weights.values())).view(-1)[0] = float("nan")
    save_file(weights, exports / "nan export" / "model.safetensors")
    (exports / "export without config" / "config.json").unlink()
    found.checkpoints["lm"] = _language_model(root / "lm")
    for how in ("good", "whitespace", "empty", "not utf-8", "misaligned", "missing"):
        found.data[how] = _write_data(root / "data" / how, how)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NORMZOO_CACHE", str(found.cache))
        yield found


# -- one example: its folder, its files, its command ----------------------------------------------


@dataclass
class Example:
    """A command line with what it reads and where it writes."""

    folder: Path
    args: list[str] = field(default_factory=list)
    stdin: bytes = b""
    hazard: Callable[[], Any] | None = None
    cache: Path | None = None  # NORMZOO_CACHE, when not the module's
    inputs: dict[Path, str] = field(default_factory=dict)  # path -> digest, must not change
    in_the_way: dict[Path, str] = field(default_factory=dict)  # outputs that existed before
    hypotheses: tuple[Path, int] | None = None  # a --hyps file and its expected line count
    wrapper: list[str] = field(default_factory=list)  # tests/hazards.py's arguments, as a process
    broken: set[str] = field(default_factory=set)  # which ASPECTS are wrong

    def input(self, path: Path) -> str:
        if path.is_file():
            self.inputs[path] = _digest(path)
        return str(path)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _text(max_size: int = 40) -> st.SearchStrategy[str]:
    return st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
                   max_size=max_size)


# What an example can get wrong. Each example breaks at most two of them and keeps the others
# valid, so that most commands get as far as writing, where the disk may be full or read-only.
ASPECTS = ["recipe", "overrides", "data", "checkpoint", "output", "cache", "options", "input",
           "command line"]

RECIPES: dict[str, Callable[[st.DataObject], bytes]] = {
    "empty": lambda d: b"",
    "whitespace": lambda d: b"  \n\n",
    "comment only": lambda d: b"# nothing here\n",
    "a list": lambda d: b"- task\n- model\n",
    "malformed": lambda d: b"model: {d_model: [64\n",
    "not utf-8": lambda d: b"task: translation\nseed: \xff\xfe\n",
    "huge model": lambda d: yaml.safe_dump(
        {**TINY, "model": {**TINY["model"], "d_model": 2**20, "heads": 1}}).encode(),
    "many cpu processes": lambda d: yaml.safe_dump(
        {**TINY, "trainer": {**TINY["trainer"], "devices": 64}}).encode(),
    "random text": lambda d: d.draw(_text(80)).encode(),
    "random bytes": lambda d: d.draw(st.binary(max_size=80)),
}
GOOD_RECIPES = {"translation": TINY, "causal_lm": {**TINY, "task": "causal_lm"},
                "mlm": {**TINY, "task": "mlm"}}
GOOD_OVERRIDES = ["trainer.max_steps=1", "eval.beam=2", "model.residual=post",
                  "model.norm=rmsnorm", "trainer.keep_checkpoints=2", "optim.warmup_steps=1"]
BAD_OVERRIDES = [
    "model.d_model=1048576", "trainer.devices=64", "trainer.devices=0", "model.d_model=abc",
    "optim.lr=.inf", "nokey", "=1", "model..x=1", "modle.d_model=8", "data.tokenizer.vocab_size=2",
    "data.source=files", "model.dropout=1.5", "task=mlm", "model.heads=3",
]
BAD_CHECKPOINTS = ["nan", "inf", "truncated", "empty", "text", "folder", "missing",
                   "nan export", "export without config"]
OUTPUTS = ["existing file", "existing folder", "empty folder", "under a file", "missing parent",
           "read-only", "read-only fs", "full", "full", "full"]
STDIN = {"sentences": "\n".join(SENTENCES[:3]).encode() + b"\n", "empty": b"",
         "whitespace": b" \n\n", "not utf-8": b"the dog \xff\xfe sees\n",
         "bom and crlf": b"\xef\xbb\xbfthe dog .\r\na cat .\r\n", "one empty line": b"\n",
         "longer than the model": ("the dog sees a cat . " * 30 + "\na cat .\n").encode()}
# --device: this machine's, and ones it lacks (no machine has 99 GPUs, nor a TPU in torch).
GOOD_DEVICES = [[], ["--device", "cpu"], ["--device", "auto"]]
BAD_DEVICES = [["--device", "tpu"], ["--device", "cuda:99"], ["--device", ""]]


def recipe_file(d: st.DataObject, ex: Example) -> str:
    path = ex.folder / "recipe.yaml"
    if "recipe" not in ex.broken:
        task = d.draw(st.sampled_from(sorted(GOOD_RECIPES)), label="task")
        path.write_text(yaml.safe_dump(GOOD_RECIPES[task]), encoding="utf-8")
        return ex.input(path)
    kind = d.draw(st.sampled_from([*RECIPES, "missing", "a folder"]), label="bad recipe")
    if kind == "a folder":
        path.mkdir()
    elif kind != "missing":
        path.write_bytes(RECIPES[kind](d))
    return ex.input(path)


def overrides(d: st.DataObject, ex: Example, world: World) -> list[str]:
    chosen = d.draw(st.lists(st.sampled_from(GOOD_OVERRIDES), max_size=2), label="overrides")
    if "overrides" in ex.broken:
        chosen += d.draw(st.lists(st.sampled_from(BAD_OVERRIDES) | _text(20), min_size=1,
                                  max_size=2), label="bad overrides")
    if "data" in ex.broken:
        how = d.draw(st.sampled_from(sorted(world.data)), label="data")
        chosen += ["data.source=files", f"data.dir={world.data[how]}"]
    return chosen


def checkpoint(d: st.DataObject, ex: Example, world: World, good: tuple[str, ...] = (
        "good", "export")) -> str:
    kind = d.draw(st.sampled_from(BAD_CHECKPOINTS if "checkpoint" in ex.broken else
                                  list(good)), label="checkpoint")
    path = world.checkpoints[kind]
    if path.is_dir():
        for file in path.iterdir():
            ex.input(file)
    return ex.input(path)


def hazard(kind: str, folder: Path, budget: int = 0) -> Callable[[], Any]:
    """What makes ``folder`` read-only (a folder, or a file system) or a full disk."""
    if kind == "full":
        return lambda: hazards.full_disk(folder, budget)
    return lambda: hazards.read_only(folder, filesystem=kind == "read-only fs")


def output(d: st.DataObject, ex: Example, name: str) -> Path:
    """Where a command writes: free, or in the way, unwritable or on a full disk."""
    kind = d.draw(st.sampled_from(OUTPUTS), label="output") if "output" in ex.broken else "free"
    folder = ex.folder
    if kind == "existing file":
        (folder / name).write_bytes(b"was here first\n")
    elif kind == "existing folder":
        (folder / name).mkdir()
        (folder / name / "keep.txt").write_bytes(b"was here first\n")
    elif kind == "empty folder":
        (folder / name).mkdir()
    elif kind == "under a file":
        (folder / "a-file").write_bytes(b"x")
        folder = folder / "a-file"
    elif kind == "missing parent":
        folder = folder / "no" / "such"
    elif kind in ("read-only", "read-only fs", "full"):
        folder = folder / kind.replace(" ", "-")
        folder.mkdir()
        budget = d.draw(st.integers(0, 400_000), label="bytes left") if kind == "full" else 0
        ex.hazard = hazard(kind, folder, budget)
    target = folder / name
    for path in [target, *target.rglob("*")] if target.is_dir() else [target]:
        if path.is_file():
            ex.in_the_way[path] = _digest(path)
    return target


def cache(d: st.DataObject, ex: Example) -> None:
    """NORMZOO_CACHE: the module's (warm), or one that is a file, read-only or full."""
    if "cache" not in ex.broken:
        return
    kind = d.draw(st.sampled_from(["a file", "read-only", "read-only fs", "full"]),
                  label="cache")
    ex.cache = ex.folder / "cache"
    if kind == "a file":
        ex.cache.write_bytes(b"x")
    elif ex.hazard is None:
        ex.cache.mkdir()
        ex.hazard = hazard(kind, ex.cache)


def sources_and_references(d: st.DataObject, ex: Example) -> list[str]:
    kind = d.draw(st.sampled_from(["misaligned", "whitespace", "not utf-8", "missing", "random"]),
                  label="--src/--ref") if "input" in ex.broken else "good"
    src, ref = ex.folder / "src.txt", ex.folder / "ref.txt"
    lines = SENTENCES[:3]
    texts = {"good": (lines, lines), "misaligned": (lines, lines[:2]),
             "whitespace": ([" "], [" "])}
    if kind in texts:
        src.write_text("\n".join(texts[kind][0]) + "\n", encoding="utf-8")
        ref.write_text("\n".join(texts[kind][1]) + "\n", encoding="utf-8")
    elif kind == "not utf-8":
        src.write_bytes(b"a \xff\n")
        ref.write_bytes(b"b\n")
    elif kind == "random":
        src.write_bytes(d.draw(st.binary(max_size=60), label="src bytes"))
        ref.write_bytes(d.draw(st.binary(max_size=60), label="ref bytes"))
    return ["--src", ex.input(src), "--ref", ex.input(ref)]


def options(d: st.DataObject, ex: Example, good: list[list[str]], bad: list[list[str]]
            ) -> list[str]:
    return d.draw(st.sampled_from(bad if "options" in ex.broken else good), label="options")


def command(d: st.DataObject, ex: Example, world: World) -> None:
    """Fill ``ex`` with one generated command line."""
    name = d.draw(st.sampled_from(["train", "evaluate", "translate", "generate", "export",
                                   "diagnose", "sweep", "recipe show", "recipe validate",
                                   "list"]), label="command")
    ex.broken = d.draw(st.sets(st.sampled_from(ASPECTS), max_size=2), label="broken")
    if name == "train":
        run_dir = output(d, ex, "run")
        ex.args = ["train", recipe_file(d, ex), *overrides(d, ex, world), f"run.dir={run_dir}",
                   *options(d, ex, [[], ["--force"]],
                            [["--resume", "auto"], ["--resume", str(world.checkpoints["text"])],
                             ["--resume", str(world.checkpoints["good"])]])]
        cache(d, ex)
    elif name == "evaluate":
        ex.args = ["evaluate", checkpoint(d, ex, world)]
        if d.draw(st.booleans(), label="--src"):
            ex.args += sources_and_references(d, ex)
        elif "data" in ex.broken:
            how = d.draw(st.sampled_from(sorted(world.data)), label="data")
            ex.args += ["--split", "valid", "--data-dir", str(world.data[how])]
        else:
            ex.args += ["--split", "valid"]
        if d.draw(st.booleans(), label="--hyps") or "output" in ex.broken:
            hyps = output(d, ex, "hyps.txt")
            ex.args += ["--hyps", str(hyps)]
            if "--src" in ex.args:
                ex.hypotheses = (hyps, 3)
        ex.args += options(d, ex, [[], ["--beam", "2"], ["--json"], *GOOD_DEVICES],
                           [["--beam", "0"], ["--split", "nope"], ["--lenpen", "-1"],
                            *BAD_DEVICES])
    elif name == "translate":
        ex.args = ["translate", checkpoint(d, ex, world)]
        data = STDIN["sentences"]
        if "input" in ex.broken:
            stdin = d.draw(st.sampled_from(sorted(STDIN)) | st.binary(max_size=60), label="stdin")
            data = STDIN[stdin] if isinstance(stdin, str) else stdin
        if d.draw(st.booleans(), label="--input"):
            (ex.folder / "input.txt").write_bytes(data)
            ex.args += ["--input", ex.input(ex.folder / "input.txt")]
        else:
            ex.stdin = data
        ex.args += options(d, ex, [[], ["--beam", "3"], ["--batch-tokens", "8"], *GOOD_DEVICES],
                           [["--batch-tokens", "0"], ["--input", str(ex.folder)],
                            *BAD_DEVICES])
    elif name == "generate":  # the language model (good), or any other checkpoint (broken)
        ex.args = ["generate", checkpoint(d, ex, world, good=("lm",))]
        if "input" in ex.broken:
            stdin = d.draw(st.sampled_from(sorted(STDIN)) | st.binary(max_size=60), label="stdin")
            ex.stdin = STDIN[stdin] if isinstance(stdin, str) else stdin
        else:
            ex.stdin = STDIN["sentences"]
        ex.args += ["--max-new-tokens", "3"]
        ex.args += options(d, ex, [[], ["--seed", "1"], ["--batch-size", "2", "--seed", "0"],
                                   ["--temperature", "0"], ["--prompt", "the dog"],
                                   *GOOD_DEVICES],
                           [["--batch-size", "0"], ["--top-p", "0"], ["--top-k", "0"],
                            ["--prompt", "a", "--input", str(ex.folder)], *BAD_DEVICES])
    elif name == "export":
        ex.args = ["export", checkpoint(d, ex, world), "--out", str(output(d, ex, "export")),
                   *options(d, ex, [[], ["--average", "1"]],
                            [["--average", "2"], ["--average", "0"]])]
    elif name == "diagnose":
        target = (recipe_file(d, ex) if d.draw(st.booleans(), label="recipe?")
                  else checkpoint(d, ex, world))
        ex.args = ["diagnose", target, "--out", str(output(d, ex, "diagnostics"))]
        if target.endswith(".yaml"):
            ex.args += [*overrides(d, ex, world),
                        *options(d, ex, [[], ["--vary", "model.residual=pre,post"],
                                         ["--vary", "model.residual=pre,{name: admin, init: "
                                          "profiled}", "--vary", "model.norm=layernorm,rmsnorm"]],
                                 [["--vary", "nonsense"], ["--vary", "model.heads=3"],
                                  ["--vary", "model.norm=rmsnorm", "--vary", "model.norm=dyt"],
                                  ["--vary", "model.residual={name: admin, init: [1"]])]
        else:  # a checkpoint is measured as trained: --vary and overrides are refused
            ex.args += options(d, ex, [[]], [["--vary", "model.residual=pre,post"],
                                             ["model.norm=rmsnorm"]])
        cache(d, ex)
    elif name == "sweep":
        axis = options(d, ex, [["model.norm=layernorm"], ["model.residual=pre,post"]],
                       [["bogus"], ["model.d_model=abc"], ["="]])
        ex.args = ["sweep", recipe_file(d, ex), *overrides(d, ex, world), "--set", *axis,
                   "--steps", "1", "--out", str(output(d, ex, "sweep"))]
        cache(d, ex)
    elif name.startswith("recipe"):
        ex.args = [*name.split(), recipe_file(d, ex), *overrides(d, ex, world)]
    else:
        ex.args = ["list", *options(d, ex, [[], ["norms"], ["residuals"]],
                                    [["bogus"], ["norms", "extra"]])]
    if "command line" in ex.broken:  # a typo, an unknown option, an argument missing
        noise = d.draw(st.sampled_from(["--nope", "-x", "--beam", "--out"]) | _text(10),
                       label="noise")
        ex.args.insert(d.draw(st.integers(0, len(ex.args)), label="at"), noise)


# -- running a command ----------------------------------------------------------------------------


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str


def run_in_process(ex: Example) -> Outcome:
    """``normzoo ARGS`` through the console-script entry point, streams replaced; any exception
    other than SystemExit escaping it is what the user would see as a traceback."""
    streams = [io.TextIOWrapper(io.BytesIO(ex.stdin), encoding="utf-8"),
               io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="replace"),
               io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="replace")]
    saved = sys.argv, sys.stdin, sys.stdout, sys.stderr, Path.cwd()
    env = os.environ.get("NORMZOO_CACHE")
    sys.argv = ["normzoo", *ex.args]
    sys.stdin, sys.stdout, sys.stderr = streams
    os.chdir(ex.folder)  # default outputs (hyps.test.evaluate.txt, runs/, diagnostics/) land here
    if ex.cache is not None:
        os.environ["NORMZOO_CACHE"] = str(ex.cache)
    code: Any = 0
    try:
        with ex.hazard() if ex.hazard else contextlib.nullcontext():
            cli.main()
    except SystemExit as stop:
        code = stop.code
    except BaseException as error:
        import traceback

        code = f"traceback: {''.join(traceback.format_exception(error))}"
    finally:
        sys.argv, sys.stdin, sys.stdout, sys.stderr, cwd = saved
        os.chdir(cwd)
        if env is not None:
            os.environ["NORMZOO_CACHE"] = env
    said = []
    for stream in streams[1:]:
        stream.flush()
        said.append(stream.buffer.getvalue().decode("utf-8", "replace"))  # type: ignore
    assert not isinstance(code, str), f"{ex.args}: {code}\n{said[1]}"
    return Outcome(0 if code is None else code, *said)


def _png_whole(data: bytes) -> bool:
    return data.startswith(b"\x89PNG\r\n\x1a\n") and data.endswith(b"IEND\xaeB`\x82")


def _whole(path: Path) -> str | None:
    """Why ``path`` is not a whole file of its kind, or None."""
    data = path.read_bytes()
    try:
        if path.suffix == ".json":
            json.loads(data)
        elif path.suffix == ".yaml":
            yaml.safe_load(data)
        elif path.suffix == ".png" and not _png_whole(data):
            return "not a whole PNG"
        elif path.suffix == ".ckpt":
            torch.load(path, map_location="cpu", weights_only=True)
        elif path.suffix == ".safetensors":
            from safetensors.torch import load_file

            load_file(path)
        elif path.suffix in (".txt", ".md", ".csv") and data and not data.endswith(b"\n"):
            return "does not end with a line end"
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return None


def check(ex: Example, outcome: Outcome) -> None:
    """The property, on what the command printed and left behind."""
    said = outcome.stdout + outcome.stderr
    assert outcome.code in (0, 1, 2, 3), (ex.args, outcome.code, said[-2000:])
    assert "Traceback" not in said, (ex.args, said[-3000:])
    if outcome.code:
        assert "error" in outcome.stderr.lower(), (ex.args, outcome.code, said[-2000:])
    for path, digest in ex.inputs.items():
        assert _digest(path) == digest, f"{ex.args}: the input {path} was changed"
    # train --force deletes the old run, as it says; evaluate --force keeps it until it succeeds
    if outcome.code and not (ex.args[:1] == ["train"] and "--force" in ex.args):
        for path, digest in ex.in_the_way.items():
            assert path.is_file() and _digest(path) == digest, f"{ex.args}: {path} changed"
    for path in ex.folder.rglob("*"):
        name = path.name
        assert ".tmp" not in name and not (name.startswith(".") and name != ".lock"), (
            f"{ex.args} (exit {outcome.code}) left {path}")
        if path.is_file() and path not in ex.in_the_way and path not in ex.inputs:
            problem = _whole(path)
            assert problem is None, f"{ex.args} (exit {outcome.code}): {path} {problem}"
        if path.is_dir() and (path / "model.safetensors").exists():
            expected = sorted([*EXPORT_FILES, "README.md"])  # README.md: the model card
            assert sorted(p.name for p in path.iterdir()) == expected, path
            load_export(path)
    if ex.hypotheses is not None:
        hyps, lines = ex.hypotheses
        if outcome.code == 0:
            assert len(hyps.read_text(encoding="utf-8").splitlines()) == lines, ex.args
        elif hyps not in ex.in_the_way and not hyps.is_dir():  # a folder in the way stays
            assert not hyps.exists(), f"{ex.args}: exit {outcome.code} but {hyps} exists"


# -- the properties -------------------------------------------------------------------------------


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(d=st.data())
def test_any_command_line_ends_cleanly(world: World, d: st.DataObject):
    examples = world.root / "examples"
    examples.mkdir(exist_ok=True)
    ex = Example(Path(tempfile.mkdtemp(dir=examples)))
    try:
        command(d, ex, world)
        outcome = run_in_process(ex)
        event(f"{' '.join(ex.args[:2]) if ex.args[0] == 'recipe' else ex.args[0]}: exit "
              f"{outcome.code}")
        check(ex, outcome)
    finally:
        shutil.rmtree(ex.folder, ignore_errors=True)


def _subprocess_examples(world: World, root: Path) -> dict[str, tuple[Example, int, str]]:
    """A few command lines for real processes: the example, its exit code and message."""
    for name in ("stdin", "export/ro", "hyps/full", "empty"):
        (root / name).mkdir(parents=True)
    good = str(world.checkpoints["good"])
    found = {}
    ex = Example(root / "stdin", args=["translate", good], stdin=STDIN["not utf-8"])
    found["non-UTF-8 stdin"] = (ex, 2, "standard input is not UTF-8 text")
    ex = Example(root / "export", args=["export", good, "--out", str(root / "export/ro/x")])
    ex.wrapper = ["read-only", str(root / "export/ro")]
    found["export into a read-only folder"] = (ex, 1, "Permission denied")
    ex = Example(root / "hyps")
    (ex.folder / "src.txt").write_text("the dog .\n")
    hyps = ex.folder / "full" / "hyps.txt"
    hyps.write_text("earlier\n")
    ex.in_the_way[hyps] = _digest(hyps)
    ex.args = ["evaluate", good, "--src", ex.input(ex.folder / "src.txt"), "--ref",
               str(ex.folder / "src.txt"), "--hyps", str(hyps), "--force"]
    ex.wrapper = ["full", str(root / "hyps/full"), "3"]
    found["hypotheses onto a full disk"] = (ex, 1, "the disk is full")
    ex = Example(root / "empty")
    (ex.folder / "empty.yaml").write_text("")
    ex.args = ["train", ex.input(ex.folder / "empty.yaml"), f"run.dir={ex.folder / 'run'}"]
    found["empty recipe"] = (ex, 2, "is empty")
    return found


def test_the_same_at_the_real_command_line(world: World, tmp_path: Path):
    """A few of the cases as real processes (``python -m normzoo``, or through
    ``tests/hazards.py`` for a read-only folder or a full disk), run side by side."""
    examples = _subprocess_examples(world, tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "NORMZOO_CACHE": str(world.cache)}
    running = {}
    for label, (ex, _, _) in examples.items():
        prefix = ([sys.executable, str(HERE / "hazards.py"), *ex.wrapper] if ex.wrapper else
                  [sys.executable, "-m", "normzoo"])
        running[label] = subprocess.Popen(
            [*prefix, *ex.args], cwd=ex.folder, env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for label, process in running.items():
        ex, code, needle = examples[label]
        out, err = (s.decode("utf-8", "replace")
                    for s in process.communicate(ex.stdin, timeout=300))
        check(ex, Outcome(process.returncode, out, err))
        assert process.returncode == code, (label, err)
        assert err.count("error:") == 1 and needle in err, (label, err)
