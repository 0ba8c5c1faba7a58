"""Build a model from its config by looking names up in the registry.

:func:`check` validates a config against what is installed (names, options, combinations) and
reports every problem at once; :func:`assemble` builds the model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from normzoo import registry
from normzoo.errors import ConfigError, NormzooError, Problem
from normzoo.models.config import ModelConfig
from normzoo.models.families import DecoderModel, EncoderModel, Seq2SeqModel, TransformerModel
from normzoo.models.layers import SublayerBuilder
from normzoo.models.stacks import DecoderStack, EncoderStack
from normzoo.options import validate_options
from normzoo.residual.base import Family, ResidualScheme, StackInfo


def stack_infos(config: ModelConfig) -> list[StackInfo]:
    """The stacks this family has, each told the family and both depths."""
    family = Family(config.family)
    n, m = config.encoder_depth, config.decoder_depth
    stacks = []
    if family is not Family.DECODER:
        stacks.append(StackInfo(family, "encoder", n, m, config.d_model))
    if family is not Family.ENCODER:
        stacks.append(StackInfo(family, "decoder", n, m, config.d_model))
    return stacks


def norm_maker(config: ModelConfig) -> Callable[[int], nn.Module]:
    """``width -> fresh norm`` for the configured norm, options validated once up front."""
    factory = registry.norms.get(config.norm.name)
    if not callable(factory):
        raise ConfigError([Problem("model.norm", f"'{config.norm.name}' is not a norm factory")])
    options = validate_options(factory, config.norm.options, skip=1, where="model.norm")

    def make_norm(width: int) -> nn.Module:
        try:
            return factory(width, **options)
        except (ValueError, TypeError) as error:  # e.g. groups that do not divide the width
            raise ConfigError([Problem("model.norm", f"{config.norm.name}({width}): {error}")]
                              ) from None

    make_norm(config.d_model)  # surface the factory's own checks at validation time
    return make_norm


def scheme_class(name: str) -> type[ResidualScheme]:
    obj = registry.residuals.get(name)
    if not (isinstance(obj, type) and issubclass(obj, ResidualScheme)):
        info = registry.residuals.info(name)
        raise ConfigError(
            [Problem("model.residual", f"'{name}' from {info.distribution} is not a "
                     "ResidualScheme subclass")]
        )
    return obj


def build_scheme(config: ModelConfig, stack: StackInfo) -> ResidualScheme:
    cls = scheme_class(config.residual.name)
    options = validate_options(cls, config.residual.options, skip=1, where="model.residual")
    try:
        return cls(stack, **options)
    except (ValueError, TypeError) as error:
        raise ConfigError([Problem("model.residual", str(error))]) from None


def _collect(problems: list[Problem], fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except ConfigError as error:
        problems.extend(error.problems)
    except NormzooError as error:  # unknown name, broken plugin, name collision
        problems.append(Problem("", str(error)))
    return None


def _causal_norm_problem(config: ModelConfig) -> Problem | None:
    """A norm whose statistics mix positions (``mixes_positions = True``, BatchNorm) cannot sit
    in a causal decoder: in training, every position's output would depend on later tokens.

    ``model.norm`` serves both stacks, so an encoder-decoder is refused too.
    """
    if config.family == "encoder":
        return None
    if not getattr(registry.norms.get(config.norm.name), "mixes_positions", False):
        return None
    return Problem(
        "model.norm",
        f"'{config.norm.name}' cannot be used in a causal decoder (model.family "
        f"'{config.family}'): in training its statistics mix all positions of the batch, so "
        "each position's output depends on later tokens, the ones it is trained to predict; "
        "use a per-token norm (layernorm, rmsnorm, scalenorm, dyt), or an encoder (task mlm)",
    )


def check(config: ModelConfig | dict[str, Any]) -> ModelConfig:
    """Validate ``config`` structurally and against the registry; raise with every problem."""
    config = ModelConfig.parse(config)
    problems: list[Problem] = []
    make_norm = _collect(problems, lambda: norm_maker(config))
    for p in problems:
        if not p.path:
            object.__setattr__(p, "path", "model.norm")
    count = len(problems)
    schemes = [_collect(problems, lambda s=s: build_scheme(config, s)) for s in stack_infos(config)]
    for p in problems[count:]:
        if not p.path:
            object.__setattr__(p, "path", "model.residual")
    if make_norm is not None:
        problem = _causal_norm_problem(config)
        if problem is not None:
            problems.append(problem)
    if make_norm is not None and schemes and schemes[0] is not None:
        norm_cls = registry.norms.get(config.norm.name)
        for scheme in schemes:
            if scheme.normalizes_stream() and not getattr(norm_cls, "supports_stream_norm", True):
                problems.append(
                    Problem(
                        "model.norm",
                        f"'{config.norm.name}' cannot normalise the residual stream, and "
                        f"'{config.residual.name}' puts a norm on it (x <- norm(... + f(x))); "
                        "use a pre-norm scheme (pre, sandwich, peri, subln, layerscale)",
                    )
                )
                break
    if problems:
        # One problem per distinct message: both stacks may report the same option error.
        unique = list(dict.fromkeys(problems))
        raise ConfigError(unique)
    return config


def assemble(
    config: ModelConfig | dict[str, Any], vocab_size: int | None = None
) -> TransformerModel:
    """Build the model described by ``config`` (``vocab_size`` overrides the config's)."""
    config = check(config)
    if vocab_size is not None:
        config = config.model_copy(update={"vocab_size": vocab_size})
        config = ModelConfig.parse(config.model_dump())
    if config.vocab_size is None:
        raise ConfigError([Problem("model.vocab_size", "not set (it comes from the tokenizer)")])
    make_norm = norm_maker(config)
    stacks = {}
    for info in stack_infos(config):
        build = SublayerBuilder(
            build_scheme(config, info),
            info,
            make_norm,
            heads=config.heads,
            ffn_dim=config.ffn_dim,
            dropout=config.dropout,
            attention_dropout=config.attention_dropout,
            activation_dropout=config.activation_dropout,
            activation=config.activation,
            fused_qkv=config.fused_qkv,
            bias=config.bias,
        )
        stacks[info.stack] = (EncoderStack if info.stack == "encoder" else DecoderStack)(build)
    if config.family == "encoder":
        model: TransformerModel = EncoderModel(config, stacks["encoder"], make_norm)
    elif config.family == "decoder":
        model = DecoderModel(config, stacks["decoder"])
    else:
        model = Seq2SeqModel(config, stacks["encoder"], stacks["decoder"])
    model.plugins = registry.plugin_provenance(config.norm.name, config.residual.name)
    return model
