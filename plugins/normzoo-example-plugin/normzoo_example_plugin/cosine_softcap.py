"""Pre-LN with cosine attention, a gain on the feed-forward's pre-activations, soft-capped logits
and max-norm token embeddings: four ways of keeping a Transformer's magnitudes in check, each
written through one hook of normzoo's residual-scheme contract.

* **Cosine attention** (``attention_qk``, ``attention_scale``). Queries and keys are
  L2-normalised per head, after the rotary embedding, so a score is a cosine whatever the size
  of the activations, and attention logits cannot grow with the weights (Henry et al. 2020,
  "Query-Key Normalization for Transformers"; Swin V2's scaled cosine attention). How sharp a
  head attends is a learned temperature tau per query head, multiplied into the queries
  (``tau q / |q|``): the keys enter the KV cache as unit vectors, so a cached key does not
  depend on a temperature. tau = exp(log_tau) stays positive and starts at 1. The scores are
  then multiplied by a fixed sqrt(head_dim) instead of 1/sqrt(head_dim): the cosine of two
  random directions has a standard deviation of 1/sqrt(head_dim), so at tau = 1 the scores start
  out as spread as a standard attention's on unit-variance q and k.
* **A learned per-channel gain on the feed-forward's pre-activations** (``ffn_scales``):
  ``act(g * W_1 x)``. W_1 is weight-decayed and g is not, so each hidden unit keeps the
  sharpness of its nonlinearity while decay shrinks the matrix. With a gated activation
  (SwiGLU, GEGLU) only the activation's input takes g: on the linear gate a gain would merely
  rescale the columns of W_2.
* **Soft-capped logits** (``StreamEnds.logits``): Gemma 2's ``c * tanh(z / c)`` (Gemma Team
  2024, ``final_logit_softcapping = 30``), about z while |z| is well below c and never beyond c,
  so no logit runs away. It applies where normzoo computes logits from a decoder stack
  (decoder-only and encoder-decoder models); an encoder-only model's masked-LM head computes
  its own logits, uncapped.
* **Max-norm token embeddings** (``after_step``): after every optimizer update, and once on the
  freshly built model, each row of the token-embedding tables longer than ``embedding_max_norm``
  is scaled back to that length (the renormalisation ``nn.Embedding(max_norm=...)`` applies to
  the rows it looks up, here to every row before the next forward pass). With tied output
  embeddings this also bounds each logit before the cap. normzoo draws the rows with a length of
  about 1, so the default 1.0 keeps them at their initial scale. The rows are whole only in an
  unsharded model: FSDP is refused (``recipe_problem``).

The temperatures and the gains are declared free of weight decay (``optimizer_options``): the
log-temperature is stored ``[heads, 1, 1]``, to broadcast over the queries, and normzoo's
default would decay a parameter of two or more dimensions (pulling every head toward tau = 1);
the gains exist to keep the scale decay takes from W_1.

Only normzoo's public API is used: ``normzoo.residual``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from normzoo.plugin import NormFactory, ResidualScheme, Site, StackInfo, StreamEnds

from .residual import PreNormResidual

# normzoo draws token-embedding rows from N(0, 1/d_model): a length of about 1.
DEFAULT_MAX_NORM = 1.0


class CosineSoftCapResidual(PreNormResidual):
    """Pre-LN's ``x <- x + f(LN(x))``, in a class of its own so that an export refuses it."""

    def plain_form(self) -> str:
        """Why there is none: the connection is Pre-LN's, but an export would drop what the
        sublayers and the logits do here."""
        return ("cosine attention with per-head temperatures, gained feed-forward "
                "pre-activations and soft-capped logits: no transformers architecture computes "
                "them")


class CosineQueryKey(nn.Module):
    """q, k -> tau * q / |q|, k / |k| per head: the scores become cosines times a temperature.

    The temperature is learned per query head (with grouped-query attention several query
    heads share a key head but keep their own tau) and applied to the queries only, so the keys
    that enter the KV cache are plain unit vectors.
    """

    def __init__(self, heads: int) -> None:
        super().__init__()
        self.log_temperature = nn.Parameter(torch.zeros(heads, 1, 1))

    def temperature(self) -> torch.Tensor:
        """tau per query head, ``[heads, 1, 1]``: exp keeps it positive."""
        return self.log_temperature.exp()

    def forward(
        self, q: torch.Tensor, k: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        q = F.normalize(q, dim=-1) * self.temperature().to(q.dtype)
        return q, None if k is None else F.normalize(k, dim=-1)

    def optimizer_options(self) -> dict[str, dict[str, float]]:
        """Three dimensions, so the default would decay it: declared free of weight decay."""
        return {"log_temperature": {"weight_decay": 0.0}}


class ChannelGain(nn.Module):
    """hidden, gate -> g * hidden, gate: a learned gain per hidden channel (1 at init) on the
    activation's input; a gate, if any, passes unchanged."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.ones(hidden))

    def forward(
        self, hidden: torch.Tensor, gate: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return hidden * self.gain.to(hidden.dtype), gate

    def optimizer_options(self) -> dict[str, dict[str, float]]:
        """The gain keeps the scale that weight decay takes from W_1: it must not decay too."""
        return {"gain": {"weight_decay": 0.0}}


class SoftCapEnds(StreamEnds):
    """A final norm; logits ``c * tanh(z / c)``; and, for :meth:`CosineSoftCap.after_step`, the
    longest a token-embedding row (of the ``vocab`` rows a token id indexes) may be."""

    def __init__(
        self, final_norm: nn.Module, cap: float, max_norm: float | None, vocab: int
    ) -> None:
        super().__init__(final_norm)
        self.cap, self.max_norm, self.vocab = cap, max_norm, vocab

    def logits(self, hidden: torch.Tensor, output: nn.Module) -> torch.Tensor:
        """The output projection's logits z, soft-capped: tanh in float32, as z is large where
        the cap matters and bf16 would round it."""
        z = output(hidden)
        return (self.cap * torch.tanh(z.float() / self.cap)).to(z.dtype)

    def extra_repr(self) -> str:
        return f"cap={self.cap}, max_norm={self.max_norm}, vocab={self.vocab}"


@torch.no_grad()
def cap_embedding_rows(model: nn.Module, max_norm: float, vocab: int) -> None:
    """Scale every row longer than ``max_norm`` of each embedding table indexed by token id back
    to that length, with the renormalisation ``nn.Embedding(max_norm=...)`` uses. The contract
    names no table, so they are found by size: ``vocab`` rows (the token tables, shared or not;
    a table of learned positions only if it happens to have exactly as many rows)."""
    for module in model.modules():
        if isinstance(module, nn.Embedding) and module.num_embeddings == vocab:
            module.weight.copy_(torch.renorm(module.weight, p=2, dim=0, maxnorm=max_norm))


class CosineSoftCap(ResidualScheme):
    """Pre-LN with cosine attention, gained FFN pre-activations, soft-capped logits and max-norm
    token embeddings."""

    def __init__(
        self,
        stack: StackInfo,
        logit_cap: Annotated[float, Field(gt=0)] = 30.0,
        embedding_max_norm: Annotated[float, Field(gt=0)] | None = DEFAULT_MAX_NORM,
    ) -> None:
        super().__init__(stack)
        self.logit_cap, self.embedding_max_norm = logit_cap, embedding_max_norm

    def residual(self, site: Site, make_norm: NormFactory) -> CosineSoftCapResidual:
        """Pre-LN's connection: the bounds sit in the sublayers and at the ends, not here."""
        return CosineSoftCapResidual(make_norm())

    def attention_qk(self, site: Site) -> nn.Module | None:
        """Cosine attention in every attention of the stack, self and cross."""
        return CosineQueryKey(self.stack.heads or 1)

    def attention_scale(self, site: Site) -> float | None:
        """sqrt(head_dim): scores of unit q and k start as spread as a standard attention's."""
        head_dim = self.stack.head_dim
        return head_dim**0.5 if head_dim else None

    def ffn_scales(self, site: Site, hidden: int, gated: bool) -> nn.Module | None:
        """A gain on the activation's input, gated or not (the gate is left alone)."""
        return ChannelGain(hidden)

    def ends(self, make_norm: NormFactory) -> StreamEnds:
        """A final norm, as Pre-LN needs, and the capped logits; they carry the max norm,
        which ``after_step`` reads from the model."""
        return SoftCapEnds(make_norm(), self.logit_cap, self.embedding_max_norm, self.stack.vocab)

    @classmethod
    def after_step(cls, model: nn.Module) -> None:
        """The max-norm constraint, read from the model's own ends (every stack's carries the
        same options): a class method sees the model, not the recipe."""
        ends = next((m for m in model.modules() if isinstance(m, SoftCapEnds)), None)
        if ends is not None and ends.max_norm is not None:
            cap_embedding_rows(model, ends.max_norm, ends.vocab)

    @classmethod
    def recipe_problem(cls, options: Mapping[str, Any], strategy: str) -> str | None:
        """FSDP while rows are capped: a process holds a shard of the table, not whole rows."""
        if strategy == "fsdp" and options.get("embedding_max_norm", DEFAULT_MAX_NORM) is not None:
            return ("embedding_max_norm rescales whole embedding rows after every update and "
                    "FSDP shards them; use trainer.strategy ddp, or embedding_max_norm: null")
        return None
