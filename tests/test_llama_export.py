"""``normzoo export --format hf`` of a decoder that is exactly a Llama: a ``LlamaForCausalLM``
directory whose logits equal normzoo's (max |difference| <= 1e-4) and whose greedy
continuations of 100 prompts are normzoo's, token for token; ``recipes/gpt_llama.yaml`` is such a
decoder. Anything short of a Llama is not written as one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tiny import toy_text
from typer.testing import CliRunner

import normzoo
from normzoo import recipe as recipes
from normzoo.cli import app
from normzoo.data import builtin
from normzoo.data.tokenizer import PAD
from normzoo.export.hf.llama import llama_target, why_not_llama
from normzoo.export.hf.plain import NotMappable
from normzoo.models import assemble
from normzoo.models.config import ModelConfig
from normzoo.run import training as train

transformers = pytest.importorskip("transformers")
runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
PROMPTS = [" ".join(s.split()[:2]) for s, _ in builtin.generate("test", size=100)]
# gpt_llama.yaml's Llama, small: GQA (2 key/value heads for 4), RoPE, SwiGLU, RMSNorm, no bias.
SMALL = ["model.d_model=32", "model.heads=4", "model.kv_heads=2", "model.ffn_dim=96",
         "model.decoder_layers=2", "model.max_positions=64", "data.source=files",
         "data.tokenizer.vocab_size=200", "data.max_tokens=512", "data.max_len=64",
         "data.train_limit=300", "data.valid_limit=16", "data.valid_split=valid", "optim.lr=3e-3",
         "optim.warmup_steps=5", "trainer.max_steps=30", "trainer.val_every_steps=30",
         "trainer.precision=32-true"]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return toy_text(tmp_path_factory.mktemp("llama"), (300, 16, 16))


def _train(root: Path, name: str, *overrides: str) -> Path:
    """``last.ckpt`` of 30 steps of ``recipes/gpt_llama.yaml`` made small, with ``overrides``
    (trained once per module: the tests share it)."""
    checkpoint = root / name / "checkpoints" / "last.ckpt"
    if checkpoint.is_file():
        return checkpoint
    recipe = recipes.load(ROOT / "recipes" / "gpt_llama.yaml",
                          [*SMALL, f"data.dir={root}", f"run.dir={root / name}", *overrides])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NORMZOO_CACHE", str(root / "cache"))
        train.run(recipe, f"{name}.yaml")
    return checkpoint


@pytest.mark.parametrize(("name", "overrides", "tied"), [
    ("gpt_llama", (), True),
    # fairseq's √d embedding scale: folded into the input embedding, the output stored untied.
    ("scaled", ("model.embed_scale=true",), False),
])
def test_a_gpt_llama_run_exports_as_llama_with_normzoos_logits_and_greedy_text(
        workspace: Path, tmp_path: Path, name: str, overrides: tuple[str, ...], tied: bool):
    checkpoint = _train(workspace, name, *overrides)
    result = runner.invoke(app, ["export", str(checkpoint), "--format", "hf",
                                 "--out", str(tmp_path / "hf")])
    assert result.exit_code == 0, result.output
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert type(hf_model).__name__ == "LlamaForCausalLM"
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["num_key_value_heads"] == 2 and config["num_attention_heads"] == 4
    assert config["tie_word_embeddings"] is tied and config["rope_theta"] == 10000.0
    loaded = normzoo.load(checkpoint)

    batch = tokenizer(PROMPTS[:20], return_tensors="pt", padding=True, padding_side="right")
    with torch.no_grad():
        ours = loaded.model(batch["input_ids"])
        theirs = hf_model(**batch).logits
    real = batch["attention_mask"].bool()
    assert (ours - theirs).abs()[real].max().item() <= 1e-4

    expected = loaded.generate(PROMPTS, temperature=0, max_new_tokens=12)
    got = []
    for prompt in PROMPTS:
        inputs = tokenizer([prompt], return_tensors="pt")
        ids = hf_model.generate(**inputs, do_sample=False, max_new_tokens=12)
        got.append(tokenizer.decode(ids[0, inputs["input_ids"].shape[1]:],
                                    skip_special_tokens=True))
    assert got == expected and sum(map(bool, expected)) > 50


def test_left_padded_prompts_give_each_row_its_own_logits(workspace: Path):
    """Rotary positions are relative: a prompt padded on the left (as the exported tokenizer
    pads a decoder's batch) scores its tokens as it does alone."""
    loaded = normzoo.load(_train(workspace, "gpt_llama"))
    alone = loaded.model(torch.tensor([[1, 7, 8, 9]]))
    padded = torch.tensor([[PAD, PAD, 1, 7, 8, 9]])
    with torch.no_grad():
        left = loaded.model(padded, key_padding_mask=padded.eq(PAD))
    assert (left[:, 2:] - alone).abs().max().item() <= 1e-5


SIZES = {"family": "decoder", "encoder_layers": 0, "decoder_layers": 2, "d_model": 32,
         "heads": 4, "ffn_dim": 64, "positions": "rope", "activation": "swiglu",
         "norm": "rmsnorm", "bias": False, "embed_scale": False, "residual": "pre"}


@pytest.mark.parametrize(("change", "why"), [
    ({"residual": "peri"}, "(model.residual: peri), not Pre-LN's"),
    ({"residual": "deepnorm"}, "layer 0's residual is DeepNormResidual"),
    ({"residual": {"name": "mixln", "post_fraction": 0.5}}, "layer 0's residual is PostLN"),
    ({"norm": "layernorm"}, "layer 0's norm is LayerNorm, not RMSNorm"),
    ({"norm": "rmsnorm", "bias": True}, "it has biases"),
    ({"activation": "gelu"}, "model.activation is gelu, not swiglu"),
    ({"positions": "learned"}, "model.positions is learned, not rope"),
])
def test_what_is_not_a_llama_is_not_written_as_one_and_says_why(change: dict, why: str):
    """One difference from a Llama and the model is not mapped onto one; the reason is what
    a rotary model's refusal says (no other target takes rotary positions)."""
    config = ModelConfig.parse({**SIZES, **change})
    model = assemble(config, vocab_size=50)
    assert llama_target(model, config.residual.name) is None
    assert why in why_not_llama(model)


def test_a_rotary_model_that_is_not_a_llama_is_refused_with_the_reason(workspace: Path,
                                                                       tmp_path: Path):
    checkpoint = _train(workspace, "peri", "model.residual=peri")
    result = runner.invoke(app, ["export", str(checkpoint), "--format", "hf",
                                 "--out", str(tmp_path / "hf")])
    assert result.exit_code == 2
    assert "rotary positions export only as LlamaForCausalLM" in result.output
    assert "(model.residual: peri)" in result.output and not (tmp_path / "hf").exists()


def test_a_llama_maps_every_weight_once():
    config = ModelConfig.parse({**SIZES, "kv_heads": 1})
    model = assemble(config, vocab_size=50)
    plain, target = llama_target(model, "pre")
    assert target.architecture == "LlamaForCausalLM"
    hf_config, weights = target.build(plain, config.with_vocab(50))
    hf_model = transformers.LlamaForCausalLM(hf_config)
    assert set(weights) == set(hf_model.state_dict())
    assert weights["model.layers.0.self_attn.k_proj.weight"].shape == (8, 32)  # one kv head
    assert sum(p.numel() for p in model.parameters()) == sum(
        p.numel() for p in hf_model.parameters())


def test_layernorm_scaling_exports_as_llama_with_its_scale_in_the_norm_gains():
    """LNS, x + f(RMSNorm(x)/sqrt(l)), is a Llama whose layer-l norm gains are divided by
    sqrt(l): the same logits from LlamaForCausalLM."""
    from normzoo.export.hf.llama import llama

    config = ModelConfig.parse({**SIZES, "residual": "lns", "decoder_layers": 3})
    model = assemble(config, vocab_size=50).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):  # trained-looking gains, not ones
                param.uniform_(0.5, 1.5)
    mapped = llama_target(model, "lns")
    assert mapped is not None
    plain, _ = mapped
    assert "1/√l" in plain.folded
    hf_config, weights = llama(plain, config.with_vocab(50))
    hf_model = transformers.LlamaForCausalLM(hf_config).eval()
    hf_model.load_state_dict(weights)
    ids = torch.randint(4, 50, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(hf_model(ids).logits, model(ids), rtol=0, atol=1e-5)


def test_a_qk_norm_decoder_exports_as_qwen3_with_the_same_logits():
    """model.qk_norm: rmsnorm is Qwen3's attention (q_norm, k_norm before RoPE): the same
    weights in Qwen3ForCausalLM give the same logits; another QK-norm is refused by name."""
    from normzoo.export.hf.llama import llama

    config = ModelConfig.parse({**SIZES, "qk_norm": "rmsnorm", "kv_heads": 2})
    model = assemble(config, vocab_size=50).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.uniform_(0.5, 1.5)
    mapped = llama_target(model, "pre")
    assert mapped is not None
    plain, target = mapped
    assert target.architecture == "Qwen3ForCausalLM"
    hf_config, weights = target.build(plain, config.with_vocab(50))
    assert hf_config.architectures == ["Qwen3ForCausalLM"]
    hf_model = transformers.Qwen3ForCausalLM(hf_config).eval()
    hf_model.load_state_dict(weights)
    ids = torch.randint(4, 50, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(hf_model(ids).logits, model(ids), rtol=0, atol=1e-5)
    assert llama is target.build
    other = assemble(ModelConfig.parse({**SIZES, "qk_norm": "layernorm"}), vocab_size=50)
    assert "not an RMSNorm" in why_not_llama(other)


class _Halved(torch.nn.Module):
    """A stand-in for a scheme's module inside a sublayer: halves what it is given."""

    def forward(self, a, b=None):
        return a / 2, None if b is None else b / 2


@pytest.mark.parametrize(("where", "says"), [
    ("qk", "decoder.layers.1.self_attn has a scheme's module on its queries and keys"),
    ("scale", "decoder.layers.1.self_attn scales its attention scores by 3"),
    ("scales", "decoder.layers.1.ffn has a scheme's scales on its pre-activations"),
])
def test_a_schemes_module_inside_a_sublayer_is_refused_though_its_connection_is_pre_ln(
        where: str, says: str):
    """A scheme whose connections fold into Pre-LN may still act inside the sublayers
    (attention_qk, attention_scale, ffn_scales); no export maps that, and each says where."""
    from normzoo.export.hf.plain import plain_model

    model = assemble(ModelConfig.parse(SIZES), vocab_size=50)
    layer = model.decoder.layers[1]
    if where == "scales":
        layer.ffn.scales = _Halved()
    else:
        setattr(layer.self_attn, where, _Halved() if where == "qk" else 3.0)
    assert says in why_not_llama(model)
    assert llama_target(model, "pre") is None
    with pytest.raises(NotMappable, match=says):
        plain_model(model, "pre")
