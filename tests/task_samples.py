"""A tiny model's recipe and a real training batch for any registered task, built from what the
task declares (its model family, its data) rather than from its name: so a test parametrised
over ``registered.BUILTIN_TASKS`` runs every task, a new one included, without a table of
per-task batches to extend.

The batch is the task's own: its dataset on the built-in corpus (``data.source: builtin``,
which every task reads), collated as training collates it, from short examples of different
lengths (so it is padded). Settings only the data can give (a classifier's label set,
``Task.resolves_from_data``) are resolved as a run resolves them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tiny import tiny

from normzoo.contract import task_of
from normzoo.data.prepare import recipe_tokenizer
from normzoo.recipe import Recipe, from_dict
from normzoo.tasks.datamodule import TextDataModule


def model_of_family(task: str, models: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``models[family]`` for the family of model ``task`` trains (``encoder``, ``decoder``,
    ``encoder_decoder``): a test's small model, chosen by what the task trains."""
    return models[task_of(task).family]


def sample(task: str, cache: Path, *, model: dict[str, Any] | None = None, rows: int = 3,
           seed: int = 0, **sections: Any) -> tuple[Recipe, dict[str, Any], int]:
    """``(recipe, batch, vocabulary size)``: the tiny recipe (``tests/tiny.py``) of ``task``
    with ``model`` changes, on the built-in corpus, resolved from its data; and a training
    batch of ``rows`` of its shortest examples, each of another length where the data has
    that many (so it is padded; a causal LM's blocks are all one length but the last).

    ``cache`` is the ``NORMZOO_CACHE`` the tokenizer and the prepared data are written to;
    ``sections`` update the recipe's other sections (``trainer={"compile": True}``)."""
    data = {"source": "builtin", **sections.pop("data", {})}
    recipe = from_dict(tiny(task=task, model=model or {}, data=data, **sections))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NORMZOO_CACHE", str(cache))
        tokenizer = recipe_tokenizer(recipe)
        datamodule = TextDataModule(recipe, tokenizer)
        datamodule.setup("fit")
        recipe = task_of(recipe).resolved(recipe, datamodule)
        examples = datamodule.dataset("train")
        lengths = np.asarray(examples.lengths())
        order = np.argsort(lengths, kind="stable").tolist()
        items, seen = [], set()
        for i in order:  # the shortest, each of its own length
            if lengths[i] not in seen and len(items) < rows:
                items.append(i)
                seen.add(lengths[i])
        items += [i for i in order if i not in items][:rows - len(items)]  # (blocks: alike)
        torch.manual_seed(seed)  # whatever the collation draws (MLM's masks)
        batch = examples.collate(items)
    return recipe, batch, tokenizer.vocab_size
