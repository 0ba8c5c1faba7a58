"""The recipe's paths on this machine: stored resolved, and checked to be there.

A run's recipe travels in its ``recipe.yaml`` and inside every checkpoint; ``normzoo evaluate``,
``diagnose`` or a resume may read it from another folder. A relative ``data.dir`` would then
point somewhere else (or nowhere), and ``~`` means nothing to Python's file functions. So a
recipe loaded for training gets its paths resolved (:func:`resolve_paths`) before anything
stores it; ``--data-dir`` re-points a moved corpus later.

A tokenizer file (``data.tokenizer.path``) and the run directory (``run.dir``: a run's own
``recipe.yaml`` resumes it from anywhere) are resolved as ``data.dir`` is, relative to the
folder ``normzoo`` runs in (a recipe's ``base`` files, by contrast, are relative to the recipe
that names them: they are part of the recipe, not of the run's inputs).

A run without ``run.dir`` is given its default, ``runs/<recipe's stem>`` (:func:`with_run_dir`),
so that its stored recipe names its own folder.

Whether the files are there is checked by ``normzoo recipe validate`` and by every training run
(:func:`input_problems`; :func:`for_training` does all of the above for a run), not by every
load: checkpoints, exports and tests read recipes whose data is elsewhere, or not prepared yet.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from normzoo.errors import ConfigError, Problem
from normzoo.recipe.schema import Recipe


def local_path(text: str) -> str:
    """``text`` as an absolute path: ``~`` expanded, relative to the current folder, ``..``
    folded (symbolic links are kept: they may be the point, e.g. ``data/current``)."""
    return os.path.abspath(os.path.expanduser(text))


def _hub_folder(path: str) -> bool:
    """Whether a ``data.path`` names a local folder in the hub's layout, not a dataset on the
    hub (the datasets library takes an existing folder first, as this does)."""
    return path.startswith(("~", "/", "./", "../")) or Path(path).exists()


def resolve_paths(recipe: Recipe) -> Recipe:
    """``recipe`` with ``data.dir``, a local ``data.path``, a tokenizer file
    (``data.tokenizer.path``), ``init.from`` and ``run.dir`` resolved (:func:`local_path`);
    the same recipe when there is nothing to resolve."""
    data, changes = recipe.data, {}
    if data.dir:
        changes["dir"] = local_path(data.dir)
    if data.source == "hub" and data.path and _hub_folder(data.path):
        changes["path"] = local_path(data.path)
    tokenizer = data.tokenizer
    if tokenizer.type == "file" and tokenizer.path and local_path(tokenizer.path) != \
            tokenizer.path:
        changes["tokenizer"] = tokenizer.model_copy(update={"path": local_path(tokenizer.path)})
    update = {}
    if changes and any(getattr(data, key) != value for key, value in changes.items()):
        update["data"] = data.model_copy(update=changes)
    init = recipe.init.checkpoint
    if init and local_path(init) != init:
        update["init"] = recipe.init.model_copy(update={"from": local_path(init)})
    if recipe.run.dir and local_path(recipe.run.dir) != recipe.run.dir:
        update["run"] = recipe.run.model_copy(update={"dir": local_path(recipe.run.dir)})
    return recipe.model_copy(update=update) if update else recipe


def run_directory(recipe: Recipe, recipe_path: str | Path) -> Path:
    """``run.dir`` (``~`` expanded), or ``runs/<recipe's stem>``. A run stores ``run.dir``
    absolute (:func:`resolve_paths`, as it stores ``data.dir``), so that its
    ``recipe.yaml`` names its own folder from anywhere; inside the folder ``normzoo`` runs in,
    it is shown relative to it again, as it was most likely typed and as the resume hint
    repeats it."""
    if not recipe.run.dir:
        return Path("runs") / Path(recipe_path).stem
    path = Path(recipe.run.dir).expanduser()
    if recipe.run.dir.startswith(os.sep):  # absolute as written, not by ~
        with contextlib.suppress(OSError, ValueError):  # no current folder; outside it
            return path.relative_to(Path.cwd())
    return path


def with_run_dir(recipe: Recipe, recipe_path: str | Path) -> Recipe:
    """``recipe`` with ``run.dir`` set where unset (to the default, ``runs/<recipe's stem>``):
    the run's ``recipe.yaml`` then names its folder, as ``--resume auto`` with that file as
    the recipe needs (its stem is no longer the original recipe's)."""
    if recipe.run.dir:
        return recipe
    run = recipe.run.model_copy(update={"dir": str(run_directory(recipe, recipe_path))})
    return recipe.model_copy(update={"run": run})


def split_files(recipe: Recipe) -> dict[str, list[Path]]:
    """The files each split of a ``data.source: files`` corpus reads, by role."""
    from normzoo.contract import task_of

    task, data = task_of(recipe), recipe.data
    data = data.model_copy(update={"dir": os.path.expanduser(data.dir or "")})
    splits = {"train": data.train_split, "valid": data.valid_split, "test": data.test_split}
    return {role: task.split_files(data, split) for role, split in splits.items()}


def _tokenizer_problems(recipe: Recipe, resuming: bool) -> list[Problem]:
    """A tokenizer file (``data.tokenizer.type: file``) that is not there, not a tokenizer,
    or without normzoo's special tokens; read now, so that ``recipe validate`` and ``train``
    say so before any data is read. Not read when the run takes its tokenizer from a
    checkpoint: its own (``resuming``) or that of ``init.from``."""
    tokenizer = recipe.data.tokenizer
    if tokenizer.type != "file" or not tokenizer.path or resuming or recipe.init.checkpoint:
        return []
    from normzoo.data.tokenizer import Tokenizer
    from normzoo.errors import NormzooError

    try:
        Tokenizer.load(os.path.expanduser(tokenizer.path))
    except NormzooError as error:
        return [Problem("data.tokenizer.path", str(error))]
    return []


def input_problems(recipe: Recipe, resuming: bool = False) -> list[Problem]:
    """What a run of ``recipe`` would read and is not there: the folder and split files of a
    ``files`` corpus, a local hub folder, a tokenizer file, the weights of ``init.from``
    (neither of the last two when ``resuming``: a resumed run has its weights and tokenizer
    from its own checkpoint)."""
    problems = []
    data = recipe.data
    if data.source == "files" and data.dir:
        folder = Path(os.path.expanduser(data.dir))
        if not folder.is_dir():
            state = "is not a folder" if folder.exists() else "does not exist"
            problems.append(Problem("data.dir", f"data file not found: the folder {folder} "
                                    f"{state}"))
        else:
            for role, paths in split_files(recipe).items():
                for path in paths:
                    blank = _blank(path) if path.is_file() else None
                    bad = _first_bad_byte(path) if path.is_file() and blank is None else None
                    state = ("not found: " if not path.is_file() else
                             "is empty: " if blank is not None else
                             f"{NOT_UTF8}: " if bad is not None else None)
                    if state:
                        problems.append(Problem("data.dir", f"data file {state}{path}{blank or ''}"
                                                f" (the {role} split, data.{role}_split)"
                                                + (_not_utf8_detail(path, *bad) if bad else "")))
    if data.source == "hub" and data.path and data.path.startswith(("~", "/", "./", "../")):
        folder = Path(os.path.expanduser(data.path))
        if not folder.is_dir():
            problems.append(Problem("data.path", f"the local dataset folder {folder} does not "
                                    "exist"))
    init = recipe.init.checkpoint
    problems += _tokenizer_problems(recipe, resuming)
    if init and not resuming:
        path = Path(os.path.expanduser(init))
        if not path.exists():
            problems.append(Problem("init.from", f"no checkpoint or export folder at {path}"))
        elif path.is_file() and _checkpoint_step(path) is None:
            problems.append(Problem("init.from", f"{path} is not a readable checkpoint "
                                    "(truncated, damaged, or not a checkpoint at all)"))
        elif path.is_dir() and not (path / "model.safetensors").is_file():
            problems.append(Problem("init.from", f"{path} is a folder but not a normzoo export "
                                    "(no model.safetensors); give a .ckpt file or the folder "
                                    "`normzoo export` wrote"))
    return problems


def _blank(path: Path, read_below: int = 1 << 16) -> str | None:
    """None where the file has a line to read; else what it holds in words (an empty file:
    ""; one of whitespace alone, read only when small: " (only whitespace)"), as reading the
    data would refuse it later (:func:`normzoo.data.sources.read_lines`)."""
    try:
        size = path.stat().st_size
        if size == 0:
            return ""
        if size < read_below and not path.read_bytes().strip():
            return " (only whitespace)"
    except OSError:
        pass
    return None


def _checkpoint_step(path: Path) -> int | None:
    from normzoo.checkpoints.rolling import checkpoint_step

    return checkpoint_step(path)


NOT_UTF8 = "is not UTF-8 text"


def _first_bad_byte(path: Path, length: int = 1 << 16) -> tuple[int, str] | None:
    """The offset of the first byte in the file's first ``length`` that is not UTF-8, and why
    (a character cut at the end of the read allowed); None where they are all UTF-8, as
    reading the data requires: validate said ok to a file train then refused."""
    try:
        with open(path, "rb") as f:
            head = f.read(length)
    except OSError:
        return None  # not ours to judge here: reading it will say what is wrong
    cuts = range(4) if len(head) == length else range(1)  # cut only where the read cut
    first = None
    for cut in cuts:
        try:
            head[: len(head) - cut].decode("utf-8")
            return None
        except UnicodeDecodeError as error:
            if error.start < len(head) - 4:
                return error.start, error.reason
            first = first or (error.start, error.reason)
    return first


def _not_utf8_detail(path: Path, offset: int, reason: str) -> str:
    """Where ``path`` stops being UTF-8, and how to convert it: a Latin-1 or Windows file
    (``café`` as one byte ``\\xe9``) is the usual one."""
    return (f": {reason} at byte {offset}; save it as UTF-8, e.g. "
            f"iconv -f latin1 -t utf-8 {path.name} > {path.stem}.utf8{path.suffix}")


# Each data key and the one source that reads it.
_READ_BY = {"dir": "files", "path": "hub"}


def unread_data_keys(recipe: Recipe) -> list[str]:
    """A line for each of ``data.dir`` and ``data.path`` set where ``data.source`` does not read
    it. Not refused: a sweep over ``data.source`` keeps the other source's keys. But a recipe
    that names a folder and forgets ``source: files`` would train on the toy corpus, so a run
    says so (``normzoo train`` on stderr)."""
    data = recipe.data
    read = {"builtin": "normzoo's built-in toy corpus", "files": f"the files in {data.dir}",
            "hub": f"the dataset {data.path}"}[data.source]
    return [f"data.{key}={value} is not read: data.source is {data.source}, so the run reads "
            f"{read}; set data.source={source} to read {value}"
            for key, source in _READ_BY.items()
            if (value := getattr(data, key)) and data.source != source]


def check_inputs(recipe: Recipe, resuming: bool = False) -> Recipe:
    """``recipe`` if every input it names is there; else :class:`ConfigError` with each one
    that is not (exit 2)."""
    problems = input_problems(recipe, resuming)
    if problems:
        # A file that is there but cannot be used (a damaged or foreign tokenizer) is not "not
        # found": the title says which the reader is looking at.
        not_utf8 = [p for p in problems if f"data file {NOT_UTF8}" in p.message]
        unusable = any((p.path == "data.tokenizer.path" and "not found" not in p.message)
                       or "data file is empty" in p.message for p in problems)
        title = ("data files not UTF-8 text" if len(not_utf8) == len(problems) else
                 "inputs missing, unusable or not UTF-8 text" if not_utf8 else
                 "inputs missing or unusable" if unusable else "inputs not found")
        raise ConfigError(problems, title)
    return recipe


def for_training(recipe: Recipe, recipe_path: str | Path, *, resuming: bool = False) -> Recipe:
    """``recipe`` as a training run stores it: ``run.dir`` named (:func:`with_run_dir`) and
    every path resolved (:func:`resolve_paths`), once every input it reads is found to be
    there (:func:`check_inputs`, now: the data is read minutes later, after the tokenizer;
    its messages name each path as the recipe wrote it)."""
    return resolve_paths(check_inputs(with_run_dir(recipe, recipe_path), resuming))
