"""A trained model ready for inference: what ``normzoo.load`` hands back.

:class:`Loaded` holds the model, its tokenizer and the recipe that trained it, and translates,
samples, streams or classifies with them through :mod:`~normzoo.inference.translate`,
:mod:`~normzoo.inference.sampling` and :mod:`~normzoo.inference.classify`, or scores them as
``normzoo evaluate`` does (:func:`normzoo.inference.evaluation.evaluate`). Which methods a
model has follows from what it is (:attr:`Loaded.methods`), never from its task's name. It
knows nothing of files: the checkpoint loader (:mod:`normzoo.inference.load`) builds it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from normzoo.data.examples import ParallelData
from normzoo.data.tokenizer import BOS, EOS, Tokenizer
from normzoo.inference import arguments
from normzoo.inference.arguments import ArgumentTypeError, WrongModelError
from normzoo.inference.classify import classifier_head, classify_rows, sentence_rows
from normzoo.inference.sampling import fit_prompt, ragged_sample_steps
from normzoo.inference.translate import translate_dataset, warn_cut
from normzoo.models.families import DecoderModel, Seq2SeqModel, TransformerModel
from normzoo.recipe import EvalConfig, Recipe


@dataclass
class Loaded:
    """A model ready for inference, with its tokenizer and the recipe that trained it."""

    model: TransformerModel
    tokenizer: Tokenizer
    recipe: Recipe
    plugins: list[dict[str, str]] = field(default_factory=list)
    source: str = ""

    @property
    def device(self) -> torch.device:
        """Where the model's weights are (``load(..., device=...)``)."""
        return next(self.model.parameters()).device

    def generator(self, seed: int) -> torch.Generator:
        """A random generator on the model's device, seeded (for :meth:`stream`)."""
        seed = arguments.seed("seed", seed, optional=False)
        return torch.Generator(device=self.device).manual_seed(seed)

    def translate(self, sentences: list[str], *, beam: int | None = None,
                  lenpen: float | None = None, max_tokens: int = 4096,
                  bf16: bool = False, first_line: int = 1) -> list[str]:
        """Translations of raw ``sentences`` (detokenized), in order, in batches of about
        ``max_tokens`` source tokens; with ``bf16``, under bf16 autocast (the beam's
        log-probabilities are still summed in float32).

        An empty (or blank) sentence gets an empty translation. One longer than the model's
        positions is cut to fit, with an :class:`~normzoo.inference.translate.InputCut` warning that
        names its line (``first_line`` for the first sentence).

        Every argument is checked first (:mod:`~normzoo.inference.arguments`): a bad one is a
        ValueError or TypeError naming it and what it accepts."""
        config = self.eval_config(beam, lenpen)
        sentences = _texts(sentences, "translate")
        max_tokens = arguments.integer("max_tokens", max_tokens, minimum=1)
        bf16 = arguments.flag("bf16", bf16)
        first_line = arguments.integer("first_line", first_line, minimum=1)
        self._has("translate")
        # A blank line is an empty one: no tokens, so no made-up translation.
        ids = self.tokenizer.encode_batch([s if s.strip() else "" for s in sentences])
        limit = self.model.config.max_positions
        data = ParallelData.build(ids, [[] for _ in ids], limit, drop_long=False)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=bf16):
            return translate_dataset(self.model, self.tokenizer, data, config, max_tokens,
                                     warn_cut_lines=True, first_line=first_line)

    def generate(self, prompts: list[str], *, max_new_tokens: int = 50,
                 temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                 seed: int | None = None, batch_size: int = 32,
                 first_line: int = 1) -> list[str]:
        """Continuations of ``prompts`` sampled from a causal LM (temperature 0: greedy),
        ``batch_size`` prompts at a time.

        With ``seed``, prompt ``i`` (counted from 0) is sampled from its own generator, seeded
        ``seed + i``: its continuation does not depend on the other prompts or the batch size,
        and equals :meth:`stream` on ``generator(seed + i)`` (up to the rounding of batched
        arithmetic). An empty (or blank) prompt gets an empty continuation; a prompt longer
        than the model's positions is cut to its last tokens, with an
        :class:`~normzoo.inference.translate.InputCut` warning that names its line
        (``first_line`` for the first prompt). Every argument is checked first, as for
        :meth:`translate`."""
        prompts = _texts(prompts, "generate")
        settings = _sampling(max_new_tokens, temperature, top_k, top_p)
        seed = arguments.seed("seed", seed, len(prompts))
        batch_size = arguments.integer("batch_size", batch_size, minimum=1)
        first_line = arguments.integer("first_line", first_line, minimum=1)
        self._has("generate")
        encoded = {}
        for i, prompt in enumerate(prompts):  # a loop: the warning's stack level is counted
            encoded[i] = self._prompt_ids(prompt, first_line + i)
        todo = [i for i, ids in encoded.items() if ids is not None]
        made: dict[int, list[int]] = {i: [] for i in range(len(prompts))}
        for start in range(0, len(todo), batch_size):
            rows = todo[start : start + batch_size]
            generators = (None if seed is None else
                          [self.generator(seed + i) for i in rows])
            for step in ragged_sample_steps(self.model, [encoded[i] for i in rows],
                                            generators=generators, **settings):
                for i, token in zip(rows, step, strict=True):
                    if token is not None:
                        made[i].append(token)
        return [self.tokenizer.decode(_until_eos(made[i])) for i in range(len(prompts))]

    def stream(self, prompt: str, *, max_new_tokens: int = 50, temperature: float = 1.0,
               top_k: int | None = None, top_p: float | None = None,
               generator: torch.Generator | None = None, line: int = 1) -> Iterator[str]:
        """The continuation of ``prompt`` as text, piece by piece as each token is sampled
        (``normzoo generate`` at a terminal). The pieces join to what :meth:`generate` returns
        for the same generator state: the tokenizer's decoder maps tokens to text one by one,
        so the text of a token prefix is a prefix of the whole text. ``generator`` must be on
        the model's device (:meth:`generator`); ``line`` names the prompt in a warning. The
        arguments are checked at the call, before the first piece is asked for."""
        (prompt,) = _texts([prompt], "stream")
        settings = _sampling(max_new_tokens, temperature, top_k, top_p)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise ArgumentTypeError("generator must be a torch.Generator (Loaded.generator) "
                                    f"or None, got {type(generator).__name__}")
        line = arguments.integer("line", line, minimum=1)
        self._has("stream")
        return self._pieces(prompt, settings, generator, line)

    def _pieces(self, prompt: str, settings: dict[str, Any], generator: torch.Generator | None,
                line: int) -> Iterator[str]:
        """:meth:`stream`'s pieces."""
        ids = self._prompt_ids(prompt, line)
        if ids is None:
            return
        made: list[int] = []
        shown = ""
        for (token,) in ragged_sample_steps(self.model, [ids], generators=[generator],
                                            **settings):
            if token is None:
                continue
            if token == EOS:
                return
            made.append(token)
            text = self.tokenizer.decode(made)
            if len(text) > len(shown) and text.startswith(shown):
                yield text[len(shown):]
                shown = text

    @property
    def methods(self) -> tuple[str, ...]:
        """The methods this model has, by what it is: ``translate`` for an encoder-decoder,
        ``generate`` and ``stream`` for a causal LM, ``classify`` for a model with a
        ``classifier`` head and a label set (``task_options.labels``); ``evaluate`` for every
        model."""
        found = ["translate"] if isinstance(self.model, Seq2SeqModel) else []
        found += ["generate", "stream"] if isinstance(self.model, DecoderModel) else []
        labels = self.recipe.task_options.get("labels")
        if classifier_head(self.model) is not None and isinstance(labels, list):
            found.append("classify")
        return (*found, "evaluate")

    def _has(self, method: str) -> None:
        """Refuse ``method`` where this model lacks it, naming those it has: a ValueError (and
        a user error: exit 2 at the command line)."""
        if method not in self.methods:
            from normzoo.contract import task_of

            needs = {"translate": "a translation model", "classify": "a classifier"}.get(
                method, "a causal LM")
            raise WrongModelError(f"{method}: {self.source} is not {needs} but "
                                  f"{task_of(self.recipe).kind} (task {self.recipe.task}); "
                                  f"its methods: {', '.join(self.methods)}")

    def classify(self, texts: list[str], *, max_tokens: int = 4096,
                 first_line: int = 1) -> list[str]:
        """The label (a name of ``recipe.task_options["labels"]``) a classifier picks for
        each of ``texts``, in order, in batches of about ``max_tokens`` tokens. Each text is
        read as training read its sentences (``[BOS, *ids, EOS]``, cut to ``data.max_len``,
        a cut one with an :class:`~normzoo.inference.translate.InputCut` warning naming its
        line, ``first_line`` for the first text) and scored by the model's ``classifier``
        head as its test step scores it. A model without that head is refused (ValueError),
        naming the methods it has."""
        texts = _texts(texts, "classify")
        max_tokens = arguments.integer("max_tokens", max_tokens, minimum=1)
        first_line = arguments.integer("first_line", first_line, minimum=1)
        self._has("classify")
        labels = list(self.recipe.task_options["labels"])
        rows = sentence_rows(self.tokenizer, texts, self.recipe.data.max_len, first_line)
        return [labels[i] for i in classify_rows(self.model, rows, max_tokens)]

    def evaluate(self, split: str | None = None, src: str | Path | None = None, *,
                 batch_tokens: int = 4096, data_dir: str | Path | None = None,
                 **options: Any) -> dict[str, Any]:
        """The scores ``normzoo evaluate`` prints with ``--json``, as a dict: on ``split`` of
        the recipe's data (None: its ``data.test_split``; ``data_dir``: read from the files
        there, as ``--data-dir``) or on the file ``src`` in the split's format. ``options``
        are the command's own, by the task: a translation model's ``ref`` (with ``src``),
        ``beam``, ``lenpen``, ``bf16``, ``hyps`` (where its hypotheses go; default
        ``hyps.SPLIT.evaluate.txt`` in the current folder, as the command writes them) and
        ``force``; an option the model's task does not read is refused (ValueError), as the
        command refuses it; so is ``split`` beside ``src`` or ``ref``."""
        from normzoo.inference.evaluation import evaluate

        given: dict[str, Any] = {"src": arguments.file("src", src), **options}
        for name, check in EVALUATE_OPTIONS.items():
            if given.get(name) is not None:  # None: not given, as a flag left off
                given[name] = check(name, given[name])
        data_dir = arguments.file("data_dir", data_dir)
        report, _ = evaluate(self, self.source, split=arguments.text("split", split),
                             batch_tokens=arguments.integer("batch_tokens", batch_tokens,
                                                            minimum=1),
                             data_dir=data_dir, options=given, flag=str)
        return report

    def _prompt_ids(self, prompt: str, line: int) -> list[int] | None:
        """BOS and ``prompt``'s tokens, cut to fit the model (with a warning naming ``line``);
        None for an empty prompt, which gets an empty continuation."""
        tokens = self.tokenizer.encode(prompt) if prompt.strip() else []
        if not tokens:  # an empty or blank prompt: nothing to continue
            return None
        positions = self.model.config.max_positions
        ids, cut = fit_prompt([BOS, *tokens], positions)
        if cut:
            warn_cut(line, len(tokens), len(ids) - 1, positions, part="last")
        return ids

    def eval_config(self, beam: int | None = None, lenpen: float | None = None) -> EvalConfig:
        """The recipe's decoding settings with ``beam`` and ``lenpen`` (None: the recipe's) put
        in. Both are checked here, in the caller's words ("beam must be an integer >= 1, got
        0"), rather than by pydantic's message about ``EvalConfig`` (or an IndexError inside
        the search for ``beam=0``)."""
        update: dict[str, Any] = {}
        if beam is not None:
            update["beam"] = arguments.integer("beam", beam, minimum=1)
        if lenpen is not None:
            update["lenpen"] = arguments.number("lenpen", lenpen, minimum=0)
        return self.recipe.eval.model_copy(update=update)


# The evaluate command's own options, each checked as the API checks an argument.
EVALUATE_OPTIONS = {
    "ref": arguments.file, "hyps": arguments.file, "bf16": arguments.flag,
    "force": arguments.flag,
    "beam": lambda name, value: arguments.integer(name, value, minimum=1, optional=True),
    "lenpen": lambda name, value: arguments.number(name, value, minimum=0, optional=True),
}


def _texts(texts: Any, method: str) -> list[str]:
    """``texts`` as a list of strings, or a TypeError that says what was wrong: a lone string
    would otherwise be taken as a list of one-letter sentences, and a number would fail deep
    inside the tokenizer."""
    if isinstance(texts, str):
        raise ArgumentTypeError(f"{method} takes a list of strings, not one string (it would "
                                "be read letter by letter): pass [text]")
    try:
        texts = list(texts)
    except TypeError:  # None, a number: Python's "object is not iterable" names neither
        raise ArgumentTypeError(f"{method} takes a list of strings, got "
                                f"{type(texts).__name__}") from None
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ArgumentTypeError(f"{method}: item {i} is not a string but "
                                    f"{type(text).__name__}")
    return texts


def _sampling(max_new_tokens: Any, temperature: Any, top_k: Any, top_p: Any) -> dict[str, Any]:
    """The sampling settings of :meth:`Loaded.generate` and :meth:`Loaded.stream`, checked:
    ``temperature=nan`` failed inside torch's sampling and ``max_new_tokens=-1`` returned
    empty continuations without a word."""
    return {"max_new_tokens": arguments.integer("max_new_tokens", max_new_tokens, minimum=1),
            "temperature": arguments.number("temperature", temperature, minimum=0),
            "top_k": arguments.integer("top_k", top_k, minimum=1, optional=True),
            "top_p": arguments.number("top_p", top_p, above=0, maximum=1, optional=True)}


def _until_eos(ids: list[int]) -> list[int]:
    return ids[: ids.index(EOS)] if EOS in ids else ids
