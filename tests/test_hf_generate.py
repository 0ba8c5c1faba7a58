"""Batched generation from ``--format hf`` exports: ``transformers``' ``generate`` on a padded
batch of 100 held-out inputs gives normzoo's own greedy outputs, sentence for sentence; the
tokenizer pads a decoder's prompts on the left, puts ``<mask>`` where a masked word was, and
``generate`` warns about nothing."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from tiny import tiny, toy_text

import normzoo
from normzoo.data import builtin
from normzoo.data.tokenizer import MASK
from normzoo.export.writer import export
from normzoo.inference.decoding import greedy, max_target_lengths
from normzoo.recipe import from_dict
from normzoo.run import training as train

transformers = pytest.importorskip("transformers")
SIZES = {"d_model": 32, "heads": 4, "ffn_dim": 128, "max_positions": 64}
# Held out: the test split, which no run here trains on.
HELD_OUT = [source for source, _ in builtin.generate("test", size=100)]
PROMPTS = [" ".join(s.split()[:1 + i % 4]) for i, s in enumerate(HELD_OUT)]  # 1 to 4 words


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return toy_text(tmp_path_factory.mktemp("hfgen"), (1000, 16, 16))


def _train_and_export(root: Path, name: str, task: str, model: dict, steps: int,
                      lr: float) -> tuple[Path, Path]:
    """A run trained long enough that its outputs differ from input to input (a 30-step model
    repeats one token), and its ``--format hf`` export."""
    data = {"train_limit": 1000, "valid_limit": 16, "max_tokens": 1024}
    if task != "translation":
        data |= {"source": "files", "dir": str(root)}
    recipe = from_dict(tiny(task=task, model={**SIZES, **model}, data=data,
                            run={"dir": str(root / name)},
                            optim={"lr": lr, "warmup_steps": 10},
                            trainer={"max_steps": steps, "val_every_steps": steps}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NORMZOO_CACHE", str(root / "cache"))
        train.run(recipe, f"{name}.yaml")
    checkpoint = root / name / "checkpoints" / "last.ckpt"
    export(checkpoint, root / f"{name}-hf", fmt="hf")
    return checkpoint, root / f"{name}-hf"


@contextmanager
def no_warnings() -> Iterator[None]:
    """Fail on any Python warning or ``transformers`` log message at warning level."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            yield
    finally:
        logger.removeHandler(handler)
    assert [r.getMessage() for r in records] == []


SEQ2SEQ = [("pre", {"residual": "pre"}, 200, 5e-3, "BlenderbotForConditionalGeneration"),
           ("post", {"residual": "post"}, 200, 5e-3, "MarianMTModel")]


@pytest.mark.parametrize(("name", "model", "steps", "lr", "architecture"), SEQ2SEQ,
                         ids=[case[0] for case in SEQ2SEQ])
def test_batched_translation_equals_normzoo(workspace: Path, name: str, model: dict,
                                            steps: int, lr: float, architecture: str):
    from normzoo.export.hf import LengthRule

    checkpoint, out = _train_and_export(workspace, f"mt-{name}", "translation", model, steps,
                                        lr)
    loaded = normzoo.load(checkpoint)
    hf_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert type(hf_model).__name__ == architecture
    config = hf_model.generation_config
    evaluation = loaded.recipe.eval
    assert (config.max_len_a, config.max_len_b) == (evaluation.max_len_a, evaluation.max_len_b)
    assert config.max_new_tokens == SIZES["max_positions"] - 1 and config.max_length is None

    expected = loaded.translate(HELD_OUT, beam=1)
    assert len(set(expected)) >= 20  # outputs that depend on the input
    inputs = tokenizer(HELD_OUT, return_tensors="pt", padding=True)
    assert tokenizer.padding_side == "right"
    with no_warnings():
        ruled = hf_model.generate(**inputs, num_beams=1, logits_processor=[
            LengthRule(config, inputs["input_ids"])])
        plain = hf_model.generate(**inputs, num_beams=1)
    # With normzoo's per-sentence length rule: normzoo's translations, all 100.
    assert tokenizer.batch_decode(ruled, skip_special_tokens=True) == expected
    # The generation config alone never cuts a translation short: where normzoo stopped at
    # </s> it is the same translation, and where normzoo's length rule stopped it, one that
    # goes on from there.
    limits = max_target_lengths(inputs["input_ids"], evaluation.max_len_a, evaluation.max_len_b,
                                SIZES["max_positions"] - 1).tolist()
    ours_ids = greedy(loaded.model, inputs["input_ids"], max_len_a=evaluation.max_len_a,
                      max_len_b=evaluation.max_len_b)
    assert [loaded.tokenizer.decode(ids) for ids in ours_ids] == expected
    theirs_ids = [[t for t in row if t not in tokenizer.all_special_ids] for row in plain.tolist()]
    ended = 0
    for ours, theirs, limit in zip(ours_ids, theirs_ids, limits, strict=True):
        assert theirs[:len(ours)] == ours
        if len(ours) < limit:  # normzoo's ended at </s>
            assert theirs == ours
            ended += 1
    assert 10 <= ended <= 90  # both kinds are compared


CAUSAL = [("gpt2", {"residual": "pre", "activation": "gelu"}, "GPT2LMHeadModel"),
          ("gpt1", {"residual": "post"}, "OpenAIGPTLMHeadModel")]


@pytest.mark.parametrize(("name", "model", "architecture"), CAUSAL,
                         ids=[case[0] for case in CAUSAL])
def test_batched_continuations_equal_normzoo(workspace: Path, name: str, model: dict,
                                             architecture: str):
    checkpoint, out = _train_and_export(
        workspace, f"lm-{name}", "causal_lm",
        {"family": "decoder", "encoder_layers": 0, "decoder_layers": 2, **model}, 150, 5e-3)
    loaded = normzoo.load(checkpoint)
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert type(hf_model).__name__ == architecture
    assert tokenizer.padding_side == "left"
    config = hf_model.generation_config
    assert config.max_new_tokens == 50 and config.max_length is None  # normzoo generate's

    expected = loaded.generate(PROMPTS, temperature=0, max_new_tokens=12)
    assert len(set(expected)) >= 10
    inputs = tokenizer(PROMPTS, return_tensors="pt", padding=True)
    assert inputs["input_ids"][:, -1].ne(tokenizer.pad_token_id).all()  # prompts end together
    few = tokenizer(PROMPTS[:10], return_tensors="pt", padding=True)
    with no_warnings():
        ids = hf_model.generate(**inputs, do_sample=False, max_new_tokens=12)
        default = hf_model.generate(**few)
    new = ids[:, inputs["input_ids"].shape[1]:]
    assert tokenizer.batch_decode(new, skip_special_tokens=True) == expected
    # The generation config's own settings: greedy, as many new tokens as normzoo's default.
    new = default[:, few["input_ids"].shape[1]:]
    assert tokenizer.batch_decode(new, skip_special_tokens=True) == (
        loaded.generate(PROMPTS[:10], temperature=0))


@pytest.mark.parametrize("family", ["encoder", "decoder", "encoder_decoder"])
def test_the_tokenizer_masks_a_whole_word_and_pads_decoders_on_the_left(
        tiny_checkpoint: Path, tmp_path: Path, family: str):
    from normzoo.export.hf import _tokenizer

    loaded = normzoo.load(tiny_checkpoint)
    _tokenizer(loaded, family, 64).save_pretrained(tmp_path)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert tokenizer.padding_side == ("left" if family == "decoder" else "right")
    left, right = "A man is", "a bike."
    ids = tokenizer([f"{left} <mask> {right}"], add_special_tokens=False)["input_ids"][0]
    # As in training, where <mask> replaced a whole "▁word", its space included.
    assert ids == [*loaded.tokenizer.encode(left), MASK, *loaded.tokenizer.encode(right)]
