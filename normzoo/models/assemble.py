"""Build a model from its validated config.

A :class:`~normzoo.models.config.ModelConfig` has been checked against the registry while it
was validated (:mod:`normzoo.models.resolve`), options included, so building only looks the
names up and calls them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from normzoo import registry
from normzoo.errors import ConfigError, Problem
from normzoo.models.config import ModelConfig
from normzoo.models.families import DecoderModel, EncoderModel, Seq2SeqModel, TransformerModel
from normzoo.models.layers import SublayerBuilder
from normzoo.models.resolve import norm_factory, norm_options, scheme_class, stack_infos
from normzoo.models.stacks import DecoderStack, EncoderStack


def norm_maker(config: ModelConfig, which: str = "norm") -> Callable[[int], nn.Module]:
    """``width -> fresh norm`` for the configured norm (``which``: ``norm``, or ``qk_norm``)
    and its options (without its bias where the model has none, ``model.bias: false``)."""
    component = getattr(config, which)
    factory = norm_factory(component.name)
    options = norm_options(factory, component.options, config.norm_bias)

    def make_norm(width: int) -> nn.Module:
        try:
            return factory(width, **options)
        except (ValueError, TypeError) as error:  # e.g. groups that do not divide ffn_dim
            raise ConfigError([Problem(f"model.{which}", f"{component.name}({width}): {error}")]
                              ) from None

    return make_norm


def assemble(
    config: ModelConfig | dict[str, Any], vocab_size: int | None = None
) -> TransformerModel:
    """Build the model described by ``config`` (``vocab_size`` overrides the config's).

    A plain dict (the Python API) is validated here; a ``ModelConfig`` already was. Either is
    checked against the registry (:meth:`ModelConfig.resolved`) before anything is built.
    """
    config = ModelConfig.parse(config)  # validated and checked against the registry
    if vocab_size is not None:
        config = config.with_vocab(vocab_size)
    if config.vocab_size is None:
        raise ConfigError([Problem("model.vocab_size", "not set (it comes from the tokenizer)")])
    make_norm = norm_maker(config)
    scheme = scheme_class(config.residual.name)
    stacks = {}
    for info in stack_infos(config):
        build = SublayerBuilder(
            config, scheme(info, **config.residual.options), info, make_norm,
            qk_norm=norm_maker(config, "qk_norm") if config.qk_norm is not None else None,
        )
        stacks[info.stack] = (EncoderStack if info.stack == "encoder" else DecoderStack)(build)
    if config.family == "encoder":
        model: TransformerModel = EncoderModel(config, stacks["encoder"], make_norm)
    elif config.family == "decoder":
        model = DecoderModel(config, stacks["decoder"])
    else:
        model = Seq2SeqModel(config, stacks["encoder"], stacks["decoder"])
    model.plugins = registry.plugin_provenance(
        config.norm.name, config.residual.name,
        config.qk_norm.name if config.qk_norm is not None else None)
    model.scheme = scheme
    scheme.after_step(model)  # a constraint on the weights holds from the first forward pass
    return model
