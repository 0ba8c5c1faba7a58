"""``normzoo evaluate`` and ``Loaded.evaluate``: what to score asked once, for both
(:func:`evaluate`: the checks, ``--data-dir``, the :class:`~normzoo.contract.task.EvaluateRequest`
a task's :meth:`~normzoo.contract.task.Task.evaluate` receives); and its default, a checkpoint
scored by its task's own test step, on a split of its recipe's data or on a file in the split's
format, so that it prints what the run's final test recorded (the same dataset, the same step,
float32) and no task keeps a second copy of its scoring.

The split is read and encoded as ``prepare`` would (:meth:`Task.read`, :meth:`Task.encode`,
:meth:`Task.kept_texts`) into memory, made into the task's dataset, and scored by
``trainer.test`` on one device."""

from __future__ import annotations

import contextlib
import copy
import io
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from torch.utils.data import DataLoader

from normzoo.contract import module_class, task_of, working_tasks
from normzoo.contract.task import EvaluateRequest, Scores, Task
from normzoo.data.batching import token_budget_batches
from normzoo.data.examples import TokenTable
from normzoo.data.split import Split
from normzoo.inference.arguments import ArgumentValueError


class InMemory:
    """One encoded split, as a prepared cache's ``table(role, name)`` and ``lines(role, name)``
    give it to :meth:`Task.dataset`. Beyond the cache, it says what it holds: ``where``, the
    file read or ``split 'NAME'``; ``checkpoint``, the trained model it is scored for (None
    outside ``evaluate``), so that a dataset's refusal advises what a user of a checkpoint can
    do, not a setting of training."""

    def __init__(self, role: str, tables: dict[str, list[list[int]]],
                 texts: dict[str, list[str]], where: str = "",
                 checkpoint: str | None = None) -> None:
        self.role, self.where, self.checkpoint = role, where, checkpoint
        self._tables = {name: TokenTable.from_rows(rows) for name, rows in tables.items()}
        self._texts = texts

    def table(self, role: str, name: str) -> TokenTable:
        return self._tables[name]

    def lines(self, role: str, name: str) -> list[str]:
        return self._texts[name]


def encoded(task: Task, split: Split, tokenizer: Any, role: str = "test",
            checkpoint: str | None = None) -> InMemory:
    """``split`` read and encoded by ``task`` as ``prepare`` encodes a role of the cache (for
    ``checkpoint``, where it scores one)."""
    names = task.tables or task.token_parts
    tables: dict[str, list[list[int]]] = {name: [] for name in names}
    kept = task.kept_texts(role)
    texts: dict[str, list[str]] = {file: [] for file in kept}
    for parts in task.read(split):
        for name, rows in zip(names, task.encode(parts, tokenizer), strict=True):
            tables[name].extend(rows)
        for file, part in kept.items():
            texts[file].extend(parts[task.parts.index(part)])
    return InMemory(role, tables, texts, split.where, checkpoint)


def by_test_step(task: Task, loaded: Any, split: str, src: Path | None, batch_tokens: int,
                 checkpoint: str, digits: Mapping[str, int] | None = None,
                 label: str | None = None) -> Scores:
    """The scores of ``loaded`` by its module's test step on ``split`` (or the file ``src``,
    in the split's format): ``test/*`` without the prefix, rounded to 4 places; the number of
    examples (by the task's :attr:`~Task.unit`) and, where the loss averages over tokens
    rather than examples, their number. ``label`` names what was scored (default: ``src`` or
    ``split``)."""
    import lightning as L

    recipe, tokenizer = loaded.recipe, loaded.tokenizer
    read = (Split(recipe, split, None, (src,)) if src is not None
            else Split.of(task, recipe, split))
    dataset = task.dataset(encoded(task, read, tokenizer, checkpoint=checkpoint), "test", recipe,
                           tokenizer)
    module = module_class(task)(recipe, tokenizer.vocab_size, tokenizer.to_str())
    module.model = loaded.model
    module.float32_scores = True
    batches = token_budget_batches(dataset.lengths(), batch_tokens, shuffle=False)
    units = sum(int(dataset.collate(items)["ntokens"]) for items in batches)
    loader = DataLoader(dataset, batch_sampler=batches, collate_fn=dataset.collate)
    device = next(loaded.model.parameters()).device
    trainer = L.Trainer(accelerator="gpu" if device.type == "cuda" else "cpu", devices=1,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    with contextlib.redirect_stdout(io.StringIO()):  # Lightning's table of what it logged
        scores = trainer.test(module, dataloaders=loader, verbose=False)[0]
    loaded.model.to(device)  # Lightning's teardown leaves it on the CPU
    report: dict[str, Any] = {"checkpoint": checkpoint, "split": label or str(src or split),
                              "task": recipe.task, task.unit: len(dataset)}
    if units != len(dataset):
        report["tokens"] = units
    places = digits or {}
    for key, value in scores.items():
        name = key.removeprefix("test/")
        report[name] = round(float(value), places.get(name, 4))
    return report, ["  ".join(f"{key}={value}" for key, value in report.items())]



def cli_flag(key: str) -> str:
    """An evaluate option as the command line spells it: ``data_dir`` is ``--data-dir``."""
    return "--" + key.replace("_", "-")


def check_what_to_score(split: str | None, src: Any, ref: Any,
                        flag: Callable[[str], str] = cli_flag) -> None:
    """Refuse a split given beside files: either says what to score (sacreBLEU's command line
    refuses a test set given with reference files, rather than pick one)."""
    if split is not None and (src is not None or ref is not None):
        given = " and ".join(flag(o) for o, v in (("src", src), ("ref", ref)) if v is not None)
        raise ArgumentValueError(f"{flag('split')} {split} and {given} both say what to score: "
                                 f"drop {flag('split')} to score the files, or {given} to score "
                                 f"split {split}")


def check_hyps(hyps: Path | None, force: bool, flag: Callable[[str], str] = cli_flag) -> None:
    """Refuse a hypotheses file that exists (unless ``force``) or cannot be written."""
    from normzoo.io.atomic import check_output_file

    if hyps is not None:
        check_output_file(hyps, flag("hyps"))
        if hyps.exists() and not force:
            raise ArgumentValueError(f"{flag('hyps')} {hyps} exists; give another file, or "
                                     f"{flag('force')} to overwrite it")


def evaluate(loaded: Any, checkpoint: str, *, split: str | None = None, batch_tokens: int = 4096,
             data_dir: Path | None = None, options: Mapping[str, Any] | None = None,
             flag: Callable[[str], str] = cli_flag) -> Scores:
    """``loaded`` (from ``checkpoint``) scored by its task's :meth:`~Task.evaluate` on
    ``split`` (None: ``data.test_split``) or the files in ``options`` (``src``, ``ref``), as
    ``normzoo evaluate`` and ``Loaded.evaluate`` both ask: ``options`` are the task's evaluate
    options given (None and False: not given), any the task does not read refused naming the
    tasks that do (``flag`` spells an option in the caller's words). ``data_dir`` reads the
    split from files there in place of the recipe's data: each file must be there, and the
    report names them (``test (DIR/test.tsv)``). ``loaded`` itself is left as it was."""
    given = {key: value for key, value in (options or {}).items()
             if value is not None and value is not False}
    src = given.get("src")
    check_what_to_score(split, src, given.get("ref"), flag)
    check_hyps(given.get("hyps"), bool(given.get("force")), flag)
    recipe = loaded.recipe
    task = task_of(recipe)
    refused = [key for key in given if key not in task.evaluate_options]
    if refused:  # they would be ignored without a word, and the reader believe them used
        verb = "applies" if len(refused) == 1 else "apply"
        users = [other.name for other in working_tasks()
                 if set(refused) <= other.evaluate_options] or ["other tasks"]
        raise ArgumentValueError(f"{', '.join(map(flag, refused))} {verb} to "
                                 f"{' and '.join(users)} only; {checkpoint} is {task.kind} "
                                 f"(task {recipe.task})")
    name = split or recipe.data.test_split
    label = name
    if data_dir is not None:
        loaded, label = _repointed(loaded, task, name, src is None, data_dir, checkpoint, flag)
    request = EvaluateRequest(
        checkpoint, name, src, batch_tokens, given,
        by_test_step=lambda **how: by_test_step(task, loaded, name, src, batch_tokens,
                                                checkpoint, label=label, **how))
    report, lines = task.evaluate(loaded, request)
    if label != name:  # what was scored, named whatever the task's own report calls it
        if report.get("split") == name:
            report["split"] = label
        if not any(label in line for line in lines):
            lines = [*lines, f"split: {label}"]
    return report, lines


def _repointed(loaded: Any, task: Task, name: str, read: bool, data_dir: Path, checkpoint: str,
               flag: Callable[[str], str]) -> tuple[Any, str]:
    """A copy of ``loaded`` whose recipe reads its data from files in ``data_dir``, and what
    split ``name`` is then called: ``test (DIR/test.tsv)``, the files it reads (which must be
    there where it is ``read``, not a ``src`` file)."""
    from normzoo.data.sources import DataError

    trained_on = loaded.recipe.data.source
    data = loaded.recipe.data.model_copy(update={"dir": str(data_dir), "source": "files"})
    loaded = copy.copy(loaded)  # the caller's keeps its recipe
    loaded.recipe = loaded.recipe.model_copy(update={"data": data})
    if not read:
        return loaded, name
    files = [str(file) for file in task.split_files(data, name)]
    missing = [file for file in files if not Path(file).is_file()]
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        where = (f"{' and '.join(files)}, which {verb}" if missing == files else
                 f"{' and '.join(files)}, of which {' and '.join(missing)} {verb}")
        note = ("" if trained_on == "files" else f" ({checkpoint} was trained on data.source "
                f"{trained_on}; {flag('data_dir')} reads files in its place)")
        raise DataError(f"{flag('data_dir')} {data_dir}: split '{name}' reads {where} not "
                        f"there{note}")
    return loaded, f"{name} ({', '.join(files)})"
