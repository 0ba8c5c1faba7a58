"""The ``model`` section of a recipe: a plain, validated description of one Transformer.

``norm`` and ``residual`` name registry entries, either as a bare name (``residual: deepnorm``)
or as a mapping with options (``residual: {name: mixln, post_fraction: 0.25}``). Validation
checks the sizes; :meth:`ModelConfig.resolved` then checks the names and options against the
registry (:func:`normzoo.models.resolve.resolve`) and returns a new config whose options are
typed as the plugin's own signature reads them. The recipe loader does both, so a recipe's
model section arrives typed; :func:`normzoo.models.assemble.assemble` resolves what it is
given again, so a config built by hand is checked before anything is built.
"""

from __future__ import annotations

from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

from normzoo.errors import ConfigError, Problem
from normzoo.models.component import Component
from normzoo.models.family_info import FamilyInfo, FamilyName, family_info
from normzoo.registry.options import pydantic_problems, rule_error, rule_problems
from normzoo.residual.base import Family

Probability = pydantic.confloat(ge=0.0, lt=1.0)


class ModelConfig(BaseModel):
    """Sizes and choices of one model. Defaults are Transformer-base (Vaswani et al. 2017)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    family: FamilyName = Family.ENCODER_DECODER.value
    vocab_size: int | None = Field(default=None, gt=0, description="set from the tokenizer")
    d_model: int = Field(default=512, gt=0)
    heads: int = Field(default=8, gt=0)
    ffn_dim: int = Field(default=2048, gt=0)
    encoder_layers: int = Field(default=6, ge=0)
    decoder_layers: int = Field(default=6, ge=0)
    dropout: Probability = 0.1
    attention_dropout: Probability = 0.0
    activation_dropout: Probability = 0.0
    activation: Literal["relu", "gelu", "silu", "swiglu", "geglu"] = "relu"
    norm: Component = Component(name="layernorm")
    residual: Component = Component(name="pre")
    qk_norm: Component | None = Field(
        default=None,
        description="a norm (any registered one, with its options) on each head's queries and "
        "keys in every attention, before rotary embeddings (QK-norm: OLMo 2, Gemma 3, Qwen3)",
    )
    positions: Literal["sinusoidal", "learned", "rope"] = Field(
        default="sinusoidal",
        description="a table added to the embeddings (sinusoidal, learned), or rotary "
        "embeddings of q and k in every self-attention (rope), which encode relative distance",
    )
    rope_base: float = Field(
        default=10000.0,
        gt=0,
        allow_inf_nan=False,
        description="base of the rotary frequencies (Llama's rope_theta); with positions: rope",
    )
    max_positions: int = Field(default=1024, gt=0)
    kv_heads: int | None = Field(
        default=None,
        ge=1,
        description="key/value heads: None = heads (multi-head), 1 = multi-query, else "
        "grouped-query; fewer shrink the KV cache and the k/v projections",
    )
    embed_scale: bool = Field(
        default=True,
        description="multiply token embeddings by sqrt(d_model) (fairseq); Llama does not",
    )
    fused_qkv: bool = True
    attention_impl: Literal["auto", "sdpa", "explicit"] = Field(
        default="auto",
        description="attention kernel: torch's SDPA, or matmul-softmax-matmul written out; auto "
        "takes the explicit one on a CPU under bf16/fp16, where SDPA's backward is slow",
    )
    attention_backend: Literal["auto", "flash", "efficient", "cudnn", "math"] = Field(
        default="auto",
        description="on a GPU, the SDPA kernel tried first (normzoo.nn.sdpa_choice); auto: "
        "flash without a mask, memory-efficient with one, never cuDNN (it plans every new shape)",
    )
    bias: bool = Field(
        default=True, description="biases in linear layers, norms and the masked-LM head"
    )
    tie_output: bool = Field(default=True, description="output projection = token embedding")
    share_embeddings: bool = Field(
        default=True, description="encoder and decoder share one embedding (joint vocabulary)"
    )
    pad_id: int = Field(default=0, ge=0)
    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> ModelConfig:
        if (info.context or {}).get("fields_only"):  # registry_problems: the rules are known
            return self
        problems = []
        if self.d_model % self.heads:
            problems.append(
                Problem("d_model", f"{self.d_model} is not divisible by heads={self.heads}")
            )
        problems += self._attention_problems()
        problems += [Problem(f"{stack}_layers", f"a {self.family} model needs at least 1")
                     for stack in self.family_info.stacks if getattr(self, f"{stack}_layers") < 1]
        if self.vocab_size is not None and self.pad_id >= self.vocab_size:
            problems.append(
                Problem("pad_id", f"{self.pad_id} is outside the vocabulary ({self.vocab_size})")
            )
        if problems:
            raise rule_error(*problems)
        return self

    def resolved(self, prefix: str = "model") -> ModelConfig:
        """A new config, checked against the registry: ``norm``, ``residual`` and ``qk_norm``
        with their options as the plugins' own signatures read them (``"0.5"`` typed as 0.5).

        Kept out of pydantic validation, which may not return a new object from a frozen
        model's validator: the recipe loader (:func:`normzoo.recipe.from_dict`) calls it and
        reports its problems with the rest, and :func:`~normzoo.models.assemble.assemble`
        calls it on whatever it is given (it is idempotent, and cheap beside a build).
        Raises :class:`ConfigError` with every problem, located under ``prefix``.
        """
        from normzoo.models.resolve import resolve  # torch and the plugins: on first use

        norm, residual, qk_norm, problems = resolve(self)
        if problems:
            raise ConfigError(problems).prefixed(prefix)
        return self.model_copy(update={"norm": norm, "residual": residual, "qk_norm": qk_norm})

    def _attention_problems(self) -> list[Problem]:
        """GQA's groups and RoPE's channel pairs: rules the attention modules would otherwise
        raise on while the model is built, reported here with their key paths (the fields' own
        ranges, ``kv_heads >= 1`` and ``rope_base > 0``, are checked before); an SDPA kernel
        named for a model that never runs SDPA."""
        problems = []
        if self.attention_backend != "auto" and self.attention_impl == "explicit":
            problems.append(Problem(
                "attention_backend", f"{self.attention_backend} names an SDPA kernel, but "
                "attention_impl: explicit never runs SDPA; set attention_impl to auto or sdpa"))
        if self.kv_heads is not None and self.heads % self.kv_heads:
            problems.append(Problem(
                "kv_heads", f"{self.kv_heads} does not divide heads={self.heads}: each key/value "
                "head serves an equal group of query heads (1 = multi-query, heads = multi-head)"))
        head_dim, uneven = divmod(self.d_model, self.heads)
        if self.positions == "rope" and not uneven and head_dim % 2:
            problems.append(Problem(
                "positions", f"rope needs an even head dimension (it rotates channel pairs); "
                f"d_model/heads = {self.d_model}/{self.heads} = {head_dim}"))
        return problems

    def with_vocab(self, vocab_size: int) -> ModelConfig:
        """This model with the tokenizer's vocabulary size (which the recipe leaves open)."""
        if vocab_size < 1:
            raise ConfigError([Problem("model.vocab_size", f"{vocab_size}: must be positive")])
        if self.pad_id >= vocab_size:
            raise ConfigError([Problem("model.pad_id", f"{self.pad_id} is outside the "
                                       f"vocabulary ({vocab_size})")])
        return self.model_copy(update={"vocab_size": vocab_size})

    @property
    def norm_bias(self) -> bool:
        """Whether norms and the masked-LM head keep their biases: with ``bias``, as the
        linear layers do."""
        return self.bias

    @property
    def family_info(self) -> FamilyInfo:
        """What this model's family is (:mod:`normzoo.models.family_info`): ask it rather than
        compare ``family`` with a name."""
        return family_info(self.family)

    @property
    def stack_depths(self) -> dict[str, int]:
        """Each stack this family has, in forward order, with its layers."""
        return {stack: getattr(self, f"{stack}_layers") for stack in self.family_info.stacks}

    @property
    def encoder_depth(self) -> int:
        """N: encoder layers this family actually has."""
        return self.stack_depths.get("encoder", 0)

    @property
    def decoder_depth(self) -> int:
        """M: decoder layers this family actually has."""
        return self.stack_depths.get("decoder", 0)

    @classmethod
    def parse(cls, data: ModelConfig | dict[str, Any], prefix: str = "model") -> ModelConfig:
        """Validate ``data`` (a model section on its own, e.g. from the Python API) and check
        it against the registry (:meth:`resolved`); every problem is reported at once under
        ``prefix``. A recipe's model section is validated with the recipe
        (:func:`normzoo.recipe.from_dict`)."""
        if isinstance(data, ModelConfig):
            return data.resolved(prefix)
        try:
            config = cls.model_validate(data)
        except pydantic.ValidationError as error:
            problems = [p for item in error.errors() for p in rule_problems(item, prefix) or []]
            if not problems:
                problems = pydantic_problems(error, prefix, cls)
            problems += registry_problems(data, problems, prefix)
            raise ConfigError(dict.fromkeys(problems)) from None
        return config.resolved(prefix)


def registry_problems(data: Any, known: list[Problem], prefix: str = "model") -> list[Problem]:
    """The registry's problems with a model section that has ``known`` problems of its own
    (located under ``prefix``): checked with each field that has one at its default, so that
    one error lists both kinds; none where what is left is no model section."""
    if not isinstance(data, dict):
        return []
    faulty = {p.path[len(prefix) + 1:].split(".")[0] for p in known
              if p.path.startswith(prefix + ".")}
    try:
        rest = ModelConfig.model_validate({k: v for k, v in data.items() if k not in faulty},
                                          context={"fields_only": True})
        rest.resolved(prefix)
    except pydantic.ValidationError:
        return []
    except ConfigError as error:
        return error.problems
    return []
