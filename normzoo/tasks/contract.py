"""The task contract: what one kind of job (translation, a language model, a classifier) tells
the rest of normzoo, so that nothing outside its own package needs to know which task it is.

A task is registered, like a residual scheme or a norm, under a name in the ``normzoo.tasks``
entry-point group; the entry point names a :class:`Task` subclass. ``recipe.task`` picks it and
``recipe.task_options`` are its options (:meth:`Task.option_problems` checks them). The object
is built without arguments and holds no state: the recipe is passed to each call.

The class and the module that defines it must import neither torch nor Lightning at import
time: ``normzoo list tasks`` and recipe validation read them. The heavy parts (the
LightningModule, the final test, the evaluation) live in modules the methods import.

One job, in the order a run calls the contract:

1. **Recipe** -- :attr:`family` (the model it trains), :attr:`streams`, :meth:`option_problems`.
2. **Data** -- :meth:`split_files` and :meth:`read` (a split as chunks of parallel columns:
   the task's *parts*), :attr:`token_parts` (which parts the tokenizer learns from and the
   cache stores as token tables), :meth:`encode`, :meth:`kept_texts` (raw text the cache keeps
   beside the tokens), :meth:`dropped`, :meth:`dataset` (a prepared split's examples) and
   :meth:`streaming_loader` for corpora read while training.
3. **Model** -- :meth:`resolved` (settings only the data can give, such as a label set),
   :meth:`module` (the LightningModule class: its batches, loss, validation metric),
   :meth:`build_model` (what a checkpoint holds and ``init.from`` loads into) and
   :meth:`connect` (what the module needs from the data).
4. **Ending** -- :meth:`monitored` (the metric that picks the best checkpoint),
   :meth:`final_test` (the scores ``summary.json`` records) and :meth:`report`.
5. **Afterwards** -- :meth:`evaluate` (``normzoo evaluate``), :attr:`evaluate_options`,
   :meth:`card` (the export's model card), :attr:`compared_score` and
   :meth:`example_outputs` (how runs are compared).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from normzoo.data.tokenizer import Tokenizer
    from normzoo.errors import Problem
    from normzoo.recipe import Recipe
    from normzoo.recipe.data import DataConfig
    from normzoo.verdicts.outputs import ExampleOutputs

# A chunk of a split as read: one list per part, line-aligned (translation: sources, targets).
Parts = tuple[list[str], ...]


@dataclass(frozen=True)
class Card:
    """What a task adds to an exported model's card: its Hugging Face pipeline tag, a phrase
    after the data's description (a language pair), how to use the export from normzoo (and
    the command line) and from ``transformers`` (lines of code; none where it does not map)."""

    tag: str
    data_note: str = ""
    python: str = "model.model  # the torch module"
    command: str | None = None
    transformers: tuple[str, ...] = ()


@dataclass(frozen=True)
class EvaluateRequest:
    """What ``normzoo evaluate`` was asked: the split's name or the given files, the decoding
    options (translation), where hypotheses go, and the batch budget."""

    checkpoint: str
    split: str
    src: Path | None
    ref: Path | None
    beam: int | None
    lenpen: float | None
    batch_tokens: int
    bf16: bool
    hyps: Path | None


class Task:
    """One kind of job a recipe trains. Subclasses set the class attributes and implement the
    methods that raise ``NotImplementedError``; the others have the defaults most tasks want."""

    name: ClassVar[str]
    #: The model family it trains: ``encoder``, ``decoder`` or ``encoder_decoder``.
    family: ClassVar[str]
    #: What the task's models are, for messages ("a language model").
    kind: ClassVar[str]
    #: The LightningModule, as ``module:Class`` (imported by :meth:`module`).
    module_path: ClassVar[str]
    #: The columns of one example as read (:meth:`read`), in order.
    parts: ClassVar[tuple[str, ...]] = ("text",)
    #: The parts the tokenizer learns from, prepared as token tables of the same names.
    token_parts: ClassVar[tuple[str, ...]] = ("text",)
    #: What one example is called in the prepared data's description.
    unit: ClassVar[str] = "lines"
    #: Whether ``data.streaming`` can feed it (:meth:`streaming_loader`).
    streams: ClassVar[bool] = False
    #: The validation metric that picks the best checkpoint, and ``max`` or ``min``.
    monitor: ClassVar[tuple[str, str]] = ("val/loss", "min")
    #: The ``normzoo evaluate`` options it reads besides the split (others are refused).
    evaluate_options: ClassVar[frozenset[str]] = frozenset()
    #: The ``summary.json`` test score ``normzoo compare`` and ``normzoo study`` judge runs on,
    #: ``min`` or ``max`` for which is better, and its unit (the loss in nats per token by
    #: default); :meth:`example_outputs` resamples its test set.
    compared_score: ClassVar[tuple[str, str, str]] = ("loss", "min", "nats/token")
    #: Why ``normzoo export --format hf`` cannot map this task's models (None: the model
    #: family's mapping applies).
    hf_unmapped: ClassVar[str | None] = None
    #: The options ``task_options`` may set, with their defaults.
    options: ClassVar[dict[str, Any]] = {}

    # -- the recipe --------------------------------------------------------------------------
    def option_problems(self, options: dict[str, Any]) -> list[Problem]:
        """Problems with ``task_options`` (checked once, when the recipe is validated)."""
        from normzoo.errors import Problem

        unknown = sorted(set(options) - set(self.options))
        known = ", ".join(sorted(self.options)) or "none"
        return [Problem(f"task_options.{key}", f"task '{self.name}' has no option '{key}' "
                        f"(it takes: {known})") for key in unknown]

    def option(self, recipe: Recipe, key: str) -> Any:
        """``task_options[key]`` of ``recipe``, or its default."""
        return recipe.task_options.get(key, self.options[key])

    def monitored(self, recipe: Recipe) -> tuple[str, str]:
        """The validation metric that picks the best checkpoint, and whether higher is better."""
        return self.monitor

    def decodes_in_validation(self, recipe: dict[str, Any]) -> bool:
        """Whether validation decodes with the ``eval`` settings (so a resume may not change
        them); ``recipe`` is a checkpoint's saved recipe, as plain data."""
        return False

    # -- the data ----------------------------------------------------------------------------
    def split_files(self, data: DataConfig, split: str) -> list[Path]:
        """The files a ``data.source: files`` split reads (the first one is counted)."""
        from normzoo.data.sources import text_file

        return [text_file(Path(data.dir or ""), split)]

    def read(self, recipe: Recipe, split: str, limit: int | None) -> Iterator[Parts]:
        """``split``'s examples (at most ``limit``) in chunks of line-aligned parts, so that a
        corpus larger than memory is read in one bounded pass."""
        from normzoo.data import chunks

        for lines in chunks.text_chunks(recipe.data, split, limit):
            yield (lines,)

    def builtin_files(self) -> list[Path]:
        """The source files that make ``data.source: builtin``'s corpus: a change to any of
        them prepares the data anew (they are its content)."""
        from normzoo.data import builtin

        return sorted(Path(builtin.__file__).parent.glob("*.py"))

    def encode(self, parts: Parts, tokenizer: Tokenizer) -> list[list[list[int]]]:
        """The token rows of each of :attr:`token_parts` for one chunk."""
        return [tokenizer.encode_batch(parts[self.parts.index(name)])
                for name in self.token_parts]

    def data_options(self, recipe: Recipe) -> dict[str, Any]:
        """The task options that change what the prepared data holds: part of its cache key
        (the others, a classifier's pooling, leave the data as it is)."""
        return {}

    def kept_texts(self, role: str) -> dict[str, str]:
        """Raw text the prepared cache keeps for ``role`` beside its tokens, as ``{file name:
        part}`` (translation keeps the sources and references its final test scores)."""
        return {}

    def dropped(self, lengths: Sequence[Any], max_len: int, role: str) -> dict[str, int] | None:
        """What the task's dataset will leave out of one chunk (``lengths``: token lengths per
        table), counted as ``{reason: n}`` for the prepared data's description."""
        return None

    def dataset(self, prepared: Any, role: str, recipe: Recipe, tokenizer: Tokenizer) -> Any:
        """The examples of a prepared split (``collate``, ``lengths``, ``sides``)."""
        raise NotImplementedError

    def streaming_loader(self, datamodule: Any) -> Any:
        """The training loader of a streamed corpus (only where :attr:`streams`)."""
        raise NotImplementedError(f"task '{self.name}' does not stream")

    # -- the model ---------------------------------------------------------------------------
    #: Whether :meth:`resolved` fills in settings from the data (so ``init.from`` can be fitted
    #: to the model only once the data is read; otherwise before it, failing fast).
    resolves_from_data: ClassVar[bool] = False

    def resolved(self, recipe: Recipe, datamodule: Any) -> Recipe:
        """``recipe`` with what only the prepared data can say filled in (recorded in the run's
        recipe, so a checkpoint rebuilds the same model)."""
        return recipe

    def module(self) -> type:
        """The LightningModule class that trains this task."""
        module, _, cls = self.module_path.partition(":")
        return getattr(importlib.import_module(module), cls)

    def build_model(self, recipe: Recipe, vocab_size: int) -> Any:
        """The model a checkpoint of this task holds (what ``normzoo.load`` rebuilds)."""
        from normzoo.models import assemble

        return assemble(recipe.model, vocab_size=vocab_size)

    # -- the ending --------------------------------------------------------------------------
    def connect(self, module: Any, datamodule: Any) -> None:
        """Hand the freshly built LightningModule what it needs from the prepared data before
        training (translation: the validation references its BLEU is scored against)."""

    def final_test(self, recipe: Recipe, module: Any, datamodule: Any, trainer: Any,
                   training_ended: Callable[[], None]
                   ) -> tuple[dict[str, float], dict[str, Any]] | None:
        """The best checkpoint's validation metrics and test scores, as ``summary.json``
        records them; None on processes other than rank 0. Called on every process. The task
        calls ``training_ended()`` where the time after it no longer counts as training
        (``train_wall_s``): after a test every process takes part in, before one rank 0 runs
        alone. By default the module's own validation and test steps score the best
        checkpoint, every process taking part (:func:`~normzoo.tasks.testing.test_in_loops`),
        and that time counts as training's."""
        from normzoo.tasks.testing import test_in_loops

        scores = test_in_loops(recipe, module, datamodule, trainer)
        training_ended()
        return scores if trainer.is_global_zero else None

    def report(self, test: dict[str, Any]) -> str:
        """The bold line ``normzoo train`` ends with, from the ``test`` of the summary."""
        scores = ", ".join(f"{key} {value:.4f}" for key, value in test.items()
                           if isinstance(value, float))
        return f"test {scores} on {test.get('split', '?')}"

    # -- afterwards --------------------------------------------------------------------------
    def evaluate(self, loaded: Any, request: EvaluateRequest) -> tuple[dict[str, Any],
                                                                       list[str]]:
        """``normzoo evaluate``: the scores of ``loaded`` on the request's split or files, and
        the lines to print (the scores as JSON are printed by ``--json`` instead)."""
        raise NotImplementedError

    def example_outputs(self, run_dir: Path, recipe: dict[str, Any],
                        data_dir: Path | None = None) -> ExampleOutputs | None:
        """The per-example test outputs a finished run kept, as the example-level test resamples
        them (:class:`~normzoo.verdicts.outputs.ExampleOutputs`); ``recipe``: the run's saved
        recipe as plain data, ``data_dir``: where a ``files`` corpus is now. None where the run
        kept none (runs from before they were kept): its verdicts then rest on the seeds' test
        alone, and say so."""
        return None

    def card(self, recipe: Recipe, hf: Any | None) -> Card:
        """What the export's card says about this task (``hf``: the Hugging Face mapping, or
        None where the model does not map)."""
        return Card(tag=self.name)
