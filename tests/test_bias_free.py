"""``model.bias: false`` leaves no bias anywhere (linear layers, norms, the masked-LM head), and
``model.embed_scale: false`` leaves token embeddings unscaled: what a Llama-shaped model needs."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
from registered import BUILTIN_SCHEMES, norms_where
from torch import nn

from normzoo import registry
from normzoo.errors import ConfigError
from normzoo.models import assemble
from normzoo.recipe import from_dict
from normzoo.run.machine import parameter_count

SCHEMES = BUILTIN_SCHEMES
# The norms whose factory takes a ``bias`` option, which ``model.bias: false`` turns off.
BIAS_OPTION = norms_where(lambda factory: "bias" in inspect.signature(factory).parameters)
FAMILIES = ["encoder", "decoder", "encoder_decoder"]


def config(**changes):
    return {"vocab_size": 40, "d_model": 16, "heads": 2, "ffn_dim": 32, "encoder_layers": 2,
            "decoder_layers": 2, "max_positions": 32, **changes}


def biases(model: nn.Module) -> list[str]:
    return [name for name, _ in model.named_parameters() if name.rpartition(".")[2] == "bias"]


# One norm with a bias and one without: the assertions below name which has one.
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("family", FAMILIES)
def test_no_parameter_is_a_bias(family, norm):
    for scheme in SCHEMES:
        residual = {"name": "mixln", "post_fraction": 0.5} if scheme == "mixln" else scheme
        model = assemble(config(family=family, norm=norm, residual=residual, bias=False,
                                positions="rope", kv_heads=1))
        assert biases(model) == [], (scheme, biases(model))
        assert not any(name.endswith("bias") for name in model.state_dict()), scheme
    with_biases = biases(assemble(config(family=family, norm=norm)))
    assert any(".norm.bias" in name for name in with_biases) == (norm == "layernorm")
    assert any("proj.bias" in name for name in with_biases)


def test_the_masked_lm_head_has_no_bias_and_still_runs():
    torch.manual_seed(0)
    model = assemble(config(family="encoder", bias=False)).eval()
    assert model.output_bias is None and model.head_dense.bias is None
    assert model(torch.randint(1, 40, (2, 5))).shape == (2, 5, 40)
    assert assemble(config(family="encoder")).output_bias.shape == (40,)  # default unchanged


@pytest.mark.parametrize("norm", BIAS_OPTION)
def test_norms_with_a_bias_option_leave_it_out(norm):
    model = assemble(config(family="encoder", norm=norm, bias=False))
    assert biases(model) == []


def test_a_norm_bias_asked_for_in_a_bias_free_model_is_refused():
    with pytest.raises(ConfigError, match=r"model\.norm\.bias: true contradicts model\.bias"):
        assemble(config(family="decoder", bias=False,
                        norm={"name": "layernorm", "bias": True}))
    # where the model has biases, a norm may leave its own out
    model = assemble(config(family="decoder", norm={"name": "layernorm", "bias": False}))
    assert not any(".norm." in name for name in biases(model))
    assert any("proj.bias" in name for name in biases(model))


class ShiftNorm(nn.Module):
    """A norm plugin with a bias and no option to drop it."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.bias


def test_a_norm_that_cannot_drop_its_bias_is_refused_in_a_bias_free_model():
    registry.norms.register("shift_test", ShiftNorm)
    try:
        with pytest.raises(ConfigError, match="'shift_test' has a bias and no bias option"):
            assemble(config(family="decoder", norm="shift_test", bias=False))
        assert biases(assemble(config(family="decoder", norm="shift_test")))
    finally:
        registry.norms.unregister("shift_test")


@pytest.mark.parametrize("positions", ["rope", "learned"])
def test_embed_scale_false_leaves_token_embeddings_unscaled(positions):
    scaled = assemble(config(family="decoder", positions=positions)).eval()
    plain = assemble(config(family="decoder", positions=positions, embed_scale=False)).eval()
    plain.load_state_dict(scaled.state_dict())  # the same parameters either way
    ids = torch.randint(1, 40, (2, 5))
    table = scaled.embeddings.tokens.weight[ids]
    position = 0 if positions == "rope" else scaled.embeddings.position_table()[:5]
    with torch.no_grad():
        assert torch.equal(plain.embeddings(ids), table + position)
        torch.testing.assert_close(scaled.embeddings(ids), table * math.sqrt(16) + position)


def test_the_parameter_estimate_stays_a_lower_bound_with_fewer_key_value_heads():
    recipe = from_dict({"task": "causal_lm", "model": config(kv_heads=1, bias=False)})
    model = assemble(recipe.model)
    actual = sum(p.numel() for p in model.parameters())
    estimate = parameter_count(recipe)
    assert estimate <= actual
    assert estimate < parameter_count(from_dict({"task": "causal_lm", "model": config()}))

