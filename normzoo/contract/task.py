"""The task contract: what one kind of job (translation, language modelling, classification, a
plugin's tagger) says to the run, the data pipeline and the commands.

A task is a subclass of :class:`Task` registered in the ``normzoo.tasks`` entry-point group; its
options are the recipe's ``task_options``. The registry builds it once, without arguments: it
holds no state, and the validated recipe is passed to each call. Its class and the module that
defines it import neither torch nor Lightning at import time (``normzoo list tasks`` and recipe
validation read them): the heavy parts (the LightningModule, a final test of its own) live in
modules its methods import.

Four parts, each with defaults that serve every task; a task states what differs:

1. **The recipe and the data** -- :attr:`name`, :attr:`family` (the model it trains),
   :attr:`kind`, :attr:`options`, :meth:`option_problems`; :attr:`parts` (the columns one
   example is read as, by :meth:`read` from a :class:`~normzoo.data.split.Split`),
   :attr:`token_parts` (those the tokenizer learns from), :attr:`tables` (the integer tables
   :meth:`encode` stores: the token parts, and columns that are not tokens such as per-token
   tags), :meth:`kept_texts` (raw text kept beside them), :meth:`dropped`, :meth:`dataset`,
   :meth:`data_options` (what else changes the prepared data: part of its cache key),
   :meth:`split_files`, :meth:`builtin_files`, :attr:`unit`, :meth:`streaming_loader`.
2. **The model and its loss** -- :attr:`module` (the LightningModule: ``logits`` and
   ``loss_terms``), :meth:`build_model`, :meth:`resolved` (settings only the data can give) and
   :meth:`monitor` (the validation metric that picks the best checkpoint).
3. **Scoring** -- :meth:`final_test` (by default the module's own validation and test steps on
   the best checkpoint), :meth:`evaluate` (by default the module's own test step on the split or
   file asked for) and :attr:`evaluate_options`; :attr:`compared_score` and
   :meth:`example_outputs` (how ``compare`` and ``study`` judge runs);
   :meth:`decodes_in_validation` (the resume rule it adds).
4. **How a run is shown and exported** -- :meth:`report`, :meth:`card`, :attr:`hf_unmapped`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from normzoo.contract.files import text_file

if TYPE_CHECKING:
    from normzoo.contract.outputs import ExampleOutputs
    from normzoo.data.split import Split
    from normzoo.data.tokenizer import Tokenizer
    from normzoo.errors import Problem
    from normzoo.recipe import Recipe
    from normzoo.recipe.data import DataConfig

# A chunk of a split as read: one list per part, line-aligned (translation: sources, targets).
Parts = tuple[list[str], ...]
# What a task's evaluation returns: its scores (``--json`` prints them) and the lines to print.
Scores = tuple[dict[str, Any], list[str]]


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
    """What ``normzoo evaluate`` was asked, as a task's :meth:`Task.evaluate` receives it: the
    checkpoint, the split's name or a file in the split's own format (``--src``), the batch
    budget, and the task's own options that were given (``--beam 5`` as ``{"beam": 5}``; only
    those in its :attr:`Task.evaluate_options`). ``by_test_step()`` is the default scoring:
    the module's own test step over that split or file, so ``evaluate`` reproduces the run's
    final test; its scores are rounded to 4 places, or as ``digits={"ppl": 3}`` says."""

    checkpoint: str
    split: str
    src: Path | None
    batch_tokens: int
    options: Mapping[str, Any] = field(default_factory=dict)
    by_test_step: Callable[..., Scores] = field(default=lambda **_: ({}, []), repr=False)


@dataclass(frozen=True)
class FinalTest:
    """What a task's :meth:`Task.final_test` is given at the end of training: the run's recipe,
    its LightningModule, data module and Lightning trainer, and the run's own services.

    ``training_ended()`` marks where training's wall time ends (``train_wall_s``): after work
    every process takes part in, before work rank 0 does alone. ``in_loops()`` is the default
    final test: the best checkpoint scored by the module's own validation and test steps in
    Lightning's loops, every process taking part, each test example's outputs kept; it returns
    (validation metrics, test scores). ``last_validation()`` is the run's last validation
    metrics (from its metrics file where this process validated nothing, a run resumed at its
    end); ``log_test(scores)`` sends scores computed outside Lightning's loops to every logger
    at the final step."""

    recipe: Recipe
    module: Any
    datamodule: Any
    trainer: Any
    training_ended: Callable[[], None]
    in_loops: Callable[[], tuple[dict[str, float], dict[str, Any]]]
    last_validation: Callable[[], dict[str, float]]
    log_test: Callable[[dict[str, Any]], None]

    @property
    def run_dir(self) -> Path:
        return Path(self.trainer.default_root_dir)


class Task:
    """One kind of job a recipe trains. A subclass sets :attr:`name`, :attr:`family`,
    :attr:`module` and implements :meth:`dataset`; everything else has a default."""

    # -- 1. the recipe and the data ----------------------------------------------------------
    name: ClassVar[str]
    #: The model family it trains: ``encoder``, ``decoder`` or ``encoder_decoder``.
    family: ClassVar[str]
    #: What the task's models are called in messages ("a classifier"; default "a NAME model").
    kind: ClassVar[str]
    #: The options ``task_options`` may set, with their defaults.
    options: ClassVar[dict[str, Any]] = {}
    #: The columns of one example as read (:meth:`read`), in order.
    parts: ClassVar[tuple[str, ...]] = ("text",)
    #: The parts the tokenizer learns from.
    token_parts: ClassVar[tuple[str, ...]] = ("text",)
    #: The integer tables :meth:`encode` returns, in order, each stored in the prepared cache
    #: (default: the token parts). A table that is not a token part holds ids of the task's own
    #: (per-token tags); ``prepare`` counts the tokens of the token parts' tables only.
    tables: ClassVar[tuple[str, ...] | None] = None
    #: What one example is called in the prepared data's description and ``evaluate``'s count.
    unit: ClassVar[str] = "lines"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not hasattr(cls, "kind") and "name" in cls.__dict__:
            cls.kind = f"a {cls.name} model"

    def option_problems(self, options: dict[str, Any]) -> list[Problem]:
        """Problems with ``task_options`` (checked once, when the recipe is validated): by
        default, keys the task does not take."""
        from normzoo.errors import Problem

        unknown = sorted(set(options) - set(self.options))
        known = ", ".join(sorted(self.options)) or "none"
        return [Problem(f"task_options.{key}", f"task '{self.name}' has no option '{key}' "
                        f"(it takes: {known})") for key in unknown]

    def option(self, recipe: Recipe, key: str) -> Any:
        """``task_options[key]`` of ``recipe``, or its default (a helper, not a hook)."""
        return recipe.task_options.get(key, self.options[key])

    def split_files(self, data: DataConfig, split: str) -> list[Path]:
        """The files a ``data.source: files`` split reads (the first is counted): by default
        ``SPLIT.txt``."""
        return [text_file(Path(data.dir or ""), split)]

    def read(self, split: Split) -> Iterator[Parts]:
        """``split``'s examples in chunks of line-aligned parts, so that a corpus larger than
        memory is read in one bounded pass: by default its lines as one part
        (:meth:`~normzoo.data.split.Split.lines`)."""
        for lines in split.lines():
            yield (lines,)

    def builtin_files(self) -> list[Path]:
        """Source files of the task's own ``data.source: builtin`` corpus beyond normzoo's toy
        corpus (which always counts): a change to one prepares the data anew."""
        return []

    def data_options(self, recipe: Recipe) -> dict[str, Any]:
        """The task options that change what the prepared data holds: part of its cache key,
        so leaving one out would reuse stale data (the others, a classifier's pooling, leave the
        data as it is)."""
        return {}

    def encode(self, parts: Parts, tokenizer: Tokenizer) -> list[list[list[int]]]:
        """The integer rows of each of :attr:`tables` for one chunk: by default each token
        part encoded by the tokenizer."""
        return [tokenizer.encode_batch(parts[self.parts.index(name)])
                for name in self.token_parts]

    def kept_texts(self, role: str) -> dict[str, str]:
        """Raw text the prepared cache keeps for ``role`` beside its tables, as ``{file name:
        part}`` (translation keeps the sources and references its final test scores)."""
        return {}

    def dropped(self, lengths: Sequence[Any], max_len: int, role: str) -> dict[str, int] | None:
        """What the task's dataset will leave out of one chunk (``lengths``: row lengths per
        table), counted as ``{reason: n}`` for the prepared data's description."""
        return None

    def dataset(self, prepared: Any, role: str, recipe: Recipe, tokenizer: Tokenizer) -> Any:
        """The examples of a prepared split (``prepared.table(role, name)``,
        ``prepared.lines(role, file)``): an :class:`~normzoo.data.examples.Indexed` with
        ``collate(items)`` (a batch dict with ``ntokens``, the units the loss averages over),
        ``lengths()`` and ``sides()``."""
        raise NotImplementedError(f"task '{self.name}' defines no dataset")

    def streaming_loader(self, datamodule: Any) -> Any:
        """The training loader of a corpus read while training (``data.streaming``); a task
        that defines none does not stream."""
        raise NotImplementedError(f"task '{self.name}' does not stream")

    @property
    def streams(self) -> bool:
        """Whether ``data.streaming`` can feed it: it defines :meth:`streaming_loader`."""
        return type(self).streaming_loader is not Task.streaming_loader

    # -- 2. the model and its loss ------------------------------------------------------------
    #: The LightningModule that trains it, as ``module:Class`` (a
    #: :class:`~normzoo.tasks.base.TaskModule`: ``logits`` and ``loss_terms``).
    module: ClassVar[str]

    def build_model(self, recipe: Recipe, vocab_size: int) -> Any:
        """The model a checkpoint of this task holds (``init.from`` loads into it by name,
        ``normzoo.load`` rebuilds it): by default the recipe's model, assembled."""
        from normzoo.models import assemble

        return assemble(recipe.model, vocab_size=vocab_size)

    def resolved(self, recipe: Recipe, datamodule: Any) -> Recipe:
        """``recipe`` with what only the prepared data can say filled in (recorded in the run's
        recipe, so a checkpoint rebuilds the same model; ``datamodule.prepared``)."""
        return recipe

    @property
    def resolves_from_data(self) -> bool:
        """Whether :meth:`resolved` fills settings in from the data (so ``init.from`` is fitted
        to the model once the data is read; otherwise before it, failing fast)."""
        return type(self).resolved is not Task.resolved

    def monitor(self, recipe: Recipe) -> tuple[str, str]:
        """The validation metric that picks the best checkpoint, and ``max`` or ``min``."""
        return ("val/loss", "min")

    # -- 3. scoring ---------------------------------------------------------------------------
    #: The ``normzoo evaluate`` options it takes beyond ``--split``: by default ``src`` (a file
    #: in the split's format, which the default :meth:`evaluate` reads); translation adds
    #: ``ref``, ``beam``, ``lenpen``, ... Any other given is refused, naming the tasks that
    #: take it.
    evaluate_options: ClassVar[frozenset[str]] = frozenset({"src"})
    #: The ``summary.json`` test score ``normzoo compare`` and ``normzoo study`` judge runs on,
    #: ``min`` or ``max`` for which is better, and its unit; :meth:`example_outputs` resamples
    #: its test set.
    compared_score: ClassVar[tuple[str, str, str]] = ("loss", "min", "nats/token")

    def final_test(self, end: FinalTest) -> tuple[dict[str, float], dict[str, Any]] | None:
        """The best checkpoint's validation metrics and test scores, as ``summary.json``
        records them; None on processes other than rank 0. Called on every process. By
        default the module's own validation and test steps score the best checkpoint, every
        process taking part (``end.in_loops()``), and that time counts as training's."""
        scores = end.in_loops()
        end.training_ended()
        return scores if end.trainer.is_global_zero else None

    def evaluate(self, loaded: Any, request: EvaluateRequest) -> Scores:
        """``normzoo evaluate``: the scores of ``loaded`` (``.recipe``, ``.model``,
        ``.tokenizer``) on the request's split or file, and the lines to print. By default the
        module's own test step scores it (``request.by_test_step()``)."""
        return request.by_test_step()

    def example_outputs(self, run_dir: Path, recipe: dict[str, Any],
                        data_dir: Path | None = None) -> ExampleOutputs | None:
        """The per-example test outputs a finished run kept, as the example-level test resamples
        them (:class:`~normzoo.contract.outputs.ExampleOutputs`); ``recipe``: the run's saved
        recipe as plain data, ``data_dir``: where a ``files`` corpus is now. None where the run
        kept none: its verdicts then rest on the seeds' test alone, and say so."""
        return None

    def decodes_in_validation(self, recipe: dict[str, Any]) -> bool:
        """Whether validation decodes with the ``eval`` settings (so a resume may not change
        them); ``recipe`` is a checkpoint's saved recipe, as plain data."""
        return False

    # -- 4. how a run is shown and exported ---------------------------------------------------
    #: Why ``normzoo export --format hf`` cannot map this task's models (None: the model
    #: family's mapping applies).
    hf_unmapped: ClassVar[str | None] = None

    def report(self, test: dict[str, Any]) -> str:
        """The bold line ``normzoo train`` ends with, from the ``test`` of the summary."""
        scores = ", ".join(f"{key} {value:.4f}" for key, value in test.items()
                           if isinstance(value, float))
        return f"test {scores} on {test.get('split', '?')}"

    def card(self, recipe: Recipe, hf: Any | None) -> Card:
        """What the export's card says about this task (``hf``: the Hugging Face mapping, or
        None where the model does not map)."""
        return Card(tag=self.name)
