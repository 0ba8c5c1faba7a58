"""Sentence classification on the BERT-style encoder: a sentence in, one of a set of labels out;
scored by accuracy and macro-F1. Its data: ``SPLIT.tsv`` files of ``text<TAB>label`` lines, a
Hugging Face dataset with a text and a label column, or the built-in labelled corpus
(:mod:`.corpus`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from normzoo.plugin import Card, ExampleOutputs, Parts, Problem, Task

if TYPE_CHECKING:
    from normzoo.plugin import Recipe, Split, Tokenizer


class Classification(Task):
    """Sentence classification on an encoder: a pooled token and a classifier head."""

    name = "classification"
    family = "encoder"
    kind = "a classifier"
    module = "normzoo.classification.module:ClassificationModule"
    parts = ("text", "label")
    token_parts = ("text",)
    unit = "sentences"
    compared_score = ("accuracy", "max", "")  # normzoo compare judges the test accuracy
    hf_unmapped = ("a classifier's head (normzoo's pooled token, dense, tanh and linear) is not "
                   "mapped to a transformers architecture; the default export (safetensors) "
                   "keeps it, for normzoo.load and normzoo evaluate")
    options: ClassVar[dict[str, Any]] = {
        "pooling": "first",  # the first token (BOS, BERT's [CLS]) or the mean of the tokens
        "labels": None,  # the label set in class order; unset: the training split's, sorted
        "label_field": "label",  # a hub dataset's label column (data.text_field: its text)
    }

    def option_problems(self, options: dict[str, Any]) -> list[Problem]:
        from normzoo.classification.model import POOLINGS

        problems = super().option_problems(options)
        merged = {**self.options, **options}
        pooling, labels = merged["pooling"], merged["labels"]
        if pooling not in POOLINGS:
            problems.append(Problem("task_options.pooling", f"is {pooling!r}; use one of "
                                    f"{', '.join(POOLINGS)}"))
        if labels is not None and not (
                isinstance(labels, list) and len(labels) >= 2
                and all(isinstance(x, str) and x.strip() == x != "" for x in labels)
                and len(set(labels)) == len(labels)):
            problems.append(Problem("task_options.labels", "must be a list of two or more "
                                    "distinct, non-empty label names without surrounding "
                                    "spaces, as text (numbers quoted: ['0', '1']); or unset: "
                                    "the training split's labels"))
        if not isinstance(merged["label_field"], str):
            problems.append(Problem("task_options.label_field", "must be a column name"))
        return problems

    # -- data -------------------------------------------------------------------------------
    def split_files(self, data: Any, split: str) -> list[Path]:
        return [Path(data.dir or "") / f"{split}.tsv"]

    def read(self, split: Split) -> Iterator[Parts]:
        from normzoo.classification import corpus, layout
        from normzoo.plugin import DataError

        if split.source == "builtin":
            yield corpus.builtin_examples(split.name, split.limit)
        elif split.source == "files":
            start = 1
            for lines in split.lines():
                yield layout.parse_lines(lines, split.where, start)
                start += len(lines)
        else:
            data, field = split.recipe.data, self.option(split.recipe, "label_field")
            try:
                yield layout.hub_examples(split.hub_rows(), data.text_field, field)
            except DataError as error:  # say which settings name the columns
                raise DataError(f"{error} (data.text_field={data.text_field}, "
                                f"task_options.label_field={field})") from None

    def builtin_files(self) -> list[Path]:
        from normzoo.classification import corpus

        return [Path(corpus.__file__)]

    def data_options(self, recipe: Recipe) -> dict[str, Any]:
        """The label column changes what a hub split reads; the pooling and the label set do
        not (labels are kept as text and numbered when the dataset is built)."""
        field = self.option(recipe, "label_field")
        return {} if field == self.options["label_field"] else {"label_field": field}

    def kept_texts(self, role: str) -> dict[str, str]:
        return {"label": "label"}  # label names, turned into class indices by the label set

    def dataset(self, prepared: Any, role: str, recipe: Recipe, tokenizer: Tokenizer) -> Any:
        from normzoo.classification.data import LabelledSentences

        # What ``normzoo evaluate`` reads says where it is (a file) and which checkpoint it
        # scores: its advice on an unknown label is then what a user of the checkpoint can do.
        split = getattr(recipe.data, f"{role}_split")
        where = getattr(prepared, "where", "") or f"split '{split}'"
        return LabelledSentences(prepared.table(role, "text"), prepared.lines(role, "label"),
                                 self.labels(recipe, prepared), recipe.data.max_len,
                                 where=f"{where}: ",
                                 checkpoint=getattr(prepared, "checkpoint", None))

    def labels(self, recipe: Recipe, prepared: Any) -> list[str]:
        """The label set: the recipe's, else the training split's labels, sorted."""
        from normzoo.classification.layout import label_set

        chosen = self.option(recipe, "labels")
        if chosen is not None:
            return list(chosen)
        found = label_set(prepared.lines("train", "label"))
        if len(found) < 2:
            from normzoo.plugin import DataError

            raise DataError(f"split '{recipe.data.train_split}' has {len(found)} label "
                            f"({', '.join(map(repr, found))}): a classifier needs two or more")
        return found

    # -- model ------------------------------------------------------------------------------
    def resolved(self, recipe: Recipe, datamodule: Any) -> Recipe:
        """The label set recorded in the run's recipe: the head's size and class order are
        then the checkpoint's own, whatever data evaluates it later."""
        labels = self.labels(recipe, datamodule.prepared)
        options = {**recipe.task_options, "labels": labels}
        return recipe.model_copy(update={"task_options": options})

    def build_model(self, recipe: Recipe, vocab_size: int) -> Any:
        """The encoder with a ``classifier`` head (its MLM head stays, frozen and unused: so an
        MLM run's weights load by name, ``init.from`` with ``init.strict: false``)."""
        from normzoo.classification.model import ClassifierHead
        from normzoo.plugin import ConfigError, assemble

        labels = self.option(recipe, "labels")
        if labels is None:
            raise ConfigError([Problem("task_options.labels", "not resolved: the label set "
                                       "comes from the training data (a run fills it in)")])
        model = assemble(recipe.model, vocab_size=vocab_size)
        # The MLM head is not used: frozen, so no optimizer state is kept for it and a
        # multi-process run (DDP) finds no parameter without a gradient. The output projection
        # shares the token embedding where tied, which trains.
        for unused in (model.head_dense, model.head_norm):
            unused.requires_grad_(False)
        if model.output_bias is not None:
            model.output_bias.requires_grad_(False)
        if not recipe.model.tie_output:
            model.output.requires_grad_(False)
        model.classifier = ClassifierHead(recipe.model.d_model, len(labels),
                                          self.option(recipe, "pooling"), recipe.model.dropout)
        return model

    # -- ending -----------------------------------------------------------------------------
    def monitor(self, recipe: Recipe) -> tuple[str, str]:
        return ("val/accuracy", "max")

    def report(self, test: dict[str, Any]) -> str:
        return (f"test accuracy {test['accuracy']:.4f}, macro-F1 {test['macro_f1']:.4f}, "
                f"loss {test['loss']:.4f} on {test['split']}")

    # -- afterwards -------------------------------------------------------------------------
    def example_outputs(self, run_dir: Path, recipe: dict[str, Any],
                        data_dir: Path | None = None) -> ExampleOutputs | None:
        """Each sentence's prediction, label and loss (``examples.<test split>.tsv``), as
        ``[correct, 1]``: their column sums' ratio is the test accuracy. A prediction with its
        loss is what tells two runs' outputs apart (two seeds agree on most predictions)."""
        import numpy as np

        from normzoo.plugin import kept_outputs, label_of, number, ratio_score

        label = label_of((recipe.get("task_options") or {}).get("labels"))
        rows = kept_outputs(self, run_dir, recipe, data_dir, ("prediction", "label", "loss"),
                            (label, label, number))
        if rows is None:
            return None
        stats = np.array([[float(predicted == gold), 1.0] for predicted, gold, _ in rows],
                         dtype=np.float64).reshape(len(rows), 2)
        return ExampleOutputs(stats, ratio_score, [(p, loss) for p, _, loss in rows])

    def card(self, recipe: Recipe, hf: Any | None) -> Card:
        labels = ", ".join(self.option(recipe, "labels") or [])
        return Card(tag="text-classification", data_note=f"; labels: {labels}",
                    python="model.model  # the torch module; its head is model.model.classifier")
