"""``normzoo export --format hf``: directories that ``transformers`` loads with its Auto classes,
with the same logits (max |difference| <= 1e-4) and the same greedy output as normzoo; schemes
that fold (DeepNorm, LayerScale, LayerNorm Scaling) export as plain Post-/Pre-LN models; the others
are refused with the reason; every export carries a model card."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from tiny import tiny, toy_text
from typer.testing import CliRunner

import normzoo
from normzoo import __version__
from normzoo.cli import app
from normzoo.data import builtin
from normzoo.data.tokenizer import BOS, EOS, PAD
from normzoo.export.hf.plain import NotMappable, plain_model
from normzoo.inference.decoding import max_target_lengths
from normzoo.models import assemble
from normzoo.models.config import ModelConfig
from normzoo.recipe import from_dict
from normzoo.run import training as train

transformers = pytest.importorskip("transformers")
runner = CliRunner()
SENTENCES = [source for source, _ in builtin.generate("test", size=6)]
PROMPTS = [" ".join(sentence.split()[:2]) for sentence in SENTENCES]  # to be continued
SIZES = {"d_model": 32, "heads": 4, "ffn_dim": 128, "max_positions": 64}
# The built-ins with no transformers counterpart, and what each one's refusal says: the reason
# comes from the scheme's own residual connection (Residual.plain_form), or from the layer
# check where its connections are plain (Sub-LN's inner norms, Mix-LN's two placements).
UNMAPPABLE = {
    "admin": "scales the stream per channel",
    "resi_dual": "second, un-normalised stream",
    "rezero": "ReZero has no norms",
    "sandwich": "the branch's output is normalised as well",
    "peri": "the branch's output is normalised as well",
    "subln": "norms inside its branches (Sub-LN)",
    "mixln": "mixes Post-LN and Pre-LN",
    "hyper": "no transformers architecture computes HyperResidual",
    "mhc": "no transformers architecture computes MHCResidual",
    "ngpt": "no transformers architecture computes NGPTResidual",
}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the toy corpus's source side as text files, for the language models."""
    return toy_text(tmp_path_factory.mktemp("hf"), (300, 16, 16))


def _train(root: Path, name: str, task: str, model: dict) -> Path:
    """``last.ckpt`` of 30 steps of a small run: trained norms and biases, not the init's."""
    data = {"train_limit": 300, "valid_limit": 16}
    if task != "translation":
        data |= {"source": "files", "dir": str(root)}
    recipe = from_dict(tiny(task=task, model={**SIZES, **model}, data=data,
                            run={"dir": str(root / name)},
                            optim={"lr": 3e-3, "warmup_steps": 5},
                            trainer={"max_steps": 30, "val_every_steps": 30}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NORMZOO_CACHE", str(root / "cache"))
        train.run(recipe, f"{name}.yaml")
    return root / name / "checkpoints" / "last.ckpt"


def _export(checkpoint: Path, out: Path) -> str:
    result = runner.invoke(app, ["export", str(checkpoint), "--format", "hf", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return result.output


def _greedy_translations(hf_model, tokenizer, loaded) -> list[str]:
    """transformers' greedy search, one sentence at a time, with normzoo's length limit."""
    config = loaded.recipe.eval
    out = []
    for sentence in SENTENCES:
        inputs = tokenizer([sentence], return_tensors="pt")
        limit = max_target_lengths(inputs["input_ids"], config.max_len_a, config.max_len_b,
                                   loaded.model.config.max_positions - 1)
        ids = hf_model.generate(**inputs, num_beams=1, do_sample=False,
                                max_new_tokens=int(limit[0]))
        out.append(tokenizer.decode(ids[0], skip_special_tokens=True))
    return out


TRANSLATION = [
    ("post", {"residual": "post"}, "MarianMTModel", "post"),
    ("pre", {"residual": "pre", "activation": "gelu"}, "BlenderbotForConditionalGeneration",
     "pre"),
    ("deepnorm", {"residual": "deepnorm", "encoder_layers": 2, "decoder_layers": 3},
     "MarianMTModel", "post"),
    ("layerscale", {"residual": "layerscale", "positions": "learned"},
     "BlenderbotForConditionalGeneration", "pre"),
    ("lns", {"residual": "lns", "activation": "gelu", "encoder_layers": 2, "decoder_layers": 3},
     "BlenderbotForConditionalGeneration", "pre"),
]


@pytest.mark.parametrize(("name", "model", "architecture", "placement"), TRANSLATION,
                         ids=[case[0] for case in TRANSLATION])
def test_translation_export_equals_normzoo(workspace: Path, tmp_path: Path, name: str,
                                           model: dict, architecture: str, placement: str):
    checkpoint = _train(workspace, f"mt-{name}", "translation", model)
    output = _export(checkpoint, tmp_path / "hf")
    assert f"as {architecture} (plain {placement.capitalize()}-LN" in output
    hf_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "hf").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert type(hf_model).__name__ == architecture
    loaded = normzoo.load(checkpoint)

    # The tokenizer adds what normzoo's data adds: source + </s>.
    batch = tokenizer(SENTENCES, return_tensors="pt", padding=True)
    for row, sentence in zip(batch["input_ids"].tolist(), SENTENCES, strict=True):
        assert [t for t in row if t != PAD] == [*loaded.tokenizer.encode(sentence), EOS]

    # Logits, teacher-forced on the references' prefixes.
    targets = [loaded.tokenizer.encode(target) for _, target in builtin.generate("test", size=6)]
    width = max(map(len, targets)) + 1
    tgt = torch.tensor([[BOS, *t] + [PAD] * (width - 1 - len(t)) for t in targets])
    with torch.no_grad():
        ours = loaded.model(batch["input_ids"], tgt)
        theirs = hf_model(**batch, decoder_input_ids=tgt).logits
    real = tgt.ne(PAD)
    assert (ours - theirs).abs()[real].max().item() <= 1e-4

    # Greedy translations, word for word.
    expected = loaded.translate(SENTENCES, beam=1)
    assert _greedy_translations(hf_model, tokenizer, loaded) == expected
    assert any(expected)  # not a vacuous comparison of empty strings


LANGUAGE_MODELS = [
    ("gpt2", "causal_lm", {"family": "decoder", "encoder_layers": 0, "decoder_layers": 2,
                           "activation": "gelu", "residual": "pre"}, "GPT2LMHeadModel"),
    ("gpt2-layerscale", "causal_lm", {"family": "decoder", "encoder_layers": 0,
                                      "residual": "layerscale", "activation": "silu",
                                      "bias": False}, "GPT2LMHeadModel"),
    ("gpt1-deepnorm", "causal_lm", {"family": "decoder", "encoder_layers": 0,
                                    "decoder_layers": 3, "residual": "deepnorm"},
     "OpenAIGPTLMHeadModel"),
    ("bert", "mlm", {"family": "encoder", "decoder_layers": 0, "activation": "gelu",
                     "positions": "learned",
                     "residual": {"name": "post", "embedding_norm": True}}, "BertForMaskedLM"),
    ("megatron-bert", "mlm", {"family": "encoder", "decoder_layers": 0, "activation": "gelu",
                              "residual": "pre"}, "MegatronBertForMaskedLM"),
]


@pytest.mark.parametrize(("name", "task", "model", "architecture"), LANGUAGE_MODELS,
                         ids=[case[0] for case in LANGUAGE_MODELS])
def test_language_model_export_equals_normzoo(workspace: Path, tmp_path: Path, name: str,
                                              task: str, model: dict, architecture: str):
    checkpoint = _train(workspace, f"lm-{name}", task, model)
    _export(checkpoint, tmp_path / "hf")
    auto = (transformers.AutoModelForCausalLM if task == "causal_lm"
            else transformers.AutoModelForMaskedLM)
    hf_model = auto.from_pretrained(tmp_path / "hf").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert type(hf_model).__name__ == architecture
    loaded = normzoo.load(checkpoint)
    assert tokenizer.padding_side == ("left" if task == "causal_lm" else "right")

    # Padded on the right here, so that positions count from each row's first token in both.
    batch = tokenizer(SENTENCES, return_tensors="pt", padding=True, padding_side="right")
    ends = [EOS] if task == "mlm" else []
    for row, sentence in zip(batch["input_ids"].tolist(), SENTENCES, strict=True):
        assert [t for t in row if t != PAD] == [BOS, *loaded.tokenizer.encode(sentence), *ends]
    with torch.no_grad():
        ours = loaded.model(batch["input_ids"])
        theirs = hf_model(**batch).logits
    real = batch["attention_mask"].bool()
    assert (ours - theirs).abs()[real].max().item() <= 1e-4

    if task == "causal_lm":  # greedy continuations, token for token
        expected = loaded.generate(PROMPTS, temperature=0, max_new_tokens=12)
        for prompt, continuation in zip(PROMPTS, expected, strict=True):
            inputs = tokenizer([prompt], return_tensors="pt")
            ids = hf_model.generate(**inputs, do_sample=False, max_new_tokens=12)
            new = ids[0, inputs["input_ids"].shape[1]:]
            assert tokenizer.decode(new, skip_special_tokens=True) == continuation
        assert any(expected)


@pytest.mark.parametrize("scheme", sorted(UNMAPPABLE))
def test_unmappable_schemes_are_refused_with_the_reason(scheme: str):
    # Mix-LN with a Post-LN layer in each stack (at 2 layers its default fraction has none, and
    # an all-Pre-LN Mix-LN model is a plain Pre-LN one, which exports)
    residual = {"name": "mixln", "post_fraction": 0.5} if scheme == "mixln" else scheme
    config = ModelConfig.parse({**SIZES, "encoder_layers": 2, "decoder_layers": 2,
                                "residual": residual})
    with pytest.raises(NotMappable) as refused:
        plain_model(assemble(config, vocab_size=50), scheme)
    assert UNMAPPABLE[scheme] in str(refused.value)


@pytest.mark.parametrize(("model", "says"), [
    ({"norm": "rmsnorm"}, "the norm of encoder layer 0 is RMSNorm"),
    ({"activation": "swiglu"}, "gated feed-forward"),
    ({"share_embeddings": False}, "share one embedding"),
    ({"family": "decoder", "encoder_layers": 0, "residual": "post", "activation": "gelu"},
     "tanh approximation"),
    ({"family": "decoder", "encoder_layers": 0, "residual": "post", "ffn_dim": 96},
     "4·d_model = 128"),
    ({"family": "encoder", "decoder_layers": 0, "residual": "post", "activation": "gelu"},
     "BERT normalises the embeddings"),
    ({"family": "encoder", "decoder_layers": 0, "residual": "pre"}, "activation must be gelu"),
])
def test_models_without_a_counterpart_are_refused(model: dict, says: str):
    from normzoo.export.hf.architectures import target_for

    config = ModelConfig.parse({**SIZES, "encoder_layers": 1, "decoder_layers": 1, **model})
    with pytest.raises(NotMappable, match=says):
        plain = plain_model(assemble(config, vocab_size=50), config.residual.name)
        target_for(plain).build(plain, config.with_vocab(50))


def test_an_unmappable_checkpoint_exits_2_and_writes_nothing(workspace: Path, tmp_path: Path):
    checkpoint = _train(workspace, "mt-admin", "translation", {"residual": "admin"})
    result = runner.invoke(app, ["export", str(checkpoint), "--format", "hf",
                                 "--out", str(tmp_path / "hf")])
    assert result.exit_code == 2, result.output
    assert "per channel" in result.output and "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []


def test_model_cards(tiny_checkpoint: Path, workspace: Path, tmp_path: Path):
    runner.invoke(app, ["export", str(tiny_checkpoint), "--out", str(tmp_path / "native")])
    card = (tmp_path / "native" / "README.md").read_text(encoding="utf-8")
    summary = json.loads((tiny_checkpoint.parent.parent / "summary.json").read_text())
    recipe = normzoo.load(tiny_checkpoint).recipe
    for expected in ["library_name: normzoo", "pipeline_tag: translation",
                     "| task | translation |", "| family | encoder-decoder |",
                     "| layers | 1 + 1 |", "| d_model / heads / ffn_dim | 32 / 2 / 64 (relu) |",
                     "x <- x + f(LN(x))",  # the scheme's formula (Pre-LN)
                     "`layernorm`: LayerNorm (Ba et al. 2016)",
                     "normzoo's built-in synthetic corpus, en→xx",
                     f"Steps: {summary['steps']} of {recipe.trainer.max_steps}",
                     f"sacreBLEU signature: `{summary['test']['signature']}`",
                     f"| bleu | {summary['test']['bleu']} |", f"pre (normzoo {__version__})",
                     'normzoo.load("THIS_DIRECTORY")', "normzoo translate THIS_DIRECTORY"]:
        assert expected in card, expected

    checkpoint = _train(workspace, "mt-deepnorm-card", "translation",
                        {"residual": "deepnorm", "encoder_layers": 2, "decoder_layers": 2})
    _export(checkpoint, tmp_path / "hf")
    card = (tmp_path / "hf" / "README.md").read_text(encoding="utf-8")
    provenance = json.loads((tmp_path / "hf" / "normzoo.json").read_text())
    assert provenance["architecture"] == "MarianMTModel" and provenance["scheme"] == "deepnorm"
    assert provenance["max_abs_logit_diff"] <= 1e-4
    for expected in ["library_name: transformers", "Exported as `MarianMTModel`, a plain Post-LN",
                     "LN(αx + f(x)) = LN(x + f(x)/α)", "encoder α = 1.", "decoder α = 1.",
                     f"**{provenance['max_abs_logit_diff']:.2g}**",
                     "AutoModelForSeq2SeqLM.from_pretrained"]:
        assert expected in card, expected


def test_without_transformers_the_export_says_which_extra(tiny_checkpoint: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # its import fails
    result = runner.invoke(app, ["export", str(tiny_checkpoint), "--format", "hf",
                                 "--out", str(tmp_path / "hf")])
    assert result.exit_code == 2, result.output
    assert "pip install 'normzoo[hf]'" in result.output
    assert list(tmp_path.iterdir()) == []
