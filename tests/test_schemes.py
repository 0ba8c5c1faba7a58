"""Formula tests for every residual scheme, on stub sublayers and stub norms.

Each scheme's ``Residual`` must compute exactly its paper's formula: Post-LN (Vaswani et al. 2017),
Pre-LN (Xiong et al. 2020), Sandwich-LN (Ding et al. 2021), Peri-LN (Kim et al. 2025), DeepNorm
(Wang et al. 2022, DeepNet), Sub-LN (Wang et al. 2022, Magneto), ReZero (Bachlechner et al. 2020),
LayerScale (Touvron et al. 2021), Mix-LN (Li et al. 2024), ResiDual (Xie et al. 2023), Admin
(Liu et al. 2020); each module of ``normzoo/residual/`` restates its formula in its docstring,
and docs/schemes.md's table lists them. The test recomputes that formula
by hand from the same stubs and compares. The stubs are chosen so that formula mistakes show:

* every norm is a *different* fixed nonlinear map (``scale_k * tanh(x) + shift_k``), so
  swapping the norm's position, applying it twice, or using one instance for two roles changes
  the output, and each norm counts its calls;
* the sublayer ``f`` is a fixed random affine map, which commutes neither with the norms nor with
  scaling by alpha/w, and counts its calls too (a scheme must call f once: with dropout, a second
  call would give a different branch).

The constants (DeepNorm alpha/beta, Sub-LN gamma, Admin w, LayerScale init) are pinned with
literal numbers computed by hand from the papers' formulas, so that changing any constant in
``normzoo/residual/`` fails a test. Weight-init tests on assembled models are in
``test_scheme_init.py``.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from registered import BUILTIN_SCHEMES, builtin
from torch import nn

from normzoo import registry
from normzoo.residual import Family, Site, StackInfo, StreamEnds, SublayerKind
from normzoo.residual.admin import Admin, AdminResidual, profile
from normzoo.residual.deepnorm import DeepNorm, deepnorm_constants
from normzoo.residual.layerscale import LayerScale
from normzoo.residual.lns import LNS
from normzoo.residual.mixln import MixLN
from normzoo.residual.peri import PeriLN
from normzoo.residual.post import PostLN
from normzoo.residual.pre import PreLN
from normzoo.residual.resi_dual import ResiDual, ResiDualEnds
from normzoo.residual.rezero import ReZero
from normzoo.residual.sandwich import SandwichLN
from normzoo.residual.subln import SubLN, subln_gamma

DIM = 8

# The schemes whose formulas this file restates on stubs (single-stream connections, by their
# classes); Hyper-Connections, mHC and nGPT have theirs in test_hyper.py and test_ngpt.py. The
# hooks every scheme has (embedding_norm, inner_norm, normalizes_stream) are checked on every
# built-in: ANY_SCHEME.
SCHEMES = {
    "post": PostLN,
    "pre": PreLN,
    "sandwich": SandwichLN,
    "deepnorm": DeepNorm,
    "subln": SubLN,
    "rezero": ReZero,
    "layerscale": LayerScale,
    "peri": PeriLN,
    "mixln": MixLN,
    "resi_dual": ResiDual,
    "admin": Admin,
    "lns": LNS,
}

ANY_SCHEME = builtin("residual")

# N=18 and M=6 differ, so a constant that reads N where it should read M (or the other way
# round) changes value.
STACKS = {
    "encoder_only": StackInfo(Family.ENCODER, "encoder", 18, 0, DIM),
    "decoder_only": StackInfo(Family.DECODER, "decoder", 0, 6, DIM),
    "enc_dec_encoder": StackInfo(Family.ENCODER_DECODER, "encoder", 18, 6, DIM),
    "enc_dec_decoder": StackInfo(Family.ENCODER_DECODER, "decoder", 18, 6, DIM),
}

# DeepNorm alpha for STACKS, by hand: (2*18)^(1/4) = sqrt(6); (2*6)^(1/4);
# 0.81 * (18^4 * 6)^(1/16); (3*6)^(1/4).
DEEPNORM_ALPHA = {
    "encoder_only": 2.4494897427831781,
    "decoder_only": 1.8612097182041992,
    "enc_dec_encoder": 1.8661115389303917,
    "enc_dec_decoder": 2.0597671439071178,
}

# Admin w for STACKS: sqrt((L+1)/ln(L+1) - 1) with L = 2*18, 2*6, 2*18 and 3*6 residual
# connections (a decoder layer with cross-attention has three).
ADMIN_OMEGA = {
    "encoder_only": 3.0408390381813574,
    "decoder_only": 2.0170092186865782,
    "enc_dec_encoder": 3.0408390381813574,
    "enc_dec_decoder": 2.3351321517222667,
}


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


class StubNorm(nn.Module):
    """A recognisable stand-in for a norm: ``scale * tanh(x) + shift``, distinct per instance."""

    def __init__(self, index: int, dim: int) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(1000 + index)
        self.index = index
        self.scale = torch.rand(dim, generator=gen) + 0.5
        self.shift = torch.randn(dim, generator=gen)
        self.calls = 0

    def map(self, x: torch.Tensor) -> torch.Tensor:
        """The pure map, for the test's own formula (does not count as a call)."""
        return self.scale * torch.tanh(x) + self.shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.map(x)


class NormMaker:
    """``make_norm`` for a scheme: hands out numbered StubNorms and keeps them for the test."""

    def __init__(self, dim: int = DIM) -> None:
        self.dim = dim
        self.made: list[StubNorm] = []

    def __call__(self) -> StubNorm:
        norm = StubNorm(len(self.made), self.dim)
        self.made.append(norm)
        return norm


class StubSublayer:
    """f(h) = h W + b with fixed random W, b; counts calls."""

    def __init__(self, dim: int = DIM, seed: int = 7, scale: float = 1.0) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.weight = scale * torch.randn(dim, dim, generator=gen) / math.sqrt(dim)
        self.bias = scale * torch.randn(dim, generator=gen)
        self.calls = 0

    def map(self, h: torch.Tensor) -> torch.Tensor:
        return h @ self.weight + self.bias

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.map(h)


def stream(seed: int = 3) -> torch.Tensor:
    return torch.randn(2, 5, DIM, generator=torch.Generator().manual_seed(seed)) * 2


def build(name: str, stack: StackInfo, kind=SublayerKind.FFN, layer: int = 0, **options):
    """One residual module of scheme ``name`` plus the norms it made and a fresh stub f."""
    scheme = SCHEMES[name](stack, **options)
    maker = NormMaker()
    residual = scheme.residual(Site(stack, layer, kind), maker)
    return scheme, residual, maker.made, StubSublayer()


def assert_called_once_each(norms: list[StubNorm], f: StubSublayer) -> None:
    assert f.calls == 1, "f must be called exactly once per residual connection"
    assert [n.calls for n in norms] == [1] * len(norms), "each norm is applied exactly once"


ALL_STACKS = pytest.mark.parametrize("stack_name", list(STACKS))
ALL_KINDS = pytest.mark.parametrize("kind", list(SublayerKind))


# -- registry: the names in docs/schemes.md's table (pyproject.toml's entry points) ----------------


@pytest.mark.parametrize("name", list(SCHEMES))
def test_registry_name_resolves_to_scheme_class(name: str) -> None:
    assert registry.residuals.get(name) is SCHEMES[name]


# -- one sublayer: each scheme's formula -------------------------------------------------------


@ALL_STACKS
@ALL_KINDS
def test_post_ln(stack_name: str, kind: SublayerKind) -> None:
    """post: x <- LN(x + f(x))."""
    _, residual, norms, f = build("post", STACKS[stack_name], kind)
    x = stream()
    out = residual(x, f)
    (ln,) = norms
    torch.testing.assert_close(out, ln.map(x + f.map(x)))
    assert_called_once_each(norms, f)


@ALL_STACKS
@ALL_KINDS
def test_pre_ln(stack_name: str, kind: SublayerKind) -> None:
    """pre: x <- x + f(LN(x))."""
    _, residual, norms, f = build("pre", STACKS[stack_name], kind)
    x = stream()
    out = residual(x, f)
    (ln,) = norms
    torch.testing.assert_close(out, x + f.map(ln.map(x)))
    assert_called_once_each(norms, f)


@ALL_STACKS
@ALL_KINDS
@pytest.mark.parametrize("layer", [0, 1, 5])
def test_layernorm_scaling(stack_name: str, kind: SublayerKind, layer: int) -> None:
    """lns: x <- x + f(LN(x) / sqrt(l)), l = layer + 1 (the reference's 1/sqrt(layer_index+1)),
    the same scale for every sublayer of a layer."""
    _, residual, norms, f = build("lns", STACKS[stack_name], kind, layer)
    x = stream()
    (ln,) = norms
    torch.testing.assert_close(residual(x, f), x + f.map(ln.map(x) / math.sqrt(layer + 1)))
    assert_called_once_each(norms, f)


def _matches_some_assignment(out, x, f, norms) -> bool:
    """x + LN_b(f(LN_a(x))) for an assignment of two distinct norms to the in/out roles.

    Which instance is called "in" is a naming choice; what matters is that two different norms
    sit on both sides of f.
    """
    return any(
        torch.allclose(out, x + b.map(f.map(a.map(x))), rtol=1e-5, atol=1e-5)
        for a, b in itertools.permutations(norms)
    )


@pytest.mark.parametrize("name", ["sandwich", "peri"])
@ALL_STACKS
@ALL_KINDS
def test_sandwich_and_peri_ln(name: str, stack_name: str, kind: SublayerKind) -> None:
    """sandwich, peri: x <- x + LN(f(LN(x))), with two separate norms."""
    _, residual, norms, f = build(name, STACKS[stack_name], kind)
    x = stream()
    out = residual(x, f)
    assert len(norms) == 2 and norms[0] is not norms[1]
    assert _matches_some_assignment(out, x, f, norms)
    assert_called_once_each(norms, f)


@ALL_STACKS
@ALL_KINDS
def test_deepnorm(stack_name: str, kind: SublayerKind) -> None:
    """deepnorm: x <- LN(alpha*x + f(x)) with the family's alpha."""
    _, residual, norms, f = build("deepnorm", STACKS[stack_name], kind)
    x = stream()
    out = residual(x, f)
    (ln,) = norms
    alpha = DEEPNORM_ALPHA[stack_name]
    torch.testing.assert_close(out, ln.map(alpha * x + f.map(x)))
    assert_called_once_each(norms, f)


@ALL_STACKS
@ALL_KINDS
def test_subln_residual_is_pre_ln(stack_name: str, kind: SublayerKind) -> None:
    """subln: the residual connection is Pre-LN's x <- x + f(LN(x)) (extra LNs sit inside f)."""
    _, residual, norms, f = build("subln", STACKS[stack_name], kind)
    x = stream()
    out = residual(x, f)
    (ln,) = norms
    torch.testing.assert_close(out, x + f.map(ln.map(x)))
    assert_called_once_each(norms, f)


@ALL_STACKS
@ALL_KINDS
def test_rezero(stack_name: str, kind: SublayerKind) -> None:
    """rezero: x <- x + a*f(x), no norm, a = 0 at init (so the layer is the identity)."""
    _, residual, norms, f = build("rezero", STACKS[stack_name], kind)
    x = stream()
    assert norms == []
    params = list(residual.parameters())
    assert len(params) == 1 and params[0].numel() == 1, "a is one scalar"
    assert params[0].item() == 0.0
    assert torch.equal(residual(x, f), x)
    with torch.no_grad():
        params[0].fill_(0.7)
    f.calls = 0
    torch.testing.assert_close(residual(x, f), x + 0.7 * f.map(x))
    assert f.calls == 1


def test_rezero_init_option() -> None:
    _, residual, _, _ = build("rezero", STACKS["encoder_only"], init=0.25)
    assert [p.item() for p in residual.parameters()] == [0.25]


@ALL_STACKS
@ALL_KINDS
def test_layerscale(stack_name: str, kind: SublayerKind) -> None:
    """layerscale: x <- x + diag(l) f(LN(x)), l per channel."""
    _, residual, norms, f = build("layerscale", STACKS[stack_name], kind)
    (scale,) = list(residual.parameters())
    assert scale.shape == (DIM,)
    with torch.no_grad():  # distinct channels, so diag(l) is not a scalar by accident
        scale.copy_(torch.linspace(-1.0, 2.0, DIM))
    x = stream()
    out = residual(x, f)
    (ln,) = norms
    torch.testing.assert_close(out, x + torch.linspace(-1.0, 2.0, DIM) * f.map(ln.map(x)))
    assert_called_once_each(norms, f)


@ALL_STACKS
@ALL_KINDS
def test_admin(stack_name: str, kind: SublayerKind) -> None:
    """admin: x <- LN(w*x + f(x)), w per channel."""
    _, residual, norms, f = build("admin", STACKS[stack_name], kind)
    w = torch.linspace(0.5, 3.0, DIM)
    with torch.no_grad():
        residual.omega.copy_(w)
    x = stream()
    out = residual(x, f)
    (ln,) = norms
    torch.testing.assert_close(out, ln.map(w * x + f.map(x)))
    assert_called_once_each(norms, f)


@ALL_STACKS
@ALL_KINDS
def test_resi_dual(stack_name: str, kind: SublayerKind) -> None:
    """resi_dual: x_p <- LN(x_p + f(x_p)); x_d <- x_d + f(x_p), one f call for both."""
    _, residual, norms, f = build("resi_dual", STACKS[stack_name], kind)
    x_p, x_d = stream(3), stream(4)
    out_p, out_d = residual((x_p, x_d), f)
    (ln,) = norms
    torch.testing.assert_close(out_p, ln.map(x_p + f.map(x_p)))
    torch.testing.assert_close(out_d, x_d + f.map(x_p))
    assert_called_once_each(norms, f)


# -- Mix-LN: Post-LN in the first floor(fraction * L) layers, Pre-LN after -----------------------

# (depth, post_fraction, number of Post-LN layers), by hand. Depths 6 and 7 tell floor (1) from
# ceil/round (2); 18 tells floor (4) from ceil (5).
MIXLN_SPLITS = [
    (6, 0.25, 1),
    (7, 0.25, 1),
    (8, 0.25, 2),
    (18, 0.25, 4),
    (5, 0.5, 2),
    (4, 0.0, 0),
    (4, 1.0, 4),
]


def _is_post_numerically(residual, norms, f, x) -> bool:
    out = residual(x, f)
    (ln,) = norms
    post = ln.map(x + f.map(x))
    pre = x + f.map(ln.map(x))
    assert not torch.allclose(post, pre), "the stubs must tell the two placements apart"
    if torch.allclose(out, post):
        return True
    torch.testing.assert_close(out, pre)
    return False


@pytest.mark.parametrize(("depth", "fraction", "post_layers"), MIXLN_SPLITS)
def test_mixln_per_layer_choice(depth: int, fraction: float, post_layers: int) -> None:
    """Each layer's residual is numerically Post-LN for layer < floor(fraction*L), else Pre-LN."""
    stack = StackInfo(Family.ENCODER_DECODER, "decoder", 3, depth, DIM)
    kinds = list(SublayerKind)
    options = {} if fraction == 0.25 else {"post_fraction": fraction}
    for layer in range(depth):
        for kind in kinds:  # all sublayers of one layer make the same choice
            _, residual, norms, f = build("mixln", stack, kind, layer, **options)
            expected_post = layer < post_layers
            assert _is_post_numerically(residual, norms, f, stream()) is expected_post, (
                f"layer {layer} of {depth} ({kind.value})"
            )


def test_mixln_default_fraction_is_a_quarter() -> None:
    stack = StackInfo(Family.DECODER, "decoder", 0, 8, DIM)
    assert MixLN(stack).post_fraction == 0.25


# -- stack ends ----------------------------------------------------------------------------------

# Which schemes end on a final norm is what these two tests pin by name (Mix-LN's, ResiDual's
# and the multi-stream schemes' ends have tests of their own).
FINAL_NORM = ["pre", "sandwich", "peri", "subln", "layerscale"]
NO_FINAL_NORM = ["post", "deepnorm", "rezero", "admin"]


@pytest.mark.parametrize("name", FINAL_NORM)
@ALL_STACKS
def test_ends_with_final_norm(name: str, stack_name: str) -> None:
    """Pre-norm schemes leave the stream un-normalised, so exactly one LN follows the stack."""
    maker = NormMaker()
    ends = SCHEMES[name](STACKS[stack_name]).ends(maker)
    assert len(maker.made) == 1
    assert ends.final_norm is maker.made[0]
    x = stream()
    assert ends.begin(x) is x
    torch.testing.assert_close(ends(x), maker.made[0].map(x))
    assert maker.made[0].calls == 1


@pytest.mark.parametrize("name", NO_FINAL_NORM)
@ALL_STACKS
def test_ends_without_final_norm(name: str, stack_name: str) -> None:
    """Post-norm schemes (and ReZero, which has no norm) end on the last layer's output."""
    maker = NormMaker()
    ends = SCHEMES[name](STACKS[stack_name]).ends(maker)
    assert maker.made == []
    assert ends.final_norm is None
    x = stream()
    assert ends.begin(x) is x
    assert ends(x) is x


@pytest.mark.parametrize(
    ("fraction", "has_final"), [(0.25, True), (0.0, True), (0.5, True), (1.0, False)]
)
def test_mixln_final_norm_follows_last_layer(fraction: float, has_final: bool) -> None:
    """Mix-LN has a final LN exactly when its last layer is Pre-LN."""
    maker = NormMaker()
    ends = MixLN(STACKS["decoder_only"], post_fraction=fraction).ends(maker)
    assert (ends.final_norm is not None) is has_final
    assert len(maker.made) == int(has_final)


def test_mixln_single_layer_stack_is_pre_ln_with_final_norm() -> None:
    """floor(0.25 * 1) = 0 Post-LN layers: a one-layer Mix-LN stack is plain Pre-LN."""
    stack = StackInfo(Family.ENCODER, "encoder", 1, 0, DIM)
    scheme = MixLN(stack)
    assert scheme.ends(NormMaker()).final_norm is not None
    _, residual, norms, f = build("mixln", stack)
    assert not _is_post_numerically(residual, norms, f, stream())


@ALL_STACKS
def test_resi_dual_ends(stack_name: str) -> None:
    """Both streams start from the embeddings; the output is x_p + LN(x_d), read once."""
    maker = NormMaker()
    ends = ResiDual(STACKS[stack_name]).ends(maker)
    assert isinstance(ends, ResiDualEnds)
    assert len(maker.made) == 1
    x = stream()
    x_p, x_d = ends.begin(x)
    assert torch.equal(x_p, x) and torch.equal(x_d, x)
    x_p, x_d = stream(5), stream(6)
    torch.testing.assert_close(ends((x_p, x_d)), x_p + maker.made[0].map(x_d))


def test_resi_dual_whole_stack_by_hand() -> None:
    """begin, three residual connections, ends: equals the two-stream recursion by hand."""
    stack = STACKS["enc_dec_decoder"]
    scheme = ResiDual(stack)
    maker = NormMaker()
    ends = scheme.ends(maker)
    sites = [Site(stack, 0, kind) for kind in SublayerKind]
    residuals = [scheme.residual(site, maker) for site in sites]
    fs = [StubSublayer(seed=10 + i) for i in range(len(sites))]
    x = stream()

    state = ends.begin(x)
    for residual, f in zip(residuals, fs, strict=True):
        state = residual(state, f)
    out = ends(state)

    dual_norm = maker.made[0]  # ends were built first
    x_p, x_d = x, x
    for residual, f in zip(residuals, fs, strict=True):
        branch = f.map(x_p)
        x_p, x_d = residual.norm.map(x_p + branch), x_d + branch
    torch.testing.assert_close(out, x_p + dual_norm.map(x_d))
    assert dual_norm.calls == 1, "the dual stream's LN runs once, at the end of the stack"


# -- other hooks ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", BUILTIN_SCHEMES)
@ALL_STACKS
def test_embedding_norm_only_for_peri(name: str, stack_name: str) -> None:
    assert ANY_SCHEME[name](STACKS[stack_name]).embedding_norm() is (name == "peri")


@pytest.mark.parametrize("name", BUILTIN_SCHEMES)
@ALL_STACKS
@ALL_KINDS
def test_inner_norm_only_for_subln(name: str, stack_name: str, kind: SublayerKind) -> None:
    """Sub-LN's inner norms sit in self-attention and the feed-forward; cross-attention has none
    by default (torchscale builds its encoder-decoder attention without ``inner_attn_ln``)."""
    site = Site(STACKS[stack_name], 0, kind)
    expected = name == "subln" and kind is not SublayerKind.CROSS_ATTN
    assert ANY_SCHEME[name](STACKS[stack_name]).inner_norm(site) is expected


@ALL_KINDS
def test_subln_cross_attention_option(kind: SublayerKind) -> None:
    """``cross_attention: subln`` puts the inner norm into cross-attention too, with gamma."""
    stack = STACKS["enc_dec_decoder"]
    site = Site(stack, 0, kind)
    assert SubLN(stack).cross_attention == "reference"
    assert SubLN(stack, cross_attention="reference").inner_norm(site) is (
        kind is not SublayerKind.CROSS_ATTN)
    assert SubLN(stack, cross_attention="subln").inner_norm(site) is True


@pytest.mark.parametrize("name", BUILTIN_SCHEMES)
def test_normalizes_stream(name: str) -> None:
    """Whether a norm stands on the stream itself (what norms like DyT cannot do)."""
    expected = name in ("post", "deepnorm", "resi_dual", "admin", "mixln")  # mixln: L >= 4
    stack = StackInfo(Family.ENCODER, "encoder", 6, 0, DIM)
    assert ANY_SCHEME[name](stack).normalizes_stream() is expected
    if name == "mixln":
        assert MixLN(stack, post_fraction=0.0).normalizes_stream() is False


def test_default_stream_ends_is_identity() -> None:
    ends = StreamEnds(None)
    x = stream()
    assert ends.begin(x) is x and ends(x) is x


# -- constants, pinned with literal numbers -----------------------------------------------------


def _stack(family: Family, which: str, n: int, m: int) -> StackInfo:
    return StackInfo(family, which, n, m, DIM)


# (family, stack, N, M, alpha, beta), by hand from DeepNet's Table 1:
#   encoder-only (2N)^(1/4), (8N)^(-1/4); decoder-only (2M)^(1/4), (8M)^(-1/4);
#   enc-dec encoder 0.81 (N^4 M)^(1/16), 0.87 (N^4 M)^(-1/16); decoder (3M)^(1/4), (12M)^(-1/4).
DEEPNORM_TABLE = [
    (Family.ENCODER, "encoder", 6, 0, 1.8612097182041992, 0.37991784282579627),
    (Family.ENCODER, "encoder", 18, 0, 2.4494897427831781, 0.28867513459481288),
    (Family.ENCODER, "encoder", 100, 0, 3.7606030930863936, 0.18803015465431968),
    (Family.ENCODER, "encoder", 2, 0, 1.4142135623730950, 0.5),
    (Family.DECODER, "decoder", 0, 6, 1.8612097182041992, 0.37991784282579627),
    (Family.DECODER, "decoder", 0, 18, 2.4494897427831781, 0.28867513459481288),
    (Family.DECODER, "decoder", 0, 100, 3.7606030930863936, 0.18803015465431968),
    (Family.ENCODER_DECODER, "encoder", 6, 6, 1.4179381406855227, 0.49698924077132348),
    (Family.ENCODER_DECODER, "encoder", 18, 6, 1.8661115389303917, 0.37763016052294299),
    (Family.ENCODER_DECODER, "encoder", 100, 100, 3.4157416777715162, 0.20630951239256401),
    (Family.ENCODER_DECODER, "encoder", 2, 3, 1.0317217739919820, 0.68303298211236216),
    (Family.ENCODER_DECODER, "decoder", 6, 6, 2.0597671439071178, 0.34329452398451963),
    (Family.ENCODER_DECODER, "decoder", 18, 6, 2.0597671439071178, 0.34329452398451963),
    (Family.ENCODER_DECODER, "decoder", 100, 100, 4.1617914502878172, 0.16990442448471225),
    (Family.ENCODER_DECODER, "decoder", 2, 3, 1.7320508075688773, 0.40824829046386302),
]


@pytest.mark.parametrize(("family", "which", "n", "m", "alpha", "beta"), DEEPNORM_TABLE)
def test_deepnorm_constants(family, which, n, m, alpha, beta) -> None:
    stack = _stack(family, which, n, m)
    assert deepnorm_constants(stack) == pytest.approx((alpha, beta), rel=1e-12)
    scheme = DeepNorm(stack)
    assert (scheme.alpha, scheme.beta) == pytest.approx((alpha, beta), rel=1e-12)
    residual = scheme.residual(Site(stack, 0, SublayerKind.FFN), NormMaker())
    assert residual.alpha == pytest.approx(alpha, rel=1e-12)


# (family, stack, N, M, gamma), by hand from Magneto: encoder-only sqrt(ln 2N), decoder-only
# sqrt(ln 2M), enc-dec decoder sqrt(ln 3M), enc-dec encoder sqrt(ln(3M) ln(2N) / 3).
SUBLN_TABLE = [
    (Family.ENCODER, "encoder", 6, 0, 1.5763586678760644),
    (Family.ENCODER, "encoder", 18, 0, 1.8930184728248454),
    (Family.ENCODER, "encoder", 100, 0, 2.3018074130013650),
    (Family.DECODER, "decoder", 0, 6, 1.5763586678760644),
    (Family.DECODER, "decoder", 0, 18, 1.8930184728248454),
    (Family.DECODER, "decoder", 0, 100, 2.3018074130013650),
    (Family.ENCODER_DECODER, "encoder", 6, 6, 1.5472883809593707),
    (Family.ENCODER_DECODER, "encoder", 18, 6, 1.8581085305223324),
    (Family.ENCODER_DECODER, "encoder", 100, 100, 3.1738751151908549),
    (Family.ENCODER_DECODER, "decoder", 6, 6, 1.7001093370416400),
    (Family.ENCODER_DECODER, "decoder", 18, 6, 1.7001093370416400),
    (Family.ENCODER_DECODER, "decoder", 100, 100, 2.3882592980361661),
]


@pytest.mark.parametrize(("family", "which", "n", "m", "gamma"), SUBLN_TABLE)
def test_subln_gamma(family, which, n, m, gamma) -> None:
    stack = _stack(family, which, n, m)
    assert subln_gamma(stack) == pytest.approx(gamma, rel=1e-12)
    assert SubLN(stack).gamma == pytest.approx(gamma, rel=1e-12)


# (depth, CaiT's initial l): 0.1 up to depth 18, 1e-5 up to 24, 1e-6 deeper.
LAYERSCALE_TABLE = [(1, 0.1), (12, 0.1), (18, 0.1), (19, 1e-5), (24, 1e-5), (25, 1e-6), (48, 1e-6)]


@pytest.mark.parametrize(("depth", "init"), LAYERSCALE_TABLE)
def test_layerscale_cait_init(depth: int, init: float) -> None:
    stack = StackInfo(Family.DECODER, "decoder", 0, depth, DIM)
    _, residual, _, _ = build("layerscale", stack)
    expected = torch.full((DIM,), init)
    assert torch.equal(residual.scale.detach(), expected)


def test_layerscale_init_uses_own_stack_depth_and_option() -> None:
    """In an encoder-decoder each stack uses its own depth; ``init`` overrides the schedule."""
    encoder = StackInfo(Family.ENCODER_DECODER, "encoder", 6, 24, DIM)
    decoder = StackInfo(Family.ENCODER_DECODER, "decoder", 6, 24, DIM)
    assert build("layerscale", encoder)[1].scale.detach().unique().tolist() == [pytest.approx(0.1)]
    assert build("layerscale", decoder)[1].scale.detach().unique().tolist() == [pytest.approx(1e-5)]
    custom = build("layerscale", decoder, init=0.3)[1]
    assert custom.scale.detach().unique().tolist() == [pytest.approx(0.3)]


@ALL_STACKS
def test_admin_closed_form_omega(stack_name: str) -> None:
    """w = sqrt((L+1)/ln(L+1) - 1), L = 2 per encoder layer, 3 per enc-dec decoder layer."""
    stack = STACKS[stack_name]
    expected = ADMIN_OMEGA[stack_name]
    assert Admin(stack).omega == pytest.approx(expected, rel=1e-12)
    _, residual, _, _ = build("admin", stack)
    torch.testing.assert_close(residual.omega.detach(), torch.full((DIM,), expected))


# (family, stack, N, M, L): residual connections per stack.
ADMIN_L = [
    (Family.ENCODER, "encoder", 6, 0, 12),
    (Family.DECODER, "decoder", 0, 6, 12),
    (Family.ENCODER_DECODER, "encoder", 6, 6, 12),
    (Family.ENCODER_DECODER, "decoder", 6, 6, 18),
    (Family.ENCODER_DECODER, "decoder", 6, 3, 9),
]
# sqrt((L+1)/ln(L+1) - 1) for L = 12, 18, 9, by hand.
ADMIN_LOGN = {12: 2.0170092186865782, 18: 2.3351321517222667, 9: 1.8283721773841666}


@pytest.mark.parametrize(("family", "which", "n", "m", "count"), ADMIN_L)
def test_admin_counts_residual_connections(family, which, n, m, count) -> None:
    stack = _stack(family, which, n, m)
    assert stack.num_sublayers == count
    assert Admin(stack).omega == pytest.approx(ADMIN_LOGN[count], rel=1e-12)
    assert Admin(stack, output_change="one").omega == pytest.approx(math.sqrt(count), rel=1e-12)
    assert Admin(stack, init="profiled").omega == 1.0


def test_site_index_counts_residual_connections_in_forward_order() -> None:
    """Admin's profile orders w by Site.index: self, cross, ffn per decoder layer."""
    decoder = StackInfo(Family.ENCODER_DECODER, "decoder", 2, 2, DIM)
    order = [Site(decoder, layer, kind).index for layer in range(2) for kind in SublayerKind]
    assert order == [0, 1, 2, 3, 4, 5]
    encoder = StackInfo(Family.ENCODER_DECODER, "encoder", 2, 2, DIM)
    kinds = (SublayerKind.SELF_ATTN, SublayerKind.FFN)
    assert [Site(encoder, layer, k).index for layer in range(2) for k in kinds] == [0, 1, 2, 3]


# -- Admin profiling -----------------------------------------------------------------------------


class ProfiledChain(nn.Module):
    """Two stacks of Admin residuals with stub sublayers, run in site order.

    The residuals are registered in *reverse* order, so ``profile`` must sort by site, not by
    module order.
    """

    def __init__(self) -> None:
        super().__init__()
        self.sites: dict[str, list[Site]] = {}
        self.fs: dict[str, list[StubSublayer]] = {}
        self.residuals = nn.ModuleDict()
        for which in ("encoder", "decoder"):
            stack = StackInfo(Family.ENCODER_DECODER, which, 2, 1, DIM)
            scheme = Admin(stack, init="profiled")
            kinds = [
                k
                for k in SublayerKind
                if k is not SublayerKind.CROSS_ATTN or stack.has_cross_attention
            ]
            sites = [Site(stack, layer, k) for layer in range(stack.depth) for k in kinds]
            self.sites[which] = sites
            self.fs[which] = [StubSublayer(seed=20 + i, scale=1.0 + i) for i in range(len(sites))]
            self.residuals[which] = nn.ModuleList(
                reversed([scheme.residual(s, lambda: nn.LayerNorm(DIM)) for s in sites])
            )

    def ordered(self, which: str) -> list[AdminResidual]:
        return list(reversed(list(self.residuals[which])))

    def forward(self, inputs: dict[str, torch.Tensor]) -> None:
        for which, x in inputs.items():
            for residual, f in zip(self.ordered(which), self.fs[which], strict=True):
                x = residual(x, f)


def _population_variance(t: torch.Tensor) -> float:
    """``np.var`` of the flattened tensor, as Transformer-Clinic computes it (in float64)."""
    flat = t.double().flatten()
    return ((flat - flat.mean()) ** 2).mean().item()


def test_admin_profile_follows_transformer_clinic() -> None:
    """Transformer-Clinic's ``adaptive-profiling`` (``fairseq/modules/transformer_layer.py``),
    written out here from the stubs: per stack a ratio starts at 1; each residual connection in
    forward order takes w_i = ratio, runs with it, and updates
    ratio = sqrt(Var[w_i * x_{i-1}] + Var[f_i(x_{i-1})]), so later branches see the earlier w."""
    chain = ProfiledChain()
    inputs = {"encoder": stream(1), "decoder": 3 * stream(2)}
    with torch.no_grad():  # profiling starts from the model's w, whatever they are
        for module in chain.modules():
            if isinstance(module, AdminResidual):
                module.omega.fill_(5.0)
    chain.train()

    result = profile(chain, lambda: chain(inputs))

    assert set(result) == {"encoder", "decoder"}
    for which, x in inputs.items():
        expected, ratio = [], 1.0
        with torch.no_grad():
            for residual, f in zip(chain.ordered(which), chain.fs[which], strict=True):
                w = ratio
                expected.append(w)
                branch = f.map(x)
                ratio = math.sqrt(_population_variance(w * x) + _population_variance(branch))
                x = residual.norm(w * x + branch)
        assert expected[0] == 1.0 and len(set(expected)) == len(expected)
        assert result[which] == pytest.approx(expected, rel=1e-6)
        for residual, w in zip(chain.ordered(which), expected, strict=True):
            torch.testing.assert_close(residual.omega.detach(), torch.full((DIM,), w))
            assert residual.profiled_omega.item() == pytest.approx(w, rel=1e-6), "recorded"
    assert chain.training, "profile keeps the training mode (the reference profiles in training)"


def test_admin_profiled_omega_is_a_buffer_only_for_profiled_init() -> None:
    """The profiled w travels in the state dict (checkpoints, exports); closed form adds nothing."""
    stack = STACKS["enc_dec_decoder"]
    profiled = Admin(stack, init="profiled").residual(Site(stack, 0, SublayerKind.FFN), NormMaker())
    assert profiled.state_dict()["profiled_omega"].item() == 0.0, "0 until profiled"
    closed = Admin(stack).residual(Site(stack, 0, SublayerKind.FFN), NormMaker())
    assert "profiled_omega" not in closed.state_dict()


def test_admin_profile_without_admin_modules_is_empty() -> None:
    assert profile(nn.Linear(2, 2), lambda: None) == {}
