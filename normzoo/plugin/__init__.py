"""Everything a plugin needs, in one public module: a norm, a residual scheme or a task is written
against ``normzoo.plugin`` alone (docs/plugins.md). What is not here is private and may change.

The task contract (:class:`Task` and what it returns) is imported at once and imports neither
torch nor Lightning, so a task's module can import it at import time (``normzoo list tasks`` and
recipe checks read that module); the rest (the LightningModule bases, the data helpers, the
residual API) is imported the first time it is used.

The task contract
    :class:`Task`, :class:`Card`, :class:`EvaluateRequest`, :class:`FinalTest`, ``Parts``,
    ``Scores``; a run's per-example outputs :class:`ExampleOutputs` and the corpus scores they
    sum to (:func:`ratio_score`, :func:`bleu_score`, :func:`bleu_stats`); the kept test outputs
    read back (:func:`kept_outputs`, :func:`label_of`, :func:`number`, :func:`count`).
Errors a user can cause
    :class:`Problem` (one recipe problem), :class:`ConfigError`, :class:`DataError`,
    :class:`NormzooError`: each ends a command with exit code 2 and its message.
The data
    :class:`Split` (what :meth:`Task.read` reads), :class:`Tokenizer` and its special ids
    ``PAD``, ``BOS``, ``EOS``; :class:`Indexed` (a dataset's base), :class:`TokenTable` (a
    prepared table), :func:`pad`; the built-in toy corpus's sentences with their trees
    (:func:`toy_sentences`, ``TOY_SPLITS``); :class:`Recipe`.
The model and its loss
    :class:`TaskModule` (a task's LightningModule base: ``logits``, ``loss_terms``),
    :class:`ScoredModule` (one scored by Lightning's loops in float32, with default validation
    and test steps), :class:`KeptExamples`, :class:`LossTerms`, :func:`token_terms`,
    :func:`assemble` (a recipe's model).
Norms and residual schemes
    :class:`ResidualScheme`, :class:`Residual`, :class:`StreamEnds`, :class:`PlainForm`,
    :class:`Site`, :class:`StackInfo`, :class:`Family`, :class:`SublayerKind`, ``NormFactory``,
    ``Stream``, ``Sublayer``; the initialisations the built-ins use (:func:`linear_default_`,
    :func:`xavier_normal_scaled`, :func:`torchscale_scaled`); :func:`current_padding_mask` (for
    a norm whose statistics span tokens).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from normzoo.contract import Card, EvaluateRequest, ExampleOutputs, FinalTest, Parts, Task
from normzoo.contract.task import Scores
from normzoo.errors import ConfigError, NormzooError, Problem

if TYPE_CHECKING:
    from normzoo.contract.scores import bleu_score, bleu_stats, ratio_score
    from normzoo.data.builtin.corpus import SPLITS as TOY_SPLITS
    from normzoo.data.builtin.corpus import sentences as toy_sentences
    from normzoo.data.examples import Indexed, TokenTable, pad
    from normzoo.data.sources import DataError
    from normzoo.data.split import Split
    from normzoo.data.tokenizer import BOS, EOS, PAD, Tokenizer
    from normzoo.models import assemble
    from normzoo.nn.padding import current_padding_mask
    from normzoo.nn.token_loss import LossTerms, token_terms
    from normzoo.recipe import Recipe
    from normzoo.residual import (
        Family,
        NormFactory,
        PlainForm,
        Residual,
        ResidualScheme,
        Site,
        StackInfo,
        Stream,
        StreamEnds,
        Sublayer,
        SublayerKind,
        linear_default_,
        torchscale_scaled,
        xavier_normal_scaled,
    )
    from normzoo.tasks.base import TaskModule
    from normzoo.tasks.per_example import count, kept_outputs, label_of, number
    from normzoo.tasks.scored import ScoredModule
    from normzoo.tasks.testing import KeptExamples

__all__ = [
    "BOS",
    "EOS",
    "PAD",
    "TOY_SPLITS",
    "Card",
    "ConfigError",
    "DataError",
    "EvaluateRequest",
    "ExampleOutputs",
    "Family",
    "FinalTest",
    "Indexed",
    "KeptExamples",
    "LossTerms",
    "NormFactory",
    "NormzooError",
    "Parts",
    "PlainForm",
    "Problem",
    "Recipe",
    "Residual",
    "ResidualScheme",
    "ScoredModule",
    "Scores",
    "Site",
    "Split",
    "StackInfo",
    "Stream",
    "StreamEnds",
    "Sublayer",
    "SublayerKind",
    "Task",
    "TaskModule",
    "TokenTable",
    "Tokenizer",
    "assemble",
    "bleu_score",
    "bleu_stats",
    "count",
    "current_padding_mask",
    "kept_outputs",
    "label_of",
    "linear_default_",
    "number",
    "pad",
    "ratio_score",
    "token_terms",
    "torchscale_scaled",
    "toy_sentences",
    "xavier_normal_scaled",
]

# name -> "module:attribute", imported on first use (torch, Lightning, numpy behind them).
_LATER = {
    **{name: f"normzoo.contract.scores:{name}" for name in ("bleu_score", "bleu_stats",
                                                           "ratio_score")},
    "TOY_SPLITS": "normzoo.data.builtin.corpus:SPLITS",
    "toy_sentences": "normzoo.data.builtin.corpus:sentences",
    **{name: f"normzoo.data.examples:{name}" for name in ("Indexed", "TokenTable", "pad")},
    "DataError": "normzoo.data.sources:DataError",
    "Split": "normzoo.data.split:Split",
    **{name: f"normzoo.data.tokenizer:{name}" for name in ("BOS", "EOS", "PAD", "Tokenizer")},
    "assemble": "normzoo.models:assemble",
    "current_padding_mask": "normzoo.nn.padding:current_padding_mask",
    **{name: f"normzoo.nn.token_loss:{name}" for name in ("LossTerms", "token_terms")},
    "Recipe": "normzoo.recipe:Recipe",
    **{name: f"normzoo.residual:{name}" for name in (
        "Family", "NormFactory", "PlainForm", "Residual", "ResidualScheme", "Site",
        "StackInfo", "Stream", "StreamEnds", "Sublayer", "SublayerKind")},
    **{name: f"normzoo.residual:{name}" for name in (
        "linear_default_", "torchscale_scaled", "xavier_normal_scaled")},
    "TaskModule": "normzoo.tasks.base:TaskModule",
    **{name: f"normzoo.tasks.per_example:{name}" for name in ("count", "kept_outputs",
                                                             "label_of", "number")},
    "ScoredModule": "normzoo.tasks.scored:ScoredModule",
    "KeptExamples": "normzoo.tasks.testing:KeptExamples",
}

assert set(__all__) == {*_LATER, "Card", "ConfigError", "EvaluateRequest", "ExampleOutputs",
                        "FinalTest", "NormzooError", "Parts", "Problem", "Scores", "Task"}


def __getattr__(name: str) -> Any:
    if name not in _LATER:
        raise AttributeError(f"module 'normzoo.plugin' has no attribute '{name}'")
    module, _, attribute = _LATER[name].partition(":")
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # once
    return value


def __dir__() -> list[str]:
    return __all__
