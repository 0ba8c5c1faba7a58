"""``normzoo evaluate``'s default: a checkpoint scored by its task's own test step, on a split of
its recipe's data or on a file in the split's format, so that it prints what the run's final
test recorded (the same dataset, the same step, float32) and no task keeps a second copy of its
scoring.

The split is read and encoded as ``prepare`` would (:meth:`Task.read`, :meth:`Task.encode`,
:meth:`Task.kept_texts`) into memory, made into the task's dataset, and scored by
``trainer.test`` on one device."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch.utils.data import DataLoader

from normzoo.contract import module_class
from normzoo.contract.task import Scores, Task
from normzoo.data.batching import token_budget_batches
from normzoo.data.examples import TokenTable
from normzoo.data.split import Split


class InMemory:
    """One encoded split, as a prepared cache's ``table(role, name)`` and ``lines(role, name)``
    give it to :meth:`Task.dataset`."""

    def __init__(self, role: str, tables: dict[str, list[list[int]]],
                 texts: dict[str, list[str]]) -> None:
        self.role = role
        self._tables = {name: TokenTable.from_rows(rows) for name, rows in tables.items()}
        self._texts = texts

    def table(self, role: str, name: str) -> TokenTable:
        return self._tables[name]

    def lines(self, role: str, name: str) -> list[str]:
        return self._texts[name]


def encoded(task: Task, split: Split, tokenizer: Any, role: str = "test") -> InMemory:
    """``split`` read and encoded by ``task`` as ``prepare`` encodes a role of the cache."""
    names = task.tables or task.token_parts
    tables: dict[str, list[list[int]]] = {name: [] for name in names}
    kept = task.kept_texts(role)
    texts: dict[str, list[str]] = {file: [] for file in kept}
    for parts in task.read(split):
        for name, rows in zip(names, task.encode(parts, tokenizer), strict=True):
            tables[name].extend(rows)
        for file, part in kept.items():
            texts[file].extend(parts[task.parts.index(part)])
    return InMemory(role, tables, texts)


def by_test_step(task: Task, loaded: Any, split: str, src: Path | None, batch_tokens: int,
                 checkpoint: str, digits: Mapping[str, int] | None = None) -> Scores:
    """The scores of ``loaded`` by its module's test step on ``split`` (or the file ``src``,
    in the split's format): ``test/*`` without the prefix, rounded to 4 places; the number of
    examples (by the task's :attr:`~Task.unit`) and, where the loss averages over tokens
    rather than examples, their number."""
    import lightning as L

    recipe, tokenizer = loaded.recipe, loaded.tokenizer
    read = (Split(recipe, split, None, (src,)) if src is not None
            else Split.of(task, recipe, split))
    dataset = task.dataset(encoded(task, read, tokenizer), "test", recipe, tokenizer)
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
    report: dict[str, Any] = {"checkpoint": checkpoint, "split": str(src or split),
                              "task": recipe.task, task.unit: len(dataset)}
    if units != len(dataset):
        report["tokens"] = units
    places = digits or {}
    for key, value in scores.items():
        name = key.removeprefix("test/")
        report[name] = round(float(value), places.get(name, 4))
    return report, ["  ".join(f"{key}={value}" for key, value in report.items())]

