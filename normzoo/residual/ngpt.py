"""nGPT (Loshchilov et al., ICLR 2025, "nGPT: Normalized Transformer with Representation Learning
on the Hypersphere"): every hidden state and every matrix row along d_model is a unit vector, and
each sublayer moves the state part of the way toward its own normalised output,

    h <- Norm(h + alpha_A (Norm(f_A(h)) - h)),     h <- Norm(h + alpha_M (Norm(f_M(h)) - h)),

with Norm(x) = x / |x| and alpha (one per channel, the "eigen learning rates") learned. No norm
sits before a sublayer: its input is already on the sphere. Inside attention the queries and
keys are normalised per head after the rotary embedding and scaled by a learned s_qk, and the
softmax takes sqrt(head_dim) (not 1/sqrt(head_dim)); the feed-forward's pre-activations are
scaled by learned s_u, s_v times sqrt(d_model); the logits are the cosine similarities of the
last state to the output embeddings, scaled per token by a learned s_z. After every optimizer
update (and once at build) the embeddings, the output matrix and every sublayer matrix are
normalised along d_model (``after_step``).

As the paper's code (NVIDIA/ngpt, ``model.py``) writes it: each learned scaling is stored at a
small value and multiplied up in the forward pass, which sets its effective learning rate under
Adam (section 2.5); alpha at 0.05 stored as 1/sqrt(d), s_qk at 1 stored as 1/sqrt(d), s_u and
s_v at 1 stored as 1 (times sqrt(d), on both u and v as the code has it; the paper's eq. 21 puts
sqrt(d) on v alone: the same forward pass, as the output is normalised); s_z at 1 stored as
1/sqrt(d); |alpha| is used. None of them is weight-decayed. Matrices start normal and normalised.
The state entering the first layer is the embedding over its norm held constant
(:func:`onto_sphere`), and each update starts from the state as it arrives: as nGPT-pytorch
computes it, and the rows are unit already (``after_step``), so the values are the paper's, and
the embedding's gradient reaches its rows as both codes' attention inputs pass it, unprojected.
Training equals nGPT-pytorch's where the two store their scalings alike (the test gives the
package the paper's s_qk on q and k, and normzoo's storage of the FFN scale: the package's
s_qk² on q alone is the same forward pass but other Adam steps; ``tests/test_ngpt.py``).
The paper's code also normalises h before each update ("normally, normalization is not
needed"), which projects the residual path's part of that gradient onto each row's tangent
space; normzoo had Norm(embedding), which projected all of it. The division still puts added
positions and the sqrt(d) embedding scale on the sphere. Norm here is ``F.normalize`` (a zero
vector, a pad's embedding, stays zero rather than the code's 0/0).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from normzoo.residual.base import (
    NormFactory,
    Residual,
    ResidualScheme,
    Site,
    StreamEnds,
    Sublayer,
)

# The roles whose matrices write into the stream: normalised along their output (d_model) axis;
# every other role reads from it and is normalised along its input axis.
_WRITES = frozenset({"out", "cross_out", "ffn_out"})


def unit(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """x / |x| along ``dim``: the paper's Norm."""
    return F.normalize(x, p=2.0, dim=dim)


def onto_sphere(x: torch.Tensor) -> torch.Tensor:
    """x / |x| with |x| held constant under autograd: Norm's value, the gradient only scaled.

    The embedding rows are kept unit by ``after_step``, as the paper's code and nGPT-pytorch
    keep them; differentiating through Norm as well would project their gradient onto each
    row's tangent space, which nGPT-pytorch does not, and Adam would take other steps.
    """
    return x / x.norm(p=2.0, dim=-1, keepdim=True).clamp_min(1e-12).detach()


class Scaling(nn.Module):
    """A learned vector used at ``init`` and stored at ``stored``: ``scale * (init / stored)``.

    Storing small and multiplying up makes Adam's steps on the used value ``init / stored``
    times larger (nGPT section 2.5), which is how the paper sets each scaling's own rate.
    """

    def __init__(self, size: int, init: float, stored: float) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((size,), float(stored)))
        self.factor = init / stored

    def forward(self) -> torch.Tensor:
        return self.scale * self.factor

    def optimizer_options(self) -> dict[str, dict[str, float]]:
        return {"scale": {"weight_decay": 0.0}}

    def extra_repr(self) -> str:
        return f"size={self.scale.numel()}, factor={self.factor:.4g}"


class NGPTResidual(Residual):
    """h <- Norm(h + |alpha| (Norm(f(h)) - h)). h arrives unit (``NGPTEnds.begin`` or the last
    update's Norm) and is used as it is, as nGPT-pytorch does: normalising it again, as the
    paper's code does, changes no value but projects the embedding's gradient in the first
    layer, so training would leave the reference's."""

    def __init__(self, dim: int, alpha_init: float) -> None:
        super().__init__()
        self.alpha = Scaling(dim, alpha_init, dim**-0.5)

    def forward(self, h, f: Sublayer):
        return self.step(h, unit(f(h)))

    def step(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return unit(a + self.alpha().abs() * (b - a))

    def terms(self, x: torch.Tensor, branch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(1 - |alpha|) Norm(h) and |alpha| Norm(f(h)): the two points the update interpolates."""
        alpha = self.alpha().abs()
        return (1 - alpha) * unit(x), alpha * unit(branch)


class UnitQueryKey(nn.Module):
    """q, k -> s_qk * Norm(q), s_qk * Norm(k), per head; one s_qk per channel of every head,
    shared by the queries and the keys (with grouped-query attention, one per key head and the
    query heads of its group)."""

    def __init__(self, heads: int, kv_heads: int, head_dim: int, dim: int) -> None:
        super().__init__()
        self.groups, self.kv_heads, self.head_dim = heads // kv_heads, kv_heads, head_dim
        self.s_qk = Scaling(kv_heads * head_dim, 1.0, dim**-0.5)

    def forward(self, q: torch.Tensor, k: torch.Tensor | None):
        s = self.s_qk().view(self.kv_heads, 1, self.head_dim)
        k = None if k is None else unit(k) * s.to(k.dtype)
        s = s.repeat_interleave(self.groups, dim=0)
        return unit(q) * s.to(q.dtype), k


class HiddenScales(nn.Module):
    """hidden, gate -> hidden * s_v sqrt(d), gate * s_u sqrt(d) (the paper's nu and u)."""

    def __init__(self, hidden: int, dim: int, gated: bool) -> None:
        super().__init__()
        self.root = dim**0.5
        self.s_v = Scaling(hidden, 1.0, 1.0)
        self.s_u = Scaling(hidden, 1.0, 1.0) if gated else None

    def forward(self, hidden: torch.Tensor, gate: torch.Tensor | None):
        hidden = hidden * (self.s_v() * self.root).to(hidden.dtype)
        if gate is not None and self.s_u is not None:
            gate = gate * (self.s_u() * self.root).to(gate.dtype)
        return hidden, gate


class NGPTEnds(StreamEnds):
    """In: the embedding scaled onto the sphere (:func:`onto_sphere`). Out: the last state as
    it is (already unit); logits s_z * (E_out h), cosines since E_out's rows and h are unit."""

    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__(None)
        self.s_z = Scaling(vocab, 1.0, dim**-0.5) if vocab else None

    def begin(self, x: torch.Tensor) -> torch.Tensor:
        return onto_sphere(x)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return state

    def logits(self, hidden: torch.Tensor, output: nn.Module) -> torch.Tensor:
        logits = output(hidden)
        return logits if self.s_z is None else logits * self.s_z().to(logits.dtype)


@torch.no_grad()
def normalise_matrices(model: nn.Module) -> None:
    """Every sublayer matrix along d_model (by role), every embedding table's rows and the
    untied output matrix's rows to unit length."""
    for module in model.modules():
        role_weights = getattr(module, "role_weights", None)
        if callable(role_weights):
            for role, weight in role_weights().items():
                weight.copy_(unit(weight, 0 if role in _WRITES else 1))
        elif isinstance(module, nn.Embedding):
            module.weight.copy_(unit(module.weight, 1))
    output = getattr(model, "output", None)
    if isinstance(getattr(output, "weight", None), nn.Parameter):
        output.weight.copy_(unit(output.weight, 1))


class NGPT(ResidualScheme):
    """nGPT (Loshchilov 2025): states and matrix rows on the unit sphere, h <- Norm(h + alpha
    (Norm(f(h)) - h)), unit q and k scaled by s_qk, scaled cosine logits."""

    description = ("nGPT: h <- Norm(h + a (Norm(f(h)) - h)), unit q, k and matrix rows, scaled "
                   "cosine logits (Loshchilov et al. 2025)")

    def __init__(
        self,
        stack,
        alpha_init: Annotated[float, Field(gt=0)] = 0.05,
    ) -> None:
        super().__init__(stack)
        self.alpha_init = alpha_init

    def residual(self, site: Site, make_norm: NormFactory) -> Residual:
        return NGPTResidual(self.stack.dim, self.alpha_init)

    def attention_qk(self, site: Site) -> nn.Module | None:
        stack = self.stack
        return UnitQueryKey(stack.heads, stack.kv_heads, stack.head_dim, stack.dim)

    def attention_scale(self, site: Site) -> float | None:
        return self.stack.head_dim**0.5

    def ffn_scales(self, site: Site, hidden: int, gated: bool) -> nn.Module | None:
        return HiddenScales(hidden, self.stack.dim, gated)

    def init_weights(self, site: Site, weights: Mapping[str, torch.Tensor]) -> None:
        """Normal, as the paper's code draws every matrix; ``after_step`` normalises them."""
        for weight in weights.values():
            nn.init.normal_(weight, std=self.stack.dim**-0.5)

    def ends(self, make_norm: NormFactory) -> StreamEnds:
        vocab = self.stack.vocab if self.stack.stack == "decoder" else 0
        return NGPTEnds(vocab, self.stack.dim)

    @classmethod
    def after_step(cls, model: nn.Module) -> None:
        normalise_matrices(model)

    @classmethod
    def recipe_problem(cls, options: Mapping[str, Any], strategy: str) -> str | None:
        if strategy == "fsdp":
            return ("nGPT normalises whole matrix rows after every update and FSDP shards "
                    "them; use trainer.strategy ddp")
        return None
