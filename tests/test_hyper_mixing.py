"""When ``hyper`` and ``mhc`` equal the reference (lucidrains' ``hyper-connections``, a test
extra), as docs/schemes.md states it: the static form always (it makes no norm of H, so
``mixing_norm`` changes nothing); the dynamic one under ``mixing_norm: reference`` (and
``tests/test_hyper.py``); under ``mixing_norm: model`` with ``model.norm: rmsnorm`` up to the
eps alone; with any other norm not (LayerNorm: ``tests/test_hyper.py``). Outputs and gradients
(issue 59, 6)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from normzoo.nn.norms import DyT, MaskedBatchNorm, RMSNorm, ScaleNorm
from normzoo.residual import Family, Site, StackInfo, SublayerKind
from normzoo.residual.hyper import Hyper
from normzoo.residual.mhc import MHC

STREAMS, DIM = 3, 16
STACK = StackInfo(Family.DECODER, "decoder", 0, 3, DIM)
SITE = Site(STACK, 1, SublayerKind.SELF_ATTN)  # the stack's connection k = 2
# The reference's parameter -> ours.
STATIC = {"static_alpha": "static_alpha", "static_beta": "static_beta"}
MAPPING = {
    "hyper": {**STATIC, "dynamic_alpha_fn": "dynamic_alpha", "dynamic_beta_fn": "dynamic_beta",
              "dynamic_alpha_scale": "dynamic_alpha_scale",
              "dynamic_beta_scale": "dynamic_beta_scale"},
    "mhc": {**STATIC, "dynamic_alpha_fn": "dynamic_alpha", "dynamic_beta_fn": "dynamic_beta",
            "pre_branch_scale": "pre_scale", "residual_scale": "residual_scale",
            "h_post_scale": "post_scale"},
}


def _connection(name: str, make_norm, **options):
    """The scheme's connection at ``SITE`` with every norm ``make_norm()`` (``model.norm``),
    its parameters moved off their init; and a branch."""
    scheme = (Hyper(STACK, streams=STREAMS, **options) if name == "hyper"
              else MHC(STACK, streams=STREAMS, **options))
    ours = scheme.residual(SITE, make_norm)
    with torch.no_grad():
        for p in ours.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return ours, nn.Linear(DIM, DIM)


def _reference(name: str, ours, branch: nn.Module, mapping: dict[str, str], gamma=None):
    """The reference connection around ``ours``'s pre-norm and ``branch``, with ``ours``'s
    parameters (the others at zero) and its mixing norm's ``gamma``."""
    package = pytest.importorskip("hyper_connections")
    module = pytest.importorskip("hyper_connections.manifold_constrained_hyper_connections")
    cls = (package.HyperConnections if name == "hyper"
           else module.ManifoldConstrainedHyperConnections)
    theirs = cls(STREAMS, dim=DIM, branch=nn.Sequential(ours.norm, branch), layer_index=2)
    with torch.no_grad():
        for their_name, our_name in MAPPING[name].items():
            their = getattr(theirs, their_name)
            their.copy_(getattr(ours, our_name).reshape(their.shape)
                        if their_name in mapping else torch.zeros_like(their))
        if gamma is not None:
            theirs.norm.gamma.copy_(gamma)
    return theirs


def _outputs_and_gradients(name: str, ours, theirs, branch, mapping: dict[str, str], h,
                           our_extra=(), their_extra=()):
    """Each side's output on ``h`` and the gradients of one random projection of it, with
    respect to ``h`` and the mapped parameters (and the extra ones)."""
    h = h.clone().requires_grad_()
    upstream = torch.randn(2, 5, STREAMS, DIM)
    out = ours(h, branch)
    grads = torch.autograd.grad((out * upstream).sum(), [
        h, *[getattr(ours, n) for n in mapping.values()], *our_extra])
    their_out = theirs(h.permute(0, 2, 1, 3).reshape(2 * STREAMS, 5, DIM))
    their_out = their_out.reshape(2, STREAMS, 5, DIM).permute(0, 2, 1, 3)
    their_params = [getattr(theirs, n) for n in mapping]
    their_grads = torch.autograd.grad((their_out * upstream).sum(), [
        h, *their_params, *their_extra])
    their_grads = [g.reshape(o.shape) for g, o in zip(their_grads, grads, strict=True)]
    return (out, grads), (their_out, their_grads)


def _assert_equal(ours, theirs) -> None:
    (out, grads), (their_out, their_grads) = ours, theirs
    torch.testing.assert_close(out, their_out, rtol=1e-5, atol=1e-5)
    for grad, their_grad in zip(grads, their_grads, strict=True):
        torch.testing.assert_close(grad, their_grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mixing", ["model", "reference"])
def test_the_static_form_equals_the_reference_whatever_the_mixing_norm(mixing: str):
    torch.manual_seed(11)
    ours, branch = _connection("hyper", lambda: nn.LayerNorm(DIM), dynamic=False,
                               mixing_norm=mixing)
    assert ours.mix_norm is None  # no norm of H is made: mixing_norm is never read
    assert {n for n, _ in ours.named_parameters()} == {
        "static_alpha", "static_beta", "norm.weight", "norm.bias"}
    theirs = _reference("hyper", ours, branch, STATIC)  # its dynamic parts held at zero
    _assert_equal(*_outputs_and_gradients("hyper", ours, theirs, branch, STATIC,
                                          torch.randn(2, 5, STREAMS, DIM)))


@pytest.mark.parametrize("name", ["hyper", "mhc"])
def test_the_dynamic_form_equals_the_reference_in_gradients_too_with_its_norm(name: str):
    """``mixing_norm: reference``, whatever ``model.norm`` (here LayerNorm): the outputs
    (``tests/test_hyper.py``) and the gradients, gamma's included."""
    torch.manual_seed(14)
    ours, branch = _connection(name, lambda: nn.LayerNorm(DIM), mixing_norm="reference")
    mapping = MAPPING[name]
    theirs = _reference(name, ours, branch, mapping, ours.mix_norm.gamma.detach())
    _assert_equal(*_outputs_and_gradients(name, ours, theirs, branch, mapping,
                                          torch.randn(2, 5, STREAMS, DIM),
                                          [ours.mix_norm.gamma], [theirs.norm.gamma]))


@pytest.mark.parametrize("name", ["hyper", "mhc"])
def test_with_the_models_rmsnorm_only_the_eps_differs(name: str):
    """``model.norm: rmsnorm`` is the reference's norm of H with its weight for the
    reference's 1 + gamma, but for its eps (1e-6) on the mean square, where the reference
    divides by |x| alone: equal (outputs and gradients, the weight's for gamma's) where H's
    mean square is far above the eps, apart where it is not, and equal again with the eps
    made negligible."""
    mapping = MAPPING[name]
    for eps, scale, equal in ((1e-6, 1.0, True), (1e-6, 1e-4, False), (1e-30, 1e-4, True)):
        torch.manual_seed(12)
        ours, branch = _connection(name, lambda eps=eps: RMSNorm(DIM, eps=eps))
        assert isinstance(ours.mix_norm, RMSNorm) and ours.mix_norm.eps == eps
        theirs = _reference(name, ours, branch, mapping, ours.mix_norm.weight.detach() - 1)
        results = _outputs_and_gradients(name, ours, theirs, branch, mapping,
                                         scale * torch.randn(2, 5, STREAMS, DIM),
                                         [ours.mix_norm.weight], [theirs.norm.gamma])
        if equal:
            _assert_equal(*results)
        else:
            (out, _), (their_out, _) = results
            assert (out - their_out).abs().max() > 1e-2, (eps, scale)


@pytest.mark.parametrize("name", ["hyper", "mhc"])
@pytest.mark.parametrize("norm", [ScaleNorm, DyT, MaskedBatchNorm])
def test_with_the_other_norms_the_dynamic_connections_are_not_the_references(name, norm):
    """ScaleNorm learns one gain for all channels where the reference's gamma has one per
    channel; DyT and BatchNorm are other functions of H."""
    torch.manual_seed(13)
    ours, branch = _connection(name, lambda: norm(DIM))
    theirs = _reference(name, ours, branch, MAPPING[name], 0.3 * torch.randn(DIM))
    h = torch.randn(2, 5, STREAMS, DIM)
    with torch.no_grad():
        out = ours(h, branch)
        their_out = theirs(h.permute(0, 2, 1, 3).reshape(2 * STREAMS, 5, DIM))
    their_out = their_out.reshape(2, STREAMS, 5, DIM).permute(0, 2, 1, 3)
    assert (out - their_out).abs().max() > 1e-3
