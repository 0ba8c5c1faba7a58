"""The residual-scheme contract: one small interface per axis of variation.

For every sublayer f of every layer of a stack a scheme decides how the residual connection
combines the stream and f (``residual``: a :class:`Residual` reading like the formula), what f
carries inside (``inner_norm``, ``attention_qk``, ``attention_scale``, ``ffn_scales``), how f's
weights are initialised by role (``init_weights``, ``init_parameters``), the stack's ends
(``embedding_norm``, ``ends``), state set from data (``needs_data_init``, ``data_init``...), the
constraint kept after every update (``after_step``) and what a recipe must not combine it with
(``recipe_problem``). The model code (:mod:`normzoo.models`) calls only these hooks, so no scheme
is special-cased.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import nn

# Makes one fresh norm of the stream's width (d_model); the model decides which norm.
NormFactory = Callable[[], nn.Module]
Sublayer = Callable[[torch.Tensor], torch.Tensor]
# The residual stream: one tensor, or several for multi-stream schemes (ResiDual's two streams).
Stream = Any


class Family(str, enum.Enum):
    """The three model families, named here once (:mod:`normzoo.models.family_info` says
    what each is); schemes' constants depend on which one they are in."""

    ENCODER = "encoder"  # BERT-style, N encoder layers
    DECODER = "decoder"  # GPT-style, M decoder layers
    ENCODER_DECODER = "encoder_decoder"  # translation, N encoder and M decoder layers


class SublayerKind(str, enum.Enum):
    SELF_ATTN = "self_attn"
    CROSS_ATTN = "cross_attn"
    FFN = "ffn"


# Weight roles, independent of how a block stores its matrices (fused qkv or not).
ATTENTION_ROLES = ("q", "k", "v", "out")
CROSS_ROLES = ("cross_q", "cross_k", "cross_v", "cross_out")
FFN_ROLES = ("ffn_in", "ffn_gate", "ffn_out")


@dataclass(frozen=True)
class StackInfo:
    """Which stack a scheme is building, in which family, both depths, the stream width and the
    attention heads.

    ``encoder_layers`` is N and ``decoder_layers`` is M in the papers' notation; the depth of a
    stack that the family does not have is 0. ``heads``, ``kv_heads`` and ``vocab`` are 0 where
    the builder did not say (a scheme built by hand in a test).
    """

    family: Family
    stack: str  # "encoder" or "decoder"
    encoder_layers: int
    decoder_layers: int
    dim: int  # d_model, the width of the residual stream
    heads: int = 0  # query heads of every attention
    kv_heads: int = 0  # key/value heads (grouped-query attention: fewer than heads)
    vocab: int = 0  # the vocabulary the model's logits range over (StreamEnds.logits)

    def __post_init__(self) -> None:
        if self.stack not in ("encoder", "decoder"):
            raise ValueError(f"stack must be 'encoder' or 'decoder', not {self.stack!r}")
        if self.depth < 1:
            raise ValueError(f"the {self.stack} stack needs at least one layer, got {self.depth}")

    @property
    def depth(self) -> int:
        return self.encoder_layers if self.stack == "encoder" else self.decoder_layers

    @property
    def head_dim(self) -> int:
        """The width of one attention head (0 where ``heads`` is not known)."""
        return self.dim // self.heads if self.heads else 0

    @property
    def has_cross_attention(self) -> bool:
        return self.stack == "decoder" and self.family is Family.ENCODER_DECODER

    @property
    def sublayers_per_layer(self) -> int:
        return 3 if self.has_cross_attention else 2

    @property
    def num_sublayers(self) -> int:
        """Residual connections in the stack (Admin's "number of residual layers")."""
        return self.depth * self.sublayers_per_layer


@dataclass(frozen=True)
class Site:
    """One sublayer of one layer of one stack."""

    stack: StackInfo
    layer: int  # 0-based layer index within the stack
    kind: SublayerKind

    @property
    def index(self) -> int:
        """0-based position among the stack's residual connections, in forward order."""
        cross = [SublayerKind.CROSS_ATTN] if self.stack.has_cross_attention else []
        order = [SublayerKind.SELF_ATTN, *cross, SublayerKind.FFN]
        return self.layer * len(order) + order.index(self.kind)


@dataclass(frozen=True)
class PlainForm:
    """A residual connection read as a plain Post-LN ``LN(x + f(x))`` or Pre-LN
    ``x + f(LN(x))`` one, the form ``transformers``' architectures compute, once its constants
    are folded into the weights: the branch's output takes ``branch_scale`` (a float or a
    per-channel vector, multiplied into the branch's last matrix and bias); the norm's affine
    weight and bias take ``norm_scale`` (a norm's output times s is the same norm with its gain
    and bias times s); and its ε is multiplied by ``eps_scale`` (LN is scale-invariant:
    ``LN(a x + y) = LN(x + y/a)`` with ε/a²). ``folded`` says in words what was moved into the
    weights, for the model card, and ``constant`` the value, per stack (``α = 1.86``)."""

    placement: Literal["post", "pre"]
    branch_scale: torch.Tensor | float = 1.0
    norm_scale: float = 1.0
    eps_scale: float = 1.0
    folded: str = ""
    constant: str = ""

    def pre_norm_problem(self) -> str | None:
        """Why this is not Pre-LN's ``x + f(s * norm(x))`` (Llama's layer, ``s`` multiplied
        into the norm's gain), or None where it is."""
        if self.placement != "pre":
            return "a Post-LN placement"
        scaled = not isinstance(self.branch_scale, float) or self.branch_scale != 1.0
        return "its branch output is scaled" if scaled else None


class Residual(nn.Module):
    """One residual connection: ``forward(stream, f) -> stream``.

    Subclasses implement the formula of one scheme; ``f`` is the sublayer (with its dropout),
    called on whatever the formula feeds it. One that sets ``takes_padding_mask`` (Admin's
    profiling skips pads) is called ``forward(stream, f, padding_mask=m)``, ``m`` bool ``[batch,
    time]`` over the stream's positions, True = pad, or None: an argument, not global state.
    """

    takes_padding_mask: ClassVar[bool] = False

    def forward(self, x: Stream, f: Sublayer) -> Stream:  # pragma: no cover - interface
        raise NotImplementedError

    def optimizer_options(self) -> dict[str, dict[str, float]]:
        """What this connection's own parameters need from the optimizer, by local name:
        ``{"weight_decay": w, "lr_scale": s}``, either key optional (a 2-D mixing matrix decay
        would pull toward 0). Empty by default: each parameter gets the guess from its rank."""
        return {}

    def plain_form(self) -> PlainForm | str:
        """This connection as a plain Post-LN or Pre-LN one (:class:`PlainForm`), for the
        Hugging Face exports, or why it has none, in words (the default: a connection an
        export does not know). A subclass that changes ``forward`` must not inherit its
        parent's form: the built-ins answer for their exact class only."""
        return (f"no transformers architecture computes {type(self).__name__}: only Post-LN, "
                "Pre-LN and the schemes that fold into them export")

    def terms(self, x: torch.Tensor, branch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The two terms the connection sums, from the stream ``x`` it receives and the output
        ``branch`` of its sublayer: ``(stream term, branch term)``.

        The diagnostics' branch ratio compares their sizes, so a scheme that scales either term
        (ReZero's a, LayerScale's l, DeepNorm's alpha, Admin's w) or normalises the branch
        (Sandwich) returns them as its formula adds them; the default is ``x + f(x)``."""
        return x, branch


class StreamEnds(nn.Module):
    """The two ends of a stack: stream state from embeddings, output from the final state.
    The default has a single-tensor stream and an optional final norm."""

    def __init__(self, final_norm: nn.Module | None = None) -> None:
        super().__init__()
        self.final_norm = final_norm

    def begin(self, x: torch.Tensor) -> Stream:
        return x

    def forward(self, state: Stream) -> torch.Tensor:
        return state if self.final_norm is None else self.final_norm(state)

    def logits(self, hidden: torch.Tensor, output: nn.Module) -> torch.Tensor:
        """A decoder's logits from its output ``hidden`` and the model's output projection
        ``output`` (the tied embedding or a matrix; its weight is ``output.weight`` or
        ``output.tied.weight``): by default ``output(hidden)``. A scheme whose logits leave
        another way overrides it (nGPT's cosine similarity to the normalised embeddings, scaled
        per token by a learned s_z)."""
        return output(hidden)


class ResidualScheme:
    """Base class of residual schemes; subclasses override the hooks they change.

    Options are keyword arguments of ``__init__`` after ``stack``; normzoo validates them from
    the type hints (``Annotated[float, Field(gt=0)]`` works), so a scheme never parses options.
    """

    description: ClassVar[str] = ""

    def __init__(self, stack: StackInfo) -> None:
        self.stack = stack

    # -- per sublayer -------------------------------------------------------------------------
    def residual(self, site: Site, make_norm: NormFactory) -> Residual:
        """The residual connection module for ``site``."""
        raise NotImplementedError

    def inner_norm(self, site: Site) -> bool:
        """Whether f carries a norm inside it (before W_o / before the second FFN matrix)."""
        return False

    def attention_qk(self, site: Site) -> nn.Module | None:
        """A module ``forward(q, k) -> (q, k)`` on the queries and keys of ``site``'s attention,
        each ``[batch, heads, positions, head_dim]``, after the rotary embedding (and after
        ``model.qk_norm``): the keys enter the KV cache as it returns them, and ``k`` is None
        when they come from it (cross-attention's, computed once per source). None (the
        default) leaves them as they are. One module sees both, so a scale can be shared by q and k
        (nGPT's s_qk)."""
        return None

    def attention_scale(self, site: Site) -> float | None:
        """What ``site``'s attention multiplies q·k by before the softmax; None (the default):
        1/sqrt(head_dim). nGPT, whose q and k are unit vectors, uses sqrt(head_dim)."""
        return None

    def ffn_scales(self, site: Site, hidden: int, gated: bool) -> nn.Module | None:
        """A module ``forward(hidden, gate) -> (hidden, gate)`` on the pre-activations of
        ``site``'s feed-forward, ``hidden`` wide: ``hidden`` is ``ffn_in(x)`` (the activation's
        input), ``gate`` is ``ffn_gate(x)`` when ``gated`` (SwiGLU, GEGLU) and None otherwise.
        None (the default) leaves them as they are; nGPT scales both (s_v and s_u)."""
        return None

    def init_weights(self, site: Site, weights: Mapping[str, torch.Tensor]) -> None:
        """Re-initialise f's weights by role (``q``, ``v``, ``ffn_out``, ``cross_v``...)."""

    def init_parameters(self, site: Site, weights: Mapping[str, torch.Tensor],
                        biases: Mapping[str, torch.Tensor]) -> None:
        """Re-initialise f's weights and biases by role; ``biases`` is empty without biases.

        The default calls :meth:`init_weights`, so a scheme that only rescales matrices (the
        usual case, and every plugin written before this hook) overrides that one. A scheme
        whose reference code also initialises biases (torchscale's DeepNorm and Sub-LN scale
        them; fairseq 0.12, which ResiDual's code runs on, keeps ``nn.Linear``'s) overrides this."""
        self.init_weights(site, weights)

    # -- stack ends ---------------------------------------------------------------------------
    def embedding_norm(self) -> bool:
        """Whether the embeddings are normalised before the first layer."""
        return False

    def ends(self, make_norm: NormFactory) -> StreamEnds:
        """How the stream starts and how the stack's output is read from it."""
        return StreamEnds(None)

    # -- data-dependent initialisation ---------------------------------------------------------
    # Class methods on the whole model: one forward pass sets the state of every stack (Admin
    # profiles both of a translation model in one pass), and the training task calls them
    # without knowing which scheme built the model.
    @classmethod
    def needs_data_init(cls, model: nn.Module) -> bool:
        """Whether ``model`` still needs :meth:`data_init`: True before the first update of a
        scheme that sets state from data; False once set. Asked on the first batch of a run at
        step 0 only: a resumed run is not asked, and takes the state from its checkpoint's
        ``state_dict``, which must carry it (a parameter or buffer)."""
        return False

    @classmethod
    def data_init(cls, model: nn.Module, run_forward: Callable[[], Any]) -> dict[str, Any]:
        """Set the state from a forward pass, ``run_forward()`` on the first training batch in
        training mode (the caller forks the generators, so the run draws the same masks either
        way), and return it as plain data: with several processes rank 0's is broadcast and
        written into every one with :meth:`load_data_init`. ``model`` is the assembled model
        (not Lightning's module). Gradients are not turned off for it (decorate with
        ``torch.no_grad``, as Admin's ``profile`` is); ``run_forward`` may be called again,
        each call a full pass on the same batch with fresh dropout masks."""
        return {}

    @classmethod
    def load_data_init(cls, model: nn.Module, state: Mapping[str, Any]) -> None:
        """Write a state :meth:`data_init` returned (rank 0's) into ``model``."""

    @classmethod
    def data_init_state(cls, model: nn.Module) -> dict[str, Any] | None:
        """The state as a checkpoint records it beside the weights (``checkpoint["normzoo"]
        ["data_init"]``, a record: nothing reads it back), or None (not set, or no such state)."""
        return None

    @classmethod
    def describe_data_init(cls, state: Mapping[str, Any]) -> str:
        """One log line for a state :meth:`data_init` set."""
        return f"{cls.__name__} initialised from data: {dict(state)}"

    # -- after every update ---------------------------------------------------------------------
    @classmethod
    def after_step(cls, model: nn.Module) -> None:
        """Called after every optimizer update (not the batches an accumulation only
        accumulates) with the updated weights, on every process, and once on the freshly built
        model: a scheme whose weights live on a constraint set projects them back onto it
        (nGPT's unit rows; a sublayer's matrices by role: its ``role_weights()``). Under FSDP a
        process holds a shard of each flat parameter: needing whole rows, refuse FSDP in
        :meth:`recipe_problem`."""

    @classmethod
    def recipe_problem(cls, options: Mapping[str, Any], strategy: str) -> str | None:
        """Why the scheme with ``options`` cannot train under ``trainer.strategy`` (a message
        for the recipe's ``model.residual``), or None when it can."""
        return None

    # -- compatibility ------------------------------------------------------------------------
    def normalizes_stream(self) -> bool:
        """Whether a norm sits on the residual stream itself (Post-LN placement)."""
        return False


def final_norm_ends(make_norm: NormFactory) -> StreamEnds:
    """Ends for pre-norm schemes: the un-normalised stream needs one norm after the stack."""
    return StreamEnds(make_norm())
