"""Resolve a model section's ``norm`` and ``residual`` names against the registry.

Called once, while the model section is validated (:class:`~normzoo.models.config.ModelConfig`):
it looks each name up, checks its options against the plugin's own signature, tries the norm
at the model's width and the scheme on every stack (so that a plugin's own checks speak at
validation time), and checks the combinations that cannot work. Problems are located relative
to the model section (``norm``, ``residual.alpha``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from torch import nn

from normzoo import registry
from normzoo.errors import ConfigError, NormzooError, Problem
from normzoo.models.component import Component
from normzoo.models.family_info import family_info
from normzoo.registry.options import validate_options
from normzoo.residual.base import ResidualScheme, StackInfo


class ModelSection(Protocol):
    """What resolving needs of a model section (:class:`normzoo.models.config.ModelConfig`,
    which calls :func:`resolve` while it validates, so it is not imported here)."""

    family: str
    d_model: int
    heads: int
    kv_heads: int | None
    vocab_size: int | None
    bias: bool
    norm: Component
    residual: Component

    @property
    def norm_bias(self) -> bool: ...

    @property
    def encoder_depth(self) -> int: ...

    @property
    def decoder_depth(self) -> int: ...


def stack_infos(config: ModelSection) -> list[StackInfo]:
    """The stacks this family has, each told the family, both depths, the heads and the
    vocabulary (0 while the tokenizer has not set it: validating a recipe)."""
    family = family_info(config.family)
    n, m = config.encoder_depth, config.decoder_depth
    heads = {"heads": config.heads, "kv_heads": config.kv_heads or config.heads,
             "vocab": config.vocab_size or 0}
    return [StackInfo(family.family, stack, n, m, config.d_model, **heads)
            for stack in family.stacks]


def norm_factory(name: str) -> Callable[..., nn.Module]:
    """The registered norm ``name``: a callable ``(width, **options) -> module``."""
    factory = registry.norms.get(name)
    if not callable(factory):
        raise ConfigError([Problem("norm", f"'{name}' is not a norm factory")])
    return factory


def takes_bias(factory: Callable[..., nn.Module]) -> bool:
    """Whether the norm ``factory`` has a ``bias`` option (LayerNorm, BatchNorm, DyT do)."""
    try:
        return "bias" in inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a callable without a readable signature
        return False


def norm_options(
    factory: Callable[..., nn.Module], options: Mapping[str, Any], bias: bool
) -> dict[str, Any]:
    """The options a norm is built with: the recipe's, plus ``bias=False`` where the model has
    no biases (``model.bias: false``) and the norm can leave its bias out. Derived at build
    time rather than written into ``model.norm``, so a recipe reads as it was written."""
    if bias or not takes_bias(factory):
        return dict(options)
    return {**options, "bias": False}


def scheme_class(name: str) -> type[ResidualScheme]:
    """The registered residual scheme ``name``: a :class:`ResidualScheme` subclass."""
    obj = registry.residuals.get(name)
    if not (isinstance(obj, type) and issubclass(obj, ResidualScheme)):
        info = registry.residuals.info(name)
        raise ConfigError([Problem("residual", f"'{name}' from {info.distribution} is not a "
                                   "ResidualScheme subclass")])
    return obj


def _problems(error: NormzooError, where: str) -> list[Problem]:
    if isinstance(error, ConfigError):
        return [p if p.path else Problem(where, p.message) for p in error.problems]
    return [Problem(where, str(error))]  # unknown name, broken plugin, name collision


def _given(component: Component, validated: dict[str, Any]) -> Component:
    """``component`` with the options it names, as the plugin's signature read them."""
    return Component(name=component.name,
                     **{key: validated[key] for key in component.options})


def _resolve_norm(config: ModelSection) -> tuple[Component | None, list[Problem]]:
    name = config.norm.name
    try:
        factory = norm_factory(name)
        options = validate_options(factory, config.norm.options, skip=1, where="norm")
        # the factory's own checks, e.g. groups | width
        norm = factory(config.d_model, **norm_options(factory, options, config.norm_bias))
    except NormzooError as error:
        return None, _problems(error, "norm")
    except (ValueError, TypeError) as error:
        return None, [Problem("norm", f"{name}({config.d_model}): {error}")]
    asked = "bias" in config.norm.options and bool(options.get("bias"))  # typed, e.g. "true"
    problems = [p for p in (causal_norm_problem(config, factory),
                            bias_problem(config, norm, asked)) if p]
    return _given(config.norm, options), problems


def bias_problem(config: ModelSection, norm: nn.Module, asked: bool) -> Problem | None:
    """``model.bias: false`` promises a model without biases: a norm option asking for one
    (``asked``) contradicts it, and a norm (a plugin) that keeps one with no option to drop it
    breaks it."""
    if config.norm_bias:
        return None
    if asked:
        return Problem("norm.bias", "true contradicts model.bias: false (a model without "
                       "biases); leave it out, or set model.bias: true")
    if any(name.rpartition(".")[2] == "bias" for name, _ in norm.named_parameters()):
        return Problem("norm", f"'{config.norm.name}' has a bias and no bias option to leave "
                       "it out, so model.bias: false cannot hold; use a norm without a bias "
                       "(rmsnorm, scalenorm) or one with a bias option (layernorm)")
    return None


def _resolve_residual(config: ModelSection) -> tuple[Component | None, list[ResidualScheme],
                                                   list[Problem]]:
    try:
        cls = scheme_class(config.residual.name)
        options = validate_options(cls, config.residual.options, skip=1, where="residual")
        schemes = [cls(stack, **options) for stack in stack_infos(config)]
    except NormzooError as error:
        return None, [], _problems(error, "residual")
    except (ValueError, TypeError) as error:
        return None, [], [Problem("residual", str(error))]
    return _given(config.residual, options), schemes, []


def causal_norm_problem(config: ModelSection, factory: Any) -> Problem | None:
    """A norm whose statistics mix positions (``mixes_positions = True``, BatchNorm) cannot sit
    in a causal decoder: in training, every position's output would depend on later tokens.

    ``model.norm`` serves both stacks, so an encoder-decoder is refused too.
    """
    if ("decoder" not in family_info(config.family).stacks
            or not getattr(factory, "mixes_positions", False)):
        return None
    return Problem(
        "norm",
        f"'{config.norm.name}' cannot be used in a causal decoder (model.family "
        f"'{config.family}'): in training its statistics mix all positions of the batch, so "
        "each position's output depends on later tokens, the ones it is trained to predict; "
        "use a per-token norm (layernorm, rmsnorm, scalenorm, dyt), or an encoder (task mlm)",
    )


def _resolve_qk_norm(config: ModelSection) -> tuple[Component | None, list[Problem]]:
    """``model.qk_norm``: a registered norm of one head's width, per token (a norm whose
    statistics mix positions would mix the keys a query may not see)."""
    if config.qk_norm is None:
        return None, []
    name, width = config.qk_norm.name, config.d_model // config.heads
    try:
        factory = norm_factory(name)
        options = validate_options(factory, config.qk_norm.options, skip=1, where="qk_norm")
        factory(width, **norm_options(factory, options, config.norm_bias))
    except NormzooError as error:
        return None, _problems(error, "qk_norm")
    except (ValueError, TypeError) as error:
        return None, [Problem("qk_norm", f"{name}({width}): {error}")]
    if getattr(factory, "mixes_positions", False):
        return None, [Problem("qk_norm", f"'{name}' mixes positions in its statistics; queries "
                              "and keys need a per-token norm (rmsnorm, layernorm, scalenorm, "
                              "dyt)")]
    return _given(config.qk_norm, options), []


def resolve(config: ModelSection) -> tuple[Component, Component, Component | None,
                                           list[Problem]]:
    """``config``'s norm, residual and QK-norm with validated options, and every problem
    found."""
    norm, problems = _resolve_norm(config)
    qk_norm, found = _resolve_qk_norm(config)
    problems += found
    residual, schemes, found = _resolve_residual(config)
    problems += found
    stream_norm = getattr(registry.norms.get(config.norm.name), "supports_stream_norm", True) \
        if norm is not None else True
    if any(scheme.normalizes_stream() for scheme in schemes) and not stream_norm:
        problems.append(Problem(
            "norm",
            f"'{config.norm.name}' cannot normalise the residual stream, and "
            f"'{config.residual.name}' puts a norm on it (x <- norm(... + f(x))); "
            "use a pre-norm scheme (pre, sandwich, peri, subln, layerscale)",
        ))
    return (norm or config.norm, residual or config.residual, qk_norm or config.qk_norm,
            list(dict.fromkeys(problems)))
