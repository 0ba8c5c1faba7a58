"""``cosine_softcap``: each contract hook it uses, checked for what it computes.

attention_qk (unit q and k, q times a per-head temperature), attention_scale (sqrt(head_dim)
on the scores), ffn_scales (a gain on the activation's input), StreamEnds.logits
(``c * tanh(z / c)``), after_step (token-embedding rows at most ``embedding_max_norm``, at build
and after an update), optimizer_options (no decay on the temperatures and gains),
recipe_problem (FSDP refused) and plain_form (no export); the KV cache reproduces the full
forward pass; and ``normzoo train`` trains it through the entry point.
"""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
import torch.nn.functional as F
import yaml
from plugin_site import DIST, VERSION
from typer.testing import CliRunner

import normzoo
from normzoo import registry
from normzoo.cli import app
from normzoo.errors import ConfigError
from normzoo.models import assemble

pytestmark = pytest.mark.usefixtures("plugin")

D, HEADS, KV_HEADS, VOCAB, CAP = 32, 4, 2, 50, 2.0
BASE = {"family": "decoder", "vocab_size": VOCAB, "d_model": D, "heads": HEADS,
        "kv_heads": KV_HEADS, "ffn_dim": 64, "decoder_layers": 2, "encoder_layers": 2,
        "dropout": 0.0, "positions": "rope", "bias": False, "norm": "layernorm",
        "max_positions": 64, "residual": {"name": "cosine_softcap", "logit_cap": CAP}}


def build(seed: int = 0, **changes):
    """A small model of the scheme in eval mode, its temperatures and gains moved off their
    initial values (1), so that a hook applied the wrong way cannot hide behind ones."""
    torch.manual_seed(seed)
    model = assemble({**BASE, **changes}).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("log_temperature"):
                parameter.uniform_(-0.7, 0.7)
            elif name.endswith("scales.gain"):
                parameter.uniform_(0.3, 2.0)
    return model


def tokens(batch: int = 3, length: int = 9, seed: int = 1) -> torch.Tensor:
    return torch.randint(2, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def capture(module: torch.nn.Module, into: list, inputs: bool = False):
    """Record ``module``'s first input (``inputs``) or its output on every call."""
    if inputs:
        return module.register_forward_pre_hook(lambda _m, args: into.append(args[0]))
    return module.register_forward_hook(lambda _m, _args, out: into.append(out))


def test_registered_and_listed_with_the_distribution():
    assert registry.residuals.info("cosine_softcap").as_dict() == {
        "name": "cosine_softcap", "distribution": DIST, "version": VERSION}
    result = CliRunner().invoke(app, ["list"])
    assert result.exit_code == 0, result.output
    line = rf"^  cosine_softcap +{re.escape(DIST)} {VERSION} +Pre-LN with cosine attention"
    assert re.search(line, result.output, re.MULTILINE), result.output


def test_attention_qk_unit_keys_and_queries_of_length_the_temperature():
    model = build()
    attention = model.decoder.layers[1].self_attn
    seen: list = []
    capture(attention.qk, seen)
    with torch.no_grad():
        model(tokens())
    q, k = seen[0]
    assert q.shape[1] == HEADS and k.shape[1] == KV_HEADS  # grouped-query: 2 query heads a key
    tau = attention.qk.log_temperature.exp().view(HEADS, 1)
    assert not torch.allclose(tau, torch.ones(()))
    torch.testing.assert_close(q.norm(dim=-1)[0], tau.expand(HEADS, q.shape[2]))
    torch.testing.assert_close(k.norm(dim=-1), torch.ones(k.shape[:-1]))


@pytest.mark.parametrize("positions", ["rope", "learned"])
def test_attention_scale_multiplies_the_cosines_by_sqrt_head_dim(positions):
    """The sublayer's output recomputed by hand from the roles' matrices and the captured unit
    q and k: softmax(sqrt(head_dim) q k^T, causal) v W_o^T; 1/sqrt(head_dim) would differ."""
    model = build(positions=positions)
    attention = model.decoder.layers[0].self_attn
    x, qk, out = [], [], []
    capture(attention, x, inputs=True)
    capture(attention.qk, qk)
    capture(attention, out)
    with torch.no_grad():
        model(tokens())
    q, k = qk[0]
    roles = attention.role_weights()
    head_dim = D // HEADS
    batch, length, _ = x[0].shape
    v = (x[0] @ roles["v"].T).view(batch, length, KV_HEADS, head_dim).transpose(1, 2)
    k, v = (t.repeat_interleave(HEADS // KV_HEADS, dim=1) for t in (k, v))
    causal = torch.ones(length, length, dtype=torch.bool).tril()

    def by_hand(scale: float) -> torch.Tensor:
        scores = (scale * q @ k.transpose(-2, -1)).masked_fill(~causal, float("-inf"))
        heads = scores.softmax(-1) @ v
        return heads.transpose(1, 2).reshape(batch, length, D) @ roles["out"].T

    torch.testing.assert_close(out[0], by_hand(math.sqrt(head_dim)), rtol=1e-4, atol=1e-5)
    assert not torch.allclose(out[0], by_hand(head_dim**-0.5), atol=1e-3)


@pytest.mark.parametrize(("activation", "gated"), [("gelu", False), ("swiglu", True)])
def test_ffn_scales_gain_the_activations_input_only(activation, gated):
    model = build(activation=activation)
    ffn = model.decoder.layers[1].ffn
    x, out = [], []
    capture(ffn, x, inputs=True)
    capture(ffn, out)
    with torch.no_grad():
        model(tokens())
    roles, gain = ffn.role_weights(), ffn.scales.gain
    assert not torch.allclose(gain, torch.ones(()))
    pre = gain * (x[0] @ roles["ffn_in"].T)
    hidden = F.silu(pre) * (x[0] @ roles["ffn_gate"].T) if gated else F.gelu(pre)
    torch.testing.assert_close(out[0], hidden @ roles["ffn_out"].T, rtol=1e-4, atol=1e-5)


def test_logits_are_soft_capped():
    """StreamEnds.logits: c * tanh(z / c) of the output projection's z, strictly inside (-c, c),
    and the cap bites (some |z| > c: |z| reaches sqrt(d) with a unit-length tied row)."""
    model = build()
    z: list = []
    capture(model.output, z)
    with torch.no_grad():
        logits = model(tokens())
    assert z[0].abs().max() > 1.5 * CAP
    torch.testing.assert_close(logits, CAP * torch.tanh(z[0] / CAP))
    assert logits.abs().max() < CAP


def _row_norms(model) -> torch.Tensor:
    return model.embeddings.tokens.weight.norm(dim=1)


def test_after_step_caps_the_token_embedding_rows_at_build_and_after_an_update():
    torch.manual_seed(0)
    model = assemble({**BASE, "positions": "learned",
                      "residual": {"name": "cosine_softcap", "embedding_max_norm": 0.9}})
    norms = _row_norms(model)
    assert norms.max() <= 0.9 + 1e-6 and (norms > 0.9 - 1e-4).sum() > VOCAB // 2  # at build
    assert norms[model.config.pad_id] == 0  # the pad's row stays zero
    positions = model.embeddings.learned_positions.weight
    assert positions.norm(dim=1).max() > 0.9  # a table of positions is left alone
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.0)
    model.train()
    model(tokens()).logsumexp(-1).mean().backward()
    optimizer.step()
    stepped = model.embeddings.tokens.weight.detach().clone()
    assert stepped.norm(dim=1).max() > 0.9 + 1e-3  # the update moved rows past the bound
    model.scheme.after_step(model)
    norms = _row_norms(model)
    assert norms.max() <= 0.9 + 1e-6
    inside = stepped.norm(dim=1) <= 0.9
    assert inside.any()
    torch.testing.assert_close(model.embeddings.tokens.weight[inside], stepped[inside])
    # Each capped row keeps its direction.
    cosine = F.cosine_similarity(model.embeddings.tokens.weight[~inside], stepped[~inside])
    torch.testing.assert_close(cosine, torch.ones_like(cosine))


def test_without_max_norm_the_rows_are_left_as_drawn():
    torch.manual_seed(0)
    model = assemble({**BASE, "residual": {"name": "cosine_softcap", "embedding_max_norm": None}})
    assert _row_norms(model).max() > 1.1


def test_the_temperatures_and_gains_are_declared_free_of_weight_decay():
    from normzoo.recipe import OptimConfig
    from normzoo.tasks.optim import build_optimizer

    model = build()
    optimizer, _ = build_optimizer(model, OptimConfig(lr=1e-3, weight_decay=0.1), 10)
    decay = {id(p) for g in optimizer.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    declared = [p for name, p in model.named_parameters()
                if name.endswith(("log_temperature", "scales.gain"))]
    assert len(declared) == 2 * 2  # a temperature and a gain in each of the two layers
    assert not decay & {id(p) for p in declared}
    assert any(p.dim() == 3 for p in declared)  # a temperature's shape, decayed by default


@pytest.mark.parametrize("family", ["decoder", "encoder_decoder"])
def test_the_kv_cache_reproduces_the_full_forward_pass(family):
    """Keys enter the cache unit-norm; q takes its temperature at every step (self- and
    cross-attention, whose cached keys come back as k=None)."""
    model = build(family=family)
    src, tgt = tokens(seed=2), tokens(length=7, seed=3)
    tgt[0, 5:] = model.config.pad_id
    with torch.no_grad():
        if family == "decoder":
            full = model(tgt)
            cache, steps = model.new_cache(), []
            for t in range(tgt.shape[1]):
                steps.append(model(tgt[:, t : t + 1], cache=cache))
        else:
            memory, mask = model.encode(src)
            full = model.decode(tgt, memory, mask)
            cache, steps = model.new_cache(), []
            for t in range(tgt.shape[1]):
                steps.append(model.decode(tgt[:, t : t + 1], memory, mask, cache))
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-5)


def test_fsdp_is_refused_and_there_is_no_export_form():
    from normzoo.recipe import from_dict

    with pytest.raises(ConfigError, match="embedding_max_norm rescales whole embedding rows"):
        from_dict({"task": "causal_lm", "trainer": {"strategy": "fsdp"},
                   "model": {"residual": "cosine_softcap"}})
    scheme = registry.residuals.get("cosine_softcap")
    assert scheme.recipe_problem({"embedding_max_norm": None}, "fsdp") is None
    form = build().decoder.layers[0].ffn_residual.plain_form()
    assert isinstance(form, str) and "cosine attention" in form


def test_normzoo_train_trains_it(tmp_path, monkeypatch):
    """A few steps of ``normzoo train`` on the built-in corpus: normzoo's loop calls after_step
    after each update, the temperatures and gains learn, the checkpoint names the plugin, and
    the loaded model translates (beam search through the cache and the capped logits)."""
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    recipe = {
        "task": "translation", "seed": 3,
        "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "encoder_layers": 1,
                  "decoder_layers": 1, "max_positions": 64,
                  "residual": {"name": "cosine_softcap", "logit_cap": 10.0,
                               "embedding_max_norm": 0.8}},
        "data": {"source": "builtin", "train_limit": 60, "valid_limit": 4, "max_tokens": 512,
                 "max_len": 64, "tokenizer": {"vocab_size": 120, "min_frequency": 1}},
        "optim": {"lr": 0.01, "warmup_steps": 1},
        "trainer": {"max_steps": 3, "val_every_steps": 3, "log_every_steps": 1,
                    "progress_bar": False, "accelerator": "cpu", "keep_checkpoints": 0,
                    "save_top_k": 0},
        "eval": {"valid_bleu": False},
        "run": {"dir": str(tmp_path / "run")},
    }
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    result = CliRunner().invoke(app, ["train", str(tmp_path / "recipe.yaml")])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "completed", summary
    loaded = normzoo.load(tmp_path / "run" / "checkpoints" / "last.ckpt")
    assert {"kind": "residual", "name": "cosine_softcap", "distribution": DIST,
            "version": VERSION} in loaded.plugins
    model = loaded.model
    assert model.encoder_embeddings.tokens.weight.norm(dim=1).max() <= 0.8 + 1e-6
    learned = {name: p for name, p in model.named_parameters()
               if name.endswith(("log_temperature", "scales.gain"))}
    assert len(learned) == 3 * 1 + 2  # attention: 2 self + 1 cross; FFN: 2
    for name, parameter in learned.items():
        start = 0.0 if name.endswith("log_temperature") else 1.0
        assert (parameter - start).abs().max() > 1e-4, name
    [translation] = loaded.translate(["the cat sits on the mat"], beam=2)
    assert isinstance(translation, str)
